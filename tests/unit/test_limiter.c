/*
 * test_limiter.c — the limiter API: isolation between limiters, limiter
 * lifetime and ids, reset, argument errors, take_batch against sequential
 * takes, and sl_take_all's all-or-nothing rules.
 */
#include "helpers.h"

/* ---- local helpers ---- */

static const char *const POLICIES[] = {
    "token_bucket:10/s:burst=15", "leaky_bucket:10/s:burst=5",
    "fixed_window:10/s",          "sliding_log:10/s",
    "sliding_window:10/s",        "gcra:10/s:burst=12",
};
#define NPOLICIES (sizeof POLICIES / sizeof *POLICIES)

static sl_check check_of(sl_limiter *lim, const char *key, int64_t cost,
                         int shadow) {
  sl_check c = {lim, key, strlen(key), cost, shadow};
  return c;
}

/* ---- isolation and lifetime ---- */

static void same_key_under_two_limiters_is_independent(void **state) {
  (void)state;
  sl_store *s = store_opts(0, 0);
  sl_limiter *a = limiter_of(s, "fixed_window:3/h");
  sl_limiter *b = limiter_of(s, "fixed_window:3/h");
  for (int i = 0; i < 3; i++) assert_true(take(a, "k", 1, T0).allowed);
  assert_false(take(a, "k", 1, T0).allowed);
  assert_int_equal(remaining(b, "k", T0), 3);
  assert_true(take(b, "k", 2, T0).allowed);
  assert_int_equal(remaining(a, "k", T0), 0);
  assert_int_equal(remaining(b, "k", T0), 1);
  assert_int_equal(stats_of(s).keys, 2);
  sl_limiter_free(a);
  sl_limiter_free(b);
  sl_store_free(s);
}

static void limiter_free_drops_its_keys_and_keeps_others(void **state) {
  (void)state;
  sl_store *s = store_opts(0, 0);
  sl_limiter *a = limiter_of(s, "gcra:10/h");
  sl_limiter *b = limiter_of(s, "sliding_log:10/h");
  char key[32];
  for (int i = 0; i < 1000; i++) {
    snprintf(key, sizeof key, "key-%d", i);
    take(a, key, 1, T0);
    if (i % 2 == 0) take(b, key, 1 + i % 5, T0);
  }
  /* A long key under each, too. */
  char big[200];
  memset(big, 'L', sizeof big - 1);
  big[sizeof big - 1] = 0;
  take(a, big, 1, T0);
  take(b, big, 1, T0);
  assert_int_equal(stats_of(s).keys, 1502);
  sl_limiter_free(a);
  sl_store_stats st = stats_of(s);
  assert_int_equal(st.keys, 501);
  assert_int_equal(st.limiters, 1);
  for (int i = 0; i < 1000; i += 2) {
    snprintf(key, sizeof key, "key-%d", i);
    assert_int_equal(remaining(b, key, T0), 10 - (1 + i % 5));
  }
  assert_int_equal(remaining(b, big, T0), 9);
  sl_limiter_free(b);
  assert_int_equal(stats_of(s).keys, 0);
  assert_int_equal(stats_of(s).limiters, 0);
  sl_limiter_free(NULL); /* a no-op */
  sl_store_free(s);
}

static void limiter_ids_are_reused_after_free(void **state) {
  (void)state;
  sl_store *s = store_opts(0, 4);
  sl_policy p = policy_of("fixed_window:5/s");
  for (int i = 0; i < 70000; i++) {
    sl_limiter *lim = NULL;
    int rc = sl_limiter_new(s, &p, &lim);
    if (rc) fail_msg("limiter #%d: %s", i, sl_err_name(rc));
    /* Each new limiter starts with no state, whatever held its id. */
    if (i % 97 == 0) {
      assert_int_equal(remaining(lim, "k", T0), 5);
      take(lim, "k", 2, T0);
    }
    sl_limiter_free(lim);
  }
  sl_store_stats st = stats_of(s);
  assert_int_equal(st.limiters, 0);
  assert_int_equal(st.keys, 0);
  sl_store_free(s);
}

static void store_holds_at_most_65535_limiters(void **state) {
  (void)state;
  enum { MAXL = 65535 };
  sl_store *s = store_opts((size_t)64 << 20, 1);
  sl_policy p = policy_of("gcra:5/s");
  sl_limiter **lims = calloc(MAXL, sizeof *lims);
  assert_non_null(lims);
  for (int i = 0; i < MAXL; i++) {
    int rc = sl_limiter_new(s, &p, &lims[i]);
    if (rc) fail_msg("limiter #%d: %s", i, sl_err_name(rc));
  }
  assert_int_equal(stats_of(s).limiters, MAXL);
  sl_limiter *extra = (sl_limiter *)s;
  assert_int_equal(sl_limiter_new(s, &p, &extra), SL_ELIMITERS);
  assert_null(extra);
  /* Freeing one makes room for one. */
  sl_limiter_free(lims[1234]);
  assert_int_equal(sl_limiter_new(s, &p, &lims[1234]), 0);
  assert_int_equal(sl_limiter_new(s, &p, &extra), SL_ELIMITERS);
  /* The first and the last limiter still work and are distinct. */
  take(lims[0], "k", 5, T0);
  assert_int_equal(remaining(lims[MAXL - 1], "k", T0), 5);
  assert_int_equal(remaining(lims[0], "k", T0), 0);
  for (int i = 0; i < MAXL; i++) sl_limiter_free(lims[i]);
  free(lims);
  assert_int_equal(stats_of(s).limiters, 0);
  sl_store_free(s);
}

static void limiter_new_rejects_bad_arguments(void **state) {
  (void)state;
  sl_store *s = store_opts(0, 0);
  sl_policy p = policy_of("gcra:5/s");
  sl_limiter *lim = NULL;
  assert_int_equal(sl_limiter_new(NULL, &p, &lim), SL_EINVAL);
  assert_int_equal(sl_limiter_new(s, NULL, &lim), SL_EINVAL);
  assert_int_equal(sl_limiter_new(s, &p, NULL), SL_EINVAL);
  sl_policy bad = p;
  bad.limit = 0;
  lim = (sl_limiter *)s;
  assert_int_equal(sl_limiter_new(s, &bad, &lim), SL_EPOLICY);
  assert_null(lim);
  bad = policy_of("fixed_window:5/s");
  bad.burst = 7; /* windows have no burst */
  assert_int_equal(sl_limiter_new(s, &bad, &lim), SL_EPOLICY);
  assert_int_equal(stats_of(s).limiters, 0);
  sl_store_free(s);
}

static void limiter_policy_returns_the_policy(void **state) {
  (void)state;
  sl_store *s = store_opts(0, 0);
  for (size_t i = 0; i < NPOLICIES; i++) {
    sl_policy want = policy_of(POLICIES[i]);
    sl_limiter *lim = limiter_of(s, POLICIES[i]);
    const sl_policy *got = sl_limiter_policy(lim);
    assert_non_null(got);
    assert_int_equal(got->algo, want.algo);
    assert_int_equal(got->limit, want.limit);
    assert_int_equal(got->burst, want.burst);
    assert_int_equal(got->period_ns, want.period_ns);
    sl_limiter_free(lim);
  }
  /* A hand-filled bucket policy with burst 0 gets burst = limit. */
  sl_policy p = {SL_TOKEN_BUCKET, 7, 0, SEC(1)};
  sl_limiter *lim = NULL;
  assert_int_equal(sl_limiter_new(s, &p, &lim), 0);
  assert_int_equal(sl_limiter_policy(lim)->limit, 7);
  assert_int_equal(sl_limiter_policy(lim)->burst, 7);
  sl_limiter_free(lim);
  assert_null(sl_limiter_policy(NULL));
  sl_store_free(s);
}

/* ---- reset ---- */

static void reset_forgets_the_key(void **state) {
  (void)state;
  sl_store *s = store_opts(0, 0);
  for (size_t i = 0; i < NPOLICIES; i++) {
    sl_limiter *lim = limiter_of(s, POLICIES[i]);
    int64_t full = remaining(lim, "k", T0);
    take(lim, "k", 3, T0);
    take(lim, "other", 1, T0);
    assert_int_equal(remaining(lim, "k", T0), full - 3);
    assert_int_equal(sl_limiter_reset(lim, "k", 1), 1);
    assert_int_equal(sl_limiter_reset(lim, "k", 1), 0);
    assert_int_equal(remaining(lim, "k", T0), full);
    assert_int_equal(remaining(lim, "other", T0), full - 1);
    assert_int_equal(sl_limiter_reset(lim, "never", 5), 0);
    sl_limiter_free(lim);
  }
  sl_store_free(s);
}

static void reset_of_a_long_key_frees_it(void **state) {
  (void)state;
  sl_store *s = store_opts(0, 0);
  sl_limiter *lim = limiter_of(s, "sliding_log:100/h");
  uint64_t base = stats_of(s).bytes;
  char big[600];
  memset(big, 'q', sizeof big);
  big[sizeof big - 1] = 0;
  for (int i = 0; i < 50; i++) take(lim, big, 1, T0 + i);
  assert_true(stats_of(s).bytes > base + 600);
  assert_int_equal(sl_limiter_reset(lim, big, strlen(big)), 1);
  assert_int_equal(stats_of(s).bytes, base);
  assert_int_equal(stats_of(s).keys, 0);
  sl_limiter_free(lim);
  sl_store_free(s);
}

static void reset_rejects_bad_arguments(void **state) {
  (void)state;
  sl_store *s = store_opts(0, 0);
  sl_limiter *lim = limiter_of(s, "gcra:5/s");
  static char big[SL_KEY_MAX + 1];
  assert_int_equal(sl_limiter_reset(NULL, "k", 1), SL_EINVAL);
  assert_int_equal(sl_limiter_reset(lim, NULL, 1), SL_EINVAL);
  assert_int_equal(sl_limiter_reset(lim, big, SL_KEY_MAX + 1), SL_EKEY);
  assert_int_equal(sl_limiter_reset(lim, big, SL_KEY_MAX), 0);
  sl_limiter_free(lim);
  sl_store_free(s);
}

/* ---- argument errors ---- */

static void take_rejects_null_arguments(void **state) {
  (void)state;
  sl_store *s = store_opts(0, 0);
  sl_limiter *lim = limiter_of(s, "gcra:5/s");
  sl_decision d;
  assert_int_equal(sl_limiter_take(NULL, "k", 1, 1, T0, &d), SL_EINVAL);
  assert_int_equal(sl_limiter_take(lim, "k", 1, 1, T0, NULL), SL_EINVAL);
  assert_int_equal(sl_limiter_take(lim, NULL, 1, 1, T0, &d), SL_EINVAL);
  assert_int_equal(stats_of(s).keys, 0);
  assert_int_equal(remaining(lim, "k", T0), 5);
  sl_limiter_free(lim);
  sl_store_free(s);
}

static void take_rejects_negative_cost(void **state) {
  (void)state;
  sl_store *s = store_opts(0, 0);
  for (size_t i = 0; i < NPOLICIES; i++) {
    sl_limiter *lim = limiter_of(s, POLICIES[i]);
    sl_decision d;
    assert_int_equal(sl_limiter_take(lim, "k", 1, -1, T0, &d), SL_EINVAL);
    assert_int_equal(sl_limiter_take(lim, "k", 1, INT64_MIN, T0, &d),
                     SL_EINVAL);
    sl_limiter_free(lim);
  }
  assert_int_equal(stats_of(s).keys, 0);
  sl_store_free(s);
}

static void take_rejects_cost_above_burst_or_limit(void **state) {
  (void)state;
  sl_store *s = store_opts(0, 0);
  for (size_t i = 0; i < NPOLICIES; i++) {
    sl_limiter *lim = limiter_of(s, POLICIES[i]);
    const sl_policy *p = sl_limiter_policy(lim);
    int bucket = p->algo == SL_TOKEN_BUCKET || p->algo == SL_LEAKY_BUCKET ||
                 p->algo == SL_GCRA;
    int64_t max = bucket ? p->burst : p->limit;
    sl_decision d;
    assert_int_equal(sl_limiter_take(lim, "k", 1, max + 1, T0, &d), SL_ECOST);
    assert_int_equal(sl_limiter_take(lim, "k", 1, INT64_MAX, T0, &d),
                     SL_ECOST);
    assert_int_equal(stats_of(s).keys, 0);
    /* The most the policy allows passes on a fresh key. */
    assert_int_equal(sl_limiter_take(lim, "k", 1, max, T0, &d), 0);
    assert_true(d.allowed);
    assert_int_equal(d.remaining, 0);
    assert_int_equal(d.limit, max);
    /* ECOST is an error, not a deny, even on an exhausted key. */
    assert_int_equal(sl_limiter_take(lim, "k", 1, max + 1, T0, &d), SL_ECOST);
    sl_limiter_free(lim);
  }
  sl_store_free(s);
}

static void take_rejects_key_longer_than_max(void **state) {
  (void)state;
  sl_store *s = store_opts(0, 0);
  sl_limiter *lim = limiter_of(s, "gcra:5/s");
  static char key[SL_KEY_MAX + 1];
  sl_decision d;
  assert_int_equal(sl_limiter_take(lim, key, SL_KEY_MAX + 1, 1, T0, &d),
                   SL_EKEY);
  assert_int_equal(stats_of(s).keys, 0);
  assert_int_equal(sl_limiter_take(lim, key, SL_KEY_MAX, 1, T0, &d), 0);
  sl_limiter_free(lim);
  sl_store_free(s);
}

static void take_rejects_time_out_of_range(void **state) {
  (void)state;
  sl_store *s = store_opts(0, 0);
  for (size_t i = 0; i < NPOLICIES; i++) {
    sl_limiter *lim = limiter_of(s, POLICIES[i]);
    sl_decision d;
    assert_int_equal(sl_limiter_take(lim, "k", 1, 1, -1, &d), SL_ETIME);
    assert_int_equal(sl_limiter_take(lim, "k", 1, 1, INT64_MIN, &d),
                     SL_ETIME);
    assert_int_equal(sl_limiter_take(lim, "k", 1, 1, SL_TIME_MAX_NS, &d),
                     SL_ETIME);
    assert_int_equal(sl_limiter_take(lim, "k", 1, 0, INT64_MAX, &d),
                     SL_ETIME);
    assert_int_equal(stats_of(s).keys, 0);
    /* Both ends of the valid range work. */
    assert_int_equal(sl_limiter_take(lim, "lo", 2, 1, 0, &d), 0);
    assert_true(d.allowed);
    assert_int_equal(sl_limiter_take(lim, "hi", 2, 1, SL_TIME_MAX_NS - 1, &d),
                     0);
    assert_true(d.allowed);
    assert_int_equal(sl_limiter_take(lim, "hi", 2, 0, SL_TIME_MAX_NS - 1, &d),
                     0);
    assert_int_equal(d.remaining, d.limit - 1);
    sl_limiter_free(lim);
  }
  sl_store_free(s);
}

static void peek_changes_nothing(void **state) {
  (void)state;
  sl_store *s = store_opts(0, 0);
  for (size_t i = 0; i < NPOLICIES; i++) {
    sl_limiter *lim = limiter_of(s, POLICIES[i]);
    sl_decision a = take(lim, "new", 0, T0);
    assert_true(a.allowed);
    assert_int_equal(stats_of(s).keys, 0);
    take(lim, "k", 2, T0);
    a = take(lim, "k", 0, T0 + MS(1));
    for (int j = 0; j < 5; j++) {
      sl_decision b = take(lim, "k", 0, T0 + MS(1));
      assert_same_decision(&a, &b);
    }
    sl_limiter_free(lim);
  }
  sl_store_free(s);
}

/* ---- take_batch ---- */

static void batch_matches_sequential_takes(void **state) {
  (void)state;
  enum { N = 600, NKEYS = 12 };
  static const size_t chunks[] = {1, 3, 16, 17, 33, 100};
  sl_store *s = store_opts(0, 0);
  char names[NKEYS][16];
  for (int k = 0; k < NKEYS; k++) snprintf(names[k], sizeof names[k], "k%d", k);
  for (size_t pi = 0; pi < NPOLICIES; pi++) {
    sl_limiter *seq = limiter_of(s, POLICIES[pi]);
    sl_limiter *bat = limiter_of(s, POLICIES[pi]);
    int64_t max = sl_limiter_policy(seq)->algo <= SL_LEAKY_BUCKET ||
                          sl_limiter_policy(seq)->algo == SL_GCRA
                      ? sl_limiter_policy(seq)->burst
                      : sl_limiter_policy(seq)->limit;
    uint64_t seed = 1000 + pi;
    sl_request reqs[100];
    sl_decision out[100];
    int err[100];
    int64_t now = T0;
    size_t done = 0;
    for (size_t c = 0; done < N; c++) {
      size_t n = chunks[c % (sizeof chunks / sizeof *chunks)];
      now += (int64_t)(splitmix64(&seed) % (uint64_t)MS(150));
      for (size_t i = 0; i < n; i++) {
        const char *key = names[splitmix64(&seed) % NKEYS];
        reqs[i].key = key;
        reqs[i].key_len = strlen(key);
        reqs[i].cost = (int64_t)(splitmix64(&seed) % 4);
        if (splitmix64(&seed) % 50 == 0) reqs[i].cost = max + 1; /* ECOST */
      }
      int failed = sl_limiter_take_batch(bat, reqs, n, now, out, err);
      int want_failed = 0;
      for (size_t i = 0; i < n; i++) {
        sl_decision d;
        int rc = sl_limiter_take(seq, reqs[i].key, reqs[i].key_len,
                                 reqs[i].cost, now, &d);
        assert_int_equal(err[i], rc);
        if (rc)
          want_failed++;
        else
          assert_same_decision(&out[i], &d);
      }
      assert_int_equal(failed, want_failed);
      done += n;
    }
    for (int k = 0; k < NKEYS; k++) {
      sl_decision a = take(seq, names[k], 0, now);
      sl_decision b = take(bat, names[k], 0, now);
      assert_same_decision(&a, &b);
    }
    sl_limiter_free(seq);
    sl_limiter_free(bat);
  }
  sl_store_free(s);
}

static void batch_repeated_key_sees_earlier_charges(void **state) {
  (void)state;
  sl_store *s = store_opts(0, 0);
  sl_limiter *lim = limiter_of(s, "fixed_window:3/s");
  sl_request reqs[6];
  for (int i = 0; i < 6; i++) reqs[i] = (sl_request){"k", 1, 1};
  reqs[2].key = "other";
  reqs[2].key_len = 5;
  sl_decision out[6];
  int err[6];
  assert_int_equal(sl_limiter_take_batch(lim, reqs, 6, T0, out, err), 0);
  int allowed[6] = {1, 1, 1, 1, 0, 0};
  int64_t rem[6] = {2, 1, 2, 0, 0, 0};
  for (int i = 0; i < 6; i++) {
    assert_int_equal(err[i], 0);
    assert_int_equal(out[i].allowed, allowed[i]);
    assert_int_equal(out[i].remaining, rem[i]);
  }
  sl_limiter_free(lim);
  sl_store_free(s);
}

static void batch_reports_errors_per_item(void **state) {
  (void)state;
  sl_store *s = store_opts(0, 0);
  sl_limiter *lim = limiter_of(s, "token_bucket:5/h");
  static char longkey[SL_KEY_MAX + 1];
  sl_request reqs[] = {
      {"a", 1, 1},                     /* ok */
      {"a", 1, 6},                     /* ECOST */
      {longkey, SL_KEY_MAX + 1, 1},    /* EKEY */
      {"a", 1, -1},                    /* EINVAL */
      {NULL, 3, 1},                    /* EINVAL */
      {"a", 1, 2},                     /* ok */
      {"b", 1, 5},                     /* ok */
      {"b", 1, 1},                     /* denied: not an error */
  };
  enum { N = sizeof reqs / sizeof *reqs };
  sl_decision out[N];
  int err[N];
  assert_int_equal(sl_limiter_take_batch(lim, reqs, N, T0, out, err), 4);
  int want[N] = {0, SL_ECOST, SL_EKEY, SL_EINVAL, SL_EINVAL, 0, 0, 0};
  for (int i = 0; i < N; i++) assert_int_equal(err[i], want[i]);
  assert_int_equal(out[0].remaining, 4);
  assert_int_equal(out[5].remaining, 2);
  assert_true(out[6].allowed);
  assert_false(out[7].allowed);
  /* Failed items charged nothing. */
  assert_int_equal(remaining(lim, "a", T0), 2);
  assert_int_equal(stats_of(s).keys, 2);
  /* err may be NULL; the count is still returned. */
  assert_int_equal(sl_limiter_take_batch(lim, reqs, N, T0, out, NULL), 4);
  sl_limiter_free(lim);
  sl_store_free(s);
}

static void batch_with_bad_time_fails_every_item(void **state) {
  (void)state;
  sl_store *s = store_opts(0, 0);
  sl_limiter *lim = limiter_of(s, "gcra:5/h");
  sl_request reqs[20];
  for (int i = 0; i < 20; i++) reqs[i] = (sl_request){"k", 1, 1};
  sl_decision out[20];
  int err[20];
  assert_int_equal(sl_limiter_take_batch(lim, reqs, 20, -5, out, err), 20);
  for (int i = 0; i < 20; i++) assert_int_equal(err[i], SL_ETIME);
  assert_int_equal(stats_of(s).keys, 0);
  sl_limiter_free(lim);
  sl_store_free(s);
}

static void batch_rejects_bad_arguments(void **state) {
  (void)state;
  sl_store *s = store_opts(0, 0);
  sl_limiter *lim = limiter_of(s, "gcra:5/h");
  sl_request r = {"k", 1, 1};
  sl_decision d;
  int e;
  assert_int_equal(sl_limiter_take_batch(NULL, &r, 1, T0, &d, &e), SL_EINVAL);
  assert_int_equal(sl_limiter_take_batch(lim, NULL, 1, T0, &d, &e), SL_EINVAL);
  assert_int_equal(sl_limiter_take_batch(lim, &r, 1, T0, NULL, &e), SL_EINVAL);
  assert_int_equal(sl_limiter_take_batch(lim, NULL, 0, T0, NULL, NULL), 0);
  assert_int_equal(stats_of(s).keys, 0);
  sl_limiter_free(lim);
  sl_store_free(s);
}

/* ---- sl_take_all ---- */

static void take_all_charges_every_rule_when_all_allow(void **state) {
  (void)state;
  sl_store *s = store_opts(0, 0);
  sl_limiter *a = limiter_of(s, "fixed_window:10/h");
  sl_limiter *b = limiter_of(s, "token_bucket:5/h");
  sl_limiter *c = limiter_of(s, "sliding_log:7/h");
  sl_check checks[] = {check_of(a, "user", 2, 0), check_of(b, "ip", 1, 0),
                       check_of(c, "route", 3, 0), check_of(a, "org", 0, 0)};
  sl_decision out[4];
  int allowed = -1;
  assert_int_equal(sl_take_all(checks, 4, T0, out, &allowed), 0);
  assert_int_equal(allowed, 1);
  for (int i = 0; i < 4; i++) assert_true(out[i].allowed);
  assert_int_equal(remaining(a, "user", T0), 8);
  assert_int_equal(remaining(b, "ip", T0), 4);
  assert_int_equal(remaining(c, "route", T0), 4);
  assert_int_equal(remaining(a, "org", T0), 10); /* cost 0: a peek */
  assert_int_equal(stats_of(s).keys, 3);
  sl_limiter_free(a);
  sl_limiter_free(b);
  sl_limiter_free(c);
  sl_store_free(s);
}

static void take_all_denied_request_charges_nothing(void **state) {
  (void)state;
  sl_store *s = store_opts(0, 0);
  sl_limiter *a = limiter_of(s, "fixed_window:10/h");
  sl_limiter *b = limiter_of(s, "gcra:2/h");
  sl_limiter *c = limiter_of(s, "sliding_log:10/h");
  take(a, "user", 1, T0);
  take(b, "ip", 2, T0); /* exhausted */
  sl_check checks[] = {check_of(a, "user", 3, 0), check_of(b, "ip", 1, 0),
                       check_of(c, "route", 1, 0), check_of(a, "new", 1, 0)};
  sl_decision out[4];
  int allowed = -1;
  assert_int_equal(sl_take_all(checks, 4, T0, out, &allowed), 0);
  assert_int_equal(allowed, 0);
  assert_true(out[0].allowed);
  assert_false(out[1].allowed);
  assert_true(out[1].retry_after_ns > 0);
  assert_int_equal(remaining(a, "user", T0), 9);
  assert_int_equal(remaining(b, "ip", T0), 0);
  assert_int_equal(remaining(c, "route", T0), 10);
  assert_int_equal(remaining(a, "new", T0), 10);
  assert_int_equal(stats_of(s).keys, 2);
  sl_limiter_free(a);
  sl_limiter_free(b);
  sl_limiter_free(c);
  sl_store_free(s);
}

static void take_all_shadow_deny_does_not_deny(void **state) {
  (void)state;
  sl_store *s = store_opts(0, 0);
  sl_limiter *a = limiter_of(s, "fixed_window:10/h");
  sl_limiter *sh = limiter_of(s, "fixed_window:1/h");
  take(sh, "k", 1, T0); /* the shadow rule would deny */
  sl_check checks[] = {check_of(a, "k", 2, 0), check_of(sh, "k", 1, 1)};
  sl_decision out[2];
  int allowed = -1;
  assert_int_equal(sl_take_all(checks, 2, T0, out, &allowed), 0);
  assert_int_equal(allowed, 1);
  assert_true(out[0].allowed);
  assert_int_equal(out[0].remaining, 8);
  assert_false(out[1].allowed); /* its own figures say denied */
  assert_int_equal(out[1].remaining, 0);
  assert_true(out[1].retry_after_ns > 0);
  assert_int_equal(remaining(a, "k", T0), 8);
  assert_int_equal(remaining(sh, "k", T0), 0);
  sl_limiter_free(a);
  sl_limiter_free(sh);
  sl_store_free(s);
}

static void take_all_shadow_allow_is_charged(void **state) {
  (void)state;
  sl_store *s = store_opts(0, 0);
  sl_limiter *a = limiter_of(s, "fixed_window:10/h");
  sl_limiter *sh = limiter_of(s, "fixed_window:5/h");
  sl_check checks[] = {check_of(a, "k", 2, 0), check_of(sh, "k", 1, 1)};
  sl_decision out[2];
  int allowed = -1;
  assert_int_equal(sl_take_all(checks, 2, T0, out, &allowed), 0);
  assert_int_equal(allowed, 1);
  assert_true(out[1].allowed);
  assert_int_equal(remaining(sh, "k", T0), 4);
  /* A denied request charges its shadow rules neither. */
  take(a, "k", 8, T0);
  assert_int_equal(sl_take_all(checks, 2, T0, out, &allowed), 0);
  assert_int_equal(allowed, 0);
  assert_int_equal(remaining(sh, "k", T0), 4);
  sl_limiter_free(a);
  sl_limiter_free(sh);
  sl_store_free(s);
}

static void take_all_merges_duplicate_checks(void **state) {
  (void)state;
  sl_store *s = store_opts(0, 0);
  sl_limiter *a = limiter_of(s, "token_bucket:10/h");
  sl_check checks[] = {check_of(a, "k", 3, 0), check_of(a, "k", 4, 0)};
  sl_decision out[2];
  int allowed = -1;
  assert_int_equal(sl_take_all(checks, 2, T0, out, &allowed), 0);
  assert_int_equal(allowed, 1);
  assert_int_equal(out[0].remaining, 3);
  assert_int_equal(out[1].remaining, 3);
  assert_int_equal(remaining(a, "k", T0), 3);
  /* Merged cost 7 > remaining 3: denied as a whole, nothing charged. */
  assert_int_equal(sl_take_all(checks, 2, T0, out, &allowed), 0);
  assert_int_equal(allowed, 0);
  assert_false(out[0].allowed);
  assert_int_equal(remaining(a, "k", T0), 3);
  /* Each alone would fit: still one request of cost 7. */
  sl_check small[] = {check_of(a, "k", 2, 0), check_of(a, "k", 2, 0)};
  assert_int_equal(sl_take_all(small, 2, T0, out, &allowed), 0);
  assert_int_equal(allowed, 0);
  small[1].cost = 1;
  assert_int_equal(sl_take_all(small, 2, T0, out, &allowed), 0);
  assert_int_equal(allowed, 1);
  assert_int_equal(remaining(a, "k", T0), 0);
  sl_limiter_free(a);
  sl_store_free(s);
}

/*
 * A shadow and an enforced check on the same limiter and key: whatever the
 * store does with the pair, an allowed request means the enforced check
 * allowed (and was charged); "allowed iff every non-shadow check allows".
 */
static void take_all_shadow_and_enforced_check_on_one_key_agree(void **state) {
  (void)state;
  sl_store *s = store_opts(0, 0);
  sl_limiter *a = limiter_of(s, "fixed_window:5/h");
  sl_check checks[] = {check_of(a, "k", 3, 1), check_of(a, "k", 3, 0)};
  sl_decision out[2];
  int allowed = -1;
  int rc = sl_take_all(checks, 2, T0, out, &allowed);
  int64_t rem = remaining(a, "k", T0);
  sl_limiter_free(a);
  sl_store_free(s);
  if (rc == 0 && allowed) {
    if (!out[1].allowed)
      fail_msg("request allowed, but its enforced check reports denied "
               "(remaining after: %lld)", (long long)rem);
    assert_true(rem <= 5 - 3); /* the enforced cost was charged */
  } else {
    assert_true(rc == 0 || rc == SL_ECOST);
    assert_int_equal(rem, 5); /* denied or refused: nothing charged */
  }
}

static void take_all_merged_cost_above_burst_is_ecost(void **state) {
  (void)state;
  sl_store *s = store_opts(0, 0);
  sl_limiter *a = limiter_of(s, "gcra:10/h:burst=6");
  sl_limiter *b = limiter_of(s, "fixed_window:10/h");
  sl_check checks[] = {check_of(b, "k", 1, 0), check_of(a, "k", 3, 0),
                       check_of(a, "k", 4, 0)};
  sl_decision out[3];
  int allowed = -1;
  assert_int_equal(sl_take_all(checks, 3, T0, out, &allowed), SL_ECOST);
  assert_int_equal(remaining(a, "k", T0), 6);
  assert_int_equal(remaining(b, "k", T0), 10);
  assert_int_equal(stats_of(s).keys, 0);
  /* A single check above burst too. */
  sl_check one = check_of(a, "k", 7, 0);
  assert_int_equal(sl_take_all(&one, 1, T0, out, &allowed), SL_ECOST);
  sl_limiter_free(a);
  sl_limiter_free(b);
  sl_store_free(s);
}

static void take_all_rejects_limiters_of_different_stores(void **state) {
  (void)state;
  sl_store *s1 = store_opts(0, 0), *s2 = store_opts(0, 0);
  sl_limiter *a = limiter_of(s1, "fixed_window:10/h");
  sl_limiter *b = limiter_of(s2, "fixed_window:10/h");
  sl_check checks[] = {check_of(a, "k", 1, 0), check_of(b, "k", 1, 0)};
  sl_decision out[2];
  int allowed = -1;
  assert_int_equal(sl_take_all(checks, 2, T0, out, &allowed), SL_EINVAL);
  checks[1].shadow = 1; /* a shadow check must share the store, too */
  assert_int_equal(sl_take_all(checks, 2, T0, out, &allowed), SL_EINVAL);
  assert_int_equal(stats_of(s1).keys, 0);
  assert_int_equal(stats_of(s2).keys, 0);
  sl_limiter_free(a);
  sl_limiter_free(b);
  sl_store_free(s1);
  sl_store_free(s2);
}

static void take_all_rejects_more_than_checks_max(void **state) {
  (void)state;
  sl_store *s = store_opts(0, 0);
  sl_limiter *a = limiter_of(s, "fixed_window:1000/h");
  sl_check checks[SL_CHECKS_MAX + 1];
  sl_decision out[SL_CHECKS_MAX + 1];
  char keys[SL_CHECKS_MAX + 1][16];
  for (int i = 0; i <= SL_CHECKS_MAX; i++) {
    snprintf(keys[i], sizeof keys[i], "k%d", i);
    checks[i] = check_of(a, keys[i], 1, 0);
  }
  int allowed = -1;
  assert_int_equal(sl_take_all(checks, SL_CHECKS_MAX + 1, T0, out, &allowed),
                   SL_EINVAL);
  assert_int_equal(stats_of(s).keys, 0);
  assert_int_equal(sl_take_all(checks, SL_CHECKS_MAX, T0, out, &allowed), 0);
  assert_int_equal(allowed, 1);
  assert_int_equal(stats_of(s).keys, SL_CHECKS_MAX);
  sl_limiter_free(a);
  sl_store_free(s);
}

static void take_all_with_no_checks_allows(void **state) {
  (void)state;
  int allowed = -1;
  assert_int_equal(sl_take_all(NULL, 0, T0, NULL, &allowed), 0);
  assert_int_equal(allowed, 1);
}

static void take_all_says_denied_on_every_error(void **state) {
  (void)state;
  sl_store *s = store_opts(0, 0);
  sl_limiter *lim = limiter_of(s, "fixed_window:5/s");
  sl_check c = {lim, "k", 1, 6, 0};
  sl_decision out;
  int allowed = 1;
  assert_int_equal(sl_take_all(&c, 1, T0, &out, &allowed), SL_ECOST);
  assert_int_equal(allowed, 0); /* a caller that checks only this denies */
  c.cost = 1;
  allowed = 1;
  assert_int_equal(sl_take_all(&c, 1, -1, &out, &allowed), SL_ETIME);
  assert_int_equal(allowed, 0);
  sl_limiter_free(lim);
  sl_store_free(s);
}

static void take_all_reports_current_figures_of_uncharged_checks(void **state) {
  (void)state;
  sl_store *s = store_opts(0, 0);
  sl_limiter *a = limiter_of(s, "fixed_window:5/s");
  sl_limiter *b = limiter_of(s, "fixed_window:1/s");
  take(b, "k", 1, T0); /* b is exhausted */
  sl_check c[2] = {{a, "k", 1, 1, 0}, {b, "k", 1, 1, 0}};
  sl_decision out[2];
  int allowed;
  assert_int_equal(sl_take_all(c, 2, T0, out, &allowed), 0);
  assert_false(allowed);
  assert_true(out[0].allowed);            /* a alone would allow */
  assert_int_equal(out[0].remaining, 5);  /* but nothing was taken */
  assert_int_equal(out[0].reset_ns, 0);
  assert_false(out[1].allowed);
  assert_int_equal(remaining(a, "k", T0), 5);
  sl_limiter_free(a);
  sl_limiter_free(b);
  sl_store_free(s);
}

static void take_all_rejects_bad_arguments(void **state) {
  (void)state;
  sl_store *s = store_opts(0, 0);
  sl_limiter *a = limiter_of(s, "fixed_window:5/h");
  sl_check ok = check_of(a, "k", 1, 0);
  sl_decision out[2];
  int allowed;
  assert_int_equal(sl_take_all(&ok, 1, T0, out, NULL), SL_EINVAL);
  assert_int_equal(sl_take_all(NULL, 1, T0, out, &allowed), SL_EINVAL);
  assert_int_equal(sl_take_all(&ok, 1, T0, NULL, &allowed), SL_EINVAL);
  struct {
    sl_check bad;
    int err;
  } cases[] = {
      {{NULL, "k", 1, 1, 0}, SL_EINVAL},
      {{a, NULL, 1, 1, 0}, SL_EINVAL},
      {{a, "k", 1, -1, 0}, SL_EINVAL},
      {{a, "k", 1, 6, 0}, SL_ECOST},
      {{a, "k", SL_KEY_MAX + 1, 1, 0}, SL_EKEY},
  };
  static char longkey[SL_KEY_MAX + 1];
  cases[4].bad.key = longkey;
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    /* Bad check second, so a valid first check is not charged either. */
    sl_check checks[2] = {check_of(a, "first", 1, 0), cases[i].bad};
    assert_int_equal(sl_take_all(checks, 2, T0, out, &allowed), cases[i].err);
    assert_int_equal(stats_of(s).keys, 0);
  }
  sl_check checks[2] = {check_of(a, "first", 1, 0), check_of(a, "k", 1, 0)};
  assert_int_equal(sl_take_all(checks, 2, -1, out, &allowed), SL_ETIME);
  assert_int_equal(sl_take_all(checks, 2, SL_TIME_MAX_NS, out, &allowed),
                   SL_ETIME);
  assert_int_equal(stats_of(s).keys, 0);
  sl_limiter_free(a);
  sl_store_free(s);
}

static void take_all_reports_per_check_figures(void **state) {
  (void)state;
  sl_store *s = store_opts(0, 0);
  sl_limiter *minute = limiter_of(s, "fixed_window:10/m");
  sl_limiter *hour = limiter_of(s, "fixed_window:3/h");
  sl_check checks[] = {check_of(minute, "k", 1, 0), check_of(hour, "k", 1, 0)};
  sl_decision out[2];
  int allowed;
  assert_int_equal(sl_take_all(checks, 2, T0, out, &allowed), 0);
  assert_int_equal(allowed, 1);
  assert_int_equal(out[0].limit, 10);
  assert_int_equal(out[0].remaining, 9);
  assert_int_equal(out[0].reset_ns, SEC(60));
  assert_int_equal(out[1].limit, 3);
  assert_int_equal(out[1].remaining, 2);
  assert_int_equal(out[1].reset_ns, SEC(3600));
  take(hour, "k", 2, T0);
  assert_int_equal(sl_take_all(checks, 2, T0 + SEC(30), out, &allowed), 0);
  assert_int_equal(allowed, 0);
  /* The most restrictive rule is visible: denied, with its wait. */
  assert_true(out[0].allowed);
  assert_int_equal(out[0].retry_after_ns, 0);
  assert_false(out[1].allowed);
  assert_int_equal(out[1].remaining, 0);
  assert_int_equal(out[1].retry_after_ns, SEC(3600) - SEC(30));
  /* Each figure equals what a lone peek of that rule reports. */
  sl_decision p0 = take(minute, "k", 0, T0 + SEC(30));
  assert_int_equal(p0.remaining, 9);
  sl_limiter_free(minute);
  sl_limiter_free(hour);
  sl_store_free(s);
}

static void take_all_decides_like_take_for_every_algorithm(void **state) {
  (void)state;
  sl_store *s = store_opts(0, 0);
  for (size_t i = 0; i < NPOLICIES; i++) {
    sl_limiter *one = limiter_of(s, POLICIES[i]);
    sl_limiter *all = limiter_of(s, POLICIES[i]);
    uint64_t seed = 77 + i;
    int64_t now = T0;
    for (int r = 0; r < 200; r++) {
      now += (int64_t)(splitmix64(&seed) % (uint64_t)MS(120));
      int64_t cost = (int64_t)(splitmix64(&seed) % 4);
      sl_decision a, b;
      int allowed;
      assert_int_equal(sl_limiter_take(one, "k", 1, cost, now, &a), 0);
      sl_check c = check_of(all, "k", cost, 0);
      assert_int_equal(sl_take_all(&c, 1, now, &b, &allowed), 0);
      assert_int_equal(allowed, a.allowed);
      assert_same_decision(&a, &b);
    }
    sl_limiter_free(one);
    sl_limiter_free(all);
  }
  sl_store_free(s);
}

/* An allocator that can be told to fail every allocation. */
typedef struct fail_ctx {
  int failing;
} fail_ctx;

static void *failing_alloc(void *ud, void *ptr, size_t old_size,
                           size_t new_size) {
  (void)old_size;
  fail_ctx *c = ud;
  if (new_size == 0) {
    free(ptr);
    return NULL;
  }
  if (c->failing) return NULL;
  return realloc(ptr, new_size);
}

/*
 * "Returns 0, or the first error (nothing charged)": when a later check
 * cannot be stored (SL_ENOMEM), an earlier one must not stay charged.
 */
static void take_all_enomem_charges_nothing(void **state) {
  (void)state;
  fail_ctx fc = {0};
  sl_store_options o;
  sl_store_options_init(&o);
  o.hash_key = test_hash_key();
  o.alloc = failing_alloc;
  o.alloc_ud = &fc;
  sl_store *s = NULL;
  assert_int_equal(sl_store_new(&o, &s), 0);
  sl_limiter *a = limiter_of(s, "fixed_window:10/h");
  sl_limiter *b = limiter_of(s, "fixed_window:10/h");
  take(a, "user", 1, T0); /* an existing short key: no allocation */
  char big[100];
  memset(big, 'z', sizeof big - 1);
  big[sizeof big - 1] = 0; /* a new long key needs a block */
  sl_check checks[] = {check_of(a, "user", 1, 0), check_of(b, big, 1, 0)};
  sl_decision out[2];
  int allowed = -1;
  fc.failing = 1;
  int rc = sl_take_all(checks, 2, T0, out, &allowed);
  fc.failing = 0;
  int64_t user = remaining(a, "user", T0), bigr = remaining(b, big, T0);
  sl_limiter_free(a);
  sl_limiter_free(b);
  sl_store_free(s);
  assert_int_equal(rc, SL_ENOMEM);
  assert_int_equal(bigr, 10);
  assert_int_equal(user, 9); /* as before the call */
}

static void version_matches_macros(void **state) {
  (void)state;
  assert_int_equal(sl_version(), SL_VERSION_HEX);
  char want[32];
  snprintf(want, sizeof want, "%d.%d.%d", SL_VERSION_MAJOR, SL_VERSION_MINOR,
           SL_VERSION_PATCH);
  assert_string_equal(sl_version_string(), want);
  assert_int_equal(SL_VERSION_HEX >> 16, SL_VERSION_MAJOR);
  assert_int_equal((SL_VERSION_HEX >> 8) & 0xff, SL_VERSION_MINOR);
  assert_int_equal(SL_VERSION_HEX & 0xff, SL_VERSION_PATCH);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(same_key_under_two_limiters_is_independent),
      cmocka_unit_test(limiter_free_drops_its_keys_and_keeps_others),
      cmocka_unit_test(limiter_ids_are_reused_after_free),
      cmocka_unit_test(store_holds_at_most_65535_limiters),
      cmocka_unit_test(limiter_new_rejects_bad_arguments),
      cmocka_unit_test(limiter_policy_returns_the_policy),
      cmocka_unit_test(reset_forgets_the_key),
      cmocka_unit_test(reset_of_a_long_key_frees_it),
      cmocka_unit_test(reset_rejects_bad_arguments),
      cmocka_unit_test(take_rejects_null_arguments),
      cmocka_unit_test(take_rejects_negative_cost),
      cmocka_unit_test(take_rejects_cost_above_burst_or_limit),
      cmocka_unit_test(take_rejects_key_longer_than_max),
      cmocka_unit_test(take_rejects_time_out_of_range),
      cmocka_unit_test(peek_changes_nothing),
      cmocka_unit_test(batch_matches_sequential_takes),
      cmocka_unit_test(batch_repeated_key_sees_earlier_charges),
      cmocka_unit_test(batch_reports_errors_per_item),
      cmocka_unit_test(batch_with_bad_time_fails_every_item),
      cmocka_unit_test(batch_rejects_bad_arguments),
      cmocka_unit_test(take_all_charges_every_rule_when_all_allow),
      cmocka_unit_test(take_all_denied_request_charges_nothing),
      cmocka_unit_test(take_all_shadow_deny_does_not_deny),
      cmocka_unit_test(take_all_shadow_allow_is_charged),
      cmocka_unit_test(take_all_merges_duplicate_checks),
      cmocka_unit_test(take_all_shadow_and_enforced_check_on_one_key_agree),
      cmocka_unit_test(take_all_merged_cost_above_burst_is_ecost),
      cmocka_unit_test(take_all_rejects_limiters_of_different_stores),
      cmocka_unit_test(take_all_rejects_more_than_checks_max),
      cmocka_unit_test(take_all_with_no_checks_allows),
      cmocka_unit_test(take_all_rejects_bad_arguments),
      cmocka_unit_test(take_all_says_denied_on_every_error),
      cmocka_unit_test(take_all_reports_current_figures_of_uncharged_checks),
      cmocka_unit_test(take_all_reports_per_check_figures),
      cmocka_unit_test(take_all_decides_like_take_for_every_algorithm),
      cmocka_unit_test(take_all_enomem_charges_nothing),
      cmocka_unit_test(version_matches_macros),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
