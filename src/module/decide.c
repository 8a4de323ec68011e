/*
 * decide.c — SL.DECIDE, exact fleet mode's native command, and the
 * decision of one request over several keys that every command uses.
 *
 * SL.DECIDE takes decide.lua's arguments and answers its reply, word for
 * word, so the daemon formats one call and sends it either as
 *   EVALSHA sha numkeys key... now mode (algo shadow nums)...
 * or, where the module is loaded, as
 *   SL.DECIDE numkeys key... now mode (algo shadow nums)...
 * and reads either reply with the same parser (src/fleet/script.c). The
 * arguments and reply are documented at the top of src/fleet/decide.lua.
 * The decisions are the algorithms' own (algo/), not a second copy.
 */
#include <stdio.h>
#include <string.h>

#include "../base/fmt.h"
#include "../base/le.h"
#include "module.h"
#include "state.h"

#define MS INT64_C(1000000)
#define MALFORMED "ERR sluice SL.DECIDE: malformed arguments"
/* CL.THROTTLE's algorithm in decide.lua's words (its "7"). */
#define MD_ALGO_CELL '7'

/* The SHA-1 of the decide.lua this SL.DECIDE mirrors, set by the Makefile
   from src/fleet/decide.lua when it builds this file. */
#ifndef SL_DECIDE_SHA
#error "SL_DECIDE_SHA: build this file with the Makefile"
#endif

static int64_t test_clock = -1;

void md_set_clock(int64_t ns) { test_clock = ns; }

void md_clock(int64_t *now, long long *real_ms) {
  /* One reading serves both: the decision and its keys' expiry agree on
     the instant, and the command reads the clock once. */
  long long us = RedisModule_Microseconds ? RedisModule_Microseconds() : -1;
  *real_ms = us >= 0 ? us / 1000 : RedisModule_Milliseconds();
  *now = test_clock >= 0 ? test_clock : us >= 0 ? us * 1000 : *real_ms * MS;
}

/* The state algorithms read: NULL for a fresh key. */
static const algo_state *state_of(const mkey *m) {
  return m->fresh ? NULL : &m->st;
}

/* Opens every key of the request; -1 (all closed) on a foreign one. */
static int open_all(RedisModuleCtx *ctx, const mcheck *c, size_t n, mkey *k) {
  for (size_t i = 0; i < n; i++)
    if (mkey_open(ctx, &k[i], c[i].key, &c[i].p)) {
      while (i > 0) mkey_close(&k[--i]);
      return -1;
    }
  return 0;
}

int md_request(RedisModuleCtx *ctx, const mcheck *c, size_t n, int mode,
               int64_t now, long long real_ms, sl_decision *out, int *all) {
  if (n == 1 && c[0].cell) { /* CL.THROTTLE's (md_cmd_decide checked) */
    if (md_cell(ctx, c[0].key, &c[0].rate, c[0].cost, now, real_ms, out))
      return -1;
    *all = out[0].allowed || c[0].shadow;
    return 0;
  }
  mkey k[SL_CHECKS_MAX];
  algo_state next[SL_CHECKS_MAX];
  int charge[SL_CHECKS_MAX];
  if (open_all(ctx, c, n, k)) return -1;
  *all = 1;
  for (size_t i = 0; i < n; i++) {
    const algo_policy *p = &c[i].p;
    if (mode == MD_FORCE) {
      int64_t cost = c[i].cost, level;
      if (p->ops->force(p, state_of(&k[i]), now, &cost, &level, &next[i]))
        mkey_save(ctx, &k[i], p, &next[i], now, cost, real_ms);
      out[i] = (sl_decision){1, p->B, level, 0, 0, 0, 0};
      continue;
    }
    charge[i] = p->ops->decide(p, state_of(&k[i]), now, c[i].cost, &out[i],
                               &next[i]);
    if (!out[i].allowed && !c[i].shadow) *all = 0;
  }
  for (size_t i = 0; mode == MD_DECIDE && i < n; i++) {
    if (!charge[i]) continue;
    const algo_policy *p = &c[i].p;
    if (*all) {
      mkey_save(ctx, &k[i], p, &next[i], now, c[i].cost, real_ms);
    } else { /* not charged because another denied: a peek's figures */
      algo_state unused;
      p->ops->decide(p, state_of(&k[i]), now, 0, &out[i], &unused);
    }
  }
  for (size_t i = 0; i < n; i++) mkey_close(&k[i]);
  return 0;
}

/* ---- SL.DECIDE's arguments ---- */

/* A decimal 0 <= v < max of s[0..n); -1 when it is not one. */
static int parse_dec(const char *s, size_t n, int64_t max, int64_t *v) {
  if (n == 0 || n > 19) return -1;
  int64_t x = 0;
  for (size_t i = 0; i < n; i++) {
    if (s[i] < '0' || s[i] > '9') return -1;
    x = x * 10 + (s[i] - '0');
  }
  if (x >= max) return -1;
  *v = x;
  return 0;
}

static int is_bucket(sl_algo a) {
  return a == SL_TOKEN_BUCKET || a == SL_LEAKY_BUCKET || a == SL_GCRA;
}

/*
 * Check c from one key's (algo, shadow, nums) words, as script.c's
 * prepare() writes them; the bounds are the script's (rs_policy_check),
 * so that the module decides exactly what the script would. -1 when
 * malformed.
 */
/*
 * CL.THROTTLE's check (decide.lua's "7"): quantity, EI, DVT, LIMIT, in
 * the script's bounds (rs_cell_check: DVT = EI * LIMIT, DVT + EI within
 * 2^52 ns; a quantity up to LIMIT + 1, which never fits). -1 when
 * malformed.
 */
static int parse_cell(const int64_t *v, int force, mcheck *c) {
  int64_t q = v[0], ei = v[1], dvt = v[2], limit = v[3];
  if (force || ei < 1 || limit < 1 || limit > SL_LIMIT_MAX ||
      (i128)ei * limit != dvt || dvt > (INT64_C(1) << 52) - ei || q < 0 ||
      q > limit + 1)
    return -1;
  c->cell = 1;
  c->rate = (algo_cell){ei, dvt, limit};
  c->cost = q;
  return 0;
}

static int parse_check(RedisModuleString **w, int force, mcheck *c) {
  size_t la, ls, ln;
  const char *a = RedisModule_StringPtrLen(w[0], &la);
  const char *sh = RedisModule_StringPtrLen(w[1], &ls);
  const unsigned char *nums =
      (const unsigned char *)RedisModule_StringPtrLen(w[2], &ln);
  c->cell = 0;
  int cell = la == 1 && a[0] == MD_ALGO_CELL;
  if (la != 1 || ((a[0] < '0' || a[0] >= '0' + SL_RATE_ALGO_COUNT) && !cell) ||
      ln != 32)
    return -1;
  int64_t v[4];
  for (int i = 0; i < 4; i++) v[i] = (int64_t)le_get64(nums + 8 * i);
  c->shadow = ls == 1 && sh[0] == '1';
  if (cell) return parse_cell(v, force, c);
  sl_algo algo = (sl_algo)(a[0] - '0');
  c->cost = v[0];
  if (is_bucket(algo)) { /* cap = burst*Wg, Lg, Wg */
    int64_t cap = v[1], Lg = v[2], Wg = v[3];
    if (Lg < 1 || Wg < 1 || cap < Wg || cap % Wg ||
        cap / Wg > SL_LIMIT_MAX || 2 * (i128)cap + 2 * (i128)Lg > (i128)1 << 53)
      return -1;
    memset(&c->p, 0, sizeof c->p);
    c->p.pub = (sl_policy){algo, (uint32_t)(cap / Wg), (uint32_t)(cap / Wg), 0};
    c->p.ops = algo_ops_of(algo);
    c->p.B = cap / Wg;
    c->p.L = Lg;
    c->p.W = Wg;
    c->p.Lg = Lg;
    c->p.Wg = Wg;
    c->p.cap = cap;
  } else { /* LIMIT, PERIOD in ms */
    /* v[3]: fixed_window's phase (a calendar window's start), in ms. */
    if (v[1] < 1 || v[1] > SL_LIMIT_MAX || v[2] < 1 ||
        v[2] > SL_PERIOD_MAX_NS / MS || v[3] < 0 ||
        v[3] > SL_TIME_MAX_NS / MS || (v[3] && algo != SL_FIXED_WINDOW))
      return -1;
    sl_policy p = {algo, (uint32_t)v[1], 0, v[2] * MS};
    if (algo_policy_compile(&p, &c->p, NULL, 0)) return -1;
    c->p.phase = v[3] * MS;
    if (algo == SL_SLIDING_WINDOW && c->p.W > (INT64_C(1) << 52)) return -1;
  }
  if (c->cost < 0 || c->cost > (force ? INT64_MAX / 4 : c->p.B)) return -1;
  return 0;
}

/* The requests' sizes from the mode word: n requests, and whether the
   reply is packed (a "p" first: decide.lua's REPLY_P); -1 if malformed. */
static int parse_mode(RedisModuleString *w, long long nk, int *mode,
                      uint8_t *sizes, size_t *n, int *packed) {
  size_t len;
  const char *m = RedisModule_StringPtrLen(w, &len);
  *packed = len >= 1 && m[0] == 'p';
  m += *packed;
  len -= (size_t)*packed;
  if (len == 1 && (m[0] == '0' || m[0] == '1')) {
    *mode = m[0] == '1' ? MD_DRY : MD_DECIDE;
    if (nk > SL_CHECKS_MAX) return -1;
    sizes[0] = (uint8_t)nk;
    *n = 1;
    return 0;
  }
  if (len < 2 || len > 256 || (m[0] != 'g' && m[0] != 'f')) return -1;
  *mode = m[0] == 'f' ? MD_FORCE : MD_DECIDE;
  long long sum = 0;
  for (size_t i = 1; i < len; i++) {
    uint8_t s = (uint8_t)m[i];
    if (s == 0 || s > SL_CHECKS_MAX) return -1;
    sizes[i - 1] = s;
    sum += s;
  }
  *n = len - 1;
  return sum == nk ? 0 : -1;
}

/* Whether a key repeats among c[0..n) (one request's keys are distinct). */
static int repeats(const mcheck *c, size_t n) {
  for (size_t i = 0; i < n; i++)
    for (size_t j = 0; j < i; j++) {
      size_t a, b;
      const char *x = RedisModule_StringPtrLen(c[i].key, &a);
      const char *y = RedisModule_StringPtrLen(c[j].key, &b);
      if (a == b && !memcmp(x, y, a)) return 1;
    }
  return 0;
}

/* The six values of one key's decision in the reply (a retry of -1,
   CL.THROTTLE's "none", is the script's 0). */
static void key_values(const sl_decision *x, int64_t v[6]) {
  v[0] = x->allowed;
  v[1] = x->limit;
  v[2] = x->remaining;
  v[3] = x->reset_ns;
  v[4] = x->retry_after_ns < 0 ? 0 : x->retry_after_ns;
  v[5] = x->delay_ns;
}

/* decide.lua's REPLY_P: REPLY's values as one string of int64, one reply
   where Redis would make 1 + nreq + 6 nk (the usual call: no
   allocation). */
static void reply_packed(RedisModuleCtx *ctx, int64_t now,
                         const sl_decision *d, const int *all,
                         const uint8_t *sizes, size_t nreq, size_t nk) {
  size_t words = 1 + nreq + 6 * nk;
  unsigned char small[8 * (1 + 8 + 6 * 8)];
  unsigned char *buf =
      words * 8 <= sizeof small ? small : RedisModule_Alloc(words * 8);
  unsigned char *p = buf;
  le_put64(p, now);
  p += 8;
  for (size_t r = 0, k = 0; r < nreq; r++) {
    le_put64(p, all[r]);
    p += 8;
    for (size_t i = 0; i < sizes[r]; i++, k++) {
      int64_t v[6];
      key_values(&d[k], v);
      for (int j = 0; j < 6; j++, p += 8) le_put64(p, v[j]);
    }
  }
  RedisModule_ReplyWithStringBuffer(ctx, (const char *)buf, words * 8);
  if (buf != small) RedisModule_Free(buf);
}

/* The reply: { now, per request: allowed, six per key } or, forced,
   { now, (level, limit) '<i8i8' per key }. */
static void reply(RedisModuleCtx *ctx, int mode, int64_t now,
                  const sl_decision *d, const int *all, const uint8_t *sizes,
                  size_t nreq, size_t nk) {
  char num[24];
  if (mode == MD_FORCE) {
    RedisModule_ReplyWithArray(ctx, 2);
    RedisModule_ReplyWithStringBuffer(ctx, num, fmt_i64(num, now));
    unsigned char *lv = RedisModule_Alloc(16 * nk);
    for (size_t i = 0; i < nk; i++) {
      le_put64(lv + 16 * i, (uint64_t)d[i].remaining);
      le_put64(lv + 16 * i + 8, (uint64_t)d[i].limit);
    }
    RedisModule_ReplyWithStringBuffer(ctx, (const char *)lv, 16 * nk);
    RedisModule_Free(lv);
    return;
  }
  RedisModule_ReplyWithArray(ctx, (long)(1 + nreq + 6 * nk));
  RedisModule_ReplyWithStringBuffer(ctx, num, fmt_i64(num, now));
  size_t k = 0;
  for (size_t r = 0; r < nreq; r++) {
    RedisModule_ReplyWithLongLong(ctx, all[r]);
    for (size_t i = 0; i < sizes[r]; i++, k++) {
      int64_t v[6];
      key_values(&d[k], v);
      for (int j = 0; j < 6; j++) RedisModule_ReplyWithLongLong(ctx, v[j]);
    }
  }
}

/* Positions of SL.DECIDE's keys, for Redis Cluster (getkeys-api). */
static int report_keys(RedisModuleCtx *ctx, RedisModuleString **argv,
                       int argc) {
  long long nk;
  size_t len;
  const char *s = RedisModule_StringPtrLen(argv[1], &len);
  int64_t v;
  if (parse_dec(s, len, argc, &v) == 0) {
    nk = v;
    for (long long i = 0; i < nk && 2 + i < argc; i++)
      RedisModule_KeyAtPos(ctx, (int)(2 + i));
  }
  return REDISMODULE_OK;
}

int md_cmd_decide(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
  if (RedisModule_IsKeysPositionRequest(ctx)) {
    if (argc >= 2) report_keys(ctx, argv, argc);
    return REDISMODULE_OK;
  }
  if (argc < 8) return RedisModule_WrongArity(ctx);
  size_t len;
  const char *s = RedisModule_StringPtrLen(argv[1], &len);
  int64_t nk;
  if (parse_dec(s, len, argc, &nk) || nk < 1 || argc != 4 + 4 * nk)
    return RedisModule_ReplyWithError(ctx, MALFORMED);
  int mode, packed;
  uint8_t sizes[256];
  size_t nreq;
  if (parse_mode(argv[3 + nk], nk, &mode, sizes, &nreq, &packed))
    return RedisModule_ReplyWithError(ctx, MALFORMED);
  int64_t now;
  long long real_ms;
  md_clock(&now, &real_ms); /* now: unless the caller gives its own */
  s = RedisModule_StringPtrLen(argv[2 + nk], &len);
  if (len && !(len == 2 && !memcmp(s, "-1", 2)) &&
      parse_dec(s, len, SL_TIME_MAX_NS, &now))
    return RedisModule_ReplyWithError(ctx, MALFORMED);
  /* The usual call (a few keys) needs no allocation. */
  mcheck c_small[8];
  sl_decision d_small[8];
  mcheck *c = nk <= 8 ? c_small : RedisModule_Alloc(sizeof *c * (size_t)nk);
  sl_decision *d =
      nk <= 8 ? d_small : RedisModule_Alloc(sizeof *d * (size_t)nk);
  int all[256];
  const char *err = NULL;
  for (int64_t i = 0; i < nk && !err; i++) {
    c[i].key = argv[2 + i];
    if (parse_check(argv + 4 + nk + 3 * i, mode == MD_FORCE, &c[i]))
      err = MALFORMED;
  }
  for (size_t r = 0, at = 0; r < nreq && !err; at += sizes[r++]) {
    if (repeats(c + at, sizes[r])) err = MALFORMED " (a key repeats)";
    for (size_t i = 0; i < sizes[r] && !err; i++) /* a cell: alone */
      if (c[at + i].cell && (sizes[r] != 1 || mode != MD_DECIDE))
        err = MALFORMED;
  }
  for (size_t r = 0, at = 0; r < nreq && !err; at += sizes[r++])
    if (md_request(ctx, c + at, sizes[r], mode, now, real_ms, d + at, &all[r]))
      err = REDISMODULE_ERRORMSG_WRONGTYPE;
  if (err)
    RedisModule_ReplyWithError(ctx, err);
  else if (packed && mode != MD_FORCE) /* (REPLY_F is one string already) */
    reply_packed(ctx, now, d, all, sizes, nreq, (size_t)nk);
  else
    reply(ctx, mode, now, d, all, sizes, nreq, (size_t)nk);
  if (c != c_small) RedisModule_Free(c);
  if (d != d_small) RedisModule_Free(d);
  return REDISMODULE_OK;
}

/*
 * SL.VERSION: [the module's version, the SHA-1 of the decide.lua whose
 * arguments and reply its SL.DECIDE speaks]. A daemon sends SL.DECIDE
 * only where the SHA-1 is its own script's: a daemon and a module from
 * different builds (a rolling upgrade) would otherwise disagree on the
 * arguments, and every decision would fail as malformed. Any change to
 * decide.lua, even a comment's, makes the daemon use the script there
 * until the module is upgraded: slower, never wrong.
 */
int md_cmd_version(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
  (void)argv;
  if (argc != 1) return RedisModule_WrongArity(ctx);
  RedisModule_ReplyWithArray(ctx, 2);
  RedisModule_ReplyWithSimpleString(ctx, sl_version_string());
  return RedisModule_ReplyWithSimpleString(ctx, SL_DECIDE_SHA);
}
