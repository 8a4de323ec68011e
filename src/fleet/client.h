/*
 * client.h — fleet mode's connections to Redis (one node, or a Redis
 * Cluster), on a worker's h2o event loop.
 *
 * Each worker thread has its own rc_client: its own connection to each node,
 * its own pipeline, no locks. Commands are queued and written together at
 * the end of the loop iteration, or once the batch window has passed since
 * the first of them (--batch-window): every decision of an iteration (many
 * connections' requests) goes out as one pipeline. Replies come back in
 * order and are matched to their callbacks.
 *
 * Failures. Every command has a deadline (--redis-timeout); a command past
 * it fails, and with it the connection (a pipeline cannot skip a late
 * reply). A command sent again (a redirect, NOSCRIPT, TRYAGAIN) keeps its
 * request's deadline and fails alone at it; its node fails only if it
 * leaves the resend unanswered for the timeout. A node whose connection
 * failed is "down" for the breaker interval:
 * commands for it fail at once, without waiting. After the interval the
 * next command reconnects (the probe); if that works the node is up again.
 *
 * Cluster: the slot map comes from CLUSTER SLOTS at start (shared by the
 * workers' clients: rc_shared_map below); MOVED updates it
 * (that slot, to the named node, which may be new), resends, and has the
 * named node send the whole map again (CLUSTER SLOTS, at most once a
 * second). A master that dies answers nothing, not even MOVED: when a node
 * that serves slots fails (lost, timed out, cannot connect), another node
 * sends the map, and again while the node's commands are refused (breaker)
 * or its probes fail, at most once a second, so that the replica that
 * takes its slots over is learned within about a second of its promotion
 * (client.c's relearn_map). ASK resends to the named node after ASKING (up to 5 redirects
 * a command). NOSCRIPT (a restarted or flushed Redis) loads the script
 * and resends (after ASKING again when the command was an ASK's).
 * TRYAGAIN (a slot in mid-migration, a call's keys on both sides): a batch
 * of requests is sent again as one call per request, each routed on its
 * own; one request's call is tried again after a short pause, within its
 * deadline (slot.h, client.c's split_batch and retry_later).
 */
#ifndef SLUICE_REDIS_CLIENT_H
#define SLUICE_REDIS_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#include <hiredis/hiredis.h>

#define H2O_USE_EPOLL 1
#include <h2o.h>

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

typedef struct rc_client rc_client;

/* Called once per command: r is the reply (freed after the call), or NULL
   with err saying why the command failed (timeout, connection, down). */
typedef void (*rc_reply_fn)(void *ud, const redisReply *r, const char *err);

rc_client *rc_client_new(h2o_loop_t *loop, const rc_config *c,
                         const rc_topology *t);
/* Fails every command still pending, then frees. */
void rc_client_free(rc_client *c);

/*
 * Queues cmd (RESP bytes, malloc'd; the client owns it from now on) for the
 * node that serves `slot` (-1: the first node). Returns 0: cb will be
 * called exactly once, from the event loop, never from inside this call;
 * or -1: the node is down (breaker open): cb is never called.
 */
int rc_send(rc_client *c, int slot, char *cmd, size_t len, rc_reply_fn cb,
            void *ud);

/* Writes what is queued (called after each loop iteration). */
void rc_flush(rc_client *c);

/*
 * The workers' clients share the newest slot map any of them has read
 * (CLUSTER SLOTS, after a MOVED or a dead master): the one that reads it
 * publishes it here, and the others take it with their next rc_send, so
 * that a worker with no call for the slots that moved (idle then) does
 * not meet the old map with its first one. Nodes are matched by address
 * (each client numbers its own). Thread-safe; NULL when out of memory.
 */
typedef struct rc_shared_map rc_shared_map;
rc_shared_map *rc_shared_map_new(void);
void rc_shared_map_free(rc_shared_map *m);
/* Makes c publish to and take from m (which outlives c). */
void rc_client_share(rc_client *c, rc_shared_map *m);

#endif /* SLUICE_REDIS_CLIENT_H */
