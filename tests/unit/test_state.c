/*
 * test_state.c — the store's snapshot format (store/snapshot.h), what the
 * daemon's --state-file is made of: a round trip restores every algorithm's
 * keys exactly (long keys and sliding_log's logs too) under the names
 * given, whatever ids the limiters have in the new store; keys back to
 * fresh are skipped; a truncation at any offset and a flipped bit at any
 * offset are errors that name the offset, and restore nothing.
 */
#include "helpers.h"
#include "limiter.h"
#include "store/snapshot.h"

#include "base/strbuf.h"

#define NALGO 6
static const char *const specs[NALGO] = {
    "token_bucket:5/m", "leaky_bucket:5/m",  "fixed_window:5/m",
    "sliding_log:5/m",  "sliding_window:5/m", "gcra:5/m:burst=3"};
static const char *const keys[] = {"a", "user-with-a-key-longer-than-16",
                                   "b"};
#define NKEYS (sizeof keys / sizeof keys[0])

/* A store with one limiter per algorithm (made in order `order`), and
   the names of their ids. */
typedef struct world {
  sl_store *s;
  sl_limiter *lim[NALGO];
  store_names *names;
} world;

static world world_new(int reverse) {
  world w;
  w.s = store_with_cap(8 << 20);
  w.names = calloc(1, sizeof *w.names);
  static const char *const name[NALGO] = {"tb", "lb", "fw", "sl", "sw", "gc"};
  for (int k = 0; k < NALGO; k++) {
    int i = reverse ? NALGO - 1 - k : k;
    w.lim[i] = limiter_of(w.s, specs[i]);
    const struct algo_policy *p;
    uint16_t id;
    limiter_ident(w.lim[i], &p, &id);
    w.names->name[id] = name[i];
    w.names->len[id] = 2;
  }
  return w;
}

static void world_free(world *w) {
  for (int i = 0; i < NALGO; i++) sl_limiter_free(w->lim[i]);
  sl_store_free(w->s);
  free(w->names);
}

static int out_buf(void *ud, const void *p, size_t n) {
  strbuf_add(ud, p, n);
  return 0;
}

/* resolve: a name of world ud. */
static int resolve(void *ud, const char *name, size_t len,
                   const algo_policy **p, uint16_t *id) {
  world *w = ud;
  for (int i = 0; i < NALGO; i++) {
    limiter_ident(w->lim[i], p, id);
    if (w->names->len[*id] == len && !memcmp(w->names->name[*id], name, len))
      return 0;
  }
  return -1;
}

/* Charges key i of every limiter i+1 times (key 2: not at all). */
static void charge(world *w) {
  for (int a = 0; a < NALGO; a++)
    for (size_t k = 0; k + 1 < NKEYS; k++)
      for (size_t n = 0; n <= k + 1; n++)
        take(w->lim[a], keys[k], 1, T0 + MS(10 * n));
}

/* The snapshot of w at T0 + 1 s. */
static strbuf snapshot_of(world *w) {
  strbuf b = STRBUF_INIT;
  store_snap_stats st;
  assert_int_equal(store_snapshot_write(w->s, w->names, T0 + SEC(1), out_buf,
                                        &b, &st),
                   0);
  assert_int_equal(st.keys, NALGO * (NKEYS - 1));
  assert_int_equal(st.bytes, b.len);
  return b;
}

static void round_trip_restores_every_algorithm_under_its_name(void **state) {
  (void)state;
  world w = world_new(0);
  charge(&w);
  strbuf b = snapshot_of(&w);
  world r = world_new(1); /* other ids */
  store_snap_stats st;
  char err[256] = "";
  assert_int_equal(store_snapshot_load(r.s, (uint8_t *)b.p, b.len, resolve, &r,
                                       T0 + SEC(1), &st, err, sizeof err),
                   0);
  assert_int_equal(st.restored, NALGO * (NKEYS - 1));
  assert_int_equal(st.unmatched + st.fresh + st.failed, 0);
  /* Every key decides the same in both stores, charge after charge. */
  for (int a = 0; a < NALGO; a++)
    for (size_t k = 0; k < NKEYS; k++)
      for (int n = 0; n < 6; n++) {
        int64_t t = T0 + SEC(2) + MS(n);
        sl_decision x = take(w.lim[a], keys[k], 1, t);
        sl_decision y = take(r.lim[a], keys[k], 1, t);
        assert_int_equal(x.allowed, y.allowed);
        assert_int_equal(x.remaining, y.remaining);
        assert_int_equal(x.retry_after_ns, y.retry_after_ns);
        assert_int_equal(x.reset_ns, y.reset_ns);
      }
  strbuf_free(&b);
  world_free(&w);
  world_free(&r);
}

static void load_skips_fresh_and_unnamed_keys(void **state) {
  (void)state;
  world w = world_new(0);
  charge(&w);
  strbuf b = snapshot_of(&w);
  world r = world_new(0);
  store_snap_stats st;
  char err[256];
  /* An hour later every key is back to fresh. */
  assert_int_equal(store_snapshot_load(r.s, (uint8_t *)b.p, b.len, resolve, &r,
                                       T0 + SEC(3600), &st, err, sizeof err),
                   0);
  assert_int_equal(st.restored, 0);
  assert_int_equal(st.fresh, NALGO * (NKEYS - 1));
  sl_store_stats ss;
  sl_store_stats_get(r.s, &ss);
  assert_int_equal(ss.keys, 0);
  /* A store that knows only some names skips the others' keys. */
  world_free(&r);
  r = world_new(0);
  for (size_t i = 0; i < 65536; i++)
    if (r.names->name[i] && strcmp(r.names->name[i], "fw"))
      r.names->name[i] = "zz";
  assert_int_equal(store_snapshot_load(r.s, (uint8_t *)b.p, b.len, resolve, &r,
                                       T0 + SEC(1), &st, err, sizeof err),
                   0);
  assert_int_equal(st.restored, NKEYS - 1);
  assert_int_equal(st.unmatched, (NALGO - 1) * (NKEYS - 1));
  strbuf_free(&b);
  world_free(&w);
  world_free(&r);
}

/* Loads buf[0..len) into a fresh world: the rc, err, and no key held
   after a failure. */
static int load_into_fresh(const uint8_t *buf, size_t len, char *err,
                           size_t err_len) {
  world r = world_new(0);
  store_snap_stats st;
  int rc = store_snapshot_load(r.s, buf, len, resolve, &r, T0 + SEC(1), &st,
                               err, err_len);
  sl_store_stats ss;
  sl_store_stats_get(r.s, &ss);
  if (rc) assert_int_equal(ss.keys, 0);
  world_free(&r);
  return rc;
}

static void truncation_at_every_offset_is_an_error_naming_it(void **state) {
  (void)state;
  world w = world_new(0);
  charge(&w);
  strbuf b = snapshot_of(&w);
  for (size_t len = 0; len < b.len; len++) {
    char err[256] = "";
    assert_int_equal(load_into_fresh((uint8_t *)b.p, len, err, sizeof err),
                     -1);
    assert_non_null(strstr(err, "offset "));
    assert_non_null(strstr(err, "truncated"));
  }
  strbuf_free(&b);
  world_free(&w);
}

static void a_flipped_bit_anywhere_is_an_error(void **state) {
  (void)state;
  world w = world_new(0);
  charge(&w);
  strbuf b = snapshot_of(&w);
  uint8_t *copy = malloc(b.len + 1);
  for (size_t at = 0; at < b.len; at++) {
    memcpy(copy, b.p, b.len);
    copy[at] ^= 0x10;
    char err[256] = "";
    assert_int_equal(load_into_fresh(copy, b.len, err, sizeof err), -1);
    assert_non_null(strstr(err, "offset "));
  }
  /* A byte after the end, too. */
  memcpy(copy, b.p, b.len);
  copy[b.len] = 'E';
  char err[256] = "";
  assert_int_equal(load_into_fresh(copy, b.len + 1, err, sizeof err), -1);
  assert_non_null(strstr(err, "after the end"));
  free(copy);
  strbuf_free(&b);
  world_free(&w);
}

/* resolve, counting its calls in resolve_calls. */
static int resolve_calls;
static int resolve_counted(void *ud, const char *name, size_t len,
                           const algo_policy **p, uint16_t *id) {
  resolve_calls++;
  return resolve(ud, name, len, p, id);
}

/* A damaged file names nothing: the resolver (which in the daemon makes
   ad-hoc policies) is not called before the checksum has held. */
static void a_damaged_file_resolves_no_name(void **state) {
  (void)state;
  world w = world_new(0);
  charge(&w);
  strbuf b = snapshot_of(&w);
  b.p[b.len - 1] ^= 0x01; /* the checksum's last byte */
  world r = world_new(0);
  store_snap_stats st;
  char err[256] = "";
  resolve_calls = 0;
  assert_int_equal(store_snapshot_load(r.s, (uint8_t *)b.p, b.len,
                                       resolve_counted, &r, T0 + SEC(1), &st,
                                       err, sizeof err),
                   -1);
  assert_non_null(strstr(err, "checksum mismatch"));
  assert_int_equal(resolve_calls, 0);
  b.p[b.len - 1] ^= 0x01; /* whole again: names resolved, keys restored */
  assert_int_equal(store_snapshot_load(r.s, (uint8_t *)b.p, b.len,
                                       resolve_counted, &r, T0 + SEC(1), &st,
                                       err, sizeof err),
                   0);
  assert_true(resolve_calls > 0);
  strbuf_free(&b);
  world_free(&w);
  world_free(&r);
}

static void a_wrong_magic_says_what_the_file_is_not(void **state) {
  (void)state;
  char err[256] = "";
  const char junk[64] = "{\"not\": \"a state file\"}";
  assert_int_equal(load_into_fresh((const uint8_t *)junk, sizeof junk, err,
                                   sizeof err),
                   -1);
  assert_string_equal(err, "offset 0: not a sluice state file (no SLUICEST "
                           "magic)");
}

/* resolve: every name but sliding_log's ("sl", whose records are logs,
   refused for another reason) is the concurrency limiter ud (a file whose
   names a later configuration gives to a concurrency policy). */
static int resolve_concurrency(void *ud, const char *name, size_t len,
                               const algo_policy **p, uint16_t *id) {
  if (len == 2 && !memcmp(name, "sl", 2)) return -1;
  limiter_ident(ud, p, id);
  return 0;
}

/* A concurrency policy's keys are leases, never saved: a state record
   under its name (a forged file, or one whose names now mean another
   policy) is refused, not read as a lease. */
static void a_state_record_for_a_concurrency_policy_is_refused(void **state) {
  (void)state;
  world w = world_new(0);
  charge(&w);
  strbuf b = snapshot_of(&w);
  sl_store *s = store_with_cap(8 << 20);
  sl_limiter *conc = limiter_of(s, "concurrency:5");
  store_snap_stats st;
  char err[256] = "";
  assert_int_equal(store_snapshot_load(s, (uint8_t *)b.p, b.len,
                                       resolve_concurrency, conc, T0 + SEC(1),
                                       &st, err, sizeof err),
                   -1);
  assert_non_null(strstr(err, "a state out of range for concurrency"));
  sl_limiter_free(conc);
  sl_store_free(s);
  strbuf_free(&b);
  world_free(&w);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(a_state_record_for_a_concurrency_policy_is_refused),
      cmocka_unit_test(round_trip_restores_every_algorithm_under_its_name),
      cmocka_unit_test(load_skips_fresh_and_unnamed_keys),
      cmocka_unit_test(truncation_at_every_offset_is_an_error_naming_it),
      cmocka_unit_test(a_flipped_bit_anywhere_is_an_error),
      cmocka_unit_test(a_damaged_file_resolves_no_name),
      cmocka_unit_test(a_wrong_magic_says_what_the_file_is_not),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
