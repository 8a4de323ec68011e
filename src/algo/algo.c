/*
 * algo.c — from a policy to the constants its algorithm computes with.
 *
 * Validation lives here, next to the arithmetic it protects: every bound
 * below exists so that the 128-bit intermediates of the algorithms cannot
 * overflow and every stored quantity fits its int64 field.
 */
#include <stdarg.h>
#include <stdio.h>

#include "algo.h"

static const algo_ops *const all_ops[SL_ALGO_COUNT] = {
    [SL_TOKEN_BUCKET] = &algo_token_bucket,
    [SL_LEAKY_BUCKET] = &algo_leaky_bucket,
    [SL_FIXED_WINDOW] = &algo_fixed_window,
    [SL_SLIDING_LOG] = &algo_sliding_log,
    [SL_SLIDING_WINDOW] = &algo_sliding_window,
    [SL_GCRA] = &algo_gcra,
    [SL_CONCURRENCY] = &algo_concurrency,
};

const algo_ops *algo_ops_of(sl_algo algo) {
  return (unsigned)algo < SL_ALGO_COUNT ? all_ops[algo] : NULL;
}

const char *sl_algo_name(sl_algo algo) {
  const algo_ops *ops = algo_ops_of(algo);
  return ops ? ops->name : NULL;
}

int algo_policy_error(char *err, size_t err_len, const char *fmt, ...) {
  if (err && err_len) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, err_len, fmt, ap);
    va_end(ap);
  }
  return SL_EPOLICY;
}

static int64_t gcd64(int64_t a, int64_t b) {
  while (b) {
    int64_t r = a % b;
    a = b;
    b = r;
  }
  return a;
}

static int is_bucket(sl_algo algo) {
  return algo == SL_TOKEN_BUCKET || algo == SL_LEAKY_BUCKET || algo == SL_GCRA;
}

/*
 * A concurrency policy: LIMIT slots (L), one per lease (B = 1: the largest
 * cost), each lease living PERIOD (W). The period's generic checks have
 * passed.
 */
static int compile_concurrency(const sl_policy *p, algo_policy *out, char *err,
                               size_t err_len) {
  if (p->limit > SL_CONCURRENCY_MAX)
    return algo_policy_error(err, err_len,
                             "concurrency limit %u is too large (max %d)",
                             p->limit, SL_CONCURRENCY_MAX);
  if (p->burst != 0)
    return algo_policy_error(err, err_len,
                             "burst is not allowed for concurrency");
  if (p->period_ns > SL_LEASE_MAX_NS)
    return algo_policy_error(err, err_len,
                             "lease %lld ms is longer than a day",
                             (long long)(p->period_ns / 1000000));
  out->pub = *p;
  out->ops = &algo_concurrency;
  out->L = p->limit;
  out->B = 1;
  out->W = p->period_ns;
  out->Lg = 1;
  out->Wg = 1;
  out->cap = 1;
  out->evict_below = 0;
  return 0;
}

/* The longest a bucket may take to refill from empty: B * PERIOD / LIMIT. */
#define HORIZON_MAX_NS (INT64_C(1) << 60)

int algo_policy_compile(const sl_policy *pub, algo_policy *out, char *err,
                        size_t err_len) {
  if (!pub || !out) return SL_EINVAL;
  const algo_ops *ops = algo_ops_of(pub->algo);
  if (!ops)
    return algo_policy_error(err, err_len, "unknown algorithm %d",
                             (int)pub->algo);
  if (pub->limit == 0)
    return algo_policy_error(err, err_len, "limit must be a positive integer");
  if (pub->period_ns <= 0)
    return algo_policy_error(err, err_len, "period must be positive");
  if (pub->period_ns % 1000000 != 0)
    return algo_policy_error(
        err, err_len, "period must be a whole number of milliseconds (%lld ns)",
        (long long)pub->period_ns);
  if (pub->period_ns > SL_PERIOD_MAX_NS)
    return algo_policy_error(err, err_len, "period is longer than 3650 days");

  sl_policy p = *pub;
  if (p.algo == SL_CONCURRENCY) return compile_concurrency(&p, out, err, err_len);
  if (is_bucket(p.algo)) {
    if (p.burst == 0) p.burst = p.limit;
  } else if (p.burst != 0) {
    return algo_policy_error(
        err, err_len,
        "burst is not allowed for %s (window algorithms have none)", ops->name);
  }

  out->pub = p;
  out->ops = ops;
  out->L = p.limit;
  out->W = p.period_ns;
  out->B = is_bucket(p.algo) ? (int64_t)p.burst : (int64_t)p.limit;
  int64_t g = gcd64(out->L, out->W);
  out->Lg = out->L / g;
  out->Wg = out->W / g;
  out->cap = (i128)out->B * out->Wg;
  out->evict_below = 0;
  out->phase = 0;

  if (is_bucket(p.algo)) {
    /* Refill horizon B*T must stay far from int64 (times + horizon). */
    if (out->cap / out->Lg > HORIZON_MAX_NS)
      return algo_policy_error(
          err, err_len,
          "burst %u at %u per period takes over 36 years to refill", p.burst,
          p.limit);
    /* token_bucket stores its tokens as an int64 count of ticks. */
    if (p.algo == SL_TOKEN_BUCKET && out->cap > (i128)INT64_MAX / 2)
      return algo_policy_error(
          err, err_len,
          "token_bucket cannot count burst %u exactly at this "
          "limit and period; gcra makes the same decisions",
          p.burst);
  }
  return 0;
}

int sl_policy_validate(const sl_policy *policy, char *err, size_t err_len) {
  algo_policy ap;
  return algo_policy_compile(policy, &ap, err, err_len);
}
