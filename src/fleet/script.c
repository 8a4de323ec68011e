/*
 * script.c — the C side of exact mode's script (decide.lua): which policies
 * it decides exactly, the script itself (embedded at build time) and its
 * SHA1, the EVALSHA that carries one request's checks, and the reading of
 * its reply. The ARGV and reply layouts are documented at the top of
 * decide.lua; docs/store.md explains the arithmetic behind the bounds.
 *
 * Nothing here does I/O: the daemon sends what rs_format builds and hands
 * the reply to rs_parse.
 */
#include "script.h"

#include <errno.h>
#include <limits.h>
#include <openssl/sha.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../algo/algo.h"
#include "../algo/cell.h"
#include "../base/fmt.h"
#include "../base/le.h"

/* decide.lua, embedded (the Makefile makes script.o depend on it). */
__asm__(".section .rodata\n"
        ".balign 16\n"
        ".globl rs_lua_begin\n"
        ".hidden rs_lua_begin\n"
        "rs_lua_begin:\n"
        ".incbin \"src/fleet/decide.lua\"\n"
        ".globl rs_lua_end\n"
        ".hidden rs_lua_end\n"
        "rs_lua_end:\n"
        ".byte 0\n"
        ".previous\n");
extern const char rs_lua_begin[] __attribute__((visibility("hidden")));
extern const char rs_lua_end[] __attribute__((visibility("hidden")));

/* Every tick quantity of the bucket script stays below 2^53 when
   2*cap + 2*Lg <= 2^53 (docs/store.md). */
#define EXACT_MAX (INT64_C(1) << 53)
/* sliding_window forms 2*W (reset) and products with W in 2^24 limbs. */
#define SW_PERIOD_MAX_NS (INT64_C(1) << 52)
/* A state key is the daemon's prefix, tags and descriptors: generous, but
   bounded so a formatting bug cannot send megabytes. */
#define RS_KEY_MAX (4 * SL_KEY_MAX)

/* CL.THROTTLE's algorithm in the script's words (decide.lua). */
#define RS_ALGO_CELL '7'
/* Its bound: dvt + ei within 2^52 ns keeps every figure the script forms
   (a TAT's distance from now, plus an increment) below 2^53. */
#define CELL_MAX_NS (INT64_C(1) << 52)

int rs_cell_check(const algo_cell *c) {
  return c && c->ei > 0 && c->limit > 0 && c->dvt == c->ei * c->limit &&
                 c->dvt <= CELL_MAX_NS - c->ei
             ? 0
             : SL_EPOLICY;
}

static int is_bucket(sl_algo a) {
  return a == SL_TOKEN_BUCKET || a == SL_LEAKY_BUCKET || a == SL_GCRA;
}

/* 0 when the script decides the compiled policy exactly; else which bound
   it passes (1: the bucket's ticks, 2: sliding_window's period). */
static int exact_bound(const algo_policy *ap) {
  if (is_bucket(ap->pub.algo))
    return 2 * ap->cap + 2 * (i128)ap->Lg > EXACT_MAX ? 1 : 0;
  if (ap->pub.algo == SL_SLIDING_WINDOW && ap->W > SW_PERIOD_MAX_NS) return 2;
  return 0;
}

int rs_policy_check(const sl_policy *p, char *err, size_t err_len) {
  if (!p) return algo_policy_error(err, err_len, "no policy");
  algo_policy ap;
  int rc = algo_policy_compile(p, &ap, err, err_len);
  if (rc) return rc;
  int bound = exact_bound(&ap);
  if (!bound) return 0;
  char name[96];
  if (sl_policy_format(p, name, sizeof name) < 0) strcpy(name, "?");
  if (bound == 1) {
    /* The largest burst that fits: 2*(burst*Wg + Lg) <= 2^53. */
    int64_t fits = (EXACT_MAX / 2 - ap.Lg) / ap.Wg;
    char hint[64] = "no burst fits";
    if (fits >= 1) snprintf(hint, sizeof hint, "burst=%lld fits", (long long)fits);
    return algo_policy_error(
        err, err_len,
        "%s: the bucket counts in ticks of 1/%lld ns and a full one "
        "(%.4g ticks) exceeds what the Redis script computes exactly "
        "(2*(full + %lld) must stay within 2^53); %s, or use --store memory "
        "or a shorter period",
        name, (long long)ap.Lg, (double)ap.cap, (long long)ap.Lg, hint);
  }
  return algo_policy_error(
      err, err_len,
      "%s: a period over 2^52 ns (about 52 days) exceeds what the Redis "
      "script computes exactly for sliding_window (2^53); use --store "
      "memory, a shorter period, or fixed_window or sliding_log",
      name);
}

const char *rs_script(size_t *len) {
  if (len) *len = (size_t)(rs_lua_end - rs_lua_begin);
  return rs_lua_begin;
}

static pthread_once_t sha_once = PTHREAD_ONCE_INIT;
static char sha_hex[41];

static void sha_init(void) {
  unsigned char md[SHA_DIGEST_LENGTH];
  SHA1((const unsigned char *)rs_lua_begin,
       (size_t)(rs_lua_end - rs_lua_begin), md);
  static const char hex[] = "0123456789abcdef";
  for (int i = 0; i < SHA_DIGEST_LENGTH; i++) {
    sha_hex[2 * i] = hex[md[i] >> 4];
    sha_hex[2 * i + 1] = hex[md[i] & 15];
  }
  sha_hex[40] = '\0';
}

const char *rs_script_sha(void) {
  pthread_once(&sha_once, sha_init);
  return sha_hex;
}

/* Two policies that decide identically (burst 0 = limit for buckets). */
static int same_policy(const algo_policy *a, const algo_policy *b) {
  return a->pub.algo == b->pub.algo && a->L == b->L && a->B == b->B &&
         a->W == b->W;
}

/* Four int64 into 32 bytes, little-endian (decide.lua's '<i8i8i8i8'). */
static void put_nums(char *buf, int64_t a, int64_t b, int64_t c, int64_t d) {
  const int64_t v[4] = {a, b, c, d};
  for (int i = 0; i < 4; i++) le_put64(buf + 8 * i, (uint64_t)v[i]);
}

/* Appends the RESP bulk string of b[0..n) at p; returns the end. */
static char *put_bulk(char *p, const void *b, size_t n) {
  *p++ = '$';
  p += fmt_i64(p, (int64_t)n);
  *p++ = '\r';
  *p++ = '\n';
  if (n) memcpy(p, b, n);
  p += n;
  *p++ = '\r';
  *p++ = '\n';
  return p;
}

/* Bytes put_bulk writes for n bytes, at most. */
#define BULK_MAX(n) ((n) + 24)

/* rs_prepare and rs_prepare_force: force admits costs above the largest. */
static int prepare(const rs_check *checks, size_t n, rs_call *call,
                   char **words, size_t *keys_len, size_t *len, int force) {
  if (words) *words = NULL;
  if (!checks || !call || !words || !keys_len || !len || n == 0 ||
      n > RS_CHECKS_MAX)
    return SL_EINVAL;

  /* Merge repeated keys as sl_take_all merges them: one state, costs added,
     shadow only if every part is. */
  algo_policy pol[RS_CHECKS_MAX];
  int64_t phase[RS_CHECKS_MAX];
  size_t uniq[RS_CHECKS_MAX], nu = 0;
  int64_t cost[RS_CHECKS_MAX];
  int shadow[RS_CHECKS_MAX];
  uint64_t lease[RS_CHECKS_MAX], conc = 0, cells = 0;
  int script_only = 0;
  call->lease = 0;
  for (size_t i = 0; i < n; i++) {
    const rs_check *c = &checks[i];
    if (!c->policy || (!c->key && c->key_len) || c->cost < 0) return SL_EINVAL;
    size_t u = 0;
    while (u < nu && !(checks[uniq[u]].key_len == c->key_len &&
                       (c->key_len == 0 ||
                        memcmp(checks[uniq[u]].key, c->key, c->key_len) == 0)))
      u++;
    if (c->cell || (u < nu && checks[uniq[u]].cell)) {
      /* CL.THROTTLE's: alone on its key, any quantity, never forced */
      if (u < nu || force) return SL_EINVAL;
      if (rs_cell_check(c->cell)) return SL_EPOLICY;
      uniq[nu] = i;
      memset(&pol[nu], 0, sizeof pol[nu]);
      phase[nu] = 0;
      shadow[nu] = c->shadow != 0;
      cost[nu] = c->cost;
      cells |= UINT64_C(1) << nu;
      call->map[i] = (uint8_t)nu++;
      continue;
    }
    algo_policy p;
    if (algo_policy_compile(c->policy, &p, NULL, 0) || exact_bound(&p))
      return SL_EPOLICY;
    if (c->phase_ns < 0 || c->phase_ns % 1000000 ||
        (c->phase_ns && p.pub.algo != SL_FIXED_WINDOW))
      return SL_EINVAL;
    if (u == nu) {
      uniq[nu] = i;
      pol[nu] = p;
      phase[nu] = c->phase_ns;
      shadow[nu] = 1;
      cost[nu++] = 0;
    } else if (!same_policy(&pol[u], &p)) {
      return SL_EINVAL; /* one state key cannot hold two policies */
    }
    shadow[u] &= c->shadow != 0;
    if (p.pub.algo == SL_CONCURRENCY) {
      script_only = 1;
      lease[u] = c->lease;
      if (!call->lease) call->lease = c->lease;
      if (c->cost > 0) conc |= UINT64_C(1) << u;
    }
    if (c->cost > pol[u].B - cost[u] && !force) return SL_ECOST;
    if (c->cost > INT64_MAX / 4 - cost[u]) return SL_ECOST;
    cost[u] += c->cost;
    call->map[i] = (uint8_t)u;
  }
  size_t total = 0;
  for (size_t u = 0; u < nu; u++) {
    if (checks[uniq[u]].key_len > RS_KEY_MAX) return SL_EKEY;
    total += BULK_MAX(checks[uniq[u]].key_len) + 2 * BULK_MAX(1) + BULK_MAX(32);
  }
  call->n = n;
  call->nu = nu;
  call->force = force;
  call->conc = conc;
  call->cell = cells;
  call->script_only = script_only;
  call->mode = force ? RS_FORCE : RS_DECIDE;
  rs_call_alone(call);

  char *buf = malloc(total), *p = buf;
  if (!buf) return SL_ENOMEM;
  for (size_t u = 0; u < nu; u++)
    p = put_bulk(p, checks[uniq[u]].key, checks[uniq[u]].key_len);
  *keys_len = (size_t)(p - buf);
  for (size_t u = 0; u < nu; u++) {
    const algo_policy *q = &pol[u];
    char algo = (char)('0' + q->pub.algo), sh = shadow[u] ? '1' : '0', nums[32];
    const algo_cell *cr = checks[uniq[u]].cell;
    if (cr) { /* a quantity above the limit never fits: limit + 1 says so,
                 and keeps ei * quantity within the bound */
      algo = RS_ALGO_CELL;
      put_nums(nums, cost[u] > cr->limit ? cr->limit + 1 : cost[u], cr->ei,
               cr->dvt, cr->limit);
    } else if (is_bucket(q->pub.algo)) /* cap < 2^52 (rs_policy_check) */
      put_nums(nums, cost[u], (int64_t)q->cap, q->Lg, q->Wg);
    else if (q->pub.algo == SL_CONCURRENCY) /* the lease: its 8 bytes */
      put_nums(nums, cost[u], q->L, q->W / 1000000, (int64_t)lease[u]);
    else /* a whole number of ms (sl_policy_validate) */
      put_nums(nums, cost[u], q->L, q->W / 1000000, phase[u] / 1000000);
    p = put_bulk(p, &algo, 1);
    p = put_bulk(p, &sh, 1);
    p = put_bulk(p, nums, 32);
  }
  *words = buf;
  *len = (size_t)(p - buf);
  return 0;
}

void rs_call_alone(rs_call *call) {
  call->at = call->force ? 0 : 1;
  call->elements = call->force ? call->nu : 2 + 6 * call->nu;
}

int rs_prepare(const rs_check *checks, size_t n, rs_call *call, char **words,
               size_t *keys_len, size_t *len) {
  return prepare(checks, n, call, words, keys_len, len, 0);
}

int rs_prepare_force(const rs_check *checks, size_t n, rs_call *call,
                     char **words, size_t *keys_len, size_t *len) {
  return prepare(checks, n, call, words, keys_len, len, 1);
}

int rs_format_batch(const rs_request *reqs, size_t n, int mode, int64_t now_ns,
                    char **cmd, size_t *len) {
  if (cmd) *cmd = NULL;
  if (len) *len = 0;
  int lease_op = mode == RS_RELEASE || mode == RS_RENEW;
  if (!reqs || !cmd || !len || n == 0 || n > RS_BATCH_MAX ||
      ((mode == RS_DRY || lease_op) && n > 1) || mode < RS_DECIDE ||
      mode > RS_RENEW)
    return SL_EINVAL;
  if (now_ns < -1 || now_ns >= SL_TIME_MAX_NS) return SL_EINVAL;
  size_t nk = 0, total = 0;
  int leases = lease_op;
  for (size_t i = 0; i < n; i++) {
    const rs_call *c = reqs[i].call;
    if (!c || !reqs[i].words || c->nu == 0 || c->nu > RS_CHECKS_MAX ||
        reqs[i].keys_len > reqs[i].len)
      return SL_EINVAL;
    if (lease_op && !c->lease) return SL_EINVAL; /* nothing to release */
    nk += c->nu;
    total += reqs[i].len;
    leases |= c->script_only;
  }
  total += 5 * 24 + 7 + 40 + BULK_MAX(2 + RS_BATCH_MAX);
  char *buf = malloc(total), *p = buf;
  if (!buf) return SL_ENOMEM;
  /* EVALSHA sha nkeys, the keys, now, the requests, 3 values per key */
  *p++ = '*';
  p += fmt_i64(p, (int64_t)(3 + nk + 2 + 3 * nk));
  *p++ = '\r';
  *p++ = '\n';
  /* A call with leases is spelled in lower case: rs_native (which
     matches "EVALSHA" exactly) then leaves it to the script, since the
     Redis module keeps no leases. Redis reads either spelling. */
  p = put_bulk(p, leases ? "evalsha" : "EVALSHA", 7);
  p = put_bulk(p, rs_script_sha(), 40);
  char num[24];
  p = put_bulk(p, num, fmt_i64(num, (int64_t)nk));
  for (size_t i = 0; i < n; i++) {
    memcpy(p, reqs[i].words, reqs[i].keys_len);
    p += reqs[i].keys_len;
  }
  p = put_bulk(p, num, now_ns < 0 ? 0 : fmt_i64(num, now_ns));
  /* A decision or a peek asks for REPLY_P ("p"): the module then answers
     one string (rs_unpack), the script REPLY as ever. */
  char word[2 + RS_BATCH_MAX];
  size_t wl = 0;
  if (mode == RS_DECIDE || mode == RS_DRY) word[wl++] = 'p';
  if (n == 1 && mode != RS_FORCE) {
    static const char modes[] = {'0', '1', 'f', 'r', 'n'};
    word[wl++] = modes[mode];
  } else {
    word[wl++] = mode == RS_FORCE ? 'f' : 'g';
    for (size_t i = 0; i < n; i++) word[wl++] = (char)reqs[i].call->nu;
  }
  p = put_bulk(p, word, wl);
  size_t at = mode == RS_FORCE ? 0 : 1;
  for (size_t i = 0; i < n; i++) {
    rs_call *c = reqs[i].call;
    memcpy(p, reqs[i].words + reqs[i].keys_len,
           reqs[i].len - reqs[i].keys_len);
    p += reqs[i].len - reqs[i].keys_len;
    c->force = mode == RS_FORCE;
    c->mode = mode;
    c->at = at;
    if (c->force) { /* key `at` of the reply's nk (level, limit) pairs */
      c->elements = nk;
      at += c->nu;
    } else {
      c->elements = 1 + n + 6 * nk;
      at += 1 + 6 * c->nu;
    }
  }
  *cmd = buf;
  *len = (size_t)(p - buf);
  return 0;
}

int rs_format(const rs_check *checks, size_t n, int mode, int64_t now_ns,
              rs_call *call, char **cmd, size_t *len) {
  if (cmd) *cmd = NULL;
  if (len) *len = 0;
  if (now_ns < -1 || now_ns >= SL_TIME_MAX_NS) return SL_EINVAL;
  char *words;
  rs_request req = {call, NULL, 0, 0};
  int rc = prepare(checks, n, call, &words, &req.keys_len, &req.len,
                   mode == RS_FORCE);
  if (rc) return rc;
  req.words = words;
  rc = rs_format_batch(&req, 1, mode, now_ns, cmd, len);
  free(words);
  return rc;
}

size_t rs_native(const char *cmd, size_t len, char *hdr, size_t *hdr_len) {
  /* "*N\r\n$7\r\nEVALSHA\r\n$40\r\n<sha>\r\n" -> "*N-1\r\n$9\r\nSL.DECIDE\r\n" */
  static const char eval[] = "$7\r\nEVALSHA\r\n$40\r\n";
  if (!cmd || !hdr || !hdr_len || len < 4 || cmd[0] != '*') return (size_t)-1;
  size_t i = 1;
  int64_t n = 0;
  while (i < len && i < 8 && cmd[i] >= '0' && cmd[i] <= '9')
    n = n * 10 + (cmd[i++] - '0');
  size_t head = i + 2 + (sizeof eval - 1) + 40 + 2;
  if (n < 4 || head > len || memcmp(cmd + i, "\r\n", 2) ||
      memcmp(cmd + i + 2, eval, sizeof eval - 1))
    return (size_t)-1;
  size_t k = 0;
  hdr[k++] = '*';
  k += fmt_i64(hdr + k, n - 1);
  memcpy(hdr + k, "\r\n$9\r\nSL.DECIDE\r\n", 17);
  *hdr_len = k + 17;
  return head;
}

int rs_native_probe(const redisReply *r) {
  if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != 2) return 0;
  const redisReply *sha = r->element[1];
  if (!sha || (sha->type != REDIS_REPLY_STATUS &&
               sha->type != REDIS_REPLY_STRING))
    return 0;
  return sha->len == 40 && !memcmp(sha->str, rs_script_sha(), 40) ? 1 : -1;
}

/* ---- the reply ---- */

/* The most values a reply holds: now, then per request its answer and
   six per key. */
#define RS_REPLY_MAX (1 + RS_BATCH_MAX * (1 + 6 * (size_t)RS_CHECKS_MAX))

redisReply *rs_unpack(redisReply *r) {
  if (!r || r->type != REDIS_REPLY_STRING || r->len < 16 || r->len % 8 ||
      r->len / 8 > RS_REPLY_MAX)
    return r;
  size_t n = r->len / 8;
  redisReply *a = calloc(1, sizeof *a);
  if (a) {
    a->type = REDIS_REPLY_ARRAY;
    a->element = calloc(n, sizeof *a->element);
    a->elements = a->element ? n : 0;
  }
  const unsigned char *b = (const unsigned char *)r->str;
  for (size_t i = 0; a && a->element && i < n; i++, b += 8) {
    redisReply *e = calloc(1, sizeof *e);
    if (!e) break;
    e->type = REDIS_REPLY_INTEGER;
    e->integer = (long long)le_get64(b);
    a->element[i] = e;
  }
  freeReplyObject(r);
  if (a && a->element && a->element[n - 1]) return a;
  if (a) freeReplyObject(a); /* out of memory part of the way */
  return NULL;
}

/* A decimal integer 0 <= v <= max from a string of len bytes. */
static int parse_dec(const char *s, size_t len, int64_t max, int64_t *v) {
  if (!s || len == 0 || len > 19) return -1;
  uint64_t x = 0;
  for (size_t i = 0; i < len; i++) {
    if (s[i] < '0' || s[i] > '9') return -1;
    x = x * 10 + (uint64_t)(s[i] - '0');
  }
  if (x > (uint64_t)max) return -1;
  *v = (int64_t)x;
  return 0;
}

/* An integer reply, or (durations, the clock) a decimal string. */
static int get_num(const redisReply *e, int strings, int64_t max,
                   int64_t *v) {
  if (!e) return -1;
  if (e->type == REDIS_REPLY_INTEGER) {
    if (e->integer < 0 || e->integer > max) return -1;
    *v = e->integer;
    return 0;
  }
  if (strings && e->type == REDIS_REPLY_STRING)
    return parse_dec(e->str, e->len, max, v);
  return -1;
}

/* A forced call's reply (decide.lua's REPLY_F): { now, a string of
   (level, limit) '<i8i8' per key }; this request's keys from key `at`. */
static int parse_forced(const rs_call *call, const redisReply *r,
                        sl_decision *dec, int64_t *now) {
  const redisReply *lv = r->element[1];
  if (r->elements != 2 || !lv || lv->type != REDIS_REPLY_STRING ||
      lv->len != 16 * call->elements || call->at + call->nu > call->elements ||
      get_num(r->element[0], 1, SL_TIME_MAX_NS - 1, now))
    return SL_EINVAL;
  for (size_t u = 0; u < call->nu; u++) {
    const unsigned char *b = (const unsigned char *)lv->str + 16 * (call->at + u);
    int64_t level = (int64_t)le_get64(b), limit = (int64_t)le_get64(b + 8);
    /* signed, at least -2^53 (algo_fill_max) */
    if (level < -(INT64_C(1) << 53) || level > SL_LIMIT_MAX || limit <= 0 ||
        limit > SL_LIMIT_MAX)
      return SL_EINVAL;
    dec[u] = (sl_decision){1, limit, level, 0, 0, 0, 0};
  }
  return 0;
}

int rs_parse(const rs_call *call, const redisReply *r, sl_decision *out,
             int *allowed, int64_t *now_ns) {
  if (allowed) *allowed = 0;
  if (!call || !r || !out || !allowed) return SL_EINVAL;
  if (call->n == 0 || call->n > RS_CHECKS_MAX || call->nu == 0 ||
      call->nu > call->n)
    return SL_EINVAL;
  for (size_t i = 0; i < call->n; i++)
    if (call->map[i] >= call->nu) return SL_EINVAL;
  if (r->type != REDIS_REPLY_ARRAY || !r->element) return SL_EINVAL;
  sl_decision dec[RS_CHECKS_MAX];
  int64_t now, all = 1;
  if (call->force) {
    if (parse_forced(call, r, dec, &now)) return SL_EINVAL;
  } else {
    /* A call made before rs_format set them (tests): a call of its own. */
    size_t at = call->elements ? call->at : 1;
    size_t elements = call->elements ? call->elements : 2 + 6 * call->nu;
    if (r->elements != elements || at < 1 || at + 6 * call->nu >= elements)
      return SL_EINVAL;
    if (get_num(r->element[0], 1, SL_TIME_MAX_NS - 1, &now) ||
        get_num(r->element[at], 0, 1, &all))
      return SL_EINVAL;
    for (size_t u = 0; u < call->nu; u++) {
      redisReply *const *e = r->element + at + 1 + 6 * u;
      int64_t ok, limit, rem, reset, retry, delay;
      int cell = (int)(call->cell >> u & 1);
      if (get_num(e[0], 0, 1, &ok) || get_num(e[1], 0, SL_LIMIT_MAX, &limit) ||
          limit == 0 ||
          get_num(e[2], cell, cell ? INT64_MAX : SL_LIMIT_MAX, &rem) ||
          get_num(e[3], 1, INT64_MAX, &reset) ||
          get_num(e[4], 1, INT64_MAX, &retry) ||
          get_num(e[5], 1, INT64_MAX, &delay))
        return SL_EINVAL;
      /* CL.THROTTLE's retry: none when allowed, or when it never fits
         (0: a limited request that fits waits at least a ns). */
      if (cell && (ok || retry == 0)) retry = -1;
      dec[u] = (sl_decision){(int)ok, limit, rem, reset, retry, delay, 0};
      /* A lease recorded: an acquire charged (the request allowed), or
         one renewed. */
      int charged = call->mode == RS_DECIDE && all && (call->conc >> u & 1);
      if (ok && (charged || call->mode == RS_RENEW)) dec[u].lease = call->lease;
    }
  }
  for (size_t i = 0; i < call->n; i++) out[i] = dec[call->map[i]];
  *allowed = (int)all;
  if (now_ns) *now_ns = now;
  return 0;
}
