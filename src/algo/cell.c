/*
 * cell.c — redis-cell's GCRA with the rate given per call (cell.h): one
 * TAT per key whatever rate each call names, in the nanoseconds and the
 * roundings redis-cell uses, so CL.THROTTLE answers as redis-cell does
 * when a key's limits change between calls. Pure, like the algorithms.
 */
#include "cell.h"

#include <stdio.h>

#define SEC INT64_C(1000000000)
/* The longest a full burst may take to drain: the buckets' bound (algo.c),
   which keeps now + dvt + ei*limit far inside int64. */
#define DVT_MAX_NS (INT64_C(1) << 60)

int algo_cell_rate(int64_t max_burst, int64_t count, int64_t period_s,
                   algo_cell *out) {
  if (count < 1 || count > (int64_t)SL_LIMIT_MAX || period_s < 1 ||
      period_s > SL_PERIOD_MAX_NS / SEC || max_burst < 0 ||
      max_burst >= (int64_t)SL_LIMIT_MAX)
    return -1;
  /* redis-cell's Rate::per_period: ((ns as f64) / (n as f64)) as i64. */
  int64_t ei = (int64_t)((double)(period_s * SEC) / (double)count);
  if (ei == 0) return 1;
  i128 dvt = (i128)ei * (max_burst + 1);
  if (dvt > DVT_MAX_NS) return -1;
  out->ei = ei;
  out->dvt = (int64_t)dvt;
  out->limit = max_burst + 1;
  return 0;
}

int algo_cell_i64(const char *s, size_t n, long long *out) {
  size_t i = n && (s[0] == '+' || s[0] == '-');
  int neg = n && s[0] == '-';
  if (i == n) return -1;
  unsigned long long v = 0, most = neg ? (unsigned long long)INT64_MAX + 1
                                        : (unsigned long long)INT64_MAX;
  for (; i < n; i++) {
    if (s[i] < '0' || s[i] > '9') return -1;
    unsigned d = (unsigned)(s[i] - '0');
    if (v > (most - d) / 10) return -1;
    v = v * 10 + d;
  }
  *out = neg ? (long long)(0 - v) : (long long)v;
  return 0;
}

int algo_cell_args(int argc, const char *const *argv, const size_t *len,
                   algo_cell *rate, int64_t num[4], char *err, size_t n) {
  if (argc != 5 && argc != 6) {
    snprintf(err, n, "%s", ALGO_CELL_USAGE);
    return -1;
  }
  long long v[4] = {0, 0, 0, 1}; /* max_burst, count, period, quantity */
  for (int i = 2; i < argc; i++)
    if (algo_cell_i64(argv[i], len[i], &v[i - 2])) {
      /* (the argument as given, bounded: a reply is no place for MBs) */
      snprintf(err, n, ALGO_CELL_ERR "Couldn't parse as integer: %.*s",
               (int)(len[i] < 300 ? len[i] : 300), argv[i]);
      return -1;
    }
  long long burst = v[0], count = v[1], period = v[2];
  long long max_period = SL_PERIOD_MAX_NS / SEC;
  int rc = count == 0 || period == 0 ? 1 : -1; /* 1: a zero rate */
  if (rc == 1)
    ;
  else if (count < 0 || count > SL_LIMIT_MAX)
    snprintf(err, n, ALGO_CELL_ERR "count per period must be positive, at "
             "most %u (got %lld)", SL_LIMIT_MAX, count);
  else if (period < 0 || period > max_period)
    snprintf(err, n, ALGO_CELL_ERR "period must be positive, at most %lld "
             "seconds (got %lld)", max_period, period);
  else if (burst < 0 || burst >= SL_LIMIT_MAX)
    snprintf(err, n, ALGO_CELL_ERR "max_burst must be 0..%u (got %lld)",
             SL_LIMIT_MAX - 1, burst);
  else if (v[3] < 0)
    snprintf(err, n, ALGO_CELL_ERR "quantity must be >= 0 (got %lld)", v[3]);
  else if ((rc = algo_cell_rate(burst, count, period, rate)) < 0)
    snprintf(err, n, ALGO_CELL_ERR "max_burst %lld at %lld per %lld s: a full "
             "burst takes over 36 years", burst, count, period);
  if (rc == 1) snprintf(err, n, ALGO_CELL_ERR "Zero rates are not supported");
  if (rc) return -1;
  for (int i = 0; i < 4; i++) num[i] = v[i];
  return 0;
}

/* redis-cell's remaining: (whole_us(next) as f64 / whole_us(ei) as f64) as
   i64, where a division by 0 us is a saturating cast of inf or NaN. */
static int64_t cell_remaining(int64_t next, int64_t ei) {
  if (next <= -ei) return 0;
  int64_t next_us = next / 1000, ei_us = ei / 1000; /* toward zero */
  if (ei_us == 0) return next_us > 0 ? INT64_MAX : 0;
  return (int64_t)((double)next_us / (double)ei_us);
}

int algo_cell_decide(const algo_cell *c, int64_t tat, int64_t now, int64_t qty,
                     sl_decision *d, int64_t *next_tat) {
  if (tat < now) tat = now; /* none, or already fresh */
  i128 inc = (i128)c->ei * qty;
  i128 new_tat = (i128)tat + inc;
  i128 late = new_tat - c->dvt - now; /* redis-cell's -diff */
  int64_t ttl;
  int change = 0;
  d->limit = c->limit;
  d->delay_ns = 0;
  d->retry_after_ns = -1;
  if (late > 0) {
    d->allowed = 0;
    if (inc <= c->dvt) d->retry_after_ns = (int64_t)late;
    ttl = tat - now;
  } else {
    d->allowed = 1;
    ttl = (int64_t)(new_tat - now);
    if (qty > 0) {
      *next_tat = (int64_t)new_tat;
      change = 1;
    }
  }
  d->reset_ns = ttl;
  d->remaining = cell_remaining(c->dvt - ttl, c->ei);
  return change;
}

void algo_cell_policy(const algo_cell *c, algo_policy *out) {
  *out = (algo_policy){0};
  out->pub = (sl_policy){SL_GCRA, 1, (uint32_t)c->limit, c->ei};
  out->ops = &algo_cell_ops;
  out->L = 1;
  out->W = c->ei;
  out->B = c->limit;
  out->Lg = 1;
  out->Wg = c->ei;
  out->cap = c->dvt;
}

static int cell_decide(const algo_policy *p, const algo_state *st, int64_t t,
                       int64_t cost, sl_decision *d, algo_state *next) {
  algo_cell c = {p->W, (int64_t)p->cap, p->B};
  int64_t tat;
  int change = algo_cell_decide(&c, st ? st->a : -1, t, cost, d, &tat);
  if (change) {
    next->a = tat;
    next->b = p->W;
  }
  return change;
}

static int64_t cell_fresh_at(const algo_policy *p, const algo_state *st) {
  (void)p;
  return st->a;
}

/* The debt at now in emission intervals of the call that wrote it. */
static int64_t cell_used(const algo_policy *p, const algo_state *st,
                         int64_t now) {
  (void)p;
  int64_t debt = st->a - now;
  if (debt <= 0) return 0;
  int64_t ei = st->b > 0 ? st->b : 1;
  return debt / ei + (debt % ei != 0);
}

/* Never called: approximate mode does not sync cell keys. */
static int cell_force(const algo_policy *p, const algo_state *st, int64_t t,
                      int64_t *cost, int64_t *level, algo_state *next) {
  (void)p, (void)st, (void)t, (void)next;
  *cost = 0;
  *level = 0;
  return 0;
}

const algo_ops algo_cell_ops = {SL_GCRA, "cell", cell_decide, cell_fresh_at,
                                cell_used, cell_force};
