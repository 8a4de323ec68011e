/*
 * snapshot.c — the store's state as bytes and back (snapshot.h has the
 * format and the contracts).
 *
 * Writing copies one shard's entries into a buffer under that shard's lock
 * (walk.h), unlocks, and only then hands the bytes on: a decision waits at
 * most for one shard's copy, never for the disk. Loading reads the whole
 * input twice: first every length, value and the checksum are checked, so
 * that a damaged file restores nothing and says where it is damaged; then
 * the keys are restored. A restored key goes in as the store's own code
 * would have put it there: a 16-byte state is written over a charge made
 * for it (store_decide_locked, then store_undo_locked's restore), and a
 * sliding_log's entries are replayed as forced charges at their own times.
 */
#include "snapshot.h"

#include <sodium.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../algo/cell.h"
#include "../base/clock.h"
#include "../base/le.h"
#include "../base/strbuf.h"
#include "walk.h"

#define HEADER_BYTES 32
#define END_BYTES (1 + 8 + crypto_generichash_BYTES)
static const char magic[8] = {'S', 'L', 'U', 'I', 'C', 'E', 'S', 'T'};

/* v's low n bytes, little-endian, appended to b. */
static void put_le(strbuf *b, uint64_t v, int n) {
  uint8_t x[8];
  le_put(x, v, (size_t)n);
  strbuf_add(b, x, (size_t)n);
}

/* ---- writing ---- */

typedef struct writer {
  const store_names *names;
  int64_t now;
  strbuf buf;
  uint64_t keys;
} writer;

/* The log of a sliding_log state, oldest first: entry i's time and cost. */
static const int64_t *log_t(const slog *log) {
  return (const int64_t *)(log + 1);
}
static const uint32_t *log_c(const slog *log) {
  return (const uint32_t *)(log_t(log) + log->cap);
}

/* Copies one entry (under its shard's lock): a record, unless its id has
   no name or its state is back to fresh. */
static void copy_entry(void *ud, const store_entry *en) {
  writer *w = ud;
  if (!w->names->name[en->id] || en->p->ops->fresh_at(en->p, en->st) <= w->now)
    return;
  /* Leases are not saved: their holders do not outlive the daemon's
     restart either (docs/semantics.md, "Concurrency"). */
  if (en->p->pub.algo == SL_CONCURRENCY) return;
  int is_log = en->p->pub.algo == SL_SLIDING_LOG;
  strbuf_add(&w->buf, is_log ? "L" : "K", 1);
  put_le(&w->buf, en->id, 2);
  put_le(&w->buf, en->len, 2);
  strbuf_add(&w->buf, en->key, en->len);
  if (!is_log) {
    put_le(&w->buf, (uint64_t)en->st->a, 8);
    put_le(&w->buf, (uint64_t)en->st->b, 8);
  } else {
    const slog *log = slog_of(en->st);
    put_le(&w->buf, log->count, 4);
    for (uint32_t i = 0; i < log->count; i++) {
      uint32_t k = (log->head + i) % log->cap;
      put_le(&w->buf, (uint64_t)log_t(log)[k], 8);
      put_le(&w->buf, log_c(log)[k], 4);
    }
  }
  w->keys++;
}

/* Hands the buffer to out (hashing it on the way) and empties it. */
static int flush(writer *w, crypto_generichash_state *h, store_out_fn out,
                 void *ud, store_snap_stats *st) {
  if (w->buf.oom) return SL_ENOMEM;
  crypto_generichash_update(h, (const unsigned char *)w->buf.p, w->buf.len);
  if (w->buf.len && out(ud, w->buf.p, w->buf.len)) return -1;
  st->bytes += w->buf.len;
  w->buf.len = 0;
  return 0;
}

int store_snapshot_write(sl_store *s, const store_names *names, int64_t now,
                         store_out_fn out, void *ud, store_snap_stats *st) {
  memset(st, 0, sizeof *st);
  if (sodium_init() < 0) return SL_ENOMEM;
  writer w = {names, now, STRBUF_INIT, 0};
  crypto_generichash_state h;
  crypto_generichash_init(&h, NULL, 0, crypto_generichash_BYTES);
  uint32_t nnames = 0;
  for (size_t i = 0; i < 65536; i++) nnames += names->name[i] != NULL;
  strbuf_add(&w.buf, magic, sizeof magic);
  put_le(&w.buf, STORE_SNAP_VERSION, 4);
  put_le(&w.buf, HEADER_BYTES, 4);
  put_le(&w.buf, (uint64_t)now, 8);
  put_le(&w.buf, nnames, 4);
  put_le(&w.buf, 0, 4);
  for (size_t i = 0; i < 65536; i++) {
    if (!names->name[i]) continue;
    put_le(&w.buf, i, 2);
    put_le(&w.buf, names->len[i], 2);
    strbuf_add(&w.buf, names->name[i], names->len[i]);
  }
  int rc = flush(&w, &h, out, ud, st);
  for (unsigned n = 0; !rc && n < store_nshards(s); n++) {
    int64_t t0 = clock_mono_ns();
    store_walk_shard(s, n, copy_entry, &w);
    int64_t held = clock_mono_ns() - t0;
    if (held > st->longest_lock_ns) st->longest_lock_ns = held;
    rc = flush(&w, &h, out, ud, st);
  }
  if (!rc) {
    uint8_t sum[crypto_generichash_BYTES];
    strbuf_add(&w.buf, "E", 1);
    put_le(&w.buf, w.keys, 8);
    crypto_generichash_update(&h, (const unsigned char *)w.buf.p, w.buf.len);
    crypto_generichash_final(&h, sum, sizeof sum);
    strbuf_add(&w.buf, sum, sizeof sum);
    if (w.buf.oom) rc = SL_ENOMEM;
    else if (out(ud, w.buf.p, w.buf.len)) rc = -1;
    else st->bytes += w.buf.len;
  }
  st->keys = w.keys;
  strbuf_free(&w.buf);
  return rc;
}

/* ---- reading ---- */

/* What a name of the input is in the loading store. */
typedef struct target {
  const algo_policy *p; /* NULL: unmatched */
  uint16_t id;
  uint8_t declared;
} target;

typedef struct reader {
  const uint8_t *buf;
  size_t len, off;
  char *err;
  size_t err_len;
  int bad;
} reader;

/* Records the first error, at offset `at`. Returns -1. */
__attribute__((format(printf, 3, 4))) static int fail_at(reader *r, size_t at,
                                                         const char *fmt,
                                                         ...) {
  if (r->bad) return -1;
  r->bad = 1;
  char what[200];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  snprintf(r->err, r->err_len, "offset %zu: %s", at, what);
  return -1;
}

/* The next n bytes, or NULL (truncated) with the error set. */
static const uint8_t *take(reader *r, size_t n, const char *what) {
  if (r->bad) return NULL;
  if (r->len - r->off < n) {
    fail_at(r, r->off, "truncated: %s needs %zu bytes, %zu left", what, n,
            r->len - r->off);
    return NULL;
  }
  const uint8_t *p = r->buf + r->off;
  r->off += n;
  return p;
}

static int take_le(reader *r, int n, const char *what, uint64_t *v) {
  const uint8_t *p = take(r, (size_t)n, what);
  if (!p) return -1;
  *v = le_get(p, (size_t)n);
  return 0;
}

/* Whether a 16-byte state is one the policy's algorithm can have made: its
   time in range, its other half within what the algorithm keeps. */
static int state_ok(const algo_policy *p, const algo_state *st) {
  if (st->a < 0 || st->a >= SL_TIME_MAX_NS) return 0;
  if (p->ops == &algo_cell_ops) /* a TAT in ns, the emission interval */
    return st->b > 0 && st->b <= SL_PERIOD_MAX_NS;
  switch (p->pub.algo) {
  case SL_FIXED_WINDOW:
    return st->b >= 0 && st->b <= UINT32_MAX;
  case SL_TOKEN_BUCKET:
    return st->b <= p->cap && st->b >= p->cap - algo_fill_max(p);
  case SL_GCRA:
  case SL_LEAKY_BUCKET:
    return st->b >= 0 && st->b < p->Lg;
  case SL_CONCURRENCY: /* leases live in memory only: never saved, and a
                          record's numbers would be read as a lease */
    return 0;
  default: /* sliding_window: any two 32-bit counts */
    return 1;
  }
}

/* The header and the names. 0, or -1 with the error set. */
static int read_head(reader *r, target *map, store_resolve_fn resolve,
                     void *ud) {
  const uint8_t *h = take(r, HEADER_BYTES, "the header");
  if (!h) return -1;
  if (memcmp(h, magic, sizeof magic))
    return fail_at(r, 0, "not a sluice state file (no SLUICEST magic)");
  if (le_get32(h + 8) != STORE_SNAP_VERSION)
    return fail_at(r, 8, "version %llu; this sluice reads version %d",
                   (unsigned long long)le_get32(h + 8), STORE_SNAP_VERSION);
  if (le_get32(h + 12) != HEADER_BYTES)
    return fail_at(r, 12, "header length %llu, expected %d",
                   (unsigned long long)le_get32(h + 12), HEADER_BYTES);
  uint64_t nnames = le_get32(h + 24);
  if (nnames > 65536)
    return fail_at(r, 24, "%llu names; at most 65536",
                   (unsigned long long)nnames);
  for (uint64_t k = 0; k < nnames; k++) {
    size_t at = r->off;
    uint64_t id, len;
    if (take_le(r, 2, "a name's id", &id) || take_le(r, 2, "a name's length", &len))
      return -1;
    const uint8_t *name = take(r, len, "a name");
    if (!name) return -1;
    if (map[id].declared)
      return fail_at(r, at, "limiter id %llu named twice",
                     (unsigned long long)id);
    map[id].declared = 1;
    if (resolve(ud, (const char *)name, len, &map[id].p, &map[id].id))
      map[id].p = NULL;
  }
  return 0;
}

/* Restores one 16-byte state, as a charge then overwritten. */
static void put_state(sl_store *s, const target *t, const uint8_t *key,
                      size_t len, const algo_state *st, int64_t now,
                      store_snap_stats *stats) {
  store_ref r;
  store_ref_init(s, &r, t->p, t->id, key, len);
  store_lock(s, r.shard);
  sl_decision d;
  store_undo undo;
  int rc = store_decide_locked(s, &r, 1, now, 1, &d, &undo);
  if (!rc) {
    undo = (store_undo){.kind = UNDO_RESTORE, .old = *st};
    store_undo_locked(s, &r, &undo);
  }
  store_unlock(s, r.shard);
  if (rc) stats->failed++;
  else stats->restored++;
}

/* A sliding_log record's entries, after its header: checked, and with
   apply replayed (those still in the window at now). */
static int read_log(reader *r, sl_store *s, const target *t, const uint8_t *key,
                    size_t klen, int64_t now, int apply,
                    store_snap_stats *stats) {
  uint64_t n;
  if (take_le(r, 4, "a log's length", &n)) return -1;
  size_t at = r->off;
  const uint8_t *e = take(r, n > SIZE_MAX / 12 ? SIZE_MAX : n * 12, "a log");
  if (!e) return -1;
  int64_t prev = 0;
  for (uint64_t i = 0; t->p && i < n; i++) {
    int64_t ti = (int64_t)le_get64(e + 12 * i);
    uint64_t ci = le_get32(e + 12 * i + 8);
    if (ti < prev || ti >= SL_TIME_MAX_NS || ci == 0)
      return fail_at(r, at + 12 * i, "log entry %llu is out of order or range",
                     (unsigned long long)i);
    prev = ti;
  }
  if (!apply || !t->p) return 0;
  store_ref ref;
  store_ref_init(s, &ref, t->p, t->id, key, klen);
  int live = 0, rc = 0;
  for (uint64_t i = 0; i < n && !rc; i++) {
    int64_t ti = (int64_t)le_get64(e + 12 * i), level;
    if (ti <= now - t->p->W) continue; /* out of the window by now */
    live = 1;
    rc = store_force(s, &ref, (int64_t)le_get32(e + 12 * i + 8), ti, &level);
  }
  if (rc) store_remove(s, &ref);
  if (!live) stats->fresh++;
  else if (rc) stats->failed++;
  else stats->restored++;
  return 0;
}

/* One record after its tag. 0, or -1 with the error set. */
static int read_record(reader *r, sl_store *s, const target *map, int is_log,
                       int64_t now, int apply, store_snap_stats *stats) {
  size_t at = r->off - 1;
  uint64_t id, klen;
  if (take_le(r, 2, "a record's id", &id) ||
      take_le(r, 2, "a record's key length", &klen))
    return -1;
  const target *t = &map[id];
  if (!t->declared)
    return fail_at(r, at, "a record of limiter id %llu, which has no name",
                   (unsigned long long)id);
  if (klen > SL_KEY_MAX)
    return fail_at(r, at, "a key of %llu bytes; at most %d",
                   (unsigned long long)klen, SL_KEY_MAX);
  const uint8_t *key = take(r, klen, "a key");
  if (!key) return -1;
  if (t->p && is_log != (t->p->pub.algo == SL_SLIDING_LOG))
    return fail_at(r, at, "a %s record for a %s policy", is_log ? "log" : "state",
                   t->p->ops->name);
  if (apply && !t->p) stats->unmatched++;
  if (is_log) return read_log(r, s, t, key, klen, now, apply, stats);
  uint64_t a, b;
  if (take_le(r, 8, "a state", &a) || take_le(r, 8, "a state", &b)) return -1;
  algo_state st = {(int64_t)a, (int64_t)b};
  if (t->p && !state_ok(t->p, &st))
    return fail_at(r, at, "a state out of range for %s", t->p->ops->name);
  if (!apply || !t->p) return 0;
  if (t->p->ops->fresh_at(t->p, &st) <= now)
    stats->fresh++;
  else
    put_state(s, t, key, klen, &st, now, stats);
  return 0;
}

/* One pass over the input: checks it all, and with apply restores it. */
static int read_all(reader *r, sl_store *s, target *map,
                    store_resolve_fn resolve, void *ud, int64_t now, int apply,
                    store_snap_stats *st) {
  memset(map, 0, 65536 * sizeof *map);
  r->off = 0;
  if (read_head(r, map, resolve, ud)) return -1;
  uint64_t records = 0;
  for (;;) {
    const uint8_t *tag = take(r, 1, "a record");
    if (!tag) return -1;
    if (*tag == 'E') break;
    if (*tag != 'K' && *tag != 'L')
      return fail_at(r, r->off - 1, "unknown record tag 0x%02x", *tag);
    if (read_record(r, s, map, *tag == 'L', now, apply, st)) return -1;
    records++;
  }
  size_t end = r->off - 1;
  uint64_t count;
  const uint8_t *sum;
  if (take_le(r, 8, "the end", &count) ||
      !(sum = take(r, crypto_generichash_BYTES, "the checksum")))
    return -1;
  if (count != records)
    return fail_at(r, end, "the end says %llu records, the file has %llu",
                   (unsigned long long)count, (unsigned long long)records);
  if (r->off != r->len)
    return fail_at(r, r->off, "%zu bytes after the end", r->len - r->off);
  uint8_t want[crypto_generichash_BYTES];
  crypto_generichash(want, sizeof want, r->buf, r->len - sizeof want, NULL, 0);
  if (sodium_memcmp(want, sum, sizeof want))
    return fail_at(r, r->len - sizeof want, "checksum mismatch");
  st->keys = records;
  st->bytes = r->len;
  return 0;
}

/* A resolver that knows no name: the first pass checks shape alone. */
static int resolve_none(void *ud, const char *name, size_t len,
                        const algo_policy **p, uint16_t *id) {
  (void)ud, (void)name, (void)len, (void)p, (void)id;
  return -1;
}

int store_snapshot_load(sl_store *s, const uint8_t *buf, size_t len,
                        store_resolve_fn resolve, void *ud, int64_t now,
                        store_snap_stats *st, char *err, size_t err_len) {
  memset(st, 0, sizeof *st);
  if (sodium_init() < 0) return SL_ENOMEM;
  target *map = malloc(65536 * sizeof *map);
  if (!map) return SL_ENOMEM;
  reader r = {buf, len, 0, err, err_len, 0};
  /* Three passes: the file's shape and checksum with no name resolved (a
     resolver may make things, as the daemon makes an ad-hoc policy: not
     for a damaged file), then the records against their policies, then
     the restore. */
  int rc = read_all(&r, s, map, resolve_none, NULL, now, 0, st);
  if (!rc) rc = read_all(&r, s, map, resolve, ud, now, 0, st);
  if (!rc) rc = read_all(&r, s, map, resolve, ud, now, 1, st);
  free(map);
  return rc;
}
