/*
 * test_candidate.c — a rule's candidate policy (rate_limit.candidate):
 * decided beside the enforced policy on the same key with its own state,
 * never enforced, its divergences counted exactly per rule and direction
 * (sluice_rule_candidate_divergences_total), reset with the rule, and
 * refused where it cannot work (a bad policy, a split limit).
 */
#include "helpers.h"

#include "rules/config.h"
#include "engine/engine.h"
#include "engine_fixture.h"

/* One request: descriptor (k, v), cost 1, at t; asserts it is decided. */
static eng_result req1(engine_thread *t, const char *k, const char *v,
                       int64_t now) {
  eng_descriptor d;
  memset(&d, 0, sizeof d);
  d.hits = -1;
  d.entries[0] = (cfg_entry){k, strlen(k), v, strlen(v)};
  d.n = 1;
  eng_request r = {"ops", 3, &d, 1, 1};
  eng_result out;
  memset(&out, 0xa5, sizeof out);
  assert_int_equal(do_check(t, &r, now, &out), 0);
  return out;
}

/* The value of the metrics line `series`, or -1. */
static long long metric_of(engine *e, const char *series) {
  size_t len = 0;
  char *m = engine_metrics(e, &len);
  assert_non_null(m);
  long long v = -1;
  size_t n = strlen(series);
  for (const char *p = m; *p;) {
    const char *nl = strchr(p, '\n');
    if (!strncmp(p, series, n) && p[n] == ' ') v = strtoll(p + n + 1, NULL, 10);
    if (!nl) break;
    p = nl + 1;
  }
  free(m);
  return v;
}

#define DIV(rule, dir)                                                       \
  "sluice_rule_candidate_divergences_total{domain=\"ops\",rule=\"ops." rule \
  "\",direction=\"" dir "\"}"

static const char yaml[] =
    "domain: ops\n"
    "descriptors:\n"
    "  - key: user\n"
    "    rate_limit: {policy: \"fixed_window:3/m\", candidate: "
    "\"fixed_window:2/m\"}\n"
    "  - key: ip\n"
    "    rate_limit: {unit: minute, requests_per_unit: 1, candidate: "
    "\"fixed_window:2/m\"}\n"
    "  - key: open\n"
    "    rate_limit: {unlimited: true, candidate: \"fixed_window:1/m\"}\n";

/* A trace over three rules, every decision's marks and the final counts
   derived by hand: the candidate is charged only what the request is. */
static void divergences_are_counted_exactly_on_a_trace(void **state) {
  (void)state;
  fixture f = fixture_with(NULL, yaml);
  const int64_t t0 = SEC(1800000000) - SEC(1800000000) % SEC(60);
  static const struct {
    const char *k, *v;
    int s, allowed, cand_denied;
  } trace[] = {
      {"user", "a", 0, 1, 0},  /* E 1/3, C 1/2 */
      {"user", "a", 1, 1, 0},  /* E 2/3, C 2/2 */
      {"user", "a", 2, 1, 1},  /* E 3/3, C full: would_deny */
      {"user", "a", 3, 0, 1},  /* both deny: agree */
      {"user", "b", 4, 1, 0},  /* another key: its own state */
      {"user", "a", 60, 1, 0}, /* next window: both fresh */
      {"ip", "x", 0, 1, 0},    /* E 1/1, C 1/2 */
      {"ip", "x", 1, 0, 0},    /* E denies, C has room: would_allow */
      {"ip", "x", 2, 0, 0},    /* again (C not charged by a denial) */
      {"open", "o", 0, 1, 0},  /* unlimited, C 1/1 */
      {"open", "o", 1, 1, 1},  /* would_deny */
  };
  for (size_t i = 0; i < sizeof trace / sizeof trace[0]; i++) {
    eng_result r = req1(f.t, trace[i].k, trace[i].v, t0 + SEC(trace[i].s));
    assert_int_equal(r.n, 1);
    if (r.allowed != trace[i].allowed || r.st[0].candidate != 1 ||
        r.st[0].candidate_denied != trace[i].cand_denied)
      fail_msg("request %zu: allowed %d candidate_denied %d", i, r.allowed,
               r.st[0].candidate_denied);
  }
  assert_int_equal(metric_of(f.e, DIV("user", "would_deny")), 1);
  assert_int_equal(metric_of(f.e, DIV("user", "would_allow")), 0);
  assert_int_equal(metric_of(f.e, DIV("ip", "would_deny")), 0);
  assert_int_equal(metric_of(f.e, DIV("ip", "would_allow")), 2);
  assert_int_equal(metric_of(f.e, DIV("open", "would_deny")), 1);
  fixture_free(&f);
}

/* A rule without a candidate has no divergence series. */
static void a_rule_without_candidate_renders_none(void **state) {
  (void)state;
  fixture f = fixture_with(NULL, "domain: ops\ndescriptors:\n  - key: k\n"
                                 "    rate_limit: {policy: \"gcra:1/s\"}\n");
  req1(f.t, "k", "v", SEC(1800000000));
  assert_int_equal(metric_of(f.e, DIV("k", "would_deny")), -1);
  fixture_free(&f);
}

/* The candidate's state is its own, and a reset of the descriptor
   forgets it with the rule's. */
static void reset_forgets_the_candidates_state(void **state) {
  (void)state;
  fixture f = fixture_with(NULL, yaml);
  const int64_t t0 = SEC(1800000000) - SEC(1800000000) % SEC(60);
  req1(f.t, "user", "a", t0);
  req1(f.t, "user", "a", t0 + 1);
  assert_int_equal(req1(f.t, "user", "a", t0 + 2).st[0].candidate_denied, 1);
  eng_descriptor d;
  memset(&d, 0, sizeof d);
  d.hits = -1;
  d.entries[0] = (cfg_entry){"user", 4, "a", 1};
  d.n = 1;
  eng_request r = {"ops", 3, &d, 1, 1};
  eng_query q = {.kind = ENG_QUERY_RULES, .req = &r, .now = t0 + 3};
  eng_reset out;
  assert_int_equal(engine_reset(f.t, &q, &out, NULL, NULL), 0);
  assert_int_equal(out.dropped, 2);
  eng_result after = req1(f.t, "user", "a", t0 + 4);
  assert_true(after.allowed);
  assert_int_equal(after.st[0].candidate_denied, 0);
  assert_int_equal(after.st[0].cand_d.remaining, 1);
  fixture_free(&f);
}

/* Errors at the candidate's key: a bad policy, a split limit. */
static void bad_candidates_are_refused_where_written(void **state) {
  (void)state;
  static const struct {
    const char *yaml, *msg;
  } bad[] = {
      {"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {policy: "
       "\"gcra:1/s\", candidate: \"gcra:0/s\"}\n",
       "t.yaml:4:"},
      {"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {policy: "
       "\"gcra:4/s\", candidate: \"gcra:1/s\", split: {counters: 2, rotate: true}}\n",
       "a split limit cannot have a candidate"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    cfg_errors e = {0};
    sl_config *c =
        config_load_string(bad[i].yaml, strlen(bad[i].yaml), "t.yaml", &e);
    assert_null(c);
    assert_true(e.n >= 1);
    if (!strstr(e.msgs[0], bad[i].msg) || !strstr(e.msgs[0], "candidate"))
      fail_msg("case %zu: %s", i, e.msgs[0]);
    cfg_errors_free(&e);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(divergences_are_counted_exactly_on_a_trace),
      cmocka_unit_test(a_rule_without_candidate_renders_none),
      cmocka_unit_test(reset_forgets_the_candidates_state),
      cmocka_unit_test(bad_candidates_are_refused_where_written),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
