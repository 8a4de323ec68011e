/*
 * test_topk.c — the Space-Saving summary (base/topk.h) against exact
 * counts: on random streams, every count is an upper bound, count - err
 * a lower bound, the overestimate at most N/k, and every key above N/k is
 * held; the same after merging several summaries; a flooding key comes
 * first.
 */
#include "helpers.h"

#include "base/topk.h"

#define KEYS 5000

/* A small deterministic generator (xorshift64*). */
static uint64_t rng_state;
static uint64_t rng(void) {
  rng_state ^= rng_state >> 12;
  rng_state ^= rng_state << 25;
  rng_state ^= rng_state >> 27;
  return rng_state * UINT64_C(2685821657736338717);
}

/* A skewed key: low ids far more often (a rough Zipf: the minimum of
   three uniform draws, squared). */
static uint64_t skewed(void) {
  uint64_t a = rng() % KEYS, b = rng() % KEYS, c = rng() % KEYS;
  uint64_t m = a < b ? (a < c ? a : c) : (b < c ? b : c);
  return m * m / KEYS;
}

static size_t texts; /* text_of's calls: keys that took a counter */
static void text_of(void *ctx, char *buf, size_t len) {
  texts++;
  snprintf(buf, len, "key-%llu", (unsigned long long)*(uint64_t *)ctx);
}

/* The promises of topk.h for items out[0..n) of a summary (or a merge) of
   total weight N with k counters, against the exact counts. */
static void check_bounds(const topk_item *out, size_t n, const uint64_t *exact,
                         uint64_t N, size_t k) {
  int held[KEYS] = {0};
  for (size_t i = 0; i < n; i++) {
    uint64_t key = out[i].id - 1;
    assert_true(key < KEYS);
    held[key] = 1;
    assert_true(out[i].count >= exact[key]);
    assert_true(out[i].count - out[i].err <= exact[key]);
    assert_true(out[i].count - exact[key] <= N / k);
    if (i) assert_true(out[i].count <= out[i - 1].count);
    char want[32];
    snprintf(want, sizeof want, "key-%llu", (unsigned long long)key);
    assert_string_equal(out[i].text, want);
  }
  for (uint64_t key = 0; key < KEYS; key++)
    if (exact[key] * k > N) assert_true(held[key]);
}

/* Counts a stream of `len` keys in s (and exactly). */
static void feed(topk *s, uint64_t *exact, size_t len, int skew) {
  for (size_t i = 0; i < len; i++) {
    uint64_t key = skew ? skewed() : rng() % KEYS;
    uint64_t w = 1 + rng() % 3;
    exact[key] += w;
    topk_add(s, key + 1, w, text_of, &key);
  }
}

static void bounds_hold_on_random_streams(void **state) {
  (void)state;
  static const size_t ks[] = {1, 8, 32, 100};
  for (size_t t = 0; t < 40; t++) {
    rng_state = 0x9e3779b97f4a7c15u + t;
    size_t k = ks[t % 4];
    topk s;
    assert_int_equal(topk_init(&s, k), 0);
    uint64_t exact[KEYS] = {0};
    feed(&s, exact, 20000, t % 2);
    uint64_t N = 0;
    for (size_t i = 0; i < KEYS; i++) N += exact[i];
    assert_int_equal(s.total, N);
    topk_merge m = TOPK_MERGE_INIT;
    topk_merge_add(&m, &s);
    topk_item out[100];
    size_t n = topk_merge_top(&m, out, k);
    assert_int_equal(n, k);
    assert_false(m.oom);
    check_bounds(out, n, exact, N, k);
    topk_merge_free(&m);
    topk_free(&s);
  }
}

/* A spread load (every key about as light as the others) passes the
   filter seldom: plain Space-Saving would hand a counter over at nearly
   every arrival; the promises hold all the same. */
static void a_spread_load_seldom_takes_a_counter(void **state) {
  (void)state;
  rng_state = 0x51ed270b27a1f00du;
  enum { K = 32, LEN = 200000 };
  topk s;
  assert_int_equal(topk_init(&s, K), 0);
  uint64_t exact[KEYS] = {0};
  texts = 0;
  for (size_t i = 0; i < LEN; i++) {
    uint64_t key = rng() % KEYS;
    exact[key]++;
    topk_add(&s, key + 1, 1, text_of, &key);
  }
  assert_true(texts < LEN / 5);
  topk_merge m = TOPK_MERGE_INIT;
  topk_merge_add(&m, &s);
  topk_item out[K];
  check_bounds(out, topk_merge_top(&m, out, K), exact, LEN, K);
  /* A flood then still comes first, and the same after a new window. */
  for (int pass = 0; pass < 2; pass++) {
    uint64_t flood = 4242;
    for (size_t i = 0; i < 20000; i++) {
      uint64_t key = i % 4 ? rng() % KEYS : flood;
      exact[key]++;
      topk_add(&s, key + 1, 1, text_of, &key);
    }
    topk_merge_free(&m);
    topk_merge_add(&m, &s);
    assert_true(topk_merge_top(&m, out, 1) == 1);
    assert_string_equal(out[0].text, "key-4242");
    topk_clear(&s);
    memset(exact, 0, sizeof exact);
  }
  topk_merge_free(&m);
  topk_free(&s);
}

static void bounds_hold_after_a_merge(void **state) {
  (void)state;
  for (size_t t = 0; t < 10; t++) {
    rng_state = 0x243f6a8885a308d3u + t;
    enum { S = 4, K = 32 };
    topk s[S];
    uint64_t exact[KEYS] = {0};
    topk_merge m = TOPK_MERGE_INIT;
    for (size_t i = 0; i < S; i++) {
      assert_int_equal(topk_init(&s[i], K), 0);
      /* Each summary sees its own stream: skewed or not, of its length. */
      feed(&s[i], exact, 3000 + 2000 * i, (i + t) % 2);
      topk_merge_add(&m, &s[i]);
    }
    uint64_t N = 0;
    for (size_t i = 0; i < KEYS; i++) N += exact[i];
    assert_int_equal(m.total, N);
    topk_item out[S * K];
    size_t n = topk_merge_top(&m, out, S * K);
    check_bounds(out, n, exact, N, K);
    topk_merge_free(&m);
    for (size_t i = 0; i < S; i++) topk_free(&s[i]);
  }
}

static void a_flooding_key_comes_first(void **state) {
  (void)state;
  rng_state = 42;
  topk s;
  assert_int_equal(topk_init(&s, 16), 0);
  uint64_t exact[KEYS] = {0};
  for (size_t i = 0; i < 50000; i++) {
    /* One request in five is key 4242's; the rest spread over all. */
    uint64_t key = i % 5 == 0 ? 4242 : rng() % KEYS;
    exact[key]++;
    topk_add(&s, key + 1, 1, text_of, &key);
  }
  topk_merge m = TOPK_MERGE_INIT;
  topk_merge_add(&m, &s);
  topk_item out[3];
  assert_int_equal(topk_merge_top(&m, out, 3), 3);
  assert_string_equal(out[0].text, "key-4242");
  assert_true(out[0].count - out[0].err >= 10000 - 50000 / 16);
  topk_merge_free(&m);
  topk_free(&s);
}

static void clear_forgets_and_bad_sizes_fail(void **state) {
  (void)state;
  topk s;
  assert_int_equal(topk_init(&s, 0), -1);
  assert_int_equal(topk_init(&s, TOPK_MAX + 1), -1);
  assert_int_equal(topk_init(&s, 4), 0);
  uint64_t key = 7;
  topk_add(&s, 8, 5, text_of, &key);
  assert_int_equal(topk_floor(&s), 0); /* not full */
  topk_clear(&s);
  assert_int_equal(s.total, 0);
  topk_merge m = TOPK_MERGE_INIT;
  topk_merge_add(&m, &s);
  topk_item out[4];
  assert_int_equal(topk_merge_top(&m, out, 4), 0);
  topk_merge_free(&m);
  /* Every counter taken, then many more keys: the index stays sound (each
     key found again is counted once more, never twice). */
  for (uint64_t i = 0; i < 10000; i++) {
    uint64_t k2 = i % 7;
    topk_add(&s, k2 + 1, 1, text_of, &k2);
  }
  assert_int_equal(s.n, 4);
  assert_int_equal(s.total, 10000);
  topk_free(&s);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(bounds_hold_on_random_streams),
      cmocka_unit_test(bounds_hold_after_a_merge),
      cmocka_unit_test(a_spread_load_seldom_takes_a_counter),
      cmocka_unit_test(a_flooding_key_comes_first),
      cmocka_unit_test(clear_forgets_and_bad_sizes_fail),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
