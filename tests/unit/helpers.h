/*
 * helpers.h — what every unit test includes: cmocka, the public API, and
 * small helpers to build stores and limiters from policy strings.
 */
#ifndef SLUICE_TEST_HELPERS_H
#define SLUICE_TEST_HELPERS_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "sluice.h"

#define NS_PER_MS INT64_C(1000000)
#define NS_PER_S INT64_C(1000000000)
#define MS(x) ((int64_t)(x) * NS_PER_MS)
#define SEC(x) ((int64_t)(x) * NS_PER_S)

/* A fixed "now" well inside the valid range, on a whole-hour boundary. */
#define T0 (INT64_C(1767225600) * NS_PER_S) /* 2026-01-01T00:00:00Z */

static inline sl_policy policy_of(const char *spec) {
  sl_policy p;
  char err[256];
  int rc = sl_policy_parse(spec, &p, err, sizeof err);
  if (rc) fail_msg("policy '%s': %s", spec, err);
  return p;
}

/* A store with default options (random hash key) or the given cap. */
static inline sl_store *store_with_cap(size_t max_memory) {
  sl_store_options o;
  sl_store_options_init(&o);
  o.max_memory = max_memory;
  sl_store *s = NULL;
  assert_int_equal(sl_store_new(&o, &s), 0);
  return s;
}

static inline sl_limiter *limiter_of(sl_store *s, const char *spec) {
  sl_policy p = policy_of(spec);
  sl_limiter *lim = NULL;
  assert_int_equal(sl_limiter_new(s, &p, &lim), 0);
  return lim;
}

/* Takes `cost` for a NUL-terminated key and returns the decision. */
static inline sl_decision take(sl_limiter *lim, const char *key, int64_t cost,
                               int64_t now) {
  sl_decision d;
  int rc = sl_limiter_take(lim, key, strlen(key), cost, now, &d);
  if (rc) fail_msg("take(%s, %lld): %s", key, (long long)cost, sl_strerror(rc));
  return d;
}

/* The PRNG of every randomized test: deterministic for a given seed. */
static inline uint64_t splitmix64(uint64_t *x) {
  uint64_t z = (*x += UINT64_C(0x9e3779b97f4a7c15));
  z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
  z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
  return z ^ (z >> 31);
}

/* A fixed SipHash key, for tests whose outcome depends on placement. */
static inline const uint8_t *test_hash_key(void) {
  static const uint8_t hash_key[16] = {1, 2,  3,  4,  5,  6,  7,  8,
                                       9, 10, 11, 12, 13, 14, 15, 16};
  return hash_key;
}

/* A store with the fixed hash key, the given cap and shard count (0 =
   defaults). */
static inline sl_store *store_opts(size_t max_memory, unsigned shards) {
  sl_store_options o;
  sl_store_options_init(&o);
  o.max_memory = max_memory;
  o.shards = shards;
  o.hash_key = test_hash_key();
  sl_store *s = NULL;
  assert_int_equal(sl_store_new(&o, &s), 0);
  assert_non_null(s);
  return s;
}

static inline sl_store_stats stats_of(sl_store *s) {
  sl_store_stats st;
  sl_store_stats_get(s, &st);
  return st;
}

/* What a peek reports as remaining for a NUL-terminated key. */
static inline int64_t remaining(sl_limiter *lim, const char *key,
                                int64_t now) {
  return take(lim, key, 0, now).remaining;
}

static inline void assert_same_decision(const sl_decision *a,
                                        const sl_decision *b) {
  assert_int_equal(a->allowed, b->allowed);
  assert_int_equal(a->limit, b->limit);
  assert_int_equal(a->remaining, b->remaining);
  assert_int_equal(a->reset_ns, b->reset_ns);
  assert_int_equal(a->retry_after_ns, b->retry_after_ns);
  assert_int_equal(a->delay_ns, b->delay_ns);
}

#ifdef TEST_FAKE_CLOCK
/* The test's clock (base/clock.h's override, installed by
   fake_clock_install): the monotonic clock reads fake_ns, which the test
   moves; the wall clock stands at T0. */
#include "base/clock.h"
static int64_t fake_ns = SEC(1000);

static int64_t fake_mono_ns(void *ud) {
  (void)ud;
  return fake_ns;
}

static int64_t fake_wall_ns(void *ud) {
  (void)ud;
  return T0;
}

static inline void fake_clock_install(void) {
  static const clock_source fake = {fake_wall_ns, fake_mono_ns, NULL};
  clock_override(&fake);
}
#endif

#endif /* SLUICE_TEST_HELPERS_H */
