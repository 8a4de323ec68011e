/*
 * test_algorithms.c — the six algorithms through the public API: the worked
 * examples of the spec, peeks, errors, clocks going backwards, reset and
 * retry_after figures, decision.limit.
 */
#include "helpers.h"

#define MIN_NS (INT64_C(60) * NS_PER_S)

/* One policy per algorithm with burst != limit where burst exists. */
static const char *const one_of_each[] = {
    "token_bucket:5/s:burst=8", "leaky_bucket:5/s:burst=8",
    "gcra:5/s:burst=8",         "fixed_window:8/s",
    "sliding_log:8/s",          "sliding_window:8/s",
};
#define N_EACH (sizeof one_of_each / sizeof one_of_each[0])

typedef struct fx {
  sl_store *s;
  sl_limiter *lim;
} fx;

static fx fx_of(const char *spec) {
  fx f;
  f.s = store_with_cap(0);
  f.lim = limiter_of(f.s, spec);
  return f;
}

static void fx_free(fx *f) {
  sl_limiter_free(f->lim);
  sl_store_free(f->s);
}

static int take_rc(sl_limiter *lim, const char *key, int64_t cost, int64_t now) {
  sl_decision d;
  return sl_limiter_take(lim, key, strlen(key), cost, now, &d);
}

/* ---- worked example 1: 2/s burst 10 ---------------------------------------- */

static void check_example_one(const char *spec) {
  fx f = fx_of(spec);
  sl_decision d = take(f.lim, "k", 1, T0);
  assert_true(d.allowed);
  assert_int_equal(d.remaining, 9);
  d = take(f.lim, "k", 1, T0 + MS(200)); /* 9 + 0.4 - 1 = 8.4 */
  assert_true(d.allowed);
  assert_int_equal(d.remaining, 8);
  for (int i = 0; i < 8; i++) { /* 8.6 tokens at 300 ms */
    d = take(f.lim, "k", 1, T0 + MS(300));
    assert_true(d.allowed);
    assert_int_equal(d.retry_after_ns, 0);
    assert_int_equal(d.remaining, 7 - i);
  }
  d = take(f.lim, "k", 1, T0 + MS(300)); /* 0.6 tokens: the first deny */
  assert_false(d.allowed);
  assert_int_equal(d.remaining, 0);
  assert_int_equal(d.retry_after_ns, MS(200));
  assert_int_equal(d.delay_ns, 0);
  d = take(f.lim, "k", 1, T0 + MS(2800)); /* 0.6 + 5 - 1 = 4.6 */
  assert_true(d.allowed);
  assert_int_equal(d.remaining, 4);
  d = take(f.lim, "k", 1, T0 + MS(5800)); /* capped at 10, minus 1 */
  assert_true(d.allowed);
  assert_int_equal(d.remaining, 9);
  fx_free(&f);
}

static void token_bucket_worked_example(void **state) {
  (void)state;
  check_example_one("token_bucket:2/s:burst=10");
}

static void gcra_worked_example(void **state) {
  (void)state;
  check_example_one("gcra:2/s:burst=10");
}

static void leaky_bucket_worked_example(void **state) {
  (void)state;
  check_example_one("leaky_bucket:2/s:burst=10");
}

/* ---- worked example 2: capacity 100, refill 50/s ------------------------- */

static void check_burst_of_130(const char *spec) {
  fx f = fx_of(spec);
  int allowed = 0;
  for (int i = 0; i < 130; i++) {
    sl_decision d = take(f.lim, "k", 1, T0);
    if (d.allowed) {
      allowed++;
      assert_true(i < 100);
    } else {
      assert_int_equal(d.retry_after_ns, MS(20));
      assert_int_equal(d.remaining, 0);
    }
  }
  assert_int_equal(allowed, 100);
  sl_decision d = take(f.lim, "k", 1, T0 + MS(20) - 1);
  assert_false(d.allowed);
  assert_int_equal(d.retry_after_ns, 1);
  d = take(f.lim, "k", 1, T0 + MS(20));
  assert_true(d.allowed);
  assert_int_equal(d.remaining, 0);
  d = take(f.lim, "k", 1, T0 + MS(20));
  assert_false(d.allowed);
  assert_int_equal(d.retry_after_ns, MS(20));
  fx_free(&f);
}

static void token_bucket_burst_of_130_allows_100_then_one_per_20ms(void **state) {
  (void)state;
  check_burst_of_130("token_bucket:50/s:burst=100");
}

static void gcra_burst_of_130_allows_100_then_one_per_20ms(void **state) {
  (void)state;
  check_burst_of_130("gcra:50/s:burst=100");
}

static void leaky_bucket_burst_of_130_allows_100_then_one_per_20ms(void **state) {
  (void)state;
  check_burst_of_130("leaky_bucket:50/s:burst=100");
}

/* ---- worked example 3: the boundary burst -------------------------------- */

/* 100 at 59.9 s and 100 at 60.0 s of an epoch-aligned minute. */
static int allowed_across_minute_boundary(const char *spec) {
  fx f = fx_of(spec);
  int allowed = 0;
  for (int i = 0; i < 100; i++) allowed += take(f.lim, "k", 1, T0 + MS(59900)).allowed;
  for (int i = 0; i < 100; i++) allowed += take(f.lim, "k", 1, T0 + MS(60000)).allowed;
  fx_free(&f);
  return allowed;
}

static void fixed_window_lets_twice_the_limit_through_across_a_boundary(void **state) {
  (void)state;
  assert_int_equal(allowed_across_minute_boundary("fixed_window:100/m"), 200);
}

static void sliding_log_lets_only_the_limit_through_across_a_boundary(void **state) {
  (void)state;
  assert_int_equal(allowed_across_minute_boundary("sliding_log:100/m"), 100);
}

static void sliding_window_lets_only_the_limit_through_across_a_boundary(void **state) {
  (void)state;
  assert_int_equal(allowed_across_minute_boundary("sliding_window:100/m"), 100);
}

/* ---- worked example 4: the weighted estimate ------------------------------- */

static void sliding_window_weights_the_previous_window(void **state) {
  (void)state;
  fx f = fx_of("sliding_window:100/m");
  for (int i = 0; i < 80; i++) /* prev = 80, spread over the first window */
    assert_true(take(f.lim, "k", 1, T0 + MS(500) * i).allowed);
  for (int i = 0; i < 20; i++) /* curr = 20, before 30% of the second */
    assert_true(take(f.lim, "k", 1, T0 + MIN_NS + MS(100) * i).allowed);
  int64_t t = T0 + MIN_NS + MS(18000); /* 30% in: 80*0.7 + 20 = 76 */
  sl_decision d = take(f.lim, "k", 0, t);
  assert_true(d.allowed);
  assert_int_equal(d.remaining, 24);
  assert_int_equal(d.reset_ns, 2 * MIN_NS - MS(18000));
  d = take(f.lim, "k", 25, t);
  assert_false(d.allowed);
  assert_int_equal(d.remaining, 24);
  /* 80 * (42 s - d) / 60 s <= 55  <=>  d >= 750 ms */
  assert_int_equal(d.retry_after_ns, MS(750));
  assert_false(take(f.lim, "k", 25, t + MS(750) - 1).allowed);
  d = take(f.lim, "k", 24, t);
  assert_true(d.allowed);
  assert_int_equal(d.remaining, 0);
  fx_free(&f);
}

/* ---- worked example 5: 10 per 15 minutes, exact ------------------------ */

static void sliding_log_denies_eleventh_until_exactly_first_plus_period(void **state) {
  (void)state;
  fx f = fx_of("sliding_log:10/15m");
  int64_t first = T0 + SEC(7), w = 15 * MIN_NS;
  for (int i = 0; i < 10; i++)
    assert_true(take(f.lim, "k", 1, first + SEC(30) * i).allowed);
  sl_decision d = take(f.lim, "k", 1, first + 5 * MIN_NS);
  assert_false(d.allowed);
  assert_int_equal(d.retry_after_ns, w - 5 * MIN_NS);
  d = take(f.lim, "k", 1, first + w - 1);
  assert_false(d.allowed);
  assert_int_equal(d.retry_after_ns, 1);
  d = take(f.lim, "k", 1, first + w);
  assert_true(d.allowed);
  assert_int_equal(d.remaining, 0);
  d = take(f.lim, "k", 1, first + w); /* next frees when first+30s leaves */
  assert_false(d.allowed);
  assert_int_equal(d.retry_after_ns, SEC(30));
  fx_free(&f);
}

/* ---- more retry_after ------------------------------------------------------ */

static void fixed_window_retry_after_is_time_to_window_end(void **state) {
  (void)state;
  fx f = fx_of("fixed_window:3/m");
  for (int i = 0; i < 3; i++) assert_true(take(f.lim, "k", 1, T0 + SEC(10)).allowed);
  sl_decision d = take(f.lim, "k", 1, T0 + SEC(10));
  assert_false(d.allowed);
  assert_int_equal(d.retry_after_ns, SEC(50));
  assert_int_equal(d.remaining, 0);
  assert_false(take(f.lim, "k", 1, T0 + MIN_NS - 1).allowed);
  d = take(f.lim, "k", 3, T0 + MIN_NS);
  assert_true(d.allowed);
  assert_int_equal(d.remaining, 0);
  fx_free(&f);
}

static void bucket_retry_after_rounds_fractional_ns_up(void **state) {
  (void)state;
  static const char *const specs[] = {"token_bucket:3/s:burst=1",
                                      "gcra:3/s:burst=1",
                                      "leaky_bucket:3/s:burst=1"};
  for (size_t i = 0; i < 3; i++) {
    fx f = fx_of(specs[i]);
    assert_true(take(f.lim, "k", 1, T0).allowed);
    sl_decision d = take(f.lim, "k", 1, T0);
    assert_false(d.allowed);
    assert_int_equal(d.retry_after_ns, 333333334); /* ceil(1e9 / 3) */
    assert_false(take(f.lim, "k", 1, T0 + 333333333).allowed);
    assert_true(take(f.lim, "k", 1, T0 + 333333334).allowed);
    fx_free(&f);
  }
}

static void allowed_request_has_zero_retry_after(void **state) {
  (void)state;
  for (size_t i = 0; i < N_EACH; i++) {
    fx f = fx_of(one_of_each[i]);
    for (int k = 0; k < 8; k++) {
      sl_decision d = take(f.lim, "k", 1, T0 + MS(10) * k);
      assert_true(d.allowed);
      assert_int_equal(d.retry_after_ns, 0);
    }
    fx_free(&f);
  }
}

/* ---- leaky_bucket's delays ------------------------------------------------- */

static void leaky_bucket_delays_a_burst_by_multiples_of_T(void **state) {
  (void)state;
  fx f = fx_of("leaky_bucket:2/s:burst=5");
  for (int i = 0; i < 5; i++) {
    sl_decision d = take(f.lim, "k", 1, T0);
    assert_true(d.allowed);
    assert_int_equal(d.delay_ns, MS(500) * i);
  }
  /* The queue drained one unit by 500 ms; the next leaves T after the last. */
  sl_decision d = take(f.lim, "k", 1, T0 + MS(500));
  assert_true(d.allowed);
  assert_int_equal(d.delay_ns, MS(2000));
  fx_free(&f);
}

static void leaky_bucket_delay_rounds_fractional_T_up(void **state) {
  (void)state;
  fx f = fx_of("leaky_bucket:3/s");
  assert_int_equal(take(f.lim, "k", 1, T0).delay_ns, 0);
  assert_int_equal(take(f.lim, "k", 1, T0).delay_ns, 333333334);
  assert_int_equal(take(f.lim, "k", 1, T0).delay_ns, 666666667);
  fx_free(&f);
}

static void leaky_bucket_denied_request_has_no_delay(void **state) {
  (void)state;
  fx f = fx_of("leaky_bucket:2/s:burst=5");
  for (int i = 0; i < 5; i++) assert_true(take(f.lim, "k", 1, T0).allowed);
  sl_decision d = take(f.lim, "k", 1, T0 + MS(250));
  assert_false(d.allowed);
  assert_int_equal(d.delay_ns, 0);
  assert_int_equal(d.retry_after_ns, MS(250));
  fx_free(&f);
}

static void only_leaky_bucket_reports_a_delay(void **state) {
  (void)state;
  for (size_t i = 0; i < N_EACH; i++) {
    if (strncmp(one_of_each[i], "leaky_bucket", 12) == 0) continue;
    fx f = fx_of(one_of_each[i]);
    for (int k = 0; k < 10; k++)
      assert_int_equal(take(f.lim, "k", 1, T0 + MS(10) * k).delay_ns, 0);
    fx_free(&f);
  }
}

/* ---- peeks ---------------------------------------------------------------- */

static void peek_changes_nothing(void **state) {
  (void)state;
  for (size_t i = 0; i < N_EACH; i++) {
    fx f = fx_of(one_of_each[i]);
    /* "a" and "b" see the same traffic; only "a" is peeked at. */
    const int64_t ts[] = {T0 + MS(900), T0 + MS(950), T0 + MS(1300)};
    const int64_t cs[] = {3, 2, 2};
    for (int k = 0; k < 3; k++) {
      sl_decision da = take(f.lim, "a", cs[k], ts[k]);
      sl_decision db = take(f.lim, "b", cs[k], ts[k]);
      assert_same_decision(&da, &db);
      sl_decision p1 = take(f.lim, "a", 0, ts[k]);
      sl_decision p2 = take(f.lim, "a", 0, ts[k]);
      assert_true(p1.allowed);
      assert_int_equal(p1.retry_after_ns, 0);
      assert_same_decision(&p1, &p2);
      assert_int_equal(p1.remaining, da.remaining);
    }
    for (int k = 0; k < 12; k++) {
      int64_t t = T0 + MS(1300) + MS(70) * k;
      sl_decision p = take(f.lim, "a", 0, t);
      assert_true(p.allowed);
      sl_decision da = take(f.lim, "a", 1, t);
      sl_decision db = take(f.lim, "b", 1, t);
      assert_same_decision(&da, &db);
    }
    fx_free(&f);
  }
}

static void peek_is_allowed_when_exhausted(void **state) {
  (void)state;
  for (size_t i = 0; i < N_EACH; i++) {
    fx f = fx_of(one_of_each[i]);
    assert_true(take(f.lim, "k", 8, T0 + MS(100)).allowed);
    assert_false(take(f.lim, "k", 1, T0 + MS(100)).allowed);
    sl_decision d = take(f.lim, "k", 0, T0 + MS(100));
    assert_true(d.allowed);
    assert_int_equal(d.remaining, 0);
    assert_int_equal(d.retry_after_ns, 0);
    assert_true(d.reset_ns > 0);
    fx_free(&f);
  }
}

static void peek_on_fresh_key_reports_full_quota_and_stores_nothing(void **state) {
  (void)state;
  for (size_t i = 0; i < N_EACH; i++) {
    fx f = fx_of(one_of_each[i]);
    sl_decision d = take(f.lim, "k", 0, T0 + MS(123));
    assert_true(d.allowed);
    assert_int_equal(d.remaining, 8);
    assert_int_equal(d.limit, 8);
    assert_int_equal(d.reset_ns, 0);
    assert_int_equal(d.retry_after_ns, 0);
    assert_int_equal(d.delay_ns, 0);
    sl_store_stats st;
    sl_store_stats_get(f.s, &st);
    assert_int_equal(st.keys, 0);
    fx_free(&f);
  }
}

/* ---- argument errors ------------------------------------------------------- */

static void cost_above_capacity_is_ecost(void **state) {
  (void)state;
  for (size_t i = 0; i < N_EACH; i++) {
    fx f = fx_of(one_of_each[i]);
    assert_int_equal(take_rc(f.lim, "k", 9, T0), SL_ECOST);
    assert_int_equal(take_rc(f.lim, "k", INT64_MAX, T0), SL_ECOST);
    /* Nothing was charged. */
    assert_int_equal(take(f.lim, "k", 0, T0).remaining, 8);
    fx_free(&f);
  }
}

static void cost_above_limit_but_within_burst_is_not_ecost(void **state) {
  (void)state;
  fx f = fx_of("gcra:2/s:burst=10");
  sl_decision d = take(f.lim, "k", 10, T0);
  assert_true(d.allowed);
  assert_int_equal(d.remaining, 0);
  fx_free(&f);
}

static void cost_equal_to_capacity_is_allowed_on_fresh_key(void **state) {
  (void)state;
  for (size_t i = 0; i < N_EACH; i++) {
    fx f = fx_of(one_of_each[i]);
    sl_decision d = take(f.lim, "k", 8, T0 + MS(400));
    assert_true(d.allowed);
    assert_int_equal(d.remaining, 0);
    fx_free(&f);
  }
}

static void negative_cost_is_einval(void **state) {
  (void)state;
  for (size_t i = 0; i < N_EACH; i++) {
    fx f = fx_of(one_of_each[i]);
    assert_int_equal(take_rc(f.lim, "k", -1, T0), SL_EINVAL);
    assert_int_equal(take_rc(f.lim, "k", INT64_MIN, T0), SL_EINVAL);
    fx_free(&f);
  }
}

static void time_out_of_range_is_etime(void **state) {
  (void)state;
  for (size_t i = 0; i < N_EACH; i++) {
    fx f = fx_of(one_of_each[i]);
    assert_int_equal(take_rc(f.lim, "k", 1, -1), SL_ETIME);
    assert_int_equal(take_rc(f.lim, "k", 1, INT64_MIN), SL_ETIME);
    assert_int_equal(take_rc(f.lim, "k", 1, SL_TIME_MAX_NS), SL_ETIME);
    assert_int_equal(take_rc(f.lim, "k", 1, INT64_MAX), SL_ETIME);
    assert_int_equal(take_rc(f.lim, "k", 0, -1), SL_ETIME);
    fx_free(&f);
  }
}

static void extreme_valid_times_are_decided(void **state) {
  (void)state;
  static const char *const specs[] = {
      "token_bucket:1/3650d", "leaky_bucket:1/3650d", "gcra:1/3650d",
      "fixed_window:1/3650d", "sliding_log:1/3650d", "sliding_window:1/3650d"};
  for (size_t i = 0; i < 6; i++) {
    fx f = fx_of(specs[i]);
    assert_true(take(f.lim, "lo", 1, 0).allowed);
    assert_false(take(f.lim, "lo", 1, 0).allowed);
    assert_true(take(f.lim, "hi", 1, SL_TIME_MAX_NS - 1).allowed);
    sl_decision d = take(f.lim, "hi", 1, SL_TIME_MAX_NS - 1);
    assert_false(d.allowed);
    assert_true(d.retry_after_ns > 0);
    assert_true(d.reset_ns > 0);
    fx_free(&f);
  }
}

static void long_key_is_ekey(void **state) {
  (void)state;
  fx f = fx_of("gcra:5/s");
  static char key[SL_KEY_MAX + 1];
  memset(key, 'x', sizeof key);
  sl_decision d;
  assert_int_equal(sl_limiter_take(f.lim, key, SL_KEY_MAX + 1, 1, T0, &d),
                   SL_EKEY);
  assert_int_equal(sl_limiter_take(f.lim, key, SL_KEY_MAX, 1, T0, &d), 0);
  assert_true(d.allowed);
  fx_free(&f);
}

/* ---- clock going backwards ------------------------------------------------ */

static void peek_is_allowed_even_when_the_clock_goes_back(void **state) {
  (void)state;
  /* gcra and leaky_bucket see more debt, sliding_window a larger weight on
     the previous window, at an earlier time: a real request may be denied
     there, but a peek (cost 0) is always allowed and never negative. */
  static const char *const specs[] = {"gcra:10/s", "leaky_bucket:10/s",
                                      "sliding_window:10/s"};
  for (size_t k = 0; k < sizeof specs / sizeof specs[0]; k++) {
    sl_store *s = store_with_cap(0);
    sl_limiter *lim = limiter_of(s, specs[k]);
    if (k == 2) { /* previous window full, then 4 near the current's end */
      for (int i = 0; i < 10; i++) take(lim, "k", 1, T0 + MS(500));
      for (int i = 0; i < 4; i++) take(lim, "k", 1, T0 + MS(1990));
      sl_decision d = take(lim, "k", 0, T0 + MS(1100));
      assert_true(d.allowed);
      assert_true(d.remaining >= 0);
      assert_int_equal(d.retry_after_ns, 0);
    } else {
      assert_true(take(lim, "k", 10, T0 + SEC(1)).allowed);
      sl_decision d = take(lim, "k", 0, T0 + MS(500));
      assert_true(d.allowed);
      assert_int_equal(d.remaining, 0);
      assert_int_equal(d.retry_after_ns, 0);
      assert_false(take(lim, "k", 1, T0 + MS(500)).allowed);
    }
    sl_limiter_free(lim);
    sl_store_free(s);
  }
}

static void clock_going_backwards_gives_no_extra_quota(void **state) {
  (void)state;
  const int64_t last = T0 + MS(10500);
  const int64_t earlier[] = {last - 1,          T0 + MS(10400), T0 + SEC(10),
                             T0 + SEC(9) + 1,   T0 + SEC(5),    T0,
                             T0 - SEC(3600)};
  for (size_t i = 0; i < N_EACH; i++) {
    fx f = fx_of(one_of_each[i]);
    /* Exhausted at `last`: nothing earlier may pass. */
    assert_true(take(f.lim, "x", 8, last).allowed);
    for (size_t k = 0; k < sizeof earlier / sizeof earlier[0]; k++) {
      sl_decision d = take(f.lim, "x", 1, earlier[k]);
      assert_false(d.allowed);
      assert_int_equal(d.remaining, 0);
      assert_true(d.retry_after_ns > 0);
    }
    /* Two left at `last`: earlier requests get at most those two. */
    assert_true(take(f.lim, "p", 6, last).allowed);
    int got = 0;
    for (size_t k = 0; k < sizeof earlier / sizeof earlier[0]; k++)
      got += take(f.lim, "p", 1, earlier[k]).allowed;
    while (take(f.lim, "p", 1, last).allowed) got++;
    if (got > 2)
      fail_msg("%s: %d extra units after the clock went back", one_of_each[i], got);
    fx_free(&f);
  }
}

static void denied_requests_in_the_past_change_nothing(void **state) {
  (void)state;
  for (size_t i = 0; i < N_EACH; i++) {
    fx f = fx_of(one_of_each[i]);
    const int64_t last = T0 + MS(10500);
    take(f.lim, "a", 8, last);
    take(f.lim, "b", 8, last);
    for (int k = 1; k <= 5; k++) take(f.lim, "a", 1, last - MS(700) * k);
    for (int k = 0; k < 30; k++) {
      int64_t t = last + MS(90) * k;
      sl_decision da = take(f.lim, "a", 1, t);
      sl_decision db = take(f.lim, "b", 1, t);
      assert_same_decision(&da, &db);
    }
    fx_free(&f);
  }
}

static void fixed_window_treats_an_earlier_window_as_the_stored_one(void **state) {
  (void)state;
  fx f = fx_of("fixed_window:3/m");
  assert_true(take(f.lim, "k", 2, T0 + MIN_NS + SEC(30)).allowed);
  /* At the start of the stored window: one left, the window ends in W. */
  sl_decision d = take(f.lim, "k", 0, T0 + SEC(10));
  assert_int_equal(d.remaining, 1);
  assert_int_equal(d.reset_ns, MIN_NS);
  assert_true(take(f.lim, "k", 1, T0 + SEC(10)).allowed);
  d = take(f.lim, "k", 1, T0 + SEC(10));
  assert_false(d.allowed);
  assert_int_equal(d.retry_after_ns, MIN_NS);
  assert_false(take(f.lim, "k", 1, T0 + MIN_NS + SEC(59)).allowed);
  assert_true(take(f.lim, "k", 3, T0 + 2 * MIN_NS).allowed);
  fx_free(&f);
}

/* ---- reset --------------------------------------------------------------- */

/* reset after one unit at 300 ms into a 1 s window/period. */
static void check_reset_after_one(const char *spec, int64_t want) {
  fx f = fx_of(spec);
  int64_t t = T0 + MS(300);
  sl_decision d = take(f.lim, "k", 1, t);
  assert_true(d.allowed);
  assert_int_equal(d.remaining, 7);
  if (d.reset_ns != want)
    fail_msg("%s: reset %lld, want %lld", spec, (long long)d.reset_ns,
             (long long)want);
  /* Full quota exactly at reset, not one ns before. */
  assert_false(take(f.lim, "k", 8, t + want - 1).allowed);
  d = take(f.lim, "k", 0, t + want - 1);
  assert_int_equal(d.reset_ns, 1);
  d = take(f.lim, "k", 0, t + want);
  assert_int_equal(d.remaining, 8);
  assert_int_equal(d.reset_ns, 0);
  assert_true(take(f.lim, "k", 8, t + want).allowed);
  fx_free(&f);
}

static void token_bucket_reset_after_one_request_is_T(void **state) {
  (void)state;
  check_reset_after_one("token_bucket:5/s:burst=8", MS(200));
}

static void gcra_reset_after_one_request_is_T(void **state) {
  (void)state;
  check_reset_after_one("gcra:5/s:burst=8", MS(200));
}

static void leaky_bucket_reset_after_one_request_is_T(void **state) {
  (void)state;
  check_reset_after_one("leaky_bucket:5/s:burst=8", MS(200));
}

static void fixed_window_reset_is_time_to_window_end(void **state) {
  (void)state;
  check_reset_after_one("fixed_window:8/s", MS(700));
}

static void sliding_window_reset_after_one_request_is_two_windows_less_elapsed(void **state) {
  (void)state;
  check_reset_after_one("sliding_window:8/s", MS(1700));
}

static void sliding_log_reset_after_one_request_is_the_period(void **state) {
  (void)state;
  check_reset_after_one("sliding_log:8/s", MS(1000));
}

static void token_bucket_reset_after_several_is_time_to_refill(void **state) {
  (void)state;
  fx f = fx_of("token_bucket:5/s:burst=8");
  sl_decision d = take(f.lim, "k", 3, T0);
  assert_int_equal(d.reset_ns, MS(600));
  d = take(f.lim, "k", 1, T0 + MS(100)); /* 5.5 - 1 = 4.5 tokens */
  assert_int_equal(d.reset_ns, MS(700));
  assert_int_equal(d.remaining, 4);
  fx_free(&f);
}

/* ---- decision.limit ----------------------------------------------------- */

static void decision_limit_is_burst_for_buckets_and_limit_for_windows(void **state) {
  (void)state;
  static const struct {
    const char *spec;
    int64_t limit;
  } cases[] = {
      {"token_bucket:5/s:burst=8", 8}, {"leaky_bucket:5/s:burst=3", 3},
      {"gcra:5/s:burst=12", 12},       {"gcra:5/s", 5},
      {"token_bucket:9/m", 9},         {"fixed_window:7/s", 7},
      {"sliding_log:6/s", 6},          {"sliding_window:4/s", 4},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    fx f = fx_of(cases[i].spec);
    assert_int_equal(take(f.lim, "k", 0, T0).limit, cases[i].limit);
    sl_decision d = take(f.lim, "k", cases[i].limit, T0);
    assert_true(d.allowed);
    assert_int_equal(d.limit, cases[i].limit);
    d = take(f.lim, "k", 1, T0);
    assert_false(d.allowed);
    assert_int_equal(d.limit, cases[i].limit);
    fx_free(&f);
  }
}

/* ---- keys ------------------------------------------------------------------ */

static void keys_are_independent(void **state) {
  (void)state;
  for (size_t i = 0; i < N_EACH; i++) {
    fx f = fx_of(one_of_each[i]);
    assert_true(take(f.lim, "a", 8, T0).allowed);
    assert_false(take(f.lim, "a", 1, T0).allowed);
    sl_decision d = take(f.lim, "b", 1, T0);
    assert_true(d.allowed);
    assert_int_equal(d.remaining, 7);
    fx_free(&f);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(token_bucket_worked_example),
      cmocka_unit_test(gcra_worked_example),
      cmocka_unit_test(leaky_bucket_worked_example),
      cmocka_unit_test(token_bucket_burst_of_130_allows_100_then_one_per_20ms),
      cmocka_unit_test(gcra_burst_of_130_allows_100_then_one_per_20ms),
      cmocka_unit_test(leaky_bucket_burst_of_130_allows_100_then_one_per_20ms),
      cmocka_unit_test(fixed_window_lets_twice_the_limit_through_across_a_boundary),
      cmocka_unit_test(sliding_log_lets_only_the_limit_through_across_a_boundary),
      cmocka_unit_test(sliding_window_lets_only_the_limit_through_across_a_boundary),
      cmocka_unit_test(sliding_window_weights_the_previous_window),
      cmocka_unit_test(sliding_log_denies_eleventh_until_exactly_first_plus_period),
      cmocka_unit_test(fixed_window_retry_after_is_time_to_window_end),
      cmocka_unit_test(bucket_retry_after_rounds_fractional_ns_up),
      cmocka_unit_test(allowed_request_has_zero_retry_after),
      cmocka_unit_test(leaky_bucket_delays_a_burst_by_multiples_of_T),
      cmocka_unit_test(leaky_bucket_delay_rounds_fractional_T_up),
      cmocka_unit_test(leaky_bucket_denied_request_has_no_delay),
      cmocka_unit_test(only_leaky_bucket_reports_a_delay),
      cmocka_unit_test(peek_changes_nothing),
      cmocka_unit_test(peek_is_allowed_when_exhausted),
      cmocka_unit_test(peek_on_fresh_key_reports_full_quota_and_stores_nothing),
      cmocka_unit_test(cost_above_capacity_is_ecost),
      cmocka_unit_test(cost_above_limit_but_within_burst_is_not_ecost),
      cmocka_unit_test(cost_equal_to_capacity_is_allowed_on_fresh_key),
      cmocka_unit_test(negative_cost_is_einval),
      cmocka_unit_test(time_out_of_range_is_etime),
      cmocka_unit_test(extreme_valid_times_are_decided),
      cmocka_unit_test(long_key_is_ekey),
      cmocka_unit_test(clock_going_backwards_gives_no_extra_quota),
      cmocka_unit_test(peek_is_allowed_even_when_the_clock_goes_back),
      cmocka_unit_test(denied_requests_in_the_past_change_nothing),
      cmocka_unit_test(fixed_window_treats_an_earlier_window_as_the_stored_one),
      cmocka_unit_test(token_bucket_reset_after_one_request_is_T),
      cmocka_unit_test(gcra_reset_after_one_request_is_T),
      cmocka_unit_test(leaky_bucket_reset_after_one_request_is_T),
      cmocka_unit_test(fixed_window_reset_is_time_to_window_end),
      cmocka_unit_test(sliding_window_reset_after_one_request_is_two_windows_less_elapsed),
      cmocka_unit_test(sliding_log_reset_after_one_request_is_the_period),
      cmocka_unit_test(token_bucket_reset_after_several_is_time_to_refill),
      cmocka_unit_test(decision_limit_is_burst_for_buckets_and_limit_for_windows),
      cmocka_unit_test(keys_are_independent),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
