/*
 * gcra.c — the generic cell rate algorithm (ATM's GCRA, redis-cell's).
 *
 * State: one theoretical arrival time TAT, exact in ticks (tat_load/store).
 * A request of cost c at t: tat = max(TAT, t); new = tat + c*T; allowed iff
 * new - t <= B*T, and then TAT = new. TAT - t is the bucket's debt, so the
 * decisions equal token_bucket's; the state is one timestamp instead of a
 * (tokens, last) pair. An earlier t than a previous request only sees that
 * debt as larger: stricter, never extra quota. A forced charge
 * (algo_tat_force) can take the debt beyond cap, up to algo_fill_max.
 */
#include "algo.h"

static int gcra_decide(const algo_policy *p, const algo_state *st, int64_t t,
                       int64_t cost, sl_decision *d, algo_state *next) {
  i128 now = (i128)t * p->Lg;
  i128 tat = st ? tat_load(p, st) : now;
  if (tat < now) tat = now;
  i128 debt = tat - now;           /* ticks owed: (B - tokens) * Wg */
  i128 after = debt + (i128)cost * p->Wg;

  decision_init(d, p);
  if (after <= p->cap || cost == 0) { /* a peek is always allowed */
    d->allowed = 1;
    d->remaining = after >= p->cap ? 0 : div_floor(p->cap - after, p->Wg);
    d->reset_ns = div_ceil(after, p->Lg);
    if (cost == 0) return 0;
    tat_store(p, tat + (i128)cost * p->Wg, next);
    return 1;
  }
  /* Denied: the debt must drain until `after` fits; nothing changes. */
  d->remaining = debt >= p->cap ? 0 : div_floor(p->cap - debt, p->Wg);
  d->reset_ns = div_ceil(debt, p->Lg);
  d->retry_after_ns = div_ceil(after - p->cap, p->Lg);
  return 0;
}

int algo_tat_force(const algo_policy *p, const algo_state *st, int64_t t,
                   int64_t *cost, int64_t *level, algo_state *next) {
  i128 now = (i128)t * p->Lg;
  i128 tat = st ? tat_load(p, st) : now;
  if (tat < now) tat = now;
  i128 debt = tat - now, most = algo_fill_max(p);
  i128 after = debt + (i128)*cost * p->Wg;
  if (after > most) after = debt > most ? debt : most;
  /* A clock behind the TAT sees a debt past the stop: reported at it. */
  *level = div_floor_signed(p->cap - (after < most ? after : most), p->Wg);
  if (*cost == 0) return 0;
  tat_store(p, now + after, next);
  return 1;
}

int64_t algo_tat_used(const algo_policy *p, const algo_state *st, int64_t t) {
  i128 debt = tat_load(p, st) - (i128)t * p->Lg;
  return debt > 0 ? div_ceil(debt, p->Wg) : 0;
}

static int64_t gcra_fresh_at(const algo_policy *p, const algo_state *st) {
  (void)p;
  return st->a; /* TAT rounded up: from then on the debt is zero */
}

const algo_ops algo_gcra = {SL_GCRA, "gcra", gcra_decide, gcra_fresh_at,
                            algo_tat_used, algo_tat_force};
