/*
 * test_force.c — forced charges (sl_limiter_force): the level they report,
 * the debt they leave below empty and how each algorithm pays it back, the
 * limits a debt stops at (algo_fill_max for the buckets, a count of
 * UINT32_MAX for the windows), and what ordinary takes decide on a key in
 * debt: denied until it is repaid, remaining never negative, exact
 * retry_after and reset. Figures are worked out by hand in the comments;
 * the randomized tests compare against small reference models.
 */
#include "helpers.h"

/* ---- local helpers ---- */

/* Every algorithm once; bursts differ from limits where there is one. */
static const char *const POLICIES[] = {
    "token_bucket:10/s:burst=15", "leaky_bucket:10/s:burst=5",
    "fixed_window:10/s",          "sliding_log:10/s",
    "sliding_window:10/s",        "gcra:10/s:burst=12",
};
#define NPOLICIES (sizeof POLICIES / sizeof *POLICIES)

static const char *const BUCKETS[] = {"token_bucket", "gcra", "leaky_bucket"};
#define NBUCKETS (sizeof BUCKETS / sizeof *BUCKETS)

/* Forces `cost` for a NUL-terminated key; returns the level after it. */
static int64_t force(sl_limiter *lim, const char *key, int64_t cost,
                     int64_t now) {
  int64_t level = INT64_MIN;
  int rc = sl_limiter_force(lim, key, strlen(key), cost, now, &level);
  if (rc)
    fail_msg("force(%s, %lld): %s", key, (long long)cost, sl_strerror(rc));
  return level;
}

/* The level of a key, read by a forced charge of 0 (which changes nothing). */
static int64_t level_of(sl_limiter *lim, const char *key, int64_t now) {
  return force(lim, key, 0, now);
}

/* Burst for the buckets, LIMIT for the windows: the largest cost. */
static int64_t largest_cost(const sl_limiter *lim) {
  const sl_policy *p = sl_limiter_policy(lim);
  return p->burst ? p->burst : p->limit;
}

static void assert_denied(const sl_decision *d, int64_t retry_after_ns,
                          int64_t reset_ns) {
  assert_false(d->allowed);
  assert_int_equal(d->remaining, 0);
  assert_int_equal(d->retry_after_ns, retry_after_ns);
  assert_int_equal(d->reset_ns, reset_ns);
}

static void assert_allowed(const sl_decision *d, int64_t remaining,
                           int64_t reset_ns) {
  assert_true(d->allowed);
  assert_int_equal(d->remaining, remaining);
  assert_int_equal(d->retry_after_ns, 0);
  assert_int_equal(d->reset_ns, reset_ns);
}

typedef struct rng {
  uint64_t s;
} rng;

/* Uniform-ish in [lo, hi] (modulo bias is irrelevant here). */
static int64_t rng_range(rng *r, int64_t lo, int64_t hi) {
  if (hi <= lo) return lo;
  return lo + (int64_t)(splitmix64(&r->s) % (uint64_t)(hi - lo + 1));
}

static int64_t gcd(int64_t a, int64_t b) {
  while (b) {
    int64_t t = a % b;
    a = b;
    b = t;
  }
  return a;
}

/* floor(a / b) and ceil(a / b) for b > 0 and any sign of a. */
static int64_t floor_div(int64_t a, int64_t b) {
  return a / b - (a % b != 0 && a < 0);
}
static int64_t ceil_div(int64_t a, int64_t b) {
  return a / b + (a % b != 0 && a > 0);
}

/* ---- reading the level ---- */

static void force_zero_on_fresh_key_reads_full_and_stores_nothing(
    void **state) {
  (void)state;
  sl_store *s = store_opts(0, 0);
  for (size_t i = 0; i < NPOLICIES; i++) {
    sl_limiter *lim = limiter_of(s, POLICIES[i]);
    /* A fresh key holds its whole burst (buckets) or limit (windows). */
    assert_int_equal(level_of(lim, "k", T0), largest_cost(lim));
    assert_int_equal(level_of(lim, "k", T0 + MS(250)), largest_cost(lim));
    assert_int_equal(stats_of(s).keys, 0);
    /* A take afterwards decides as on a key never seen. */
    sl_decision a = take(lim, "k", 3, T0 + MS(250));
    sl_decision b = take(lim, "never", 3, T0 + MS(250));
    assert_true(a.allowed);
    assert_same_decision(&a, &b);
    sl_limiter_free(lim);
  }
  sl_store_free(s);
}

static void force_zero_on_a_debt_changes_nothing(void **state) {
  (void)state;
  sl_store *s = store_opts(0, 0);
  for (size_t i = 0; i < NPOLICIES; i++) {
    sl_limiter *lim = limiter_of(s, POLICIES[i]);
    int64_t b = largest_cost(lim);
    /* Two full charges at T0: the first empties the key, the second owes a
       whole burst/limit (T0 starts a window, so sliding_window has no
       previous count to weigh in). */
    assert_int_equal(force(lim, "k", b, T0), 0);
    assert_int_equal(force(lim, "k", b, T0), -b);
    sl_decision before = take(lim, "k", 1, T0);
    for (int j = 0; j < 3; j++) assert_int_equal(level_of(lim, "k", T0), -b);
    sl_decision after = take(lim, "k", 1, T0);
    assert_false(before.allowed);
    assert_same_decision(&before, &after);
    assert_int_equal(stats_of(s).keys, 1);
    sl_limiter_free(lim);
  }
  sl_store_free(s);
}

static void store_expire_keeps_a_key_in_debt(void **state) {
  (void)state;
  sl_store *s = store_opts(0, 0);
  for (size_t i = 0; i < NPOLICIES; i++) {
    sl_limiter *lim = limiter_of(s, POLICIES[i]);
    int64_t b = largest_cost(lim);
    force(lim, "k", b, T0);
    force(lim, "k", b, T0);
    /* 1 ms later nothing is repaid enough to be fresh: a sweep keeps it. */
    int64_t want = level_of(lim, "k", T0 + MS(1));
    assert_true(want < 0);
    assert_true(sl_store_expire(s, T0 + MS(1), 1 << 20) >= 0);
    assert_int_equal(stats_of(s).keys, 1);
    assert_int_equal(level_of(lim, "k", T0 + MS(1)), want);
    sl_limiter_free(lim);
  }
  sl_store_free(s);
}

/*
 * A peek on a key in debt is allowed and reports remaining 0, never the
 * negative level; a take of 1 is denied with remaining 0. Two forced
 * charges of the largest cost at T0 (T = 100 ms per unit at 10/s):
 *   token_bucket burst 15: 15 owed, full after 30 units = 3 s; 1 unit
 *     fits after 16 units = 1.6 s;
 *   leaky_bucket burst 5: 10 queued = 1 s (also the peek's delay); 1 fits
 *     when 6 have drained = 600 ms;
 *   fixed_window: 20 counted; both wait for the window end, 1 s;
 *   sliding_log: 20 logged at T0, gone at T0 + 1 s;
 *   sliding_window: curr = 20, fresh after 2 W; 1 fits when
 *     20*(W - e)/W + 1 <= 10 in the next window: e = 550 ms, so 1.55 s;
 *   gcra burst 12: 24 owed = 2.4 s; 1 fits after 25 - 12 = 13 units.
 */
static void peek_on_a_debt_is_allowed_with_remaining_zero(void **state) {
  (void)state;
  static const struct {
    const char *spec;
    int64_t level, reset_ns, retry_ns, delay_ns;
  } cases[] = {
      {"token_bucket:10/s:burst=15", -15, SEC(3), MS(1600), 0},
      {"leaky_bucket:10/s:burst=5", -5, SEC(1), MS(600), SEC(1)},
      {"fixed_window:10/s", -10, SEC(1), SEC(1), 0},
      {"sliding_log:10/s", -10, SEC(1), SEC(1), 0},
      {"sliding_window:10/s", -10, SEC(2), MS(1550), 0},
      {"gcra:10/s:burst=12", -12, MS(2400), MS(1300), 0},
  };
  sl_store *s = store_opts(0, 0);
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    sl_limiter *lim = limiter_of(s, cases[i].spec);
    int64_t b = largest_cost(lim);
    force(lim, "k", b, T0);
    assert_int_equal(force(lim, "k", b, T0), cases[i].level);
    sl_decision d = take(lim, "k", 0, T0);
    if (!d.allowed)
      fail_msg(
          "%s: a peek with level %lld is denied (remaining %lld, "
          "retry_after_ns %lld)",
          cases[i].spec, (long long)cases[i].level, (long long)d.remaining,
          (long long)d.retry_after_ns);
    assert_allowed(&d, 0, cases[i].reset_ns);
    assert_int_equal(d.delay_ns, cases[i].delay_ns);
    d = take(lim, "k", 1, T0);
    assert_denied(&d, cases[i].retry_ns, cases[i].reset_ns);
    sl_limiter_free(lim);
  }
  sl_store_free(s);
}

/* ---- the buckets ---- */

/*
 * 10/s with burst 5: T = 100 ms per token, a full bucket is 5 tokens. Two
 * forced charges of 5 at T0 leave 5 - 10 = -5 tokens. A take of 1 then
 * needs 6 tokens of refill: 600 ms; the bucket is full again after 10
 * tokens: 1 s. token_bucket, gcra and leaky_bucket all decide so.
 */
static void bucket_debt_is_repaid_at_the_exact_refill_instant(void **state) {
  (void)state;
  sl_store *s = store_opts(0, 0);
  for (size_t i = 0; i < NBUCKETS; i++) {
    char spec[64];
    snprintf(spec, sizeof spec, "%s:10/s:burst=5", BUCKETS[i]);
    sl_limiter *lim = limiter_of(s, spec);
    assert_int_equal(force(lim, "k", 5, T0), 0);
    assert_int_equal(force(lim, "k", 5, T0), -5);

    sl_decision d = take(lim, "k", 1, T0);
    assert_denied(&d, MS(600), SEC(1));
    assert_int_equal(d.limit, 5);
    /* A full-burst take needs all 10 tokens back: 1 s. */
    d = take(lim, "k", 5, T0);
    assert_denied(&d, SEC(1), SEC(1));

    /* The level climbs 1 per 100 ms, floored: -2.5 tokens reads -3. */
    assert_int_equal(level_of(lim, "k", T0 + MS(250)), -3);
    assert_int_equal(level_of(lim, "k", T0 + MS(500)), 0);
    assert_int_equal(level_of(lim, "k", T0 + MS(600) - 1), 0);
    assert_int_equal(level_of(lim, "k", T0 + SEC(1)), 5);

    /* 1 ns early: 1 token minus 1 ns of refill; full in 400 ms + 1 ns. */
    d = take(lim, "k", 1, T0 + MS(600) - 1);
    assert_denied(&d, 1, MS(400) + 1);
    /* On time: the token is there, 0 left, full again in 500 ms. */
    d = take(lim, "k", 1, T0 + MS(600));
    assert_allowed(&d, 0, MS(500));
    /* leaky_bucket queues it behind the 4 units still owed: 400 ms. */
    assert_int_equal(d.delay_ns,
                     strcmp(BUCKETS[i], "leaky_bucket") == 0 ? MS(400) : 0);
    d = take(lim, "k", 1, T0 + MS(600));
    assert_denied(&d, MS(100), MS(500));
    sl_limiter_free(lim);
  }
  sl_store_free(s);
}

/*
 * A random trace of forced charges and takes (times never decreasing),
 * replayed on token_bucket, gcra and leaky_bucket side by side and on a
 * model of the debt: D ticks owed below full, with Lg ticks refilled per
 * ns and Wg ticks per unit (g = gcd(LIMIT, PERIOD)), never below 0. A
 * forced charge adds c*Wg whatever D is; a take fits iff D + c*Wg <= cap.
 */
static void buckets_in_debt_agree_with_a_model(void **state) {
  (void)state;
  static const struct {
    const char *rate; /* LIMIT/PERIOD[:burst=N] */
    int64_t limit, burst, period_ns;
  } rates[] = {
      {"10/s:burst=5", 10, 5, SEC(1)},
      {"7/s", 7, 7, SEC(1)}, /* T = 142857142.857... ns */
      {"7/s:burst=3", 7, 3, SEC(1)},
      {"3/s:burst=20", 3, 20, SEC(1)},
      {"100/m:burst=1", 100, 1, SEC(60)},
      {"13/7s:burst=4", 13, 4, SEC(7)}, /* T = 538461538.46... ns */
      {"1/1ms:burst=2", 1, 2, MS(1)},
  };
  sl_store *s = store_opts(0, 0);
  rng r = {UINT64_C(0xdeb7)};
  for (size_t k = 0; k < sizeof rates / sizeof *rates; k++) {
    sl_limiter *lims[NBUCKETS];
    for (size_t i = 0; i < NBUCKETS; i++) {
      char spec[64];
      snprintf(spec, sizeof spec, "%s:%s", BUCKETS[i], rates[k].rate);
      lims[i] = limiter_of(s, spec);
    }
    int64_t L = rates[k].limit, B = rates[k].burst, W = rates[k].period_ns;
    int64_t g = gcd(L, W), Lg = L / g, Wg = W / g, cap = B * Wg;
    int64_t T = W / L; /* the emission interval, rounded down */
    int64_t debt = 0, now = T0;
    for (int step = 0; step < 4000; step++) {
      int64_t roll = rng_range(&r, 0, 9), dt = 0;
      if (roll >= 3 && roll <= 5) dt = rng_range(&r, 1, T);
      if (roll >= 6 && roll <= 8) dt = rng_range(&r, 1, 2 * B * T);
      if (roll == 9) dt = rng_range(&r, 1, 3);
      now += dt;
      /* Refill: D drains at Lg ticks per ns (dt * Lg < 2^63 here). */
      debt = debt - dt * Lg > 0 ? debt - dt * Lg : 0;
      if (rng_range(&r, 0, 9) < 4) {
        int64_t c = rng_range(&r, 0, B);
        debt += c * Wg;
        int64_t want = floor_div(cap - debt, Wg);
        for (size_t i = 0; i < NBUCKETS; i++) {
          int64_t got = force(lims[i], "k", c, now);
          if (got != want)
            fail_msg("%s %s step %d: force %lld -> level %lld, want %lld",
                     BUCKETS[i], rates[k].rate, step, (long long)c,
                     (long long)got, (long long)want);
        }
        continue;
      }
      int64_t c = rng_range(&r, 1, B), after = debt + c * Wg;
      sl_decision want = {0, B, 0, 0, 0, 0, 0};
      if (after <= cap) {
        want.allowed = 1;
        want.remaining = (cap - after) / Wg;
        want.reset_ns = ceil_div(after, Lg);
      } else {
        want.remaining = debt < cap ? (cap - debt) / Wg : 0;
        want.reset_ns = ceil_div(debt, Lg);
        want.retry_after_ns = ceil_div(after - cap, Lg);
      }
      for (size_t i = 0; i < NBUCKETS; i++) {
        sl_decision got = take(lims[i], "k", c, now);
        got.delay_ns = 0; /* leaky_bucket's queue wait: not modelled */
        if (got.allowed != want.allowed || got.remaining != want.remaining ||
            got.reset_ns != want.reset_ns ||
            got.retry_after_ns != want.retry_after_ns)
          fail_msg(
              "%s %s step %d: take %lld with debt %lld ticks: got "
              "%d/%lld/%lld/%lld, want %d/%lld/%lld/%lld",
              BUCKETS[i], rates[k].rate, step, (long long)c, (long long)debt,
              got.allowed, (long long)got.remaining, (long long)got.reset_ns,
              (long long)got.retry_after_ns, want.allowed,
              (long long)want.remaining, (long long)want.reset_ns,
              (long long)want.retry_after_ns);
        assert_same_decision(&got, &want);
      }
      if (want.allowed) debt = after;
    }
    for (size_t i = 0; i < NBUCKETS; i++) sl_limiter_free(lims[i]);
  }
  sl_store_free(s);
}

/*
 * algo_fill_max = max(cap, 2^53 - 2*Lg - cap) ticks bounds a bucket's
 * debt. At 1/d (Lg = 1, Wg = 86400e9 ticks per unit):
 *   burst 50:  cap = 4.32e15, fill_max = 2^53 - 2 - 4.32e15
 *              = 4687199254740990, so the level stops at
 *              floor((cap - fill_max) / Wg) = floor(-367199254740990 /
 *              86400e9) = floor(-4.25) = -5;
 *   burst 100: cap = 8.64e15 > 2^53 - 2 - cap, so fill_max = cap: the
 *              bucket cannot go below empty at all.
 */
static void bucket_debt_stops_at_fill_max(void **state) {
  (void)state;
  const int64_t day = SEC(86400), fill_max = INT64_C(4687199254740990);
  sl_store *s = store_opts(0, 0);
  for (size_t i = 0; i < NBUCKETS; i++) {
    char spec[64];
    snprintf(spec, sizeof spec, "%s:1/d:burst=50", BUCKETS[i]);
    sl_limiter *lim = limiter_of(s, spec);
    assert_int_equal(force(lim, "k", 50, T0), 0);
    assert_int_equal(force(lim, "k", 50, T0), -5); /* clamped */
    assert_int_equal(force(lim, "k", 1, T0), -5);  /* nothing more */
    /* The debt is fill_max ticks = ns: one unit fits after
       fill_max - cap + 1 unit = 367199254740990 + 86400e9 ns. */
    int64_t retry = fill_max - 50 * day + day;
    assert_int_equal(retry, INT64_C(453599254740990));
    sl_decision d = take(lim, "k", 1, T0);
    assert_denied(&d, retry, fill_max);
    d = take(lim, "k", 1, T0 + retry - 1);
    assert_denied(&d, 1, fill_max - retry + 1);
    d = take(lim, "k", 1, T0 + retry);
    assert_allowed(&d, 0, 50 * day);
    sl_limiter_free(lim);

    snprintf(spec, sizeof spec, "%s:1/d:burst=100", BUCKETS[i]);
    lim = limiter_of(s, spec);
    assert_int_equal(force(lim, "k", 100, T0), 0);
    assert_int_equal(force(lim, "k", 100, T0), 0);
    assert_int_equal(force(lim, "k", 1, T0 + 1), 0);
    /* Empty, not in debt: one unit refills in exactly one day. */
    d = take(lim, "k", 1, T0 + 1);
    assert_denied(&d, day, 100 * day);
    assert_true(take(lim, "k", 1, T0 + 1 + day).allowed);
    sl_limiter_free(lim);
  }
  sl_store_free(s);
}

/*
 * 4294967254/322ms, burst 27972655 (the largest the Redis script takes):
 * Lg = 2147483627 ticks a ns and Wg = 161000000 a unit (T < 1 ns), cap =
 * 27972655 Wg and fill_max = cap + 49773738, so a debt stops at level
 * floor(-49773738 / Wg) = -1. Charged to the stop at T0, then 1 unit at
 * T0 + 1: the debt is fill_max - Lg + Wg there, level
 * floor((-49773738 + Lg - Wg) / Wg) = 12. gcra and leaky_bucket, seen from
 * T0 again, owe fill_max + Wg: past the stop by under a ns, read at the
 * stop (-1, not -2), and a charge there changes nothing (12 at T0 + 1
 * still). (token_bucket takes an earlier time as its last update: it
 * never sees a debt past its stop.) decide.lua once read such a debt as
 * it stood (parity's past_fm_traces).
 */
static void a_debt_past_fill_max_by_under_a_ns_reads_at_the_stop(
    void **state) {
  (void)state;
  sl_store *s = store_opts(0, 0);
  static const char *const tat[] = {"gcra", "leaky_bucket"};
  for (size_t i = 0; i < 2; i++) {
    char spec[96];
    snprintf(spec, sizeof spec, "%s:4294967254/322ms:burst=27972655",
             tat[i]);
    sl_limiter *lim = limiter_of(s, spec);
    assert_int_equal(force(lim, "k", 100055310, T0), -1);
    assert_int_equal(force(lim, "k", 1, T0 + 1), 12);
    assert_int_equal(level_of(lim, "k", T0), -1);
    assert_int_equal(force(lim, "k", 42109064, T0), -1);
    assert_int_equal(level_of(lim, "k", T0 + 1), 12);
    assert_false(take(lim, "k", 1, T0).allowed);
    sl_limiter_free(lim);
  }
  sl_store_free(s);
}

/* ---- the windows ---- */

/*
 * fixed_window 10/s, windows [T0 + k s, T0 + (k+1) s): 10 then 5 forced
 * at T0 + 300 ms count 15, level 10 - 15 = -5. Every take of that window is
 * denied until its end, 700 ms later; the next window starts at 0.
 */
static void fixed_window_debt_denies_until_the_window_ends(void **state) {
  (void)state;
  sl_store *s = store_opts(0, 0);
  sl_limiter *lim = limiter_of(s, "fixed_window:10/s");
  assert_int_equal(force(lim, "k", 10, T0 + MS(300)), 0);
  assert_int_equal(force(lim, "k", 5, T0 + MS(300)), -5);
  sl_decision d = take(lim, "k", 1, T0 + MS(300));
  assert_denied(&d, MS(700), MS(700));
  assert_int_equal(d.limit, 10);
  d = take(lim, "k", 10, T0 + MS(800));
  assert_denied(&d, MS(200), MS(200));
  d = take(lim, "k", 1, T0 + SEC(1) - 1);
  assert_denied(&d, 1, 1);
  /* A peek in the debt window is allowed and reports 0, not -5. */
  d = take(lim, "k", 0, T0 + MS(500));
  assert_allowed(&d, 0, MS(500));
  assert_int_equal(level_of(lim, "k", T0 + SEC(1) - 1), -5);

  /* The next window owes nothing. */
  assert_int_equal(level_of(lim, "k", T0 + SEC(1)), 10);
  d = take(lim, "k", 10, T0 + SEC(1));
  assert_allowed(&d, 0, SEC(1));
  d = take(lim, "k", 1, T0 + SEC(1) + MS(1));
  assert_denied(&d, MS(999), MS(999));
  /* A force stamped in the earlier window counts in the stored one. */
  assert_int_equal(force(lim, "k", 3, T0 + MS(900)), -3);
  assert_int_equal(level_of(lim, "k", T0 + SEC(1)), -3);
  sl_limiter_free(lim);
  sl_store_free(s);
}

/*
 * sliding_window 10/s: 10 then 5 forced at T0 (a window start): curr = 15,
 * level -5. The estimate at elapsed e of the next window is 15*(W - e)/W.
 * A take of 1 fits when 15*(W - e)/W + 1 <= 10, i.e. W - e <= 0.6 W:
 * e = 400 ms, so at T0 + 1.4 s. reset: 2W while curr > 0.
 */
static void sliding_window_debt_denies_until_the_estimate_drops(void **state) {
  (void)state;
  sl_store *s = store_opts(0, 0);
  sl_limiter *lim = limiter_of(s, "sliding_window:10/s");
  assert_int_equal(force(lim, "k", 10, T0), 0);
  assert_int_equal(force(lim, "k", 5, T0), -5);
  sl_decision d = take(lim, "k", 1, T0);
  assert_denied(&d, MS(1400), SEC(2));
  d = take(lim, "k", 0, T0);
  assert_allowed(&d, 0, SEC(2));

  /* Levels: 10 - 15*(W - e)/W, floored. */
  assert_int_equal(level_of(lim, "k", T0 + SEC(1)), -5);
  assert_int_equal(level_of(lim, "k", T0 + MS(1200)), -2); /* 10 - 12 */
  assert_int_equal(level_of(lim, "k", T0 + MS(1300)), -1); /* -0.5 */
  assert_int_equal(level_of(lim, "k", T0 + MS(1400) - 1), 0);
  assert_int_equal(level_of(lim, "k", T0 + MS(1400)), 1);

  /* 1 ns early: the estimate is 9 + 15e-9; it is 9 one ns later. The key
     is fresh when the previous window has slid out, 600 ms + 1 ns on. */
  d = take(lim, "k", 1, T0 + MS(1400) - 1);
  assert_denied(&d, 1, MS(600) + 1);
  d = take(lim, "k", 1, T0 + MS(1400));
  assert_allowed(&d, 0, MS(1600));
  /* The window after: prev = 1 (the take), the forced 15 are gone. */
  assert_int_equal(level_of(lim, "k", T0 + SEC(2)), 9);
  sl_limiter_free(lim);
  sl_store_free(s);
}

/*
 * sliding_log 3/s: 3 then 2 forced at T0 log 5 at one instant, level -2.
 * They leave the window exactly W later (an entry at t counts while
 * t > now - W), and the key allows again then.
 */
static void sliding_log_forced_entries_expire_exactly_one_period_later(
    void **state) {
  (void)state;
  sl_store *s = store_opts(0, 0);
  sl_limiter *lim = limiter_of(s, "sliding_log:3/s");
  assert_int_equal(force(lim, "k", 3, T0), 0);
  assert_int_equal(force(lim, "k", 2, T0), -2);
  sl_decision d = take(lim, "k", 0, T0 + MS(10));
  assert_allowed(&d, 0, MS(990));
  d = take(lim, "k", 1, T0 + SEC(1) - 1);
  assert_denied(&d, 1, 1);
  assert_int_equal(level_of(lim, "k", T0 + SEC(1) - 1), -2);
  assert_int_equal(level_of(lim, "k", T0 + SEC(1)), 3);
  d = take(lim, "k", 1, T0 + SEC(1));
  assert_allowed(&d, 2, SEC(1));
  sl_limiter_free(lim);
  sl_store_free(s);
}

/*
 * sliding_log 3/s holds one entry per distinct instant; forced charges can
 * hold many more than LIMIT of them. 1000 of cost 1 at T0 + i ms: level
 * 3 - 1000. A take of 1 at T0 + 999 ms must wait for 1000 + 1 - 3 = 998
 * to leave, the 998th at T0 + 997 ms: retry = 997 ms + 1 s - 999 ms.
 */
static void sliding_log_holds_more_than_limit_forced_entries(void **state) {
  (void)state;
  sl_store *s = store_opts(0, 0);
  sl_limiter *lim = limiter_of(s, "sliding_log:3/s");
  for (int i = 0; i < 1000; i++) {
    int64_t level = INT64_MIN;
    int rc = sl_limiter_force(lim, "k", 1, 1, T0 + MS(i), &level);
    if (rc) fail_msg("force #%d: %s", i, sl_err_name(rc));
    assert_int_equal(level, 3 - (i + 1));
  }
  assert_int_equal(stats_of(s).keys, 1);
  sl_decision d = take(lim, "k", 1, T0 + MS(999));
  assert_denied(&d, MS(998), SEC(1));
  /* At T0 + 1996 ms the entries up to T0 + 996 ms are gone: 3 live. */
  assert_int_equal(level_of(lim, "k", T0 + MS(1996)), 0);
  d = take(lim, "k", 1, T0 + MS(1996));
  assert_denied(&d, MS(1), MS(3));
  d = take(lim, "k", 1, T0 + MS(1997));
  assert_allowed(&d, 0, SEC(1));
  sl_limiter_free(lim);
  sl_store_free(s);
}

/*
 * A random trace on sliding_log against a model that keeps every charged
 * (time, cost) entry: live = the costs with time > now - W. Forced charges
 * always log; a take logs iff live + cost <= LIMIT (peeks are allowed).
 */
static void sliding_log_in_debt_agrees_with_a_model(void **state) {
  (void)state;
  enum { STEPS = 3000 };
  static const char *const specs[] = {"sliding_log:3/s", "sliding_log:5/100ms",
                                      "sliding_log:1/7ms"};
  static const int64_t limits[] = {3, 5, 1},
                       periods[] = {SEC(1), MS(100), MS(7)};
  int64_t *at = malloc(STEPS * sizeof *at),
          *cost = malloc(STEPS * sizeof *cost);
  assert_non_null(at);
  assert_non_null(cost);
  sl_store *s = store_opts(0, 0);
  rng r = {UINT64_C(0x510b)};
  for (size_t k = 0; k < sizeof specs / sizeof *specs; k++) {
    sl_limiter *lim = limiter_of(s, specs[k]);
    int64_t L = limits[k], W = periods[k], now = T0;
    int n = 0, first = 0; /* entries [first, n) may be live */
    for (int step = 0; step < STEPS; step++) {
      int64_t roll = rng_range(&r, 0, 9);
      if (roll >= 3 && roll <= 6) now += rng_range(&r, 1, W / L);
      if (roll >= 7 && roll <= 8) now += rng_range(&r, 1, W);
      if (roll == 9) now += rng_range(&r, W, 2 * W);
      while (first < n && at[first] <= now - W) first++;
      int64_t live = 0;
      for (int i = first; i < n; i++) live += cost[i];
      int64_t c = rng_range(&r, 0, L);
      if (rng_range(&r, 0, 9) < 4) {
        assert_int_equal(force(lim, "k", c, now), L - live - c);
        if (c) {
          at[n] = now;
          cost[n++] = c;
        }
        continue;
      }
      sl_decision want = {0, L, 0, 0, 0, 0, 0};
      if (live + c <= L || c == 0) {
        want.allowed = 1;
        want.remaining = L - live - c > 0 ? L - live - c : 0;
        if (c)
          want.reset_ns = W;
        else if (first < n)
          want.reset_ns = at[n - 1] + W - now;
      } else {
        want.remaining = L - live > 0 ? L - live : 0;
        want.reset_ns = at[n - 1] + W - now;
        int64_t need = live + c - L, freed = 0;
        for (int i = first; freed < need; i++) {
          freed += cost[i];
          want.retry_after_ns = at[i] + W - now;
        }
      }
      sl_decision got = take(lim, "k", c, now);
      if (got.allowed != want.allowed || got.remaining != want.remaining ||
          got.reset_ns != want.reset_ns ||
          got.retry_after_ns != want.retry_after_ns)
        fail_msg(
            "%s step %d: take %lld with %lld live: got %d/%lld/%lld/%lld"
            ", want %d/%lld/%lld/%lld",
            specs[k], step, (long long)c, (long long)live, got.allowed,
            (long long)got.remaining, (long long)got.reset_ns,
            (long long)got.retry_after_ns, want.allowed,
            (long long)want.remaining, (long long)want.reset_ns,
            (long long)want.retry_after_ns);
      assert_same_decision(&got, &want);
      if (want.allowed && c) {
        at[n] = now;
        cost[n++] = c;
      }
    }
    sl_limiter_free(lim);
  }
  free(at);
  free(cost);
  sl_store_free(s);
}

/*
 * A window's count stops at UINT32_MAX = 4294967295. With LIMIT 4e9, two
 * forced charges of 4e9 count 4e9 + (4294967295 - 4e9): the second
 * charges only 294967295, level 4e9 - 4294967295 = -294967295; a third
 * charges nothing. With LIMIT 4294967295 the first charge already fills
 * the count, so the second leaves the level at 0.
 */
static void window_debt_stops_at_uint32_max(void **state) {
  (void)state;
  const int64_t big = INT64_C(4000000000), max = UINT32_MAX;
  static const char *const specs[] = {"fixed_window:4000000000/s",
                                      "sliding_window:4000000000/s",
                                      "sliding_log:4000000000/s"};
  sl_store *s = store_opts(0, 0);
  for (size_t i = 0; i < sizeof specs / sizeof *specs; i++) {
    sl_limiter *lim = limiter_of(s, specs[i]);
    assert_int_equal(force(lim, "k", big, T0), 0);
    assert_int_equal(force(lim, "k", big, T0 + 1), big - max);
    assert_int_equal(force(lim, "k", 1, T0 + 2), big - max);
    sl_decision d = take(lim, "k", 1, T0 + 2);
    assert_false(d.allowed);
    assert_int_equal(d.remaining, 0);
    assert_true(d.retry_after_ns > 0);
    sl_limiter_free(lim);
  }

  /* fixed_window: the next window starts at 0 again. */
  sl_limiter *lim = limiter_of(s, "fixed_window:4000000000/s");
  force(lim, "k", big, T0);
  force(lim, "k", big, T0);
  assert_int_equal(level_of(lim, "k", T0 + SEC(1)), big);
  sl_decision d = take(lim, "k", big, T0 + SEC(1));
  assert_allowed(&d, 0, SEC(1));
  sl_limiter_free(lim);

  /* sliding_log: the entry at T0 (4e9) leaves at T0 + W, the one at
     T0 + 1 (294967295) 1 ns later. */
  lim = limiter_of(s, "sliding_log:4000000000/s");
  force(lim, "k", big, T0);
  force(lim, "k", big, T0 + 1);
  assert_int_equal(level_of(lim, "k", T0 + SEC(1)), big - (max - big));
  assert_int_equal(level_of(lim, "k", T0 + SEC(1) + 1), big);
  sl_limiter_free(lim);

  /* LIMIT = UINT32_MAX: a full charge fills the count; the next is void. */
  lim = limiter_of(s, "fixed_window:4294967295/s");
  assert_int_equal(force(lim, "k", max, T0), 0);
  assert_int_equal(force(lim, "k", max, T0), 0);
  d = take(lim, "k", 1, T0 + MS(250));
  assert_denied(&d, MS(750), MS(750));
  sl_limiter_free(lim);
  sl_store_free(s);
}

/* ---- errors ---- */

static void force_rejects_bad_arguments_and_charges_nothing(void **state) {
  (void)state;
  sl_store *s = store_opts(0, 0);
  char big[SL_KEY_MAX + 1];
  memset(big, 'x', sizeof big);
  for (size_t i = 0; i < NPOLICIES; i++) {
    sl_limiter *lim = limiter_of(s, POLICIES[i]);
    int64_t b = largest_cost(lim), level = 0;
    for (int charged = 0; charged < 2; charged++) {
      /* Once on a fresh key, once on a key emptied by a forced charge. */
      int64_t want = charged ? 0 : b;
      if (charged) force(lim, "k", b, T0);
      assert_int_equal(sl_limiter_force(lim, "k", 1, -1, T0, &level),
                       SL_EINVAL);
      assert_int_equal(sl_limiter_force(lim, "k", 1, 1, T0, NULL), SL_EINVAL);
      assert_int_equal(sl_limiter_force(NULL, "k", 1, 1, T0, &level),
                       SL_EINVAL);
      assert_int_equal(sl_limiter_force(lim, NULL, 1, 1, T0, &level),
                       SL_EINVAL);
      assert_int_equal(sl_limiter_force(lim, big, sizeof big, 1, T0, &level),
                       SL_EKEY);
      assert_int_equal(sl_limiter_force(lim, "k", 1, 1, -1, &level), SL_ETIME);
      assert_int_equal(sl_limiter_force(lim, "k", 1, 1, SL_TIME_MAX_NS, &level),
                       SL_ETIME);
      assert_int_equal(level_of(lim, "k", T0), want);
      assert_int_equal(stats_of(s).keys, charged);
    }
    sl_limiter_free(lim);
  }
  sl_store_free(s);
}

/* Unlike a take, a forced charge takes any cost: what the sync pushes is
   what a daemon admitted in an interval, often more than one burst. */
static void force_takes_costs_above_the_largest(void **state) {
  (void)state;
  sl_store *s = store_opts(0, 0);
  sl_limiter *tb = limiter_of(s, "token_bucket:10/s:burst=5");
  assert_int_equal(force(tb, "k", 12, T0), 5 - 12);
  sl_decision d = take(tb, "k", 1, T0);
  assert_denied(&d, MS(800), SEC(1) + MS(200)); /* 8 tokens at 100 ms */
  sl_limiter *fw = limiter_of(s, "fixed_window:10/s");
  assert_int_equal(force(fw, "k", 25, T0), 10 - 25);
  sl_limiter_free(tb);
  sl_limiter_free(fw);
  sl_store_free(s);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(force_zero_on_fresh_key_reads_full_and_stores_nothing),
      cmocka_unit_test(force_zero_on_a_debt_changes_nothing),
      cmocka_unit_test(store_expire_keeps_a_key_in_debt),
      cmocka_unit_test(peek_on_a_debt_is_allowed_with_remaining_zero),
      cmocka_unit_test(bucket_debt_is_repaid_at_the_exact_refill_instant),
      cmocka_unit_test(buckets_in_debt_agree_with_a_model),
      cmocka_unit_test(bucket_debt_stops_at_fill_max),
      cmocka_unit_test(a_debt_past_fill_max_by_under_a_ns_reads_at_the_stop),
      cmocka_unit_test(fixed_window_debt_denies_until_the_window_ends),
      cmocka_unit_test(sliding_window_debt_denies_until_the_estimate_drops),
      cmocka_unit_test(
          sliding_log_forced_entries_expire_exactly_one_period_later),
      cmocka_unit_test(sliding_log_holds_more_than_limit_forced_entries),
      cmocka_unit_test(sliding_log_in_debt_agrees_with_a_model),
      cmocka_unit_test(window_debt_stops_at_uint32_max),
      cmocka_unit_test(force_rejects_bad_arguments_and_charges_nothing),
      cmocka_unit_test(force_takes_costs_above_the_largest),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
