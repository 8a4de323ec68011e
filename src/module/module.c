/*
 * module.c — sluice's Redis module (build/sluice-redis.so): its commands
 * and RedisModule_OnLoad.
 *
 *   SL.THROTTLE key policy [cost]   [allowed, limit, remaining,
 *                                    retry_after_ms, reset_ms, delay_ms],
 *                                    as the daemon's RESP command
 *   CL.THROTTLE key max_burst count period [quantity]   redis-cell's,
 *                                    reply and errors word for word
 *   SL.RESET key [policy]            DEL of the state: 1 or 0
 *   SL.DECIDE numkeys key... now mode args...   exact fleet mode's
 *                                    decision of several keys (decide.c)
 *   SL.CLOCK ns                      only when loaded with TESTCLOCK:
 *                                    a fixed clock for parity tests
 *                                    (-1: Redis's clock again)
 *
 * Every command names its keys to Redis (first/last/step, or getkeys-api
 * for SL.DECIDE), so Redis Cluster routes them and refuses cross-slot
 * calls itself. State keys are plain strings and hashes (state.h).
 */
#include <stdio.h>
#include <string.h>

#include "../base/fmt.h"
#include "../base/hash.h"
#include "../algo/cell.h"
#include "module.h"
#include "repl.h"
#include "state.h"

#define SEC INT64_C(1000000000)

/* A decimal argument as redis-cell reads it (algo_cell_i64: Rust's i64
   parse, an optional sign, digits, nothing else); -1 when it is not one. */
static int arg_i64(RedisModuleString *s, long long *out) {
  size_t n;
  const char *p = RedisModule_StringPtrLen(s, &n);
  return algo_cell_i64(p, n, out);
}

/* Replies with an array of n integers. */
static int reply_ints(RedisModuleCtx *ctx, const int64_t *v, int n) {
  RedisModule_ReplyWithArray(ctx, n);
  for (int i = 0; i < n; i++) RedisModule_ReplyWithLongLong(ctx, v[i]);
  return REDISMODULE_OK;
}

/* Decides one check now; replies WRONGTYPE itself (returns -1). */
static int decide_one(RedisModuleCtx *ctx, mcheck *c, sl_decision *d) {
  int all;
  int64_t now;
  long long real_ms;
  md_clock(&now, &real_ms);
  if (md_request(ctx, c, 1, MD_DECIDE, now, real_ms, d, &all)) {
    RedisModule_ReplyWithError(ctx, REDISMODULE_ERRORMSG_WRONGTYPE);
    return -1;
  }
  return 0;
}

/* Policies as spelled, parsed and compiled: one per slot of a small
   direct-mapped cache (Redis runs commands on one thread), so that a
   client repeating its policies pays sl_policy_parse once per spelling. */
#define SPEC_MAX 128
#define SPEC_CACHE 64
static struct {
  size_t len; /* 0: empty */
  char spec[SPEC_MAX];
  algo_policy p;
} spec_cache[SPEC_CACHE];

/* A policy argument, parsed and compiled; replies the error (-1). */
static int arg_policy(RedisModuleCtx *ctx, RedisModuleString *s,
                      algo_policy *p) {
  size_t n;
  const char *spec = RedisModule_StringPtrLen(s, &n);
  size_t slot = (size_t)(fnv1a(FNV1A_INIT, spec, n) % SPEC_CACHE);
  if (n && spec_cache[slot].len == n && !memcmp(spec_cache[slot].spec, spec, n)) {
    *p = spec_cache[slot].p;
    return 0;
  }
  char buf[SPEC_MAX], why[160] = "", msg[200];
  sl_policy pub;
  if (n >= sizeof buf) {
    snprintf(why, sizeof why, "policy is too long");
  } else {
    memcpy(buf, spec, n);
    buf[n] = '\0';
    if (!sl_policy_parse(buf, &pub, why, sizeof why) &&
        pub.algo == SL_CONCURRENCY) {
      snprintf(why, sizeof why, "the module has no leases (concurrency: "
                                "exact mode's script keeps them)");
    } else if (why[0] == '\0' &&
               !algo_policy_compile(&pub, p, why, sizeof why)) {
      memcpy(spec_cache[slot].spec, spec, n);
      spec_cache[slot].len = n;
      spec_cache[slot].p = *p;
      return 0;
    }
  }
  snprintf(msg, sizeof msg, "ERR invalid policy%s%s", why[0] ? ": " : "",
           why);
  RedisModule_ReplyWithError(ctx, msg);
  return -1;
}

int md_cmd_throttle(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
  if (argc < 3 || argc > 4) return RedisModule_WrongArity(ctx);
  long long cost = 1;
  if (argc == 4 && (arg_i64(argv[3], &cost) || cost < 0))
    return RedisModule_ReplyWithError(ctx, "ERR cost must be an integer >= 0");
  mcheck c = {.key = argv[1], .cost = cost};
  if (arg_policy(ctx, argv[2], &c.p)) return REDISMODULE_OK;
  if (cost > c.p.B) {
    size_t n;
    const char *spec = RedisModule_StringPtrLen(argv[2], &n);
    char msg[200];
    snprintf(msg, sizeof msg, "ERR cost %lld can never be allowed by %.*s",
             cost, (int)(n < 100 ? n : 100), spec);
    return RedisModule_ReplyWithError(ctx, msg);
  }
  sl_decision d;
  if (decide_one(ctx, &c, &d)) return REDISMODULE_OK;
  int64_t v[6] = {d.allowed,
                  d.limit,
                  d.remaining,
                  ns_to_ms_up(d.retry_after_ns),
                  ns_to_ms_up(d.reset_ns),
                  ns_to_ms_up(d.delay_ns)};
  return reply_ints(ctx, v, 6);
}

/* redis-cell's seconds: whole seconds, plus one if >= 1 ms is left over. */
static int64_t cell_secs(int64_t ns) {
  return ns / SEC + ((ns % SEC) / 1000000 > 0);
}

int md_cell(RedisModuleCtx *ctx, RedisModuleString *name,
            const algo_cell *rate, int64_t qty, int64_t now, long long real_ms,
            sl_decision *d) {
  RedisModuleKey *k =
      RedisModule_OpenKey(ctx, name, REDISMODULE_READ | REDISMODULE_WRITE);
  int type = RedisModule_KeyType(k);
  long long tat = -1;
  if (type != REDISMODULE_KEYTYPE_EMPTY) {
    size_t len = 0;
    const char *v = type == REDISMODULE_KEYTYPE_STRING
                        ? RedisModule_StringDMA(k, &len, REDISMODULE_READ)
                        : NULL;
    unsigned long long u = 0;
    size_t i = 0;
    for (; v && i < len && i < 19 && v[i] >= '0' && v[i] <= '9'; i++)
      u = u * 10 + (unsigned)(v[i] - '0');
    /* (a TAT sluice could have written: the state file's bound) */
    if (!v || !len || i != len ||
        u >= (uint64_t)(SL_TIME_MAX_NS + (SL_TIME_MAX_NS >> 1))) {
      RedisModule_CloseKey(k);
      return -1;
    }
    tat = (long long)u;
  }
  int64_t next;
  if (algo_cell_decide(rate, tat, now, qty, d, &next)) {
    char buf[24];
    size_t len = fmt_u64(buf, (uint64_t)next), have = 0;
    if (type == REDISMODULE_KEYTYPE_STRING)
      RedisModule_StringDMA(k, &have, REDISMODULE_READ);
    if (have != len) RedisModule_StringTruncate(k, len);
    memcpy(RedisModule_StringDMA(k, &have, REDISMODULE_WRITE), buf, len);
    /* Gone once the TAT has passed: Redis's clock plus the time to it (a
       test clock may be anywhere), in whole ms rounded up, 1 at least. */
    int64_t ttl = next - now;
    long long at = real_ms + ttl / 1000000 +
                   (ttl % 1000000 != 0 || ttl < 1000000);
    RedisModule_SetAbsExpire(k, at);
    MREP(ctx, "SET", "sbcl", name, buf, len, "PXAT", at);
    RedisModule_SignalModifiedKey(ctx, name);
    mkey_notify_set(ctx, name);
  }
  RedisModule_CloseKey(k);
  return 0;
}

int md_cmd_cell(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
  /* The words as text, checked as the daemon's RESP port checks them
     (algo_cell_args: redis-cell's errors). */
  const char *w[6] = {NULL};
  size_t len[6] = {0};
  for (int i = 0; i < argc && i < 6; i++)
    w[i] = RedisModule_StringPtrLen(argv[i], &len[i]);
  algo_cell rate;
  int64_t n[4]; /* max_burst, count, period, quantity */
  char msg[400];
  if (algo_cell_args(argc, w, len, &rate, n, msg, sizeof msg))
    return RedisModule_ReplyWithError(ctx, msg);
  sl_decision d;
  int64_t now;
  long long real_ms;
  md_clock(&now, &real_ms);
  if (md_cell(ctx, argv[1], &rate, n[3], now, real_ms, &d))
    return RedisModule_ReplyWithError(ctx, REDISMODULE_ERRORMSG_WRONGTYPE);
  int64_t v[5] = {!d.allowed, d.limit, d.remaining,
                  !d.allowed && d.retry_after_ns >= 0
                      ? cell_secs(d.retry_after_ns)
                      : -1,
                  cell_secs(d.reset_ns)};
  return reply_ints(ctx, v, 5);
}

int md_cmd_reset(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
  if (argc < 2 || argc > 3) return RedisModule_WrongArity(ctx);
  algo_policy p;
  if (argc == 3 && arg_policy(ctx, argv[2], &p)) return REDISMODULE_OK;
  RedisModuleKey *k = RedisModule_OpenKey(ctx, argv[1], REDISMODULE_WRITE);
  int had = RedisModule_KeyType(k) != REDISMODULE_KEYTYPE_EMPTY;
  if (had) {
    RedisModule_DeleteKey(k);
    MREP(ctx, "DEL", "s", argv[1]);
    RedisModule_SignalModifiedKey(ctx, argv[1]);
    RedisModule_NotifyKeyspaceEvent(ctx, REDISMODULE_NOTIFY_GENERIC, "del",
                                    argv[1]);
  }
  RedisModule_CloseKey(k);
  return RedisModule_ReplyWithLongLong(ctx, had);
}

int md_cmd_clock(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
  if (argc != 2) return RedisModule_WrongArity(ctx);
  long long ns;
  if (arg_i64(argv[1], &ns) || ns < -1 || ns >= SL_TIME_MAX_NS)
    return RedisModule_ReplyWithError(
        ctx, "ERR SL.CLOCK: ns since the epoch, or -1 for Redis's clock");
  md_set_clock(ns);
  return RedisModule_ReplyWithSimpleString(ctx, "OK");
}

/* The commands: name, function, flags, first/last/step key. */
static const struct {
  const char *name;
  RedisModuleCmdFunc fn;
  const char *flags;
  int first, last, step;
} commands[] = {
    {"sl.throttle", md_cmd_throttle, "write deny-oom fast", 1, 1, 1},
    {"cl.throttle", md_cmd_cell, "write deny-oom fast", 1, 1, 1},
    {"sl.reset", md_cmd_reset, "write fast", 1, 1, 1},
    {"sl.decide", md_cmd_decide, "write deny-oom getkeys-api", 2, 2, 1},
    {"sl.version", md_cmd_version, "readonly fast", 0, 0, 0},
};

/* Whether argument s spells word (any case). */
static int arg_is(RedisModuleString *s, const char *word) {
  size_t n;
  const char *p = RedisModule_StringPtrLen(s, &n);
  return n == strlen(word) && !strncasecmp(p, word, n);
}

__attribute__((visibility("default"))) int
RedisModule_OnLoad(RedisModuleCtx *ctx, RedisModuleString **argv, int argc);

int RedisModule_OnLoad(RedisModuleCtx *ctx, RedisModuleString **argv,
                       int argc) {
  if (rm_init(ctx, "sluice", 1) != REDISMODULE_OK || mkey_init() ||
      mrep_init(ctx) != REDISMODULE_OK)
    return REDISMODULE_ERR;
  /* Redis would signal every key opened for writing as modified when it
     is closed: a denied decision, which writes nothing, would then abort
     a client's WATCH and invalidate client-side caches. The module
     signals each key it writes itself (state.c, md_cell, SL.RESET), as
     the script's own writes do. */
  RedisModule_SetModuleOptions(ctx,
                               REDISMODULE_OPTION_NO_IMPLICIT_SIGNAL_MODIFIED);
  int testclock = 0;
  for (int i = 0; i < argc; i++) {
    if (!arg_is(argv[i], "TESTCLOCK")) {
      RedisModule_Log(ctx, "warning", "sluice: unknown load argument (the "
                                      "only one is TESTCLOCK)");
      return REDISMODULE_ERR;
    }
    testclock = 1;
  }
  for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
    if (RedisModule_CreateCommand(ctx, commands[i].name, commands[i].fn,
                                  commands[i].flags, commands[i].first,
                                  commands[i].last,
                                  commands[i].step) != REDISMODULE_OK)
      return REDISMODULE_ERR;
  if (testclock &&
      RedisModule_CreateCommand(ctx, "sl.clock", md_cmd_clock, "fast", 0, 0,
                                0) != REDISMODULE_OK)
    return REDISMODULE_ERR;
  return REDISMODULE_OK;
}
