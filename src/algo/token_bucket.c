/*
 * token_bucket.c — the classic token bucket.
 *
 * State: (last, tokens) with tokens counted in ticks (tokens * Wg), so the
 * continuous refill of LIMIT per PERIOD adds exactly Lg ticks per ns. The
 * bucket starts full (B tokens) and is capped at B. Allowed iff
 * tokens >= cost, then tokens -= cost. A time before `last` is treated as
 * `last`: no negative refill, no extra quota. A forced charge (tb_force)
 * can take tokens below zero, down to cap - algo_fill_max: a debt that the
 * refill pays back before the next request fits.
 */
#include "algo.h"

/* Tokens (ticks) at te >= st->a. */
static i128 tokens_at(const algo_policy *p, const algo_state *st, int64_t te) {
  i128 tok = (i128)st->b + (i128)(te - st->a) * p->Lg;
  return tok > p->cap ? p->cap : tok;
}

static int tb_decide(const algo_policy *p, const algo_state *st, int64_t t,
                     int64_t cost, sl_decision *d, algo_state *next) {
  int64_t te = st ? max64(t, st->a) : t;
  i128 tok = st ? tokens_at(p, st, te) : p->cap;
  i128 want = (i128)cost * p->Wg;

  decision_init(d, p);
  if (tok >= want || cost == 0) { /* a peek is allowed, even in debt */
    tok -= want;
    d->allowed = 1;
    d->remaining = tok > 0 ? div_floor(tok, p->Wg) : 0;
    d->reset_ns = div_ceil(p->cap - tok, p->Lg);
    if (cost == 0) return 0;
    next->a = te;
    next->b = (int64_t)tok;
    return 1;
  }
  d->remaining = tok > 0 ? div_floor(tok, p->Wg) : 0;
  d->reset_ns = div_ceil(p->cap - tok, p->Lg);
  d->retry_after_ns = div_ceil(want - tok, p->Lg);
  return 0;
}

static int tb_force(const algo_policy *p, const algo_state *st, int64_t t,
                    int64_t *cost, int64_t *level, algo_state *next) {
  int64_t te = st ? max64(t, st->a) : t;
  i128 tok = st ? tokens_at(p, st, te) : p->cap;
  i128 least = p->cap - algo_fill_max(p);
  i128 after = tok - (i128)*cost * p->Wg;
  if (after < least) after = tok < least ? tok : least;
  *level = div_floor_signed(after, p->Wg);
  if (*cost == 0) return 0;
  next->a = te;
  next->b = (int64_t)after;
  return 1;
}

static int64_t tb_fresh_at(const algo_policy *p, const algo_state *st) {
  return st->a + div_ceil(p->cap - st->b, p->Lg);
}

/* The tokens missing from a full bucket at t (a debt past empty too). */
static int64_t tb_used(const algo_policy *p, const algo_state *st, int64_t t) {
  i128 missing = p->cap - tokens_at(p, st, max64(t, st->a));
  return missing > 0 ? div_ceil(missing, p->Wg) : 0;
}

const algo_ops algo_token_bucket = {SL_TOKEN_BUCKET, "token_bucket",
                                    tb_decide, tb_fresh_at, tb_used,
                                    tb_force};
