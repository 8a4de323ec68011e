/*
 * test_script.c — the C side of exact mode's Redis script
 * (src/fleet/script.c): which policies the script takes (its exactness
 * bounds, to the unit), the embedded script and its SHA1, the EVALSHA that
 * rs_format builds (merging, the constants, every error), and rs_parse on
 * replies well-formed and not. The script's decisions themselves are
 * checked against the engine by tests/tools/parity.c
 * (tests/integration/redis_parity.sh), which needs a redis-server.
 */
#include "helpers.h"

#include <openssl/sha.h>
#include <pthread.h>

#include "fleet/script.h"

/* ---- local helpers ---- */

static sl_policy hand(sl_algo algo, uint32_t limit, uint32_t burst,
                      int64_t period_ns) {
  sl_policy p = {algo, limit, burst, period_ns};
  return p;
}

static void accepts(const sl_policy *p) {
  char err[512] = "";
  int rc = rs_policy_check(p, err, sizeof err);
  if (rc) {
    char spec[96];
    sl_policy_format(p, spec, sizeof spec);
    fail_msg("%s rejected: %s", spec, err);
  }
}

/* Rejected with SL_EPOLICY and a message holding each of the words. */
static void rejects(const sl_policy *p, const char *w1, const char *w2) {
  char err[512] = "";
  assert_int_equal(rs_policy_check(p, err, sizeof err), SL_EPOLICY);
  if (w1 && !strstr(err, w1)) fail_msg("'%s' lacks '%s'", err, w1);
  if (w2 && !strstr(err, w2)) fail_msg("'%s' lacks '%s'", err, w2);
}

static void accepts_spec(const char *spec) {
  sl_policy p = policy_of(spec);
  accepts(&p);
}

static void rejects_spec(const char *spec, const char *w) {
  sl_policy p = policy_of(spec);
  rejects(&p, spec, w);
}

/* The words of a formatted command, read back with hiredis's own RESP
   reader (a command is an array of bulk strings). */
static redisReply *words_of(const char *cmd, size_t len) {
  redisReader *rd = redisReaderCreate();
  assert_non_null(rd);
  assert_int_equal(redisReaderFeed(rd, cmd, len), REDIS_OK);
  void *r = NULL;
  assert_int_equal(redisReaderGetReply(rd, &r), REDIS_OK);
  assert_non_null(r);
  redisReaderFree(rd);
  redisReply *w = r;
  assert_int_equal(w->type, REDIS_REPLY_ARRAY);
  return w;
}

static void assert_word(const redisReply *w, size_t i, const char *want) {
  assert_true(i < w->elements);
  assert_int_equal(w->element[i]->type, REDIS_REPLY_STRING);
  if (w->element[i]->len != strlen(want) ||
      memcmp(w->element[i]->str, want, strlen(want)) != 0)
    fail_msg("word %zu is '%.*s', want '%s'", i, (int)w->element[i]->len,
             w->element[i]->str, want);
}

/* Word i must be decide.lua's four little-endian int64 (cost and the
   policy's constants). */
static void assert_nums(const redisReply *w, size_t i, int64_t a, int64_t b,
                        int64_t c, int64_t d) {
  assert_true(i < w->elements);
  assert_int_equal(w->element[i]->type, REDIS_REPLY_STRING);
  assert_int_equal(w->element[i]->len, 32);
  const unsigned char *p = (const unsigned char *)w->element[i]->str;
  const int64_t want[4] = {a, b, c, d};
  for (int k = 0; k < 4; k++) {
    uint64_t v = 0;
    for (int byte = 7; byte >= 0; byte--) v = v << 8 | p[8 * k + byte];
    if ((int64_t)v != want[k])
      fail_msg("word %zu, number %d: %lld, want %lld", i, k, (long long)v,
               (long long)want[k]);
  }
}

/* rs_format of checks[0..n), expected to succeed; the words. */
static redisReply *format_ok(const rs_check *c, size_t n, int dry,
                             int64_t now, rs_call *call) {
  char *cmd = NULL;
  size_t len = 0;
  int rc = rs_format(c, n, dry, now, call, &cmd, &len);
  if (rc) fail_msg("rs_format: %s", sl_strerror(rc));
  assert_non_null(cmd);
  redisReply *w = words_of(cmd, len);
  free(cmd);
  return w;
}

static int format_rc(const rs_check *c, size_t n, int dry, int64_t now) {
  rs_call call;
  char *cmd = (char *)"untouched";
  size_t len = 7;
  int rc = rs_format(c, n, dry, now, &call, &cmd, &len);
  if (rc) {
    assert_null(cmd);
    assert_int_equal(len, 0);
  } else {
    free(cmd);
  }
  return rc;
}

static rs_check chk(const sl_policy *p, const char *key, int64_t cost,
                    int shadow) {
  rs_check c = {.policy = p, .key = key, .key_len = key ? strlen(key) : 0,
                .cost = cost, .shadow = shadow};
  return c;
}

/* A reply tree from RESP text (the script's reply as Redis sends it). */
/* A reply from its n bytes of RESP (binary strings included). */
static redisReply *reply_n(const char *resp, size_t n) {
  redisReader *rd = redisReaderCreate();
  assert_non_null(rd);
  assert_int_equal(redisReaderFeed(rd, resp, n), REDIS_OK);
  void *r = NULL;
  assert_int_equal(redisReaderGetReply(rd, &r), REDIS_OK);
  assert_non_null(r);
  redisReaderFree(rd);
  return r;
}

static redisReply *reply_of(const char *resp) {
  return reply_n(resp, strlen(resp));
}

static rs_call call_of(size_t n, size_t nu, const uint8_t *map) {
  rs_call c;
  memset(&c, 0, sizeof c);
  c.n = n;
  c.nu = nu;
  memcpy(c.map, map, n);
  return c;
}

/* rs_parse of RESP text under call; returns its code. */
static int parse_rc(const rs_call *call, const char *resp) {
  redisReply *r = reply_of(resp);
  sl_decision out[RS_CHECKS_MAX];
  int allowed = 7;
  int64_t now = 0;
  int rc = rs_parse(call, r, out, &allowed, &now);
  if (rc) assert_int_equal(allowed, 0);
  freeReplyObject(r);
  return rc;
}

/* One key's figures as the script sends them. */
#define KEY6(a, l, r, re, ra, de) \
  ":" #a "\r\n:" #l "\r\n:" #r "\r\n:" #re "\r\n:" #ra "\r\n:" #de "\r\n"
#define NOW "$19\r\n1767225600123456789\r\n"

/* ---- the script and its SHA1 ---- */

static void script_is_the_embedded_lua(void **state) {
  (void)state;
  size_t len = 0;
  const char *s = rs_script(&len);
  assert_non_null(s);
  assert_true(len > 1000);
  assert_memory_equal(s, "--[[", 4);
  assert_non_null(strstr(s, "call('TIME')"));
  assert_int_equal(s[len], '\0'); /* a NUL follows, outside len */
  assert_int_equal(strlen(s), len);
}

static void sha_is_the_scripts_sha1_in_hex(void **state) {
  (void)state;
  size_t len;
  const char *s = rs_script(&len);
  unsigned char md[SHA_DIGEST_LENGTH];
  SHA1((const unsigned char *)s, len, md);
  char hex[41];
  for (int i = 0; i < SHA_DIGEST_LENGTH; i++)
    snprintf(hex + 2 * i, 3, "%02x", md[i]);
  assert_string_equal(rs_script_sha(), hex);
  assert_ptr_equal(rs_script_sha(), rs_script_sha()); /* computed once */
}

static void *sha_thread(void *arg) {
  *(const char **)arg = rs_script_sha();
  return NULL;
}

static void sha_is_safe_from_many_threads(void **state) {
  (void)state;
  pthread_t th[4];
  const char *got[4];
  for (int i = 0; i < 4; i++)
    assert_int_equal(pthread_create(&th[i], NULL, sha_thread, &got[i]), 0);
  for (int i = 0; i < 4; i++) {
    pthread_join(th[i], NULL);
    assert_int_equal(strlen(got[i]), 40);
    assert_string_equal(got[i], rs_script_sha());
  }
}

/* ---- rs_policy_check ---- */

static void everyday_policies_are_accepted(void **state) {
  (void)state;
  accepts_spec("token_bucket:10/s");
  accepts_spec("token_bucket:100/s:burst=250");
  accepts_spec("leaky_bucket:1/ms");
  accepts_spec("gcra:1000000/d");
  accepts_spec("gcra:1000000/31d");
  accepts_spec("fixed_window:1000000/d");
  accepts_spec("sliding_window:1000000/d");
  accepts_spec("sliding_log:100/m");
  accepts_spec("token_bucket:4294967295/ms");
}

static void windows_take_any_valid_period_but_sliding_window(void **state) {
  (void)state;
  accepts_spec("fixed_window:4294967295/3650d");
  accepts_spec("sliding_log:7/3650d");
  accepts_spec("sliding_window:4294967295/52d");
  rejects_spec("sliding_window:10/53d", "2^52");
}

static void sliding_window_period_bound_is_2_to_52_ns(void **state) {
  (void)state;
  /* 2^52 ns = 4503599627.37 ms: the last whole ms in, the next one out. */
  sl_policy in = hand(SL_SLIDING_WINDOW, 4294967295u, 0,
                      INT64_C(4503599627) * 1000000);
  sl_policy out = hand(SL_SLIDING_WINDOW, 1, 0, INT64_C(4503599628) * 1000000);
  accepts(&in);
  rejects(&out, "sliding_window:1/4503599628ms", "--store memory");
}

static void bucket_bound_is_exact_to_the_unit(void **state) {
  (void)state;
  /* 2*(burst*Wg + Lg) == 2^53 exactly: Lg = 1024, Wg = 2097153. */
  sl_policy at = hand(SL_TOKEN_BUCKET, 1024000000u, 2147482624u,
                      INT64_C(2097153) * 1000000);
  sl_policy over = at;
  over.burst++;
  accepts(&at);
  rejects(&over, "2^53", "--store memory");
  at.algo = over.algo = SL_GCRA;
  accepts(&at);
  rejects(&over, "gcra:", NULL);
  at.algo = over.algo = SL_LEAKY_BUCKET;
  accepts(&at);
  rejects(&over, "leaky_bucket:", NULL);
}

static void odd_limits_over_long_periods_hit_the_bound(void **state) {
  (void)state;
  /* 7/d: Lg = 7, Wg = 8.64e13: burst 52 fits under 2^53, 53 does not. */
  accepts_spec("token_bucket:7/d:burst=52");
  rejects_spec("token_bucket:7/d:burst=53", "burst=52 fits");
  rejects_spec("token_bucket:7/30d", "exceeds what the Redis script");
  rejects_spec("gcra:999/31d", "burst=45 fits");
  accepts_spec("gcra:999/31d:burst=45");
  rejects_spec("gcra:999/31d:burst=46", "ticks");
}

static void invalid_policy_fails_as_the_validator_says(void **state) {
  (void)state;
  sl_policy p = hand(SL_GCRA, 0, 0, 1000000000);
  char err[256] = "";
  assert_int_equal(rs_policy_check(&p, err, sizeof err), SL_EPOLICY);
  assert_non_null(strstr(err, "limit"));
  p = hand(SL_FIXED_WINDOW, 5, 0, 1500); /* not whole ms */
  assert_int_equal(rs_policy_check(&p, NULL, 0), SL_EPOLICY);
  assert_int_equal(rs_policy_check(NULL, err, sizeof err), SL_EPOLICY);
}

static void policy_check_truncates_its_message(void **state) {
  (void)state;
  sl_policy p = policy_of("token_bucket:7/30d");
  char err[16];
  memset(err, 'x', sizeof err);
  assert_int_equal(rs_policy_check(&p, err, sizeof err), SL_EPOLICY);
  assert_int_equal(strlen(err), sizeof err - 1);
  assert_int_equal(rs_policy_check(&p, err, 0), SL_EPOLICY);
}

/* ---- rs_format ---- */

static void one_bucket_check_sends_its_ticks(void **state) {
  (void)state;
  sl_policy p = policy_of("token_bucket:10/s:burst=25");
  rs_check c = chk(&p, "rl:user:42", 3, 0);
  rs_call call;
  redisReply *w = format_ok(&c, 1, 0, T0 + 123, &call);
  assert_int_equal(w->elements, 3 + 1 + 2 + 3);
  assert_word(w, 0, "EVALSHA");
  assert_word(w, 1, rs_script_sha());
  assert_word(w, 2, "1");
  assert_word(w, 3, "rl:user:42");
  assert_word(w, 4, "1767225600000000123");
  assert_word(w, 5, "p0"); /* decide; the module's reply packed */
  assert_word(w, 6, "0"); /* token_bucket */
  assert_word(w, 7, "0"); /* not shadow */
  /* cost, cap = 25 * Wg, Lg = 10 / gcd(10, 1e9), Wg = 1e9 / gcd */
  assert_nums(w, 8, 3, 2500000000, 1, 100000000);
  assert_int_equal(call.n, 1);
  assert_int_equal(call.nu, 1);
  assert_int_equal(call.map[0], 0);
  freeReplyObject(w);
}

static void window_check_sends_limit_and_period_in_ms(void **state) {
  (void)state;
  sl_policy p = policy_of("sliding_window:1000/h");
  rs_check c = chk(&p, "k", 1, 1);
  rs_call call;
  redisReply *w = format_ok(&c, 1, 1, -1, &call);
  assert_word(w, 4, "");  /* Redis TIME */
  assert_word(w, 5, "p1"); /* dry */
  assert_word(w, 6, "4");
  assert_word(w, 7, "1"); /* shadow */
  assert_nums(w, 8, 1, 1000, 3600000, 0);
  freeReplyObject(w);
}

static void repeated_keys_merge_costs_and_shadow(void **state) {
  (void)state;
  sl_policy a = policy_of("gcra:10/s"), b = policy_of("fixed_window:5/m");
  rs_check c[5] = {chk(&a, "x", 1, 1), chk(&b, "y", 2, 1),
                   chk(&a, "x", 3, 0), chk(&b, "y", 0, 1),
                   chk(&a, "z", 0, 1)};
  rs_call call;
  redisReply *w = format_ok(c, 5, 0, 0, &call);
  assert_int_equal(call.n, 5);
  assert_int_equal(call.nu, 3);
  static const uint8_t want[5] = {0, 1, 0, 1, 2};
  assert_memory_equal(call.map, want, 5);
  assert_int_equal(w->elements, 3 + 3 + 2 + 9);
  assert_word(w, 2, "3");
  assert_word(w, 3, "x");
  assert_word(w, 4, "y");
  assert_word(w, 5, "z");
  assert_word(w, 6, "0");     /* now = 0 is a clock, not TIME */
  assert_word(w, 8 + 0, "5"); /* x: gcra */
  assert_word(w, 8 + 1, "0"); /*    shadow only if every part is */
  assert_nums(w, 8 + 2, 4, 1000000000, 1, 100000000); /* 1 + 3 */
  assert_word(w, 11 + 0, "2"); /* y: fixed_window */
  assert_word(w, 11 + 1, "1");
  assert_nums(w, 11 + 2, 2, 5, 60000, 0);
  assert_word(w, 14 + 1, "1"); /* z */
  assert_nums(w, 14 + 2, 0, 1000000000, 1, 100000000);
  freeReplyObject(w);
}

static void empty_key_is_a_key(void **state) {
  (void)state;
  sl_policy p = policy_of("gcra:10/s");
  rs_check c[2] = {chk(&p, NULL, 1, 0), chk(&p, "", 1, 0)};
  rs_call call;
  redisReply *w = format_ok(c, 2, 0, 5, &call);
  assert_int_equal(call.nu, 1);
  assert_word(w, 3, "");
  freeReplyObject(w);
}

static void merged_cost_over_the_largest_is_ecost(void **state) {
  (void)state;
  sl_policy p = policy_of("token_bucket:10/s:burst=4");
  rs_check one = chk(&p, "k", 5, 0);
  assert_int_equal(format_rc(&one, 1, 0, 0), SL_ECOST);
  rs_check c[3] = {chk(&p, "k", 2, 0), chk(&p, "j", 4, 0),
                   chk(&p, "k", 3, 1)};
  assert_int_equal(format_rc(c, 3, 0, 0), SL_ECOST);
  c[2].cost = 2; /* 2 + 2 = 4: the whole burst is fine */
  assert_int_equal(format_rc(c, 3, 0, 0), 0);
  sl_policy w = policy_of("sliding_log:3/s");
  rs_check d[2] = {chk(&w, "k", 3, 0), chk(&w, "k", 1, 0)};
  assert_int_equal(format_rc(d, 2, 1, 0), SL_ECOST);
}

static void bad_arguments_are_einval(void **state) {
  (void)state;
  sl_policy p = policy_of("gcra:10/s");
  rs_check c = chk(&p, "k", 1, 0);
  rs_call call;
  char *cmd;
  size_t len;
  assert_int_equal(rs_format(NULL, 1, 0, 0, &call, &cmd, &len), SL_EINVAL);
  assert_int_equal(rs_format(&c, 0, 0, 0, &call, &cmd, &len), SL_EINVAL);
  assert_int_equal(rs_format(&c, 1, 0, 0, NULL, &cmd, &len), SL_EINVAL);
  assert_int_equal(rs_format(&c, 1, 0, 0, &call, NULL, &len), SL_EINVAL);
  assert_int_equal(rs_format(&c, 1, 0, 0, &call, &cmd, NULL), SL_EINVAL);
  rs_check many[RS_CHECKS_MAX + 1];
  for (size_t i = 0; i <= RS_CHECKS_MAX; i++) many[i] = c;
  assert_int_equal(format_rc(many, RS_CHECKS_MAX + 1, 0, 0), SL_EINVAL);
  assert_int_equal(format_rc(many, RS_CHECKS_MAX, 0, 0), SL_ECOST);
  for (size_t i = 0; i < RS_CHECKS_MAX; i++) many[i].cost = 0;
  assert_int_equal(format_rc(many, RS_CHECKS_MAX, 0, 0), 0);

  rs_check neg = chk(&p, "k", -1, 0);
  assert_int_equal(format_rc(&neg, 1, 0, 0), SL_EINVAL);
  rs_check nokey = {.policy = &p, .key = NULL, .key_len = 3, .cost = 1};
  assert_int_equal(format_rc(&nokey, 1, 0, 0), SL_EINVAL);
  rs_check nopol = chk(NULL, "k", 1, 0);
  assert_int_equal(format_rc(&nopol, 1, 0, 0), SL_EINVAL);
  assert_int_equal(format_rc(&c, 1, 0, -2), SL_EINVAL);
  assert_int_equal(format_rc(&c, 1, 0, SL_TIME_MAX_NS), SL_EINVAL);
  assert_int_equal(format_rc(&c, 1, 0, SL_TIME_MAX_NS - 1), 0);
}

static void one_key_under_two_policies_is_einval(void **state) {
  (void)state;
  sl_policy a = policy_of("gcra:10/s"), b = policy_of("gcra:10/s:burst=11");
  rs_check c[2] = {chk(&a, "k", 1, 0), chk(&b, "k", 1, 0)};
  assert_int_equal(format_rc(c, 2, 0, 0), SL_EINVAL);
  /* burst 0 and burst = limit are one policy */
  sl_policy d = hand(SL_GCRA, 10, 0, 1000000000), e = hand(SL_GCRA, 10, 10, 1000000000);
  rs_check f[2] = {chk(&d, "k", 1, 0), chk(&e, "k", 1, 0)};
  assert_int_equal(format_rc(f, 2, 0, 0), 0);
}

static void policy_the_script_cannot_decide_is_epolicy(void **state) {
  (void)state;
  sl_policy big = policy_of("token_bucket:7/30d");
  rs_check c = chk(&big, "k", 1, 0);
  assert_int_equal(format_rc(&c, 1, 0, 0), SL_EPOLICY);
  sl_policy bad = hand(SL_TOKEN_BUCKET, 0, 0, 1000000);
  c.policy = &bad;
  assert_int_equal(format_rc(&c, 1, 0, 0), SL_EPOLICY);
}

static void key_over_4096_bytes_is_ekey(void **state) {
  (void)state;
  sl_policy p = policy_of("gcra:10/s");
  char *key = malloc(4097);
  assert_non_null(key);
  memset(key, 'k', 4097);
  rs_check c = {.policy = &p, .key = key, .key_len = 4096, .cost = 1};
  assert_int_equal(format_rc(&c, 1, 0, 0), 0);
  c.key_len = 4097;
  assert_int_equal(format_rc(&c, 1, 0, 0), SL_EKEY);
  free(key);
}

/* ---- rs_parse ---- */

static void reply_fills_each_check_from_its_key(void **state) {
  (void)state;
  static const uint8_t map[3] = {0, 1, 0};
  rs_call call = call_of(3, 2, map);
  redisReply *r = reply_of("*14\r\n" NOW ":0\r\n" KEY6(1, 25, 20, 500, 0, 0)
                               KEY6(0, 5, 0, 59000000000, 1000, 7));
  sl_decision out[3];
  int allowed = -1;
  int64_t now = 0;
  assert_int_equal(rs_parse(&call, r, out, &allowed, &now), 0);
  assert_int_equal(allowed, 0);
  assert_int_equal(now, INT64_C(1767225600123456789));
  sl_decision a = {1, 25, 20, 500, 0, 0, 0},
              b = {0, 5, 0, 59000000000, 1000, 7, 0};
  assert_same_decision(&out[0], &a);
  assert_same_decision(&out[1], &b);
  assert_same_decision(&out[2], &a);
  /* now_ns may be NULL */
  assert_int_equal(rs_parse(&call, r, out, &allowed, NULL), 0);
  freeReplyObject(r);
}

/* ---- batches: several requests in one EVALSHA ---- */

/* rs_prepare of checks[0..n), expected to succeed. */
static rs_request prepare_ok(const rs_check *c, size_t n, rs_call *call) {
  rs_request q = {call, NULL, 0, 0};
  char *words = NULL;
  int rc = rs_prepare(c, n, call, &words, &q.keys_len, &q.len);
  if (rc) fail_msg("rs_prepare: %s", sl_strerror(rc));
  q.words = words;
  return q;
}

static void batch_puts_keys_first_and_one_byte_per_request(void **state) {
  (void)state;
  sl_policy a = policy_of("gcra:10/s"), b = policy_of("fixed_window:5/m");
  /* request 1: x (twice: merged) and y; request 2: x again (its own) */
  rs_check c1[3] = {chk(&a, "x", 1, 0), chk(&b, "y", 2, 1),
                    chk(&a, "x", 3, 0)};
  rs_check c2[1] = {chk(&a, "x", 1, 0)};
  rs_call k1, k2;
  rs_request q[2] = {prepare_ok(c1, 3, &k1), prepare_ok(c2, 1, &k2)};
  char *cmd = NULL;
  size_t len = 0;
  assert_int_equal(rs_format_batch(q, 2, 0, T0, &cmd, &len), 0);
  redisReply *w = words_of(cmd, len);
  assert_int_equal(w->elements, 3 + 3 + 2 + 9);
  assert_word(w, 0, "EVALSHA");
  assert_word(w, 2, "3");
  assert_word(w, 3, "x");
  assert_word(w, 4, "y");
  assert_word(w, 5, "x");
  assert_word(w, 6, "1767225600000000000");
  assert_word(w, 7, "pg\x02\x01"); /* 2 keys, then 1 */
  assert_word(w, 8, "5");
  assert_nums(w, 8 + 2, 4, 1000000000, 1, 100000000); /* x: 1 + 3 */
  assert_word(w, 11, "2");
  assert_word(w, 11 + 1, "1");
  assert_word(w, 14, "5");
  assert_nums(w, 14 + 2, 1, 1000000000, 1, 100000000);
  /* the reply: now, then (allowed, 6 per key) per request */
  assert_int_equal(k1.at, 1);
  assert_int_equal(k2.at, 1 + 1 + 12);
  assert_int_equal(k1.elements, 1 + 2 + 18);
  assert_int_equal(k2.elements, k1.elements);
  freeReplyObject(w);
  free(cmd);
  /* one request alone is rs_format's command, byte for byte */
  char *one = NULL, *ref = NULL;
  size_t one_len = 0, ref_len = 0;
  rs_call k3;
  assert_int_equal(rs_format_batch(q, 1, 1, -1, &one, &one_len), 0);
  assert_int_equal(rs_format(c1, 3, 1, -1, &k3, &ref, &ref_len), 0);
  assert_int_equal(one_len, ref_len);
  assert_memory_equal(one, ref, ref_len);
  assert_int_equal(k1.at, 1);
  assert_int_equal(k1.elements, 2 + 12);
  free(one);
  free(ref);
  free((char *)q[0].words);
  free((char *)q[1].words);
}

static void batch_errors_are_einval(void **state) {
  (void)state;
  sl_policy a = policy_of("gcra:10/s");
  rs_check c = chk(&a, "x", 1, 0);
  rs_call k[RS_BATCH_MAX + 1];
  rs_request q[RS_BATCH_MAX + 1];
  for (size_t i = 0; i <= RS_BATCH_MAX; i++) q[i] = prepare_ok(&c, 1, &k[i]);
  char *cmd = (char *)"untouched";
  size_t len = 3;
  assert_int_equal(rs_format_batch(q, 0, 0, -1, &cmd, &len), SL_EINVAL);
  assert_null(cmd);
  assert_int_equal(len, 0);
  assert_int_equal(rs_format_batch(q, 2, 1, -1, &cmd, &len), SL_EINVAL);
  assert_int_equal(rs_format_batch(q, RS_BATCH_MAX + 1, 0, -1, &cmd, &len),
                   SL_EINVAL);
  assert_int_equal(rs_format_batch(NULL, 1, 0, -1, &cmd, &len), SL_EINVAL);
  assert_int_equal(rs_format_batch(q, 1, 0, -2, &cmd, &len), SL_EINVAL);
  assert_int_equal(rs_format_batch(q, RS_BATCH_MAX, 0, -1, &cmd, &len), 0);
  assert_int_equal(k[RS_BATCH_MAX - 1].at, 1 + 7 * (RS_BATCH_MAX - 1));
  free(cmd);
  /* rs_prepare refuses what rs_format refuses */
  rs_check big = chk(&a, "x", 11, 0);
  char *words = (char *)"untouched";
  size_t kl, wl;
  assert_int_equal(rs_prepare(&big, 1, &k[0], &words, &kl, &wl), SL_ECOST);
  assert_null(words);
  assert_int_equal(rs_prepare(&c, 0, &k[0], &words, &kl, &wl), SL_EINVAL);
  for (size_t i = 0; i <= RS_BATCH_MAX; i++) free((char *)q[i].words);
}

static void batch_reply_is_read_at_each_request(void **state) {
  (void)state;
  static const uint8_t map1[2] = {0, 0}, map2[1] = {0};
  rs_call k1 = call_of(2, 1, map1), k2 = call_of(1, 1, map2);
  k1.at = 1;
  k2.at = 8;
  k1.elements = k2.elements = 15;
  const char *resp = "*15\r\n" NOW ":1\r\n" KEY6(1, 25, 20, 500, 0, 0)
      ":0\r\n" KEY6(0, 5, 0, 59000000000, 1000, 7);
  redisReply *r = reply_of(resp);
  sl_decision out[2];
  int allowed = -1;
  assert_int_equal(rs_parse(&k1, r, out, &allowed, NULL), 0);
  assert_int_equal(allowed, 1);
  sl_decision a = {1, 25, 20, 500, 0, 0, 0},
              b = {0, 5, 0, 59000000000, 1000, 7, 0};
  assert_same_decision(&out[0], &a);
  assert_same_decision(&out[1], &a);
  assert_int_equal(rs_parse(&k2, r, out, &allowed, NULL), 0);
  assert_int_equal(allowed, 0);
  assert_same_decision(&out[0], &b);
  freeReplyObject(r);
  /* a place past the reply's end, or a reply of another length */
  k2.at = 9;
  assert_int_equal(parse_rc(&k2, resp), SL_EINVAL);
  k2.at = 8;
  k2.elements = 21;
  assert_int_equal(parse_rc(&k2, resp), SL_EINVAL);
}

/* RS_FORCE: "f" and a byte per request, even for one request; costs above
   the burst pass rs_prepare_force (not rs_prepare); the reply's level is
   signed for a forced call only. */
static void force_mode_formats_f_and_reads_signed_levels(void **state) {
  (void)state;
  sl_policy a = policy_of("gcra:10/s:burst=5");
  rs_check over = chk(&a, "x", 12, 0);
  rs_call k;
  rs_request q = {&k, NULL, 0, 0};
  char *words = NULL;
  assert_int_equal(rs_prepare(&over, 1, &k, &words, &q.keys_len, &q.len),
                   SL_ECOST);
  assert_int_equal(
      rs_prepare_force(&over, 1, &k, &words, &q.keys_len, &q.len), 0);
  q.words = words;
  char *cmd = NULL;
  size_t len = 0;
  assert_int_equal(rs_format_batch(&q, 1, RS_FORCE, -1, &cmd, &len), 0);
  redisReply *w = words_of(cmd, len);
  assert_word(w, 4, "");
  assert_word(w, 5, "f\x01");
  assert_nums(w, 5 + 3, 12, 500000000, 1, 100000000);
  assert_int_equal(k.force, 1);
  freeReplyObject(w);
  free(cmd);
  /* the reply: now, then (level, limit) '<i8i8' per key: level -7 (owed),
     read signed, limit 5 */
  static const char resp[] = "*2\r\n" NOW "$16\r\n"
      "\xf9\xff\xff\xff\xff\xff\xff\xff\x05\0\0\0\0\0\0\0\r\n";
  redisReply *r = reply_n(resp, sizeof resp - 1);
  sl_decision out;
  int allowed = 0;
  assert_int_equal(rs_parse(&k, r, &out, &allowed, NULL), 0);
  assert_int_equal(allowed, 1);
  assert_int_equal(out.allowed, 1);
  assert_int_equal(out.remaining, -7);
  assert_int_equal(out.limit, 5);
  assert_int_equal(out.reset_ns + out.retry_after_ns + out.delay_ns, 0);
  /* the same reply to an ordinary call is malformed */
  assert_int_equal(rs_format_batch(&q, 1, RS_DECIDE, -1, &cmd, &len), 0);
  free(cmd);
  assert_int_equal(k.force, 0);
  assert_int_equal(rs_parse(&k, r, &out, &allowed, NULL), SL_EINVAL);
  freeReplyObject(r);
  /* a forced reply of another length is malformed */
  k.force = 1;
  rs_call_alone(&k);
  static const char wrong[] = "*2\r\n" NOW "$8\r\n\x05\0\0\0\0\0\0\0\r\n";
  r = reply_n(wrong, sizeof wrong - 1);
  assert_int_equal(rs_parse(&k, r, &out, &allowed, NULL), SL_EINVAL);
  freeReplyObject(r);
  /* RS_DRY takes one request; an unknown mode none */
  assert_int_equal(rs_format_batch(&q, 1, 5, -1, &cmd, &len), SL_EINVAL);
  /* a lease operation needs a lease (concurrency keys) */
  assert_int_equal(rs_format_batch(&q, 1, RS_RELEASE, -1, &cmd, &len), SL_EINVAL);
  free(words);
}

static void durations_may_come_as_decimal_strings(void **state) {
  (void)state;
  static const uint8_t map[1] = {0};
  rs_call call = call_of(1, 1, map);
  redisReply *r = reply_of("*8\r\n$1\r\n0\r\n:1\r\n:1\r\n:7\r\n:0\r\n"
                           "$16\r\n9007199254740993\r\n:0\r\n"
                           "$19\r\n4611686018427387904\r\n");
  sl_decision out[1];
  int allowed;
  int64_t now = -1;
  assert_int_equal(rs_parse(&call, r, out, &allowed, &now), 0);
  assert_int_equal(now, 0);
  assert_int_equal(allowed, 1);
  assert_int_equal(out[0].limit, 7);
  assert_int_equal(out[0].reset_ns, INT64_C(9007199254740993));
  assert_int_equal(out[0].retry_after_ns, 0);
  assert_int_equal(out[0].delay_ns, INT64_C(4611686018427387904));
  freeReplyObject(r);
}

static void malformed_replies_are_einval(void **state) {
  (void)state;
  static const uint8_t map[1] = {0};
  rs_call c = call_of(1, 1, map);
  const char *good = "*8\r\n" NOW ":1\r\n" KEY6(1, 10, 9, 100, 0, 0);
  assert_int_equal(parse_rc(&c, good), 0);
  /* not an array, or the wrong length */
  assert_int_equal(parse_rc(&c, "-ERR boom\r\n"), SL_EINVAL);
  assert_int_equal(parse_rc(&c, ":1\r\n"), SL_EINVAL);
  assert_int_equal(parse_rc(&c, "$-1\r\n"), SL_EINVAL);
  assert_int_equal(parse_rc(&c, "*0\r\n"), SL_EINVAL);
  assert_int_equal(parse_rc(&c, "*-1\r\n"), SL_EINVAL);
  assert_int_equal(parse_rc(&c, "*7\r\n" NOW ":1\r\n:1\r\n:10\r\n:9\r\n"
                                ":100\r\n:0\r\n"),
                   SL_EINVAL);
  assert_int_equal(parse_rc(&c, "*9\r\n" NOW ":1\r\n" KEY6(1, 10, 9, 100, 0, 0)
                                ":0\r\n"),
                   SL_EINVAL);
  /* the clock */
  assert_int_equal(parse_rc(&c, "*8\r\n:5\r\n:1\r\n" KEY6(1, 10, 9, 100, 0, 0)),
                   0);
  assert_int_equal(parse_rc(&c, "*8\r\n:-5\r\n:1\r\n" KEY6(1, 10, 9, 100, 0, 0)),
                   SL_EINVAL);
  assert_int_equal(parse_rc(&c, "*8\r\n$0\r\n\r\n:1\r\n" KEY6(1, 10, 9, 100, 0, 0)),
                   SL_EINVAL);
  assert_int_equal(parse_rc(&c, "*8\r\n$2\r\n1x\r\n:1\r\n" KEY6(1, 10, 9, 100, 0, 0)),
                   SL_EINVAL);
  assert_int_equal(parse_rc(&c, "*8\r\n$19\r\n4611686018427387904\r\n:1\r\n"
                                KEY6(1, 10, 9, 100, 0, 0)),
                   SL_EINVAL); /* 2^62: past the valid times */
  assert_int_equal(parse_rc(&c, "*8\r\n$-1\r\n:1\r\n" KEY6(1, 10, 9, 100, 0, 0)),
                   SL_EINVAL);
  /* the overall answer and the flags: 0 or 1, integers */
  assert_int_equal(parse_rc(&c, "*8\r\n" NOW ":2\r\n" KEY6(1, 10, 9, 100, 0, 0)),
                   SL_EINVAL);
  assert_int_equal(parse_rc(&c, "*8\r\n" NOW "$1\r\n1\r\n" KEY6(1, 10, 9, 100, 0, 0)),
                   SL_EINVAL);
  assert_int_equal(parse_rc(&c, "*8\r\n" NOW ":1\r\n" KEY6(-1, 10, 9, 100, 0, 0)),
                   SL_EINVAL);
  assert_int_equal(parse_rc(&c, "*8\r\n" NOW ":1\r\n$1\r\n1\r\n:10\r\n:9\r\n"
                                ":100\r\n:0\r\n:0\r\n"),
                   SL_EINVAL);
  /* limit 1 .. 2^32-1, remaining >= 0, durations >= 0 */
  assert_int_equal(parse_rc(&c, "*8\r\n" NOW ":1\r\n" KEY6(1, 0, 0, 100, 0, 0)),
                   SL_EINVAL);
  assert_int_equal(parse_rc(&c, "*8\r\n" NOW ":1\r\n" KEY6(1, 4294967296, 0, 1, 0, 0)),
                   SL_EINVAL);
  assert_int_equal(parse_rc(&c, "*8\r\n" NOW ":1\r\n" KEY6(1, 10, -1, 100, 0, 0)),
                   SL_EINVAL);
  assert_int_equal(parse_rc(&c, "*8\r\n" NOW ":1\r\n" KEY6(1, 10, 9, -100, 0, 0)),
                   SL_EINVAL);
  assert_int_equal(parse_rc(&c, "*8\r\n" NOW ":1\r\n" KEY6(1, 10, 9, 100, -1, 0)),
                   SL_EINVAL);
  assert_int_equal(parse_rc(&c, "*8\r\n" NOW ":1\r\n" KEY6(1, 10, 9, 100, 0, -1)),
                   SL_EINVAL);
  /* duration strings: digits only, at most 19, within int64 */
  assert_int_equal(parse_rc(&c, "*8\r\n" NOW ":1\r\n:1\r\n:10\r\n:9\r\n"
                                "$3\r\n1.5\r\n:0\r\n:0\r\n"),
                   SL_EINVAL);
  assert_int_equal(parse_rc(&c, "*8\r\n" NOW ":1\r\n:1\r\n:10\r\n:9\r\n"
                                "$20\r\n10000000000000000000\r\n:0\r\n:0\r\n"),
                   SL_EINVAL);
  assert_int_equal(parse_rc(&c, "*8\r\n" NOW ":1\r\n:1\r\n:10\r\n:9\r\n"
                                "$19\r\n9223372036854775808\r\n:0\r\n:0\r\n"),
                   SL_EINVAL);
  assert_int_equal(parse_rc(&c, "*8\r\n" NOW ":1\r\n:1\r\n:10\r\n:9\r\n"
                                "$19\r\n9223372036854775807\r\n:0\r\n:0\r\n"),
                   0);
  assert_int_equal(parse_rc(&c, "*8\r\n" NOW ":1\r\n:1\r\n:10\r\n:9\r\n"
                                "$2\r\n-1\r\n:0\r\n:0\r\n"),
                   SL_EINVAL);
  /* nested arrays, nil, status and error elements */
  assert_int_equal(parse_rc(&c, "*8\r\n" NOW ":1\r\n*1\r\n:1\r\n:10\r\n:9\r\n"
                                ":100\r\n:0\r\n:0\r\n"),
                   SL_EINVAL);
  assert_int_equal(parse_rc(&c, "*8\r\n" NOW ":1\r\n:1\r\n:10\r\n:9\r\n"
                                "$-1\r\n:0\r\n:0\r\n"),
                   SL_EINVAL);
  assert_int_equal(parse_rc(&c, "*8\r\n" NOW ":1\r\n:1\r\n:10\r\n:9\r\n"
                                "+OK\r\n:0\r\n:0\r\n"),
                   SL_EINVAL);
  assert_int_equal(parse_rc(&c, "*8\r\n" NOW ":1\r\n:1\r\n:10\r\n:9\r\n"
                                "-ERR x\r\n:0\r\n:0\r\n"),
                   SL_EINVAL);
}

static void call_that_does_not_fit_the_reply_is_einval(void **state) {
  (void)state;
  const char *two = "*14\r\n" NOW ":1\r\n" KEY6(1, 10, 9, 100, 0, 0)
      KEY6(1, 10, 9, 100, 0, 0);
  static const uint8_t map[3] = {0, 1, 1};
  rs_call ok = call_of(3, 2, map);
  assert_int_equal(parse_rc(&ok, two), 0);
  rs_call c = ok;
  c.nu = 1; /* 8 elements expected */
  assert_int_equal(parse_rc(&c, two), SL_EINVAL);
  c = ok;
  c.map[2] = 2; /* points past the keys */
  assert_int_equal(parse_rc(&c, two), SL_EINVAL);
  c = ok;
  c.n = 0;
  assert_int_equal(parse_rc(&c, two), SL_EINVAL);
  c = ok;
  c.nu = 0;
  assert_int_equal(parse_rc(&c, two), SL_EINVAL);
  c = ok;
  c.n = RS_CHECKS_MAX + 1;
  assert_int_equal(parse_rc(&c, two), SL_EINVAL);
  c = ok;
  c.n = 1; /* fewer checks than keys */
  assert_int_equal(parse_rc(&c, two), SL_EINVAL);
}

/* A string of int64, little-endian, as the module's REPLY_P. */
static redisReply *packed_of(const int64_t *v, size_t n) {
  char buf[8 * 16];
  for (size_t i = 0; i < n; i++)
    for (int b = 0; b < 8; b++)
      buf[8 * i + b] = (char)((uint64_t)v[i] >> (8 * b));
  char resp[sizeof buf + 16];
  int h = snprintf(resp, sizeof resp, "$%zu\r\n", 8 * n);
  memcpy(resp + h, buf, 8 * n);
  memcpy(resp + h + 8 * n, "\r\n", 2);
  return reply_n(resp, (size_t)h + 8 * n + 2);
}

static void packed_reply_reads_as_the_array(void **state) {
  (void)state;
  static const uint8_t map[2] = {0, 1};
  rs_call call = call_of(2, 2, map);
  /* now, allowed, then six per key; a duration past 2^53 (which the
     script sends as a decimal string) is an integer here */
  const int64_t v[14] = {1767225600123456789, 1,
                         1, 25, 22, 3000000000, 0, 0,
                         1, 5, 4, INT64_C(1) << 60, 0, 7};
  redisReply *r = rs_unpack(packed_of(v, 14));
  assert_non_null(r);
  assert_int_equal(r->type, REDIS_REPLY_ARRAY);
  assert_int_equal(r->elements, 14);
  sl_decision out[2];
  int allowed = 0;
  int64_t now = 0;
  assert_int_equal(rs_parse(&call, r, out, &allowed, &now), 0);
  assert_int_equal(now, v[0]);
  assert_int_equal(allowed, 1);
  assert_int_equal(out[0].limit, 25);
  assert_int_equal(out[0].remaining, 22);
  assert_int_equal(out[0].reset_ns, 3000000000);
  assert_int_equal(out[1].reset_ns, INT64_C(1) << 60);
  assert_int_equal(out[1].delay_ns, 7);
  freeReplyObject(r);
  /* the same values as the script's array: the same decisions */
  redisReply *a = reply_of("*14\r\n" NOW ":1\r\n" KEY6(1, 25, 22, 3000000000, 0, 0)
                           KEY6(1, 5, 4, 1152921504606846976, 0, 7));
  sl_decision ref[2];
  assert_int_equal(rs_parse(&call, a, ref, &allowed, &now), 0);
  assert_memory_equal(ref, out, sizeof ref);
  /* anything else is itself, for rs_parse to judge */
  assert_ptr_equal(rs_unpack(a), a);
  freeReplyObject(a);
  redisReply *odd = reply_of("$12\r\n123456789012\r\n");
  assert_ptr_equal(rs_unpack(odd), odd);
  assert_int_equal(rs_parse(&call, odd, out, &allowed, &now), SL_EINVAL);
  freeReplyObject(odd);
  redisReply *err = reply_of("-ERR no\r\n");
  assert_ptr_equal(rs_unpack(err), err);
  freeReplyObject(err);
  assert_null(rs_unpack(NULL));
  /* a short packed reply unpacks, and rs_parse refuses its length */
  redisReply *few = rs_unpack(packed_of(v, 8));
  assert_int_equal(few->type, REDIS_REPLY_ARRAY);
  assert_int_equal(rs_parse(&call, few, out, &allowed, &now), SL_EINVAL);
  freeReplyObject(few);
}

static void hand_built_trees_never_crash(void **state) {
  (void)state;
  static const uint8_t map[1] = {0};
  rs_call call = call_of(1, 1, map);
  sl_decision out[1];
  int allowed = 1;
  redisReply nums[8], *el[8];
  for (int i = 0; i < 8; i++) {
    memset(&nums[i], 0, sizeof nums[i]);
    nums[i].type = REDIS_REPLY_INTEGER;
    nums[i].integer = 1;
    el[i] = &nums[i];
  }
  redisReply arr;
  memset(&arr, 0, sizeof arr);
  arr.type = REDIS_REPLY_ARRAY;
  arr.elements = 8;
  arr.element = el;
  assert_int_equal(rs_parse(&call, &arr, out, &allowed, NULL), 0);
  assert_int_equal(out[0].limit, 1);
  el[5] = NULL; /* a missing element */
  assert_int_equal(rs_parse(&call, &arr, out, &allowed, NULL), SL_EINVAL);
  assert_int_equal(allowed, 0);
  el[5] = &nums[5];
  nums[0].type = REDIS_REPLY_STRING; /* a string with no bytes */
  nums[0].str = NULL;
  nums[0].len = 0;
  assert_int_equal(rs_parse(&call, &arr, out, &allowed, NULL), SL_EINVAL);
  nums[0].type = REDIS_REPLY_INTEGER;
  arr.element = NULL; /* an array with no element vector */
  assert_int_equal(rs_parse(&call, &arr, out, &allowed, NULL), SL_EINVAL);
  arr.element = el;
  assert_int_equal(rs_parse(NULL, &arr, out, &allowed, NULL), SL_EINVAL);
  assert_int_equal(rs_parse(&call, NULL, out, &allowed, NULL), SL_EINVAL);
  assert_int_equal(rs_parse(&call, &arr, NULL, &allowed, NULL), SL_EINVAL);
  assert_int_equal(rs_parse(&call, &arr, out, NULL, NULL), SL_EINVAL);
}

/* rs_native: SL.DECIDE's head and the words it shares with the EVALSHA,
   for a call of its own and a batch; anything else is refused. */
static void native_form_shares_the_script_arguments(void **state) {
  (void)state;
  sl_policy p = {SL_GCRA, 10, 10, 1000000000};
  rs_check chk[2] = {{.policy = &p, .key = "a", .key_len = 1, .cost = 1},
                     {.policy = &p, .key = "b", .key_len = 1, .cost = 2,
                      .shadow = 1}};
  rs_call call;
  char *cmd, hdr[RS_NATIVE_HDR];
  size_t len, hl;
  assert_int_equal(rs_format(chk, 2, RS_DECIDE, 5, &call, &cmd, &len), 0);
  size_t at = rs_native(cmd, len, hdr, &hl);
  assert_true(at != (size_t)-1 && at < len && hl <= at);
  /* EVALSHA sha 2 a b now mode + 3 per key = 13 words; SL.DECIDE: 12 */
  assert_memory_equal(hdr, "*12\r\n$9\r\nSL.DECIDE\r\n", hl);
  assert_memory_equal(cmd + at, "$1\r\n2\r\n$1\r\na\r\n", 14);
  assert_int_equal(rs_native("*1\r\n$4\r\nPING\r\n", 14, hdr, &hl),
                   (size_t)-1);
  free(cmd);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(script_is_the_embedded_lua),
      cmocka_unit_test(sha_is_the_scripts_sha1_in_hex),
      cmocka_unit_test(sha_is_safe_from_many_threads),
      cmocka_unit_test(everyday_policies_are_accepted),
      cmocka_unit_test(windows_take_any_valid_period_but_sliding_window),
      cmocka_unit_test(sliding_window_period_bound_is_2_to_52_ns),
      cmocka_unit_test(bucket_bound_is_exact_to_the_unit),
      cmocka_unit_test(odd_limits_over_long_periods_hit_the_bound),
      cmocka_unit_test(invalid_policy_fails_as_the_validator_says),
      cmocka_unit_test(policy_check_truncates_its_message),
      cmocka_unit_test(one_bucket_check_sends_its_ticks),
      cmocka_unit_test(window_check_sends_limit_and_period_in_ms),
      cmocka_unit_test(repeated_keys_merge_costs_and_shadow),
      cmocka_unit_test(empty_key_is_a_key),
      cmocka_unit_test(merged_cost_over_the_largest_is_ecost),
      cmocka_unit_test(bad_arguments_are_einval),
      cmocka_unit_test(one_key_under_two_policies_is_einval),
      cmocka_unit_test(policy_the_script_cannot_decide_is_epolicy),
      cmocka_unit_test(key_over_4096_bytes_is_ekey),
      cmocka_unit_test(reply_fills_each_check_from_its_key),
      cmocka_unit_test(durations_may_come_as_decimal_strings),
      cmocka_unit_test(malformed_replies_are_einval),
      cmocka_unit_test(call_that_does_not_fit_the_reply_is_einval),
      cmocka_unit_test(hand_built_trees_never_crash),
      cmocka_unit_test(packed_reply_reads_as_the_array),
      cmocka_unit_test(batch_puts_keys_first_and_one_byte_per_request),
      cmocka_unit_test(batch_errors_are_einval),
      cmocka_unit_test(batch_reply_is_read_at_each_request),
      cmocka_unit_test(force_mode_formats_f_and_reads_signed_levels),
      cmocka_unit_test(native_form_shares_the_script_arguments),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
