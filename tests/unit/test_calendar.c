/*
 * test_calendar.c — calendar-aligned quotas (rate_limit.calendar, tz):
 * the windows themselves (rules/calendar.c) across month ends, a leap
 * day, DST changes, weeks and years; and decisions through the engine at
 * chosen instants (the tests' clock: each decision's now), with reset and
 * retry_after counting to the real end of the window, a fresh quota in
 * the next one, and the config's errors.
 */
#include "helpers.h"

#include "rules/calendar.h"
#include "rules/config.h"
#include "engine/engine.h"
#include "engine_fixture.h"

/* Seconds since the epoch of a UTC civil time (days_from_civil, Howard
   Hinnant's algorithm: the tests' own arithmetic, not GLib's). */
static int64_t utc(int y, int m, int d, int hh, int mm, int ss) {
  y -= m <= 2;
  int64_t era = (y >= 0 ? y : y - 399) / 400;
  int64_t yoe = y - era * 400;
  int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  int64_t days = era * 146097 + doe - 719468;
  return days * 86400 + hh * 3600 + mm * 60 + ss;
}

/* The window of unit in tz at t (seconds): asserts [want_s, want_e). */
static void window_is(int unit, const char *tz, int64_t t, int64_t want_s,
                      int64_t want_e) {
  cfg_calendar c;
  char err[256];
  if (cal_init(&c, unit, tz, err, sizeof err)) fail_msg("%s", err);
  int64_t s, e;
  assert_int_equal(cal_window(&c, SEC(t), &s, &e), 0);
  if (s != SEC(want_s) || e != SEC(want_e))
    fail_msg("%s %s at %lld: [%lld, %lld), want [%lld, %lld)",
             cal_unit_name(unit), tz ? tz : "UTC", (long long)t,
             (long long)(s / NS_PER_S), (long long)(e / NS_PER_S),
             (long long)want_s, (long long)want_e);
  /* Asked again (the cache), and at the window's two ends. */
  assert_int_equal(cal_window(&c, SEC(t), &s, &e), 0);
  assert_int_equal(s, SEC(want_s));
  assert_int_equal(cal_window(&c, SEC(want_e) - 1, &s, &e), 0);
  assert_int_equal(s, SEC(want_s));
  assert_int_equal(cal_window(&c, SEC(want_e), &s, &e), 0);
  assert_int_equal(s, SEC(want_e));
  cal_free(&c);
}

static void months_have_their_own_lengths(void **state) {
  (void)state;
  /* 25 November: it resets on 1 December, not 7.2 days later. */
  window_is(CAL_MONTH, NULL, utc(2026, 11, 25, 12, 0, 0),
            utc(2026, 11, 1, 0, 0, 0), utc(2026, 12, 1, 0, 0, 0));
  /* 31 January to 1 February; December to the next year. */
  window_is(CAL_MONTH, NULL, utc(2026, 1, 31, 23, 59, 59),
            utc(2026, 1, 1, 0, 0, 0), utc(2026, 2, 1, 0, 0, 0));
  window_is(CAL_MONTH, "UTC", utc(2026, 12, 31, 23, 0, 0),
            utc(2026, 12, 1, 0, 0, 0), utc(2027, 1, 1, 0, 0, 0));
}

static void a_leap_year_has_a_29th_of_february(void **state) {
  (void)state;
  window_is(CAL_MONTH, NULL, utc(2028, 2, 29, 12, 0, 0),
            utc(2028, 2, 1, 0, 0, 0), utc(2028, 3, 1, 0, 0, 0));
  window_is(CAL_DAY, NULL, utc(2028, 2, 29, 12, 0, 0),
            utc(2028, 2, 29, 0, 0, 0), utc(2028, 3, 1, 0, 0, 0));
  window_is(CAL_MONTH, NULL, utc(2027, 2, 28, 12, 0, 0),
            utc(2027, 2, 1, 0, 0, 0), utc(2027, 3, 1, 0, 0, 0));
  window_is(CAL_YEAR, NULL, utc(2028, 7, 1, 0, 0, 0),
            utc(2028, 1, 1, 0, 0, 0), utc(2029, 1, 1, 0, 0, 0));
  /* 2100 is not a leap year. */
  window_is(CAL_MONTH, NULL, utc(2100, 2, 28, 0, 0, 0),
            utc(2100, 2, 1, 0, 0, 0), utc(2100, 3, 1, 0, 0, 0));
}

static void dst_changes_make_days_of_23_and_25_hours(void **state) {
  (void)state;
  /* Berlin: CET (+1) until 2026-03-29 01:00 UTC, then CEST (+2), until
     2026-10-25 01:00 UTC. Local midnights: 23:00 or 22:00 UTC. */
  window_is(CAL_DAY, "Europe/Berlin", utc(2026, 3, 29, 12, 0, 0),
            utc(2026, 3, 28, 23, 0, 0), utc(2026, 3, 29, 22, 0, 0));
  window_is(CAL_DAY, "Europe/Berlin", utc(2026, 10, 25, 12, 0, 0),
            utc(2026, 10, 24, 22, 0, 0), utc(2026, 10, 25, 23, 0, 0));
  /* The month that holds the change: 31 days less an hour. */
  window_is(CAL_MONTH, "Europe/Berlin", utc(2026, 3, 15, 0, 0, 0),
            utc(2026, 2, 28, 23, 0, 0), utc(2026, 3, 31, 22, 0, 0));
  /* New York: EST (-5) until 2026-03-08 07:00 UTC, then EDT (-4). */
  window_is(CAL_DAY, "America/New_York", utc(2026, 3, 8, 12, 0, 0),
            utc(2026, 3, 8, 5, 0, 0), utc(2026, 3, 9, 4, 0, 0));
  /* A fixed offset has no DST. */
  window_is(CAL_DAY, "+05:30", utc(2026, 3, 29, 12, 0, 0),
            utc(2026, 3, 28, 18, 30, 0), utc(2026, 3, 29, 18, 30, 0));
}

static void weeks_start_on_monday(void **state) {
  (void)state;
  /* 2026-11-26 is a Thursday; its week runs from Monday the 23rd. */
  window_is(CAL_WEEK, NULL, utc(2026, 11, 26, 2, 0, 0),
            utc(2026, 11, 23, 0, 0, 0), utc(2026, 11, 30, 0, 0, 0));
  /* A Sunday late at night belongs to the week before. */
  window_is(CAL_WEEK, NULL, utc(2026, 11, 29, 23, 59, 59),
            utc(2026, 11, 23, 0, 0, 0), utc(2026, 11, 30, 0, 0, 0));
}

/* One request for user=u in domain q at t (seconds). */
static eng_result req_at(engine_thread *t, int64_t sec) {
  eng_descriptor d;
  memset(&d, 0, sizeof d);
  d.hits = -1;
  d.entries[0] = (cfg_entry){"user", 4, "u", 1};
  d.n = 1;
  eng_request r = {"q", 1, &d, 1, 1};
  eng_result out;
  assert_int_equal(do_check(t, &r, SEC(sec), &out), 0);
  return out;
}

/* Two per calendar month in Berlin: the third waits for 1 March local
   midnight (28 February 23:00 UTC), whatever the epoch's 30 days say. */
static void a_monthly_quota_resets_on_the_first(void **state) {
  (void)state;
  fixture f = fixture_with(
      NULL, "domain: q\ndescriptors:\n  - key: user\n    rate_limit:\n"
            "      calendar: month\n      requests_per_unit: 2\n"
            "      tz: Europe/Berlin\n");
  const int64_t t = utc(2028, 2, 28, 22, 0, 0); /* 23:00 in Berlin */
  const int64_t end = utc(2028, 2, 29, 23, 0, 0); /* leap day, then March */
  eng_result r = req_at(f.t, t);
  assert_true(r.allowed);
  assert_int_equal(r.st[0].d.remaining, 1);
  assert_int_equal(r.st[0].d.reset_ns, SEC(end - t));
  assert_int_equal(r.st[0].window_ns, SEC(29 * 86400));
  assert_true(req_at(f.t, t + 1).allowed);
  r = req_at(f.t, t + 2);
  assert_false(r.allowed);
  assert_int_equal(r.st[0].d.retry_after_ns, SEC(end - t - 2));
  r = req_at(f.t, end - 1);
  assert_false(r.allowed);
  assert_int_equal(r.st[0].d.retry_after_ns, SEC(1));
  r = req_at(f.t, end); /* 1 March 00:00 in Berlin: a fresh month */
  assert_true(r.allowed);
  assert_int_equal(r.st[0].d.remaining, 1);
  assert_int_equal(r.st[0].window_ns, SEC(31 * 86400 - 3600)); /* DST */
  fixture_free(&f);
}

/* `unit: month` keeps envoy's 30 days from the epoch. */
static void unit_month_stays_epoch_aligned(void **state) {
  (void)state;
  fixture f = fixture_with(
      NULL, "domain: q\ndescriptors:\n  - key: user\n    rate_limit:\n"
            "      unit: month\n      requests_per_unit: 1\n");
  const int64_t t = utc(2026, 11, 25, 0, 0, 0), W = 30 * 86400;
  eng_result r = req_at(f.t, t);
  assert_int_equal(r.st[0].d.reset_ns, SEC(W - t % W));
  assert_int_equal(r.st[0].window_ns, 0);
  fixture_free(&f);
}

static void bad_calendars_are_refused(void **state) {
  (void)state;
  static const struct {
    const char *limit, *msg;
  } bad[] = {
      {"{calendar: fortnight, requests_per_unit: 1}", "invalid calendar"},
      {"{calendar: day, requests_per_unit: 1, tz: Mars/Olympus}",
       "unknown time zone 'Mars/Olympus'"},
      {"{calendar: day}", "calendar needs requests_per_unit"},
      {"{calendar: day, requests_per_unit: 1, unit: day}", "calendar replaces"},
      {"{calendar: day, requests_per_unit: 1, algorithm: gcra}",
       "cannot be aligned"},
      {"{unit: day, requests_per_unit: 1, tz: UTC}", "tz needs calendar"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char yaml[256];
    snprintf(yaml, sizeof yaml,
             "domain: d\ndescriptors:\n  - key: k\n    rate_limit: %s\n",
             bad[i].limit);
    cfg_errors e = {0};
    sl_config *c = config_load_string(yaml, strlen(yaml), "t.yaml", &e);
    assert_null(c);
    int found = 0;
    for (size_t k = 0; k < e.n; k++) found |= strstr(e.msgs[k], bad[i].msg) != 0;
    if (!found) fail_msg("case %zu: %s", i, e.n ? e.msgs[0] : "(none)");
    cfg_errors_free(&e);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(months_have_their_own_lengths),
      cmocka_unit_test(a_leap_year_has_a_29th_of_february),
      cmocka_unit_test(dst_changes_make_days_of_23_and_25_hours),
      cmocka_unit_test(weeks_start_on_monday),
      cmocka_unit_test(a_monthly_quota_resets_on_the_first),
      cmocka_unit_test(unit_month_stays_epoch_aligned),
      cmocka_unit_test(bad_calendars_are_refused),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
