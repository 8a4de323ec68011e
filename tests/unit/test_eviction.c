/*
 * test_eviction.c — what the store gives away when its memory cap binds
 * (issue 15, finding 3): a flood of unique keys must not push out a key
 * that is being limited, each eviction's price (what its key may be
 * admitted again) is counted, and a limiter's evict_below refuses a new
 * key rather than pay more. Everything runs on the library with a fake
 * clock: no sockets, no threads, bounded work.
 */
#include "helpers.h"

#include "algo/algo.h"

/* Takes `cost` for the 8-byte key k; fails the test on any error. */
static sl_decision take_key(sl_limiter *lim, uint64_t k, int64_t cost,
                            int64_t now) {
  sl_decision d;
  int rc = sl_limiter_take(lim, &k, sizeof k, cost, now, &d);
  if (rc) fail_msg("take(%llu): %s", (unsigned long long)k, sl_strerror(rc));
  return d;
}

/* ---- the flood: >= 2 M unique keys at an 8 MB cap ---- */

#define FLOOD_CAP ((size_t)8 << 20)
#define FLOOD_KEYS 2000000
#define FLOOD_SPAN SEC(60)  /* of fake time: 33,333 new keys a second */
#define PROBE_EVERY MS(20)  /* the hot key asks 50 times a second */

/* A key being limited, probed all along the flood. */
typedef struct hot {
  const char *spec;
  sl_limiter *lim;
  int64_t allowed;
} hot;

/* Probes every hot key once at t. */
static void probe(hot *h, size_t nh, int64_t t) {
  for (size_t k = 0; k < nh; k++)
    h[k].allowed += take(h[k].lim, "hot", 1, t).allowed;
}

/*
 * The allows each hot key gets on its own (no flood, no cap): the same
 * probes on a store of its own.
 */
static int64_t reference(const char *spec) {
  sl_store *s = store_opts(0, 0);
  hot h = {spec, limiter_of(s, spec), 0};
  for (int64_t t = 0; t < FLOOD_SPAN; t += PROBE_EVERY) probe(&h, 1, T0 + t);
  sl_limiter_free(h.lim);
  sl_store_free(s);
  return h.allowed;
}

/*
 * FLOOD_KEYS unique 8-byte keys over FLOOD_SPAN into a store capped at
 * FLOOD_CAP, while every hot key is probed each PROBE_EVERY: the flood's
 * keys go to `flood` (another policy: SL.THROTTLE with random keys) or,
 * when it is NULL, round-robin to the hot keys' own limiters (a sprayed
 * SL.CHECK of the same rule). Each hot key may get at most 1% more allows
 * than on its own.
 */
static void flood_keeps_hot_keys_limited(const char *flood_spec,
                                         const char *const *specs, size_t nh) {
  sl_store *s = store_opts(FLOOD_CAP, 0);
  hot h[8];
  assert_true(nh <= 8);
  for (size_t k = 0; k < nh; k++)
    h[k] = (hot){specs[k], limiter_of(s, specs[k]), 0};
  sl_limiter *flood = flood_spec ? limiter_of(s, flood_spec) : NULL;
  uint64_t seed = 15;
  int64_t next_probe = 0, failed = 0;
  for (int64_t i = 0; i < FLOOD_KEYS; i++) {
    int64_t t = i * (FLOOD_SPAN / FLOOD_KEYS);
    if (t >= next_probe) {
      probe(h, nh, T0 + t);
      next_probe += PROBE_EVERY;
    }
    uint64_t key = splitmix64(&seed);
    sl_limiter *lim = flood ? flood : h[i % (int64_t)nh].lim;
    sl_decision d;
    int rc = sl_limiter_take(lim, &key, sizeof key, 1, T0 + t, &d);
    /* A flood key may find no room for its first log block (bytes only
       log-owning entries near it can free): its own request fails. */
    if (rc == SL_ENOMEM)
      failed++;
    else if (rc)
      fail_msg("flood key %lld: %s", (long long)i, sl_strerror(rc));
  }
  for (; next_probe < FLOOD_SPAN; next_probe += PROBE_EVERY)
    probe(h, nh, T0 + next_probe);
  sl_store_stats st = stats_of(s);
  assert_true(st.bytes <= FLOOD_CAP);
  if (st.evictions < FLOOD_KEYS / 2)
    fail_msg("only %llu evictions: the cap did not bind",
             (unsigned long long)st.evictions);
  int over = 0;
  for (size_t k = 0; k < nh; k++) {
    int64_t ref = reference(h[k].spec);
    print_message("%-22s allowed %lld of %lld probes (alone: %lld)\n",
                  h[k].spec, (long long)h[k].allowed,
                  (long long)(FLOOD_SPAN / PROBE_EVERY), (long long)ref);
    if (h[k].allowed * 100 > ref * 101) over = 1;
    sl_limiter_free(h[k].lim);
  }
  print_message("evictions %llu, evicted units %llu, flood keys refused "
                "%lld\n", (unsigned long long)st.evictions,
                (unsigned long long)st.evicted_units, (long long)failed);
  assert_true(failed * 10000 < FLOOD_KEYS);
  sl_limiter_free(flood);
  sl_store_free(s);
  if (over) fail_msg("a hot key got more than 1%% over its limit");
}

static const char *const hot_specs[] = {
    "sliding_log:100/m", "token_bucket:10/m",    "fixed_window:100/m",
    "gcra:10/m",         "sliding_window:100/m", "leaky_bucket:10/m",
};
#define NHOT (sizeof hot_specs / sizeof *hot_specs)

/* The second measurement: `SL.THROTTLE key:__rand_int__
   fixed_window:1/d` beside keys of other policies at their limits. */
static void flood_of_another_policy_keeps_hot_keys_limited(void **state) {
  (void)state;
  flood_keeps_hot_keys_limited("fixed_window:1/d", hot_specs, NHOT);
}

/* The first: other values of the same rule, sprayed (one flood,
   its keys spread over the six rules). */
static void flood_of_the_same_rules_keeps_hot_keys_limited(void **state) {
  (void)state;
  flood_keeps_hot_keys_limited(NULL, hot_specs, NHOT);
}

/* ---- the price of an entry: algo_ops.used ---- */

/* Charges `cost` in `n` requests 1 ms apart from T0 and checks what a
   reset would give back right after, and once the key is fresh. */
static void used_after(const char *spec, int64_t cost, int n, int64_t want) {
  sl_policy pub = policy_of(spec);
  algo_policy p;
  assert_int_equal(algo_policy_compile(&pub, &p, NULL, 0), 0);
  assert_true(pub.algo != SL_SLIDING_LOG); /* its log is the store's */
  algo_state st = {0, 0}, next;
  sl_decision d;
  int64_t t = T0;
  for (int i = 0; i < n; i++, t += MS(1)) {
    next = (algo_state){0, 0};
    if (p.ops->decide(&p, i ? &st : NULL, t, cost, &d, &next)) st = next;
  }
  int64_t got = p.ops->used(&p, &st, t - MS(1));
  if (got != want)
    fail_msg("%s: used %lld after %d x %lld, want %lld", spec, (long long)got,
             n, (long long)cost, (long long)want);
  assert_int_equal(p.ops->used(&p, &st, p.ops->fresh_at(&p, &st)), 0);
}

static void used_is_what_a_reset_gives_back(void **state) {
  (void)state;
  used_after("fixed_window:100/h", 3, 4, 12);
  used_after("sliding_window:100/h", 5, 2, 10);
  used_after("token_bucket:10/h", 2, 3, 6);
  used_after("gcra:10/h", 1, 7, 7);
  used_after("leaky_bucket:10/h", 4, 2, 8);
  /* A refill in progress rounds up: 3 taken, 1 ms of a 6 min token
     refilled, still 3 units short of full. */
  used_after("gcra:10/h", 3, 1, 3);
}

static void sliding_log_used_is_its_live_sum(void **state) {
  (void)state;
  sl_store *s = store_opts((size_t)1 << 20, 1);
  sl_limiter *log = limiter_of(s, "sliding_log:100/s");
  sl_limiter *lim = limiter_of(s, "token_bucket:1000/h");
  /* 5 units at T0, 7 at T0 + 600 ms: at T0 + 1.2 s only the 7 are live. */
  take(log, "k", 5, T0);
  take(log, "k", 7, T0 + MS(600));
  assert_int_equal(remaining(log, "k", T0 + MS(1200)), 93);
  /* Keys that used 8 each, until the log key (at 7, the cheapest
     wherever it is) is evicted: every eviction but that one gave 8. */
  for (uint64_t i = 0; remaining(log, "k", T0 + MS(1200)) != 100; i++)
    take_key(lim, i, 8, T0 + MS(1200));
  sl_store_stats st = stats_of(s);
  assert_true(st.evictions > 0);
  assert_int_equal(st.evicted_units, 8 * (st.evictions - 1) + 7);
  sl_limiter_free(log);
  sl_limiter_free(lim);
  sl_store_free(s);
}

/* ---- what evictions count, and evict_below ---- */

/* Fills a one-shard store with keys of `lim` that used `cost` each, until
   the first eviction; returns how many keys went in. */
static uint64_t fill_until_evicting(sl_store *s, sl_limiter *lim,
                                    int64_t cost, int64_t now) {
  uint64_t i = 0;
  while (stats_of(s).evictions + stats_of(s).expirations == 0)
    take_key(lim, i++, cost, now);
  return i;
}

static void evicted_units_count_what_evictions_gave_back(void **state) {
  (void)state;
  sl_store *s = store_opts((size_t)256 << 10, 1);
  sl_limiter *lim = limiter_of(s, "token_bucket:10/h");
  uint64_t n = fill_until_evicting(s, lim, 3, T0);
  for (uint64_t i = n; i < n + 1000; i++) take_key(lim, i, 3, T0);
  sl_store_stats st = stats_of(s);
  assert_true(st.evictions > 1000);
  assert_int_equal(st.evicted_units, 3 * st.evictions);
  sl_limiter_free(lim);
  sl_store_free(s);
}

static void evict_below_refuses_a_new_key_rather_than_evict(void **state) {
  (void)state;
  sl_store *s = store_opts((size_t)256 << 10, 1);
  sl_limiter *used = limiter_of(s, "token_bucket:10/h");
  sl_limiter *strict = limiter_of(s, "gcra:10/s");
  sl_limiter *loose = limiter_of(s, "gcra:10/s");
  assert_int_equal(sl_limiter_set_evict_below(strict, 1), 0);
  assert_int_equal(sl_limiter_set_evict_below(NULL, 1), SL_EINVAL);
  assert_int_equal(sl_limiter_set_evict_below(loose, 3), 0);
  fill_until_evicting(s, used, 2, T0);
  sl_store_stats before = stats_of(s);
  /* Every entry gave back 2 units: strict (< 1) and loose (< 3 is fine)
     differ. */
  uint64_t key = UINT64_MAX;
  sl_decision d;
  int full = 0;
  for (int i = 0; i < 100; i++, key--)
    full += sl_limiter_take(strict, &key, sizeof key, 1, T0, &d) == SL_EFULL;
  assert_int_equal(full, 100);
  sl_store_stats after = stats_of(s);
  assert_int_equal(after.evictions, before.evictions);
  assert_int_equal(after.keys, before.keys);
  for (int i = 0; i < 100; i++, key--)
    assert_int_equal(sl_limiter_take(loose, &key, sizeof key, 1, T0, &d), 0);
  assert_true(stats_of(s).evictions > before.evictions);
  /* Keys back to fresh cost nothing: strict may take their room. */
  assert_int_equal(sl_limiter_take(strict, &key, sizeof key, 1,
                                   T0 + SEC(3600 + 2), &d),
                   0);
  sl_limiter_free(used);
  sl_limiter_free(strict);
  sl_limiter_free(loose);
  sl_store_free(s);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(used_is_what_a_reset_gives_back),
      cmocka_unit_test(sliding_log_used_is_its_live_sum),
      cmocka_unit_test(evicted_units_count_what_evictions_gave_back),
      cmocka_unit_test(evict_below_refuses_a_new_key_rather_than_evict),
      cmocka_unit_test(flood_of_another_policy_keeps_hot_keys_limited),
      cmocka_unit_test(flood_of_the_same_rules_keeps_hot_keys_limited),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
