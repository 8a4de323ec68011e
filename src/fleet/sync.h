/*
 * sync.h — approximate mode (--sync INTERVAL): decisions stay local, and
 * every interval a thread pushes each daemon's local charges to Redis and
 * brings the fleet's remaining quota back into the local limiters.
 */
#ifndef SLUICE_REDIS_SYNC_H
#define SLUICE_REDIS_SYNC_H

#include "approx.h"
#include "client.h"

typedef struct rs_sync rs_sync;

/* Starts the sync thread. NULL when it could not start. */
rs_sync *rs_sync_start(approx *a, const rc_config *c, const rc_topology *t,
                       int interval_ms);
/* One last sync, then stops the thread and frees. NULL is a no-op. */
void rs_sync_stop(rs_sync *s);

#endif /* SLUICE_REDIS_SYNC_H */
