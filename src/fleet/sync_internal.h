/*
 * sync_internal.h — what a test of sync.c drives beyond its API: a sync
 * with no thread, on a transport of the test's, one pass or one read of
 * the resets at a time, and what it looks at (the router, the
 * subscription). Not for the daemon: it uses sync.h only.
 */
#ifndef SLUICE_FLEET_SYNC_INTERNAL_H
#define SLUICE_FLEET_SYNC_INTERNAL_H

#include "router.h"
#include "sync.h"

/* The most messages one read of the resets takes: the rest wait for the
   next round, so that a flood of them never holds the rounds up. */
#define SYNC_SUB_MAX_MSGS 1024

/* A sync on io (copied), no thread, no final round: c's timeout is used
   as it is (rs_sync_start raises it). NULL when out of memory. */
rs_sync *rs_sync_new(approx *a, const rc_config *c, const rc_topology *t,
                     int interval_ms, const rs_transport *io);
/* Frees s: its connections closed, nothing pushed. */
void rs_sync_free(rs_sync *s);

/* One pass of a round: charges cost[i] (> 0) to the key of d[i] by force
   and fills level[i] (sync.c's pass). */
void rs_sync_pass(rs_sync *s, approx_delta **d, size_t n, const int64_t *cost,
                  int64_t *level);
/* Reads the resets other daemons published (subscribing first when not
   subscribed), as after each round. */
void rs_sync_read_resets(rs_sync *s);
/* Node n's connection, made now if there is none (NULL: none). */
redisContext *rs_sync_connect(rs_sync *s, int n);

rt_router *rs_sync_router(rs_sync *s);
/* Whether the resets' subscription is up, and whether a PING on it waits
   for its answer. */
int rs_sync_subscribed(const rs_sync *s);
int rs_sync_ping_waits(const rs_sync *s);

#endif /* SLUICE_FLEET_SYNC_INTERNAL_H */
