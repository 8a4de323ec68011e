/*
 * test_backoff.c — the client's half (src/client.c): full-jitter backoff,
 * the parsers of Retry-After, RateLimit / RateLimit-Policy (three draft
 * generations) and X-RateLimit-*, hostile values among them, and pacing.
 */
#include "helpers.h"

/* A deterministic "random" source: returns *ud and steps it. */
static uint64_t fixed_random(void *ud) {
  uint64_t *v = ud;
  return (*v)++;
}

/* xorshift64*: a spread of values for the distribution test. */
static uint64_t xorshift(void *ud) {
  uint64_t *s = ud;
  *s ^= *s >> 12;
  *s ^= *s << 25;
  *s ^= *s >> 27;
  return *s * UINT64_C(2685821657736338717);
}

static int hdr(sl_rate_info *ri, const char *name, const char *value) {
  return sl_rate_info_header(ri, name, strlen(name), value, strlen(value), T0);
}

static void backoff_stays_within_the_exponential_envelope(void **state) {
  (void)state;
  uint64_t s = 88172645463325252u;
  for (unsigned attempt = 0; attempt < 12; attempt++) {
    int64_t hi = MS(100) << attempt;
    if (hi > SEC(10)) hi = SEC(10);
    int64_t most = 0;
    for (int i = 0; i < 2000; i++) {
      int64_t d = sl_backoff_delay(MS(100), SEC(10), attempt, NULL, xorshift, &s);
      assert_true(d >= 0 && d <= hi);
      if (d > most) most = d;
    }
    /* Full jitter: the draws reach most of the envelope. */
    assert_true(most > hi * 9 / 10);
  }
}

static void backoff_is_uniform_over_the_envelope(void **state) {
  (void)state;
  uint64_t s = 1234567;
  int buckets[10] = {0};
  for (int i = 0; i < 20000; i++) {
    int64_t d = sl_backoff_delay(1000, 1000000, 3, NULL, xorshift, &s);
    buckets[d * 10 / 8001 < 10 ? d * 10 / 8001 : 9]++;
  }
  for (int b = 0; b < 10; b++) assert_true(buckets[b] > 1700 && buckets[b] < 2300);
}

static void backoff_is_zero_width_without_base_and_huge_attempts_cap(void **state) {
  (void)state;
  uint64_t v = 7;
  assert_int_equal(sl_backoff_delay(0, SEC(1), 5, NULL, fixed_random, &v), 0);
  assert_int_equal(sl_backoff_delay(-5, -5, 5, NULL, fixed_random, &v), 0);
  /* 2^4000 overflows nothing: the cap holds. */
  int64_t d = sl_backoff_delay(MS(1), SEC(30), 4000, NULL, xorshift, &v);
  assert_true(d >= 0 && d <= SEC(30));
  d = sl_backoff_delay(INT64_MAX, INT64_MAX, UINT32_MAX, NULL, NULL, NULL);
  assert_true(d >= 0);
}

static void backoff_uses_libsodium_without_a_source(void **state) {
  (void)state;
  int differ = 0;
  int64_t first = sl_backoff_delay(SEC(1), SEC(1), 0, NULL, NULL, NULL);
  for (int i = 0; i < 20; i++) {
    int64_t d = sl_backoff_delay(SEC(1), SEC(1), 0, NULL, NULL, NULL);
    assert_true(d >= 0 && d <= SEC(1));
    differ |= d != first;
  }
  assert_true(differ);
}

static void backoff_never_comes_before_retry_after(void **state) {
  (void)state;
  sl_rate_info ri;
  sl_rate_info_init(&ri);
  assert_int_equal(hdr(&ri, "Retry-After", "7"), 1);
  uint64_t s = 99;
  for (int i = 0; i < 500; i++) {
    int64_t d = sl_backoff_delay(MS(100), SEC(2), 4, &ri, xorshift, &s);
    assert_true(d >= SEC(7) && d <= SEC(9));
  }
}

static void backoff_waits_for_the_reset_when_nothing_remains(void **state) {
  (void)state;
  sl_rate_info ri;
  sl_rate_info_init(&ri);
  assert_int_equal(hdr(&ri, "RateLimit", "\"default\";r=0;t=30"), 1);
  uint64_t v = 0;
  assert_int_equal(sl_backoff_delay(MS(100), SEC(1), 0, &ri, fixed_random, &v),
                   SEC(30));
  /* Quota left: the reset is no floor. */
  sl_rate_info_init(&ri);
  assert_int_equal(hdr(&ri, "RateLimit", "\"default\";r=3;t=30"), 1);
  v = 0;
  assert_int_equal(sl_backoff_delay(MS(100), SEC(1), 0, &ri, fixed_random, &v),
                   0);
}

static void retry_after_reads_seconds_and_the_three_dates(void **state) {
  (void)state;
  sl_rate_info ri;
  sl_rate_info_init(&ri);
  assert_int_equal(hdr(&ri, "retry-after", " 120 "), 1);
  assert_int_equal(ri.retry_after_ns, SEC(120));
  /* T0 is 2026-01-01T00:00:00Z. */
  const char *dates[] = {"Thu, 01 Jan 2026 00:00:30 GMT",
                         "Thursday, 01-Jan-26 00:00:30 GMT",
                         "Thu Jan  1 00:00:30 2026"};
  for (size_t i = 0; i < 3; i++) {
    sl_rate_info_init(&ri);
    assert_int_equal(hdr(&ri, "Retry-After", dates[i]), 1);
    assert_int_equal(ri.retry_after_ns, SEC(30));
  }
  sl_rate_info_init(&ri); /* a date in the past: no wait */
  assert_int_equal(hdr(&ri, "Retry-After", "Sun, 06 Nov 1994 08:49:37 GMT"), 1);
  assert_int_equal(ri.retry_after_ns, 0);
}

static void hostile_values_are_refused_and_change_nothing(void **state) {
  (void)state;
  const char *bad[][2] = {
      {"Retry-After", "-1"},
      {"Retry-After", "99999999999999999999999"},
      {"Retry-After", "1e3"},
      {"Retry-After", "Thu, 01 Jan 2026 25:00:00 GMT"},
      {"Retry-After", "Thu, 01 Foo 2026 00:00:00 GMT"},
      {"Retry-After", "Thu, 01 Jan 2026 00:00:00 UTC"},
      {"Retry-After", "Thu, 1 Jan 2026 00:00:00 GMT"},
      {"Retry-After", ""},
      {"RateLimit", "\"default\";r=-5;t=1"},
      {"RateLimit", "\"default\";t=1"},
      {"RateLimit", "\"unterminated;r=1"},
      {"RateLimit", "\"a\";r=1,"},
      {"RateLimit", "\"a\";r=1;t=99999999999999999999999"},
      {"RateLimit", "\"a\x01\";r=1"},
      {"RateLimit", "limit=10, remaining=x"},
      {"RateLimit-Policy", "\"a\";q=1;;"},
      {"X-RateLimit-Remaining", "ten"},
      {"X-RateLimit-Remaining", "-3"},
      {"X-RateLimit-Reset", "18446744073709551616"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    sl_rate_info ri;
    sl_rate_info_init(&ri);
    ri.remaining = 42;
    if (hdr(&ri, bad[i][0], bad[i][1]) != SL_EINVAL)
      fail_msg("%s: %s was accepted", bad[i][0], bad[i][1]);
    assert_int_equal(ri.remaining, 42);
    assert_int_equal(ri.retry_after_ns, -1);
  }
  /* Too long a value. */
  char big[5000];
  memset(big, '1', sizeof big - 1);
  big[sizeof big - 1] = '\0';
  sl_rate_info ri;
  sl_rate_info_init(&ri);
  assert_int_equal(hdr(&ri, "RateLimit", big), SL_EINVAL);
  /* Not a rate limit header, and bad arguments. */
  assert_int_equal(hdr(&ri, "Content-Type", "text/plain"), 0);
  assert_int_equal(sl_rate_info_header(NULL, "a", 1, "b", 1, T0), SL_EINVAL);
  assert_int_equal(sl_rate_info_header(&ri, "a", 1, NULL, 1, T0), SL_EINVAL);
}

static void ratelimit_current_draft_takes_the_least_remaining(void **state) {
  (void)state;
  sl_rate_info ri;
  sl_rate_info_init(&ri);
  /* What sluice itself sends (src/server/http_render.c). */
  assert_int_equal(hdr(&ri, "RateLimit",
                       "\"per-user\";r=50;t=30, \"per-ip\";r=7;t=12;pk=:cHJpdmF0ZQ==:"),
                   1);
  assert_int_equal(ri.remaining, 7);
  assert_int_equal(ri.reset_ns, SEC(12));
  assert_string_equal(ri.policy, "per-ip");
  assert_int_equal(hdr(&ri, "RateLimit-Policy",
                       "\"per-user\";q=100;w=60, \"per-ip\";q=10;w=20;qu=\"request\""),
                   1);
  assert_int_equal(ri.limit, 10);
  assert_int_equal(ri.window_ns, SEC(20));
}

static void ratelimit_older_drafts_are_read_too(void **state) {
  (void)state;
  sl_rate_info ri;
  sl_rate_info_init(&ri);
  /* draft-07 */
  assert_int_equal(hdr(&ri, "RateLimit", "limit=100, remaining=25, reset=9"), 1);
  assert_int_equal(ri.limit, 100);
  assert_int_equal(ri.remaining, 25);
  assert_int_equal(ri.reset_ns, SEC(9));
  sl_rate_info_init(&ri);
  assert_int_equal(hdr(&ri, "RateLimit-Policy", "10;w=1, 50;w=60"), 1);
  assert_int_equal(ri.limit, 10);
  assert_int_equal(ri.window_ns, SEC(1));
  /* drafts up to 06 */
  sl_rate_info_init(&ri);
  assert_int_equal(hdr(&ri, "RateLimit-Limit", "100, 100;w=60"), 1);
  assert_int_equal(hdr(&ri, "RateLimit-Remaining", "3"), 1);
  assert_int_equal(hdr(&ri, "RATELIMIT-RESET", "4"), 1);
  assert_int_equal(ri.limit, 100);
  assert_int_equal(ri.remaining, 3);
  assert_int_equal(ri.reset_ns, SEC(4));
}

static void x_ratelimit_reset_reads_deltas_and_epochs(void **state) {
  (void)state;
  sl_rate_info ri;
  sl_rate_info_init(&ri);
  assert_int_equal(hdr(&ri, "X-RateLimit-Reset", "60"), 1);
  assert_int_equal(ri.reset_ns, SEC(60));
  sl_rate_info_init(&ri); /* GitHub's epoch seconds */
  assert_int_equal(hdr(&ri, "x-ratelimit-reset", "1767225645"), 1);
  assert_int_equal(ri.reset_ns, SEC(45));
  sl_rate_info_init(&ri); /* epoch milliseconds */
  assert_int_equal(hdr(&ri, "x-ratelimit-reset", "1767225600500"), 1);
  assert_int_equal(ri.reset_ns, MS(500));
  /* The cautious figure wins across headers. */
  assert_int_equal(hdr(&ri, "X-RateLimit-Remaining", "9"), 1);
  assert_int_equal(hdr(&ri, "RateLimit", "\"d\";r=4;t=2"), 1);
  assert_int_equal(hdr(&ri, "X-RateLimit-Remaining", "6"), 1);
  assert_int_equal(ri.remaining, 4);
  assert_int_equal(ri.reset_ns, SEC(2));
}

static void pacing_spreads_the_remaining_quota(void **state) {
  (void)state;
  sl_rate_info ri;
  sl_rate_info_init(&ri);
  assert_int_equal(sl_pace_interval(&ri), 0); /* nothing known */
  assert_int_equal(sl_pace_interval(NULL), 0);
  assert_int_equal(hdr(&ri, "RateLimit", "\"d\";r=10;t=5"), 1);
  assert_int_equal(sl_pace_interval(&ri), MS(500));
  sl_rate_info_init(&ri);
  assert_int_equal(hdr(&ri, "RateLimit", "\"d\";r=3;t=1"), 1);
  assert_int_equal(sl_pace_interval(&ri), 333333334);
  sl_rate_info_init(&ri);
  assert_int_equal(hdr(&ri, "RateLimit", "\"d\";r=0;t=8"), 1);
  assert_int_equal(sl_pace_interval(&ri), SEC(8));
  assert_int_equal(hdr(&ri, "Retry-After", "20"), 1);
  assert_int_equal(sl_pace_interval(&ri), SEC(20));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(backoff_stays_within_the_exponential_envelope),
      cmocka_unit_test(backoff_is_uniform_over_the_envelope),
      cmocka_unit_test(backoff_is_zero_width_without_base_and_huge_attempts_cap),
      cmocka_unit_test(backoff_uses_libsodium_without_a_source),
      cmocka_unit_test(backoff_never_comes_before_retry_after),
      cmocka_unit_test(backoff_waits_for_the_reset_when_nothing_remains),
      cmocka_unit_test(retry_after_reads_seconds_and_the_three_dates),
      cmocka_unit_test(hostile_values_are_refused_and_change_nothing),
      cmocka_unit_test(ratelimit_current_draft_takes_the_least_remaining),
      cmocka_unit_test(ratelimit_older_drafts_are_read_too),
      cmocka_unit_test(x_ratelimit_reset_reads_deltas_and_epochs),
      cmocka_unit_test(pacing_spreads_the_remaining_quota),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
