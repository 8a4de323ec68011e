/*
 * test_concurrency.c — concurrency:N[:lease=D] in the library: its syntax,
 * N holders and the N+1th denied, release, renew and expiry freeing slots,
 * lease ids, all-or-nothing with rate checks in sl_take_all, the memory
 * cap (a key holding a live lease is never evicted), threads that never
 * exceed N, and a randomized run against a plain reference model.
 */
#include <pthread.h>
#include <stdatomic.h>

#include "helpers.h"

/* Parses spec expecting SL_EPOLICY with `needle` in the message. */
static void parse_fails(const char *spec, const char *needle) {
  sl_policy p;
  char err[256] = "";
  assert_int_equal(sl_policy_parse(spec, &p, err, sizeof err), SL_EPOLICY);
  if (!strstr(err, needle))
    fail_msg("'%s': \"%s\" lacks \"%s\"", spec, err, needle);
}

static void syntax_parses_and_formats(void **state) {
  (void)state;
  sl_policy p = policy_of("concurrency:5");
  assert_int_equal(p.algo, SL_CONCURRENCY);
  assert_int_equal(p.limit, 5);
  assert_int_equal(p.burst, 0);
  assert_true(p.period_ns == SL_LEASE_DEFAULT_NS);
  char buf[64];
  sl_policy_format(&p, buf, sizeof buf);
  assert_string_equal(buf, "concurrency:5");
  p = policy_of("concurrency:20:lease=500ms");
  assert_true(p.period_ns == MS(500));
  sl_policy_format(&p, buf, sizeof buf);
  assert_string_equal(buf, "concurrency:20:lease=500ms");
  p = policy_of("concurrency:1:lease=2m");
  sl_policy_format(&p, buf, sizeof buf);
  assert_string_equal(buf, "concurrency:1:lease=2m");
  assert_string_equal(sl_algo_name(SL_CONCURRENCY), "concurrency");
}

static void syntax_errors_name_the_part(void **state) {
  (void)state;
  parse_fails("concurrency", "missing ':N'");
  parse_fails("concurrency:", "limit '' is not a positive integer");
  parse_fails("concurrency:0", "limit '0' must be positive");
  parse_fails("concurrency:x", "limit 'x' is not a positive integer");
  parse_fails("concurrency:10001", "limit '10001' is too large (max 10000)");
  parse_fails("concurrency:5/s", "concurrency has no period ('5/s')");
  parse_fails("concurrency:5:burst=2", "only ':lease=DURATION' may follow");
  parse_fails("concurrency:5:lease=", "lease '' needs a unit");
  parse_fails("concurrency:5:lease=10", "lease '10' needs a unit");
  parse_fails("concurrency:5:lease=0s", "lease '0s' must be positive");
  parse_fails("concurrency:5:lease=2d", "longer than a day");
  parse_fails("concurrency:5:lease=1s:x", "unexpected ':x' after the lease");
  parse_fails("concurent:5", "unknown algorithm 'concurent'");
  /* Filled in by hand: the same bounds. */
  sl_policy p = {SL_CONCURRENCY, 5, 3, SEC(1)};
  char err[128];
  assert_int_equal(sl_policy_validate(&p, err, sizeof err), SL_EPOLICY);
  p = (sl_policy){SL_CONCURRENCY, 5, 0, SEC(1) + 1};
  assert_int_equal(sl_policy_validate(&p, err, sizeof err), SL_EPOLICY);
}

static void n_holders_then_the_next_is_denied(void **state) {
  (void)state;
  sl_store *s = store_with_cap(0);
  sl_limiter *lim = limiter_of(s, "concurrency:3:lease=10s");
  uint64_t ids[3];
  for (int i = 0; i < 3; i++) {
    sl_decision d;
    assert_int_equal(sl_acquire(lim, "k", 1, T0 + MS(i), &d), 0);
    assert_true(d.allowed);
    assert_int_equal(d.limit, 3);
    assert_int_equal(d.remaining, 2 - i);
    assert_true(d.lease != 0);
    for (int k = 0; k < i; k++) assert_true(ids[k] != d.lease);
    ids[i] = d.lease;
  }
  sl_decision d;
  assert_int_equal(sl_acquire(lim, "k", 1, T0 + MS(5), &d), 0);
  assert_false(d.allowed);
  assert_int_equal(d.lease, 0);
  assert_int_equal(d.remaining, 0);
  /* The earliest lease expires at T0 + 10 s. */
  assert_true(d.retry_after_ns == SEC(10) - MS(5));
  /* Another key is another count. */
  assert_true(take(lim, "other", 1, T0).allowed);
  /* A peek reports, takes nothing. */
  d = take(lim, "k", 0, T0 + MS(6));
  assert_true(d.allowed);
  assert_int_equal(d.remaining, 0);
  assert_int_equal(d.lease, 0);
  /* Cost 2 is never one lease. */
  assert_int_equal(sl_limiter_take(lim, "k", 1, 2, T0, &d), SL_ECOST);
  sl_limiter_free(lim);
  sl_store_free(s);
}

static void release_frees_a_slot_once(void **state) {
  (void)state;
  sl_store *s = store_with_cap(0);
  sl_limiter *lim = limiter_of(s, "concurrency:1");
  sl_decision d;
  assert_int_equal(sl_acquire(lim, "k", 1, T0, &d), 0);
  uint64_t id = d.lease;
  assert_false(take(lim, "k", 1, T0 + 1).allowed);
  assert_int_equal(sl_release(lim, "k", 1, id ^ 1, T0 + 2, &d), 0); /* wrong */
  assert_int_equal(sl_release(lim, "j", 1, id, T0 + 2, &d), 0); /* other key */
  assert_int_equal(sl_release(lim, "k", 1, id, T0 + 3, &d), 1);
  assert_int_equal(d.remaining, 1);
  assert_int_equal(sl_release(lim, "k", 1, id, T0 + 4, &d), 0); /* twice */
  assert_int_equal(sl_release(lim, "k", 1, 0, T0 + 4, NULL), 0);
  d = take(lim, "k", 1, T0 + 5);
  assert_true(d.allowed);
  /* The released key's memory went back: one key held. */
  sl_store_stats st;
  sl_store_stats_get(s, &st);
  assert_int_equal(st.keys, 1);
  assert_int_equal(sl_release(lim, "k", 1, d.lease, T0 + 6, NULL), 1);
  sl_store_stats_get(s, &st);
  assert_int_equal(st.keys, 0);
  /* Not a concurrency limiter: release is a misuse. */
  sl_limiter *rate = limiter_of(s, "gcra:1/s");
  assert_int_equal(sl_release(rate, "k", 1, 1, T0, NULL), SL_EINVAL);
  assert_int_equal(sl_acquire(rate, "k", 1, T0, &d), SL_EINVAL);
  sl_limiter_free(rate);
  sl_limiter_free(lim);
  sl_store_free(s);
}

static void expiry_frees_and_renew_extends(void **state) {
  (void)state;
  sl_store *s = store_with_cap(0);
  sl_limiter *lim = limiter_of(s, "concurrency:2:lease=1s");
  sl_decision a, b, d;
  assert_int_equal(sl_acquire(lim, "k", 1, T0, &a), 0);
  assert_int_equal(sl_acquire(lim, "k", 1, T0 + MS(100), &b), 0);
  assert_false(take(lim, "k", 1, T0 + MS(999)).allowed);
  /* a holder killed mid-request: its lease frees the slot at T0 + 1 s */
  d = take(lim, "k", 1, T0 + SEC(1));
  assert_true(d.allowed);
  /* renewing b at 1.05 s keeps it until 2.05 s */
  assert_int_equal(sl_renew(lim, "k", 1, b.lease, T0 + MS(1050), &d), 1);
  assert_true(d.lease == b.lease);
  assert_false(take(lim, "k", 1, T0 + MS(1500)).allowed);
  /* expired: no renewal, no release */
  assert_int_equal(sl_renew(lim, "k", 1, a.lease, T0 + MS(1500), &d), 0);
  assert_int_equal(d.lease, 0);
  assert_int_equal(sl_release(lim, "k", 1, a.lease, T0 + MS(1500), NULL), 0);
  /* at 2.0 s the lease taken at 1 s is gone: one slot */
  d = take(lim, "k", 1, T0 + SEC(2));
  assert_true(d.allowed);
  assert_false(take(lim, "k", 1, T0 + SEC(2)).allowed);
  assert_int_equal(sl_release(lim, "k", 1, b.lease, T0 + MS(2049), NULL), 1);
  sl_limiter_free(lim);
  sl_store_free(s);
}

/* A key's one lease lives in its entry; a second takes a block, which
   goes back once one lease is left (a release, or an expiry seen by an
   acquire) to be the shard's spare: going between one lease and two
   again allocates nothing more. Every form answers alike. */
static void one_lease_is_held_inline(void **state) {
  (void)state;
  sl_store *s = store_with_cap(0);
  sl_limiter *lim = limiter_of(s, "concurrency:3:lease=1s");
  sl_store_stats st;
  sl_decision a, b, d;
  assert_int_equal(sl_acquire(lim, "k", 1, T0, &a), 0);
  sl_store_stats_get(s, &st);
  size_t one = st.bytes;
  assert_int_equal(sl_acquire(lim, "k", 1, T0 + MS(10), &b), 0);
  assert_int_equal(b.remaining, 1);
  sl_store_stats_get(s, &st);
  size_t two = st.bytes;
  assert_true(two > one); /* two leases: a block */
  assert_int_equal(sl_release(lim, "k", 1, a.lease, T0 + MS(20), &d), 1);
  assert_int_equal(d.remaining, 2);
  sl_store_stats_get(s, &st);
  assert_int_equal(st.bytes, two); /* inline, the block kept as the spare */
  /* inline: renew, a wrong id, expiry's retry_after and reset */
  assert_int_equal(sl_renew(lim, "k", 1, b.lease, T0 + MS(500), &d), 1);
  assert_int_equal(sl_release(lim, "k", 1, b.lease ^ 1, T0 + MS(500), NULL), 0);
  d = take(lim, "k", 1, T0 + MS(600)); /* a block again (lease c) */
  assert_true(d.allowed);
  assert_int_equal(d.remaining, 1);
  /* at 1.5 s b (renewed to 1.5 s) has expired: c is live alone; a
     joins it, and a's release leaves c inline */
  assert_int_equal(sl_release(lim, "k", 1, b.lease, T0 + MS(1500), NULL), 0);
  assert_int_equal(sl_acquire(lim, "k", 1, T0 + MS(1500), &a), 0);
  assert_int_equal(a.remaining, 1);
  assert_int_equal(sl_release(lim, "k", 1, a.lease, T0 + MS(1501), &d), 1);
  sl_store_stats_get(s, &st);
  assert_int_equal(st.bytes, two); /* the one spare, reused each time */
  assert_int_equal(st.keys, 1); /* the lease taken at 0.6 s is held */
  sl_limiter_free(lim);
  sl_store_free(s);
}

static void take_all_is_all_or_nothing_with_a_rate(void **state) {
  (void)state;
  sl_store *s = store_with_cap(0);
  sl_limiter *conc = limiter_of(s, "concurrency:2");
  sl_limiter *conc2 = limiter_of(s, "concurrency:5");
  sl_limiter *rate = limiter_of(s, "fixed_window:1/s");
  sl_check c[3] = {{conc, "k", 1, 1, 0}, {rate, "k", 1, 1, 0},
                   {conc2, "k", 1, 1, 0}};
  sl_decision out[3];
  int all;
  assert_int_equal(sl_take_all(c, 3, T0, out, &all), 0);
  assert_true(all);
  assert_true(out[0].lease != 0);
  assert_true(out[0].lease == out[2].lease); /* one lease per request */
  assert_int_equal(out[1].lease, 0);
  /* the rate denies: no lease is held */
  assert_int_equal(sl_take_all(c, 3, T0 + 1, out, &all), 0);
  assert_false(all);
  assert_int_equal(out[0].lease, 0);
  assert_true(out[0].allowed); /* would have allowed */
  assert_int_equal(out[0].remaining, 1);
  sl_decision d = take(conc2, "k", 0, T0 + 2);
  assert_int_equal(d.remaining, 4);
  /* the concurrency denies: the rate is not charged */
  sl_check c2[2] = {{conc, "j", 1, 1, 0}, {rate, "j", 1, 1, 0}};
  assert_true(take(conc, "j", 1, T0).allowed);
  assert_true(take(conc, "j", 1, T0).allowed);
  assert_int_equal(sl_take_all(c2, 2, T0, out, &all), 0);
  assert_false(all);
  assert_true(take(rate, "j", 1, T0).allowed);
  sl_limiter_free(conc);
  sl_limiter_free(conc2);
  sl_limiter_free(rate);
  sl_store_free(s);
}

static void live_leases_are_never_evicted(void **state) {
  (void)state;
  sl_store *s = store_with_cap(64 << 10);
  sl_limiter *conc = limiter_of(s, "concurrency:4:lease=1m");
  sl_limiter *rate = limiter_of(s, "gcra:10/s");
  /* Fill the store with held leases, then flood it with keys. */
  int held = 0, full = 0;
  char key[32];
  uint64_t first = 0;
  for (int i = 0; i < 100000 && !full; i++) {
    snprintf(key, sizeof key, "c%d", i);
    sl_decision d;
    int rc = sl_acquire(conc, key, strlen(key), T0, &d);
    if (rc == SL_EFULL || rc == SL_ENOMEM) full = 1;
    else {
      assert_int_equal(rc, 0);
      if (!first) first = d.lease;
      held++;
    }
  }
  assert_true(full);
  sl_store_stats st;
  sl_store_stats_get(s, &st);
  assert_true(st.bytes <= st.max_memory);
  for (int i = 0; i < 1000; i++) {
    snprintf(key, sizeof key, "r%d", i);
    sl_decision d;
    int rc = sl_limiter_take(rate, key, strlen(key), 1, T0, &d);
    assert_true(rc == 0 || rc == SL_EFULL);
  }
  /* every lease is still there (rate keys may have evicted each other) */
  for (int i = 0; i < held; i++) {
    snprintf(key, sizeof key, "c%d", i);
    assert_int_equal(take(conc, key, 0, T0 + 1).remaining, 3);
  }
  assert_int_equal(sl_release(conc, "c0", 2, first, T0 + 1, NULL), 1);
  /* expired, the leases go: room again */
  assert_true(sl_store_expire(s, T0 + SEC(120), 1 << 20) >= held - 1);
  sl_decision d;
  assert_int_equal(sl_limiter_take(rate, "r", 1, 1, T0 + SEC(120), &d), 0);
  sl_limiter_free(conc);
  sl_limiter_free(rate);
  sl_store_free(s);
}

/* ---- threads never exceed N ---- */

#define THREADS 4
#define ROUNDS 20000
#define N 3

typedef struct shared {
  sl_limiter *lim;
  atomic_int inflight, most, acquired;
} shared;

static void *holder(void *arg) {
  shared *sh = arg;
  for (int i = 0; i < ROUNDS; i++) {
    sl_decision d;
    if (sl_acquire(sh->lim, "k", 1, T0, &d) || !d.allowed) continue;
    int now = atomic_fetch_add(&sh->inflight, 1) + 1;
    int m = atomic_load(&sh->most);
    while (now > m && !atomic_compare_exchange_weak(&sh->most, &m, now)) {
    }
    atomic_fetch_add(&sh->acquired, 1);
    atomic_fetch_sub(&sh->inflight, 1);
    assert_int_equal(sl_release(sh->lim, "k", 1, d.lease, T0, NULL), 1);
  }
  return NULL;
}

static void threads_never_hold_more_than_n(void **state) {
  (void)state;
  sl_store *s = store_with_cap(0);
  shared sh = {limiter_of(s, "concurrency:3"), 0, 0, 0};
  pthread_t t[THREADS];
  for (int i = 0; i < THREADS; i++) pthread_create(&t[i], NULL, holder, &sh);
  for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
  assert_true(atomic_load(&sh.most) <= N);
  assert_true(atomic_load(&sh.acquired) > 0);
  sl_decision d = take(sh.lim, "k", 0, T0);
  assert_int_equal(d.remaining, N); /* every lease was released */
  sl_limiter_free(sh.lim);
  sl_store_free(s);
}

/* ---- a randomized run against a reference model ---- */

#define REF_MAX 64

/* The model: a plain list of (id, expiry); live while t < expiry. */
typedef struct ref {
  uint64_t id[REF_MAX];
  int64_t exp[REF_MAX];
  int n;
} ref;

static int ref_live(const ref *r, int64_t t) {
  int k = 0;
  for (int i = 0; i < r->n; i++) k += t < r->exp[i];
  return k;
}

static int ref_find(const ref *r, uint64_t id, int64_t t) {
  for (int i = 0; i < r->n; i++)
    if (r->id[i] == id && t < r->exp[i]) return i;
  return -1;
}

static uint64_t rnd(uint64_t *x) {
  *x ^= *x << 13;
  *x ^= *x >> 7;
  *x ^= *x << 17;
  return *x;
}

static void matches_a_reference_model(void **state) {
  (void)state;
  sl_store *s = store_with_cap(0);
  const int64_t W = MS(50);
  sl_limiter *lim = limiter_of(s, "concurrency:5:lease=50ms");
  ref r = {{0}, {0}, 0};
  uint64_t x = 88172645463325252u, known[256] = {0};
  int nknown = 0;
  int64_t t = T0;
  for (int step = 0; step < 200000; step++) {
    t += (int64_t)(rnd(&x) % MS(3));
    int op = (int)(rnd(&x) % 4);
    sl_decision d;
    if (op == 0 || op == 1) { /* acquire */
      assert_int_equal(sl_acquire(lim, "k", 1, t, &d), 0);
      int live = ref_live(&r, t);
      assert_int_equal(d.allowed, live < 5);
      if (d.allowed) {
        assert_int_equal(d.remaining, 5 - live - 1);
        /* compact the model, then record */
        int k = 0;
        for (int i = 0; i < r.n; i++)
          if (t < r.exp[i]) {
            r.id[k] = r.id[i];
            r.exp[k++] = r.exp[i];
          }
        r.n = k;
        r.id[r.n] = d.lease;
        r.exp[r.n++] = t + W;
        known[nknown++ % 256] = d.lease;
      } else {
        int64_t first = INT64_MAX;
        for (int i = 0; i < r.n; i++)
          if (t < r.exp[i] && r.exp[i] < first) first = r.exp[i];
        assert_true(d.retry_after_ns == first - t);
      }
    } else { /* release or renew a lease seen (live or not) */
      uint64_t id = nknown ? known[rnd(&x) % (nknown < 256 ? nknown : 256)] : 7;
      int i = ref_find(&r, id, t);
      int rc = op == 2 ? sl_release(lim, "k", 1, id, t, &d)
                       : sl_renew(lim, "k", 1, id, t, &d);
      assert_int_equal(rc, i >= 0);
      if (i >= 0 && op == 2) {
        r.id[i] = r.id[r.n - 1];
        r.exp[i] = r.exp[r.n - 1];
        r.n--;
      } else if (i >= 0) {
        r.exp[i] = t + W;
      }
      assert_int_equal(d.remaining, 5 - ref_live(&r, t));
    }
  }
  sl_limiter_free(lim);
  sl_store_free(s);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(syntax_parses_and_formats),
      cmocka_unit_test(syntax_errors_name_the_part),
      cmocka_unit_test(n_holders_then_the_next_is_denied),
      cmocka_unit_test(release_frees_a_slot_once),
      cmocka_unit_test(expiry_frees_and_renew_extends),
      cmocka_unit_test(one_lease_is_held_inline),
      cmocka_unit_test(take_all_is_all_or_nothing_with_a_rate),
      cmocka_unit_test(live_leases_are_never_evicted),
      cmocka_unit_test(threads_never_hold_more_than_n),
      cmocka_unit_test(matches_a_reference_model),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
