/*
 * state.c — the module's state keys in decide.lua's layout (state.h; the
 * layouts are documented at the top of src/fleet/decide.lua): little-endian
 * fields, times as (ms, ns within the ms) because the script cannot hold
 * nanoseconds since the epoch in a double. The conversion to and from the
 * algorithms' algo_state is all that is here; the decisions are algo/'s.
 */
#include "state.h"

#include <stdio.h>
#include <string.h>

#include "../base/fmt.h"
#include "../base/le.h"
#include "repl.h"

/* decide.lua's layouts, in bytes. */
#define TAT_LEN 20  /* '<i8i4i8': token_bucket, gcra, leaky_bucket */
#define FW_LEN 12   /* '<i8I4': fixed_window */
#define SW_LEN 16   /* '<i8I4I4': sliding_window */
#define META_LEN 48 /* '<i8I4I4i8i4I4i8i4I4': sliding_log's "m" */
#define ENT_LEN 16  /* '<i8i4I4': one sliding_log entry */
#define MS INT64_C(1000000)

/* An instant as (ms, ns within the ms) at p (12 bytes), and back. */
static void put_time(unsigned char *p, int64_t t) {
  int64_t ms = t / MS - (t % MS < 0);
  le_put64(p, ms);
  le_put32(p + 8, (uint32_t)(int32_t)(t - ms * MS));
}
static int64_t get_time(const unsigned char *p) {
  return (int64_t)le_get64(p) * MS + (int32_t)le_get32(p + 8);
}

/* The string layout's length for algorithm a (not sliding_log). */
static size_t string_len(sl_algo a) {
  return a == SL_FIXED_WINDOW ? FW_LEN : a == SL_SLIDING_WINDOW ? SW_LEN
                                                                : TAT_LEN;
}

/* A stored ms (or (ms, ns) pair) that is an instant sluice can hold: what
   any other value would make of the algorithms' arithmetic is not
   defined, so such a key is not sluice's. */
/* A TAT may lie past the last time sluice takes (SL_TIME_MAX_NS) by the
   longest refill (algo.c's horizon, 2^60 ns) and a forced debt. */
static int ms_ok(int64_t ms) {
  return ms >= 0 && ms < (SL_TIME_MAX_NS + (SL_TIME_MAX_NS >> 1)) / MS;
}
static int time_ok(const unsigned char *p) {
  int32_t sub = (int32_t)le_get32(p + 8);
  return ms_ok((int64_t)le_get64(p)) && sub >= 0 && sub < MS;
}

/*
 * redis-cell's own key, so that CL.THROTTLE is a drop-in for its users'
 * existing keys: redis-cell stores a GCRA key's TAT as a plain decimal
 * string of ns since the epoch (src/cell/mod.rs, `new_tat_ns.to_string()`,
 * at most 19 digits, never sluice's 20-byte layout) and nothing else; its parameters come with every call, as here. The
 * TAT is read as sluice's gcra state (exact in whole ns: no rounding
 * left over). SL.THROTTLE's next charge writes sluice's layout (then
 * redis-cell cannot read it back; CL.THROTTLE keeps redis-cell's, module.c).
 * 0 when v is such a key.
 */
static int load_cell_tat(mkey *m, const unsigned char *v, size_t len) {
  int64_t tat = 0;
  if (len == 0 || len > 19) return -1;
  for (size_t i = 0; i < len; i++) {
    if (v[i] < '0' || v[i] > '9' || tat > (INT64_MAX - 9) / 10) return -1;
    tat = tat * 10 + (v[i] - '0');
  }
  if (!ms_ok(tat / MS)) return -1;
  m->st.a = tat;
  m->st.b = 0;
  m->fresh = 0;
  m->cell = 1;
  return 0;
}

static int load_string(mkey *m, const algo_policy *p) {
  size_t len;
  const unsigned char *v =
      (const unsigned char *)RedisModule_StringDMA(m->k, &len, REDISMODULE_READ);
  if (v && p->pub.algo == SL_GCRA && load_cell_tat(m, v, len) == 0) return 0;
  if (!v || len != string_len(p->pub.algo)) return -1;
  switch (p->pub.algo) {
  case SL_FIXED_WINDOW:
  case SL_SLIDING_WINDOW:
    if (!ms_ok((int64_t)le_get64(v))) return -1;
    m->st.a = (int64_t)le_get64(v) * MS;
    m->st.b = le_get32(v + 8);
    if (p->pub.algo == SL_SLIDING_WINDOW)
      m->st.b = (int64_t)((uint64_t)m->st.b << 32 | le_get32(v + 12));
    break;
  default: /* a time, then ticks: tokens, or the TAT's rounding */
    if (!time_ok(v)) return -1;
    m->st.a = get_time(v);
    m->st.b = (int64_t)le_get64(v + 12);
    if (p->pub.algo == SL_TOKEN_BUCKET
            ? m->st.b > p->cap || m->st.b < p->cap - algo_fill_max(p)
            : m->st.b < 0 || m->st.b >= p->Lg)
      return -1;
  }
  m->fresh = 0;
  return 0;
}

/* Field i of a sliding_log hash (its decimal name); NULL-safe to free. */
static RedisModuleString *field_of(int64_t i) {
  char buf[24];
  int n = snprintf(buf, sizeof buf, "%lld", (long long)i);
  return RedisModule_CreateString(NULL, buf, (size_t)n);
}

/* Hash field `f` of exactly `len` bytes into out; -1 when absent or not. */
static int hash_get(RedisModuleKey *k, RedisModuleString *f, void *out,
                    size_t len) {
  RedisModuleString *v = NULL;
  RedisModule_HashGet(k, 0, f, &v, NULL);
  if (!v) return -1;
  size_t n;
  const char *s = RedisModule_StringPtrLen(v, &n);
  int ok = n == len;
  if (ok) memcpy(out, s, len);
  RedisModule_FreeString(NULL, v);
  return ok ? 0 : -1;
}

static int64_t *log_t(slog *log) { return (int64_t *)(void *)(log + 1); }
static uint32_t *log_c(slog *log) { return (uint32_t *)(log_t(log) + log->cap); }

/* sliding_log: the hash's live entries into a log with room for one more. */
static int load_log(mkey *m) {
  unsigned char meta[META_LEN], ent[ENT_LEN];
  RedisModuleString *mf = RedisModule_CreateString(NULL, "m", 1);
  int rc = hash_get(m->k, mf, meta, META_LEN);
  RedisModule_FreeString(NULL, mf);
  if (rc) return -1;
  m->head = (int64_t)le_get64(meta);
  m->count = le_get32(meta + 8);
  /* Each entry is a field of its own: a count beyond the hash's fields is
     not this layout (and must not size an allocation). */
  if (m->head < 0 || m->count == 0 ||
      (size_t)m->count >= RedisModule_ValueLength(m->k))
    return -1;
  m->log = RedisModule_Alloc(slog_bytes(m->count + 1));
  slog_init(m->log, m->count + 1);
  for (uint32_t i = 0; i < m->count; i++) {
    RedisModuleString *f = field_of(m->head + i);
    rc = hash_get(m->k, f, ent, ENT_LEN);
    RedisModule_FreeString(NULL, f);
    if (rc || !time_ok(ent)) return -1;
    log_t(m->log)[i] = get_time(ent);
    log_c(m->log)[i] = le_get32(ent + 12);
    m->log->sum += le_get32(ent + 12);
  }
  m->log->count = m->count;
  return 0;
}

int mkey_open(RedisModuleCtx *ctx, mkey *m, RedisModuleString *name,
              const algo_policy *p) {
  memset(m, 0, sizeof *m);
  m->name = name;
  m->fresh = 1;
  m->k = RedisModule_OpenKey(ctx, name, REDISMODULE_READ | REDISMODULE_WRITE);
  int type = RedisModule_KeyType(m->k);
  int want = p->pub.algo == SL_SLIDING_LOG ? REDISMODULE_KEYTYPE_HASH
                                           : REDISMODULE_KEYTYPE_STRING;
  int rc = 0;
  if (type == want)
    rc = want == REDISMODULE_KEYTYPE_HASH ? load_log(m) : load_string(m, p);
  else if (type != REDISMODULE_KEYTYPE_EMPTY)
    rc = -1;
  if (rc) {
    mkey_close(m);
    return -1;
  }
  if (p->pub.algo == SL_SLIDING_LOG) {
    if (!m->log) { /* a fresh log: room for the one entry a charge adds */
      m->log = RedisModule_Alloc(slog_bytes(1));
      slog_init(m->log, 1);
    }
    m->st.a = (int64_t)(uintptr_t)m->log;
    m->fresh = 0; /* the algorithm reads an empty log as fresh */
  }
  return 0;
}

/* "PXAT", made once: Replicate takes a string argument ('s') by reference
   where a C string ('c') would be copied into a new object every write.
   The expiry time goes as decimal bytes ('b': one small object), not as
   'l', which Redis 7.0 turns into an sds and an object of its own. */
static RedisModuleString *pxat;

int mkey_init(void) {
  if (!pxat) pxat = RedisModule_CreateString(NULL, "PXAT", 4);
  return pxat ? 0 : -1;
}

/* ms from t until fresh_at, rounded up, at least 1: the key's TTL. */
static long long ttl_ms(int64_t fresh_at, int64_t t) {
  int64_t d = fresh_at - t;
  long long ms = (long long)(d / MS + (d % MS > 0));
  return ms < 1 ? 1 : ms;
}

/* The keyspace events of the script's SET key value PX ms, for whoever
   listens (notify-keyspace-events, or another module): the same whether
   a key is written here or by decide.lua. */
void mkey_notify_set(RedisModuleCtx *ctx, RedisModuleString *name) {
  RedisModule_NotifyKeyspaceEvent(ctx, REDISMODULE_NOTIFY_STRING, "set", name);
  RedisModule_NotifyKeyspaceEvent(ctx, REDISMODULE_NOTIFY_GENERIC, "expire",
                                  name);
}

static void save_string(RedisModuleCtx *ctx, mkey *m, const algo_policy *p,
                        const algo_state *st, long long at) {
  unsigned char v[TAT_LEN];
  size_t len = string_len(p->pub.algo);
  switch (p->pub.algo) {
  case SL_FIXED_WINDOW:
    le_put64(v, st->a / MS);
    le_put32(v + 8, (uint32_t)st->b);
    break;
  case SL_SLIDING_WINDOW:
    le_put64(v, st->a / MS);
    le_put32(v + 8, (uint32_t)((uint64_t)st->b >> 32));
    le_put32(v + 12, (uint32_t)st->b);
    break;
  default:
    put_time(v, st->a);
    le_put64(v + 12, st->b);
  }
  if (m->fresh || m->cell) {
    /* A new value (no key yet, or redis-cell's decimal): one string object
       becomes both the key's value and the replicated SET's argument,
       which Replicate takes by reference; Truncate would allocate an
       object and its buffer, and a 'b' argument a third copy. */
    RedisModuleString *s = RedisModule_CreateString(NULL, (const char *)v, len);
    RedisModule_StringSet(m->k, s);
    RedisModule_SetAbsExpire(m->k, at);
    char num[FMT_INT_MAX];
    MREP(ctx, "SET", "sssb", m->name, s, pxat, num,
                          fmt_i64(num, at));
    RedisModule_FreeString(NULL, s);
    return;
  }
  /* A loaded key is a string of this layout's length already: written in
     place, with no allocation (Redis copies a shared or embedded value
     once, on the first DMA). */
  size_t have = 0;
  char *dst = RedisModule_StringDMA(m->k, &have, REDISMODULE_WRITE);
  memcpy(dst, v, len);
  RedisModule_SetAbsExpire(m->k, at);
  char num[FMT_INT_MAX];
  MREP(ctx, "SET", "sbsb", m->name, (const char *)v, len,
                        pxat, num, fmt_i64(num, at));
}

/* Hash field i := the log's entry e. */
static void put_entry(RedisModuleCtx *ctx, mkey *m, int64_t i, slog *log,
                      uint32_t e) {
  unsigned char v[ENT_LEN];
  put_time(v, log_t(log)[e]);
  le_put32(v + 12, log_c(log)[e]);
  RedisModuleString *f = field_of(i);
  RedisModuleString *s = RedisModule_CreateString(ctx, (const char *)v, ENT_LEN);
  RedisModule_HashSet(m->k, 0, f, s, NULL);
  MREP(ctx, "HSET", "sss", m->name, f, s);
  RedisModule_FreeString(ctx, s);
  RedisModule_FreeString(NULL, f);
}

/* sliding_log: the charge committed into the log, and the hash told what
   changed: expired entries dropped, the newest written, the meta. */
static long long save_log(RedisModuleCtx *ctx, mkey *m, const algo_policy *p,
                          int64_t t, int64_t cost, long long real_ms) {
  slog *log = m->log;
  int64_t te = t;
  uint32_t first = 0;
  if (log->count) {
    te = max64(t, log_t(log)[log->count - 1]);
    while (first < log->count && log_t(log)[first] <= te - p->W) first++;
  }
  slog_commit(p, log, t, cost);
  int64_t nhead = m->head + first;
  if (first == m->count) { /* every old entry expired: start afresh */
    if (m->count) {
      RedisModule_DeleteKey(m->k);
      MREP(ctx, "DEL", "s", m->name);
      RedisModule_NotifyKeyspaceEvent(ctx, REDISMODULE_NOTIFY_GENERIC, "del",
                                      m->name);
    }
    nhead = 0;
  } else {
    for (uint32_t i = 0; i < first; i++) {
      RedisModuleString *f = field_of(m->head + i);
      RedisModule_HashSet(m->k, 0, f, REDISMODULE_HASH_DELETE, NULL);
      MREP(ctx, "HDEL", "ss", m->name, f);
      RedisModule_FreeString(NULL, f);
      /* (the script's HDEL takes up to 1,000 fields, an event each) */
      if (i % 1000 == 0)
        RedisModule_NotifyKeyspaceEvent(ctx, REDISMODULE_NOTIFY_HASH, "hdel",
                                        m->name);
    }
  }
  /* No wrap: the log was loaded at 0 with room for one more. */
  uint32_t newest = log->head + log->count - 1, oldest = log->head;
  put_entry(ctx, m, nhead + log->count - 1, log, newest);
  unsigned char meta[META_LEN];
  le_put64(meta, nhead);
  le_put32(meta + 8, log->count);
  le_put32(meta + 12, (uint32_t)log->sum);
  put_time(meta + 16, log_t(log)[newest]);
  le_put32(meta + 28, log_c(log)[newest]);
  put_time(meta + 32, log_t(log)[oldest]);
  le_put32(meta + 44, log_c(log)[oldest]);
  RedisModuleString *mf = RedisModule_CreateString(ctx, "m", 1);
  RedisModuleString *mv = RedisModule_CreateString(ctx, (const char *)meta,
                                                   META_LEN);
  RedisModule_HashSet(m->k, 0, mf, mv, NULL);
  MREP(ctx, "HSET", "sss", m->name, mf, mv);
  RedisModule_NotifyKeyspaceEvent(ctx, REDISMODULE_NOTIFY_HASH, "hset",
                                  m->name);
  RedisModule_FreeString(ctx, mf);
  RedisModule_FreeString(ctx, mv);
  return real_ms + ttl_ms(log_t(log)[newest] + p->W, t);
}

void mkey_save(RedisModuleCtx *ctx, mkey *m, const algo_policy *p,
               const algo_state *next, int64_t t, int64_t cost,
               long long real_ms) {
  if (p->pub.algo != SL_SLIDING_LOG) {
    long long at = real_ms + ttl_ms(p->ops->fresh_at(p, next), t);
    save_string(ctx, m, p, next, at);
    mkey_notify_set(ctx, m->name);
  } else {
    long long at = save_log(ctx, m, p, t, cost, real_ms);
    RedisModule_SetAbsExpire(m->k, at);
    char num[FMT_INT_MAX];
    MREP(ctx, "PEXPIREAT", "sb", m->name, num, fmt_i64(num, at));
    RedisModule_NotifyKeyspaceEvent(ctx, REDISMODULE_NOTIFY_GENERIC, "expire",
                                    m->name);
    m->st.a = (int64_t)(uintptr_t)m->log;
  }
  /* Redis signals nothing for the module (module.c's OnLoad). */
  RedisModule_SignalModifiedKey(ctx, m->name);
}

void mkey_close(mkey *m) {
  if (m->k) RedisModule_CloseKey(m->k);
  if (m->log) RedisModule_Free(m->log);
  m->k = NULL;
  m->log = NULL;
}
