/*
 * test_engine.c — the daemon's decision engine (src/engine/): config
 * rules to decisions (several descriptors and limits, all or nothing,
 * shadow, unlimited, blocked, replaces), request validation, config
 * reloads (counters that survive, limiters that go, reloads racing worker
 * threads), ad-hoc policies, key reset, and the Prometheus metrics text.
 */
#include <ctype.h>
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

#include "helpers.h"

#include "rules/config.h"
#include "fleet/slot.h"
#include "engine/engine.h"
#include "engine_fixture.h"
#include "fixtures.h"

/* ---- local helpers (the shared ones: engine_fixture.h) ---- */

static engine *engine_of(const char *yaml) {
  char err[256] = "";
  engine *e = engine_new(NULL, cfg_of(yaml), err, sizeof err);
  if (!e) fail_msg("engine_new: %s", err);
  return e;
}

static fixture fixture_of(const char *yaml) { return fixture_with(NULL, yaml); }

#define MAX_PAIRS 8

/* A one-descriptor request given as key, value, ..., NULL. */
static eng_descriptor desc_of(const char *k, ...) {
  eng_descriptor d;
  memset(&d, 0, sizeof d);
  d.hits = -1;
  va_list ap;
  va_start(ap, k);
  for (; k; k = va_arg(ap, const char *)) {
    const char *v = va_arg(ap, const char *);
    assert_true(d.n < ENG_MAX_ENTRIES);
    d.entries[d.n++] = (cfg_entry){k, strlen(k), v, strlen(v)};
  }
  va_end(ap);
  return d;
}

/* Decides descriptors ds[0..n) in domain with `hits`; asserts rc. */
static eng_result check_n(engine_thread *t, const char *domain,
                          eng_descriptor *ds, size_t n, int64_t hits,
                          int64_t now, int want_rc) {
  eng_request r = {domain, strlen(domain), ds, n, hits};
  eng_result out;
  memset(&out, 0xa5, sizeof out);
  int rc = do_check(t, &r, now, &out);
  if (rc != want_rc) fail_msg("engine_decide rc=%d, want %d", rc, want_rc);
  return out;
}

/* One descriptor of one entry, cost 1. */
static eng_result check1(engine_thread *t, const char *domain, const char *k,
                         const char *v, int64_t now) {
  eng_descriptor d = desc_of(k, v, NULL);
  return check_n(t, domain, &d, 1, 1, now, 0);
}

/* The figures a peek (hits 0) reports for one entry. */
static sl_decision peek1(engine_thread *t, const char *domain, const char *k,
                         const char *v, int64_t now) {
  eng_descriptor d = desc_of(k, v, NULL);
  eng_result r = check_n(t, domain, &d, 1, 0, now, 0);
  assert_true(r.allowed);
  assert_int_equal(r.n, 1);
  return r.st[0].d;
}

static uint64_t limiters_of(engine *e) {
  sl_store_stats st;
  sl_store_stats_get(engine_store(e), &st);
  return st.limiters;
}

static char *metrics_of(engine *e) {
  size_t len = 0;
  char *m = engine_metrics(e, &len);
  assert_non_null(m);
  assert_int_equal(strlen(m), len);
  return m;
}

/* The value of the metrics line that starts with `series` + ' ', or -1. */
static long long metric(const char *text, const char *series) {
  size_t n = strlen(series);
  for (const char *p = text; *p;) {
    const char *nl = strchr(p, '\n');
    size_t len = nl ? (size_t)(nl - p) : strlen(p);
    if (len > n && !memcmp(p, series, n) && p[n] == ' ')
      return strtoll(p + n + 1, NULL, 10);
    p += len + (nl != NULL);
  }
  return -1;
}

static const char two_rules[] =
    "domain: d\n"
    "descriptors:\n"
    "  - key: k\n"
    "    rate_limit: {policy: \"fixed_window:5/s\"}\n"
    "  - key: g\n"
    "    rate_limit: {policy: \"gcra:10/s:burst=3\"}\n";

/* ---- engine_new and threads ---- */

static void engine_new_serves_the_config_it_was_given(void **state) {
  (void)state;
  sl_config *c = cfg_of(two_rules);
  char err[128] = "";
  engine *e = engine_new(NULL, c, err, sizeof err);
  assert_non_null(e);
  assert_ptr_equal(engine_config(e), c);
  assert_non_null(engine_store(e));
  assert_int_equal(limiters_of(e), 2);
  engine_free(e);
}

static void engine_new_with_too_small_a_store_fails_with_a_message(
    void **state) {
  (void)state;
  engine_opts o = {.max_memory = 1};
  char err[128] = "";
  assert_null(engine_new(&o, cfg_of(two_rules), err, sizeof err));
  assert_string_equal(err, "store: invalid argument (--max-memory too small)");
}

static void unlimited_and_blocked_rules_need_no_limiter(void **state) {
  (void)state;
  engine *e = engine_of("domain: d\n"
                        "descriptors:\n"
                        "  - key: a\n"
                        "    rate_limit: {unlimited: true}\n"
                        "  - key: b\n"
                        "    rate_limit: {unit: second, requests_per_unit: 0}\n"
                        "  - key: c\n"
                        "    rate_limit: {unit: second, requests_per_unit: 1}\n");
  assert_int_equal(limiters_of(e), 1);
  engine_free(e);
}

static void threads_come_and_go(void **state) {
  (void)state;
  engine *e = engine_of(two_rules);
  engine_thread *ts[ENG_MAX_THREADS];
  for (int i = 0; i < ENG_MAX_THREADS; i++) {
    ts[i] = engine_thread_new(e);
    assert_non_null(ts[i]);
  }
  assert_null(engine_thread_new(e)); /* every slot taken */
  engine_thread_free(ts[7]);
  ts[7] = engine_thread_new(e); /* a freed slot is reused */
  assert_non_null(ts[7]);
  for (int i = 0; i < ENG_MAX_THREADS; i++) engine_thread_quiesce(ts[i]);
  for (int i = 0; i < ENG_MAX_THREADS; i++) engine_thread_free(ts[i]);
  engine_free(e);
}

static void an_offline_thread_does_not_hold_up_a_reload(void **state) {
  (void)state;
  fixture f = fixture_of(two_rules);
  engine_thread *idle = engine_thread_new(f.e);
  engine_thread_offline(idle);
  reload(&f, two_rules); /* would wait forever if `idle` counted */
  engine_thread_quiesce(idle);
  assert_true(check1(idle, "d", "k", "x", T0).allowed);
  engine_thread_free(idle);
  fixture_free(&f);
}

/* ---- engine_decide: the configured rules ---- */

static void check_reports_the_rule_and_the_librarys_figures(void **state) {
  (void)state;
  fixture f = fixture_of(two_rules);
  /* The same policy on its own limiter: the engine must agree exactly. */
  sl_store *s = store_with_cap(0);
  sl_limiter *ref = limiter_of(s, "fixed_window:5/s");
  for (int i = 0; i < 8; i++) {
    int64_t now = T0 + MS(100) * i;
    eng_result r = check1(f.t, "d", "k", "alice", now);
    sl_decision want = take(ref, "alice", 1, now);
    assert_int_equal(r.allowed, want.allowed);
    assert_int_equal(r.n, 1);
    assert_int_equal(r.worst, 0);
    assert_int_equal(r.by_descriptor[0], 0);
    assert_ptr_equal(r.st[0].limit, engine_config(f.e)->limits[0]);
    assert_string_equal(r.st[0].policy_str, "fixed_window:5/s");
    assert_int_equal(r.st[0].descriptor, 0);
    assert_false(r.st[0].shadow);
    assert_false(r.st[0].unlimited);
    assert_same_decision(&r.st[0].d, &want);
  }
  sl_limiter_free(ref);
  sl_store_free(s);
  fixture_free(&f);
}

static void check_allows_the_quota_then_denies_until_the_window_ends(
    void **state) {
  (void)state;
  fixture f = fixture_of(two_rules);
  int64_t now = T0 + MS(250);
  for (int i = 0; i < 5; i++) {
    eng_result r = check1(f.t, "d", "k", "alice", now);
    assert_true(r.allowed);
    assert_int_equal(r.st[0].d.limit, 5);
    assert_int_equal(r.st[0].d.remaining, 4 - i);
    assert_int_equal(r.st[0].d.reset_ns, MS(750));
    assert_int_equal(r.st[0].d.retry_after_ns, 0);
  }
  eng_result r = check1(f.t, "d", "k", "alice", now);
  assert_false(r.allowed);
  assert_false(r.st[0].d.allowed);
  assert_int_equal(r.st[0].d.remaining, 0);
  assert_int_equal(r.st[0].d.retry_after_ns, MS(750));
  assert_true(check1(f.t, "d", "k", "alice", T0 + SEC(1)).allowed);
  fixture_free(&f);
}

static void each_value_of_a_key_only_rule_has_its_own_counter(void **state) {
  (void)state;
  fixture f = fixture_of(two_rules);
  for (int i = 0; i < 5; i++) check1(f.t, "d", "k", "alice", T0);
  assert_false(check1(f.t, "d", "k", "alice", T0).allowed);
  assert_true(check1(f.t, "d", "k", "bob", T0).allowed);
  assert_int_equal(peek1(f.t, "d", "k", "bob", T0).remaining, 4);
  fixture_free(&f);
}

static void descriptors_with_the_same_bytes_split_differently_are_distinct(
    void **state) {
  (void)state;
  fixture f = fixture_of("domain: d\n"
                         "descriptors:\n"
                         "  - key: a\n"
                         "    descriptors:\n"
                         "      - key: b\n"
                         "        rate_limit: {unit: second, requests_per_unit: 1}\n");
  eng_descriptor d1 = desc_of("a", "xy", "b", "z", NULL);
  eng_descriptor d2 = desc_of("a", "x", "b", "yz", NULL);
  assert_true(check_n(f.t, "d", &d1, 1, 1, T0, 0).allowed);
  assert_true(check_n(f.t, "d", &d2, 1, 1, T0, 0).allowed);
  assert_false(check_n(f.t, "d", &d1, 1, 1, T0, 0).allowed);
  fixture_free(&f);
}

static void several_descriptors_are_each_checked(void **state) {
  (void)state;
  fixture f = fixture_of(two_rules);
  eng_descriptor ds[3] = {desc_of("k", "alice", NULL),
                          desc_of("none", "x", NULL),
                          desc_of("g", "alice", NULL)};
  eng_result r = check_n(f.t, "d", ds, 3, 1, T0, 0);
  assert_true(r.allowed);
  assert_int_equal(r.n, 2);
  assert_int_equal(r.st[0].descriptor, 0);
  assert_string_equal(r.st[0].policy_str, "fixed_window:5/s");
  assert_int_equal(r.st[0].d.remaining, 4);
  assert_int_equal(r.st[1].descriptor, 2);
  assert_string_equal(r.st[1].policy_str, "gcra:10/s:burst=3");
  assert_int_equal(r.st[1].d.remaining, 2);
  assert_int_equal(r.by_descriptor[0], 0);
  assert_int_equal(r.by_descriptor[1], -1); /* no rule matched */
  assert_int_equal(r.by_descriptor[2], 1);
  /* The most restrictive: fewest remaining. */
  assert_int_equal(r.worst, 1);
  fixture_free(&f);
}

static void worst_is_the_denying_rule(void **state) {
  (void)state;
  fixture f = fixture_of(two_rules);
  for (int i = 0; i < 5; i++) check1(f.t, "d", "k", "alice", T0);
  eng_descriptor ds[2] = {desc_of("g", "alice", NULL),
                          desc_of("k", "alice", NULL)};
  eng_result r = check_n(f.t, "d", ds, 2, 1, T0, 0);
  assert_false(r.allowed);
  assert_int_equal(r.worst, 1);
  assert_false(r.st[1].d.allowed);
  assert_true(r.st[0].d.allowed); /* gcra had room: its own figures */
  fixture_free(&f);
}

static void a_request_matching_no_rule_is_allowed_with_no_status(
    void **state) {
  (void)state;
  fixture f = fixture_of(two_rules);
  eng_result r = check1(f.t, "d", "unknown", "x", T0);
  assert_true(r.allowed);
  assert_int_equal(r.n, 0);
  assert_int_equal(r.worst, -1);
  assert_int_equal(r.by_descriptor[0], -1);
  fixture_free(&f);
}

static void hits_are_the_requests_cost(void **state) {
  (void)state;
  fixture f = fixture_of(two_rules);
  eng_descriptor d = desc_of("k", "alice", NULL);
  eng_result r = check_n(f.t, "d", &d, 1, 3, T0, 0);
  assert_true(r.allowed);
  assert_int_equal(r.st[0].d.remaining, 2);
  r = check_n(f.t, "d", &d, 1, 3, T0, 0);
  assert_false(r.allowed);
  assert_int_equal(r.st[0].d.remaining, 2);
  fixture_free(&f);
}

static void per_descriptor_hits_override_the_requests(void **state) {
  (void)state;
  fixture f = fixture_of(two_rules);
  eng_descriptor ds[2] = {desc_of("k", "alice", NULL),
                          desc_of("k", "bob", NULL)};
  ds[0].hits = 4; /* bob: the request's 1 */
  eng_result r = check_n(f.t, "d", ds, 2, 1, T0, 0);
  assert_true(r.allowed);
  assert_int_equal(r.st[0].d.remaining, 1);
  assert_int_equal(r.st[1].d.remaining, 4);
  ds[0].hits = 0; /* a peek for alice, a charge for bob */
  r = check_n(f.t, "d", ds, 2, 1, T0, 0);
  assert_int_equal(r.st[0].d.remaining, 1);
  assert_int_equal(r.st[1].d.remaining, 3);
  fixture_free(&f);
}

static void hits_zero_is_a_peek_that_charges_nothing(void **state) {
  (void)state;
  fixture f = fixture_of(two_rules);
  for (int i = 0; i < 3; i++)
    assert_int_equal(peek1(f.t, "d", "k", "alice", T0).remaining, 5);
  check1(f.t, "d", "k", "alice", T0);
  assert_int_equal(peek1(f.t, "d", "k", "alice", T0).remaining, 4);
  fixture_free(&f);
}

static void a_cost_no_rule_can_allow_is_an_error(void **state) {
  (void)state;
  fixture f = fixture_of(two_rules);
  eng_descriptor d = desc_of("k", "alice", NULL);
  eng_result r = check_n(f.t, "d", &d, 1, 6, T0, SL_ECOST);
  (void)r;
  assert_int_equal(peek1(f.t, "d", "k", "alice", T0).remaining, 5);
  fixture_free(&f);
}

static const char per_second_and_day[] =
    "domain: api\n"
    "descriptors:\n"
    "  - key: user\n"
    "    rate_limits:\n"
    "      - {unit: second, requests_per_unit: 2}\n"
    "      - {unit: day, requests_per_unit: 5}\n";

static void a_request_denied_by_one_rule_charges_nothing_in_the_others(
    void **state) {
  (void)state;
  fixture f = fixture_of(per_second_and_day);
  assert_true(check1(f.t, "api", "user", "u", T0).allowed);
  assert_true(check1(f.t, "api", "user", "u", T0).allowed);
  for (int i = 0; i < 10; i++) {
    eng_result r = check1(f.t, "api", "user", "u", T0 + MS(i));
    assert_false(r.allowed);
    assert_int_equal(r.n, 2);
    assert_false(r.st[0].d.allowed);
    assert_int_equal(r.st[1].d.remaining, 3); /* the day is not charged */
  }
  eng_descriptor d = desc_of("user", "u", NULL);
  eng_result r = check_n(f.t, "api", &d, 1, 0, T0 + MS(500), 0);
  assert_int_equal(r.st[1].d.remaining, 3);
  /* The next second: allowed again, charged in both. */
  r = check1(f.t, "api", "user", "u", T0 + SEC(1));
  assert_true(r.allowed);
  assert_int_equal(r.st[0].d.remaining, 1);
  assert_int_equal(r.st[1].d.remaining, 2);
  fixture_free(&f);
}

static void the_day_limit_denies_once_spent_across_seconds(void **state) {
  (void)state;
  fixture f = fixture_of(per_second_and_day);
  for (int i = 0; i < 5; i++)
    assert_true(check1(f.t, "api", "user", "u", T0 + SEC(i)).allowed);
  eng_result r = check1(f.t, "api", "user", "u", T0 + SEC(10));
  assert_false(r.allowed);
  assert_int_equal(r.worst, 1);
  assert_int_equal(r.st[1].d.retry_after_ns, SEC(86400 - 10));
  assert_true(r.st[0].d.allowed);
  assert_int_equal(r.st[0].d.remaining, 2); /* the second is not charged */
  fixture_free(&f);
}

static const char shadow_yaml[] =
    "domain: d\n"
    "descriptors:\n"
    "  - key: s\n"
    "    shadow_mode: true\n"
    "    rate_limit: {unit: second, requests_per_unit: 1}\n"
    "  - key: k\n"
    "    rate_limit: {unit: second, requests_per_unit: 1}\n";

static void a_shadow_rule_never_denies_but_says_it_would_have(void **state) {
  (void)state;
  fixture f = fixture_of(shadow_yaml);
  eng_result r = check1(f.t, "d", "s", "x", T0);
  assert_true(r.allowed);
  assert_true(r.st[0].shadow);
  assert_true(r.st[0].d.allowed);
  for (int i = 0; i < 3; i++) {
    r = check1(f.t, "d", "s", "x", T0);
    assert_true(r.allowed);
    assert_true(r.st[0].shadow);
    assert_false(r.st[0].d.allowed); /* would deny */
    assert_int_equal(r.st[0].d.remaining, 0);
    assert_int_equal(r.st[0].d.retry_after_ns, SEC(1));
  }
  fixture_free(&f);
}

static void a_shadow_rule_does_not_save_a_request_an_enforced_rule_denies(
    void **state) {
  (void)state;
  fixture f = fixture_of(shadow_yaml);
  eng_descriptor ds[2] = {desc_of("s", "x", NULL), desc_of("k", "x", NULL)};
  assert_true(check_n(f.t, "d", ds, 2, 1, T0, 0).allowed);
  eng_result r = check_n(f.t, "d", ds, 2, 1, T0, 0);
  assert_false(r.allowed);
  /* The enforced rule is the worst, ahead of the shadow one. */
  assert_int_equal(r.worst, 1);
  assert_false(r.st[1].shadow);
  fixture_free(&f);
}

static const char unlimited_yaml[] =
    "domain: internal\n"
    "descriptors:\n"
    "  - key: ldap\n"
    "    rate_limit:\n"
    "      unlimited: true\n"
    "  - key: azure\n"
    "    rate_limit:\n"
    "      unit: minute\n"
    "      requests_per_unit: 1\n";

static void an_unlimited_rule_always_allows(void **state) {
  (void)state;
  fixture f = fixture_of(unlimited_yaml);
  for (int i = 0; i < 100; i++) {
    eng_result r = check1(f.t, "internal", "ldap", "x", T0);
    assert_true(r.allowed);
    assert_int_equal(r.n, 1);
    assert_true(r.st[0].unlimited);
    assert_true(r.st[0].d.allowed);
    assert_int_equal(r.st[0].d.remaining, UINT32_MAX);
    assert_string_equal(r.st[0].policy_str, "unlimited");
    assert_int_equal(r.worst, -1); /* nothing limits it */
    assert_int_equal(r.by_descriptor[0], 0);
  }
  assert_int_equal(limiters_of(f.e), 1); /* azure's only */
  fixture_free(&f);
}

static void an_unlimited_descriptor_does_not_lift_another_ones_limit(
    void **state) {
  (void)state;
  fixture f = fixture_of(unlimited_yaml);
  eng_descriptor ds[2] = {desc_of("ldap", "x", NULL),
                          desc_of("azure", "x", NULL)};
  assert_true(check_n(f.t, "internal", ds, 2, 1, T0, 0).allowed);
  eng_result r = check_n(f.t, "internal", ds, 2, 1, T0, 0);
  assert_false(r.allowed);
  assert_int_equal(r.worst, 1);
  fixture_free(&f);
}

static const char blocked_yaml[] =
    "domain: edge\n"
    "descriptors:\n"
    "  - key: ip\n"
    "    rate_limit: {unit: hour, requests_per_unit: 10}\n"
    "  - key: ip\n"
    "    value: 50.0.0.5\n"
    "    rate_limit: {unit: hour, requests_per_unit: 0}\n"
    "  - key: user\n"
    "    rate_limit: {unit: hour, requests_per_unit: 10}\n";

static void a_blocked_rule_denies_for_good_until_its_window_ends(
    void **state) {
  (void)state;
  fixture f = fixture_of(blocked_yaml);
  int64_t now = T0 + MS(1234);
  for (int i = 0; i < 3; i++) {
    eng_result r = check1(f.t, "edge", "ip", "50.0.0.5", now);
    assert_false(r.allowed);
    assert_int_equal(r.n, 1);
    assert_string_equal(r.st[0].policy_str, "blocked");
    assert_false(r.st[0].d.allowed);
    assert_int_equal(r.st[0].d.retry_after_ns, -1);
    assert_int_equal(r.st[0].d.reset_ns, SEC(3600) - MS(1234));
    assert_int_equal(r.st[0].d.limit, 0);
    assert_int_equal(r.st[0].d.remaining, 0);
    assert_int_equal(r.worst, 0);
  }
  assert_true(check1(f.t, "edge", "ip", "50.0.0.6", now).allowed);
  fixture_free(&f);
}

static void a_blocked_rule_charges_nothing_in_the_others(void **state) {
  (void)state;
  fixture f = fixture_of(blocked_yaml);
  eng_descriptor ds[2] = {desc_of("user", "u", NULL),
                          desc_of("ip", "50.0.0.5", NULL)};
  for (int i = 0; i < 3; i++) {
    eng_result r = check_n(f.t, "edge", ds, 2, 1, T0, 0);
    assert_false(r.allowed);
    assert_int_equal(r.n, 2);
    assert_int_equal(r.worst, 1);
  }
  assert_int_equal(peek1(f.t, "edge", "user", "u", T0).remaining, 10);
  fixture_free(&f);
}

static void a_peek_at_a_blocked_rule_is_allowed(void **state) {
  (void)state;
  fixture f = fixture_of(blocked_yaml);
  eng_descriptor d = desc_of("ip", "50.0.0.5", NULL);
  eng_result r = check_n(f.t, "edge", &d, 1, 0, T0, 0);
  assert_true(r.allowed);
  assert_int_equal(r.st[0].d.retry_after_ns, 0);
  fixture_free(&f);
}

static void replaces_drops_the_replaced_limit(void **state) {
  (void)state;
  fixture f = fixture_of(yaml_fixture("envoy/example7.yaml"));
  eng_descriptor ds[2] = {desc_of("key_1", "value_1", "user", "bkthomps", NULL),
                          desc_of("key_2", "value_2", "user", "bkthomps", NULL)};
  for (int i = 0; i < 10; i++) {
    eng_result r = check_n(f.t, "example7", ds, 2, 1, T0, 0);
    assert_true(r.allowed);
    assert_int_equal(r.n, 1); /* only the replacing limit */
    assert_int_equal(r.st[0].descriptor, 1);
    assert_int_equal(r.st[0].d.limit, 10);
    assert_int_equal(r.st[0].d.remaining, 9 - i);
    assert_int_equal(r.by_descriptor[0], -1);
  }
  assert_false(check_n(f.t, "example7", ds, 2, 1, T0, 0).allowed);
  /* "the limit of the original will not be changed after evaluation" */
  eng_result r = check_n(f.t, "example7", &ds[0], 1, 1, T0, 0);
  assert_true(r.allowed);
  assert_int_equal(r.st[0].d.limit, 5);
  assert_int_equal(r.st[0].d.remaining, 4);
  fixture_free(&f);
}

static void replaces_only_acts_when_both_limits_match(void **state) {
  (void)state;
  fixture f = fixture_of(yaml_fixture("envoy/example7.yaml"));
  eng_descriptor d = desc_of("key_2", "value_2", "user", "bkthomps", NULL);
  eng_result r = check_n(f.t, "example7", &d, 1, 1, T0, 0);
  assert_int_equal(r.n, 1);
  assert_int_equal(r.st[0].d.limit, 10);
  fixture_free(&f);
}

static void an_unknown_domain_is_an_error(void **state) {
  (void)state;
  fixture f = fixture_of(two_rules);
  eng_descriptor d = desc_of("k", "x", NULL);
  eng_result r = check_n(f.t, "nope", &d, 1, 1, T0, ENG_EDOMAIN);
  assert_int_equal(r.n, 0);
  /* The domain is a counted string: "dd" of length 1 is "d". */
  eng_request req = {"dd", 1, &d, 1, 1};
  assert_int_equal(do_check(f.t, &req, T0, &r), 0);
  req.domain_len = 2;
  assert_int_equal(do_check(f.t, &req, T0, &r), ENG_EDOMAIN);
  fixture_free(&f);
}

static void too_many_or_no_descriptors_is_an_error(void **state) {
  (void)state;
  fixture f = fixture_of(two_rules);
  eng_descriptor ds[ENG_MAX_DESCRIPTORS + 1];
  for (int i = 0; i <= ENG_MAX_DESCRIPTORS; i++) ds[i] = desc_of("k", "x", NULL);
  check_n(f.t, "d", ds, 0, 1, T0, ENG_EDESCRIPTOR);
  check_n(f.t, "d", ds, ENG_MAX_DESCRIPTORS + 1, 1, T0, ENG_EDESCRIPTOR);
  /* Nothing was charged by the refused requests. */
  assert_int_equal(peek1(f.t, "d", "k", "x", T0).remaining, 5);
  ds[0].hits = 0;
  eng_result r = check_n(f.t, "d", ds, ENG_MAX_DESCRIPTORS, 0, T0, 0);
  assert_int_equal(r.n, ENG_MAX_DESCRIPTORS);
  fixture_free(&f);
}

static void too_many_or_no_entries_is_an_error(void **state) {
  (void)state;
  fixture f = fixture_of(two_rules);
  eng_descriptor d = desc_of("k", "x", NULL);
  d.n = 0;
  check_n(f.t, "d", &d, 1, 1, T0, ENG_EDESCRIPTOR);
  d.n = ENG_MAX_ENTRIES + 1;
  for (size_t i = 0; i < ENG_MAX_ENTRIES; i++)
    d.entries[i] = (cfg_entry){"k", 1, "x", 1};
  check_n(f.t, "d", &d, 1, 1, T0, ENG_EDESCRIPTOR);
  fixture_free(&f);
}

static void a_descriptor_longer_than_a_store_key_is_an_error(void **state) {
  (void)state;
  fixture f = fixture_of(two_rules);
  static char big[SL_KEY_MAX];
  memset(big, 'v', sizeof big);
  eng_descriptor d = desc_of("k", "x", NULL);
  d.entries[0].value = big;
  d.entries[0].value_len = SL_KEY_MAX - 4; /* + "k" and two lengths: fits */
  assert_true(check_n(f.t, "d", &d, 1, 1, T0, 0).allowed);
  d.entries[0].value_len = SL_KEY_MAX - 3; /* one byte too many */
  check_n(f.t, "d", &d, 1, 1, T0, ENG_EDESCRIPTOR);
  fixture_free(&f);
}

static void more_than_64_matched_limits_is_an_error(void **state) {
  (void)state;
  /* 5 limits on one descriptor, 13 descriptors: 65 statuses. */
  fixture f = fixture_of("domain: d\n"
                         "descriptors:\n"
                         "  - key: k\n"
                         "    rate_limits:\n"
                         "      - {unit: second, requests_per_unit: 1}\n"
                         "      - {unit: minute, requests_per_unit: 2}\n"
                         "      - {unit: hour, requests_per_unit: 3}\n"
                         "      - {unit: day, requests_per_unit: 4}\n"
                         "      - {unit: week, requests_per_unit: 5}\n");
  eng_descriptor ds[13];
  for (int i = 0; i < 13; i++) ds[i] = desc_of("k", "x", NULL);
  check_n(f.t, "d", ds, 12, 0, T0, 0);
  check_n(f.t, "d", ds, 13, 0, T0, ENG_EDESCRIPTOR);
  fixture_free(&f);
}

/* ---- engine_reload ---- */

static void counters_of_unchanged_rules_survive_a_reload(void **state) {
  (void)state;
  fixture f = fixture_of(two_rules);
  for (int i = 0; i < 3; i++) check1(f.t, "d", "k", "alice", T0);
  check1(f.t, "d", "g", "alice", T0);
  uint64_t before = limiters_of(f.e);
  /* The same rules (and a new one) in a new config object. */
  reload(&f, "domain: d\n"
             "descriptors:\n"
             "  - key: new\n"
             "    rate_limit: {unit: second, requests_per_unit: 1}\n"
             "  - key: g\n"
             "    rate_limit: {policy: \"gcra:10/s:burst=3\"}\n"
             "  - key: k\n"
             "    rate_limit: {unit: second, requests_per_unit: 5}\n");
  assert_int_equal(limiters_of(f.e), before + 1);
  assert_int_equal(peek1(f.t, "d", "k", "alice", T0).remaining, 2);
  assert_int_equal(peek1(f.t, "d", "g", "alice", T0).remaining, 2);
  assert_int_equal(peek1(f.t, "d", "new", "alice", T0).remaining, 1);
  fixture_free(&f);
}

static void a_changed_policy_starts_fresh(void **state) {
  (void)state;
  fixture f = fixture_of(two_rules);
  for (int i = 0; i < 5; i++) check1(f.t, "d", "k", "alice", T0);
  assert_false(check1(f.t, "d", "k", "alice", T0).allowed);
  reload(&f, "domain: d\n"
             "descriptors:\n"
             "  - key: k\n"
             "    rate_limit: {policy: \"fixed_window:6/s\"}\n");
  sl_decision d = peek1(f.t, "d", "k", "alice", T0);
  assert_int_equal(d.limit, 6);
  assert_int_equal(d.remaining, 6);
  fixture_free(&f);
}

static void removed_rules_limiters_are_freed(void **state) {
  (void)state;
  fixture f = fixture_of(two_rules);
  check1(f.t, "d", "k", "alice", T0);
  check1(f.t, "d", "g", "alice", T0);
  assert_int_equal(limiters_of(f.e), 2);
  sl_store_stats st;
  sl_store_stats_get(engine_store(f.e), &st);
  assert_int_equal(st.keys, 2);
  reload(&f, "domain: d\n"
             "descriptors:\n"
             "  - key: g\n"
             "    rate_limit: {policy: \"gcra:10/s:burst=3\"}\n");
  sl_store_stats_get(engine_store(f.e), &st);
  assert_int_equal(st.limiters, 1);
  assert_int_equal(st.keys, 1); /* k's state went with its limiter */
  reload(&f, "domain: other\n");
  assert_int_equal(limiters_of(f.e), 0);
  check_n(f.t, "d", (eng_descriptor[]){desc_of("g", "x", NULL)}, 1, 1, T0,
          ENG_EDOMAIN);
  fixture_free(&f);
}

static void a_reload_swaps_what_engine_config_returns(void **state) {
  (void)state;
  fixture f = fixture_of(two_rules);
  sl_config *c = cfg_of("domain: e\n");
  engine_thread_offline(f.t);
  assert_int_equal(engine_reload(f.e, c), 0);
  assert_ptr_equal(engine_config(f.e), c);
  engine_thread_quiesce(f.t);
  assert_int_equal(check1(f.t, "e", "k", "x", T0).n, 0);
  fixture_free(&f);
}

/* Worker threads that decide and quiesce while the main thread reloads. */
typedef struct worker_arg {
  engine *e;
  atomic_int *stop;
  long checks, errors, allowed;
  atomic_long progress; /* iterations, read by the main thread */
  int id;
} worker_arg;

static void *worker_loop(void *p) {
  worker_arg *a = p;
  engine_thread *t = engine_thread_new(a->e);
  if (!t) {
    a->errors++;
    return NULL;
  }
  char value[16];
  snprintf(value, sizeof value, "w%d", a->id);
  for (long i = 0; !atomic_load(a->stop); i++) {
    eng_descriptor ds[2] = {desc_of("k", value, NULL),
                            desc_of("g", "shared", NULL)};
    eng_request r = {"d", 1, ds, 2, 1};
    eng_result out;
    int rc = do_check(t, &r, T0 + MS(i / 64), &out);
    if (rc == 0) {
      a->checks++;
      a->allowed += out.allowed;
      /* Whatever the generation, what matched is consistent with it. */
      for (size_t k = 0; k < out.n; k++)
        if (!out.st[k].limit || !out.st[k].policy_str) a->errors++;
    } else if (rc != ENG_EDOMAIN) {
      a->errors++;
    }
    atomic_fetch_add(&a->progress, 1);
    if (i % 4 == 0) engine_thread_quiesce(t);
    if (i % 1024 == 1023) { /* sometimes offline, as a blocked worker */
      engine_thread_offline(t);
      engine_thread_quiesce(t);
    }
  }
  engine_thread_offline(t);
  engine_thread_free(t);
  return NULL;
}

/* Waits until each worker has made `more` iterations from now (at most
   about 10 s, then fails). */
static void wait_for_progress(worker_arg *args, int n, long more) {
  long from[16];
  for (int i = 0; i < n; i++) from[i] = atomic_load(&args[i].progress);
  for (int spins = 0;; spins++) {
    int behind = 0;
    for (int i = 0; i < n; i++)
      behind |= atomic_load(&args[i].progress) - from[i] < more;
    if (!behind) return;
    if (spins > 10000) fail_msg("the workers make no progress");
    struct timespec nap = {0, 1000000};
    nanosleep(&nap, NULL);
  }
}

static void reloads_race_worker_threads_safely(void **state) {
  (void)state;
  engine *e = engine_of(two_rules);
  atomic_int stop = 0;
  enum { NW = 3 };
  worker_arg args[NW];
  pthread_t th[NW];
  for (int i = 0; i < NW; i++) {
    args[i] = (worker_arg){e, &stop, 0, 0, 0, 0, i};
    assert_int_equal(pthread_create(&th[i], NULL, worker_loop, &args[i]), 0);
  }
  /* Every worker deciding before, during and after the reloads. */
  wait_for_progress(args, NW, 100);
  static const char *const configs[] = {
      two_rules,
      "domain: d\n"
      "descriptors:\n"
      "  - key: k\n"
      "    rate_limit: {policy: \"sliding_window:7/s\"}\n"
      "  - key: g\n"
      "    rate_limit: {policy: \"gcra:10/s:burst=3\"}\n",
      "domain: d\n"
      "descriptors:\n"
      "  - key: g\n"
      "    shadow_mode: true\n"
      "    rate_limit: {unit: second, requests_per_unit: 2}\n",
      "domain: other\n",
  };
  for (int i = 0; i < 40; i++)
    assert_int_equal(engine_reload(e, cfg_of(configs[i % 4])), 0);
  wait_for_progress(args, NW, 100);
  atomic_store(&stop, 1);
  long checks = 0;
  for (int i = 0; i < NW; i++) {
    assert_int_equal(pthread_join(th[i], NULL), 0);
    assert_int_equal(args[i].errors, 0);
    checks += args[i].checks;
  }
  assert_true(checks > 0);
  char *m = metrics_of(e);
  assert_int_equal(metric(m, "sluice_config_reloads_total{result=\"success\"}"),
                   40);
  free(m);
  engine_free(e);
}

static void an_invalid_new_config_keeps_the_old_one_and_is_counted(
    void **state) {
  (void)state;
  fixture f = fixture_of(two_rules);
  check1(f.t, "d", "k", "alice", T0);
  /* What the daemon does when the new file does not load (reload.c). */
  cfg_errors errs = {0};
  const char *bad = "domain: d\ndescriptors: [\n";
  assert_null(config_load_string(bad, strlen(bad), "t.yaml", &errs));
  cfg_errors_free(&errs);
  engine_note_reload_failure(f.e);
  engine_thread_quiesce(f.t);
  assert_int_equal(peek1(f.t, "d", "k", "alice", T0).remaining, 4);
  char *m = metrics_of(f.e);
  assert_int_equal(metric(m, "sluice_config_reloads_total{result=\"failure\"}"),
                   1);
  assert_int_equal(metric(m, "sluice_config_reloads_total{result=\"success\"}"),
                   0);
  free(m);
  fixture_free(&f);
}

/* ---- ad-hoc policies ---- */


static void throttle_decides_under_an_ad_hoc_policy(void **state) {
  (void)state;
  fixture f = fixture_of(two_rules);
  sl_store *s = store_with_cap(0);
  sl_limiter *ref = limiter_of(s, "token_bucket:2/s:burst=10");
  for (int i = 0; i < 14; i++) {
    int64_t now = T0 + MS(25) * i;
    eng_result r = throttle(f.t, "k", "token_bucket:2/s:burst=10", 1, now);
    sl_decision want = take(ref, "k", 1, now);
    assert_int_equal(r.allowed, want.allowed);
    assert_int_equal(r.n, 1);
    assert_int_equal(r.worst, 0);
    assert_null(r.st[0].limit);
    assert_string_equal(r.st[0].policy_str, "token_bucket:2/s:burst=10");
    assert_same_decision(&r.st[0].d, &want);
  }
  sl_limiter_free(ref);
  sl_store_free(s);
  fixture_free(&f);
}

static void throttle_shares_one_state_per_canonical_policy(void **state) {
  (void)state;
  fixture f = fixture_of(two_rules);
  engine_thread *t2 = engine_thread_new(f.e);
  /* Two spellings, two threads: one policy, one state for the key. */
  throttle(f.t, "k", "gcra:5/s", 1, T0);
  eng_result r = throttle(t2, "k", "gcra:5/1s:burst=5", 1, T0);
  assert_string_equal(r.st[0].policy_str, "gcra:5/s");
  assert_int_equal(r.st[0].d.remaining, 3);
  assert_int_equal(limiters_of(f.e), 3); /* the two rules + one ad hoc */
  engine_thread_free(t2);
  fixture_free(&f);
}

static void throttle_cache_holds_many_specs_correctly(void **state) {
  (void)state;
  fixture f = fixture_of(two_rules);
  /* More specs than the per-thread cache has slots, interleaved. */
  for (int round = 0; round < 3; round++)
    for (int n = 1; n <= 200; n++) {
      char spec[64];
      snprintf(spec, sizeof spec, "fixed_window:%d/h", n);
      eng_result r = throttle(f.t, "key", spec, 1, T0);
      assert_int_equal(r.st[0].d.limit, n);
      assert_int_equal(r.st[0].d.remaining, n > round ? n - round - 1 : 0);
      assert_string_equal(r.st[0].policy_str, spec);
    }
  fixture_free(&f);
}

static void the_same_key_under_two_policies_is_two_states(void **state) {
  (void)state;
  fixture f = fixture_of(two_rules);
  throttle(f.t, "k", "fixed_window:3/s", 1, T0);
  throttle(f.t, "k", "fixed_window:3/s", 1, T0);
  eng_result r = throttle(f.t, "k", "fixed_window:4/s", 1, T0);
  assert_int_equal(r.st[0].d.remaining, 3);
  r = throttle(f.t, "k", "fixed_window:3/s", 1, T0);
  assert_int_equal(r.st[0].d.remaining, 0);
  fixture_free(&f);
}

static void throttle_keys_are_apart_from_config_rules(void **state) {
  (void)state;
  fixture f = fixture_of(two_rules);
  for (int i = 0; i < 5; i++) check1(f.t, "d", "k", "alice", T0);
  eng_result r = throttle(f.t, "alice", "fixed_window:5/s", 1, T0);
  assert_true(r.allowed);
  assert_int_equal(r.st[0].d.remaining, 4);
  fixture_free(&f);
}

static void throttle_counts_allowed_and_denied(void **state) {
  (void)state;
  fixture f = fixture_of(two_rules);
  for (int i = 0; i < 3; i++) throttle(f.t, "k", "fixed_window:2/s", 1, T0);
  char *m = metrics_of(f.e);
  assert_int_equal(
      metric(m, "sluice_decisions_total{kind=\"throttle\",result=\"allowed\"}"), 2);
  assert_int_equal(
      metric(m, "sluice_decisions_total{kind=\"throttle\",result=\"denied\"}"), 1);
  free(m);
  fixture_free(&f);
}

static void throttle_with_a_bad_policy_says_why(void **state) {
  (void)state;
  fixture f = fixture_of(two_rules);
  eng_result r;
  char err[256] = "";
  int rc = do_throttle(f.t, "k", 1, "tokenbucket:1/s", 15, 1, T0, &r, err,
                           sizeof err);
  assert_int_equal(rc, SL_EPOLICY);
  assert_string_equal(err, "unknown algorithm 'tokenbucket' (expected "
                           "token_bucket, leaky_bucket, fixed_window, "
                           "sliding_log, sliding_window, gcra or concurrency)");
  rc = do_throttle(f.t, "k", 1, "gcra:0/s", 8, 1, T0, &r, err, sizeof err);
  assert_int_equal(rc, SL_EPOLICY);
  assert_string_equal(err, "limit '0' must be positive");
  char longspec[300];
  memset(longspec, '1', sizeof longspec);
  rc = do_throttle(f.t, "k", 1, longspec, sizeof longspec, 1, T0, &r, err,
                       sizeof err);
  assert_int_equal(rc, SL_EPOLICY);
  assert_string_equal(err, "policy is too long");
  assert_int_equal(limiters_of(f.e), 2);
  fixture_free(&f);
}

static void throttle_spec_is_a_counted_string(void **state) {
  (void)state;
  fixture f = fixture_of(two_rules);
  const char buf[] = "gcra:5/s:burst=10XYZ";
  eng_result r;
  char err[128] = "";
  assert_int_equal(do_throttle(f.t, "kk", 1, buf, 8, 1, T0, &r, err,
                                   sizeof err), 0);
  assert_string_equal(r.st[0].policy_str, "gcra:5/s");
  assert_int_equal(do_throttle(f.t, "kk", 1, buf, 17, 1, T0, &r, err,
                                   sizeof err), 0);
  assert_string_equal(r.st[0].policy_str, "gcra:5/s:burst=10");
  assert_int_equal(do_throttle(f.t, "kk", 1, buf, 18, 1, T0, &r, err,
                                   sizeof err), SL_EPOLICY);
  fixture_free(&f);
}

static void throttle_refuses_a_policy_past_1024_distinct_ones(void **state) {
  (void)state;
  fixture f = fixture_of(two_rules);
  char spec[64], err[256];
  eng_result r;
  for (int n = 1; n <= ENG_MAX_ADHOC; n++) {
    snprintf(spec, sizeof spec, "sliding_window:%d/m", n);
    assert_int_equal(do_throttle(f.t, "k", 1, spec, strlen(spec), 1, T0,
                                     &r, err, sizeof err), 0);
  }
  assert_int_equal(limiters_of(f.e), 2 + ENG_MAX_ADHOC);
  snprintf(spec, sizeof spec, "sliding_window:%d/m", ENG_MAX_ADHOC + 1);
  assert_int_equal(do_throttle(f.t, "k", 1, spec, strlen(spec), 1, T0, &r,
                                   err, sizeof err), ENG_EADHOC);
  assert_string_equal(err, "too many distinct ad-hoc policies (max 1024)");
  sl_policy p = policy_of("gcra:1/h");
  assert_int_equal(do_throttle_policy(f.t, "k", 1, &p, 1, T0, &r),
                   ENG_EADHOC);
  /* The known ones still work, also through another spelling. */
  assert_int_equal(do_throttle(f.t, "k", 1, "sliding_window:7/1m", 19, 1,
                                   T0, &r, err, sizeof err), 0);
  assert_int_equal(r.st[0].d.remaining, 5);
  fixture_free(&f);
}

static void keyless_adhoc_policies_are_freed_for_new_ones(void **state) {
  (void)state;
  fixture f = fixture_of(two_rules);
  char spec[64], err[256];
  eng_result r;
  /* The cap, filled with policies whose keys are fresh a second later;
     one more keeps its key for an hour. */
  for (int n = 1; n < ENG_MAX_ADHOC; n++) {
    snprintf(spec, sizeof spec, "fixed_window:%d/s", n);
    assert_int_equal(do_throttle(f.t, "k", 1, spec, strlen(spec), 1, T0, &r,
                                 err, sizeof err), 0);
  }
  assert_int_equal(do_throttle(f.t, "k", 1, "fixed_window:5/h", 16, 1, T0,
                               &r, err, sizeof err), 0);
  assert_int_equal(do_throttle(f.t, "k", 1, "gcra:1/h", 8, 1, T0, &r, err,
                               sizeof err), ENG_EADHOC);
  /* The keys go; the main thread retires the keyless policies, and frees
     them once the worker has passed a quiesce point. */
  sl_store_expire(engine_store(f.e), T0 + SEC(10), 1 << 20);
  engine_maintain(f.e);
  assert_int_equal(do_throttle(f.t, "k", 1, "gcra:1/h", 8, 1, T0, &r, err,
                               sizeof err), 0);
  engine_thread_quiesce(f.t);
  for (int i = 0; i < ENG_MAX_ADHOC / 64 + 1; i++) engine_maintain(f.e);
  assert_int_equal(limiters_of(f.e), 2 + 2);
  /* The policy that kept its key kept its state. */
  assert_int_equal(do_throttle(f.t, "k", 1, "fixed_window:5/h", 16, 1,
                               T0 + SEC(10), &r, err, sizeof err), 0);
  assert_int_equal(r.st[0].d.remaining, 3);
  fixture_free(&f);
}

static void throttle_policy_shares_the_state_of_the_same_spec(void **state) {
  (void)state;
  fixture f = fixture_of(two_rules);
  throttle(f.t, "user1", "gcra:30/m:burst=16", 1, T0);
  sl_policy p = {SL_GCRA, 30, 16, SEC(60)};
  eng_result r;
  assert_int_equal(do_throttle_policy(f.t, "user1", 5, &p, 1, T0, &r), 0);
  assert_true(r.allowed);
  assert_int_equal(r.n, 1);
  assert_int_equal(r.worst, 0);
  assert_string_equal(r.st[0].policy_str, "gcra:30/m:burst=16");
  assert_int_equal(r.st[0].d.limit, 16);
  assert_int_equal(r.st[0].d.remaining, 14);
  sl_policy bad = {SL_GCRA, 0, 16, SEC(60)};
  assert_int_equal(do_throttle_policy(f.t, "user1", 5, &bad, 1, T0, &r),
                   SL_EPOLICY);
  fixture_free(&f);
}

static void throttle_reports_a_cost_above_the_burst(void **state) {
  (void)state;
  fixture f = fixture_of(two_rules);
  eng_result r;
  char err[64];
  assert_int_equal(do_throttle(f.t, "k", 1, "gcra:5/s", 8, 6, T0, &r, err,
                                   sizeof err), SL_ECOST);
  fixture_free(&f);
}

/* ---- engine_reset: an ad-hoc key ---- */

static void reset_key_forgets_the_key_under_every_ad_hoc_policy(
    void **state) {
  (void)state;
  fixture f = fixture_of(two_rules);
  throttle(f.t, "k", "fixed_window:3/s", 3, T0);
  throttle(f.t, "k", "gcra:3/s", 3, T0);
  throttle(f.t, "other", "gcra:3/s", 3, T0);
  assert_int_equal(do_reset_key(f.t, "k", 1), 2);
  assert_int_equal(throttle(f.t, "k", "fixed_window:3/s", 0, T0).st[0].d.remaining,
                   3);
  assert_int_equal(throttle(f.t, "k", "gcra:3/s", 0, T0).st[0].d.remaining, 3);
  assert_int_equal(throttle(f.t, "other", "gcra:3/s", 0, T0).st[0].d.remaining,
                   0);
  assert_int_equal(do_reset_key(f.t, "k", 1), 0);
  assert_int_equal(do_reset_key(f.t, "never", 5), 0);
  fixture_free(&f);
}

/* ---- metrics ---- */

/* Checks the Prometheus text format: comments are "# HELP name text" or
   "# TYPE name type" (TYPE before the family's samples), every other line
   is `name{label="value",...} value` or `name value`, label values with
   only \\, \" and \n escapes. Returns the number of samples. */
static int assert_prometheus_text(const char *text) {
  int samples = 0;
  char typed[64][96];
  int ntyped = 0;
  assert_true(strlen(text) > 0);
  assert_int_equal(text[strlen(text) - 1], '\n');
  for (const char *p = text; *p;) {
    const char *nl = strchr(p, '\n');
    assert_non_null(nl);
    char line[4096];
    size_t len = (size_t)(nl - p);
    assert_true(len < sizeof line);
    memcpy(line, p, len);
    line[len] = '\0';
    p = nl + 1;
    if (line[0] == '#') {
      char kind[8], name[96], rest[512];
      assert_int_equal(sscanf(line, "# %7s %95s %511[^\n]", kind, name, rest),
                       3);
      if (!strcmp(kind, "TYPE")) {
        assert_true(!strcmp(rest, "counter") || !strcmp(rest, "gauge") ||
                    !strcmp(rest, "histogram"));
        assert_true(ntyped < 64);
        snprintf(typed[ntyped++], sizeof typed[0], "%s", name);
      } else {
        assert_string_equal(kind, "HELP");
      }
      continue;
    }
    /* The metric name. */
    const char *q = line;
    assert_true(isalpha((unsigned char)*q) || *q == '_' || *q == ':');
    while (isalnum((unsigned char)*q) || *q == '_' || *q == ':') q++;
    size_t nlen = (size_t)(q - line);
    /* Its family was typed before (histograms: _bucket, _sum, _count). */
    int known = 0;
    static const char *const suffixes[] = {"", "_bucket", "_sum", "_count"};
    for (int i = 0; i < ntyped && !known; i++) {
      size_t tl = strlen(typed[i]);
      if (nlen < tl || strncmp(line, typed[i], tl)) continue;
      for (int k = 0; k < 4 && !known; k++)
        known = strlen(suffixes[k]) == nlen - tl &&
                !strncmp(line + tl, suffixes[k], nlen - tl);
    }
    if (!known) fail_msg("sample before its # TYPE: %s", line);
    if (*q == '{') {
      q++;
      while (*q != '}') {
        assert_true(isalpha((unsigned char)*q) || *q == '_');
        while (isalnum((unsigned char)*q) || *q == '_') q++;
        assert_int_equal(*q++, '=');
        assert_int_equal(*q++, '"');
        while (*q != '"') {
          assert_true(*q != '\0' && *q != '\n');
          if (*q == '\\') {
            q++;
            assert_true(*q == '\\' || *q == '"' || *q == 'n');
          }
          q++;
        }
        q++;
        if (*q == ',') q++;
        else assert_int_equal(*q, '}');
      }
      q++;
    }
    assert_int_equal(*q++, ' ');
    char *end;
    strtod(q, &end);
    if (end == q && strcmp(q, "+Inf") && strcmp(q, "NaN"))
      fail_msg("not a number: %s", line);
    if (end != q) assert_int_equal(*end, '\0');
    samples++;
  }
  return samples;
}

static void metrics_are_valid_prometheus_text(void **state) {
  (void)state;
  fixture f = fixture_of(two_rules);
  check1(f.t, "d", "k", "x", T0);
  throttle(f.t, "k", "gcra:1/s", 1, T0);
  char *m = metrics_of(f.e);
  assert_true(assert_prometheus_text(m) > 30);
  free(m);
  fixture_free(&f);
}

static void metrics_count_decisions_per_rule(void **state) {
  (void)state;
  fixture f = fixture_of(shadow_yaml);
  for (int i = 0; i < 3; i++) check1(f.t, "d", "k", "x", T0); /* 1 + 2 */
  for (int i = 0; i < 4; i++) check1(f.t, "d", "s", "x", T0); /* 1 + 3 */
  check1(f.t, "d", "none", "x", T0);
  char *m = metrics_of(f.e);
  assert_int_equal(metric(m, "sluice_rule_decisions_total{domain=\"d\","
                             "rule=\"d.k\",result=\"allowed\"}"), 1);
  assert_int_equal(metric(m, "sluice_rule_decisions_total{domain=\"d\","
                             "rule=\"d.k\",result=\"denied\"}"), 2);
  assert_int_equal(metric(m, "sluice_rule_decisions_total{domain=\"d\","
                             "rule=\"d.k\",result=\"shadow_denied\"}"), 0);
  assert_int_equal(metric(m, "sluice_rule_decisions_total{domain=\"d\","
                             "rule=\"d.s\",result=\"allowed\"}"), 1);
  assert_int_equal(metric(m, "sluice_rule_decisions_total{domain=\"d\","
                             "rule=\"d.s\",result=\"denied\"}"), 0);
  assert_int_equal(metric(m, "sluice_rule_decisions_total{domain=\"d\","
                             "rule=\"d.s\",result=\"shadow_denied\"}"), 3);
  /* near limit: allowed with less than 20% left (1 of 1 used). */
  assert_int_equal(metric(m, "sluice_rule_near_limit_total{domain=\"d\","
                             "rule=\"d.k\"}"), 1);
  assert_int_equal(
      metric(m, "sluice_decisions_total{kind=\"check\",result=\"allowed\"}"), 6);
  assert_int_equal(
      metric(m, "sluice_decisions_total{kind=\"check\",result=\"denied\"}"), 2);
  /* One latency observation per decided request. */
  long long count = metric(m, "sluice_decision_duration_seconds_count");
  assert_int_equal(count, 8);
  assert_int_equal(
      metric(m, "sluice_decision_duration_seconds_bucket{le=\"+Inf\"}"), count);
  assert_int_equal(metric(m, "sluice_limiters"), 2);
  assert_int_equal(metric(m, "sluice_store_keys"), 2);
  free(m);
  fixture_free(&f);
}

static void metrics_histogram_buckets_are_cumulative(void **state) {
  (void)state;
  fixture f = fixture_of(two_rules);
  for (int i = 0; i < 50; i++) check1(f.t, "d", "g", "x", T0 + MS(i * 100));
  char *m = metrics_of(f.e);
  long long prev = 0;
  int buckets = 0;
  for (const char *p = strstr(m, "sluice_decision_duration_seconds_bucket{");
       p; p = strstr(p + 1, "sluice_decision_duration_seconds_bucket{")) {
    const char *sp = strchr(p, ' ');
    long long v = strtoll(sp + 1, NULL, 10);
    assert_true(v >= prev);
    prev = v;
    buckets++;
  }
  assert_int_equal(buckets, 12);
  assert_int_equal(prev, 50);
  free(m);
  fixture_free(&f);
}

static void metrics_count_front_end_counters_and_connections(void **state) {
  (void)state;
  fixture f = fixture_of(two_rules);
  engine_thread *t2 = engine_thread_new(f.e);
  engine_count(f.t, EC_HTTP_REQUESTS, 3);
  engine_count(t2, EC_HTTP_REQUESTS, 4);
  engine_count(t2, EC_HTTP_ERRORS, 1);
  engine_count(f.t, EC_RESP_COMMANDS, 5);
  engine_count(f.t, EC_RESP_ERRORS, 2);
  engine_count(t2, EC_REJECTED_HTTP, 6);
  engine_count(f.t, EC_REJECTED_RESP, 3);
  engine_count(f.t, EC_FD_PAUSES_RESP, 2);
  engine_connections(f.t, 0, 2);
  engine_connections(t2, 0, 1);
  engine_connections(t2, 1, 1);
  engine_connections(f.t, 0, -1);
  char *m = metrics_of(f.e);
  assert_int_equal(metric(m, "sluice_requests_total{protocol=\"http\"}"), 7);
  assert_int_equal(metric(m, "sluice_requests_total{protocol=\"resp\"}"), 5);
  assert_int_equal(metric(m, "sluice_request_errors_total{protocol=\"http\"}"), 1);
  assert_int_equal(metric(m, "sluice_request_errors_total{protocol=\"resp\"}"), 2);
  assert_int_equal(metric(m, "sluice_connections{protocol=\"http\"}"), 2);
  assert_int_equal(metric(m, "sluice_connections{protocol=\"resp\"}"), 1);
  assert_int_equal(
      metric(m, "sluice_connections_rejected_total{protocol=\"http\"}"), 6);
  assert_int_equal(
      metric(m, "sluice_connections_rejected_total{protocol=\"resp\"}"), 3);
  assert_int_equal(metric(m, "sluice_accept_pauses_total{protocol=\"resp\"}"),
                   2);
  assert_int_equal(metric(m, "sluice_accept_pauses_total{protocol=\"http\"}"),
                   0);
  free(m);
  engine_thread_free(t2);
  fixture_free(&f);
}

static void metrics_give_detailed_rules_a_series_per_value(void **state) {
  (void)state;
  fixture f = fixture_of(yaml_fixture("envoy/example8.yaml"));
  check1(f.t, "example8", "key1", "unspecified_value", T0);
  check1(f.t, "example8", "key1", "unspecified_value", T0);
  check1(f.t, "example8", "key1", "unspecified_value2", T0);
  check1(f.t, "example8", "key1", "value1", T0);
  char *m = metrics_of(f.e);
  assert_int_equal(
      metric(m, "sluice_rule_decisions_total{domain=\"example8\",rule="
                "\"example8.key1_unspecified_value\",result=\"allowed\"}"), 2);
  assert_int_equal(
      metric(m, "sluice_rule_decisions_total{domain=\"example8\",rule="
                "\"example8.key1_unspecified_value2\",result=\"allowed\"}"), 1);
  assert_int_equal(
      metric(m, "sluice_rule_decisions_total{domain=\"example8\",rule="
                "\"example8.key1_value1\",result=\"allowed\"}"), 1);
  /* The rolled-up series is not counted for detailed values. */
  assert_int_equal(
      metric(m, "sluice_rule_decisions_total{domain=\"example8\",rule="
                "\"example8.key1\",result=\"allowed\"}"), 0);
  free(m);
  fixture_free(&f);
}

static void metrics_escape_label_values(void **state) {
  (void)state;
  fixture f = fixture_of("domain: 'q\"d'\n"
                         "descriptors:\n"
                         "  - key: 'back\\slash'\n"
                         "    value: \"new\\nline\"\n"
                         "    rate_limit: {unit: second, requests_per_unit: 1}\n");
  eng_descriptor d = desc_of("back\\slash", "new\nline", NULL);
  eng_result r = check_n(f.t, "q\"d", &d, 1, 1, T0, 0);
  assert_int_equal(r.n, 1);
  char *m = metrics_of(f.e);
  assert_int_equal(metric(m, "sluice_rule_decisions_total{domain=\"q\\\"d\","
                             "rule=\"q\\\"d.back\\\\slash_new\\nline\","
                             "result=\"allowed\"}"), 1);
  assert_prometheus_text(m);
  free(m);
  fixture_free(&f);
}

static void metrics_report_reloads_and_build_info(void **state) {
  (void)state;
  fixture f = fixture_of(two_rules);
  reload(&f, two_rules);
  reload(&f, two_rules);
  engine_note_reload_failure(f.e);
  char *m = metrics_of(f.e);
  assert_int_equal(metric(m, "sluice_config_reloads_total{result=\"success\"}"), 2);
  assert_int_equal(metric(m, "sluice_config_reloads_total{result=\"failure\"}"), 1);
  assert_true(metric(m, "sluice_config_last_reload_timestamp_seconds") >
              1700000000);
  char info[128];
  snprintf(info, sizeof info, "sluice_build_info{version=\"%s\"}",
           sl_version_string());
  assert_int_equal(metric(m, info), 1);
  free(m);
  fixture_free(&f);
}

static void metrics_keep_counts_of_a_thread_until_it_is_freed(void **state) {
  (void)state;
  fixture f = fixture_of(two_rules);
  engine_thread *t2 = engine_thread_new(f.e);
  check1(t2, "d", "k", "x", T0);
  check1(f.t, "d", "k", "x", T0);
  char *m = metrics_of(f.e);
  assert_int_equal(
      metric(m, "sluice_decisions_total{kind=\"check\",result=\"allowed\"}"), 2);
  free(m);
  engine_thread_free(t2);
  fixture_free(&f);
}

/* A detailed descriptor with a value of its own: its series is named once
   for the value ("d.key_3_requested-key3-value", as envoyproxy/ratelimit
   names it), not with the value a second time. */
static void detailed_metric_names_an_explicit_value_once(void **state) {
  (void)state;
  fixture f = fixture_of("domain: d\n"
                         "descriptors:\n"
                         "  - key: key_3\n"
                         "    value: requested-key3-value\n"
                         "    detailed_metric: true\n"
                         "    rate_limit: {unit: minute, requests_per_unit: 5}"
                         "\n");
  check1(f.t, "d", "key_3", "requested-key3-value", T0);
  char *m = metrics_of(f.e);
  assert_int_equal(
      metric(m, "sluice_rule_decisions_total{domain=\"d\",rule="
                "\"d.key_3_requested-key3-value\",result=\"allowed\"}"), 1);
  assert_null(strstr(m, "requested-key3-value_requested-key3-value"));
  free(m);
  fixture_free(&f);
}

/* detailed_metric gives each value its own series, up to 1000 per rule;
   further values roll up into the rule's own series, and cost no lock. */
static void detailed_metric_series_are_capped_per_rule(void **state) {
  (void)state;
  engine *e = engine_of("domain: d\n"
                        "descriptors:\n"
                        "  - key: ip\n"
                        "    detailed_metric: true\n"
                        "    rate_limit: {unit: hour, requests_per_unit: 5}\n");
  engine_thread *t = engine_thread_new(e);
  eng_descriptor d = {.n = 1, .hits = -1};
  eng_request r = {"d", 1, &d, 1, 1};
  eng_result out;
  char v[32];
  for (int i = 0; i < 1200; i++) {
    int n = snprintf(v, sizeof v, "10.0.%d.%d", i / 256, i % 256);
    d.entries[0] = (cfg_entry){"ip", 2, v, (size_t)n};
    assert_int_equal(do_check(t, &r, T0, &out), 0);
  }
  size_t len;
  char *m = engine_metrics(e, &len);
  assert_non_null(m);
  size_t per_value = 0;
  for (char *p = m; (p = strstr(p, "rule=\"d.ip_")); p++)
    if (strstr(p, "result=\"allowed\"") < strchr(p, '\n')) per_value++;
  assert_int_equal(per_value, 1000);
  /* The 200 values past the cap are counted in the rule's own series. */
  assert_non_null(strstr(m, "sluice_rule_decisions_total{domain=\"d\","
                            "rule=\"d.ip\",result=\"allowed\"} 200\n"));
  free(m);
  engine_thread_free(t);
  engine_free(e);
}

/* ---- from the bugs found in review (fixed) ---- */

/*
 * A thread coming back online (or a new thread's first quiesce) loads
 * `cur` while a reload may swap it: the reload must not free that
 * generation under it. This was a heap-use-after-free that ASan caught in
 * well under a second of offline/quiesce churn; the churn runs for 300 ms
 * (and at least 200 reloads), so the test stays fast under TSan too.
 */
static atomic_int stop_flag;

static void *offline_online_loop(void *p) {
  engine_thread *t = engine_thread_new(p);
  while (!atomic_load(&stop_flag)) {
    engine_thread_offline(t);
    engine_thread_quiesce(t);
  }
  engine_thread_offline(t);
  engine_thread_free(t);
  return NULL;
}

static void quiesce_after_offline_is_safe_during_reloads(void **state) {
  (void)state;
  engine *e = engine_of("domain: d\n");
  pthread_t th[2];
  for (int i = 0; i < 2; i++)
    assert_int_equal(pthread_create(&th[i], NULL, offline_online_loop, e), 0);
  struct timespec t0, t;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (int i = 0;; i++) {
    assert_int_equal(engine_reload(e, cfg_of("domain: d\n")), 0);
    clock_gettime(CLOCK_MONOTONIC, &t);
    int64_t ns = (t.tv_sec - t0.tv_sec) * NS_PER_S + (t.tv_nsec - t0.tv_nsec);
    if (i >= 200 && ns > MS(300)) break;
  }
  atomic_store(&stop_flag, 1);
  for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
  engine_free(e);
}

/* engine_reset of the rules forgets a config descriptor's state under the
   rules it matches (POST /admin/reset?domain=default&key=alice);
   a reset of an ad-hoc key is for ad-hoc keys only. */
static void reset_descriptor_forgets_the_rule_state(void **state) {
  (void)state;
  engine *e = engine_of(config_default_yaml);
  engine_thread *t = engine_thread_new(e);
  eng_descriptor d = {.entries = {{"key", 3, "alice", 5}}, .n = 1, .hits = -1};
  eng_request r = {"default", 7, &d, 1, 1};
  eng_result out;
  for (int i = 0; i < 5; i++) assert_int_equal(do_check(t, &r, T0, &out), 0);
  assert_int_equal(out.st[0].d.remaining, 95);
  assert_int_equal(do_reset_key(t, "alice", 5), 0); /* not ad hoc */
  assert_int_equal(do_reset_descriptor(t, &r), 1);
  r.hits = 0;
  assert_int_equal(do_check(t, &r, T0, &out), 0);
  assert_int_equal(out.st[0].d.remaining, 100);
  engine_thread_free(t);
  engine_free(e);
}

/*
 * engine_reload owns cfg, also when it fails: a failed reload (here the
 * store has no room for the new rule's limiter) keeps the old config and
 * frees the new one, so LeakSanitizer has nothing to report.
 */
static void a_failed_reload_frees_the_config_it_was_given(void **state) {
  (void)state;
  /* A store so small that its memory runs out after a few dozen limiters
     (filling the 65535-limiter table instead takes seconds under TSan). */
  engine_opts o = {.max_memory = 16384};
  char err[128] = "";
  engine *e = engine_new(&o, cfg_of("domain: d\n"
                                    "descriptors:\n"
                                    "  - key: k\n"
                                    "    rate_limit: {unit: second, "
                                    "requests_per_unit: 5}\n"),
                         err, sizeof err);
  if (!e) fail_msg("engine_new: %s", err);
  engine_thread *t = engine_thread_new(e);
  static sl_limiter *extra[70000];
  size_t n = 0;
  sl_policy p = policy_of("gcra:1/s");
  while (n < 70000 && sl_limiter_new(engine_store(e), &p, &extra[n]) == 0) n++;
  assert_true(n < 70000);
  engine_thread_offline(t);
  assert_int_equal(engine_reload(e, cfg_of("domain: d\n"
                                           "descriptors:\n"
                                           "  - key: k\n"
                                           "    rate_limit: {unit: second, "
                                           "requests_per_unit: 6}\n")),
                   -1);
  engine_thread_quiesce(t);
  /* The old config still serves. */
  eng_descriptor d = {.entries = {{"k", 1, "x", 1}}, .n = 1, .hits = -1};
  eng_request r = {"d", 1, &d, 1, 1};
  eng_result out;
  assert_int_equal(do_check(t, &r, T0, &out), 0);
  assert_int_equal(out.st[0].d.limit, 5);
  for (size_t i = 0; i < n; i++) sl_limiter_free(extra[i]);
  engine_thread_free(t);
  engine_free(e);
  /* LeakSanitizer at exit: the rejected config must not be reported. */
}

/*
 * Bug (metrics): a rule that had room is counted as "denied" when another
 * rule of the request denies it: with per second + per day limits, the day
 * rule's denied series grows although it never was over its limit
 * (envoyproxy/ratelimit counts over_limit only for the limit that is over).
 */
static void a_rule_with_room_is_not_counted_denied(void **state) {
  (void)state;
  engine *e = engine_of("domain: api\n"
                        "descriptors:\n"
                        "  - key: user\n"
                        "    rate_limits:\n"
                        "      - {unit: second, requests_per_unit: 2}\n"
                        "      - {unit: day, requests_per_unit: 5}\n");
  engine_thread *t = engine_thread_new(e);
  eng_descriptor d = {.entries = {{"user", 4, "u", 1}}, .n = 1, .hits = -1};
  eng_request r = {"api", 3, &d, 1, 1};
  eng_result out;
  for (int i = 0; i < 3; i++) assert_int_equal(do_check(t, &r, T0, &out), 0);
  assert_false(out.allowed);
  size_t len;
  char *m = engine_metrics(e, &len);
  assert_non_null(strstr(m, "sluice_rule_decisions_total{domain=\"api\","
                            "rule=\"api.user#1\",result=\"denied\"} 0\n"));
  free(m);
  engine_thread_free(t);
  engine_free(e);
}

/*
 * Inconsistency: when an ordinary rule denies, the other rules keep their
 * own figures (allowed = 1: sluice.h's sl_take_all contract), but when a
 * blocked rule (requests_per_unit: 0) denies, engine_decide forces
 * allowed = 0 on every other rule, so /v1/check reports OVER_LIMIT for a
 * descriptor whose rule has its whole quota left.
 */
static void a_blocked_rule_leaves_the_other_rules_figures_alone(
    void **state) {
  (void)state;
  engine *e = engine_of("domain: edge\n"
                        "descriptors:\n"
                        "  - key: ip\n"
                        "    value: 50.0.0.5\n"
                        "    rate_limit: {unit: hour, requests_per_unit: 0}\n"
                        "  - key: user\n"
                        "    rate_limit: {unit: hour, requests_per_unit: 10}\n");
  engine_thread *t = engine_thread_new(e);
  eng_descriptor ds[2] = {
      {.entries = {{"user", 4, "u", 1}}, .n = 1, .hits = -1},
      {.entries = {{"ip", 2, "50.0.0.5", 8}}, .n = 1, .hits = -1}};
  eng_request r = {"edge", 4, ds, 2, 1};
  eng_result out;
  assert_int_equal(do_check(t, &r, T0, &out), 0);
  assert_false(out.allowed);
  assert_int_equal(out.st[0].descriptor, 0);
  assert_true(out.st[0].d.allowed);
  assert_int_equal(out.st[0].d.remaining, 10);
  engine_thread_free(t);
  engine_free(e);
}


/* ---- fleet mode: on_store_error, through a fake remote ---- */

static const char fleet_rules[] =
    "domain: f\n"
    "descriptors:\n"
    "  - key: a\n"
    "    on_store_error: allow\n"
    "    rate_limit: {unit: hour, requests_per_unit: 10}\n"
    "  - key: b\n"
    "    on_store_error: deny\n"
    "    rate_limit: {unit: hour, requests_per_unit: 10}\n"
    "  - key: c\n"
    "    on_store_error: local\n"
    "    local_fraction: 0.5\n"
    "    rate_limit: {unit: hour, requests_per_unit: 10}\n"
    "  - key: d\n"
    "    rate_limit: {unit: hour, requests_per_unit: 10}\n";

/* A remote that is down: every send refused at once (breaker open). */
static int send_down(void *io, int slot, char *cmd, size_t len,
                     int64_t since_ns, fleet_reply_fn cb, void *ud) {
  (void)since_ns;
  (void)slot, (void)len, (void)cb, (void)ud;
  (*(int *)io)++;
  free(cmd);
  return -1;
}

/* A remote that takes the command and answers later (by hand). */
typedef struct pending_call {
  fleet_reply_fn cb;
  void *ud;
  int n;
} pending_call;
static int send_later(void *io, int slot, char *cmd, size_t len,
                      int64_t since_ns, fleet_reply_fn cb, void *ud) {
  (void)since_ns;
  (void)slot, (void)len;
  pending_call *p = io;
  assert_non_null(strstr(cmd, "EVALSHA"));
  free(cmd);
  p->cb = cb;
  p->ud = ud;
  p->n++;
  return 0;
}

static fixture fleet_fixture(int mode) {
  engine_opts o = exact_opts((fleet_opts){.breaker_ms = 700}, mode);
  char err[256] = "";
  fixture f;
  f.e = engine_new(&o, cfg_of(fleet_rules), err, sizeof err);
  if (!f.e) fail_msg("engine_new: %s", err);
  f.t = engine_thread_new(f.e);
  assert_non_null(f.t);
  return f;
}

typedef struct done_box {
  int calls, rc;
  eng_result *out;
} done_box;
static void on_done(void *ud, int rc, eng_result *out) {
  done_box *b = ud;
  b->calls++;
  b->rc = rc;
  b->out = out;
}

/* One request, asynchronously; returns engine_decide's rc. */
static int fleet_check(fixture *f, const char *k, eng_result *out,
                       done_box *box) {
  eng_descriptor d = desc_of(k, "v", NULL);
  eng_request r = {"f", 1, &d, 1, 1};
  return do_check_async(f->t, &r, 1000000000000, out, on_done, box);
}

static void a_down_store_answers_each_rule_per_on_store_error(void **state) {
  (void)state;
  fixture f = fleet_fixture(CFG_STORE_ERROR_DENY);
  int sends = 0;
  fleet_thread_set_transport(f.t, send_down, NULL, &sends);
  eng_result out;
  done_box box = {0};
  int allowed[4] = {0};
  const char *keys[4] = {"a", "b", "c", "d"};
  for (int k = 0; k < 4; k++)
    for (int i = 0; i < 20; i++) {
      assert_int_equal(fleet_check(&f, keys[k], &out, &box), 0);
      allowed[k] += out.allowed;
      if (!out.allowed && k != 2) {
        /* deny: Retry-After is the breaker's interval */
        assert_int_equal(out.st[0].d.retry_after_ns, 700 * INT64_C(1000000));
      }
    }
  assert_int_equal(box.calls, 0); /* answered at once: never pending */
  assert_int_equal(sends, 80);
  assert_int_equal(allowed[0], 20); /* allow */
  assert_int_equal(allowed[1], 0);  /* deny */
  assert_int_equal(allowed[2], 5);  /* local at 0.5 of 10 */
  assert_int_equal(allowed[3], 0);  /* the daemon's default: deny */
  size_t len;
  char *m = engine_metrics(f.e, &len);
  assert_non_null(strstr(m, "sluice_store_fallbacks_total 80\n"));
  assert_non_null(strstr(m, "sluice_redis_refused_total 80\n"));
  assert_non_null(strstr(m, "sluice_store_fallback_active 1\n"));
  free(m);
  fixture_free(&f);
}

static void a_failed_call_answers_later_per_on_store_error(void **state) {
  (void)state;
  fixture f = fleet_fixture(0); /* default: allow */
  pending_call p = {0};
  fleet_thread_set_transport(f.t, send_later, NULL, &p);
  eng_result out;
  done_box box = {0};
  assert_int_equal(fleet_check(&f, "b", &out, &box), ENG_PENDING);
  assert_int_equal(p.n, 1);
  assert_int_equal(box.calls, 0);
  p.cb(p.ud, NULL, "timeout"); /* the call failed */
  assert_int_equal(box.calls, 1);
  assert_int_equal(box.rc, 0);
  assert_ptr_equal(box.out, &out);
  assert_int_equal(out.allowed, 0); /* b: deny */
  assert_int_equal(fleet_check(&f, "d", &out, &box), ENG_PENDING);
  p.cb(p.ud, NULL, "connection lost");
  assert_int_equal(box.calls, 2);
  assert_int_equal(out.allowed, 1); /* d: the default, allow */
  size_t len;
  char *m = engine_metrics(f.e, &len);
  assert_non_null(strstr(m, "sluice_redis_errors_total 2\n"));
  free(m);
  fixture_free(&f);
}

static void a_reload_waits_for_requests_pending_in_redis(void **state) {
  (void)state;
  fixture f = fleet_fixture(0);
  pending_call p = {0};
  fleet_thread_set_transport(f.t, send_later, NULL, &p);
  eng_result out;
  done_box box = {0};
  assert_int_equal(fleet_check(&f, "a", &out, &box), ENG_PENDING);
  /* The rule out.st[0].limit points into the pinned generation: answer
     after a reload has started elsewhere would free it. Answer first. */
  p.cb(p.ud, NULL, "timeout");
  assert_int_equal(box.calls, 1);
  assert_string_equal(out.st[0].limit->rule, "f.a");
  reload(&f, fleet_rules); /* does not hang: nothing is pinned now */
  fixture_free(&f);
}

/* ---- resets in fleet mode: DELs through a fake remote ---- */

/* Whether command i is "UNLINK key" (key_len bytes). */
static int is_del(const fake_redis *f, int i, const void *key, size_t key_len) {
  char want[2048];
  int n = snprintf(want, sizeof want, "*2\r\n$6\r\nUNLINK\r\n$%zu\r\n", key_len);
  memcpy(want + n, key, key_len);
  memcpy(want + n + key_len, "\r\n", 2);
  return f->len[i] == (size_t)n + key_len + 2 &&
         !memcmp(f->cmd[i], want, f->len[i]);
}

/* The key of a recorded "UNLINK key" (its length in *len). */
static const char *del_key(const fake_redis *f, int i, size_t *len) {
  assert_memory_equal(f->cmd[i], "*2\r\n$6\r\nUNLINK\r\n$", 17);
  char *end;
  *len = strtoul(f->cmd[i] + 17, &end, 10);
  return end + 2;
}

typedef struct reset_box {
  int calls, rc;
  eng_reset *out;
} reset_box;
static void on_reset(void *ud, int rc, eng_reset *out) {
  reset_box *b = ud;
  b->calls++;
  b->rc = rc;
  b->out = out;
}

static int reset_key(fixture *f, const char *key, const char *spec,
                     eng_reset *out, reset_box *box) {
  return do_reset_key_async(f->t, key, strlen(key), spec,
                                spec ? strlen(spec) : 0, out, on_reset, box);
}

static void fleet_reset_deletes_the_named_policys_redis_key(void **state) {
  (void)state;
  fixture f = fleet_fixture(0);
  fake_redis r = {0};
  fleet_thread_set_transport(f.t, send_fake, NULL, &r);
  eng_reset out;
  reset_box box = {0};
  /* A policy this daemon never used: named, its key goes all the same. */
  assert_int_equal(reset_key(&f, "k", "gcra:3/h", &out, &box), ENG_PENDING);
  assert_int_equal(r.n, 1);
  assert_int_equal(r.slot[0], -1); /* not a cluster: any node */
  assert_true(is_del(&r, 0, "sl:{}a8:gcra:3/hk", 17));
  assert_int_equal(box.calls, 0);
  answer_int(&r, 0, 1);
  assert_int_equal(box.calls, 1);
  assert_int_equal(box.rc, 0);
  assert_ptr_equal(box.out, &out);
  assert_int_equal(out.dropped, 1);
  assert_int_equal(out.keys, 1);
  assert_int_equal(out.failed, 0);
  /* Not there (any more): nothing dropped. The spelling is canonicalised
     as decisions canonicalise it. */
  assert_int_equal(reset_key(&f, "k", "gcra:3/3600s", &out, &box), ENG_PENDING);
  assert_true(is_del(&r, 1, "sl:{}a8:gcra:3/hk", 17));
  answer_int(&r, 1, 0);
  assert_int_equal(box.calls, 2);
  assert_int_equal(out.dropped, 0);
  /* A policy that does not parse: nothing is sent. */
  assert_int_equal(reset_key(&f, "k", "gcra:3", &out, &box), SL_EPOLICY);
  assert_true(strlen(out.err) > 0);
  assert_int_equal(r.n, 2);
  fake_free(&r);
  fixture_free(&f);
}

static void
fleet_reset_without_a_policy_covers_the_ones_used_here(void **state) {
  (void)state;
  fixture f = fleet_fixture(0);
  fake_redis r = {0};
  fleet_thread_set_transport(f.t, send_fake, NULL, &r);
  /* Two ad-hoc policies in use (their decisions fail over to allow). */
  const char *specs[2] = {"fixed_window:3/s", "sliding_log:5/m"};
  for (int i = 0; i < 2; i++) {
    eng_result res;
    done_box box = {0};
    char err[128];
    assert_int_equal(do_throttle_async(f.t, "k", 1, specs[i],
                                           strlen(specs[i]), 1, T0, &res, err,
                                           sizeof err, on_done, &box),
                     ENG_PENDING);
    answer_fail(&r, r.n - 1, "timeout");
    assert_int_equal(box.calls, 1);
  }
  fake_free(&r);
  eng_reset out;
  reset_box box = {0};
  assert_int_equal(reset_key(&f, "k", NULL, &out, &box), ENG_PENDING);
  /* The two policies' keys, and CL.THROTTLE's one key of k (exact mode
     keeps it whether or not this daemon has used it). */
  assert_int_equal(r.n, 3);
  assert_true(is_del(&r, 0, "sl:{}a16:fixed_window:3/sk", 26));
  assert_true(is_del(&r, 1, "sl:{}a15:sliding_log:5/mk", 25));
  assert_true(is_del(&r, 2, "sl:{}c4:cellk", 13));
  answer_int(&r, 1, 1);
  answer_int(&r, 2, 0);
  assert_int_equal(box.calls, 0); /* until the last DEL has answered */
  answer_int(&r, 0, 0);
  assert_int_equal(box.calls, 1);
  assert_int_equal(box.rc, 0);
  assert_int_equal(out.dropped, 1);
  assert_int_equal(out.keys, 3);
  fake_free(&r);
  fixture_free(&f);
}

/* The Redis key of rule `l` for a one-entry descriptor (k=v), under the
   hash tag `tag`: redis_key's format, written out. */
static size_t rule_key(char *dst, const char *tag, const cfg_limit *l,
                       const char *k, const char *v) {
  char id[512];
  int il = snprintf(id, sizeof id, "%s|%s", l->rule, l->policy_str);
  int n = sprintf(dst, "sl:{%s}r%d:%s", tag, il, id);
  dst[n++] = (char)strlen(k);
  n += sprintf(dst + n, "%s", k);
  dst[n++] = (char)strlen(v);
  n += sprintf(dst + n, "%s", v);
  return (size_t)n;
}

static void fleet_reset_of_a_descriptor_deletes_each_limits_key(void **state) {
  (void)state;
  static const char yaml[] =
      "domain: t\n"
      "hash_tag: tenant\n"
      "descriptors:\n"
      "  - key: tenant\n"
      "    rate_limit: {policy: \"gcra:10/h\"}\n"
      "  - key: user\n"
      "    rate_limits:\n"
      "      - {name: wide, policy: \"sliding_log:30/h\"}\n"
      "      - {name: narrow, policy: \"token_bucket:20/h\"}\n"
      "  - key: free\n"
      "    rate_limit: {unlimited: true}\n";
  engine_opts o = exact_opts((fleet_opts){.cluster = 1}, 0);
  char err[256] = "";
  fixture f;
  f.e = engine_new(&o, cfg_of(yaml), err, sizeof err);
  assert_non_null(f.e);
  f.t = engine_thread_new(f.e);
  fake_redis r = {0};
  fleet_thread_set_transport(f.t, send_fake, NULL, &r);
  /* (user=alice) and (tenant=acme): three limits, their keys under the
     request's hash tag, as a decision of the same request names them. */
  eng_descriptor d[3] = {desc_of("user", "alice", NULL),
                         desc_of("tenant", "acme", NULL),
                         desc_of("free", "x", NULL)};
  eng_request req = {"t", 1, d, 3, 1};
  eng_reset out;
  reset_box box = {0};
  assert_int_equal(
      do_reset_descriptor_async(f.t, &req, &out, on_reset, &box),
      ENG_PENDING);
  assert_int_equal(r.n, 3); /* the unlimited rule has no state */
  const sl_config *c = engine_config(f.e);
  const cfg_limit *tenant = NULL, *wide = NULL, *narrow = NULL;
  for (size_t i = 0; i < c->nlimits; i++) {
    const cfg_limit *l = c->limits[i];
    if (!strcmp(l->policy_str, "gcra:10/h")) tenant = l;
    if (!strcmp(l->policy_str, "sliding_log:30/h")) wide = l;
    if (!strcmp(l->policy_str, "token_bucket:20/h")) narrow = l;
  }
  assert_non_null(tenant);
  assert_non_null(wide);
  assert_non_null(narrow);
  char key[3][512];
  size_t kl[3] = {rule_key(key[0], "acme", wide, "user", "alice"),
                  rule_key(key[1], "acme", narrow, "user", "alice"),
                  rule_key(key[2], "acme", tenant, "tenant", "acme")};
  for (int i = 0; i < 3; i++) {
    int found = 0;
    for (int k = 0; k < 3; k++)
      if (is_del(&r, k, key[i], kl[i])) {
        found = 1;
        /* Each DEL goes to its key's slot (here one: the tag's). */
        assert_int_equal(r.slot[k], (int)rc_key_slot(key[i], kl[i]));
        assert_int_equal(r.slot[k], (int)rc_key_slot("{acme}", 6));
      }
    if (!found) fail_msg("no DEL of key %d", i);
  }
  for (int k = 0; k < 3; k++) answer_int(&r, k, 1);
  assert_int_equal(box.calls, 1);
  assert_int_equal(out.dropped, 3);
  fake_free(&r);
  /* Without the tag entry, the keys are untagged: spread over slots. */
  eng_request alone = {"t", 1, d, 1, 1};
  assert_int_equal(
      do_reset_descriptor_async(f.t, &alone, &out, on_reset, &box),
      ENG_PENDING);
  assert_int_equal(r.n, 2);
  kl[0] = rule_key(key[0], "", wide, "user", "alice");
  assert_true(is_del(&r, 0, key[0], kl[0]) || is_del(&r, 1, key[0], kl[0]));
  for (int k = 0; k < 2; k++) {
    size_t n;
    const char *dk = del_key(&r, k, &n);
    assert_int_equal(r.slot[k], (int)rc_key_slot(dk, n));
  }
  for (int k = 0; k < 2; k++) answer_int(&r, k, 0);
  assert_int_equal(out.dropped, 0);
  fake_free(&r);
  /* The request's errors come first. */
  eng_request bad = {"nope", 4, d, 1, 1};
  assert_int_equal(
      do_reset_descriptor_async(f.t, &bad, &out, on_reset, &box),
      ENG_EDOMAIN);
  assert_int_equal(r.n, 0);
  fixture_free(&f);
}

static void fleet_reset_fails_when_redis_does_not_confirm(void **state) {
  (void)state;
  fixture f = fleet_fixture(0);
  fake_redis r = {0};
  fleet_thread_set_transport(f.t, send_fake, NULL, &r);
  eng_descriptor d[2] = {desc_of("a", "v", NULL), desc_of("b", "v", NULL)};
  eng_request req = {"f", 1, d, 2, 1};
  eng_reset out;
  reset_box box = {0};
  assert_int_equal(
      do_reset_descriptor_async(f.t, &req, &out, on_reset, &box),
      ENG_PENDING);
  assert_int_equal(r.n, 2);
  answer_int(&r, 0, 1);
  answer_fail(&r, 1, "timeout");
  assert_int_equal(box.calls, 1);
  assert_int_equal(box.rc, ENG_ESTORE);
  assert_int_equal(out.keys, 2);
  assert_int_equal(out.failed, 1);
  assert_int_equal(out.dropped, 1);
  assert_string_equal(out.err, "redis: timeout");
  fake_free(&r);
  /* An error reply fails it too. */
  assert_int_equal(reset_key(&f, "k", "gcra:1/s", &out, &box), ENG_PENDING);
  redisReply e;
  memset(&e, 0, sizeof e);
  e.type = REDIS_REPLY_ERROR;
  e.str = "NOAUTH Authentication required.";
  e.len = strlen(e.str);
  r.cb[0](r.ud[0], &e, NULL);
  assert_int_equal(box.rc, ENG_ESTORE);
  assert_string_equal(out.err, "redis: NOAUTH Authentication required.");
  fake_free(&r);
  /* Redis known down (breaker open): answered at once, nothing sent. */
  r.down = 1;
  assert_int_equal(
      do_reset_descriptor_async(f.t, &req, &out, on_reset, &box),
      ENG_ESTORE);
  assert_int_equal(box.calls, 2);
  assert_int_equal(out.keys, 2);
  assert_int_equal(out.failed, 2);
  assert_non_null(strstr(out.err, "redis: down"));
  fixture_free(&f);
}

/* on_store_error: local's limiter is this daemon's state: a reset drops it
   at once (and counts it), whatever Redis says. */
static void fleet_reset_drops_the_local_fallback_state(void **state) {
  (void)state;
  fixture f = fleet_fixture(0);
  int sends = 0;
  fleet_thread_set_transport(f.t, send_down, NULL, &sends);
  eng_result res;
  done_box dbox = {0};
  int allowed = 0;
  for (int i = 0; i < 8; i++) {
    assert_int_equal(fleet_check(&f, "c", &res, &dbox), 0);
    allowed += res.allowed;
  }
  assert_int_equal(allowed, 5); /* local at 0.5 of 10 */
  fake_redis r = {0};
  fleet_thread_set_transport(f.t, send_fake, NULL, &r);
  eng_descriptor d = desc_of("c", "v", NULL);
  eng_request req = {"f", 1, &d, 1, 1};
  eng_reset out;
  reset_box box = {0};
  assert_int_equal(
      do_reset_descriptor_async(f.t, &req, &out, on_reset, &box),
      ENG_PENDING);
  answer_int(&r, 0, 0); /* not in Redis */
  assert_int_equal(box.rc, 0);
  assert_int_equal(out.dropped, 1); /* the local limiter's */
  fake_free(&r);
  fleet_thread_set_transport(f.t, send_down, NULL, &sends);
  allowed = 0;
  for (int i = 0; i < 8; i++) {
    assert_int_equal(fleet_check(&f, "c", &res, &dbox), 0);
    allowed += res.allowed;
  }
  assert_int_equal(allowed, 5); /* afresh */
  fixture_free(&f);
}

/* Without a remote (or a caller that cannot wait), fleet mode cannot
   reset: the short forms say so. */
static void fleet_reset_needs_a_remote_and_a_caller_that_waits(void **state) {
  (void)state;
  fixture f = fleet_fixture(0);
  eng_descriptor d = desc_of("a", "v", NULL);
  eng_request req = {"f", 1, &d, 1, 1};
  assert_int_equal(do_reset_key(f.t, "k", 1), ENG_EREMOTE);
  assert_int_equal(do_reset_descriptor(f.t, &req), ENG_EREMOTE);
  eng_reset out;
  reset_box box = {0};
  assert_int_equal(reset_key(&f, "k", NULL, &out, &box), ENG_EREMOTE);
  fixture_free(&f);
}

/* ---- approximate mode's reset ---- */

/* The entry of the round for Redis key rkey, or NULL. */
static approx_delta *delta_of(approx_delta *list, const char *rkey, size_t len) {
  for (approx_delta *d = list; d; d = approx_delta_next(d)) {
    size_t n;
    const char *k = approx_delta_key(d, &n);
    if (n == len && !memcmp(k, rkey, len)) return d;
  }
  return NULL;
}

/* Ends a round taken by approx_take as one whose calls got no reply
   (Redis may have run them: not pushed again, no level applied). */
static void round_unconfirmed(engine *e, approx_delta *list) {
  int64_t level[64];
  size_t n = 0;
  for (approx_delta *d = list; d; d = approx_delta_next(d)) {
    assert_true(n < 64);
    level[n++] = APPROX_LEVEL_UNKNOWN;
  }
  approx_apply(approx_of(e), list, level, T0);
}

static void
approximate_reset_drops_local_state_and_unpushed_charges(void **state) {
  (void)state;
  engine_opts o = approx_opts();
  char err[256] = "";
  engine *e = engine_new(&o, cfg_of(two_rules), err, sizeof err);
  assert_non_null(e);
  engine_thread *t1 = engine_thread_new(e), *t2 = engine_thread_new(e);
  fake_redis r = {0};
  fleet_thread_set_transport(t1, send_fake, NULL, &r);
  eng_descriptor da = desc_of("k", "a", NULL), db = desc_of("k", "b", NULL);
  eng_request ra = {"d", 1, &da, 1, 1}, rb = {"d", 1, &db, 1, 1};
  eng_result res;
  /* Charges on both threads, to two keys and an ad-hoc one. */
  for (int i = 0; i < 3; i++) {
    assert_int_equal(do_check(t1, &ra, T0, &res), 0);
    assert_int_equal(do_check(t2, &ra, T0, &res), 0);
    assert_int_equal(do_check(t2, &rb, T0, &res), 0);
  }
  throttle(t2, "x", "gcra:9/h", 4, T0);
  assert_int_equal(do_check(t1, &ra, T0, &res), 0);
  assert_int_equal(res.allowed, 0); /* 5/s spent */

  eng_reset out;
  reset_box box = {0};
  assert_int_equal(do_reset_descriptor_async(t1, &ra, &out, on_reset, &box),
                   ENG_PENDING);
  assert_int_equal(r.n, 2); /* the UNLINK, then the PUBLISH that tells the
                               other daemons (test_sync_engine.c) */
  assert_int_equal(r.slot[0], -1);
  assert_memory_equal(r.cmd[1], "*3\r\n$7\r\nPUBLISH\r\n", 17);
  /* The sync's own name for the key: what it charges in Redis. */
  approx_delta *list = approx_take(approx_of(e));
  char key[512];
  size_t kl = rule_key(key, "", engine_config(e)->limits[0], "k", "a");
  assert_true(is_del(&r, 0, key, kl));
  approx_delta *a = delta_of(list, key, kl);
  assert_non_null(a);
  assert_int_equal(approx_delta_cost(a), 0); /* dropped: never pushed */
  kl = rule_key(key, "", engine_config(e)->limits[0], "k", "b");
  assert_non_null(delta_of(list, key, kl));
  assert_int_equal(approx_delta_cost(delta_of(list, key, kl)), 3);
  round_unconfirmed(e, list);
  answer_int(&r, 0, 1);
  answer_int(&r, 1, 2);
  assert_int_equal(box.rc, 0);
  assert_int_equal(out.dropped, 1);
  fake_free(&r);
  /* The local limiter starts afresh; b keeps its count. */
  ra.hits = rb.hits = 0;
  assert_int_equal(do_check(t1, &ra, T0, &res), 0);
  assert_int_equal(res.st[0].d.remaining, 5);
  assert_int_equal(do_check(t1, &rb, T0, &res), 0);
  assert_int_equal(res.st[0].d.remaining, 2);

  /* An ad-hoc key, its policy named: the same. */
  throttle(t2, "x", "gcra:9/h", 1, T0);
  assert_int_equal(
      do_reset_key_async(t1, "x", 1, "gcra:9/h", 8, &out, on_reset, &box),
      ENG_PENDING);
  assert_true(is_del(&r, 0, "sl:{}a8:gcra:9/hx", 17));
  list = approx_take(approx_of(e));
  a = delta_of(list, "sl:{}a8:gcra:9/hx", 17);
  assert_non_null(a);
  assert_int_equal(approx_delta_cost(a), 0);
  round_unconfirmed(e, list);
  answer_int(&r, 0, 0); /* the sync had not pushed it yet */
  answer_int(&r, 1, 2);
  assert_int_equal(out.dropped, 1); /* the local state was there */
  assert_int_equal(throttle(t1, "x", "gcra:9/h", 0, T0).st[0].d.remaining, 9);
  fake_free(&r);
  engine_thread_free(t1);
  engine_thread_free(t2);
  engine_free(e);
}

/* In memory mode a named policy limits the reset to it. */
static void reset_key_with_a_policy_forgets_only_that_one(void **state) {
  (void)state;
  fixture f = fixture_of(two_rules);
  throttle(f.t, "k", "fixed_window:3/s", 3, T0);
  throttle(f.t, "k", "gcra:3/s", 3, T0);
  eng_reset out;
  assert_int_equal(
      do_reset_key_async(f.t, "k", 1, "gcra:3/s", 8, &out, NULL, NULL), 0);
  assert_int_equal(out.dropped, 1);
  assert_int_equal(throttle(f.t, "k", "gcra:3/s", 0, T0).st[0].d.remaining, 3);
  assert_int_equal(
      throttle(f.t, "k", "fixed_window:3/s", 0, T0).st[0].d.remaining, 0);
  assert_int_equal(
      do_reset_key_async(f.t, "k", 1, "gcra:7/s", 8, &out, NULL, NULL), 0);
  assert_int_equal(out.dropped, 0); /* never used */
  fixture_free(&f);
}

/* envoy's descriptor limit override: the descriptor is limited by its own
   policy alone (the rule of 5/s does not apply), under a counter keyed by
   the domain and the descriptor; a limit of 0 blocks; the other
   descriptors keep their rules, and the request is still all or nothing. */
static void a_descriptor_limit_override_counts_alone(void **state) {
  (void)state;
  fixture f = fixture_of(two_rules);
  eng_descriptor ds[2] = {desc_of("k", "alice", NULL),
                          desc_of("k", "bob", NULL)};
  eng_override ov[2] = {{1, {SL_FIXED_WINDOW, 2, 0, 3600 * NS_PER_S}}, {0, {0}}};
  eng_request r = {"d", 1, ds, 2, 1};
  eng_query q = {.kind = ENG_QUERY_RULES, .req = &r, .overrides = ov,
                 .now = T0};
  eng_result out;
  for (int64_t left = 1; left >= 0; left--) {
    assert_int_equal(engine_decide(f.t, &q, &out, NULL, NULL), 0);
    assert_true(out.allowed);
    const eng_status *s = &out.st[out.by_descriptor[0]];
    assert_null(s->limit);
    assert_int_equal(s->d.limit, 2);
    assert_int_equal(s->d.remaining, left);
    assert_int_equal(out.st[out.by_descriptor[1]].d.limit, 5);
  }
  assert_int_equal(engine_decide(f.t, &q, &out, NULL, NULL), 0);
  assert_false(out.allowed); /* the override is spent; bob is not charged */
  assert_int_equal(out.st[out.by_descriptor[1]].d.remaining, 3);
  /* The rule's own counter for alice is untouched. */
  assert_int_equal(peek1(f.t, "d", "k", "alice", T0).remaining, 5);
  ov[0].policy.limit = 0; /* blocked */
  assert_int_equal(engine_decide(f.t, &q, &out, NULL, NULL), 0);
  assert_false(out.allowed);
  assert_int_equal(out.st[out.by_descriptor[1]].d.remaining, 3);
  fixture_free(&f);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(detailed_metric_series_are_capped_per_rule),
      cmocka_unit_test(detailed_metric_names_an_explicit_value_once),
      cmocka_unit_test(reset_descriptor_forgets_the_rule_state),
      cmocka_unit_test(reset_key_with_a_policy_forgets_only_that_one),
      cmocka_unit_test(fleet_reset_deletes_the_named_policys_redis_key),
      cmocka_unit_test(fleet_reset_without_a_policy_covers_the_ones_used_here),
      cmocka_unit_test(fleet_reset_of_a_descriptor_deletes_each_limits_key),
      cmocka_unit_test(fleet_reset_fails_when_redis_does_not_confirm),
      cmocka_unit_test(fleet_reset_drops_the_local_fallback_state),
      cmocka_unit_test(fleet_reset_needs_a_remote_and_a_caller_that_waits),
      cmocka_unit_test(
          approximate_reset_drops_local_state_and_unpushed_charges),
      cmocka_unit_test(a_failed_reload_frees_the_config_it_was_given),
      cmocka_unit_test(a_rule_with_room_is_not_counted_denied),
      cmocka_unit_test(a_blocked_rule_leaves_the_other_rules_figures_alone),
      cmocka_unit_test(quiesce_after_offline_is_safe_during_reloads),
      cmocka_unit_test(engine_new_serves_the_config_it_was_given),
      cmocka_unit_test(engine_new_with_too_small_a_store_fails_with_a_message),
      cmocka_unit_test(unlimited_and_blocked_rules_need_no_limiter),
      cmocka_unit_test(threads_come_and_go),
      cmocka_unit_test(an_offline_thread_does_not_hold_up_a_reload),
      cmocka_unit_test(check_reports_the_rule_and_the_librarys_figures),
      cmocka_unit_test(
          check_allows_the_quota_then_denies_until_the_window_ends),
      cmocka_unit_test(each_value_of_a_key_only_rule_has_its_own_counter),
      cmocka_unit_test(
          descriptors_with_the_same_bytes_split_differently_are_distinct),
      cmocka_unit_test(several_descriptors_are_each_checked),
      cmocka_unit_test(worst_is_the_denying_rule),
      cmocka_unit_test(a_request_matching_no_rule_is_allowed_with_no_status),
      cmocka_unit_test(hits_are_the_requests_cost),
      cmocka_unit_test(per_descriptor_hits_override_the_requests),
      cmocka_unit_test(hits_zero_is_a_peek_that_charges_nothing),
      cmocka_unit_test(a_cost_no_rule_can_allow_is_an_error),
      cmocka_unit_test(
          a_request_denied_by_one_rule_charges_nothing_in_the_others),
      cmocka_unit_test(the_day_limit_denies_once_spent_across_seconds),
      cmocka_unit_test(a_shadow_rule_never_denies_but_says_it_would_have),
      cmocka_unit_test(
          a_shadow_rule_does_not_save_a_request_an_enforced_rule_denies),
      cmocka_unit_test(an_unlimited_rule_always_allows),
      cmocka_unit_test(
          an_unlimited_descriptor_does_not_lift_another_ones_limit),
      cmocka_unit_test(a_blocked_rule_denies_for_good_until_its_window_ends),
      cmocka_unit_test(a_blocked_rule_charges_nothing_in_the_others),
      cmocka_unit_test(a_peek_at_a_blocked_rule_is_allowed),
      cmocka_unit_test(replaces_drops_the_replaced_limit),
      cmocka_unit_test(replaces_only_acts_when_both_limits_match),
      cmocka_unit_test(an_unknown_domain_is_an_error),
      cmocka_unit_test(too_many_or_no_descriptors_is_an_error),
      cmocka_unit_test(too_many_or_no_entries_is_an_error),
      cmocka_unit_test(a_descriptor_longer_than_a_store_key_is_an_error),
      cmocka_unit_test(more_than_64_matched_limits_is_an_error),
      cmocka_unit_test(counters_of_unchanged_rules_survive_a_reload),
      cmocka_unit_test(a_changed_policy_starts_fresh),
      cmocka_unit_test(removed_rules_limiters_are_freed),
      cmocka_unit_test(a_reload_swaps_what_engine_config_returns),
      cmocka_unit_test(reloads_race_worker_threads_safely),
      cmocka_unit_test(an_invalid_new_config_keeps_the_old_one_and_is_counted),
      cmocka_unit_test(throttle_decides_under_an_ad_hoc_policy),
      cmocka_unit_test(throttle_shares_one_state_per_canonical_policy),
      cmocka_unit_test(throttle_cache_holds_many_specs_correctly),
      cmocka_unit_test(the_same_key_under_two_policies_is_two_states),
      cmocka_unit_test(throttle_keys_are_apart_from_config_rules),
      cmocka_unit_test(throttle_counts_allowed_and_denied),
      cmocka_unit_test(throttle_with_a_bad_policy_says_why),
      cmocka_unit_test(throttle_spec_is_a_counted_string),
      cmocka_unit_test(throttle_refuses_a_policy_past_1024_distinct_ones),
      cmocka_unit_test(keyless_adhoc_policies_are_freed_for_new_ones),
      cmocka_unit_test(throttle_policy_shares_the_state_of_the_same_spec),
      cmocka_unit_test(throttle_reports_a_cost_above_the_burst),
      cmocka_unit_test(reset_key_forgets_the_key_under_every_ad_hoc_policy),
      cmocka_unit_test(metrics_are_valid_prometheus_text),
      cmocka_unit_test(metrics_count_decisions_per_rule),
      cmocka_unit_test(metrics_histogram_buckets_are_cumulative),
      cmocka_unit_test(metrics_count_front_end_counters_and_connections),
      cmocka_unit_test(metrics_give_detailed_rules_a_series_per_value),
      cmocka_unit_test(metrics_escape_label_values),
      cmocka_unit_test(metrics_report_reloads_and_build_info),
      cmocka_unit_test(metrics_keep_counts_of_a_thread_until_it_is_freed),
      cmocka_unit_test(a_down_store_answers_each_rule_per_on_store_error),
      cmocka_unit_test(a_failed_call_answers_later_per_on_store_error),
      cmocka_unit_test(a_reload_waits_for_requests_pending_in_redis),
      cmocka_unit_test(a_descriptor_limit_override_counts_alone),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
