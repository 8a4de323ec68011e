/*
 * limiter.h — what the daemon (src/engine) uses of limiter.c beyond the
 * public API: hidden, like every library symbol outside include/sluice.h,
 * so neither libsluice.a nor libsluice.so exports it (see the Makefile).
 */
#ifndef SLUICE_LIMITER_H
#define SLUICE_LIMITER_H

#include <stddef.h>
#include <stdint.h>

#include "sluice.h"

/* Starts loading key's state of lim into the cache, without waiting or
   locking: a hint for a lookup soon after (approximate mode's sync applies
   a round's levels key after key, each a cache miss otherwise). */
void limiter_prefetch(const sl_limiter *lim, const void *key, size_t key_len);

/* sl_limiter_force of what brings key's level down to `target`, if it is
   above (approximate mode's sync: this daemon's level follows the
   fleet's): *level gets the signed remaining after it. One lookup. */
int limiter_force_to(sl_limiter *lim, const void *key, size_t key_len,
                     int64_t target, int64_t now_ns, int64_t *level);

/* lim's compiled policy and its id in its store (the daemon's state file
   and its count of keys per limiter name limiters by these). */
struct algo_policy;
void limiter_ident(const sl_limiter *lim, const struct algo_policy **p,
                   uint16_t *id);

/* A new lease id from lim's store (unique there, unguessable): what a
   backend that keeps leases elsewhere (exact mode's Redis) records. */
uint64_t limiter_lease_id(const sl_limiter *lim);

/* sl_limiter_free for n limiters (NULLs skipped), with one walk over a
   store for all of its limiters' keys rather than one each. */
void limiter_free_many(sl_limiter **lims, size_t n);

/* A calendar window for one check of limiter_take_windows: [start_ns,
   end_ns); end_ns 0: none (the limiter's own epoch-aligned windows). */
typedef struct limiter_window {
  int64_t start_ns, end_ns;
} limiter_window;

/*
 * sl_take_all, where check i with win[i].end_ns > 0 (a fixed_window
 * limiter; win NULL: none) counts in the window win[i] instead of its
 * policy's epoch-aligned one: a calendar month, day, ... whose length
 * varies. The state keeps the window's start, so the next window starts
 * a fresh count; the limiter's period must be at least the longest
 * window (its keys live that long). SL_EINVAL for a window on another
 * algorithm, or one that does not hold now_ns.
 */
int limiter_take_windows(const sl_check *checks, const limiter_window *win,
                         size_t n, int64_t now_ns, sl_decision *out,
                         int *allowed);
/* limiter_take_windows with a bound on each check's wait (max_delay_ns
   NULL: none; else per check, 0 for none): a check that would allow only after a
   leaky_bucket delay above its bound is a denial (the queue is longer than
   the caller will wait), decided as a denial is, charging nothing, with
   retry_after the excess (when the queue will be short enough). Merged
   checks take the tightest bound. The wait mode's decision (sl_limiter_wait,
   the daemon's ?wait=1). */
int limiter_take_all_within(const sl_check *checks, const limiter_window *win,
                            const int64_t *max_delay_ns, size_t n,
                            int64_t now_ns, sl_decision *out, int *allowed);

/* CL.THROTTLE's limiter (algo/cell.h): one state per key, whatever rate
   each call names. Freed with sl_limiter_free. */
int limiter_cell_new(sl_store *store, sl_limiter **out);

/* redis-cell's decision for key at rate (any quantity >= 0: one that can
   never fit is limited, retry_after_ns -1), charged when allowed. The
   errors of sl_limiter_take, less SL_ECOST. */
struct algo_cell;
int limiter_cell_take(sl_limiter *lim, const struct algo_cell *rate,
                      const void *key, size_t key_len, int64_t qty,
                      int64_t now_ns, sl_decision *out);

/* One request of limiter_take_many: sl_limiter_take's arguments, or
   limiter_cell_take's when cell is set. */
typedef struct limiter_req {
  sl_limiter *lim;
  const struct algo_cell *cell;
  const void *key;
  size_t key_len;
  int64_t cost;
  int64_t now_ns;
} limiter_req;

#define LIMITER_MANY_MAX 16

/* n (<= LIMITER_MANY_MAX) takes of any limiters of one store, decided in
   order as n calls would decide them, every key's lines prefetched before
   the first is decided (a pipeline's commands: a cache miss each
   otherwise). rc[i]: 0 with out[i], or the call's error. */
void limiter_take_many(const limiter_req *r, size_t n, sl_decision *out,
                       int *rc);

#endif /* SLUICE_LIMITER_H */
