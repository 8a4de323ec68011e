/*
 * test_lab.c — what `sluice sim` and `sluice accuracy` stand on
 * (src/sim/lab.c): exact durations as text both ways, the PRNG, and the
 * trailing-window judge that computes max_in_window and false allows and
 * denies. The module is CLI code, not library code: the test links its
 * object (the Makefile names it).
 */
#include "helpers.h"

#include "sim/lab.h"

#define MIN_NS (INT64_C(60) * NS_PER_S)
#define MAX_NS (INT64_C(36500) * 86400 * NS_PER_S)

static int64_t dur(const char *s) {
  int64_t v = -1;
  char err[200];
  if (lab_parse_duration(s, MAX_NS, &v, err, sizeof err))
    fail_msg("'%s': %s", s, err);
  return v;
}

static void dur_error(const char *s, const char *needle) {
  int64_t v = 12345;
  char err[200] = "";
  if (lab_parse_duration(s, MAX_NS, &v, err, sizeof err) == 0)
    fail_msg("'%s' parsed as %lld, expected an error", s, (long long)v);
  assert_int_equal(v, 12345); /* untouched on error */
  if (!strstr(err, needle))
    fail_msg("'%s': message \"%s\" lacks \"%s\"", s, err, needle);
}

static void durations_parse_exactly(void **state) {
  (void)state;
  assert_int_equal(dur("59.9s"), MS(59900));
  assert_int_equal(dur("1m"), MIN_NS);
  assert_int_equal(dur("250ms"), MS(250));
  assert_int_equal(dur("1m30s"), SEC(90));
  assert_int_equal(dur("1m0.05s"), MS(60050));
  assert_int_equal(dur("1.5h"), SEC(5400));
  assert_int_equal(dur("1d2h3m4.5s"), SEC(86400 + 7200 + 180 + 4) + MS(500));
  assert_int_equal(dur("1s500ms"), MS(1500));
  assert_int_equal(dur("0s"), 0);
  assert_int_equal(dur("1.5ms"), 1500000);
  assert_int_equal(dur("0.000000001s"), 1);
  assert_int_equal(dur("0.0000000010s"), 1); /* trailing zeros are exact */
  assert_int_equal(dur(".5s"), MS(500));
  /* 0.1 of a minute is 6 s exactly, with no binary rounding anywhere. */
  assert_int_equal(dur("0.1m"), SEC(6));
  assert_int_equal(dur("36500d"), MAX_NS);
}

static void bad_durations_are_errors_that_quote_the_text(void **state) {
  (void)state;
  dur_error("", "missing");
  dur_error("10", "unit");
  dur_error("10x", "unit");
  dur_error("5min", "not a duration");
  dur_error("s", "not a duration");
  dur_error("-1s", "not a duration");
  dur_error("1.s", "digits after");
  dur_error("1e3s", "unit");
  dur_error("1s1m", "large to small");
  dur_error("1m1m", "large to small");
  dur_error("0.0000000001s", "finer than a nanosecond");
  dur_error("1.0000001ms", "finer than a nanosecond");
  dur_error("0.0000000000000000000001d", "finer than a nanosecond");
  dur_error("36500d1ms", "too long");
  dur_error("99999999999999999999999d", "too long");
  dur_error("1s ", "'1s '");
}

static void fixed_format_lines_up_and_keeps_precision(void **state) {
  (void)state;
  char b[48];
  assert_string_equal(lab_fmt_fixed(0, b, sizeof b), "0.000s");
  assert_string_equal(lab_fmt_fixed(MS(59900), b, sizeof b), "59.900s");
  assert_string_equal(lab_fmt_fixed(MIN_NS, b, sizeof b), "1m00.000s");
  assert_string_equal(lab_fmt_fixed(SEC(3723) + MS(500), b, sizeof b),
                      "1h02m03.500s");
  assert_string_equal(lab_fmt_fixed(SEC(86400), b, sizeof b),
                      "1d00h00m00.000s");
  assert_string_equal(lab_fmt_fixed(250000, b, sizeof b), "0.000250s");
  assert_string_equal(lab_fmt_fixed(1, b, sizeof b), "0.000000001s");
}

static void short_format_is_the_least_text(void **state) {
  (void)state;
  char b[48];
  assert_string_equal(lab_fmt_short(0, b, sizeof b), "0s");
  assert_string_equal(lab_fmt_short(MS(250), b, sizeof b), "250ms");
  assert_string_equal(lab_fmt_short(MS(59900), b, sizeof b), "59.9s");
  assert_string_equal(lab_fmt_short(MIN_NS, b, sizeof b), "1m");
  assert_string_equal(lab_fmt_short(MS(60050), b, sizeof b), "1m0.05s");
  assert_string_equal(lab_fmt_short(SEC(7500), b, sizeof b), "2h5m");
  assert_string_equal(lab_fmt_short(1500, b, sizeof b), "0.0000015s");
}

static void both_formats_parse_back_to_the_same_nanoseconds(void **state) {
  (void)state;
  uint64_t s = 42;
  char b[48];
  for (int i = 0; i < 20000; i++) {
    /* Mix magnitudes: whole ms, whole s, and arbitrary ns up to days. */
    uint64_t r = lab_rand(&s);
    int64_t v = (int64_t)(r % (uint64_t)(SEC(86400) * 3));
    if (i % 3 == 0) v -= v % MS(1);
    if (i % 3 == 1) v -= v % SEC(1);
    int64_t back = -1;
    lab_fmt_short(v, b, sizeof b);
    assert_int_equal(lab_parse_duration(b, MAX_NS, &back, NULL, 0), 0);
    assert_int_equal(back, v);
    lab_fmt_fixed(v, b, sizeof b);
    assert_int_equal(lab_parse_duration(b, MAX_NS, &back, NULL, 0), 0);
    assert_int_equal(back, v);
  }
}

static void prng_is_deterministic_and_in_range(void **state) {
  (void)state;
  uint64_t a = 7, b = 7, c = 8;
  uint64_t x = lab_rand(&a);
  assert_true(x == lab_rand(&b));
  assert_true(x != lab_rand(&c));
  uint64_t counts[6] = {0};
  for (int i = 0; i < 60000; i++) {
    uint64_t v = lab_rand_below(&a, 6);
    assert_true(v < 6);
    counts[v]++;
  }
  for (int i = 0; i < 6; i++) /* 10000 expected each; 6 sigma is ~550 */
    assert_in_range(counts[i], 9400, 10600);
  assert_int_equal(lab_rand_below(&a, 1), 0);
}

static void window_is_half_open(void **state) {
  (void)state;
  lab_window w;
  assert_int_equal(lab_window_init(&w, MIN_NS, 1), 0);
  assert_int_equal(lab_window_sum(&w, 0, 0), 0);
  assert_int_equal(lab_window_add(&w, 0, 0, 3), 0);
  /* An entry at e counts while e > t - W: still at t = W - 1, gone at W. */
  assert_int_equal(lab_window_sum(&w, 0, MIN_NS - 1), 3);
  assert_int_equal(lab_window_sum(&w, 0, MIN_NS), 0);
  assert_int_equal(w.worst, 3);
  lab_window_free(&w);
}

/* The boundary burst: 100 at 59.9 s and 100 at 60 s lie in one window. */
static void worst_window_sees_the_boundary_burst(void **state) {
  (void)state;
  lab_window w;
  assert_int_equal(lab_window_init(&w, MIN_NS, 1), 0);
  for (int i = 0; i < 100; i++) {
    lab_window_sum(&w, 0, MS(59900));
    assert_int_equal(lab_window_add(&w, 0, MS(59900), 1), 0);
  }
  assert_int_equal(w.worst, 100);
  assert_int_equal(lab_window_sum(&w, 0, MS(60000)), 100);
  for (int i = 0; i < 100; i++) lab_window_add(&w, 0, MS(60000), 1);
  assert_int_equal(w.worst, 200);
  /* Exactly W after the first burst, it has left the window. */
  assert_int_equal(lab_window_sum(&w, 0, MS(119900)), 100);
  lab_window_free(&w);

  /* Two bursts exactly W apart never share a window. */
  assert_int_equal(lab_window_init(&w, MIN_NS, 1), 0);
  lab_window_add(&w, 0, 0, 100);
  lab_window_sum(&w, 0, MIN_NS);
  lab_window_add(&w, 0, MIN_NS, 100);
  assert_int_equal(w.worst, 100);
  lab_window_free(&w);
}

static void keys_are_judged_apart(void **state) {
  (void)state;
  lab_window w;
  assert_int_equal(lab_window_init(&w, SEC(1), 3), 0);
  lab_window_add(&w, 0, 0, 5);
  lab_window_add(&w, 2, 0, 7);
  assert_int_equal(lab_window_sum(&w, 0, 10), 5);
  assert_int_equal(lab_window_sum(&w, 1, 10), 0);
  assert_int_equal(lab_window_sum(&w, 2, 10), 7);
  assert_int_equal(w.worst, 7);
  lab_window_free(&w);
}

/* Against a brute-force sum over the whole history, on random traffic. */
static void window_sum_matches_brute_force(void **state) {
  (void)state;
  enum { N = 4000, KEYS = 5 };
  static int64_t t_of[N], c_of[N];
  static size_t k_of[N];
  uint64_t s = 99;
  lab_window w;
  const int64_t W = MS(700);
  assert_int_equal(lab_window_init(&w, W, KEYS), 0);
  int64_t t = 0, worst = 0;
  for (int i = 0; i < N; i++) {
    t += (int64_t)lab_rand_below(&s, 3) * MS(50); /* ties too */
    size_t k = lab_rand_below(&s, KEYS);
    int64_t c = (int64_t)lab_rand_below(&s, 4);
    int64_t want = 0;
    for (int j = 0; j < i; j++)
      if (k_of[j] == k && t_of[j] > t - W) want += c_of[j];
    assert_int_equal(lab_window_sum(&w, k, t), want);
    assert_int_equal(lab_window_add(&w, k, t, c), 0);
    t_of[i] = t;
    k_of[i] = k;
    c_of[i] = c;
    if (want + c > worst) worst = want + c;
  }
  assert_int_equal(w.worst, worst);
  lab_window_free(&w);
}

static void window_memory_holds_only_live_entries(void **state) {
  (void)state;
  lab_window w;
  assert_int_equal(lab_window_init(&w, SEC(1), 1), 0);
  /* A million requests, ten per second: the window never holds more than
     ten instants, so neither does the judge. */
  for (int64_t i = 0; i < 1000000; i++) {
    lab_window_sum(&w, 0, i * MS(100));
    assert_int_equal(lab_window_add(&w, 0, i * MS(100), 1), 0);
  }
  assert_true(w.nrec <= 16);
  assert_int_equal(w.worst, 10);
  /* Same instant: one entry; cost 0: nothing. */
  uint32_t before = w.nrec;
  lab_window_add(&w, 0, INT64_C(1000000) * MS(100), 0);
  lab_window_add(&w, 0, INT64_C(1000000) * MS(100), 2);
  lab_window_add(&w, 0, INT64_C(1000000) * MS(100), 2);
  assert_true(w.nrec <= before + 1);
  lab_window_free(&w);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(durations_parse_exactly),
      cmocka_unit_test(bad_durations_are_errors_that_quote_the_text),
      cmocka_unit_test(fixed_format_lines_up_and_keeps_precision),
      cmocka_unit_test(short_format_is_the_least_text),
      cmocka_unit_test(both_formats_parse_back_to_the_same_nanoseconds),
      cmocka_unit_test(prng_is_deterministic_and_in_range),
      cmocka_unit_test(window_is_half_open),
      cmocka_unit_test(worst_window_sees_the_boundary_burst),
      cmocka_unit_test(keys_are_judged_apart),
      cmocka_unit_test(window_sum_matches_brute_force),
      cmocka_unit_test(window_memory_holds_only_live_entries),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
