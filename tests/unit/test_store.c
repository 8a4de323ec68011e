/*
 * test_store.c — the sharded in-memory store seen through the public API:
 * options, key accounting, lazy and active expiry, the hard memory cap and
 * its eviction order, long and binary keys, sliding_log memory, and the
 * allocator hook (failure injection and size bookkeeping).
 */
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "helpers.h"
#include "limiter.h"

/* ---- local helpers ---- */

/* take/peek on arbitrary bytes; fails the test on any error. */
static sl_decision take_bin(sl_limiter *lim, const void *key, size_t len,
                            int64_t cost, int64_t now) {
  sl_decision d;
  int rc = sl_limiter_take(lim, key, len, cost, now, &d);
  if (rc) fail_msg("take(len %zu, cost %lld): %s", len, (long long)cost,
                   sl_strerror(rc));
  return d;
}

static sl_decision peek_bin(sl_limiter *lim, const void *key, size_t len,
                            int64_t now) {
  return take_bin(lim, key, len, 0, now);
}

static sl_decision peek(sl_limiter *lim, const char *key, int64_t now) {
  return take(lim, key, 0, now);
}

/*
 * Runs fn in a child process, for calls that may crash or never return.
 * Returns its exit status (fn's return value), 128 + signal when killed by
 * one, or -1 when it ran past timeout_ms (then it is killed).
 */
static int run_in_child(int (*fn)(void), int timeout_ms) {
  fflush(NULL);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    /* cmocka's handlers would resume the test run in the child. */
    int sigs[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGSYS, SIGABRT};
    for (size_t i = 0; i < sizeof sigs / sizeof *sigs; i++)
      signal(sigs[i], SIG_DFL);
    _exit(fn());
  }
  int status = 0;
  for (int waited = 0;; waited += 10) {
    pid_t r = waitpid(pid, &status, WNOHANG);
    assert_true(r >= 0);
    if (r == pid) break;
    if (waited >= timeout_ms) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return -1;
    }
    usleep(10000);
  }
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return WEXITSTATUS(status);
}

/* ---- options ---- */

static void store_new_accepts_null_options(void **state) {
  (void)state;
  sl_store *s = NULL;
  assert_int_equal(sl_store_new(NULL, &s), 0);
  assert_non_null(s);
  sl_store_stats st = stats_of(s);
  assert_int_equal(st.max_memory, SL_STORE_DEFAULT_MEMORY);
  assert_int_equal(st.keys, 0);
  assert_int_equal(st.limiters, 0);
  assert_true(st.bytes > 0 && st.bytes <= st.max_memory);
  sl_store_free(s);
}

static void store_new_rejects_shards_not_power_of_two(void **state) {
  (void)state;
  unsigned bad[] = {3, 5, 6, 12, 100, 65535};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    sl_store_options o;
    sl_store_options_init(&o);
    o.shards = bad[i];
    sl_store *s = (sl_store *)&o; /* poison: must be reset */
    assert_int_equal(sl_store_new(&o, &s), SL_EINVAL);
    assert_null(s);
  }
  unsigned good[] = {1, 2, 4, 128};
  for (size_t i = 0; i < sizeof good / sizeof *good; i++) {
    sl_store_options o;
    sl_store_options_init(&o);
    o.shards = good[i];
    sl_store *s = NULL;
    assert_int_equal(sl_store_new(&o, &s), 0);
    sl_store_free(s);
  }
}

static void store_new_rejects_max_memory_too_small(void **state) {
  (void)state;
  size_t bad[] = {1, 64, 1000, 2048};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    sl_store_options o;
    sl_store_options_init(&o);
    o.max_memory = bad[i];
    sl_store *s = (sl_store *)&o;
    assert_int_equal(sl_store_new(&o, &s), SL_EINVAL);
    assert_null(s);
  }
}

static void store_new_rejects_null_out(void **state) {
  (void)state;
  assert_int_equal(sl_store_new(NULL, NULL), SL_EINVAL);
}

/* In a child: a pre-size so large that its table size overflows size_t. */
static int new_store_with_absurd_expected_keys(void) {
  sl_store_options o;
  sl_store_options_init(&o);
  o.shards = 1;
  /* per-shard capacity = n * 8/7 + 1 = 512409557603043101 slots; at 36
     bytes a slot that is 2^64 + 20 bytes. */
  o.expected_keys = UINT64_C(448358362902662713);
  sl_store *s = NULL;
  int rc = sl_store_new(&o, &s);
  if (rc == SL_EINVAL || rc == SL_ENOMEM) return 0;
  if (rc != 0) return 2;
  sl_store_stats st;
  sl_store_stats_get(s, &st);
  int ok = st.bytes <= st.max_memory;
  sl_store_free(s);
  return ok ? 0 : 3;
}

static void store_new_survives_absurd_expected_keys(void **state) {
  (void)state;
  int rc = run_in_child(new_store_with_absurd_expected_keys, 5000);
  if (rc) fail_msg("sl_store_new(expected_keys = 448358362902662713): "
                   "child exit %d (128+n: signal n, -1: timeout)", rc);
  /* Large but sane values fall back to what the cap allows. */
  sl_store_options o;
  sl_store_options_init(&o);
  o.max_memory = (size_t)1 << 20;
  o.expected_keys = (size_t)1 << 40;
  sl_store *s = NULL;
  int r = sl_store_new(&o, &s);
  assert_true(r == 0 || r == SL_ENOMEM || r == SL_EINVAL);
  if (r == 0) {
    assert_true(stats_of(s).bytes <= ((size_t)1 << 20));
    sl_store_free(s);
  }
}

static void store_defaults_are_reported_in_stats(void **state) {
  (void)state;
  sl_store_options o;
  memset(&o, 0xab, sizeof o);
  sl_store_options_init(&o);
  assert_int_equal(o.max_memory, 0);
  assert_int_equal(o.shards, 0);
  assert_int_equal(o.expected_keys, 0);
  assert_null(o.alloc);
  assert_null(o.alloc_ud);
  assert_null(o.hash_key);
  sl_store *s = NULL;
  assert_int_equal(sl_store_new(&o, &s), 0);
  assert_int_equal(stats_of(s).max_memory, SL_STORE_DEFAULT_MEMORY);
  sl_store_free(s);

  s = store_with_cap((size_t)3 << 20);
  assert_int_equal(stats_of(s).max_memory, (size_t)3 << 20);
  sl_store_free(s);
}

static void expected_keys_presizes_without_passing_cap(void **state) {
  (void)state;
  sl_store_options o;
  sl_store_options_init(&o);
  o.max_memory = (size_t)8 << 20;
  o.expected_keys = 100000;
  sl_store *s = NULL;
  assert_int_equal(sl_store_new(&o, &s), 0);
  sl_store_stats st = stats_of(s);
  assert_true(st.bytes <= st.max_memory);
  assert_true(st.bytes > (size_t)100000 * 32); /* tables were pre-sized */
  sl_store_free(s);
}

/* ---- key accounting ---- */

static void stats_count_keys_and_limiters(void **state) {
  (void)state;
  sl_store *s = store_opts(0, 0);
  sl_limiter *a = limiter_of(s, "gcra:10/s");
  sl_limiter *b = limiter_of(s, "fixed_window:10/s");
  assert_int_equal(stats_of(s).limiters, 2);
  char key[32];
  for (int i = 0; i < 100; i++) {
    snprintf(key, sizeof key, "user-%d", i);
    take(a, key, 1, T0);
  }
  assert_int_equal(stats_of(s).keys, 100);
  for (int i = 0; i < 30; i++) {
    snprintf(key, sizeof key, "user-%d", i);
    take(b, key, 1, T0);
  }
  assert_int_equal(stats_of(s).keys, 130);
  /* Taking again on existing keys adds nothing; peeks never insert. */
  take(a, "user-0", 1, T0);
  peek(a, "nobody", T0);
  assert_int_equal(stats_of(s).keys, 130);
  sl_limiter_free(a);
  sl_limiter_free(b);
  assert_int_equal(stats_of(s).limiters, 0);
  assert_int_equal(stats_of(s).keys, 0);
  sl_store_free(s);
}

static void denied_request_inserts_no_key(void **state) {
  (void)state;
  sl_store *s = store_opts(0, 0);
  sl_limiter *lim = limiter_of(s, "fixed_window:2/s");
  take(lim, "k", 2, T0);
  assert_int_equal(stats_of(s).keys, 1);
  assert_false(take(lim, "k", 1, T0).allowed);
  assert_int_equal(stats_of(s).keys, 1);
  assert_int_equal(peek(lim, "k", T0).remaining, 0);
  sl_limiter_free(lim);
  sl_store_free(s);
}

/* ---- lazy expiry ---- */

static void lazy_expiry_on_take_starts_the_key_afresh(void **state) {
  (void)state;
  sl_store *s = store_opts(0, 0);
  sl_limiter *lim = limiter_of(s, "fixed_window:5/s");
  take(lim, "k", 3, T0);
  sl_store_stats st = stats_of(s);
  assert_int_equal(st.keys, 1);
  assert_int_equal(st.expirations, 0);
  /* Two seconds later the state is back to fresh: the take decides and
     charges exactly like one on a key never seen (the store may drop and
     re-create the entry, counting an expiration, or reuse it in place). */
  sl_decision d = take(lim, "k", 1, T0 + SEC(2) + MS(300));
  sl_decision n = take(lim, "never-seen", 1, T0 + SEC(2) + MS(300));
  assert_int_equal(d.allowed, n.allowed);
  assert_int_equal(d.remaining, 4);
  assert_int_equal(d.remaining, n.remaining);
  assert_int_equal(d.reset_ns, n.reset_ns);
  assert_int_equal(d.reset_ns, MS(700));
  st = stats_of(s);
  assert_int_equal(st.keys, 2);
  assert_true(st.expirations <= 1);
  assert_int_equal(peek(lim, "k", T0 + SEC(2) + MS(300)).remaining, 4);
  sl_limiter_free(lim);
  sl_store_free(s);
}

static void lazy_expiry_on_peek_drops_key(void **state) {
  (void)state;
  sl_store *s = store_opts(0, 0);
  sl_limiter *lim = limiter_of(s, "fixed_window:5/s");
  take(lim, "k", 3, T0);
  /* Not yet fresh: kept. */
  assert_int_equal(peek(lim, "k", T0 + MS(999)).remaining, 2);
  assert_int_equal(stats_of(s).expirations, 0);
  assert_int_equal(stats_of(s).keys, 1);
  sl_decision d = peek(lim, "k", T0 + SEC(2));
  assert_true(d.allowed);
  assert_int_equal(d.remaining, 5);
  sl_store_stats st = stats_of(s);
  assert_int_equal(st.keys, 0);
  assert_int_equal(st.expirations, 1);
  sl_limiter_free(lim);
  sl_store_free(s);
}

/* ---- active expiry ---- */

static void fill_fixed_window_keys(sl_limiter *lim, int n, int64_t now) {
  for (int i = 0; i < n; i++) {
    uint32_t k = (uint32_t)i;
    take_bin(lim, &k, sizeof k, 1, now);
  }
}

static void expire_drops_all_fresh_keys_given_budget(void **state) {
  (void)state;
  sl_store *s = store_opts(0, 0);
  sl_limiter *lim = limiter_of(s, "fixed_window:5/s");
  fill_fixed_window_keys(lim, 10000, T0);
  assert_int_equal(stats_of(s).keys, 10000);
  /* Nothing is fresh yet. */
  assert_int_equal(sl_store_expire(s, T0 + MS(500), (size_t)1 << 20), 0);
  assert_int_equal(stats_of(s).keys, 10000);
  assert_int_equal(sl_store_expire(s, T0 + SEC(2), (size_t)1 << 20), 10000);
  sl_store_stats st = stats_of(s);
  assert_int_equal(st.keys, 0);
  assert_int_equal(st.expirations, 10000);
  assert_int_equal(st.evictions, 0);
  sl_limiter_free(lim);
  sl_store_free(s);
}

static void expire_work_is_bounded_per_call(void **state) {
  (void)state;
  sl_store *s = store_opts(0, 0);
  sl_limiter *lim = limiter_of(s, "fixed_window:5/s");
  fill_fixed_window_keys(lim, 10000, T0);
  assert_int_equal(sl_store_expire(s, T0 + SEC(2), 0), 0);
  assert_int_equal(stats_of(s).keys, 10000);
  uint64_t left = 10000;
  int calls = 0;
  while (left > 0) {
    int64_t n = sl_store_expire(s, T0 + SEC(2), 64);
    assert_true(n >= 0 && n <= 64);
    left -= (uint64_t)n;
    assert_int_equal(stats_of(s).keys, left);
    assert_true(++calls < 10000); /* round-robin reaches every key */
  }
  assert_int_equal(stats_of(s).expirations, 10000);
  /* A budget below 64 is honoured too. */
  fill_fixed_window_keys(lim, 1000, T0 + SEC(10));
  for (int i = 0; i < 50; i++) {
    int64_t n = sl_store_expire(s, T0 + SEC(20), 5);
    assert_true(n >= 0 && n <= 5);
  }
  sl_limiter_free(lim);
  sl_store_free(s);
}

static void expire_keeps_keys_not_yet_fresh(void **state) {
  (void)state;
  sl_store *s = store_opts(0, 0);
  sl_limiter *hour = limiter_of(s, "fixed_window:10/h");
  sl_limiter *sec = limiter_of(s, "fixed_window:5/s");
  char key[32];
  for (int i = 0; i < 1000; i++) {
    snprintf(key, sizeof key, "h%d", i);
    take(hour, key, 1 + i % 7, T0);
    snprintf(key, sizeof key, "s%d", i);
    take(sec, key, 1, T0);
  }
  assert_int_equal(sl_store_expire(s, T0 + SEC(2), (size_t)1 << 20), 1000);
  assert_int_equal(stats_of(s).keys, 1000);
  for (int i = 0; i < 1000; i++) {
    snprintf(key, sizeof key, "h%d", i);
    assert_int_equal(peek(hour, key, T0 + SEC(2)).remaining, 10 - (1 + i % 7));
  }
  /* Still within the hour: repeated sweeps drop nothing. */
  for (int i = 0; i < 10; i++)
    assert_int_equal(sl_store_expire(s, T0 + SEC(3599), 4096), 0);
  assert_int_equal(stats_of(s).keys, 1000);
  /* At the end of the window they are fresh, but expiry waits out its
     grace (1 s), so a request stamped a little earlier still sees them. */
  assert_int_equal(sl_store_expire(s, T0 + SEC(3600), (size_t)1 << 20), 0);
  assert_int_equal(sl_store_expire(s, T0 + SEC(3601), (size_t)1 << 20), 1000);
  assert_int_equal(stats_of(s).keys, 0);
  sl_limiter_free(hour);
  sl_limiter_free(sec);
  sl_store_free(s);
}

/* In a child: a full sweep asked for with SIZE_MAX, one key not fresh. */
static int expire_everything_with_size_max(void) {
  sl_store *s = NULL;
  if (sl_store_new(NULL, &s)) return 2;
  sl_policy p;
  sl_limiter *hour = NULL, *sec = NULL;
  if (sl_policy_parse("fixed_window:10/h", &p, NULL, 0) ||
      sl_limiter_new(s, &p, &hour))
    return 2;
  if (sl_policy_parse("fixed_window:10/s", &p, NULL, 0) ||
      sl_limiter_new(s, &p, &sec))
    return 2;
  sl_decision d;
  if (sl_limiter_take(hour, "live", 4, 1, T0, &d) ||
      sl_limiter_take(sec, "stale", 5, 1, T0, &d))
    return 2;
  int64_t n = sl_store_expire(s, T0 + SEC(2), SIZE_MAX);
  sl_limiter_free(hour);
  sl_limiter_free(sec);
  sl_store_free(s);
  return n == 1 ? 0 : 3;
}

/*
 * max_slots bounds the work; a caller who wants everything swept passes
 * SIZE_MAX. That must come back (after at most a pass over each table),
 * not spin over the same live entries until SIZE_MAX slots are examined.
 */
static void expire_with_size_max_budget_returns(void **state) {
  (void)state;
  int rc = run_in_child(expire_everything_with_size_max, 2000);
  if (rc == -1)
    fail_msg("sl_store_expire(s, now, SIZE_MAX) did not return in 2 s "
             "with one live key in the store");
  if (rc) fail_msg("child exit %d", rc);
}

static void expire_rejects_bad_arguments(void **state) {
  (void)state;
  sl_store *s = store_opts(0, 0);
  assert_int_equal(sl_store_expire(s, -1, 64), SL_ETIME);
  assert_int_equal(sl_store_expire(s, SL_TIME_MAX_NS, 64), SL_ETIME);
  assert_int_equal(sl_store_expire(s, SL_TIME_MAX_NS - 1, 64), 0);
  assert_int_equal(sl_store_expire(s, 0, 64), 0);
  assert_int_equal(sl_store_expire(NULL, T0, 64), SL_EINVAL);
  sl_store_free(s);
}

/* ---- the memory cap ---- */

/*
 * Floods `n` unique 8-byte keys (never fresh during the flood) into a store
 * capped at `cap` and checks the cap, the error-free path and the counters.
 */
static void flood_short_keys(size_t cap, uint32_t n) {
  sl_store *s = store_opts(cap, 0);
  sl_limiter *lim = limiter_of(s, "token_bucket:10/h");
  uint64_t seed = 42;
  for (uint32_t i = 0; i < n; i++) {
    uint64_t k = splitmix64(&seed);
    sl_decision d;
    int rc = sl_limiter_take(lim, &k, sizeof k, 1, T0 + i, &d);
    if (rc) fail_msg("take #%u: %s", i, sl_strerror(rc));
    assert_true(d.allowed);
    if (i % 1024 == 0) {
      sl_store_stats st = stats_of(s);
      if (st.bytes > cap) fail_msg("bytes %llu > cap %zu after %u keys",
                                   (unsigned long long)st.bytes, cap, i);
    }
  }
  sl_store_stats st = stats_of(s);
  assert_true(st.bytes <= cap);
  assert_true(st.evictions > 0);
  assert_true(st.keys <= cap / 36);     /* a key costs at least 36 bytes */
  assert_true(st.keys >= cap / 200);    /* and the store stays useful */
  /* Nothing was fresh: every insert is either held or was evicted. */
  assert_int_equal(st.keys + st.evictions + st.expirations, n);
  assert_int_equal(st.expirations, 0);
  sl_limiter_free(lim);
  sl_store_free(s);
}

static void cap_holds_under_unique_key_flood_1mib(void **state) {
  (void)state;
  flood_short_keys((size_t)1 << 20, 300000);
}

static void cap_holds_under_unique_key_flood_256kib(void **state) {
  (void)state;
  flood_short_keys((size_t)256 << 10, 300000);
}

/*
 * A store filled to its cap by keys with logs and long keys (what a flood
 * of sliding_log keys leaves) still makes new limiters: keys never take
 * the room kept for them. Before, every new limiter failed with
 * SL_ENOMEM once the flood had taken the cap.
 */
static void new_limiters_find_room_in_a_full_store(void **state) {
  (void)state;
  size_t cap = (size_t)1 << 20;
  sl_store *s = store_opts(cap, 0);
  sl_limiter *lim = limiter_of(s, "sliding_log:100/h");
  char key[64];
  for (int i = 0; i < 100000; i++) {
    int n = snprintf(key, sizeof key, "a-rather-long-flood-key-%08d", i);
    sl_decision d;
    int rc = sl_limiter_take(lim, key, (size_t)n, 1, T0 + i, &d);
    if (rc && rc != SL_ENOMEM) fail_msg("take #%d: %s", i, sl_strerror(rc));
  }
  sl_store_stats st = stats_of(s);
  assert_true(st.evictions > 0);
  assert_true(st.bytes > cap / 32 * 30); /* the keys' part is full */
  sl_limiter *more[200];
  for (int i = 0; i < 200; i++) {
    sl_policy p;
    char spec[40], err[128];
    snprintf(spec, sizeof spec, "fixed_window:%d/s", i + 1);
    assert_int_equal(sl_policy_parse(spec, &p, err, sizeof err), 0);
    int rc = sl_limiter_new(s, &p, &more[i]);
    if (rc) fail_msg("limiter #%d in a full store: %s", i, sl_strerror(rc));
    assert_true(take(more[i], "new-key", 1, T0 + 200000).allowed);
  }
  assert_true(stats_of(s).bytes <= cap);
  for (int i = 0; i < 200; i++) sl_limiter_free(more[i]);
  sl_limiter_free(lim);
  sl_store_free(s);
}

/* limiter_free_many: the limiters of two stores, NULLs among them, freed
   together: every key of theirs gone, their ids free, the others' kept. */
static void limiters_freed_together_drop_their_keys_only(void **state) {
  (void)state;
  sl_store *a = store_opts((size_t)1 << 20, 0), *b = store_opts((size_t)1 << 20, 0);
  sl_limiter *lims[7] = {limiter_of(a, "fixed_window:5/h"), NULL,
                         limiter_of(b, "gcra:5/h"), limiter_of(a, "sliding_log:5/h"),
                         limiter_of(b, "token_bucket:5/h"), NULL,
                         limiter_of(a, "leaky_bucket:5/h")};
  sl_limiter *kept = limiter_of(a, "fixed_window:7/h");
  char key[16];
  for (int k = 0; k < 50; k++) {
    snprintf(key, sizeof key, "k%d", k);
    for (int i = 0; i < 7; i++)
      if (lims[i]) take(lims[i], key, 1, T0);
    take(kept, key, 1, T0);
  }
  assert_int_equal(stats_of(a).keys, 200);
  assert_int_equal(stats_of(b).keys, 100);
  limiter_free_many(lims, 7);
  assert_int_equal(stats_of(a).keys, 50);
  assert_int_equal(stats_of(a).limiters, 1);
  assert_int_equal(stats_of(b).keys, 0);
  assert_int_equal(stats_of(b).limiters, 0);
  assert_int_equal(take(kept, "k1", 0, T0).remaining, 6);
  sl_limiter_free(kept);
  sl_store_free(a);
  sl_store_free(b);
}

static void eviction_prefers_entries_closest_to_fresh(void **state) {
  (void)state;
  sl_store *s = store_opts((size_t)256 << 10, 0);
  sl_limiter *heavy = limiter_of(s, "token_bucket:100/h");
  sl_limiter *light = limiter_of(s, "gcra:1000/s");
  char key[32];
  for (int i = 0; i < 16; i++) {
    snprintf(key, sizeof key, "heavy-%d", i);
    assert_int_equal(take(heavy, key, 90, T0).remaining, 10);
  }
  /* Light keys are fresh again 1 ms after their request; the clock stays
     at T0, so they are live when evicted. */
  uint64_t seed = 7;
  for (int i = 0; i < 200000; i++) {
    uint64_t k = splitmix64(&seed);
    take_bin(light, &k, sizeof k, 1, T0);
  }
  assert_true(stats_of(s).evictions > 100000);
  for (int i = 0; i < 16; i++) {
    snprintf(key, sizeof key, "heavy-%d", i);
    sl_decision d = peek(heavy, key, T0);
    if (d.remaining != 10)
      fail_msg("heavy key %s was evicted (remaining %lld)", key,
               (long long)d.remaining);
  }
  sl_limiter_free(heavy);
  sl_limiter_free(light);
  sl_store_free(s);
}

static void eviction_counts_dropped_fresh_entries_as_expirations(void **state) {
  (void)state;
  /* Keys that are already fresh when room is needed are expirations, not
     evictions. */
  sl_store *s = store_opts((size_t)256 << 10, 0);
  sl_limiter *lim = limiter_of(s, "gcra:1000/s");
  uint64_t seed = 9;
  for (int i = 0; i < 100000; i++) {
    uint64_t k = splitmix64(&seed);
    /* Each key is fresh 1 ms after its take; time moves 1.001 s per key,
       so every earlier key has been fresh longer than the 1 s grace. */
    take_bin(lim, &k, sizeof k, 1, T0 + MS((int64_t)i * 1001));
  }
  sl_store_stats st = stats_of(s);
  assert_true(st.bytes <= st.max_memory);
  assert_int_equal(st.evictions, 0);
  assert_int_equal(st.keys + st.expirations, 100000);
  sl_limiter_free(lim);
  sl_store_free(s);
}

/*
 * When the cap binds and a sliding_log key needs a log block, eviction may
 * make room; but a request that still ends in SL_ENOMEM must not have
 * dropped live keys on the way (those keys' owners get fresh quota, and
 * nothing was gained). Entries without blocks of their own free no budget.
 */
static void enomem_at_the_cap_evicts_nothing(void **state) {
  (void)state;
  size_t cap = (size_t)256 << 10;
  sl_store *s = store_opts(cap, 0);
  sl_limiter *g = limiter_of(s, "token_bucket:10/h");
  sl_limiter *l = limiter_of(s, "sliding_log:10/h");
  /* Short keys until the tables have taken the whole budget. */
  for (uint64_t i = 0; i < 100000; i++) take_bin(g, &i, sizeof i, 1, T0);
  int enomem = 0, lossy = 0;
  uint64_t lost = 0;
  for (int i = 0; i < 300; i++) {
    char key[16];
    snprintf(key, sizeof key, "log%d", i);
    sl_store_stats before = stats_of(s);
    sl_decision d;
    int rc = sl_limiter_take(l, key, strlen(key), 1, T0, &d);
    if (rc == 0) continue;
    assert_int_equal(rc, SL_ENOMEM);
    enomem++;
    sl_store_stats after = stats_of(s);
    if (after.keys != before.keys || after.evictions != before.evictions) {
      lossy++;
      lost += before.keys - after.keys;
    }
  }
  assert_true(stats_of(s).bytes <= cap);
  sl_limiter_free(g);
  sl_limiter_free(l);
  sl_store_free(s);
  if (lossy)
    fail_msg("%d of %d SL_ENOMEM results evicted live keys (%llu in all)",
             lossy, enomem, (unsigned long long)lost);
}

/* ---- keys ---- */

static void long_keys_are_distinct_by_every_byte(void **state) {
  (void)state;
  sl_store *s = store_opts(0, 0);
  sl_limiter *lim = limiter_of(s, "token_bucket:3/h");
  static uint8_t key[SL_KEY_MAX];
  size_t lens[] = {17, 31, 100, 255, 256, 1023, 1024};
  for (size_t li = 0; li < sizeof lens / sizeof *lens; li++) {
    size_t len = lens[li];
    for (size_t i = 0; i < len; i++) key[i] = (uint8_t)(i * 31 + li);
    assert_int_equal(take_bin(lim, key, len, 1, T0).remaining, 2);
    for (size_t p = 0; p < len; p++) {
      key[p] ^= 0x01;
      assert_int_equal(peek_bin(lim, key, len, T0).remaining, 3);
      key[p] ^= 0x01;
    }
    /* Prefixes (shorter keys) are other keys too. */
    assert_int_equal(peek_bin(lim, key, len - 1, T0).remaining, 3);
    assert_int_equal(peek_bin(lim, key, len, T0).remaining, 2);
    assert_int_equal(take_bin(lim, key, len, 1, T0).remaining, 1);
  }
  assert_int_equal(stats_of(s).keys, sizeof lens / sizeof *lens);
  sl_limiter_free(lim);
  sl_store_free(s);
}

static void key_length_boundary_16_17_are_distinct(void **state) {
  (void)state;
  sl_store *s = store_opts(0, 0);
  sl_limiter *lim = limiter_of(s, "fixed_window:5/h");
  const char *k17 = "abcdefghijklmnopq";
  take_bin(lim, k17, 16, 1, T0);
  take_bin(lim, k17, 17, 2, T0);
  take_bin(lim, k17, 15, 3, T0);
  assert_int_equal(peek_bin(lim, k17, 16, T0).remaining, 4);
  assert_int_equal(peek_bin(lim, k17, 17, T0).remaining, 3);
  assert_int_equal(peek_bin(lim, k17, 15, T0).remaining, 2);
  assert_int_equal(stats_of(s).keys, 3);
  sl_limiter_free(lim);
  sl_store_free(s);
}

static void long_keys_count_their_bytes(void **state) {
  (void)state;
  sl_store *s = store_opts(0, 0);
  sl_limiter *lim = limiter_of(s, "fixed_window:5/h");
  static uint8_t key[SL_KEY_MAX];
  memset(key, 'x', sizeof key);
  uint64_t before = stats_of(s).bytes;
  /* A short key lives in the table: no new memory. */
  take_bin(lim, key, 16, 1, T0);
  assert_int_equal(stats_of(s).bytes, before);
  take_bin(lim, key, SL_KEY_MAX, 1, T0);
  uint64_t after = stats_of(s).bytes;
  assert_true(after >= before + SL_KEY_MAX);
  assert_true(after <= before + SL_KEY_MAX + 128);
  /* Forgetting the key gives its bytes back. */
  assert_int_equal(sl_limiter_reset(lim, key, SL_KEY_MAX), 1);
  assert_int_equal(stats_of(s).bytes, before);
  sl_limiter_free(lim);
  sl_store_free(s);
}

static void key_longer_than_max_is_rejected(void **state) {
  (void)state;
  sl_store *s = store_opts(0, 0);
  sl_limiter *lim = limiter_of(s, "fixed_window:5/h");
  static uint8_t key[SL_KEY_MAX + 1];
  memset(key, 'y', sizeof key);
  sl_decision d;
  assert_int_equal(sl_limiter_take(lim, key, SL_KEY_MAX + 1, 1, T0, &d),
                   SL_EKEY);
  assert_int_equal(sl_limiter_take(lim, key, SL_KEY_MAX + 1, 0, T0, &d),
                   SL_EKEY);
  assert_int_equal(sl_limiter_take(lim, key, SIZE_MAX, 1, T0, &d), SL_EKEY);
  assert_int_equal(stats_of(s).keys, 0);
  assert_int_equal(sl_limiter_take(lim, key, SL_KEY_MAX, 1, T0, &d), 0);
  assert_int_equal(stats_of(s).keys, 1);
  sl_limiter_free(lim);
  sl_store_free(s);
}

static void empty_key_is_a_key(void **state) {
  (void)state;
  sl_store *s = store_opts(0, 0);
  sl_limiter *lim = limiter_of(s, "fixed_window:5/h");
  assert_int_equal(take_bin(lim, "", 0, 2, T0).remaining, 3);
  assert_int_equal(stats_of(s).keys, 1);
  assert_int_equal(take_bin(lim, "x", 0, 1, T0).remaining, 2);
  /* "\0" (one byte) is another key. */
  assert_int_equal(peek_bin(lim, "\0", 1, T0).remaining, 5);
  assert_int_equal(stats_of(s).keys, 1);
  assert_int_equal(sl_limiter_reset(lim, "", 0), 1);
  assert_int_equal(stats_of(s).keys, 0);
  sl_limiter_free(lim);
  sl_store_free(s);
}

/*
 * sl_limiter_take accepts key == NULL with key_len == 0 (only a NULL key
 * with a length is SL_EINVAL): it is the empty key. Listed last: under
 * UBSan a null pointer handed to memcpy/memcmp aborts the binary.
 */
static void null_key_with_zero_length_is_the_empty_key(void **state) {
  (void)state;
  sl_store *s = store_opts(0, 0);
  sl_limiter *lim = limiter_of(s, "fixed_window:5/h");
  /* New key through NULL, then the same key through NULL and "". */
  assert_int_equal(take_bin(lim, NULL, 0, 2, T0).remaining, 3);
  assert_int_equal(take_bin(lim, NULL, 0, 1, T0).remaining, 2);
  assert_int_equal(peek_bin(lim, "", 0, T0).remaining, 2);
  assert_int_equal(stats_of(s).keys, 1);
  assert_int_equal(sl_limiter_reset(lim, NULL, 0), 1);
  assert_int_equal(stats_of(s).keys, 0);
  sl_limiter_free(lim);
  sl_store_free(s);
}

static void binary_keys_with_nul_bytes_are_distinct(void **state) {
  (void)state;
  sl_store *s = store_opts(0, 0);
  sl_limiter *lim = limiter_of(s, "fixed_window:9/h");
  take_bin(lim, "a\0b", 3, 1, T0);
  take_bin(lim, "a\0c", 3, 2, T0);
  take_bin(lim, "a", 1, 3, T0);
  take_bin(lim, "a\0", 2, 4, T0);
  assert_int_equal(peek_bin(lim, "a\0b", 3, T0).remaining, 8);
  assert_int_equal(peek_bin(lim, "a\0c", 3, T0).remaining, 7);
  assert_int_equal(peek_bin(lim, "a", 1, T0).remaining, 6);
  assert_int_equal(peek_bin(lim, "a\0", 2, T0).remaining, 5);
  assert_int_equal(peek_bin(lim, "a\0d", 3, T0).remaining, 9);
  /* Long keys of NUL bytes differing only in the last byte. */
  uint8_t z1[40] = {0}, z2[40] = {0};
  z2[39] = 1;
  take_bin(lim, z1, sizeof z1, 1, T0);
  assert_int_equal(peek_bin(lim, z1, sizeof z1, T0).remaining, 8);
  assert_int_equal(peek_bin(lim, z2, sizeof z2, T0).remaining, 9);
  assert_int_equal(peek_bin(lim, z1, 39, T0).remaining, 9);
  assert_int_equal(stats_of(s).keys, 5);
  sl_limiter_free(lim);
  sl_store_free(s);
}

/* ---- recovering from floods ---- */

/* How many requests one sliding_log key logs before SL_ENOMEM or its
   limit (at most 100000). */
static int log_capacity(sl_limiter *lim, const char *key, int64_t t0) {
  int n = 0;
  for (; n < 100000; n++) {
    sl_decision d;
    int rc = sl_limiter_take(lim, key, strlen(key), 1, t0 + n, &d);
    if (rc == SL_ENOMEM) break;
    assert_int_equal(rc, 0);
    if (!d.allowed) break;
  }
  return n;
}

static void tables_shrink_back_after_a_flood_expires(void **state) {
  (void)state;
  /* A flood grows the tables to their share of the cap; once its keys
     have expired, the tables shrink and logs get their memory back. */
  sl_store *s = store_opts((size_t)1 << 20, 0);
  sl_limiter *flood = limiter_of(s, "fixed_window:5/s");
  sl_limiter *log = limiter_of(s, "sliding_log:100000/h");
  int fresh_store = log_capacity(log, "before", T0);
  assert_true(sl_limiter_reset(log, "before", 6) == 1);
  for (int i = 0; i < 200000; i++) {
    char key[24];
    snprintf(key, sizeof key, "f%d", i);
    take(flood, key, 1, T0);
  }
  assert_true(sl_store_expire(s, T0 + SEC(10), SIZE_MAX) > 0);
  assert_int_equal(stats_of(s).keys, 0);
  int after = log_capacity(log, "after", T0 + SEC(10));
  assert_true(after * 10 >= fresh_store * 9); /* within 10% of a new store */
  sl_limiter_free(flood);
  sl_limiter_free(log);
  sl_store_free(s);
}

static void expected_keys_leaves_room_for_limiters_and_logs(void **state) {
  (void)state;
  sl_store_options o;
  sl_store_options_init(&o);
  o.max_memory = (size_t)1 << 20;
  o.expected_keys = 1000000; /* far more than 1 MiB can hold */
  sl_store *s = NULL;
  assert_int_equal(sl_store_new(&o, &s), 0);
  assert_true(stats_of(s).bytes <= (size_t)1 << 20);
  sl_limiter *lim = limiter_of(s, "sliding_log:1000/h");
  assert_true(log_capacity(lim, "k", T0) == 1000); /* the whole log fits */
  sl_limiter_free(lim);
  sl_store_free(s);
}

static void expiry_waits_out_its_grace(void **state) {
  (void)state;
  /* A sweep at a later time must not drop a state that a request stamped
     a little earlier (another thread's clock) still depends on. */
  sl_store *s = store_opts(0, 0);
  sl_limiter *lim = limiter_of(s, "token_bucket:1/s");
  assert_true(take(lim, "k", 1, T0).allowed);
  assert_int_equal(sl_store_expire(s, T0 + SEC(1) + 1, SIZE_MAX), 0);
  assert_false(take(lim, "k", 1, T0 + MS(500)).allowed);
  /* Past the grace the state goes (it is fresh, so nothing changes). */
  assert_int_equal(sl_store_expire(s, T0 + SEC(2) + 1, SIZE_MAX), 1);
  sl_limiter_free(lim);
  sl_store_free(s);
}

static void byte_pressure_evicts_nothing_when_it_cannot_make_room(void **state) {
  (void)state;
  /* A log that cannot fit even after dropping every long key near it must
     fail at once, not drop those keys first. */
  sl_store *s = store_opts((size_t)256 << 10, 1);
  sl_limiter *keys = limiter_of(s, "fixed_window:5/h");
  sl_limiter *log = limiter_of(s, "sliding_log:1000000/h");
  char key[64];
  for (int i = 0; i < 20; i++) {
    snprintf(key, sizeof key, "a-long-key-of-more-than-16-bytes-%d", i);
    take(keys, key, 1, T0);
  }
  uint64_t before = stats_of(s).evictions;
  int n = log_capacity(log, "big", T0);
  assert_true(n > 0 && n < 1000000);
  assert_int_equal(stats_of(s).evictions - before, 0);
  for (int i = 0; i < 20; i++) {
    snprintf(key, sizeof key, "a-long-key-of-more-than-16-bytes-%d", i);
    assert_int_equal(peek(keys, key, T0).remaining, 4);
  }
  sl_limiter_free(keys);
  sl_limiter_free(log);
  sl_store_free(s);
}

/* ---- sliding_log memory ---- */

static void grow_log(sl_limiter *lim, const char *key, int n) {
  for (int i = 0; i < n; i++) /* n distinct instants, one entry each */
    assert_true(take(lim, key, 1, T0 + (int64_t)i * 1000).allowed);
}

static void sliding_log_memory_grows_and_is_freed_on_lazy_expiry(void **state) {
  (void)state;
  sl_store *s = store_opts(0, 0);
  sl_limiter *lim = limiter_of(s, "sliding_log:1000/s");
  uint64_t base = stats_of(s).bytes;
  grow_log(lim, "k", 500);
  uint64_t grown = stats_of(s).bytes;
  assert_true(grown >= base + 500 * 12);
  assert_int_equal(peek(lim, "k", T0 + MS(500)).remaining, 500);
  /* Once the last entry has left the window (and the 1 s expiry grace has
     passed), a peek drops key and log. */
  assert_int_equal(peek(lim, "k", T0 + SEC(3)).remaining, 1000);
  assert_int_equal(stats_of(s).keys, 0);
  assert_int_equal(stats_of(s).bytes, base);
  sl_limiter_free(lim);
  sl_store_free(s);
}

static void sliding_log_memory_is_freed_by_active_expiry(void **state) {
  (void)state;
  sl_store *s = store_opts(0, 0);
  sl_limiter *lim = limiter_of(s, "sliding_log:1000/s");
  uint64_t base = stats_of(s).bytes;
  char key[16];
  for (int k = 0; k < 20; k++) {
    snprintf(key, sizeof key, "k%d", k);
    grow_log(lim, key, 100 + k);
  }
  assert_true(stats_of(s).bytes > base + 20 * 100 * 12);
  assert_int_equal(sl_store_expire(s, T0 + SEC(3), (size_t)1 << 20), 20);
  assert_int_equal(stats_of(s).bytes, base);
  sl_limiter_free(lim);
  sl_store_free(s);
}

static void sliding_log_memory_is_freed_by_limiter_free(void **state) {
  (void)state;
  sl_store *s = store_opts(0, 0);
  sl_limiter *keep = limiter_of(s, "gcra:10/s");
  take(keep, "other", 1, T0);
  uint64_t base = stats_of(s).bytes;
  sl_limiter *lim = limiter_of(s, "sliding_log:1000/h");
  char key[16];
  for (int k = 0; k < 10; k++) {
    snprintf(key, sizeof key, "k%d", k);
    grow_log(lim, key, 300);
  }
  assert_true(stats_of(s).bytes > base + 10 * 300 * 12);
  sl_limiter_free(lim);
  assert_int_equal(stats_of(s).bytes, base);
  assert_int_equal(stats_of(s).keys, 1);
  assert_int_equal(peek(keep, "other", T0).remaining, 9);
  sl_limiter_free(keep);
  sl_store_free(s);
}

static void sliding_log_shrinks_when_traffic_drops(void **state) {
  (void)state;
  sl_store *s = store_opts(0, 0);
  sl_limiter *lim = limiter_of(s, "sliding_log:1000/s");
  uint64_t base = stats_of(s).bytes;
  grow_log(lim, "k", 512);
  uint64_t big = stats_of(s).bytes;
  /* Just over a second later only the last 11 entries are live: the block
     halves on each charge until it fits them. */
  for (int i = 0; i < 10; i++)
    take(lim, "k", 1, T0 + SEC(1) + 500 * 1000 + i);
  assert_int_equal(stats_of(s).keys, 1);
  uint64_t small = stats_of(s).bytes;
  assert_true(small < big);
  assert_true(small < base + 1024);
  sl_limiter_free(lim);
  sl_store_free(s);
}

static void sliding_log_flood_respects_cap(void **state) {
  (void)state;
  size_t cap = (size_t)256 << 10;
  sl_store *s = store_opts(cap, 0);
  sl_limiter *lim = limiter_of(s, "sliding_log:100000/h");
  uint64_t seed = 11;
  int enomem = 0;
  for (int i = 0; i < 20000; i++) {
    char key[16];
    snprintf(key, sizeof key, "k%d", (int)(splitmix64(&seed) % 16));
    int64_t now = T0 + (int64_t)i * 1000;
    sl_decision before = peek(lim, key, now), d;
    int rc = sl_limiter_take(lim, key, strlen(key), 1, now, &d);
    if (rc == SL_ENOMEM) {
      /* The log could not grow: nothing charged. */
      enomem++;
      assert_int_equal(peek(lim, key, now).remaining, before.remaining);
    } else {
      assert_int_equal(rc, 0);
      assert_int_equal(d.remaining, before.remaining - 1);
    }
    if (i % 64 == 0) assert_true(stats_of(s).bytes <= cap);
  }
  assert_true(stats_of(s).bytes <= cap);
  assert_true(enomem > 0); /* the cap did bind */
  sl_limiter_free(lim);
  sl_store_free(s);
}

static void long_key_flood_respects_cap(void **state) {
  (void)state;
  size_t cap = (size_t)1 << 20;
  sl_store *s = store_opts(cap, 0);
  sl_limiter *lim = limiter_of(s, "token_bucket:10/h");
  static uint8_t key[SL_KEY_MAX];
  uint64_t seed = 5;
  int enomem = 0;
  for (int i = 0; i < 30000; i++) {
    size_t len = 17 + (size_t)(splitmix64(&seed) % (SL_KEY_MAX - 16));
    for (size_t j = 0; j < len; j += 8) {
      uint64_t r = splitmix64(&seed);
      memcpy(key + j, &r, len - j < 8 ? len - j : 8);
    }
    sl_decision d;
    int rc = sl_limiter_take(lim, key, len, 1, T0 + i, &d);
    if (rc == SL_ENOMEM)
      enomem++;
    else
      assert_int_equal(rc, 0);
    if (i % 256 == 0) {
      sl_store_stats st = stats_of(s);
      if (st.bytes > cap) fail_msg("bytes %llu > cap after %d long keys",
                                   (unsigned long long)st.bytes, i);
    }
  }
  sl_store_stats st = stats_of(s);
  assert_true(st.bytes <= cap);
  assert_true(st.evictions > 0);
  assert_int_equal(enomem, 0); /* eviction always made room */
  sl_limiter_free(lim);
  sl_store_free(s);
}

/* ---- the allocator hook ---- */

/*
 * A hook that keeps a 16-byte header with each block's size, so it can
 * check the old size the store passes on free, counts outstanding bytes,
 * and fails the fail_at-th allocation (1-based; 0 = never), or every one
 * from fail_at on when sticky.
 */
typedef struct alloc_ctx {
  long calls, fail_at, failures;
  int sticky;
  long mismatches;
  int64_t outstanding, blocks;
} alloc_ctx;

#define HDR 16

static void *test_alloc(void *ud, void *ptr, size_t old_size,
                        size_t new_size) {
  alloc_ctx *c = ud;
  if (ptr) {
    uint8_t *base = (uint8_t *)ptr - HDR;
    size_t had;
    memcpy(&had, base, sizeof had);
    if (had != old_size) c->mismatches++;
    if (new_size == 0) {
      c->outstanding -= (int64_t)had;
      c->blocks--;
      free(base);
      return NULL;
    }
  } else if (new_size == 0) {
    return NULL;
  }
  c->calls++;
  if (c->fail_at &&
      (c->calls == c->fail_at || (c->sticky && c->calls > c->fail_at))) {
    c->failures++;
    return NULL;
  }
  uint8_t *base = ptr ? realloc((uint8_t *)ptr - HDR, new_size + HDR)
                      : malloc(new_size + HDR);
  if (!base) return NULL;
  if (ptr) {
    c->outstanding -= (int64_t)old_size;
    c->blocks--;
  }
  memcpy(base, &new_size, sizeof new_size);
  c->outstanding += (int64_t)new_size;
  c->blocks++;
  return base + HDR;
}

typedef struct op_result {
  int ok, enomem;
} op_result;

/* One take; on failure it must be SL_ENOMEM and the key unchanged. */
static void checked_take(sl_limiter *lim, const void *key, size_t len,
                         int64_t now, op_result *res) {
  sl_decision before, d, after;
  assert_int_equal(sl_limiter_take(lim, key, len, 0, now, &before), 0);
  int rc = sl_limiter_take(lim, key, len, 1, now, &d);
  if (rc == 0) {
    res->ok++;
    assert_true(d.allowed);
    assert_int_equal(d.remaining, before.remaining - 1);
    return;
  }
  if (rc != SL_ENOMEM) fail_msg("take: %s, want ENOMEM", sl_err_name(rc));
  res->enomem++;
  assert_int_equal(sl_limiter_take(lim, key, len, 0, now, &after), 0);
  assert_int_equal(after.remaining, before.remaining);
  assert_int_equal(after.reset_ns, before.reset_ns);
  assert_int_equal(after.retry_after_ns, before.retry_after_ns);
}

/*
 * Store creation, limiter creation and a workload that allocates in every
 * way the store does: table growth (new short keys), long keys,
 * sliding_log growth (short and long key). Returns 1 if the store and
 * limiters were created.
 */
static int run_alloc_workload(alloc_ctx *c, op_result *res) {
  sl_store_options o;
  sl_store_options_init(&o);
  o.shards = 2;
  o.hash_key = test_hash_key();
  o.alloc = test_alloc;
  o.alloc_ud = c;
  sl_store *s = NULL;
  int rc = sl_store_new(&o, &s);
  if (rc) {
    assert_int_equal(rc, SL_ENOMEM);
    assert_null(s);
    return 0;
  }
  sl_policy pg = policy_of("gcra:100/h"), pl = policy_of("sliding_log:1000/h");
  sl_limiter *g = NULL, *l = NULL;
  rc = sl_limiter_new(s, &pg, &g);
  if (rc == 0) {
    rc = sl_limiter_new(s, &pl, &l);
    if (rc) sl_limiter_free(g);
  }
  if (rc) {
    assert_int_equal(rc, SL_ENOMEM);
    sl_store_free(s);
    return 0;
  }
  char key[32];
  for (int i = 0; i < 120; i++) {
    snprintf(key, sizeof key, "s%d", i);
    checked_take(g, key, strlen(key), T0, res);
  }
  uint8_t big[200];
  for (int i = 0; i < 12; i++) {
    memset(big, 'a' + i, sizeof big);
    checked_take(g, big, 17 + (size_t)i * 15, T0, res);
  }
  for (int i = 0; i < 40; i++) {
    checked_take(l, "log", 3, T0 + MS(i), res);
    checked_take(l, big, 150, T0 + MS(i), res);
  }
  /* Existing keys again, after all of the above. */
  checked_take(g, "s0", 2, T0, res);
  checked_take(g, big, 17, T0, res);
  sl_store_stats st = stats_of(s);
  assert_true(st.bytes <= st.max_memory);
  sl_limiter_free(g);
  sl_limiter_free(l);
  sl_store_free(s);
  return 1;
}

static void allocator_sees_matching_sizes_and_nothing_outstanding(
    void **state) {
  (void)state;
  alloc_ctx c = {0};
  op_result res = {0};
  assert_true(run_alloc_workload(&c, &res));
  assert_int_equal(res.enomem, 0);
  assert_true(c.calls > 10);
  assert_int_equal(c.mismatches, 0);
  assert_int_equal(c.outstanding, 0);
  assert_int_equal(c.blocks, 0);
}

static void allocation_failures_return_enomem_and_keep_state(void **state,
                                                             int sticky) {
  (void)state;
  alloc_ctx clean = {0};
  op_result r0 = {0};
  assert_true(run_alloc_workload(&clean, &r0));
  long k = clean.calls;
  int surfaced = 0;
  for (long n = 1; n <= k + 1; n++) {
    alloc_ctx c = {0};
    c.fail_at = n;
    c.sticky = sticky;
    op_result res = {0};
    run_alloc_workload(&c, &res);
    if (n <= k) assert_true(c.failures >= 1);
    if (!sticky) assert_true(c.failures <= 1);
    if (res.enomem) surfaced++;
    if (c.mismatches || c.outstanding || c.blocks)
      fail_msg("fail_at %ld: %ld size mismatches, %lld bytes in %lld blocks "
               "outstanding",
               n, c.mismatches, (long long)c.outstanding,
               (long long)c.blocks);
  }
  /* Persistent failure reaches the callers: the ENOMEM paths were run. */
  if (sticky) assert_true(surfaced > k / 2);
}

static void one_allocation_failure_returns_enomem_and_keeps_state(
    void **state) {
  allocation_failures_return_enomem_and_keep_state(state, 0);
}

static void persistent_allocation_failure_returns_enomem_and_keeps_state(
    void **state) {
  allocation_failures_return_enomem_and_keep_state(state, 1);
}

/*
 * The header: "Allocation failure returns SL_ENOMEM and leaves every
 * earlier state intact." With the store far below its cap, an allocator
 * that fails (once, or from then on) must not cost other keys their state.
 */
static void allocator_failure_keeps_other_keys(int sticky) {
  alloc_ctx c = {0};
  sl_store_options o;
  sl_store_options_init(&o);
  o.shards = 1;
  o.hash_key = test_hash_key();
  o.alloc = test_alloc;
  o.alloc_ud = &c;
  sl_store *s = NULL;
  assert_int_equal(sl_store_new(&o, &s), 0);
  sl_limiter *lim = limiter_of(s, "fixed_window:10/h");
  char key[32];
  for (int i = 0; i < 100; i++) {
    snprintf(key, sizeof key, "k%d", i);
    take(lim, key, 5, T0);
  }
  assert_int_equal(stats_of(s).keys, 100);
  /* The next allocation fails (sticky: and every one after it). */
  c.fail_at = c.calls + 1;
  c.sticky = sticky;
  uint8_t big[100];
  memset(big, 'b', sizeof big);
  sl_decision d;
  int rc = sl_limiter_take(lim, big, sizeof big, 1, T0, &d);
  if (sticky)
    assert_int_equal(rc, SL_ENOMEM);
  else
    assert_true(rc == 0 || rc == SL_ENOMEM);
  assert_true(c.failures >= 1);
  sl_store_stats st = stats_of(s);
  int changed = 0;
  for (int i = 0; i < 100; i++) {
    snprintf(key, sizeof key, "k%d", i);
    changed += peek(lim, key, T0).remaining != 5;
  }
  c.fail_at = 0;
  sl_limiter_free(lim);
  sl_store_free(s);
  assert_int_equal(c.outstanding, 0);
  /* Checked after freeing, so a failure leaks nothing. */
  assert_int_equal(st.evictions, 0);
  assert_int_equal(st.keys, 100);
  assert_int_equal(changed, 0);
}

static void persistent_allocator_failure_leaves_other_keys_intact(
    void **state) {
  (void)state;
  allocator_failure_keeps_other_keys(1);
}

static void one_allocator_failure_leaves_other_keys_intact(void **state) {
  (void)state;
  allocator_failure_keeps_other_keys(0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(store_new_accepts_null_options),
      cmocka_unit_test(store_new_rejects_shards_not_power_of_two),
      cmocka_unit_test(store_new_rejects_max_memory_too_small),
      cmocka_unit_test(store_new_rejects_null_out),
      cmocka_unit_test(store_new_survives_absurd_expected_keys),
      cmocka_unit_test(store_defaults_are_reported_in_stats),
      cmocka_unit_test(expected_keys_presizes_without_passing_cap),
      cmocka_unit_test(stats_count_keys_and_limiters),
      cmocka_unit_test(denied_request_inserts_no_key),
      cmocka_unit_test(lazy_expiry_on_take_starts_the_key_afresh),
      cmocka_unit_test(lazy_expiry_on_peek_drops_key),
      cmocka_unit_test(expire_drops_all_fresh_keys_given_budget),
      cmocka_unit_test(expire_work_is_bounded_per_call),
      cmocka_unit_test(expire_keeps_keys_not_yet_fresh),
      cmocka_unit_test(expire_with_size_max_budget_returns),
      cmocka_unit_test(expire_rejects_bad_arguments),
      cmocka_unit_test(cap_holds_under_unique_key_flood_1mib),
      cmocka_unit_test(cap_holds_under_unique_key_flood_256kib),
      cmocka_unit_test(new_limiters_find_room_in_a_full_store),
      cmocka_unit_test(limiters_freed_together_drop_their_keys_only),
      cmocka_unit_test(eviction_prefers_entries_closest_to_fresh),
      cmocka_unit_test(eviction_counts_dropped_fresh_entries_as_expirations),
      cmocka_unit_test(enomem_at_the_cap_evicts_nothing),
      cmocka_unit_test(tables_shrink_back_after_a_flood_expires),
      cmocka_unit_test(expected_keys_leaves_room_for_limiters_and_logs),
      cmocka_unit_test(expiry_waits_out_its_grace),
      cmocka_unit_test(byte_pressure_evicts_nothing_when_it_cannot_make_room),
      cmocka_unit_test(long_keys_are_distinct_by_every_byte),
      cmocka_unit_test(key_length_boundary_16_17_are_distinct),
      cmocka_unit_test(long_keys_count_their_bytes),
      cmocka_unit_test(key_longer_than_max_is_rejected),
      cmocka_unit_test(empty_key_is_a_key),
      cmocka_unit_test(binary_keys_with_nul_bytes_are_distinct),
      cmocka_unit_test(sliding_log_memory_grows_and_is_freed_on_lazy_expiry),
      cmocka_unit_test(sliding_log_memory_is_freed_by_active_expiry),
      cmocka_unit_test(sliding_log_memory_is_freed_by_limiter_free),
      cmocka_unit_test(sliding_log_shrinks_when_traffic_drops),
      cmocka_unit_test(sliding_log_flood_respects_cap),
      cmocka_unit_test(long_key_flood_respects_cap),
      cmocka_unit_test(allocator_sees_matching_sizes_and_nothing_outstanding),
      cmocka_unit_test(one_allocation_failure_returns_enomem_and_keeps_state),
      cmocka_unit_test(
          persistent_allocation_failure_returns_enomem_and_keeps_state),
      cmocka_unit_test(persistent_allocator_failure_leaves_other_keys_intact),
      cmocka_unit_test(one_allocator_failure_leaves_other_keys_intact),
      cmocka_unit_test(null_key_with_zero_length_is_the_empty_key),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
