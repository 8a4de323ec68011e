/*
 * fleet.h — fleet mode's store backends (engine/backend.h), as the daemon
 * creates and wires them: one limit across many daemons through Redis.
 *
 *   exact        every decision one atomic script in Redis, on Redis's
 *                clock (exact.c; decide.lua through script.h), with the
 *                limits' on_store_error when Redis fails;
 *   approximate  decisions on this daemon's store, whose charges a sync
 *                thread pushes to Redis every interval, bringing back the
 *                fleet's level (approx.c, sync.c).
 *
 * Both reset through Redis (a DEL per state key; approximate mode also
 * PUBLISHes the reset to the other daemons: unlink.c). Their Redis I/O on
 * a worker thread goes through that thread's transport, which the daemon
 * sets (fleet_thread_set_transport): client.c's rc_send on the worker's
 * event loop.
 */
#ifndef SLUICE_FLEET_H
#define SLUICE_FLEET_H

#include <hiredis/hiredis.h>
#include <stddef.h>

#include "../engine/backend.h"

/*
 * A worker's Redis transport. send queues cmd (malloc'd; owned by the
 * callee from then on) for the Redis node serving `slot` (-1: any) and
 * returns 0, after which cb runs exactly once, later, on this thread (r =
 * the reply, or NULL with err), at the latest the Redis timeout after
 * since_ns (the monotonic instant the request arrived; 0: now); or
 * returns -1 at once when the store is known to be down (cb never runs).
 */
typedef void (*fleet_reply_fn)(void *ud, const redisReply *r, const char *err);
typedef int (*fleet_send_fn)(void *io, int slot, char *cmd, size_t len,
                             int64_t since_ns, fleet_reply_fn cb, void *ud);
/* Asks the worker to call engine_thread_flush before its loop waits again:
   a request was queued for a batched call. The flush must run inside the
   loop's pass, where the worker's sockets may be written and closed. */
typedef void (*fleet_wake_fn)(void *io);

typedef struct fleet_opts {
  int cluster;    /* Redis Cluster: a request's keys are grouped by slot */
  int breaker_ms; /* on_store_error deny's Retry-After while Redis is out */
  /* Exact mode: requests per script call (--batch-max): a thread's
     requests of one event-loop pass (one slot) share calls of up to this
     many; 0 or 1 = a call each. */
  int batch_max;
  int db; /* the Redis database (approximate mode's resets' channel) */
} fleet_opts;

/* The backends (for engine_opts.backend), or NULL when out of memory. */
eng_backend *fleet_exact_new(const fleet_opts *o);
eng_backend *fleet_approx_new(const fleet_opts *o);

/* The Redis transport of worker thread t (an engine_thread of an engine
   on either backend): its decisions' (exact mode) and resets' calls;
   wake (NULL: none) asks for the flush of a batch (fleet_wake_fn). */
void fleet_thread_set_transport(engine_thread *t, fleet_send_fn send,
                                fleet_wake_fn wake, void *io);

#endif /* SLUICE_FLEET_H */
