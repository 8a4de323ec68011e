/*
 * approx.c — approximate mode's backend: local decisions whose charges a
 * sync thread (sync.c) pushes to Redis every interval.
 *
 * Each worker records what it charged to each (limiter, key) since the
 * last sync in a table of its own (a delta table: open addressing, its
 * entries in an arena, one lock that only the sync contends). The sync
 * takes every table (approx_take), pushes the charges, and applies the
 * fleet's levels (approx_apply): a key this daemon thinks fuller than the
 * fleet does is charged the difference by force, so that a fleet over its
 * limit owes the excess on every daemon. A push that Redis did not run is
 * carried to the next rounds for up to SYNC_CARRY_NS.
 *
 * Resets: this daemon's state and unpushed charges for a key go at once,
 * its Redis key is UNLINKed, and the other daemons are told by a PUBLISH
 * (unlink.c); their sync threads hand what they hear to
 * approx_reset_message.
 *
 * Locks: the engine's limiter lock (engine_limiters_lock: no limiter is
 * freed while a round holds pointers to them) -> threads_lock (this
 * backend's list of worker tables) -> a worker's dlock; carry_lock is
 * taken alone or under the limiter lock.
 */
#include "approx.h"

#include <pthread.h>
#include <sodium.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../base/clock.h"
#include "../limiter.h"
#include "internal.h"
#include "keys.h"

/* A charge whose push failed is pushed again with every round, for up to
   SYNC_CARRY_NS after the first failure, SYNC_CARRY_MAX keys at most: a
   Redis that blinks loses nothing, one that stays away costs bounded
   memory. */
#define SYNC_CARRY_NS (10 * 1000000000LL)
#define SYNC_CARRY_MAX 262144
/* How many keys ahead of the one at hand the sync's passes over a round
   start loading the next ones' table slots and states. */
#define DELTA_AHEAD 8

/* What one thread charged to one (limiter, key) since the last sync. It
   lives in its table's arena, key and Redis name inline. */
struct approx_delta {
  struct approx_delta *next; /* the table's entries, in the order they came */
  sl_limiter *lim;
  sl_policy policy;
  int64_t cost;
  uint64_t h;
  uint32_t key_len, rkey_len;
  char *rkey;      /* the key's name in Redis */
  int64_t failed;  /* carried: when its push first failed (mono ns) */
  int64_t counted; /* of cost, what sluice_sync_retried_cost_total has */
  uint8_t key[];
};

/* A slot of a delta table: the entry's hash beside it, so that a probe
   reads the entry only when the hash matches. */
typedef struct delta_slot {
  uint64_t h;
  approx_delta *d; /* NULL: empty */
} delta_slot;

/* Memory for a table's entries, freed with the table. */
typedef struct delta_chunk {
  struct delta_chunk *next;
  size_t used, cap;
  max_align_t mem[];
} delta_chunk;

/* The charges of one thread (or of a round) per (limiter, key): open
   addressing with linear probing, at most half full. */
typedef struct delta_table {
  delta_slot *slot;
  size_t mask, n;
  approx_delta *head, **tail; /* every entry, in order */
  delta_chunk *chunks;
} delta_table;

/* A worker's state. */
typedef struct approx_thread {
  fleet_io io; /* first: fleet_thread_set_transport (resets) */
  approx *a;
  unsigned slot;         /* in a->threads */
  pthread_mutex_t dlock; /* the charges since the sync */
  delta_table *dt;
  /* dt's slots and mask, for prefetch hints read without dlock: written
     by this thread only, stale once the sync takes dt (harmless: a
     prefetch of any address is). */
  _Atomic uintptr_t dhint_slot;
  _Atomic size_t dhint_mask;
} approx_thread;

struct approx {
  eng_backend base;
  fleet_opts o;
  engine *e;
  pthread_mutex_t threads_lock;
  approx_thread *threads[ENG_MAX_THREADS];
  unsigned char delta_key[crypto_shorthash_KEYBYTES]; /* delta_hash's */
  char instance[17];          /* this daemon, in its resets' PUBLISH */
  char channel[64];           /* the resets' channel */
  delta_table *round;         /* the sync thread's, taken to apply */
  pthread_mutex_t carry_lock; /* the carry, and resets */
  delta_table *carry;         /* charges to push again next round */
  int m_stats[APPROX_COUNT], m_subscribed;
};

/* ---- delta tables ---- */

/* A keyed hash (SipHash, the backend's random key: keys are the clients'
   choice), mixed with the limiter. */
static uint64_t delta_hash(const approx *a, const sl_limiter *lim,
                           const void *key, size_t n) {
  uint64_t h;
  crypto_shorthash((unsigned char *)&h, n ? key : (const void *)"", n,
                   a->delta_key);
  h ^= (uint64_t)(uintptr_t)lim * 0x9e3779b97f4a7c15u;
  return h ^ h >> 29;
}

static delta_table *delta_table_new(void) {
  delta_table *t = calloc(1, sizeof *t);
  if (!t) return NULL;
  t->mask = 1023;
  t->slot = calloc(t->mask + 1, sizeof *t->slot);
  if (!t->slot) {
    free(t);
    return NULL;
  }
  t->tail = &t->head;
  return t;
}

static void delta_table_free(delta_table *t) {
  if (!t) return;
  for (delta_chunk *c = t->chunks, *next; c; c = next) {
    next = c->next;
    free(c);
  }
  free(t->slot);
  free(t);
}

/* The table's entry for (lim, key) of hash h, or NULL (t may be NULL). */
static approx_delta *delta_find(const delta_table *t, const sl_limiter *lim,
                                const void *key, size_t key_len, uint64_t h) {
  if (!t) return NULL;
  for (size_t i = h & t->mask;; i = (i + 1) & t->mask) {
    const delta_slot *s = &t->slot[i];
    if (!s->d) return NULL;
    if (s->h == h && s->d->lim == lim && s->d->key_len == key_len &&
        !memcmp(s->d->key, key, key_len))
      return s->d;
  }
}

/* Adds entry d (not in the table yet) to the slots and to the list. -1
   when the slots cannot grow. */
static int delta_link(delta_table *t, approx_delta *d) {
  if ((t->n + 1) * 2 > t->mask + 1) {
    size_t mask = t->mask * 2 + 1;
    delta_slot *slot = calloc(mask + 1, sizeof *slot);
    if (!slot) return -1;
    for (size_t i = 0; i <= t->mask; i++) {
      if (!t->slot[i].d) continue;
      size_t j = t->slot[i].h & mask;
      while (slot[j].d) j = (j + 1) & mask;
      slot[j] = t->slot[i];
    }
    free(t->slot);
    t->slot = slot;
    t->mask = mask;
  }
  size_t j = d->h & t->mask;
  while (t->slot[j].d) j = (j + 1) & t->mask;
  t->slot[j] = (delta_slot){d->h, d};
  t->n++;
  d->next = NULL;
  *t->tail = d;
  t->tail = &d->next;
  return 0;
}

/* n bytes from the table's arena (64 KiB chunks), or NULL. */
static void *delta_alloc(delta_table *t, size_t n) {
  n = (n + sizeof(max_align_t) - 1) & ~(sizeof(max_align_t) - 1);
  delta_chunk *c = t->chunks;
  if (!c || c->cap - c->used < n) {
    size_t cap = n > 65536 ? n : 65536;
    c = malloc(sizeof *c + cap);
    if (!c) return NULL;
    c->used = 0;
    c->cap = cap;
    c->next = t->chunks;
    t->chunks = c;
  }
  void *p = (char *)c->mem + c->used;
  c->used += n;
  return p;
}

/* ---- charges ---- */

/* Before a decision: the hash of (lim, key) in the thread's delta table,
   and its slot's cache line on its way, so that this miss overlaps the
   store's (note_charge takes the hash). */
static uint64_t delta_prefetch(approx_thread *at, const sl_limiter *lim,
                               const void *key, size_t key_len) {
  uint64_t h = delta_hash(at->a, lim, key, key_len);
  uintptr_t s = atomic_load_explicit(&at->dhint_slot, memory_order_relaxed);
  size_t m = atomic_load_explicit(&at->dhint_mask, memory_order_relaxed);
  if (s) __builtin_prefetch((const void *)(s + (h & m) * sizeof(delta_slot)));
  return h;
}

/* Records a local charge for the next sync; h is delta_prefetch's. One
   lock, and for a key new this interval an entry from the thread table's
   arena. */
static void note_charge(approx_thread *at, const eng_check *c, uint64_t h) {
  sl_limiter *lim = c->c.limiter;
  const void *key = c->c.key;
  size_t key_len = c->c.key_len;
  if (c->c.cost <= 0) return;
  pthread_mutex_lock(&at->dlock);
  if (!at->dt) at->dt = delta_table_new();
  approx_delta *d = delta_find(at->dt, lim, key, key_len, h);
  if (d) {
    d->cost += c->c.cost;
  } else if (at->dt) {
    size_t rmax = REDIS_KEY_MAX(0, key_id_len(&c->name), key_len);
    d = delta_alloc(at->dt, sizeof *d + key_len + rmax);
    if (d) {
      d->lim = lim;
      d->policy = *sl_limiter_policy(lim);
      d->cost = c->c.cost;
      d->h = h;
      d->failed = 0;
      d->counted = 0;
      d->key_len = (uint32_t)key_len;
      memcpy(d->key, key, key_len);
      d->rkey = (char *)d->key + key_len;
      d->rkey_len = (uint32_t)redis_key(d->rkey, "", 0, &c->name, key, key_len);
      if (delta_link(at->dt, d)) d = NULL;
    }
  }
  if (at->dt) { /* the hints follow a new or grown table */
    atomic_store_explicit(&at->dhint_slot, (uintptr_t)at->dt->slot,
                          memory_order_relaxed);
    atomic_store_explicit(&at->dhint_mask, at->dt->mask, memory_order_relaxed);
  }
  pthread_mutex_unlock(&at->dlock);
  /* d NULL: out of memory, the charge is lost for the sync (the fleet can
     overshoot by it). */
}

static int approx_decide(eng_backend *b, void *bt, const eng_decision *q,
                         sl_decision *dec, int *all, eng_decided_fn done,
                         void *ud) {
  (void)b, (void)done, (void)ud;
  approx_thread *at = bt;
  uint64_t dh[ENG_MAX_STATUSES];
  for (size_t c = 0; c < q->n; c++)
    dh[c] = delta_prefetch(at, q->checks[c].c.limiter, q->checks[c].c.key,
                           q->checks[c].c.key_len);
  int rc = engine_decide_local(q, dec, all);
  if (rc || !*all || q->lease_op) return rc;
  /* Leases stay on this daemon (docs/fleet.md, "Concurrency"): a lease
     has no level the fleet could sum, only holders here to release it. */
  for (size_t c = 0; c < q->n; c++)
    if (dec[c].allowed &&
        sl_limiter_policy(q->checks[c].c.limiter)->algo != SL_CONCURRENCY)
      note_charge(at, &q->checks[c], dh[c]);
  return 0;
}

/* A reset: what the threads have charged to (lim, key) and not yet handed
   to the sync is dropped (the entry's cost becomes 0: the sync sends
   nothing for it and applies no level). Returns whether there was any.
   What a round has already taken is in flight: not here. */
static int forget_charges(approx *a, const sl_limiter *lim, const void *key,
                          size_t key_len) {
  uint64_t h = delta_hash(a, lim, key, key_len);
  int found = 0;
  pthread_mutex_lock(&a->threads_lock);
  for (unsigned i = 0; i < ENG_MAX_THREADS; i++) {
    approx_thread *at = a->threads[i];
    if (!at) continue;
    pthread_mutex_lock(&at->dlock);
    approx_delta *d = delta_find(at->dt, lim, key, key_len, h);
    if (d && d->cost > 0) {
      d->cost = 0;
      found = 1;
    }
    pthread_mutex_unlock(&at->dlock);
  }
  pthread_mutex_unlock(&a->threads_lock);
  pthread_mutex_lock(&a->carry_lock); /* and what waits to be pushed again */
  approx_delta *d = delta_find(a->carry, lim, key, key_len, h);
  if (d && d->cost > 0) {
    d->cost = 0;
    d->counted = d->failed = 0; /* charges after it start afresh */
    found = 1;
  }
  pthread_mutex_unlock(&a->carry_lock);
  return found;
}

/* ---- resets ---- */

/* A reset item's unpushed charges, dropped (fleet_reset's `also`). */
static int forget_item(void *ctx, const eng_forget *x) {
  return x->lim ? forget_charges(ctx, x->lim, x->key, x->key_len) : 0;
}

static int approx_reset(eng_backend *b, void *bt, const eng_forgets *f,
                        eng_reset *out, eng_reset_fn done, void *ud) {
  approx *a = (approx *)b;
  approx_thread *at = bt;
  /* The sync's keys carry no tag: neither do their resets. */
  eng_forgets untagged = {f->items, f->n, "", 0};
  unlink_opts o = {a->o.cluster, a->channel, a->instance};
  return fleet_reset(&at->io, &o, &untagged, forget_item, a, out, done, ud);
}

void approx_reset_channel(const approx *a, char *dst, size_t len) {
  snprintf(dst, len, "%s", a->channel);
}

int approx_reset_message(approx *a, const void *msg, size_t len) {
  static const char head[] = "sluice-reset ";
  const char *p = msg, *end = p + len;
  size_t hl = sizeof head - 1;
  if (len < hl + 17 || memcmp(p, head, hl) || p[hl + 16] != '\n') return -1;
  if (!memcmp(p + hl, a->instance, 16)) return 0; /* ours: done already */
  int dropped = 0;
  engine_limiters_lock(a->e); /* no limiter freed meanwhile */
  for (p += hl + 17; p < end;) {
    /* "LEN:KEY", KEY a state key (keys.h) */
    long long n = 0;
    const char *q = p;
    for (; q < end && *q >= '0' && *q <= '9' && n < (1LL << 40); q++)
      n = n * 10 + (*q - '0');
    if (q == p || q == end || *q != ':' || n > end - q - 1) break;
    redis_key_parts k;
    p = q + 1 + n;
    if (redis_key_parse(q + 1, (size_t)n, &k) || k.key_len > SL_KEY_MAX)
      continue;
    sl_limiter *lim =
        engine_limiter_named(a->e, k.kind, k.id, k.id_len, KEY_ID_SEP);
    if (!lim) continue;
    int had = sl_limiter_reset(lim, k.key, k.key_len) == 1;
    had |= forget_charges(a, lim, k.key, k.key_len);
    dropped += had;
  }
  engine_limiters_unlock(a->e);
  approx_count(a, APPROX_RESETS, 1);
  return dropped;
}

void approx_subscribed(approx *a, int on) {
  metrics_global_set(engine_metrics_registry(a->e), a->m_subscribed,
                     (uint64_t)on);
}

void approx_count(approx *a, int what, uint64_t n) {
  if (what >= 0 && what < APPROX_COUNT)
    metrics_global_add(engine_metrics_registry(a->e), a->m_stats[what], n);
}

/* ---- the sync's rounds ---- */

/* lim is about to be freed (a reload; no thread can charge it any more).
   Its entries, in the threads' tables, the round and the carry, keep their
   charges for the sync (their policy and Redis name are copies) but lose
   the limiter: a later one at the same address must not take them, nor
   their fleet level. Under the limiter lock, which take and apply hold
   too. */
static void delta_forget(delta_table *t, const sl_limiter *lim) {
  for (approx_delta *d = t ? t->head : NULL; d; d = d->next)
    if (d->lim == lim) d->lim = NULL;
}

static void approx_forget(eng_backend *b, const sl_limiter *lim) {
  approx *a = (approx *)b;
  pthread_mutex_lock(&a->threads_lock);
  for (unsigned i = 0; i < ENG_MAX_THREADS; i++) {
    approx_thread *at = a->threads[i];
    if (!at) continue;
    pthread_mutex_lock(&at->dlock);
    delta_forget(at->dt, lim);
    pthread_mutex_unlock(&at->dlock);
  }
  pthread_mutex_unlock(&a->threads_lock);
  pthread_mutex_lock(&a->carry_lock);
  delta_forget(a->carry, lim);
  pthread_mutex_unlock(&a->carry_lock);
  delta_forget(a->round, lim);
}

/* Merges table dt's entries into all (their arena with them; dt is
   freed). */
static void merge(approx *a, delta_table *all, delta_table *dt) {
  for (approx_delta *d = dt->head, *next; d; d = next) {
    next = d->next;
    approx_delta *x = delta_find(all, d->lim, d->key, d->key_len, d->h);
    if (x)
      x->cost += d->cost;
    else if (delta_link(all, d))
      approx_count(a, APPROX_LOST, (uint64_t)d->cost);
  }
  delta_chunk **c = &all->chunks;
  while (*c) c = &(*c)->next;
  *c = dt->chunks;
  dt->chunks = NULL;
  delta_table_free(dt);
}

/* The carried charges and the threads' tables become the round's
   (a->round): the first whole, the others' entries merged into it. */
approx_delta *approx_take(approx *a) {
  engine_limiters_lock(a->e); /* no limiter freed meanwhile */
  delta_table_free(a->round); /* a round never applied */
  pthread_mutex_lock(&a->carry_lock);
  delta_table *all = a->carry; /* first: what the last rounds failed to push */
  a->carry = NULL;
  pthread_mutex_unlock(&a->carry_lock);
  pthread_mutex_lock(&a->threads_lock);
  for (unsigned i = 0; i < ENG_MAX_THREADS; i++) {
    approx_thread *at = a->threads[i];
    if (!at) continue;
    pthread_mutex_lock(&at->dlock);
    delta_table *dt = at->dt;
    at->dt = NULL;
    pthread_mutex_unlock(&at->dlock);
    if (!dt) continue;
    if (!all)
      all = dt;
    else
      merge(a, all, dt);
  }
  pthread_mutex_unlock(&a->threads_lock);
  a->round = all;
  engine_limiters_unlock(a->e);
  return all ? all->head : NULL;
}

const char *approx_delta_key(const approx_delta *d, size_t *len) {
  *len = d->rkey_len;
  return d->rkey;
}
const sl_policy *approx_delta_policy(const approx_delta *d) {
  return &d->policy;
}
int64_t approx_delta_cost(const approx_delta *d) { return d->cost; }
approx_delta *approx_delta_next(const approx_delta *d) { return d->next; }

/* Adds to pend[i] what the threads have charged to the list's i-th
   (limiter, key) since the round took it: not in the fleet's level yet.
   A thread's table is locked for 256 keys at a time, so that its charges
   wait at most that long. */
static void pending_costs(approx *a, approx_delta *list, int64_t *pend) {
  pthread_mutex_lock(&a->threads_lock);
  for (unsigned i = 0; i < ENG_MAX_THREADS; i++) {
    approx_thread *at = a->threads[i];
    if (!at) continue;
    approx_delta *d = list, *ahead = list;
    size_t ahead_k = 0;
    for (size_t k = 0; d;) {
      pthread_mutex_lock(&at->dlock);
      const delta_table *dt = at->dt;
      if (!dt) { /* nothing charged since the round took the tables */
        pthread_mutex_unlock(&at->dlock);
        break;
      }
      for (size_t m = 0; d && m < 256; d = d->next, k++, m++) {
        /* the slot of the key DELTA_AHEAD on starts loading meanwhile */
        for (; ahead && ahead_k < k + DELTA_AHEAD;
             ahead = ahead->next, ahead_k++)
          __builtin_prefetch(&dt->slot[ahead->h & dt->mask]);
        approx_delta *x =
            d->lim ? delta_find(dt, d->lim, d->key, d->key_len, d->h) : NULL;
        if (x) pend[k] += x->cost;
      }
      pthread_mutex_unlock(&at->dlock);
    }
  }
  pthread_mutex_unlock(&a->threads_lock);
}

/* Keeps d, whose push failed, in a->carry for the next round; its cost is
   lost instead when it first failed over SYNC_CARRY_NS ago, or when the
   carry is full (SYNC_CARRY_MAX) or out of memory. A cost of 0 was
   forgotten by a reset. */
static void carry(approx *a, const approx_delta *d, int64_t mono) {
  if (d->cost <= 0) return;
  size_t size = sizeof *d + d->key_len + d->rkey_len;
  int64_t failed = d->failed ? d->failed : mono;
  int kept = 0;
  pthread_mutex_lock(&a->carry_lock);
  if (mono - failed <= SYNC_CARRY_NS &&
      (!a->carry || a->carry->n < SYNC_CARRY_MAX)) {
    if (!a->carry) a->carry = delta_table_new();
    approx_delta *c = a->carry ? delta_alloc(a->carry, size) : NULL;
    if (c) {
      memcpy(c, d, size);
      c->rkey = (char *)c->key + c->key_len;
      c->failed = failed;
      c->counted = d->cost;
      kept = !delta_link(a->carry, c);
    }
  }
  pthread_mutex_unlock(&a->carry_lock);
  if (!kept)
    approx_count(a, APPROX_LOST, (uint64_t)d->cost);
  else if (d->cost > d->counted) /* each charge once: what came since */
    approx_count(a, APPROX_RETRIED, (uint64_t)(d->cost - d->counted));
}

void approx_apply(approx *a, approx_delta *list, const int64_t *level,
                  int64_t now) {
  size_t n = 0;
  for (approx_delta *d = list; d; d = d->next) n++;
  int64_t *pend = level && n ? calloc(n, sizeof *pend) : NULL;
  engine_limiters_lock(a->e);
  if (pend) pending_costs(a, list, pend);
  int64_t mono = clock_mono_ns();
  size_t i = 0, ahead_i = 0;
  approx_delta *ahead = level ? list : NULL;
  for (approx_delta *d = list; d; d = d->next, i++) {
    /* the local state of the key DELTA_AHEAD on starts loading meanwhile */
    for (; ahead && ahead_i < i + DELTA_AHEAD; ahead = ahead->next, ahead_i++)
      if (ahead->lim && level[ahead_i] != APPROX_LEVEL_UNSENT &&
          level[ahead_i] != APPROX_LEVEL_UNKNOWN)
        limiter_prefetch(ahead->lim, ahead->key, ahead->key_len);
    if (!level || level[i] == APPROX_LEVEL_UNSENT) {
      carry(a, d, mono);
      continue;
    }
    if (level[i] == APPROX_LEVEL_UNKNOWN) {
      approx_count(a, APPROX_UNCONFIRMED, (uint64_t)d->cost);
      continue;
    }
    if (!d->lim || !pend) continue; /* reloaded away: pushed, not applied */
    /* The fleet has used more than this daemon saw: charge the rest here
       by force, debt included, so that this daemon's level is the fleet's
       less what it has charged since the round began (pushed next round). */
    int64_t mine;
    limiter_force_to(d->lim, d->key, d->key_len, level[i] - pend[i], now,
                     &mine);
  }
  delta_table_free(a->round); /* list's entries live in its arena */
  a->round = NULL;
  engine_limiters_unlock(a->e);
  free(pend);
}

/* ---- the backend ---- */

static int approx_attach(eng_backend *b, engine *e, char *err, size_t len) {
  static const metric_def stats[APPROX_COUNT] = {
      {"sluice_sync_rounds_total", NULL, METRIC_COUNTER, METRIC_GLOBAL,
       METRIC_GROUP_BACKEND,
       "Approximate mode: sync rounds that had local charges to push."},
      {"sluice_sync_calls_total", NULL, METRIC_COUNTER, METRIC_GLOBAL,
       METRIC_GROUP_BACKEND,
       "Approximate mode: script calls the sync thread sent to Redis."},
      {"sluice_sync_errors_total", NULL, METRIC_COUNTER, METRIC_GLOBAL,
       METRIC_GROUP_BACKEND,
       "Approximate mode: sync calls that failed (timeout, connection "
       "lost, error reply)."},
      {"sluice_sync_retried_cost_total", NULL, METRIC_COUNTER, METRIC_GLOBAL,
       METRIC_GROUP_BACKEND,
       "Approximate mode: cost whose push Redis did not run (no "
       "connection, a redirect), pushed again with the next rounds."},
      {"sluice_sync_unconfirmed_cost_total", NULL, METRIC_COUNTER,
       METRIC_GLOBAL, METRIC_GROUP_BACKEND,
       "Approximate mode: cost pushed in a call that got no reply (Redis "
       "may have taken it, or take it later); not pushed again."},
      {"sluice_sync_lost_cost_total", NULL, METRIC_COUNTER, METRIC_GLOBAL,
       METRIC_GROUP_BACKEND,
       "Approximate mode: cost charged locally and never pushed to Redis "
       "(its pushes failed for 10 s, or too many keys were waiting)."},
      {"sluice_sync_resets_total", NULL, METRIC_COUNTER, METRIC_GLOBAL,
       METRIC_GROUP_BACKEND,
       "Approximate mode: resets other daemons got and published, applied "
       "here (this daemon's state for their keys dropped)."},
  };
  static const metric_def subscribed = {
      "sluice_sync_resets_subscribed",
      NULL,
      METRIC_GAUGE,
      METRIC_GLOBAL,
      METRIC_GROUP_BACKEND,
      "Approximate mode: 1 while the sync thread is subscribed to the "
      "resets other daemons publish (0: it would miss them)."};
  approx *a = (approx *)b;
  a->e = e;
  metrics *m = engine_metrics_registry(e);
  for (int i = 0; i < APPROX_COUNT; i++)
    if ((a->m_stats[i] = metrics_add(m, &stats[i])) < 0) goto full;
  if ((a->m_subscribed = metrics_add(m, &subscribed)) < 0) goto full;
  return 0;
full:
  snprintf(err, len, "too many metrics");
  return -1;
}

static void *approx_thread_new(eng_backend *b, engine_thread *t, int *failed) {
  (void)t;
  approx *a = (approx *)b;
  approx_thread *at = calloc(1, sizeof *at);
  if (!at) {
    *failed = 1;
    return NULL;
  }
  at->a = a;
  pthread_mutex_init(&at->dlock, NULL);
  pthread_mutex_lock(&a->threads_lock);
  unsigned i = 0;
  while (i < ENG_MAX_THREADS && a->threads[i]) i++;
  if (i < ENG_MAX_THREADS) a->threads[i] = at;
  pthread_mutex_unlock(&a->threads_lock);
  if (i == ENG_MAX_THREADS) {
    pthread_mutex_destroy(&at->dlock);
    free(at);
    *failed = 1;
    return NULL;
  }
  at->slot = i;
  return at;
}

static void approx_thread_free(eng_backend *b, void *bt) {
  approx *a = (approx *)b;
  approx_thread *at = bt;
  if (!at) return;
  pthread_mutex_lock(&a->threads_lock);
  a->threads[at->slot] = NULL;
  pthread_mutex_unlock(&a->threads_lock);
  delta_table_free(at->dt);
  pthread_mutex_destroy(&at->dlock);
  free(at);
}

static void approx_free(eng_backend *b) {
  approx *a = (approx *)b;
  delta_table_free(a->round);
  delta_table_free(a->carry);
  pthread_mutex_destroy(&a->threads_lock);
  pthread_mutex_destroy(&a->carry_lock);
  free(a);
}

static const eng_backend_ops approx_ops = {
    .name = "approximate",
    .attach = approx_attach,
    .thread_new = approx_thread_new,
    .thread_free = approx_thread_free,
    .decide = approx_decide,
    .reset = approx_reset,
    .forget = approx_forget,
    .free = approx_free,
};

eng_backend *fleet_approx_new(const fleet_opts *o) {
  approx *a = calloc(1, sizeof *a);
  if (!a) return NULL;
  a->base.ops = &approx_ops;
  a->o = *o;
  pthread_mutex_init(&a->threads_lock, NULL);
  pthread_mutex_init(&a->carry_lock, NULL);
  randombytes_buf(a->delta_key, sizeof a->delta_key);
  snprintf(a->instance, sizeof a->instance, "%016llx",
           (unsigned long long)randombytes_random() << 32 |
               randombytes_random());
  /* (channels are not per database: a fleet's are told apart by its db) */
  snprintf(a->channel, sizeof a->channel, "sl:reset:%d", o->db);
  return &a->base;
}

approx *fleet_approx_of(eng_backend *b) {
  return b && b->ops == &approx_ops ? (approx *)b : NULL;
}
