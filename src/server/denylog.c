/*
 * denylog.c — the denial log: one JSON line per denial (each limit over
 * its limit, enforced or shadow), written by a thread of its own so that
 * a worker never waits for the disk.
 *
 * A denial becomes a line only if (1) the sample keeps it (--log-denials:
 * the share of denials logged), (2) the queue has room
 * (--denial-log-buffer bytes: a disk slower than the denials does not
 * grow the daemon), and (3) the log's own limiter has room
 * (--denial-log-limit, a sluice policy over the log's one key, decided
 * on the denial's clock: a flood of denials cannot fill the disk). Lines
 * refused by (2) and (3), and those the disk refused, are counted in
 * sluice_denial_log_dropped_total by reason.
 *
 * Each worker has a queue of its own, a byte ring of --denial-log-buffer
 * bytes made on its first denial (its pages touched as used), and with
 * top keys on a second one, for its ad-hoc policies' denials, whose
 * lines ride with their keys in the top keys' queue and are queued here
 * by whoever counts those (denylog_adhoc); the bytes queued in all of
 * them together are at most --denial-log-buffer. A
 * worker copies a denial's figures and strings into its queue as a
 * record, as they are (no malloc, no formatting), without a lock, and
 * wakes the writer only when the writer sleeps for want of records; the
 * writer takes all that is queued, asks the log's limiter for each
 * record in turn (each worker's in their order; a refusal closes the log
 * until the limiter's retry-after, and the workers then drop denials
 * before it without queueing them), makes each record it allows its
 * JSON line (the escaping, the values' hashing, the time's text: the
 * line's cost, off the worker), writes them in large writes, and pauses
 * WRITE_PAUSE_NS before looking again, so that a flood's lines are
 * written in batches rather than with a wake-up each.
 *
 * The file is opened with O_APPEND and opened again on SIGUSR1
 * (logrotate's convention: it renames the file, then signals): the
 * writer closes the old descriptor only after the lines queued before
 * the signal are written to it.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "../algo/algo.h"
#include "../base/json.h"
#include "../base/log.h"
#include "../base/num.h"
#include "http.h"
#include "observe.h"

#define LINE_MAX_BYTES 16384 /* a line is cut (and marked) past this */
#define WRITE_PAUSE_NS 2000000 /* the writer's pause after a batch */
#define OUT_FLUSH 65536        /* the writer writes its lines this many
                                  bytes at a time */
#define QUEUES (2 * ENG_MAX_THREADS) /* (struct denylog's inbox) */

/*
 * A record: a denial as the worker saw it. The header, then its strings,
 * each a uint32_t length and its bytes: the domain, the rule, the policy,
 * the client's address, then each descriptor entry's key and value (or,
 * for an ad-hoc policy, its one key). A record whose strings do not fit
 * in LINE_MAX_BYTES is queued without them (REC_LONG): its line says so.
 */
enum { REC_ENFORCED = 1, REC_NO_RETRY = 2, REC_ADHOC = 4, REC_LONG = 8 };
enum { S_DOMAIN, S_RULE, S_POLICY, S_CLIENT, S_FIXED };

typedef struct rec_head {
  uint32_t len;   /* the whole record's bytes */
  uint16_t flags; /* REC_* */
  uint16_t nent;  /* descriptor entries (REC_ADHOC: 0, one key) */
  int64_t now, limit, remaining, retry_ms;
} rec_head;

/* A record's strings where they are (the worker's) or were copied to
   (the writer's), by S_* then the entries' keys and values. */
typedef struct rec_str {
  const char *p;
  uint32_t len;
} rec_str;

#define REC_STRS_MAX (S_FIXED + 2 * ENG_MAX_ENTRIES)

enum { D_WRITTEN, D_RATE, D_QUEUE, D_ERROR, D_COUNT };

/* A worker's queue: a byte ring of cap bytes that the worker alone
   writes (an engine_thread serves one thread at a time) and the writer
   alone reads; tail and head are byte counts written and read (ring
   index: % cap), each on its own cache line. */
typedef struct inbox {
  char *ring;
  char pad0[64];
  _Atomic size_t tail;
  char pad1[64];
  _Atomic size_t head;
  char pad2[64];
} inbox;

struct denylog {
  const observe *obs;
  double rate;
  int fd; /* 2 for stderr */
  algo_policy pol;   /* --denial-log-limit's, compiled */
  algo_state room;   /* its state (the writer's), once room_set */
  int room_set;
  _Atomic int64_t closed_until; /* it refuses every line before this */
  sl_store *store;   /* sliding_log and concurrency only (make_limiter) */
  sl_limiter *lim;

  /* Each worker's queues, made on first use: [slot] the worker writes,
     [QUEUES / 2 + slot] whoever holds the lock its top keys count under
     (the ad-hoc denials' lines that ride with their keys, topkeys.c): one
     writer each at a time. */
  _Atomic(inbox *) inbox[QUEUES];
  _Atomic unsigned ninbox; /* inbox[] past the last made are NULL */
  _Atomic size_t queued; /* bytes in all the queues: at most cap */
  _Atomic int idle;      /* the writer waits on cond for records */
  pthread_mutex_t lock;  /* cond's, and reopen and stop */
  pthread_cond_t cond;
  char *rec;      /* the writer's: the record it makes a line of */
  strbuf out;     /* the writer's: lines not yet written (kept) */
  size_t cap;
  int reopen;     /* SIGUSR1 came */
  int stop;
  int writer_up;
  pthread_t writer;

  metrics *m;
  int mid[D_COUNT];
  int m_queued;
};

/*
 * The log's own limiter: --denial-log-limit's policy over one key. The
 * log has that one key, so its algorithm decides on a state kept here
 * (take_room), with no store to hash the key and lock a shard each time;
 * only the two algorithms whose state lives in a store (sliding_log's
 * log of times, concurrency's leases) get a store of their own.
 * When it refuses a line it says until when it refuses them all (retry
 * after), and denials before then are dropped without a line being
 * formatted or a lock taken: a flood past the limit costs a load each.
 */
static int make_limiter(denylog *d, const char *spec, char *err, size_t len) {
  sl_policy p;
  char why[200];
  if (sl_policy_parse(spec, &p, why, sizeof why) ||
      algo_policy_compile(&p, &d->pol, why, sizeof why)) {
    snprintf(err, len, "--denial-log-limit '%s': %s", spec, why);
    return -1;
  }
  if (p.algo != SL_SLIDING_LOG && p.algo != SL_CONCURRENCY) return 0;
  sl_store_options so;
  sl_store_options_init(&so);
  so.max_memory = 1 << 20;
  if (sl_store_new(&so, &d->store) || sl_limiter_new(d->store, &p, &d->lim)) {
    snprintf(err, len, "--denial-log-limit: out of memory");
    return -1;
  }
  return 0;
}

/* Opens the log's file (append, created 0640). */
static int open_log(const char *path) {
  return open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0640);
}

static int to_stderr(const char *path) {
  return !path || !strcmp(path, "-");
}

/* Writes all of iov[0..n) to fd (a short write resumes where it
   stopped): 0, or -1 (errno). */
static int write_lines(int fd, struct iovec *iov, int n) {
  while (n > 0) {
    ssize_t w = writev(fd, iov, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return -1;
    while (n > 0 && (size_t)w >= iov->iov_len) {
      w -= (ssize_t)iov->iov_len;
      iov++;
      n--;
    }
    if (n > 0) {
      iov->iov_base = (char *)iov->iov_base + w;
      iov->iov_len -= (size_t)w;
    }
  }
  return 0;
}

/* Copies n bytes of ring (cap bytes) from byte count `from` on (as they
   wrap) to out. */
static void ring_get(const char *ring, size_t cap, size_t from, void *out,
                     size_t n) {
  size_t at = from % cap, first = n < cap - at ? n : cap - at;
  memcpy(out, ring + at, first);
  memcpy((char *)out + first, ring, n - first);
}

/* Copies n bytes of p into ring (cap bytes) at byte count `to` (as they
   wrap). */
static void ring_put(char *ring, size_t cap, size_t to, const void *p,
                     size_t n) {
  size_t at = to % cap, first = n < cap - at ? n : cap - at;
  memcpy(ring + at, p, first);
  memcpy(ring, (const char *)p + first, n - first);
}

static int take_room(denylog *d, int64_t now);

static void format_line(const observe *obs, strbuf *b, const rec_head *h,
                        const rec_str *s);

/* Writes b's bytes to the file (unless a write failed before: *rc -1),
   and empties b. */
static void flush_out(denylog *d, strbuf *b, int *rc) {
  if (b->len && !*rc) {
    struct iovec iov = {b->p, b->len};
    *rc = write_lines(d->fd, &iov, 1);
  }
  b->len = 0;
}

/* Makes the records in q's bytes [from, to) that the log's limiter has
   room for lines and writes them, about OUT_FLUSH bytes a write; counts
   the lines in *lines and those refused in *refused. 0, or -1 (errno)
   when a write failed (the lines after it are not written). */
static int write_records(denylog *d, inbox *q, size_t from, size_t to,
                         uint64_t *lines, uint64_t *refused) {
  strbuf *out = &d->out;
  int rc = 0;
  for (size_t at = from; at < to;) {
    rec_head h;
    ring_get(q->ring, d->cap, at, &h, sizeof h);
    size_t rec_at = at + sizeof h;
    at += h.len;
    if (!take_room(d, h.now)) {
      ++*refused;
      continue;
    }
    ++*lines;
    ring_get(q->ring, d->cap, rec_at, d->rec, h.len - sizeof h);
    rec_str s[REC_STRS_MAX] = {{NULL, 0}};
    size_t ns = h.flags & REC_LONG    ? 0
                : h.flags & REC_ADHOC ? S_FIXED + 1
                                      : S_FIXED + 2 * (size_t)h.nent;
    const char *p = d->rec;
    for (size_t i = 0; i < ns; i++) {
      memcpy(&s[i].len, p, 4);
      s[i].p = p + 4;
      p += 4 + s[i].len;
    }
    format_line(d->obs, out, &h, s);
    if (out->oom) { /* (the lines so far are lost with the buffer) */
      strbuf_free(out);
      rc = -1;
    }
    if (out->len >= OUT_FLUSH) flush_out(d, out, &rc);
  }
  flush_out(d, out, &rc);
  /* (kept for the next batch, unless a line of many escaped bytes grew
     it past twice a write's worth) */
  if (out->cap > 2 * OUT_FLUSH) strbuf_free(out);
  return rc;
}

/* Opens the file again (SIGUSR1) once what was queued before is written;
   the old file is kept when the new one cannot be opened. */
static void reopen_file(denylog *d, const char *path) {
  if (to_stderr(path)) return;
  int fd = open_log(path);
  if (fd < 0) {
    log_msg("error", "--denial-log %s: cannot open it again: %s (still "
                     "writing to the old file)", path, strerror(errno));
  } else {
    close(d->fd);
    d->fd = fd;
    log_msg("info", "SIGUSR1: --denial-log %s opened again", path);
  }
}

/* Takes what every worker's queue holds: its records pass the log's
   limiter (in each worker's order) and become lines, written. The bytes
   taken. */
static size_t take_queued(denylog *d) {
  size_t taken = 0;
  uint64_t lines = 0, refused = 0, failed = 0;
  size_t nq = atomic_load(&d->ninbox);
  for (size_t i = 0; i < nq; i++) {
    inbox *q = atomic_load_explicit(&d->inbox[i], memory_order_acquire);
    if (!q) continue;
    size_t from = atomic_load_explicit(&q->head, memory_order_relaxed);
    size_t to = atomic_load_explicit(&q->tail, memory_order_acquire);
    if (from == to) continue;
    uint64_t n = 0;
    if (write_records(d, q, from, to, &n, &refused))
      failed += n;
    else
      lines += n;
    /* (the bytes stay counted in `queued` until read: a worker writes
       only where the writer has read) */
    atomic_store_explicit(&q->head, to, memory_order_release);
    atomic_fetch_sub(&d->queued, to - from);
    taken += to - from;
  }
  if (d->m && taken) {
    metrics_global_add(d->m, d->mid[D_WRITTEN], lines);
    metrics_global_add(d->m, d->mid[D_ERROR], failed);
    metrics_global_add(d->m, d->mid[D_RATE], refused);
    metrics_global_set(d->m, d->m_queued, atomic_load(&d->queued));
  }
  return taken;
}

/* The writer: takes what is queued, writes it, and opens the file again
   when SIGUSR1 asked, until stopped with nothing left. It sleeps only
   when the queues are empty (idle: a worker that queues a record then
   wakes it). */
static void *writer_main(void *arg) {
  denylog *d = arg;
  pthread_mutex_lock(&d->lock);
  for (;;) {
    while (!d->reopen && !d->stop) {
      atomic_store(&d->idle, 1); /* (then looks: enqueue says why) */
      if (atomic_load(&d->queued)) break;
      pthread_cond_wait(&d->cond, &d->lock);
    }
    atomic_store(&d->idle, 0);
    int reopen = d->reopen, stop = d->stop;
    d->reopen = 0;
    pthread_mutex_unlock(&d->lock);
    size_t taken = take_queued(d);
    if (reopen) reopen_file(d, d->obs->o.log_path);
    pthread_mutex_lock(&d->lock);
    if (stop && !atomic_load(&d->queued)) break;
    if (taken && !d->stop && !d->reopen) { /* let a flood gather */
      pthread_mutex_unlock(&d->lock);
      nanosleep(&(struct timespec){0, WRITE_PAUSE_NS}, NULL);
      pthread_mutex_lock(&d->lock);
    }
  }
  pthread_mutex_unlock(&d->lock);
  return NULL;
}

denylog *denylog_new(const observe *obs, char *err, size_t len) {
  const observe_opts *o = &obs->o;
  denylog *d = calloc(1, sizeof *d);
  if (!d) {
    snprintf(err, len, "out of memory");
    return NULL;
  }
  d->obs = obs;
  d->rate = o->log_rate < 0 ? 1 : o->log_rate;
  d->fd = 2;
  pthread_mutex_init(&d->lock, NULL);
  pthread_cond_init(&d->cond, NULL);
  d->cap = o->log_buffer;
  if (!(d->rec = malloc(LINE_MAX_BYTES))) {
    snprintf(err, len, "out of memory");
    goto fail;
  }
  if (make_limiter(d, o->log_limit, err, len)) goto fail;
  if (!to_stderr(o->log_path) && (d->fd = open_log(o->log_path)) < 0) {
    snprintf(err, len, "--denial-log %s: %s", o->log_path, strerror(errno));
    goto fail;
  }
  if (pthread_create(&d->writer, NULL, writer_main, d)) {
    snprintf(err, len, "--denial-log: cannot start its thread");
    goto fail;
  }
  d->writer_up = 1;
  pthread_setname_np(d->writer, "sluice-denylog");
  return d;
fail:
  denylog_free(d);
  return NULL;
}

int denylog_metrics(denylog *d, metrics *m) {
  static const metric_def defs[D_COUNT] = {
      [D_WRITTEN] = {"sluice_denial_log_lines_total", NULL, METRIC_COUNTER,
                     METRIC_GLOBAL, METRIC_GROUP_DAEMON,
                     "Denial log lines written."},
      [D_RATE] = {"sluice_denial_log_dropped_total", "reason=\"rate_limited\"",
                  METRIC_COUNTER, METRIC_GLOBAL, METRIC_GROUP_DAEMON,
                  "Denial log lines dropped, by reason: over "
                  "--denial-log-limit, the queue full (the disk slower than "
                  "the denials), or the write failed."},
      [D_QUEUE] = {"sluice_denial_log_dropped_total", "reason=\"queue_full\"",
                   METRIC_COUNTER, METRIC_GLOBAL, METRIC_GROUP_DAEMON, NULL},
      [D_ERROR] = {"sluice_denial_log_dropped_total", "reason=\"write_error\"",
                   METRIC_COUNTER, METRIC_GLOBAL, METRIC_GROUP_DAEMON, NULL},
  };
  static const metric_def queued = {
      "sluice_denial_log_queued_bytes", NULL, METRIC_GAUGE, METRIC_GLOBAL,
      METRIC_GROUP_DAEMON,
      "Denial log bytes waiting for the writer (at most "
      "--denial-log-buffer)."};
  for (int i = 0; i < D_COUNT; i++)
    if ((d->mid[i] = metrics_add(m, &defs[i])) < 0) return -1;
  if ((d->m_queued = metrics_add(m, &queued)) < 0) return -1;
  d->m = m;
  return 0;
}

/* A JSON string of a shown value (observe_value), escaped: a hashed or
   redacted value is plain ASCII ("h:" and hex digits, "[redacted]"), so
   only a plain one needs the escaper. */
static void json_value(const observe *obs, strbuf *b, const char *v,
                       size_t n) {
  if (obs->o.values == OBS_VALUES_PLAIN) {
    json_put_str(b, v, n);
    return;
  }
  STRBUF_LIT(b, "\"");
  observe_value(obs, b, v, n);
  STRBUF_LIT(b, "\"");
}

/* "2026-11-21T12:00:00.123Z" for now (ns since the epoch): the seconds'
   text is kept per thread, as a flood's lines share their second. */
static void add_time(strbuf *b, int64_t now) {
  static _Thread_local int64_t sec = -1;
  static _Thread_local char ts[40];
  static _Thread_local size_t tn;
  if (now / 1000000000 != sec) {
    sec = now / 1000000000;
    time_t s = (time_t)sec;
    struct tm tm;
    gmtime_r(&s, &tm);
    tn = strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%S.", &tm);
  }
  strbuf_add(b, ts, tn);
  int ms = (int)(now % 1000000000 / 1000000);
  char frac[4] = {(char)('0' + ms / 100), (char)('0' + ms / 10 % 10),
                  (char)('0' + ms % 10), 'Z'};
  strbuf_add(b, frac, 4);
}

/* Record h's line (s its strings), newline included, after b's bytes; a
   line over LINE_MAX_BYTES (a descriptor of many long values, escaped)
   says so in its stead. */
static void format_line(const observe *obs, strbuf *b, const rec_head *h,
                        const rec_str *s) {
  size_t start = b->len;
  if (h->flags & REC_LONG) goto too_long;
  STRBUF_LIT(b, "{\"time\":\"");
  add_time(b, h->now);
  STRBUF_LIT(b, "\",\"domain\":");
  if (!(h->flags & REC_ADHOC)) {
    json_put_str(b, s[S_DOMAIN].p, s[S_DOMAIN].len);
    STRBUF_LIT(b, ",\"rule\":");
    json_put_str(b, s[S_RULE].p, s[S_RULE].len);
    STRBUF_LIT(b, ",\"descriptor\":{");
    for (size_t i = 0; i < h->nent; i++) {
      const rec_str *k = &s[S_FIXED + 2 * i];
      if (i) STRBUF_LIT(b, ",");
      json_put_str(b, k[0].p, k[0].len);
      STRBUF_LIT(b, ":");
      json_value(obs, b, k[1].p, k[1].len);
    }
    STRBUF_LIT(b, "}");
  } else {
    STRBUF_LIT(b, "null,\"rule\":null,\"key\":");
    json_value(obs, b, s[S_FIXED].p, s[S_FIXED].len);
  }
  STRBUF_LIT(b, ",\"client\":");
  if (s[S_CLIENT].len)
    json_value(obs, b, s[S_CLIENT].p, s[S_CLIENT].len);
  else
    STRBUF_LIT(b, "null");
  STRBUF_LIT(b, ",\"policy\":");
  json_put_str(b, s[S_POLICY].p, s[S_POLICY].len);
  STRBUF_LIT(b, ",\"limit\":");
  strbuf_add_i64(b, h->limit);
  STRBUF_LIT(b, ",\"remaining\":");
  strbuf_add_i64(b, h->remaining);
  STRBUF_LIT(b, ",\"retry_after_ms\":");
  if (h->flags & REC_NO_RETRY)
    STRBUF_LIT(b, "null");
  else
    strbuf_add_i64(b, h->retry_ms);
  STRBUF_LIT(b, ",\"mode\":\"");
  if (h->flags & REC_ENFORCED)
    STRBUF_LIT(b, "enforced\"}\n");
  else
    STRBUF_LIT(b, "shadow\"}\n");
  if (b->len - start <= LINE_MAX_BYTES || b->oom) return;
too_long:
  b->len = start;
  strbuf_addf(b, "{\"time\":null,\"error\":\"line over %d bytes\"}\n",
              LINE_MAX_BYTES);
}

/* Whether the sample keeps this denial: a per-thread xorshift draw. */
static int sampled(double rate) {
  if (rate >= 1) return 1;
  static _Thread_local uint64_t x;
  if (!x) x = ((uint64_t)(uintptr_t)&x ^ (uint64_t)clock_mono_ns()) | 1;
  x ^= x << 13;
  x ^= x >> 7;
  x ^= x << 17;
  return (double)(x >> 11) * 0x1p-53 < rate;
}

/* Whether the log's own limiter has room for one more line at now (the
   decision's clock); the writer's alone. Its algorithm decides on the state
   kept here, or on its store (make_limiter). A refusal closes the log
   until the limiter's retry-after (for good when a line can never fit:
   a limit of 0). */
static int take_room(denylog *d, int64_t now) {
  sl_decision room;
  int rc = 0;
  if (d->lim) {
    rc = sl_limiter_take(d->lim, "log", 3, 1, now, &room);
  } else if (d->pol.B < 1 || now < 0 || now >= SL_TIME_MAX_NS) {
    rc = -1;
  } else {
    algo_state next;
    if (d->pol.ops->decide(&d->pol, d->room_set ? &d->room : NULL, now, 1,
                           &room, &next)) {
      d->room = next;
      d->room_set = 1;
    }
  }
  if (!rc && room.allowed) return 1;
  int64_t until = rc || room.retry_after_ns < 0 ? INT64_MAX
                                                : now + room.retry_after_ns;
  atomic_store_explicit(&d->closed_until, until, memory_order_relaxed);
  return 0;
}

/* Queue `slot` (of QUEUES), made on its first record (and published for
   the writer); NULL out of memory. */
static inbox *inbox_of(denylog *d, unsigned slot) {
  if (slot >= QUEUES) return NULL;
  inbox *q = atomic_load_explicit(&d->inbox[slot], memory_order_acquire);
  if (q) return q;
  if (!(q = calloc(1, sizeof *q))) return NULL;
  if (!(q->ring = malloc(d->cap))) { /* (pages are touched as used) */
    free(q);
    return NULL;
  }
  atomic_store_explicit(&d->inbox[slot], q, memory_order_release);
  unsigned n = atomic_load(&d->ninbox);
  while (n < slot + 1 &&
         !atomic_compare_exchange_weak(&d->ninbox, &n, slot + 1)) {
  }
  return q;
}

/*
 * Queues record h (its strings s[0..ns)) in the worker's queue when the
 * queues together have room for it (--denial-log-buffer), without a lock:
 * the log's limiter is the writer's, which decides in each worker's order
 * on the record's `now`. Else drops it, counted (queue_full).
 */
static void enqueue(denylog *d, unsigned slot, rec_head *h,
                    const rec_str *s, size_t ns) {
  size_t n = sizeof *h;
  for (size_t i = 0; i < ns; i++) n += 4 + s[i].len;
  if (n - sizeof *h > LINE_MAX_BYTES) { /* its line says so instead */
    h->flags |= REC_LONG;
    ns = 0;
    n = sizeof *h;
  }
  h->len = (uint32_t)n;
  inbox *q = inbox_of(d, slot);
  /* (acq_rel: a worker that sees the writer's release of bytes sees its
     head moved past them, so it writes only where the writer has read) */
  size_t before = q ? atomic_fetch_add(&d->queued, n) : d->cap;
  if (before + n > d->cap) {
    if (q) atomic_fetch_sub(&d->queued, n);
    if (d->m) metrics_global_add(d->m, d->mid[D_QUEUE], 1);
    return;
  }
  /* Straight into the ring where the record fits before its end (nearly
     always); else made whole on the stack, then copied in two parts. */
  size_t tail = atomic_load_explicit(&q->tail, memory_order_relaxed);
  size_t at = tail % d->cap;
  char mem[sizeof *h + LINE_MAX_BYTES];
  char *to = at + n <= d->cap ? q->ring + at : mem;
  memcpy(to, h, sizeof *h);
  to += sizeof *h;
  for (size_t i = 0; i < ns; i++) {
    memcpy(to, &s[i].len, 4);
    if (s[i].len) memcpy(to + 4, s[i].p, s[i].len); /* (an ad-hoc's
                                                        domain, rule) */
    to += 4 + s[i].len;
  }
  if (at + n > d->cap) ring_put(q->ring, d->cap, tail, mem, n);
  atomic_store_explicit(&q->tail, tail + n, memory_order_release);
  if (d->m) metrics_global_set(d->m, d->m_queued, before + n);
  /* Only a writer waiting for records needs a wake-up (a futex call per
     line would cost more than the line). seq_cst, as the writer's idle
     store and its look at `queued`: either it sees this record, or this
     sees it idle. */
  if (atomic_load(&d->idle)) {
    pthread_mutex_lock(&d->lock);
    atomic_store(&d->idle, 0);
    pthread_cond_signal(&d->cond);
    pthread_mutex_unlock(&d->lock);
  }
}

/* A string as a record's (lengths past 4 GiB cannot occur: a request's
   bytes are bounded far below). */
static rec_str str_of(const char *p, size_t n) {
  return (rec_str){p ? p : "", (uint32_t)n};
}

int denylog_wants(denylog *d, int64_t now) {
  if (!sampled(d->rate)) return 0;
  /* (a line refused at a later `now` by another worker closes the log a
     little early for this one: it would have been refused too) */
  if (now < atomic_load_explicit(&d->closed_until, memory_order_relaxed)) {
    if (d->m) metrics_global_add(d->m, d->mid[D_RATE], 1);
    return 0;
  }
  return 1;
}

void denylog_adhoc(denylog *d, unsigned slot, const denylog_line *l) {
  rec_head h = {.now = l->now, .limit = l->limit, .remaining = l->remaining,
                .flags = REC_ADHOC | (l->enforced ? REC_ENFORCED : 0)};
  if (l->retry_after_ns < 0)
    h.flags |= REC_NO_RETRY;
  else
    h.retry_ms = ns_to_ms_up(l->retry_after_ns);
  rec_str s[S_FIXED + 1];
  s[S_DOMAIN] = s[S_RULE] = str_of(NULL, 0);
  s[S_POLICY] = str_of(l->policy, l->policy_len);
  s[S_CLIENT] = str_of(l->client, l->client_len);
  s[S_FIXED] = str_of(l->key, l->key_len);
  if (slot < ENG_MAX_THREADS) enqueue(d, QUEUES / 2 + slot, &h, s, S_FIXED + 1);
}

void denylog_decision(denylog *d, unsigned slot, const eng_query *q,
                      const eng_result *out) {
  char addr[ENG_CLIENT_MAX];
  int have_addr = 0;
  for (size_t i = 0; i < out->n; i++) {
    const eng_status *st = &out->st[i];
    if (st->d.allowed || !denylog_wants(d, q->now)) continue;
    if (!have_addr) { /* (once per decision, however many lines) */
      addr[0] = '\0';
      if (q->client) q->client(q->client_ud, addr, sizeof addr);
      have_addr = 1;
    }
    /* Enforced: this limit denied the request. Shadow: it would have (a
       shadow_mode rule, or a quota limit another quota limit overruled). */
    rec_head h = {.now = q->now,
                  .limit = (int64_t)st->d.limit,
                  .remaining = (int64_t)st->d.remaining};
    if (!out->allowed && !st->shadow) h.flags |= REC_ENFORCED;
    if (st->d.retry_after_ns < 0)
      h.flags |= REC_NO_RETRY;
    else
      h.retry_ms = ns_to_ms_up(st->d.retry_after_ns);
    rec_str s[REC_STRS_MAX];
    size_t ns = S_FIXED;
    s[S_POLICY] = str_of(st->policy_str, strlen(st->policy_str));
    s[S_CLIENT] = str_of(addr, strlen(addr));
    if (q->kind == ENG_QUERY_RULES) {
      const eng_descriptor *desc = &q->req->descriptors[st->descriptor];
      s[S_DOMAIN] = str_of(q->req->domain, q->req->domain_len);
      s[S_RULE] = str_of(st->limit->rule, strlen(st->limit->rule));
      h.nent = (uint16_t)desc->n;
      for (size_t e = 0; e < desc->n; e++) {
        s[ns++] = str_of(desc->entries[e].key, desc->entries[e].key_len);
        s[ns++] = str_of(desc->entries[e].value, desc->entries[e].value_len);
      }
    } else {
      h.flags |= REC_ADHOC;
      s[S_DOMAIN] = s[S_RULE] = str_of(NULL, 0);
      s[ns++] = str_of(q->key, q->key_len);
    }
    enqueue(d, slot, &h, s, ns);
  }
}

void denylog_reopen(denylog *d) {
  pthread_mutex_lock(&d->lock);
  d->reopen = 1;
  pthread_cond_signal(&d->cond);
  pthread_mutex_unlock(&d->lock);
}

void denylog_free(denylog *d) {
  if (!d) return;
  if (d->writer_up) {
    pthread_mutex_lock(&d->lock);
    d->stop = 1;
    pthread_cond_signal(&d->cond);
    pthread_mutex_unlock(&d->lock);
    pthread_join(d->writer, NULL);
  }
  for (size_t i = 0; i < QUEUES; i++) {
    inbox *q = atomic_load(&d->inbox[i]);
    if (q) free(q->ring);
    free(q);
  }
  free(d->rec);
  strbuf_free(&d->out);
  if (d->fd > 2) close(d->fd);
  sl_limiter_free(d->lim);
  sl_store_free(d->store);
  pthread_mutex_destroy(&d->lock);
  pthread_cond_destroy(&d->cond);
  free(d);
}
