/*
 * internal.h — what the fleet's backends share: each thread's transport
 * (the first member of either backend's per-thread state), and the reset
 * job both run (unlink.c).
 */
#ifndef SLUICE_FLEET_INTERNAL_H
#define SLUICE_FLEET_INTERNAL_H

#include "fleet.h"

/* A worker's transport: the first member of each backend's thread state,
   so that fleet_thread_set_transport reaches it whichever the backend. */
typedef struct fleet_io {
  fleet_send_fn send; /* NULL: none set (no Redis client) */
  fleet_wake_fn wake; /* NULL: the owner flushes after every pass */
  void *io;
} fleet_io;

/*
 * A reset in Redis: f's states are dropped here at once (by the caller)
 * and their keys UNLINKed, one command each (keys of one request may live
 * in different cluster slots; an UNLINK's reply says whether its key was
 * there). With `publish` (approximate mode), one PUBLISH on `channel`
 * follows with the keys, "sluice-reset INSTANCE\n" then "LEN:KEY" each,
 * so that the other daemons drop theirs. had[i] says whether this daemon
 * held state for item i (counted as dropped whatever Redis says).
 * Returns engine_reset's codes (out filled; out->msg on a failure).
 */
typedef struct unlink_opts {
  int cluster;
  const char *channel;  /* publish: the resets' channel */
  const char *instance; /* publish: this daemon, 16 hex digits */
} unlink_opts;

int fleet_unlink(const fleet_io *io, const unlink_opts *o, const eng_forgets *f,
                 const int *had, eng_reset *out, eng_reset_fn done, void *ud);

/*
 * A fleet backend's reset (eng_backend_ops.reset): ENG_EREMOTE, touching
 * nothing, when the worker has no Redis client or the caller cannot wait;
 * else each item's state on this daemon is dropped at once (its limiters';
 * and what `also` drops, when not NULL: approximate mode's unpushed
 * charges, 1 when there were any), then fleet_unlink.
 */
typedef int (*fleet_forget_fn)(void *ctx, const eng_forget *x);
int fleet_reset(const fleet_io *io, const unlink_opts *o, const eng_forgets *f,
                fleet_forget_fn also, void *ctx, eng_reset *out,
                eng_reset_fn done, void *ud);

#endif /* SLUICE_FLEET_INTERNAL_H */
