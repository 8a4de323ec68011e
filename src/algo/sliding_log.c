/*
 * sliding_log.c — the exact sliding window: a log of allowed requests.
 *
 * Every allowed request is logged as (time, cost); an entry counts while its
 * time > t - W. Allowed iff the live sum + cost <= LIMIT, so no window of
 * length W ever holds more than LIMIT: the reference the other algorithms
 * are measured against. The price is memory: one entry per distinct instant,
 * at most LIMIT entries (each costs at least 1), 12 bytes each.
 *
 * The store owns the log block (it allocates and frees, within its memory
 * cap); this file only reads it in decide() and fills it in slog_commit().
 * The ring is kept in time order; a time before the newest entry is treated
 * as the newest entry's time. A forced charge (slog_force) can log past
 * LIMIT, up to a live sum of UINT32_MAX; a peek is always allowed.
 */
#include <string.h>

#include "algo.h"

static int64_t *slog_t(const slog *log) { return (int64_t *)(log + 1); }
static uint32_t *slog_c(const slog *log) {
  return (uint32_t *)(slog_t(log) + log->cap);
}
static uint32_t slog_idx(const slog *log, uint32_t i) {
  uint32_t k = log->head + i;
  return k >= log->cap ? k - log->cap : k;
}
static int64_t slog_newest(const slog *log) {
  return slog_t(log)[slog_idx(log, log->count - 1)];
}

size_t slog_bytes(uint32_t cap) {
  return sizeof(slog) + (size_t)cap * (sizeof(int64_t) + sizeof(uint32_t));
}

slog *slog_init(void *mem, uint32_t cap) {
  slog *log = mem;
  memset(log, 0, sizeof *log);
  log->cap = cap;
  return log;
}

/* Entries before index `*first` have expired at te; returns their cost. */
static int64_t slog_expired(const algo_policy *p, const slog *log, int64_t te,
                            uint32_t *first) {
  int64_t gone = 0;
  uint32_t i = 0;
  while (i < log->count && slog_t(log)[slog_idx(log, i)] <= te - p->W) {
    gone += slog_c(log)[slog_idx(log, i)];
    i++;
  }
  *first = i;
  return gone;
}

static int slog_decide(const algo_policy *p, const algo_state *st, int64_t t,
                       int64_t cost, sl_decision *d, algo_state *next) {
  (void)next;
  const slog *log = slog_of(st);
  int64_t te = t, live = 0;
  uint32_t first = 0;
  if (log && log->count) {
    te = max64(t, slog_newest(log));
    live = log->sum - slog_expired(p, log, te, &first);
  }
  int has_live = log && first < log->count;

  decision_init(d, p);
  if (live + cost <= p->L || cost == 0) {
    d->allowed = 1;
    d->remaining = max64(p->L - live - cost, 0);
    if (cost > 0)
      d->reset_ns = p->W; /* the entry logged now is the newest */
    else if (has_live)
      d->reset_ns = slog_newest(log) + p->W - te;
    return cost > 0;
  }
  /* Denied: wait until enough of the oldest entries have left the window. */
  d->remaining = max64(p->L - live, 0);
  d->reset_ns = slog_newest(log) + p->W - te;
  int64_t need = live + cost - p->L, freed = 0;
  for (uint32_t i = first; i < log->count; i++) {
    freed += slog_c(log)[slog_idx(log, i)];
    if (freed >= need) {
      d->retry_after_ns = slog_t(log)[slog_idx(log, i)] + p->W - te;
      break;
    }
  }
  return 0;
}

static int slog_force(const algo_policy *p, const algo_state *st, int64_t t,
                      int64_t *cost, int64_t *level, algo_state *next) {
  (void)next;
  const slog *log = slog_of(st);
  int64_t live = 0;
  uint32_t first;
  if (log && log->count)
    live = log->sum - slog_expired(p, log, max64(t, slog_newest(log)), &first);
  int64_t c = min64(*cost, (int64_t)UINT32_MAX - live);
  *cost = c;
  *level = p->L - live - c;
  return c > 0;
}

uint32_t slog_needed(const algo_policy *p, const slog *log, int64_t t) {
  if (!log || !log->count) return 1;
  int64_t newest = slog_newest(log);
  int64_t te = max64(t, newest);
  uint32_t first;
  slog_expired(p, log, te, &first);
  uint32_t live = log->count - first;
  return live + (live > 0 && newest == te ? 0 : 1);
}

void slog_move(const algo_policy *p, slog *dst, const slog *src, int64_t t) {
  uint32_t first = 0;
  int64_t gone = 0;
  if (src->count) gone = slog_expired(p, src, max64(t, slog_newest(src)), &first);
  for (uint32_t i = first; i < src->count; i++) {
    slog_t(dst)[i - first] = slog_t(src)[slog_idx(src, i)];
    slog_c(dst)[i - first] = slog_c(src)[slog_idx(src, i)];
  }
  dst->head = 0;
  dst->count = src->count - first;
  dst->sum = src->sum - gone;
}

void slog_commit(const algo_policy *p, slog *log, int64_t t, int64_t cost) {
  int64_t te = log->count ? max64(t, slog_newest(log)) : t;
  uint32_t first;
  log->sum -= slog_expired(p, log, te, &first);
  log->head = slog_idx(log, first);
  log->count -= first;
  if (log->count == 0) log->head = 0;
  if (log->count && slog_newest(log) == te) {
    slog_c(log)[slog_idx(log, log->count - 1)] += (uint32_t)cost;
  } else {
    uint32_t k = slog_idx(log, log->count);
    slog_t(log)[k] = te;
    slog_c(log)[k] = (uint32_t)cost;
    log->count++;
  }
  log->sum += cost;
}

void slog_uncommit(slog *log, int64_t cost) {
  uint32_t k = slog_idx(log, log->count - 1);
  slog_c(log)[k] -= (uint32_t)cost;
  if (slog_c(log)[k] == 0) log->count--;
  log->sum -= cost;
}

static int64_t slog_fresh_at(const algo_policy *p, const algo_state *st) {
  const slog *log = slog_of(st);
  return log && log->count ? slog_newest(log) + p->W : 0;
}

/* How many expired entries slog_used subtracts before it settles for an
   upper bound: the eviction scan reads at most this many per log. */
#define SLOG_USED_SCAN 64

/*
 * The live sum at t. Entries expire from the oldest; the walk over them
 * stops after SLOG_USED_SCAN, and what is left is then counted as live: an
 * over-estimate, which only makes the key look costlier to evict. A log
 * is pruned on every charge, so only an idle one has many to skip.
 */
static int64_t slog_used(const algo_policy *p, const algo_state *st,
                         int64_t t) {
  const slog *log = slog_of(st);
  if (!log || !log->count) return 0;
  int64_t te = max64(t, slog_newest(log)), live = log->sum;
  if (slog_newest(log) <= te - p->W) return 0;
  for (uint32_t i = 0; i < log->count && i < SLOG_USED_SCAN; i++) {
    uint32_t k = slog_idx(log, i);
    if (slog_t(log)[k] > te - p->W) break;
    live -= slog_c(log)[k];
  }
  return live;
}

const algo_ops algo_sliding_log = {SL_SLIDING_LOG, "sliding_log", slog_decide,
                                   slog_fresh_at, slog_used, slog_force};
