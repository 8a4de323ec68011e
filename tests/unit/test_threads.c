/*
 * test_threads.c — the store and limiters under concurrent use: exact
 * totals on contended keys for every algorithm, per-thread keys, mixed
 * traffic with expiry/stats/reset under a small memory cap, sl_take_all's
 * all-or-nothing across threads, take_batch from threads, and limiters
 * created and freed while others take. Also run under TSan.
 *
 * Worker threads never call cmocka asserts (they longjmp); they record
 * counts and errors, and the main thread asserts.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>

#include "helpers.h"

#define NTHREADS 4

/* Divides the iteration counts (-DSCALE=4 for a slow machine). The full
   counts take about 0.2 s plain and 2 s under TSan. */
#ifndef SCALE
#define SCALE 1
#endif

/* Starts n threads on fn(args[i]) behind a barrier, so they overlap. */
typedef struct tramp {
  void *(*fn)(void *);
  void *arg;
  pthread_barrier_t *start;
} tramp;

static void *trampoline(void *p) {
  tramp *t = p;
  pthread_barrier_wait(t->start);
  return t->fn(t->arg);
}

static void run_threads(int n, void *(*fn)(void *), void *args, size_t size) {
  pthread_t th[16];
  tramp tr[16];
  pthread_barrier_t start;
  assert_true(n <= 16);
  assert_int_equal(pthread_barrier_init(&start, NULL, (unsigned)n), 0);
  for (int i = 0; i < n; i++) {
    tr[i] = (tramp){fn, (char *)args + (size_t)i * size, &start};
    assert_int_equal(pthread_create(&th[i], NULL, trampoline, &tr[i]), 0);
  }
  for (int i = 0; i < n; i++) assert_int_equal(pthread_join(th[i], NULL), 0);
  pthread_barrier_destroy(&start);
}

/* ---- one contended key, every algorithm ---- */

#define QUOTA 1000
#define HAMMER_ITERS (20000 / SCALE)

typedef struct hammer_arg {
  sl_limiter *lim;
  const void *key;
  size_t key_len;
  int64_t now;
  long iters;
  long allowed, errors, bad_remaining;
  uint8_t seen[QUOTA]; /* remaining values reported by allowed takes */
} hammer_arg;

static void *hammer(void *p) {
  hammer_arg *a = p;
  for (long i = 0; i < a->iters; i++) {
    sl_decision d;
    int rc = sl_limiter_take(a->lim, a->key, a->key_len, 1, a->now, &d);
    if (rc) {
      a->errors++;
      continue;
    }
    if (!d.allowed) continue;
    a->allowed++;
    if (d.remaining < 0 || d.remaining >= QUOTA)
      a->bad_remaining++;
    else
      a->seen[d.remaining]++;
  }
  return NULL;
}

/*
 * NTHREADS threads take cost 1 on one key at a fixed instant (no refill):
 * exactly QUOTA pass, and each allowed take saw its own state (the
 * remaining figures are QUOTA-1 .. 0, each once).
 */
static void hammer_one_key(const char *spec, const char *key) {
  sl_store *s = store_opts(0, 0);
  sl_limiter *lim = limiter_of(s, spec);
  static hammer_arg args[NTHREADS];
  memset(args, 0, sizeof args);
  for (int t = 0; t < NTHREADS; t++) {
    args[t].lim = lim;
    args[t].key = key;
    args[t].key_len = strlen(key);
    args[t].now = T0 + SEC(1);
    args[t].iters = HAMMER_ITERS;
  }
  run_threads(NTHREADS, hammer, args, sizeof *args);
  long allowed = 0;
  for (int t = 0; t < NTHREADS; t++) {
    assert_int_equal(args[t].errors, 0);
    assert_int_equal(args[t].bad_remaining, 0);
    allowed += args[t].allowed;
  }
  assert_int_equal(allowed, QUOTA);
  for (int r = 0; r < QUOTA; r++) {
    int n = 0;
    for (int t = 0; t < NTHREADS; t++) n += args[t].seen[r];
    if (n != 1) fail_msg("remaining %d reported %d times", r, n);
  }
  assert_int_equal(take(lim, key, 0, T0 + SEC(1)).remaining, 0);
  assert_int_equal(stats_of(s).keys, 1);
  sl_limiter_free(lim);
  sl_store_free(s);
}

static void threads_on_one_key_get_exactly_the_quota_gcra(void **state) {
  (void)state;
  hammer_one_key("gcra:1000/h", "hot");
}
static void threads_on_one_key_get_exactly_the_quota_fixed_window(
    void **state) {
  (void)state;
  hammer_one_key("fixed_window:1000/h", "hot");
}
static void threads_on_one_key_get_exactly_the_quota_sliding_log(
    void **state) {
  (void)state;
  hammer_one_key("sliding_log:1000/h", "hot");
}
static void threads_on_one_key_get_exactly_the_quota_sliding_window(
    void **state) {
  (void)state;
  hammer_one_key("sliding_window:1000/h", "hot");
}
static void threads_on_one_key_get_exactly_the_quota_token_bucket(
    void **state) {
  (void)state;
  hammer_one_key("token_bucket:1000/h", "hot");
}
static void threads_on_one_key_get_exactly_the_quota_leaky_bucket(
    void **state) {
  (void)state;
  hammer_one_key("leaky_bucket:1000/h", "hot");
}
static void threads_on_one_long_key_get_exactly_the_quota(void **state) {
  (void)state;
  hammer_one_key("gcra:1000/h",
                 "a-key-well-over-sixteen-bytes-so-it-lives-in-its-own-block");
}

/* ---- each thread its own keys ---- */

#define OWN_KEYS 64
#define OWN_QUOTA 100
#define OWN_TRIES 150

typedef struct own_arg {
  sl_limiter *lim;
  int id;
  long allowed[OWN_KEYS];
  long errors;
} own_arg;

static void *own_keys(void *p) {
  own_arg *a = p;
  char key[32];
  for (int r = 0; r < OWN_TRIES; r++)
    for (int k = 0; k < OWN_KEYS; k++) {
      snprintf(key, sizeof key, "t%d-k%d", a->id, k);
      sl_decision d;
      if (sl_limiter_take(a->lim, key, strlen(key), 1, T0 + r, &d))
        a->errors++;
      else if (d.allowed)
        a->allowed[k]++;
    }
  return NULL;
}

static void threads_on_distinct_keys_each_get_their_quota(void **state) {
  (void)state;
  sl_store *s = store_opts(0, 0);
  sl_limiter *lim = limiter_of(s, "fixed_window:100/h");
  static own_arg args[NTHREADS];
  memset(args, 0, sizeof args);
  for (int t = 0; t < NTHREADS; t++) {
    args[t].lim = lim;
    args[t].id = t;
  }
  run_threads(NTHREADS, own_keys, args, sizeof *args);
  for (int t = 0; t < NTHREADS; t++) {
    assert_int_equal(args[t].errors, 0);
    for (int k = 0; k < OWN_KEYS; k++)
      assert_int_equal(args[t].allowed[k], OWN_QUOTA);
  }
  assert_int_equal(stats_of(s).keys, NTHREADS * OWN_KEYS);
  sl_limiter_free(lim);
  sl_store_free(s);
}

/* ---- mixed traffic under a small cap ---- */

#define MIX_CAP ((size_t)256 << 10)
#define MIX_ITERS (60000 / SCALE)

typedef struct mix_shared {
  sl_store *s;
  sl_limiter *fresh, *hot, *log;
  atomic_int takers_left;
} mix_shared;

typedef struct mix_arg {
  mix_shared *sh;
  int id;
  long errors, log_enomem, over_cap, bad_expire, bad_reset, rounds;
  int last_error;
} mix_arg;

static void *mix_taker(void *p) {
  mix_arg *a = p;
  mix_shared *sh = a->sh;
  uint64_t seed = 100 + (uint64_t)a->id;
  for (long i = 0; i < MIX_ITERS; i++) {
    int64_t now = T0 + i * 1000;
    sl_decision d;
    /* A new key on every request: the table fills and must evict. */
    uint64_t k[2] = {(uint64_t)a->id, (uint64_t)i};
    int rc = sl_limiter_take(sh->fresh, k, sizeof k, 1, now, &d);
    if (rc) a->errors++, a->last_error = rc;
    /* A few hot keys, shared by the takers. */
    char key[16];
    snprintf(key, sizeof key, "hot%d", (int)(splitmix64(&seed) % 8));
    rc = sl_limiter_take(sh->hot, key, strlen(key), 1, now, &d);
    if (rc) a->errors++, a->last_error = rc;
    if (i % 4 == 0) {
      rc = sl_limiter_take(sh->log, key, strlen(key), 1, now, &d);
      if (rc == SL_ENOMEM)
        a->log_enomem++;
      else if (rc)
        a->errors++, a->last_error = rc;
    }
  }
  atomic_fetch_sub(&sh->takers_left, 1);
  return NULL;
}

static void *mix_maintainer(void *p) {
  mix_arg *a = p;
  mix_shared *sh = a->sh;
  uint64_t seed = 999;
  do {
    int64_t now = T0 + (a->rounds++ % 1000) * MS(1);
    int64_t n = sl_store_expire(sh->s, now, 256);
    if (n < 0 || n > 256) a->bad_expire++;
    sl_store_stats st;
    sl_store_stats_get(sh->s, &st);
    if (st.bytes > MIX_CAP || st.max_memory != MIX_CAP) a->over_cap++;
    char key[16];
    snprintf(key, sizeof key, "hot%d", (int)(splitmix64(&seed) % 8));
    int r = sl_limiter_reset(sh->hot, key, strlen(key));
    if (r != 0 && r != 1) a->bad_reset++;
    r = sl_limiter_reset(sh->log, key, strlen(key));
    if (r != 0 && r != 1) a->bad_reset++;
    uint64_t k[2] = {splitmix64(&seed) % 2, splitmix64(&seed) % MIX_ITERS};
    r = sl_limiter_reset(sh->fresh, k, sizeof k);
    if (r != 0 && r != 1) a->bad_reset++;
  } while (atomic_load(&sh->takers_left) > 0);
  return NULL;
}

static void *mix_worker(void *p) {
  mix_arg *a = p;
  return a->id < 2 ? mix_taker(p) : mix_maintainer(p);
}

static void mixed_operations_under_memory_pressure_keep_the_cap(void **state) {
  (void)state;
  mix_shared sh;
  sh.s = store_opts(MIX_CAP, 0);
  sh.fresh = limiter_of(sh.s, "token_bucket:10/h");
  sh.hot = limiter_of(sh.s, "gcra:100/s");
  sh.log = limiter_of(sh.s, "sliding_log:500/s");
  atomic_init(&sh.takers_left, 2);
  static mix_arg args[4];
  memset(args, 0, sizeof args);
  for (int t = 0; t < 4; t++) {
    args[t].sh = &sh;
    args[t].id = t;
  }
  run_threads(4, mix_worker, args, sizeof *args);
  for (int t = 0; t < 4; t++) {
    if (args[t].errors)
      fail_msg("thread %d: %ld errors, last %s", t, args[t].errors,
               sl_err_name(args[t].last_error));
    assert_int_equal(args[t].over_cap, 0);
    assert_int_equal(args[t].bad_expire, 0);
    assert_int_equal(args[t].bad_reset, 0);
  }
  assert_true(args[2].rounds > 0 && args[3].rounds > 0);
  sl_store_stats st = stats_of(sh.s);
  assert_true(st.bytes <= MIX_CAP);
  assert_true(st.evictions > 0);
  assert_int_equal(st.limiters, 3);
  sl_limiter_free(sh.fresh);
  sl_limiter_free(sh.hot);
  sl_limiter_free(sh.log);
  assert_int_equal(stats_of(sh.s).keys, 0);
  sl_store_free(sh.s);
}

/* ---- sl_take_all from threads ---- */

#define USERS 8
#define USER_QUOTA 500
#define GLOBAL_QUOTA 2000
#define ALL_ITERS (4000 / SCALE)

typedef struct all_arg {
  sl_limiter *user, *global, *route;
  int id;
  long allowed[USERS];
  long route_allowed;
  long errors, inconsistent;
} all_arg;

static void *take_all_worker(void *p) {
  all_arg *a = p;
  uint64_t seed = 500 + (uint64_t)a->id;
  char ukeys[USERS][16];
  for (int u = 0; u < USERS; u++) snprintf(ukeys[u], sizeof ukeys[u], "u%d", u);
  for (long i = 0; i < ALL_ITERS; i++) {
    uint64_t r = splitmix64(&seed);
    int u = r % 2 ? 0 : (int)(1 + (r >> 8) % (USERS - 1)); /* user 0: half */
    sl_check c[3] = {
        {a->user, ukeys[u], strlen(ukeys[u]), 1, 0},
        {a->global, "global", 6, 1, 0},
        {a->route, "route", 5, 1, 1}, /* a shadow rule, never denies */
    };
    if (r & 4) { /* the other order: locks must still be deadlock-free */
      sl_check t = c[0];
      c[0] = c[1];
      c[1] = t;
    }
    sl_decision out[3];
    int allowed = -1;
    int rc = sl_take_all(c, 3, T0, out, &allowed);
    if (rc) {
      a->errors++;
      continue;
    }
    int all = out[0].allowed && out[1].allowed;
    if (allowed != all) a->inconsistent++;
    if (allowed) {
      a->allowed[u]++;
      if (out[2].allowed) a->route_allowed++;
    }
  }
  return NULL;
}

static void take_all_from_threads_charges_all_or_nothing(void **state) {
  (void)state;
  alarm(300); /* a deadlock kills the test instead of hanging CI */
  sl_store *s = store_opts(0, 0);
  sl_limiter *user = limiter_of(s, "fixed_window:500/h");
  sl_limiter *global = limiter_of(s, "fixed_window:2000/h");
  sl_limiter *route = limiter_of(s, "token_bucket:700/h");
  static all_arg args[NTHREADS];
  memset(args, 0, sizeof args);
  for (int t = 0; t < NTHREADS; t++) {
    args[t].user = user;
    args[t].global = global;
    args[t].route = route;
    args[t].id = t;
  }
  run_threads(NTHREADS, take_all_worker, args, sizeof *args);
  alarm(0);
  long per_user[USERS] = {0}, total = 0, routed = 0;
  for (int t = 0; t < NTHREADS; t++) {
    assert_int_equal(args[t].errors, 0);
    assert_int_equal(args[t].inconsistent, 0);
    routed += args[t].route_allowed;
    for (int u = 0; u < USERS; u++) per_user[u] += args[t].allowed[u];
  }
  char key[16];
  for (int u = 0; u < USERS; u++) {
    snprintf(key, sizeof key, "u%d", u);
    assert_true(per_user[u] <= USER_QUOTA);
    /* Every allowed request charged its user, no denied one did. */
    assert_int_equal(take(user, key, 0, T0).remaining,
                     USER_QUOTA - per_user[u]);
    total += per_user[u];
  }
  assert_int_equal(take(global, "global", 0, T0).remaining,
                   GLOBAL_QUOTA - total);
  /* Demand exceeds the global quota; users could take 4000 together. */
  if (SCALE == 1) assert_int_equal(total, GLOBAL_QUOTA);
  /* The shadow rule was charged exactly when it allowed an allowed request. */
  assert_int_equal(take(route, "route", 0, T0).remaining, 700 - routed);
  assert_true(routed <= 700);
  sl_limiter_free(user);
  sl_limiter_free(global);
  sl_limiter_free(route);
  sl_store_free(s);
}

/* ---- take_batch from threads ---- */

#define BATCH_KEYS 10
#define BATCH_QUOTA 500
#define BATCH_N 32
#define BATCH_ROUNDS (100 / SCALE)

typedef struct batch_arg {
  sl_limiter *lim;
  int id;
  long allowed[BATCH_KEYS];
  long errors, bad_return;
  uint8_t seen[BATCH_KEYS][BATCH_QUOTA];
} batch_arg;

static void *batch_worker(void *p) {
  batch_arg *a = p;
  uint64_t seed = 7000 + (uint64_t)a->id;
  static const char *keys[BATCH_KEYS] = {"b0", "b1", "b2", "b3", "b4",
                                         "b5", "b6", "b7", "b8", "b9"};
  for (int r = 0; r < BATCH_ROUNDS; r++) {
    sl_request reqs[BATCH_N];
    int idx[BATCH_N];
    for (int i = 0; i < BATCH_N; i++) {
      idx[i] = (int)(splitmix64(&seed) % BATCH_KEYS);
      reqs[i] = (sl_request){keys[idx[i]], 2, 1};
    }
    sl_decision out[BATCH_N];
    int err[BATCH_N];
    int failed = sl_limiter_take_batch(a->lim, reqs, BATCH_N, T0, out, err);
    if (failed != 0) a->bad_return++;
    for (int i = 0; i < BATCH_N; i++) {
      if (err[i]) {
        a->errors++;
        continue;
      }
      if (!out[i].allowed) continue;
      a->allowed[idx[i]]++;
      if (out[i].remaining >= 0 && out[i].remaining < BATCH_QUOTA)
        a->seen[idx[i]][out[i].remaining]++;
    }
  }
  return NULL;
}

static void take_batch_from_threads_gets_exact_quota(void **state) {
  (void)state;
  sl_store *s = store_opts(0, 0);
  sl_limiter *lim = limiter_of(s, "gcra:500/h");
  static batch_arg args[NTHREADS];
  memset(args, 0, sizeof args);
  for (int t = 0; t < NTHREADS; t++) {
    args[t].lim = lim;
    args[t].id = t;
  }
  run_threads(NTHREADS, batch_worker, args, sizeof *args);
  long demand_ok = (long)NTHREADS * BATCH_ROUNDS * BATCH_N / BATCH_KEYS;
  for (int k = 0; k < BATCH_KEYS; k++) {
    long allowed = 0;
    for (int t = 0; t < NTHREADS; t++) allowed += args[t].allowed[k];
    char key[16];
    snprintf(key, sizeof key, "b%d", k);
    int64_t rem = take(lim, key, 0, T0).remaining;
    assert_int_equal(rem, BATCH_QUOTA - allowed);
    /* Each allowed request saw its own state. */
    for (long r = rem; r < BATCH_QUOTA; r++) {
      int n = 0;
      for (int t = 0; t < NTHREADS; t++) n += args[t].seen[k][r];
      if (n != 1) fail_msg("key %d: remaining %ld reported %d times", k, r, n);
    }
    if (SCALE == 1 && demand_ok > 2 * BATCH_QUOTA)
      assert_int_equal(allowed, BATCH_QUOTA);
  }
  for (int t = 0; t < NTHREADS; t++) {
    assert_int_equal(args[t].errors, 0);
    assert_int_equal(args[t].bad_return, 0);
  }
  sl_limiter_free(lim);
  sl_store_free(s);
}

/* ---- limiters come and go while others take ---- */

#define CHURN_ROUNDS (400 / SCALE)

typedef struct churn_shared {
  sl_store *s;
  sl_limiter *steady;
  atomic_int left;
} churn_shared;

typedef struct churn_arg {
  churn_shared *sh;
  int id;
  long errors, allowed, rounds;
  int last_error;
} churn_arg;

static void *churn_worker(void *p) {
  churn_arg *a = p;
  churn_shared *sh = a->sh;
  static const char *specs[] = {"gcra:5/s", "sliding_log:5/s",
                                "fixed_window:5/s", "token_bucket:5/s"};
  if (a->id < 2) { /* create, use, free */
    for (int r = 0; r < CHURN_ROUNDS; r++) {
      sl_policy pol;
      if (sl_policy_parse(specs[(r + a->id) % 4], &pol, NULL, 0)) {
        a->errors++;
        continue;
      }
      sl_limiter *lim = NULL;
      int rc = sl_limiter_new(sh->s, &pol, &lim);
      if (rc) {
        a->errors++, a->last_error = rc;
        continue;
      }
      for (int k = 0; k < 20; k++) {
        char key[40];
        int len = snprintf(key, sizeof key, "k%d-%s", k,
                           k % 2 ? "and-a-long-tail-past-16" : "");
        sl_decision d;
        rc = sl_limiter_take(lim, key, (size_t)len, 1, T0 + r, &d);
        if (rc || !d.allowed) a->errors++, a->last_error = rc;
      }
      sl_limiter_free(lim);
    }
    atomic_fetch_sub(&sh->left, 1);
  } else if (a->id == 2) { /* a steady limiter on one key */
    for (int r = 0; r < 3000; r++) {
      sl_decision d;
      int rc = sl_limiter_take(sh->steady, "steady", 6, 1, T0, &d);
      if (rc)
        a->errors++, a->last_error = rc;
      else
        a->allowed += d.allowed;
    }
  } else { /* expiry and stats, until the churners are done */
    do {
      /* Within the first 10 s: churned keys (5/s) go fresh, the steady
         key (1000/h) never does. */
      int64_t now = T0 + (a->rounds++ % 100) * MS(100);
      if (sl_store_expire(sh->s, now, 128) < 0) a->errors++;
      sl_store_stats st;
      sl_store_stats_get(sh->s, &st);
      if (st.limiters < 1 || st.limiters > 3) a->errors++;
    } while (atomic_load(&sh->left) > 0);
  }
  return NULL;
}

static void limiters_come_and_go_while_others_take(void **state) {
  (void)state;
  churn_shared sh;
  sh.s = store_opts(0, 0);
  sh.steady = limiter_of(sh.s, "fixed_window:1000/h");
  atomic_init(&sh.left, 2);
  static churn_arg args[4];
  memset(args, 0, sizeof args);
  for (int t = 0; t < 4; t++) {
    args[t].sh = &sh;
    args[t].id = t;
  }
  run_threads(4, churn_worker, args, sizeof *args);
  for (int t = 0; t < 4; t++)
    if (args[t].errors)
      fail_msg("thread %d: %ld errors, last %s", t, args[t].errors,
               sl_err_name(args[t].last_error));
  assert_int_equal(args[2].allowed, 1000);
  sl_store_stats st = stats_of(sh.s);
  assert_int_equal(st.limiters, 1);
  assert_int_equal(st.keys, 1);
  sl_limiter_free(sh.steady);
  sl_store_free(sh.s);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(threads_on_one_key_get_exactly_the_quota_gcra),
      cmocka_unit_test(threads_on_one_key_get_exactly_the_quota_fixed_window),
      cmocka_unit_test(threads_on_one_key_get_exactly_the_quota_sliding_log),
      cmocka_unit_test(
          threads_on_one_key_get_exactly_the_quota_sliding_window),
      cmocka_unit_test(threads_on_one_key_get_exactly_the_quota_token_bucket),
      cmocka_unit_test(threads_on_one_key_get_exactly_the_quota_leaky_bucket),
      cmocka_unit_test(threads_on_one_long_key_get_exactly_the_quota),
      cmocka_unit_test(threads_on_distinct_keys_each_get_their_quota),
      cmocka_unit_test(mixed_operations_under_memory_pressure_keep_the_cap),
      cmocka_unit_test(take_all_from_threads_charges_all_or_nothing),
      cmocka_unit_test(take_batch_from_threads_gets_exact_quota),
      cmocka_unit_test(limiters_come_and_go_while_others_take),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
