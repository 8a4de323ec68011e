/*
 * module_fuzz.c — libFuzzer harness for the Redis module's commands
 * (src/module/), run through the fake Redis of tests/unit/fake_redis.c:
 * a bug there takes the user's whole Redis down, so every argument vector
 * an outsider can send must get an error or a valid reply.
 *
 * The input is a script. Its first byte seeds the key table: keys "a",
 * "b", "c" start empty, as strings of odd bytes, as hashes, or as keys of
 * another type (a list). Then commands follow, each a command byte (which
 * of SL.THROTTLE, CL.THROTTLE, SL.RESET, SL.DECIDE, SL.CLOCK, or
 * SL.DECIDE's getkeys call, and how far Redis's clock moves), an argument
 * count, and arguments: raw bytes (a length byte, then the bytes), or
 * words from a table of likely ones (policies, keys, numbers at the
 * bounds, SL.DECIDE's mode words) and SL.DECIDE's 32-byte numbers built
 * from interesting values, so that the parser's deep paths are reached.
 * Properties beyond "no crash, no leak, no undefined behaviour":
 *   - every command answers exactly one complete reply (fake_reply_ok);
 *   - an error starts "ERR " or "WRONGTYPE ";
 *   - every string the command made is freed, the API is used as Redis
 *     allows (no reply after the reply, known Replicate formats);
 *   - a key the module wrote has an expiry (its time to fresh), and one
 *     of another type is never written.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../tests/unit/fake_redis.h"
#include "base/le.h"
#include "module/module.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define T0_MS INT64_C(1767225600000)

static const char *const words[] = {
    "", "0", "1", "-1", "2", "15", "30", "60", "99999999999999999999",
    "9223372036854775807", "-9223372036854775808", "4294967295", "a", "b",
    "c", "token_bucket:10/1s", "leaky_bucket:4/1s:burst=6", "gcra:5/1s",
    "gcra:30/60s:burst=16", "fixed_window:5/1s", "sliding_window:6/2s",
    "sliding_log:3/1s", "sliding_log:1000000/1d", "token_bucket:1/1000d",
    "bogus", "g", "f", "g\x01", "f\x01", "g\x02", "f\x02", "g\x01\x01",
    "1767225600000000000", "1767225601500000000", "TESTCLOCK"};

static const char *const cmds[] = {"sl.throttle", "cl.throttle", "sl.reset",
                                   "sl.decide", "sl.clock", "sl.decide"};

static const int64_t nums[] = {0,
                               1,
                               2,
                               -1,
                               1000,
                               3600000,
                               INT64_C(1000000000),
                               INT64_C(3600000000000),
                               INT64_C(360000000000),
                               INT64_C(1) << 52,
                               INT64_C(1) << 53,
                               INT64_MAX,
                               INT64_MIN,
                               4294967295,
                               10,
                               5};

typedef struct in {
  const uint8_t *p;
  size_t n;
} in;

static int byte(in *s) {
  if (!s->n) return -1;
  s->n--;
  return *s->p++;
}

/* One argument into buf (at most 300 bytes); its length. */
static size_t arg(in *s, char *buf) {
  int k = byte(s);
  if (k < 0) return 0;
  if (k < 0x80) { /* a word */
    const char *w = words[k % (sizeof words / sizeof words[0])];
    size_t n = strlen(w);
    if (!strcmp(w, "g\x01\x01")) n = 3;
    memcpy(buf, w, n);
    return n;
  }
  if (k < 0xc0) { /* SL.DECIDE's numbers: four picked values */
    for (int i = 0; i < 4; i++) {
      int v = byte(s);
      int64_t x = nums[(v < 0 ? 0 : v) % (sizeof nums / sizeof nums[0])];
      le_put64(buf + 8 * i, (uint64_t)x);
    }
    return 32;
  }
  size_t n = (size_t)(k - 0xc0) * 8 + (size_t)(byte(s) & 7);
  if (n > 300) n = 300;
  for (size_t i = 0; i < n; i++) buf[i] = (char)byte(s);
  return n;
}

static void seed_keys(int how) {
  static const char *const names[] = {"a", "b", "c"};
  for (int i = 0; i < 3; i++, how >>= 2)
    switch (how & 3) {
    case 1:
      fake_put_string(names[i], "\x01\x02\x03\x04\x05\x06\x07\x08\x09\x0a"
                                "\x0b\x0c\x0d\x0e\x0f\x10\x11\x12\x13\x14",
                      (size_t)(how & 0x10 ? 20 : 12), -1);
      break;
    case 2:
      fake_put_hash_field(names[i], "m", "0123456789abcdef0123456789abcdef"
                                         "0123456789abcdef", 48);
      break;
    case 3:
      fake_put_other(names[i]);
      break;
    }
}

static void check(RedisModuleCtx *ctx, int rc, int getkeys) {
  const char *why;
  if (rc != REDISMODULE_OK) abort();
  if (!getkeys && !fake_reply_ok(ctx)) {
    fprintf(stderr, "not one complete reply\n");
    abort();
  }
  if (getkeys && ctx->nreplies) abort();
  if (!getkeys && ctx->replies[0].kind == 'e' &&
      strncmp(ctx->replies[0].s, "ERR ", 4) &&
      strncmp(ctx->replies[0].s, "WRONGTYPE ", 10) &&
      /* CL.THROTTLE's errors are redis-cell's, word for word */
      strncmp(ctx->replies[0].s, "Cell error: ", 12)) {
    fprintf(stderr, "not a Redis error: %s\n", ctx->replies[0].s);
    abort();
  }
  if (fake_live_strings() != 0 || fake_violations(&why)) {
    fprintf(stderr, "leaked strings %ld / %s\n", fake_live_strings(), why);
    abort();
  }
  for (size_t i = 0; i < fake_nkeys(); i++) {
    int type, written;
    long long expire;
    const char *name = fake_key_at(i, &type, &expire, &written);
    if (written && expire < 0) {
      fprintf(stderr, "key %s written without an expiry\n", name);
      abort();
    }
    if (written && type == FK_OTHER) abort();
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static int loaded;
  static RedisModuleCtx ctx;
  if (!loaded) {
    const char *args[] = {"TESTCLOCK"};
    if (fake_init(T0_MS, args, 1, NULL) != REDISMODULE_OK) abort();
    fake_ctx_init(&ctx, "");
    loaded = 1;
  }
  in s = {data, size};
  fake_reset();
  fake_set_ms(T0_MS);
  md_set_clock(-1);
  seed_keys(byte(&s) < 0 ? 0 : data[0]);
  static char bufs[16][304];
  const char *argv[16];
  size_t lens[16];
  for (int steps = 0; s.n && steps < 64; steps++) {
    int c = byte(&s);
    int which = c % 6;
    fake_set_ms(T0_MS + (c >> 3) * 37);
    int n = byte(&s);
    n = n < 0 ? 0 : n % 16;
    for (int i = 0; i < n; i++) {
      lens[i] = arg(&s, bufs[i]);
      argv[i] = bufs[i];
    }
    int rc;
    if (which == 5) {
      fake_ctx_clear(&ctx);
      for (int i = 0; i < n; i++) bufs[i][lens[i]] = '\0';
      rc = fake_getkeys(&ctx, cmds[which], n, argv);
    } else {
      rc = fake_call_bin(&ctx, cmds[which], n, argv, lens);
    }
    check(&ctx, rc, which == 5);
  }
  fake_ctx_clear(&ctx);
  return 0;
}
