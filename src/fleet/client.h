/*
 * client.h — exact mode's connections to Redis (one node, or a Redis
 * Cluster), on a worker's event loop (loop.h: the daemon's is h2o's).
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
 * failed is "down" for the breaker interval: commands for it fail at once,
 * without waiting. After the interval the next command reconnects (the
 * probe); if that works the node is up again.
 *
 * Cluster: the slot map comes from CLUSTER SLOTS at start (shared by the
 * workers' clients: rc_client_share); what a node answers instead of
 * running a command is followed as router.h decides: MOVED (the slot's
 * node learned, the command resent there, the whole map read again from
 * that node), ASK (resent there after ASKING), NOSCRIPT (the script
 * loaded, the command resent), TRYAGAIN (a batch sent again as one call
 * per request, each routed on its own: client.c's split_batch; one
 * request's call tried again after a short pause, within its deadline:
 * retry_later). A master that dies answers nothing, not even MOVED: when a
 * node that serves slots fails, and while its commands are refused or its
 * probes fail, another node is asked for the map (router.c's rt_relearn),
 * so that the replica that takes its slots over is learned within about a
 * second of its promotion.
 */
#ifndef SLUICE_FLEET_CLIENT_H
#define SLUICE_FLEET_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#include <hiredis/hiredis.h>

#include "sluice.h"

#include "conn.h"
#include "loop.h"
#include "router.h"
#include "slot.h"

typedef struct rc_client rc_client;

/* A request waiting for Redis is answered (failed) this long before its
   deadline at most (a tenth of the timeout when that is less): the time
   its answer takes to leave (client.c's give_up_at). */
#define RC_ANSWER_SLACK_NS INT64_C(1000000)

/* Called once per command: r is the reply (freed after the call), or NULL
   with err saying why the command failed (timeout, connection, down). */
typedef void (*rc_reply_fn)(void *ud, const redisReply *r, const char *err);

/* The client's own memory (its state, the nodes' write buffers), Lua-style
   (sluice.h's sl_alloc_fn); fn NULL: malloc, realloc and free. Commands'
   bytes are the caller's malloc's (rc_send), freed with free(). */
typedef struct rc_alloc {
  sl_alloc_fn fn;
  void *ud;
} rc_alloc;

/* A client on loop (copied) for the nodes and map t; alloc may be NULL.
   NULL when out of memory, when t has no node, or when the loop has no
   timer to give. */
rc_client *rc_client_new(const rc_loop *loop, const rc_config *c,
                         const rc_topology *t, const rc_alloc *alloc);
/* Fails every command still pending, then frees. NULL is a no-op. */
void rc_client_free(rc_client *c);

/*
 * Queues cmd (RESP bytes, malloc'd; the client owns it from now on) for the
 * node that serves `slot` (-1: the first node). Returns 0: cb will be
 * called exactly once, from the event loop, never from inside this call;
 * or -1: the node is down (breaker open): cb is never called.
 */
int rc_send(rc_client *c, int slot, char *cmd, size_t len, rc_reply_fn cb,
            void *ud);

/* rc_send for a request that arrived at since_ns (monotonic; 0 or later
   than now: now): its deadline is since_ns + the timeout, so that the
   time it waited before the call (the rest of its loop pass, a batch)
   counts. */
int rc_send_since(rc_client *c, int slot, char *cmd, size_t len,
                  int64_t since_ns, rc_reply_fn cb, void *ud);

/* Writes what is queued: called at the end of a loop pass, inside it,
   when the loop's wake asks (loop.h), or after every pass where the loop
   has no wake. */
void rc_flush(rc_client *c);

/* Makes c publish the maps it reads to m, and take those the other
   clients publish (router.h's shared map; m outlives c). */
void rc_client_share(rc_client *c, rc_shared_map *m);

#endif /* SLUICE_FLEET_CLIENT_H */
