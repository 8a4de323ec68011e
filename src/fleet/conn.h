/*
 * conn.h — what fleet mode is told (--store and the --redis-* flags), and
 * its blocking connections to Redis: discovery at start and the sync
 * thread's (hiredis's blocking API). The workers' connections are
 * client.h's, on their event loops.
 */
#ifndef SLUICE_FLEET_CONN_H
#define SLUICE_FLEET_CONN_H

#include <stddef.h>

#include <hiredis/hiredis.h>

#include "slot.h"

#define RC_MAX_SEEDS 16

/* What --store and the --redis-* flags say. */
typedef struct rc_config {
  int cluster;
  rc_addr seeds[RC_MAX_SEEDS];
  int nseeds;
  char password[256]; /* "" = none */
  char user[128];     /* "" = default user */
  int db;             /* SELECT db (not in a cluster) */
  int timeout_ms;     /* every call; connects too */
  int batch_us;       /* 0 = at the end of each loop iteration */
  int breaker_ms;     /* a failed node is left alone this long */
} rc_config;

/*
 * Parses "redis://[[USER]:PASSWORD@]HOST:PORT[/DB]" or
 * "redis-cluster://[[USER]:PASSWORD@]HOST:PORT[,HOST:PORT...]" into *c
 * (timeouts untouched). Returns 0, or -1 with a message in err.
 */
int rc_config_parse(const char *url, rc_config *c, char *err, size_t len);

/*
 * Connects to the seeds from the calling thread (blocking, with the
 * timeout), authenticates, loads the script and, for a cluster, reads the
 * slot map into *t. Returns 0, or -1 with the reason in err (the daemon can
 * still start: nodes are retried as requests come).
 */
int rc_discover(const rc_config *c, rc_topology *t, char *err, size_t len);

/*
 * A blocking connection (discovery, the sync thread): connects with the
 * timeout, authenticates, selects the database (not in a cluster) and loads
 * the script. NULL with "HOST:PORT: why" in err.
 */
redisContext *rc_connect_sync(const rc_config *c, const rc_addr *a,
                              char *err, size_t len);

#endif /* SLUICE_FLEET_CONN_H */
