/*
 * leaky_bucket.c — a queue that drains at LIMIT/PERIOD: a shaper that delays.
 *
 * State: free_at, the instant the queue will be empty, exact in ticks.
 * A request of cost c at t: free = max(free_at, t); the queue holds
 * level = (free - t)/T units. Allowed iff level + c <= B; the request then
 * leaves the queue after delay = free - t, and free_at = free + c*T.
 * Which requests pass is exactly token_bucket's answer; what differs is the
 * delay: allowed requests leave T apart, a smooth output instead of bursts.
 * A denied request is not queued (retry_after says when it would fit).
 */
#include "algo.h"

static int leaky_decide(const algo_policy *p, const algo_state *st, int64_t t,
                        int64_t cost, sl_decision *d, algo_state *next) {
  i128 now = (i128)t * p->Lg;
  i128 free = st ? tat_load(p, st) : now;
  if (free < now) free = now;
  i128 level = free - now;                  /* queued work, ticks */
  i128 after = level + (i128)cost * p->Wg;  /* with this request queued */

  decision_init(d, p);
  if (after <= p->cap || cost == 0) { /* a peek is always allowed */
    d->allowed = 1;
    d->delay_ns = div_ceil(level, p->Lg);
    d->remaining = after >= p->cap ? 0 : div_floor(p->cap - after, p->Wg);
    d->reset_ns = div_ceil(after, p->Lg);
    if (cost == 0) return 0; /* a peek reports the current queue wait */
    tat_store(p, free + (i128)cost * p->Wg, next);
    return 1;
  }
  d->remaining = level >= p->cap ? 0 : div_floor(p->cap - level, p->Wg);
  d->reset_ns = div_ceil(level, p->Lg);
  d->retry_after_ns = div_ceil(after - p->cap, p->Lg);
  return 0;
}

static int64_t leaky_fresh_at(const algo_policy *p, const algo_state *st) {
  (void)p;
  return st->a; /* the queue is empty from free_at on */
}

const algo_ops algo_leaky_bucket = {SL_LEAKY_BUCKET, "leaky_bucket",
                                    leaky_decide, leaky_fresh_at,
                                    algo_tat_used, algo_tat_force};
