/*
 * fixed_window.c — a counter per epoch-aligned window [k*W, (k+1)*W), or
 * [phase + k*W, phase + (k+1)*W) when the policy has a phase (a calendar
 * window: the engine gives each decision its window's start and length).
 *
 * State: (window start, count). Allowed iff count + cost <= LIMIT. Cheap and
 * simple, and it lets up to 2*LIMIT through around a window boundary (LIMIT
 * at the end of one window, LIMIT at the start of the next); the sliding
 * algorithms exist to prevent exactly that. A time that falls in a window
 * before the stored one is treated as the start of the stored window.
 * A forced charge (fw_force) can count past LIMIT (up to UINT32_MAX): the
 * window then denies until it ends. A peek is always allowed.
 */
#include "algo.h"

/* The start of the window that holds t. */
static inline int64_t window_start(const algo_policy *p, int64_t t) {
  int64_t off = (t - p->phase) % p->W;
  return t - (off < 0 ? off + p->W : off);
}

static int fw_decide(const algo_policy *p, const algo_state *st, int64_t t,
                     int64_t cost, sl_decision *d, algo_state *next) {
  int64_t start = window_start(p, t);
  if (st && st->a > start) {
    start = st->a; /* clock went back into an earlier window */
    t = start;
  }
  int64_t count = (st && st->a == start) ? st->b : 0;
  int64_t to_end = start + p->W - t;

  decision_init(d, p);
  if (count + cost <= p->L || cost == 0) {
    d->allowed = 1;
    d->remaining = max64(p->L - count - cost, 0);
    d->reset_ns = count + cost > 0 ? to_end : 0;
    if (cost == 0) return 0;
    next->a = start;
    next->b = count + cost;
    return 1;
  }
  d->remaining = max64(p->L - count, 0);
  d->reset_ns = to_end;
  d->retry_after_ns = to_end; /* a new window always has room: cost <= L */
  return 0;
}

static int fw_force(const algo_policy *p, const algo_state *st, int64_t t,
                    int64_t *cost, int64_t *level, algo_state *next) {
  int64_t start = window_start(p, t);
  if (st && st->a > start) start = st->a;
  int64_t count = (st && st->a == start) ? st->b : 0;
  int64_t c = min64(*cost, (int64_t)UINT32_MAX - count);
  *cost = c;
  *level = p->L - count - c;
  if (c <= 0) return 0;
  next->a = start;
  next->b = count + c;
  return 1;
}

static int64_t fw_fresh_at(const algo_policy *p, const algo_state *st) {
  return st->b > 0 ? st->a + p->W : 0;
}

/* The count of t's window (or of a later one, the clock having gone
   back): what the window still holds. A window that started within W of
   t is live (for an aligned one, the same as starting at t's window; a
   calendar window's state is read with its longest W: live until then). */
static int64_t fw_used(const algo_policy *p, const algo_state *st, int64_t t) {
  return st->a > t - p->W ? st->b : 0;
}

const algo_ops algo_fixed_window = {SL_FIXED_WINDOW, "fixed_window",
                                    fw_decide, fw_fresh_at, fw_used,
                                    fw_force};
