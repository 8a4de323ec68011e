/*
 * sync.h — approximate mode (--sync INTERVAL): decisions stay local, and
 * every interval a thread pushes each daemon's local charges to Redis and
 * brings the fleet's remaining quota back into the local limiters.
 */
#ifndef SLUICE_FLEET_SYNC_H
#define SLUICE_FLEET_SYNC_H

#include <stddef.h>

#include <hiredis/hiredis.h>

#include "approx.h"
#include "conn.h"
#include "slot.h"

typedef struct rs_sync rs_sync;

/* Starts the sync thread. NULL when it could not start. */
rs_sync *rs_sync_start(approx *a, const rc_config *c, const rc_topology *t,
                       int interval_ms);
/* One last sync, then stops the thread and frees. NULL is a no-op. */
void rs_sync_stop(rs_sync *s);

/*
 * How the sync thread talks to Redis, one blocking connection per node
 * (rs_sync_start's: hiredis's blocking API; a test plays the nodes:
 * sync_internal.h). Each returns as hiredis's function of the same job:
 *   connect    rc_connect_sync (the handshake included)
 *   append     redisAppendFormattedCommand (cmd: RESP bytes)
 *   get_reply  redisGetReply (writes what was appended, then reads)
 * The subscription's reads without waiting use the context's own buffer
 * (redisBufferRead, redisGetReplyFromReader).
 */
typedef struct rs_transport {
  void *ud;
  redisContext *(*connect)(void *ud, const rc_config *c, const rc_addr *a,
                           char *err, size_t len);
  int (*append)(void *ud, redisContext *c, const char *cmd, size_t len);
  int (*get_reply)(void *ud, redisContext *c, void **reply);
} rs_transport;

#endif /* SLUICE_FLEET_SYNC_H */
