/*
 * test_shed.c — the library's load shedder (sl_shedder): options refused
 * with a message, classes shed in order (least important first, a class
 * of threshold "never" never), reports per source expiring and combining,
 * the source table's bound, fleet usage per window and in flight, other
 * daemons' usage, and what a reload carries over (inherit).
 */
#include "helpers.h"

#define S1 1000000000LL /* T0 (helpers.h) is on a whole second */

/* Three classes: critical never shed, default at 90%, sheddable at 60%. */
static sl_shedder *three(uint64_t capacity, int64_t window_ns) {
  sl_shed_opts o = {3, {SL_SHED_NEVER, 900, 600}, capacity, window_ns, 4,
                    SL_SHED_MAX};
  sl_shedder *sh = NULL;
  char err[128];
  assert_int_equal(sl_shedder_new(&o, &sh, err, sizeof err), 0);
  return sh;
}

static int shed(sl_shedder *sh, uint32_t cls, int64_t now) {
  sl_shed_decision d;
  sl_shedder_check(sh, cls, 1, now, &d);
  return d.shed;
}

static void options_are_checked_with_a_message(void **state) {
  (void)state;
  char err[128];
  sl_shed_opts o = {3, {1000, 500, 700}, 0, 0, 0, SL_SHED_MAX};
  assert_int_equal(sl_shed_opts_validate(&o, err, sizeof err), SL_EINVAL);
  assert_non_null(strstr(err, "class 2's threshold is above class 1's"));
  o = (sl_shed_opts){0, {0}, 0, 0, 0, SL_SHED_MAX};
  assert_int_equal(sl_shed_opts_validate(&o, err, sizeof err), SL_EINVAL);
  assert_non_null(strstr(err, "classes: 1 to 8"));
  o = (sl_shed_opts){1, {500}, 10, 5, 0, SL_SHED_MAX};
  assert_int_equal(sl_shed_opts_validate(&o, err, sizeof err), SL_EINVAL);
  assert_non_null(strstr(err, "window"));
  o = (sl_shed_opts){1, {500}, 0, 0, SL_SHED_SOURCES_MAX + 1, SL_SHED_MAX};
  assert_int_equal(sl_shed_opts_validate(&o, err, sizeof err), SL_EINVAL);
  o = (sl_shed_opts){2, {SL_SHED_NEVER, SL_SHED_NEVER}, 0, 0, 0, SL_SHED_MEAN};
  assert_int_equal(sl_shed_opts_validate(&o, err, sizeof err), 0);
}

static void utilisation_sheds_the_least_important_first(void **state) {
  (void)state;
  sl_shedder *sh = three(0, 0);
  int64_t now = T0;
  assert_false(shed(sh, 2, now)); /* nothing reported: nothing shed */
  const struct {
    uint32_t pm;
    int critical, dflt, sheddable;
  } steps[] = {{500, 0, 0, 0},  {599, 0, 0, 0},  {600, 0, 0, 1},
               {899, 0, 0, 1},  {900, 0, 1, 1},  {1000, 0, 1, 1},
               {10000, 0, 1, 1}, {100, 0, 0, 0}};
  for (size_t i = 0; i < sizeof steps / sizeof *steps; i++) {
    assert_int_equal(sl_shedder_report(sh, "", 0, steps[i].pm, S1, now), 0);
    assert_int_equal(shed(sh, 0, now), steps[i].critical);
    assert_int_equal(shed(sh, 1, now), steps[i].dflt);
    assert_int_equal(shed(sh, 2, now), steps[i].sheddable);
    assert_int_equal(shed(sh, 7, now), steps[i].sheddable); /* past: last */
  }
  sl_shed_decision d;
  sl_shedder_report(sh, "", 0, 950, S1, now);
  sl_shedder_check(sh, 1, 1, now, &d);
  assert_int_equal(d.signal, SL_SHED_UTILISATION);
  assert_int_equal(d.level_pm, 950);
  assert_int_equal(d.threshold_pm, 900);
  sl_shedder_free(sh);
}

static void a_stale_report_expires(void **state) {
  (void)state;
  sl_shedder *sh = three(0, 0);
  assert_int_equal(sl_shedder_report(sh, "a", 1, 950, 2 * S1, T0), 0);
  assert_true(shed(sh, 1, T0 + 2 * S1 - 1));
  assert_false(shed(sh, 1, T0 + 2 * S1)); /* expired: no signal */
  sl_shed_stats st;
  sl_shedder_stats(sh, T0 + 2 * S1, &st);
  assert_int_equal(st.sources, 0);
  assert_int_equal(st.utilisation_pm, 0);
  sl_shedder_free(sh);
}

static void sources_combine_by_max_or_mean_and_expire_alone(void **state) {
  (void)state;
  sl_shedder *sh = three(0, 0);
  sl_shedder_report(sh, "a", 1, 950, 1 * S1, T0);
  sl_shedder_report(sh, "b", 1, 300, 5 * S1, T0);
  assert_true(shed(sh, 1, T0)); /* max: 95% */
  assert_false(shed(sh, 1, T0 + S1)); /* a expired: b's 30% */
  sl_shedder_free(sh);
  sl_shed_opts o = {3, {SL_SHED_NEVER, 900, 600}, 0, 0, 0, SL_SHED_MEAN};
  assert_int_equal(sl_shedder_new(&o, &sh, NULL, 0), 0);
  sl_shedder_report(sh, "a", 1, 950, S1, T0);
  sl_shedder_report(sh, "b", 1, 300, S1, T0);
  sl_shed_stats st;
  sl_shedder_stats(sh, T0, &st);
  assert_int_equal(st.utilisation_pm, 625);
  assert_int_equal(st.sources, 2);
  assert_true(shed(sh, 2, T0));
  assert_false(shed(sh, 1, T0));
  sl_shedder_free(sh);
}

static void the_source_table_is_bounded_and_counts_refusals(void **state) {
  (void)state;
  sl_shedder *sh = three(0, 0); /* 4 sources */
  char name[16];
  for (int i = 0; i < 4; i++) {
    snprintf(name, sizeof name, "s%d", i);
    assert_int_equal(sl_shedder_report(sh, name, 2, 100, S1, T0), 0);
  }
  assert_int_equal(sl_shedder_report(sh, "s9", 2, 100, S1, T0), SL_EFULL);
  assert_int_equal(sl_shedder_report(sh, "s1", 2, 200, S1, T0), 0); /* own */
  /* Once they expire, a new source takes a slot. */
  assert_int_equal(sl_shedder_report(sh, "s9", 2, 100, S1, T0 + S1), 0);
  sl_shed_stats st;
  sl_shedder_stats(sh, T0 + S1, &st);
  assert_int_equal(st.refused, 1);
  assert_int_equal(st.sources, 1);
  char big[SL_SHED_SOURCE_MAX + 1];
  memset(big, 'x', sizeof big);
  assert_int_equal(sl_shedder_report(sh, big, sizeof big, 1, S1, T0),
                   SL_EINVAL);
  assert_int_equal(sl_shedder_report(sh, "", 0, 10001, S1, T0), SL_EINVAL);
  assert_int_equal(sl_shedder_report(sh, "", 0, 1, 0, T0), SL_EINVAL);
  sl_shedder_free(sh);
}

/* Capacity 100 per second: sheddable fills to 60, default to 90, and
   critical the rest — Stripe's reservation for critical traffic. */
static void fleet_usage_reserves_capacity_for_the_important(void **state) {
  (void)state;
  sl_shedder *sh = three(100, S1);
  sl_shed_decision d;
  int admitted[3] = {0};
  for (int i = 0; i < 300; i++) {
    uint32_t cls = (uint32_t)(2 - i % 3); /* sheddable, default, critical */
    sl_shedder_take(sh, cls, 1, T0 + i * NS_PER_MS, &d);
    admitted[cls] += !d.shed;
  }
  /* Sheddable stops once usage would pass 60, default once past 90. */
  assert_int_equal(admitted[0], 100); /* critical: never shed */
  assert_true(admitted[2] <= 20 && admitted[2] >= 19);
  sl_shed_stats st;
  sl_shedder_stats(sh, T0 + 300 * NS_PER_MS, &st);
  assert_int_equal(st.shed[0], 0);
  assert_int_equal(st.shed[1] + admitted[1], 100);
  assert_int_equal(st.shed[2] + admitted[2], 100);
  assert_true(st.usage > 100); /* critical went past capacity */
  sl_shedder_check(sh, 2, 1, T0 + 300 * NS_PER_MS, &d);
  assert_int_equal(d.signal, SL_SHED_USAGE);
  sl_shedder_free(sh);
}

static void usage_slides_out_over_the_next_window(void **state) {
  (void)state;
  sl_shedder *sh = three(100, S1);
  sl_shedder_charge(sh, 80, T0);
  assert_true(shed(sh, 2, T0 + 10 * NS_PER_MS));
  /* Half-way through the next window, half the previous one counts. */
  sl_shed_stats st;
  sl_shedder_stats(sh, T0 + S1 + S1 / 2, &st);
  assert_int_equal(st.usage, 40);
  assert_false(shed(sh, 2, T0 + S1 + S1 / 2));
  sl_shedder_stats(sh, T0 + 2 * S1, &st);
  assert_int_equal(st.usage, 0);
  sl_shedder_free(sh);
}

static void in_flight_usage_is_released(void **state) {
  (void)state;
  sl_shedder *sh = three(10, 0);
  sl_shed_decision d;
  for (int i = 0; i < 6; i++) sl_shedder_take(sh, 2, 1, T0, &d);
  assert_true(shed(sh, 2, T0)); /* 7 of 10 would pass 60% */
  sl_shedder_release(sh, 1);
  assert_false(shed(sh, 2, T0));
  sl_shedder_release(sh, 100); /* never below zero */
  sl_shed_stats st;
  sl_shedder_stats(sh, T0, &st);
  assert_int_equal(st.usage, 0);
  sl_shedder_free(sh);
}

static void remote_usage_counts_and_a_reload_inherits(void **state) {
  (void)state;
  sl_shedder *sh = three(100, S1);
  sl_shedder_set_remote(sh, 59);
  assert_false(shed(sh, 2, T0)); /* 59 + 1 = 60% */
  sl_shedder_charge(sh, 1, T0);
  assert_true(shed(sh, 2, T0));
  sl_shedder_report(sh, "svc", 3, 950, 10 * S1, T0);
  sl_shedder *next = three(200, S1);
  sl_shedder_inherit(next, sh);
  sl_shed_stats st;
  sl_shedder_stats(next, T0, &st);
  assert_int_equal(st.usage, 60);
  assert_int_equal(st.utilisation_pm, 950);
  assert_int_equal(st.sources, 1);
  assert_false(shed(next, 0, T0));
  assert_true(shed(next, 1, T0));
  sl_shedder_free(sh);
  sl_shedder_free(next);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(options_are_checked_with_a_message),
      cmocka_unit_test(utilisation_sheds_the_least_important_first),
      cmocka_unit_test(a_stale_report_expires),
      cmocka_unit_test(sources_combine_by_max_or_mean_and_expire_alone),
      cmocka_unit_test(the_source_table_is_bounded_and_counts_refusals),
      cmocka_unit_test(fleet_usage_reserves_capacity_for_the_important),
      cmocka_unit_test(usage_slides_out_over_the_next_window),
      cmocka_unit_test(in_flight_usage_is_released),
      cmocka_unit_test(remote_usage_counts_and_a_reload_inherits),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
