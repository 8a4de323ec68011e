/*
 * sliding_window.c — the weighted two-window counter (Cloudflare's).
 *
 * Counts per epoch-aligned window like fixed_window, but judges a request
 * by an estimate of the last PERIOD: the previous window's count weighted by
 * the part of it still inside the sliding period, plus the current count:
 *     estimate = prev * (W - elapsed) / W + curr
 * Allowed iff estimate + cost <= LIMIT (compared multiplied by W: exact).
 * Only allowed cost is counted. prev is 0 unless the stored window is the
 * one right before the current.
 *
 * State: a = start of the stored window, b = prev << 32 | curr (each at most
 * LIMIT < 2^32). A time before the stored window is treated as its start.
 * A forced charge (sw_force) can count curr past LIMIT, up to UINT32_MAX.
 */
#include "algo.h"

typedef struct sw_view {
  int64_t start;   /* current window */
  int64_t elapsed; /* t - start */
  int64_t prev, curr;
} sw_view;

static sw_view sw_at(const algo_policy *p, const algo_state *st, int64_t t) {
  sw_view v = {t - t % p->W, 0, 0, 0};
  if (st) {
    int64_t s_start = st->a;
    int64_t s_prev = (int64_t)((uint64_t)st->b >> 32);
    int64_t s_curr = (int64_t)((uint64_t)st->b & 0xffffffffu);
    if (s_start > v.start) { /* clock went back: use the stored window */
      v.start = s_start;
      t = s_start;
    }
    if (s_start == v.start) {
      v.prev = s_prev;
      v.curr = s_curr;
    } else if (s_start == v.start - p->W) {
      v.prev = s_curr;
    }
  }
  v.elapsed = t - v.start;
  return v;
}

/* The estimate times W: prev * (W - elapsed) + curr * W. */
static i128 sw_scaled(const algo_policy *p, const sw_view *v, int64_t curr) {
  return (i128)v->prev * (p->W - v->elapsed) + (i128)curr * p->W;
}

/* Until the estimate is zero with no more traffic. */
static int64_t sw_reset(const algo_policy *p, const sw_view *v, int64_t curr) {
  if (curr > 0) return 2 * p->W - v->elapsed;
  if (v->prev > 0) return p->W - v->elapsed;
  return 0;
}

/*
 * The least d > 0 at which the estimate (non-increasing while idle, and
 * continuous across the boundary) admits cost again, for a denied request.
 */
static int64_t sw_retry(const algo_policy *p, const sw_view *v, int64_t cost) {
  int64_t W = p->W, left = W - v->elapsed; /* until the next window */
  int64_t room = p->L - v->curr - cost;
  if (room >= 0 && v->prev > 0) {
    /* In this window: prev * (left - d) <= room * W. */
    int64_t d = left - div_floor((i128)room * W, v->prev);
    if (d < left) return d;
  }
  /* In the next window, curr becomes prev: curr * (W - e) <= (L - cost) * W. */
  int64_t e = 0;
  if (v->curr > 0) {
    i128 keep = (i128)(p->L - cost) * W / v->curr;
    e = keep >= W ? 0 : W - (int64_t)keep;
  }
  return left + e;
}

static int sw_decide(const algo_policy *p, const algo_state *st, int64_t t,
                     int64_t cost, sl_decision *d, algo_state *next) {
  sw_view v = sw_at(p, st, t);
  i128 full = (i128)p->L * p->W;
  i128 est = sw_scaled(p, &v, v.curr);

  decision_init(d, p);
  if (est + (i128)cost * p->W <= full || cost == 0) { /* peeks: allowed */
    int64_t curr = v.curr + cost;
    i128 after = sw_scaled(p, &v, curr);
    d->allowed = 1;
    d->remaining = after >= full ? 0 : div_floor(full - after, p->W);
    d->reset_ns = sw_reset(p, &v, curr);
    if (cost == 0) return 0;
    next->a = v.start;
    next->b = (int64_t)((uint64_t)v.prev << 32 | (uint64_t)curr);
    return 1;
  }
  d->remaining = est >= full ? 0 : div_floor(full - est, p->W);
  d->reset_ns = sw_reset(p, &v, v.curr);
  d->retry_after_ns = sw_retry(p, &v, cost);
  return 0;
}

static int sw_force(const algo_policy *p, const algo_state *st, int64_t t,
                    int64_t *cost, int64_t *level, algo_state *next) {
  sw_view v = sw_at(p, st, t);
  int64_t c = min64(*cost, (int64_t)UINT32_MAX - v.curr);
  *cost = c;
  *level = div_floor_signed((i128)p->L * p->W - sw_scaled(p, &v, v.curr + c),
                            p->W);
  if (c <= 0) return 0;
  next->a = v.start;
  next->b = (int64_t)((uint64_t)v.prev << 32 | (uint64_t)(v.curr + c));
  return 1;
}

static int64_t sw_fresh_at(const algo_policy *p, const algo_state *st) {
  int64_t prev = (int64_t)((uint64_t)st->b >> 32);
  int64_t curr = (int64_t)((uint64_t)st->b & 0xffffffffu);
  if (curr > 0) return st->a + 2 * p->W;
  if (prev > 0) return st->a + p->W;
  return 0;
}

/* The estimate at t, rounded up: what a fresh key would have more. */
static int64_t sw_used(const algo_policy *p, const algo_state *st, int64_t t) {
  sw_view v = sw_at(p, st, t);
  return div_ceil(sw_scaled(p, &v, v.curr), p->W);
}

const algo_ops algo_sliding_window = {SL_SLIDING_WINDOW, "sliding_window",
                                      sw_decide, sw_fresh_at, sw_used,
                                      sw_force};
