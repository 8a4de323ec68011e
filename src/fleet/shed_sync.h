/*
 * shed_sync.h — fleet usage shared through Redis (docs/shedding.md): the
 * main thread's rounds that push each daemon's charges to one counter
 * per domain and window and read the fleet's totals back
 * (engine_shed_sync), on a blocking connection of its own.
 */
#ifndef SLUICE_FLEET_SHED_SYNC_H
#define SLUICE_FLEET_SHED_SYNC_H

#include <stdint.h>

#include "../engine/engine.h"
#include "conn.h"

typedef struct fleet_shed_sync fleet_shed_sync;

/* For --store's Redis (c is copied). NULL out of memory. */
fleet_shed_sync *fleet_shed_sync_new(const rc_config *c);
void fleet_shed_sync_free(fleet_shed_sync *s);
/*
 * One round at now for every domain of e with a capacity: connects when
 * it must (a failed connection is retried a second later at the
 * soonest), then one pipelined exchange per domain. The domains synced,
 * or -1 (Redis failed: each daemon's usage stays its own until a round
 * succeeds; the remote part is kept as it was).
 */
int fleet_shed_sync_round(fleet_shed_sync *s, engine *e, int64_t now);

#endif /* SLUICE_FLEET_SHED_SYNC_H */
