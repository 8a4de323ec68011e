/*
 * test_policy.c — the policy syntax "ALGORITHM:LIMIT/PERIOD[:burst=N]",
 * its canonical spelling, hand-filled policy validation, and error names.
 */
#include "helpers.h"

#define MIN_NS (INT64_C(60) * NS_PER_S)
#define HOUR_NS (INT64_C(3600) * NS_PER_S)
#define DAY_NS (INT64_C(86400) * NS_PER_S)

/* Parses spec, failing the test on error. */
static sl_policy parse_ok(const char *spec) {
  sl_policy p;
  char err[256] = "";
  int rc = sl_policy_parse(spec, &p, err, sizeof err);
  if (rc != 0) fail_msg("'%s' rc=%d: %s", spec, rc, err);
  return p;
}

static void assert_policy(const sl_policy *p, sl_algo algo, uint32_t limit,
                          uint32_t burst, int64_t period_ns) {
  assert_int_equal(p->algo, algo);
  assert_int_equal(p->limit, limit);
  assert_int_equal(p->burst, burst);
  assert_int_equal(p->period_ns, period_ns);
}

/* Parses spec expecting SL_EPOLICY with `needle` inside the message. */
static void assert_parse_error(const char *spec, const char *needle) {
  sl_policy p;
  memset(&p, 0xab, sizeof p);
  sl_policy before = p;
  char err[256];
  memset(err, 0, sizeof err);
  int rc = sl_policy_parse(spec, &p, err, sizeof err);
  if (rc != SL_EPOLICY)
    fail_msg("'%s': rc=%d (%s), expected SL_EPOLICY", spec, rc, sl_err_name(rc));
  if (err[0] == '\0') fail_msg("'%s': empty error message", spec);
  if (strstr(err, needle) == NULL)
    fail_msg("'%s': message \"%s\" does not contain \"%s\"", spec, err, needle);
  /* A failed parse leaves *out alone. */
  assert_memory_equal(&p, &before, sizeof p);
}

/* ---- the examples of the spec ------------------------------------------- */

static void example_token_bucket_parses(void **state) {
  (void)state;
  sl_policy p = parse_ok("token_bucket:2/s:burst=10");
  assert_policy(&p, SL_TOKEN_BUCKET, 2, 10, NS_PER_S);
}

static void example_fixed_window_parses(void **state) {
  (void)state;
  sl_policy p = parse_ok("fixed_window:100/m");
  assert_policy(&p, SL_FIXED_WINDOW, 100, 0, MIN_NS);
}

static void example_sliding_log_parses(void **state) {
  (void)state;
  sl_policy p = parse_ok("sliding_log:10/15m");
  assert_policy(&p, SL_SLIDING_LOG, 10, 0, 15 * MIN_NS);
}

static void example_gcra_parses(void **state) {
  (void)state;
  sl_policy p = parse_ok("gcra:50/s:burst=100");
  assert_policy(&p, SL_GCRA, 50, 100, NS_PER_S);
}

static void example_leaky_bucket_parses(void **state) {
  (void)state;
  sl_policy p = parse_ok("leaky_bucket:2/s:burst=40");
  assert_policy(&p, SL_LEAKY_BUCKET, 2, 40, NS_PER_S);
}

static void example_sliding_window_parses(void **state) {
  (void)state;
  sl_policy p = parse_ok("sliding_window:100/m");
  assert_policy(&p, SL_SLIDING_WINDOW, 100, 0, MIN_NS);
}

/* ---- periods ------------------------------------------------------------ */

static void bare_unit_means_one_of_it(void **state) {
  (void)state;
  assert_int_equal(parse_ok("gcra:5/ms").period_ns, NS_PER_MS);
  assert_int_equal(parse_ok("gcra:5/s").period_ns, NS_PER_S);
  assert_int_equal(parse_ok("gcra:5/m").period_ns, MIN_NS);
  assert_int_equal(parse_ok("gcra:5/h").period_ns, HOUR_NS);
  assert_int_equal(parse_ok("gcra:5/d").period_ns, DAY_NS);
  assert_int_equal(parse_ok("gcra:5/1s").period_ns, NS_PER_S);
}

static void each_unit_scales_its_count(void **state) {
  (void)state;
  assert_int_equal(parse_ok("fixed_window:5/250ms").period_ns, 250 * NS_PER_MS);
  assert_int_equal(parse_ok("fixed_window:5/3s").period_ns, 3 * NS_PER_S);
  assert_int_equal(parse_ok("fixed_window:5/15m").period_ns, 15 * MIN_NS);
  assert_int_equal(parse_ok("fixed_window:5/2h").period_ns, 2 * HOUR_NS);
  assert_int_equal(parse_ok("fixed_window:5/7d").period_ns, 7 * DAY_NS);
}

static void longest_period_of_3650_days_is_accepted(void **state) {
  (void)state;
  sl_policy p = parse_ok("sliding_log:1/3650d");
  assert_int_equal(p.period_ns, SL_PERIOD_MAX_NS);
}

/* ---- limits and bursts ---------------------------------------------------- */

static void default_burst_is_limit_for_bucket_algorithms(void **state) {
  (void)state;
  assert_int_equal(parse_ok("token_bucket:7/s").burst, 7);
  assert_int_equal(parse_ok("leaky_bucket:7/s").burst, 7);
  assert_int_equal(parse_ok("gcra:7/s").burst, 7);
}

static void default_burst_is_zero_for_window_algorithms(void **state) {
  (void)state;
  assert_int_equal(parse_ok("fixed_window:7/s").burst, 0);
  assert_int_equal(parse_ok("sliding_log:7/s").burst, 0);
  assert_int_equal(parse_ok("sliding_window:7/s").burst, 0);
}

static void burst_below_limit_is_accepted(void **state) {
  (void)state;
  sl_policy p = parse_ok("token_bucket:10/s:burst=3");
  assert_policy(&p, SL_TOKEN_BUCKET, 10, 3, NS_PER_S);
}

static void largest_limit_is_accepted(void **state) {
  (void)state;
  sl_policy p = parse_ok("fixed_window:4294967295/s");
  assert_int_equal(p.limit, 4294967295u);
}

static void largest_burst_is_accepted(void **state) {
  (void)state;
  sl_policy p = parse_ok("gcra:4294967295/s:burst=4294967295");
  assert_int_equal(p.burst, 4294967295u);
}

/* ---- errors ------------------------------------------------------------------ */

static void unknown_algorithm_is_named(void **state) {
  (void)state;
  assert_parse_error("token_buckt:5/s", "token_buckt");
  assert_parse_error("rolling:5/s", "rolling");
}

static void missing_limit_is_an_error(void **state) {
  (void)state;
  assert_parse_error("token_bucket:/s", "limit");
  assert_parse_error("token_bucket:", "limit");
  assert_parse_error("token_bucket", "token_bucket");
}

static void non_numeric_limit_is_named(void **state) {
  (void)state;
  assert_parse_error("token_bucket:five/s", "five");
  assert_parse_error("token_bucket:5x/s", "5x");
  assert_parse_error("token_bucket:-5/s", "-5");
}

static void zero_limit_is_an_error(void **state) {
  (void)state;
  assert_parse_error("fixed_window:0/s", "'0'");
}

static void limit_above_max_is_an_error(void **state) {
  (void)state;
  assert_parse_error("fixed_window:4294967296/s", "4294967296");
}

static void thirty_digit_limit_is_an_error(void **state) {
  (void)state;
  assert_parse_error("fixed_window:123456789012345678901234567890/s",
                     "123456789012345678901234567890");
}

static void missing_period_is_an_error(void **state) {
  (void)state;
  assert_parse_error("gcra:5", "PERIOD");
  assert_parse_error("gcra:5/", "period");
}

static void zero_period_is_an_error(void **state) {
  (void)state;
  assert_parse_error("gcra:5/0s", "0s");
  assert_parse_error("gcra:5/0ms", "0ms");
}

static void period_without_unit_is_an_error(void **state) {
  (void)state;
  assert_parse_error("gcra:5/10", "'10'");
}

static void unknown_unit_is_named(void **state) {
  (void)state;
  assert_parse_error("gcra:5/10x", "10x");
  assert_parse_error("gcra:5/10us", "10us");
  assert_parse_error("gcra:5/S", "S");
  assert_parse_error("gcra:5/10sec", "10sec");
}

static void period_longer_than_3650_days_is_an_error(void **state) {
  (void)state;
  assert_parse_error("sliding_log:1/3651d", "3651d");
  assert_parse_error("sliding_log:1/87601h", "87601h");
  assert_parse_error("sliding_log:1/9223372036854775807ms",
                     "9223372036854775807ms");
}

static void period_count_overflow_is_an_error(void **state) {
  (void)state;
  assert_parse_error("sliding_log:1/9223372036854775808s",
                     "9223372036854775808s");
  assert_parse_error("sliding_log:1/123456789012345678901234567890s",
                     "123456789012345678901234567890s");
}

static void burst_on_fixed_window_is_an_error(void **state) {
  (void)state;
  assert_parse_error("fixed_window:100/m:burst=5", "burst");
  assert_parse_error("fixed_window:100/m:burst=100", "fixed_window");
}

static void burst_on_sliding_log_is_an_error(void **state) {
  (void)state;
  assert_parse_error("sliding_log:100/m:burst=5", "burst");
  assert_parse_error("sliding_log:100/m:burst=5", "sliding_log");
}

static void burst_on_sliding_window_is_an_error(void **state) {
  (void)state;
  assert_parse_error("sliding_window:100/m:burst=5", "burst");
  assert_parse_error("sliding_window:100/m:burst=5", "sliding_window");
}

static void zero_burst_is_an_error(void **state) {
  (void)state;
  assert_parse_error("token_bucket:5/s:burst=0", "'0'");
}

static void burst_junk_is_named(void **state) {
  (void)state;
  assert_parse_error("token_bucket:5/s:burst=abc", "abc");
  assert_parse_error("token_bucket:5/s:burst=3x", "3x");
  assert_parse_error("token_bucket:5/s:burst=", "burst");
  assert_parse_error("token_bucket:5/s:burst=3:more", "more");
  assert_parse_error("token_bucket:5/s:burst=4294967296", "4294967296");
}

static void unknown_option_after_period_is_named(void **state) {
  (void)state;
  assert_parse_error("fixed_window:100/m:junk", "junk");
  assert_parse_error("token_bucket:5/s:bursty=3", "bursty=3");
}

static void trailing_junk_after_period_is_named(void **state) {
  (void)state;
  assert_parse_error("fixed_window:100/mjunk", "mjunk");
  assert_parse_error("fixed_window:100/10s junk", "junk");
}

static void trailing_slash_after_period_is_named(void **state) {
  (void)state;
  /* "10s" is a fine period; the offending part is what follows it. */
  assert_parse_error("fixed_window:100/10s/x", "/x");
}

static void empty_string_is_an_error(void **state) {
  (void)state;
  sl_policy p;
  char err[256] = "";
  assert_int_equal(sl_policy_parse("", &p, err, sizeof err), SL_EPOLICY);
  assert_true(err[0] != '\0');
}

static void null_spec_is_an_error(void **state) {
  (void)state;
  sl_policy p;
  char err[256] = "";
  assert_int_equal(sl_policy_parse(NULL, &p, err, sizeof err), SL_EPOLICY);
  assert_true(err[0] != '\0');
}

static void null_error_buffer_is_allowed(void **state) {
  (void)state;
  sl_policy p;
  assert_int_equal(sl_policy_parse("bogus:1/s", &p, NULL, 0), SL_EPOLICY);
  assert_int_equal(sl_policy_parse("gcra:1/s", &p, NULL, 0), 0);
}

static void error_message_is_truncated_and_terminated(void **state) {
  (void)state;
  sl_policy p;
  char err[8];
  memset(err, 'X', sizeof err);
  assert_int_equal(sl_policy_parse("bogus:1/s", &p, err, sizeof err),
                   SL_EPOLICY);
  assert_int_equal(strlen(err), sizeof err - 1);
}

/* ---- canonical spelling ------------------------------------------------- */

static void format_gives_canonical_spelling(void **state) {
  (void)state;
  static const struct {
    const char *in, *out;
  } cases[] = {
      {"token_bucket:2/s:burst=10", "token_bucket:2/s:burst=10"},
      {"token_bucket:2/1s:burst=2", "token_bucket:2/s"},
      {"gcra:50/1000ms", "gcra:50/s"},
      {"leaky_bucket:2/60s", "leaky_bucket:2/m"},
      {"fixed_window:100/3600s", "fixed_window:100/h"},
      {"sliding_log:10/900s", "sliding_log:10/15m"},
      {"sliding_window:100/24h", "sliding_window:100/d"},
      {"sliding_window:100/90s", "sliding_window:100/90s"},
      {"gcra:3/1500ms:burst=4", "gcra:3/1500ms:burst=4"},
      {"token_bucket:1/14d", "token_bucket:1/14d"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    sl_policy p = parse_ok(cases[i].in);
    char buf[128];
    int n = sl_policy_format(&p, buf, sizeof buf);
    assert_int_equal(n, (int)strlen(cases[i].out));
    assert_string_equal(buf, cases[i].out);
  }
}

static void format_then_parse_round_trips(void **state) {
  (void)state;
  static const char *const specs[] = {
      "token_bucket:2/s:burst=10", "fixed_window:100/m", "sliding_log:10/15m",
      "gcra:50/s:burst=100", "leaky_bucket:2/s:burst=40",
      "sliding_window:100/m", "token_bucket:1/ms", "gcra:7/3s",
      "leaky_bucket:3/10s:burst=5", "fixed_window:1000/h",
      "sliding_log:4294967295/d", "gcra:1/3650d", "sliding_window:9/1001ms",
      "token_bucket:60/61s:burst=1", "fixed_window:1/25h",
      "gcra:4294967295/s:burst=1", "leaky_bucket:12/36h:burst=12",
  };
  for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++) {
    sl_policy p = parse_ok(specs[i]);
    char buf[128];
    int n = sl_policy_format(&p, buf, sizeof buf);
    assert_true(n > 0 && n < (int)sizeof buf);
    sl_policy q = parse_ok(buf);
    assert_policy(&q, p.algo, p.limit, p.burst, p.period_ns);
  }
}

static void validate_rejects_sub_millisecond_period(void **state) {
  (void)state;
  /* The grammar's smallest unit is ms, and every valid policy must have a
     spelling: a hand-filled period of 1500 ns is refused, by name. */
  sl_policy p = {SL_GCRA, 3, 3, 1500};
  char err[256] = "";
  assert_int_equal(sl_policy_validate(&p, err, sizeof err), SL_EPOLICY);
  assert_non_null(strstr(err, "milliseconds"));
  char buf[64];
  assert_int_equal(sl_policy_format(&p, buf, sizeof buf), SL_EINVAL);
}

static void format_of_hand_filled_policy_round_trips(void **state) {
  (void)state;
  /* Valid for sl_policy_validate, so its spelling must parse back. */
  sl_policy p = {SL_GCRA, 3, 3, 1500 * NS_PER_MS};
  assert_int_equal(sl_policy_validate(&p, NULL, 0), 0);
  char buf[128];
  int n = sl_policy_format(&p, buf, sizeof buf);
  assert_true(n > 0);
  sl_policy q;
  char err[256] = "";
  int rc = sl_policy_parse(buf, &q, err, sizeof err);
  if (rc != 0) fail_msg("format gave '%s' which does not parse: %s", buf, err);
  assert_policy(&q, p.algo, p.limit, p.burst, p.period_ns);
}

static void format_with_zero_burst_omits_it(void **state) {
  (void)state;
  sl_policy p = {SL_TOKEN_BUCKET, 5, 0, NS_PER_S};
  char buf[64];
  assert_int_equal(sl_policy_format(&p, buf, sizeof buf), 16);
  assert_string_equal(buf, "token_bucket:5/s");
}

static void format_returns_needed_length_when_truncated(void **state) {
  (void)state;
  sl_policy p = parse_ok("gcra:50/s:burst=100");
  char buf[5];
  assert_int_equal(sl_policy_format(&p, buf, sizeof buf), 19);
  assert_string_equal(buf, "gcra");
  assert_int_equal(sl_policy_format(&p, NULL, 0), 19);
}

static void format_of_invalid_policy_is_einval(void **state) {
  (void)state;
  sl_policy p = {SL_FIXED_WINDOW, 0, 0, NS_PER_S};
  char buf[64];
  assert_int_equal(sl_policy_format(&p, buf, sizeof buf), SL_EINVAL);
}

/* ---- validate ------------------------------------------------------------ */

static void assert_invalid(const sl_policy *p, const char *needle) {
  char err[256] = "";
  int rc = sl_policy_validate(p, err, sizeof err);
  assert_int_equal(rc, SL_EPOLICY);
  if (strstr(err, needle) == NULL)
    fail_msg("message \"%s\" does not contain \"%s\"", err, needle);
}

static void validate_rejects_unknown_algorithm(void **state) {
  (void)state;
  sl_policy p = {SL_ALGO_COUNT, 5, 5, NS_PER_S};
  assert_invalid(&p, "algorithm");
  p.algo = (sl_algo)-1;
  assert_invalid(&p, "algorithm");
}

static void validate_rejects_zero_limit(void **state) {
  (void)state;
  sl_policy p = {SL_GCRA, 0, 5, NS_PER_S};
  assert_invalid(&p, "limit");
}

static void validate_rejects_nonpositive_period(void **state) {
  (void)state;
  sl_policy p = {SL_FIXED_WINDOW, 5, 0, 0};
  assert_invalid(&p, "period");
  p.period_ns = -NS_PER_S;
  assert_invalid(&p, "period");
}

static void validate_rejects_too_long_period(void **state) {
  (void)state;
  sl_policy p = {SL_FIXED_WINDOW, 5, 0, SL_PERIOD_MAX_NS + 1};
  assert_invalid(&p, "period");
}

static void validate_rejects_burst_on_window(void **state) {
  (void)state;
  sl_policy p = {SL_FIXED_WINDOW, 5, 5, NS_PER_S};
  assert_invalid(&p, "fixed_window");
  p.algo = SL_SLIDING_LOG;
  assert_invalid(&p, "sliding_log");
  p.algo = SL_SLIDING_WINDOW;
  assert_invalid(&p, "sliding_window");
}

static void validate_accepts_zero_burst_for_buckets(void **state) {
  (void)state;
  sl_policy p = {SL_TOKEN_BUCKET, 5, 0, NS_PER_S};
  assert_int_equal(sl_policy_validate(&p, NULL, 0), 0);
  p.algo = SL_LEAKY_BUCKET;
  assert_int_equal(sl_policy_validate(&p, NULL, 0), 0);
  p.algo = SL_GCRA;
  assert_int_equal(sl_policy_validate(&p, NULL, 0), 0);
}

static void validate_null_policy_is_an_error(void **state) {
  (void)state;
  assert_true(sl_policy_validate(NULL, NULL, 0) < 0);
}

/* ---- names --------------------------------------------------------------- */

static void algo_names_match_the_syntax(void **state) {
  (void)state;
  assert_string_equal(sl_algo_name(SL_TOKEN_BUCKET), "token_bucket");
  assert_string_equal(sl_algo_name(SL_LEAKY_BUCKET), "leaky_bucket");
  assert_string_equal(sl_algo_name(SL_FIXED_WINDOW), "fixed_window");
  assert_string_equal(sl_algo_name(SL_SLIDING_LOG), "sliding_log");
  assert_string_equal(sl_algo_name(SL_SLIDING_WINDOW), "sliding_window");
  assert_string_equal(sl_algo_name(SL_GCRA), "gcra");
  assert_null(sl_algo_name(SL_ALGO_COUNT));
}

static void every_error_code_has_its_message_and_name(void **state) {
  (void)state;
#define CHECK_ERR(name, code, msg)                  \
  assert_int_equal(SL_##name, code);                \
  assert_string_equal(sl_strerror(code), msg);      \
  assert_string_equal(sl_err_name(code), #name);
  SL_ERRNO_MAP(CHECK_ERR)
#undef CHECK_ERR
  assert_string_equal(sl_err_name(SL_OK), "OK");
}

static void unknown_error_code_is_described_as_unknown(void **state) {
  (void)state;
  static const int codes[] = {-10, -99, 1, 42, -2147483647 - 1};
  for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++) {
    assert_string_equal(sl_strerror(codes[i]), "unknown error");
    assert_string_equal(sl_err_name(codes[i]), "UNKNOWN");
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(example_token_bucket_parses),
      cmocka_unit_test(example_fixed_window_parses),
      cmocka_unit_test(example_sliding_log_parses),
      cmocka_unit_test(example_gcra_parses),
      cmocka_unit_test(example_leaky_bucket_parses),
      cmocka_unit_test(example_sliding_window_parses),
      cmocka_unit_test(bare_unit_means_one_of_it),
      cmocka_unit_test(each_unit_scales_its_count),
      cmocka_unit_test(longest_period_of_3650_days_is_accepted),
      cmocka_unit_test(default_burst_is_limit_for_bucket_algorithms),
      cmocka_unit_test(default_burst_is_zero_for_window_algorithms),
      cmocka_unit_test(burst_below_limit_is_accepted),
      cmocka_unit_test(largest_limit_is_accepted),
      cmocka_unit_test(largest_burst_is_accepted),
      cmocka_unit_test(unknown_algorithm_is_named),
      cmocka_unit_test(missing_limit_is_an_error),
      cmocka_unit_test(non_numeric_limit_is_named),
      cmocka_unit_test(zero_limit_is_an_error),
      cmocka_unit_test(limit_above_max_is_an_error),
      cmocka_unit_test(thirty_digit_limit_is_an_error),
      cmocka_unit_test(missing_period_is_an_error),
      cmocka_unit_test(zero_period_is_an_error),
      cmocka_unit_test(period_without_unit_is_an_error),
      cmocka_unit_test(unknown_unit_is_named),
      cmocka_unit_test(period_longer_than_3650_days_is_an_error),
      cmocka_unit_test(period_count_overflow_is_an_error),
      cmocka_unit_test(burst_on_fixed_window_is_an_error),
      cmocka_unit_test(burst_on_sliding_log_is_an_error),
      cmocka_unit_test(burst_on_sliding_window_is_an_error),
      cmocka_unit_test(zero_burst_is_an_error),
      cmocka_unit_test(burst_junk_is_named),
      cmocka_unit_test(unknown_option_after_period_is_named),
      cmocka_unit_test(trailing_junk_after_period_is_named),
      cmocka_unit_test(trailing_slash_after_period_is_named),
      cmocka_unit_test(empty_string_is_an_error),
      cmocka_unit_test(null_spec_is_an_error),
      cmocka_unit_test(null_error_buffer_is_allowed),
      cmocka_unit_test(error_message_is_truncated_and_terminated),
      cmocka_unit_test(format_gives_canonical_spelling),
      cmocka_unit_test(format_then_parse_round_trips),
      cmocka_unit_test(validate_rejects_sub_millisecond_period),
      cmocka_unit_test(format_of_hand_filled_policy_round_trips),
      cmocka_unit_test(format_with_zero_burst_omits_it),
      cmocka_unit_test(format_returns_needed_length_when_truncated),
      cmocka_unit_test(format_of_invalid_policy_is_einval),
      cmocka_unit_test(validate_rejects_unknown_algorithm),
      cmocka_unit_test(validate_rejects_zero_limit),
      cmocka_unit_test(validate_rejects_nonpositive_period),
      cmocka_unit_test(validate_rejects_too_long_period),
      cmocka_unit_test(validate_rejects_burst_on_window),
      cmocka_unit_test(validate_accepts_zero_burst_for_buckets),
      cmocka_unit_test(validate_null_policy_is_an_error),
      cmocka_unit_test(algo_names_match_the_syntax),
      cmocka_unit_test(every_error_code_has_its_message_and_name),
      cmocka_unit_test(unknown_error_code_is_described_as_unknown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
