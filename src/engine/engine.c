/*
 * engine.c — config rules x store -> decisions, for the daemon.
 *
 * Config generations. A `gen` is one loaded config plus the limiter of each
 * of its limits. Workers pin the current gen at each quiesce point (once per
 * event loop iteration) and publish the version they hold in their own
 * cache line; engine_reload publishes a new gen, waits until every online
 * worker holds it, then frees the old one. The request path thus takes no
 * lock and writes nothing shared for the config.
 *
 * Limiters outlive gens: they are kept in a map keyed by (rule, policy), so
 * a reload that leaves a rule as it was keeps its limiter and its counters.
 *
 * Store keys. A config rule's state is keyed by the request's whole
 * descriptor (every key and value, length-prefixed so no two descriptors
 * share a key): as in envoyproxy/ratelimit, a key-only descriptor gives
 * each value its own counter. Each limit has its own limiter, i.e. its own
 * namespace in the store.
 *
 * Metrics. Per thread, no locks, written only by their thread (relaxed
 * atomics, so the scraper may read them at any time): request counters,
 * a decision-latency histogram, and per-rule series (allowed, denied,
 * shadow_denied, near_limit) indexed through a global series registry.
 */
#include "engine.h"

#include <pthread.h>
#include <sodium.h>
#include <stddef.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../base/clock.h"
#include "../base/fmt.h"
#include "../base/hash.h"
#include "../limiter.h"
#include "../fleet/script.h"
#include "../fleet/slot.h"

#define OFFLINE UINT64_MAX
#define SERIES_CHUNK 256
#define MAX_SERIES 65536
#define ADHOC_CACHE 64
#define DETAIL_CACHE 256
#define DETAIL_PER_RULE 1000 /* detailed_metric series per rule at most */
#define NO_BASE UINT32_MAX
#define KEY_MAX SL_KEY_MAX

/* Latency histogram bounds, in ns (Prometheus le= in seconds). */
static const int64_t hist_bounds[] = {1000,    2500,    5000,    10000,
                                      25000,   50000,   100000,  250000,
                                      500000,  1000000, 10000000};
#define NBUCKETS (sizeof hist_bounds / sizeof hist_bounds[0])

enum { S_ALLOWED, S_DENIED, S_SHADOW_DENIED, S_NEAR_LIMIT, S_N };

typedef _Atomic uint64_t counter;

static inline void inc(counter *c, uint64_t n) {
  /* Only the owning thread writes: no read-modify-write needed. */
  atomic_store_explicit(
      c, atomic_load_explicit(c, memory_order_relaxed) + n,
      memory_order_relaxed);
}

static inline uint64_t get(counter *c) {
  return atomic_load_explicit(c, memory_order_relaxed);
}

/* What one thread charged to one (limiter, key) since the last sync. It
   lives in its table's arena, key and Redis name inline. */
struct eng_delta {
  struct eng_delta *next; /* the table's entries, in the order they came */
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
  eng_delta *d; /* NULL: empty */
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
  eng_delta *head, **tail; /* every entry, in order */
  delta_chunk *chunks;
} delta_table;

static void delta_table_free(delta_table *t);

/* A latency histogram over hist_bounds (one thread writes it). */
typedef struct histogram {
  counter b[NBUCKETS + 1];
  counter sum_ns, count;
} histogram;

/* The sum of several threads' histograms, for the scraper. */
typedef struct histogram_sum {
  uint64_t b[NBUCKETS + 1];
  uint64_t sum_ns, count;
} histogram_sum;

typedef struct gen {
  sl_config *cfg;
  sl_limiter **lims;  /* per cfg->limits[i]; NULL for unlimited/blocked */
  sl_limiter **local; /* fleet mode: the on_store_error: local limiters */
  uint32_t *series;   /* per cfg->limits[i] */
  uint64_t version;
  _Atomic int pins;   /* fleet mode: requests waiting for Redis */
} gen;

typedef struct lim_entry {
  char *id; /* rule "\x1f" policy */
  sl_limiter *lim;
  int used; /* by the gen being built */
} lim_entry;

typedef struct adhoc_entry {
  char canon[64];
  sl_policy policy;
  sl_limiter *lim;
  sl_limiter *local; /* fleet mode, --on-store-error local */
} adhoc_entry;

typedef struct series {
  char *domain, *rule;
  uint64_t hash;
  uint32_t details; /* detailed_metric series made under this one */
} series;

struct engine_thread {
  engine *e;
  gen *g;
  _Atomic uint64_t seen;
  unsigned slot;
  struct {
    char spec[64];
    size_t len;
    const adhoc_entry *a;
  } adhoc_cache[ADHOC_CACHE];
  const adhoc_entry *policy_cache[ADHOC_CACHE]; /* by sl_policy (CL.THROTTLE) */
  struct {
    const cfg_limit *limit;
    char value[64];
    size_t len;
    uint32_t series;
  } detail_cache[DETAIL_CACHE];
  counter counters[EC_COUNT];
  _Atomic int64_t conns[2];
  histogram hist;  /* decisions */
  histogram shist; /* fleet mode: Redis round trips */
  _Atomic int store_failing; /* the last Redis call failed */
  eng_send_fn send;
  void *io;
  struct job_group **batch; /* fleet mode: requests for the next batched
                               script call (engine_thread_flush) */
  size_t nbatch, batch_cap;
  pthread_mutex_t dlock; /* approximate mode: the charges since the sync */
  struct delta_table *dt;
  /* dt's slots and mask, for prefetch hints read without dlock: written
     by this thread only, stale once the sync takes dt (harmless: a
     prefetch of any address is). */
  _Atomic uintptr_t dhint_slot;
  _Atomic size_t dhint_mask;
  _Atomic(counter *) chunks[MAX_SERIES / SERIES_CHUNK];
} __attribute__((aligned(64)));

struct engine {
  engine_opts o;
  sl_store *store;
  _Atomic(gen *) cur;
  uint64_t next_version;
  pthread_mutex_t reload_lock; /* reloads, the limiter map */
  lim_entry *lims;
  size_t nlims;

  pthread_mutex_t threads_lock;
  engine_thread *threads[ENG_MAX_THREADS];

  pthread_mutex_t adhoc_lock;
  adhoc_entry adhoc[ENG_MAX_ADHOC];
  _Atomic size_t nadhoc;

  pthread_mutex_t series_lock;
  series *series;
  _Atomic size_t nseries;
  size_t series_cap;
  uint32_t *series_index; /* open addressing: series index + 1, 0 empty */
  size_t index_cap;       /* a power of two, at least 2x nseries */

  _Atomic uint64_t reloads_ok, reloads_failed;
  _Atomic int64_t last_reload_s;
  _Atomic uint64_t sync_stats[ENG_SYNC_COUNT]; /* approximate mode */
  _Atomic int sync_subscribed;                  /* ... to the others' resets */
  unsigned char delta_key[crypto_shorthash_KEYBYTES]; /* delta_hash's */
  char instance[17]; /* approximate mode: this daemon, in its resets' PUBLISH */
  struct delta_table *round; /* the sync thread's, take to apply */
  pthread_mutex_t carry_lock; /* the sync thread's carry, and resets */
  struct delta_table *carry;   /* charges to push again next round */
};

/* ---- series registry ---- */

static uint64_t series_hash(const char *domain, const char *rule) {
  /* (0xff between the two: no byte of UTF-8 text, so no two pairs of
     strings hash as one) */
  return fnv1a_str(fnv1a(fnv1a_str(FNV1A_INIT, domain), "\xff", 1), rule);
}

/* Rebuilds the hash index at twice the size (under series_lock). */
static int series_grow_index(engine *e) {
  size_t cap = e->index_cap ? e->index_cap * 2 : 256;
  uint32_t *idx = calloc(cap, sizeof *idx);
  if (!idx) return -1;
  size_t n = atomic_load_explicit(&e->nseries, memory_order_relaxed);
  for (size_t i = 0; i < n; i++) {
    size_t k = e->series[i].hash & (cap - 1);
    while (idx[k]) k = (k + 1) & (cap - 1);
    idx[k] = (uint32_t)i + 1;
  }
  free(e->series_index);
  e->series_index = idx;
  e->index_cap = cap;
  return 0;
}

/*
 * The index of series (domain, rule), created if new. A detailed series
 * (per value of a rule) names its rule's series as `base`: past
 * DETAIL_PER_RULE of them, base itself is returned (values roll up). When
 * the registry is full, MAX_SERIES (not counted) or base.
 */
static uint32_t series_of(engine *e, const char *domain, const char *rule,
                          uint32_t base) {
  uint64_t h = series_hash(domain, rule);
  uint32_t idx = base == NO_BASE ? MAX_SERIES : base;
  pthread_mutex_lock(&e->series_lock);
  size_t n = atomic_load_explicit(&e->nseries, memory_order_relaxed);
  if (e->index_cap < 2 * (n + 1) && series_grow_index(e)) goto done;
  size_t k = h & (e->index_cap - 1);
  for (uint32_t v; (v = e->series_index[k]); k = (k + 1) & (e->index_cap - 1)) {
    const series *x = &e->series[v - 1];
    if (x->hash == h && !strcmp(x->rule, rule) && !strcmp(x->domain, domain)) {
      idx = v - 1;
      goto done;
    }
  }
  if (n >= MAX_SERIES) goto done;
  if (base != NO_BASE && e->series[base].details >= DETAIL_PER_RULE) goto done;
  if (n == e->series_cap) {
    size_t cap = e->series_cap ? e->series_cap * 2 : 64;
    series *grown = realloc(e->series, cap * sizeof *grown);
    if (!grown) goto done;
    e->series = grown;
    e->series_cap = cap;
  }
  e->series[n] = (series){strdup(domain), strdup(rule), h, 0};
  if (!e->series[n].domain || !e->series[n].rule) {
    free(e->series[n].domain);
    free(e->series[n].rule);
    goto done;
  }
  e->series_index[k] = (uint32_t)n + 1;
  if (base != NO_BASE) e->series[base].details++;
  idx = (uint32_t)n;
  atomic_store_explicit(&e->nseries, n + 1, memory_order_release);
done:
  pthread_mutex_unlock(&e->series_lock);
  return idx;
}

/* The thread's counters of series s (allocated on first use), or NULL. */
static counter *series_counters(engine_thread *t, uint32_t s) {
  if (s >= MAX_SERIES) return NULL;
  _Atomic(counter *) *slot = &t->chunks[s / SERIES_CHUNK];
  counter *chunk = atomic_load_explicit(slot, memory_order_acquire);
  if (!chunk) {
    chunk = calloc(SERIES_CHUNK * S_N, sizeof *chunk);
    if (!chunk) return NULL;
    atomic_store_explicit(slot, chunk, memory_order_release);
  }
  return &chunk[(s % SERIES_CHUNK) * S_N];
}

/* ---- generations ---- */

static void gen_free(gen *g) {
  if (!g) return;
  config_free(g->cfg);
  free(g->lims);
  free(g->local);
  free(g->series);
  free(g);
}

static const char *limit_domain(const cfg_limit *l, char *buf, size_t len) {
  /* The rule id starts with "domain." */
  const char *dot = strchr(l->rule, '.');
  size_t n = dot ? (size_t)(dot - l->rule) : strlen(l->rule);
  if (n >= len) n = len - 1;
  memcpy(buf, l->rule, n);
  buf[n] = '\0';
  return buf;
}

/*
 * The map's limiter for (rule, policy), created when new, marked used by
 * the gen being built. NULL when out of memory.
 */
static sl_limiter *map_limiter(engine *e, const char *rule, const char *canon,
                               const sl_policy *p) {
  size_t idlen = strlen(rule) + strlen(canon) + 2;
  char *id = malloc(idlen);
  if (!id) return NULL;
  snprintf(id, idlen, "%s\x1f%s", rule, canon);
  size_t k = 0;
  while (k < e->nlims && strcmp(e->lims[k].id, id)) k++;
  if (k < e->nlims) {
    free(id);
  } else {
    lim_entry *grown = realloc(e->lims, (e->nlims + 1) * sizeof *grown);
    if (!grown) {
      free(id);
      return NULL;
    }
    e->lims = grown;
    e->lims[k].id = id;
    e->lims[k].used = 0;
    if (sl_limiter_new(e->store, p, &e->lims[k].lim)) {
      free(id);
      return NULL;
    }
    e->nlims++;
  }
  e->lims[k].used = 1;
  return e->lims[k].lim;
}

/* What a limit does when Redis fails: its own setting, else the daemon's. */
static int limit_mode(const engine *e, const cfg_limit *l) {
  int m = l && l->on_store_error ? l->on_store_error : e->o.on_store_error;
  return m ? m : CFG_STORE_ERROR_ALLOW;
}

static double limit_fraction(const engine *e, const cfg_limit *l) {
  if (l && l->local_fraction > 0) return l->local_fraction;
  return e->o.local_fraction > 0 ? e->o.local_fraction
                                 : CFG_LOCAL_FRACTION_DEFAULT;
}

/* on_store_error: local's policy: the same algorithm and period at
   `fraction` of the limit (and burst), at least 1. */
static sl_policy local_policy(const sl_policy *p, double fraction) {
  sl_policy lp = *p;
  uint32_t l = (uint32_t)(p->limit * fraction); /* rounded down */
  uint32_t b = (uint32_t)(p->burst * fraction);
  lp.limit = l < 1 ? 1 : l;
  if (p->burst) lp.burst = b < 1 ? 1 : b;
  return lp;
}

/*
 * Builds a gen for cfg under reload_lock, reusing limiters by (rule, policy)
 * and creating the others. Marks every map entry the gen uses. NULL on
 * failure (cfg is not freed then).
 */
static gen *gen_build(engine *e, sl_config *cfg) {
  gen *g = calloc(1, sizeof *g);
  if (!g) return NULL;
  g->lims = calloc(cfg->nlimits ? cfg->nlimits : 1, sizeof *g->lims);
  g->local = calloc(cfg->nlimits ? cfg->nlimits : 1, sizeof *g->local);
  g->series = calloc(cfg->nlimits ? cfg->nlimits : 1, sizeof *g->series);
  if (!g->lims || !g->local || !g->series) goto fail;
  for (size_t i = 0; i < e->nlims; i++) e->lims[i].used = 0;
  for (size_t i = 0; i < cfg->nlimits; i++) {
    const cfg_limit *l = cfg->limits[i];
    char dom[256];
    g->series[i] =
        series_of(e, limit_domain(l, dom, sizeof dom), l->rule, NO_BASE);
    if (l->unlimited || l->blocked) continue;
    if (!(g->lims[i] = map_limiter(e, l->rule, l->policy_str, &l->policy)))
      goto fail;
    if (e->o.remote && limit_mode(e, l) == CFG_STORE_ERROR_LOCAL) {
      sl_policy lp = local_policy(&l->policy, limit_fraction(e, l));
      char canon[64], rule[1200];
      sl_policy_format(&lp, canon, sizeof canon);
      snprintf(rule, sizeof rule, "%s\x1flocal", l->rule);
      if (!(g->local[i] = map_limiter(e, rule, canon, &lp))) goto fail;
    }
  }
  g->cfg = cfg;
  g->version = ++e->next_version;
  return g;
fail:
  free(g->lims);
  free(g->local);
  free(g->series);
  free(g);
  return NULL;
}

static void forget_limiter(engine *e, const sl_limiter *lim);

/* Frees the map's limiters that no gen uses any more (after a retire). */
static void drop_unused_limiters(engine *e) {
  size_t w = 0;
  for (size_t i = 0; i < e->nlims; i++) {
    if (e->lims[i].used) {
      e->lims[w++] = e->lims[i];
    } else {
      if (e->o.sync) forget_limiter(e, e->lims[i].lim);
      sl_limiter_free(e->lims[i].lim);
      free(e->lims[i].id);
    }
  }
  e->nlims = w;
}

engine *engine_new(const engine_opts *opts, sl_config *cfg, char *err,
                   size_t err_len) {
  engine *e = calloc(1, sizeof *e);
  if (!e) {
    snprintf(err, err_len, "out of memory");
    config_free(cfg);
    return NULL;
  }
  if (opts) e->o = *opts;
  randombytes_buf(e->delta_key, sizeof e->delta_key);
  snprintf(
      e->instance, sizeof e->instance, "%016llx",
      (unsigned long long)randombytes_random() << 32 | randombytes_random());
  pthread_mutex_init(&e->carry_lock, NULL);
  pthread_mutex_init(&e->reload_lock, NULL);
  pthread_mutex_init(&e->threads_lock, NULL);
  pthread_mutex_init(&e->adhoc_lock, NULL);
  pthread_mutex_init(&e->series_lock, NULL);
  sl_store_options so;
  sl_store_options_init(&so);
  so.max_memory = e->o.max_memory;
  int rc = sl_store_new(&so, &e->store);
  if (rc) {
    snprintf(err, err_len, "store: %s%s", sl_strerror(rc),
             rc == SL_EINVAL ? " (--max-memory too small)" : "");
    config_free(cfg);
    engine_free(e);
    return NULL;
  }
  pthread_mutex_lock(&e->reload_lock);
  gen *g = gen_build(e, cfg);
  pthread_mutex_unlock(&e->reload_lock);
  if (!g) {
    snprintf(err, err_len, "out of memory building the rules");
    config_free(cfg);
    engine_free(e);
    return NULL;
  }
  atomic_store(&e->cur, g);
  atomic_store(&e->last_reload_s, (int64_t)time(NULL));
  return e;
}

void engine_free(engine *e) {
  if (!e) return;
  gen_free(atomic_load(&e->cur));
  for (size_t i = 0; i < e->nlims; i++) {
    sl_limiter_free(e->lims[i].lim);
    free(e->lims[i].id);
  }
  free(e->lims);
  size_t na = atomic_load(&e->nadhoc);
  for (size_t i = 0; i < na; i++) {
    sl_limiter_free(e->adhoc[i].lim);
    sl_limiter_free(e->adhoc[i].local);
  }
  size_t ns = atomic_load(&e->nseries);
  for (size_t i = 0; i < ns; i++) {
    free(e->series[i].domain);
    free(e->series[i].rule);
  }
  free(e->series);
  free(e->series_index);
  delta_table_free(e->round);
  delta_table_free(e->carry);
  sl_store_free(e->store);
  pthread_mutex_destroy(&e->carry_lock);
  pthread_mutex_destroy(&e->reload_lock);
  pthread_mutex_destroy(&e->threads_lock);
  pthread_mutex_destroy(&e->adhoc_lock);
  pthread_mutex_destroy(&e->series_lock);
  free(e);
}

int engine_reload(engine *e, sl_config *cfg) {
  pthread_mutex_lock(&e->reload_lock);
  gen *g = gen_build(e, cfg);
  if (!g) {
    /* Keep the old gen's limiters: mark them all used again. */
    for (size_t i = 0; i < e->nlims; i++) e->lims[i].used = 1;
    pthread_mutex_unlock(&e->reload_lock);
    config_free(cfg); /* ours from the call on, as the header says */
    atomic_fetch_add(&e->reloads_failed, 1);
    return -1;
  }
  /* seq_cst, paired with engine_thread_quiesce: either a thread's "I am
     looking" is seen below, or its load of `cur` sees g. */
  gen *old = atomic_exchange_explicit(&e->cur, g, memory_order_seq_cst);
  /* Wait until no online thread can still hold `old`. */
  for (;;) {
    int behind = 0;
    pthread_mutex_lock(&e->threads_lock);
    for (unsigned i = 0; i < ENG_MAX_THREADS; i++) {
      engine_thread *t = e->threads[i];
      if (!t) continue;
      uint64_t seen = atomic_load_explicit(&t->seen, memory_order_seq_cst);
      if (seen != OFFLINE && seen < g->version) behind = 1;
    }
    pthread_mutex_unlock(&e->threads_lock);
    /* Fleet mode: requests still waiting for Redis use old's rules. They
       end within the Redis timeout. */
    if (!behind && atomic_load(&old->pins) == 0) break;
    struct timespec nap = {0, 1000000};
    nanosleep(&nap, NULL);
  }
  gen_free(old);
  drop_unused_limiters(e);
  pthread_mutex_unlock(&e->reload_lock);
  atomic_fetch_add(&e->reloads_ok, 1);
  atomic_store(&e->last_reload_s, (int64_t)time(NULL));
  return 0;
}

void engine_note_reload_failure(engine *e) {
  atomic_fetch_add(&e->reloads_failed, 1);
}

const sl_config *engine_config(engine *e) {
  return atomic_load_explicit(&e->cur, memory_order_acquire)->cfg;
}

sl_store *engine_store(engine *e) { return e->store; }

/* ---- threads ---- */

engine_thread *engine_thread_new(engine *e) {
  engine_thread *t = aligned_alloc(64, sizeof *t);
  if (!t) return NULL;
  memset(t, 0, sizeof *t);
  t->e = e;
  pthread_mutex_init(&t->dlock, NULL);
  atomic_init(&t->seen, OFFLINE);
  pthread_mutex_lock(&e->threads_lock);
  unsigned i = 0;
  while (i < ENG_MAX_THREADS && e->threads[i]) i++;
  if (i < ENG_MAX_THREADS) {
    t->slot = i;
    e->threads[i] = t;
  }
  pthread_mutex_unlock(&e->threads_lock);
  if (i == ENG_MAX_THREADS) {
    free(t);
    return NULL;
  }
  engine_thread_quiesce(t);
  return t;
}

void engine_thread_free(engine_thread *t) {
  if (!t) return;
  engine *e = t->e;
  pthread_mutex_lock(&e->threads_lock);
  e->threads[t->slot] = NULL;
  pthread_mutex_unlock(&e->threads_lock);
  for (size_t c = 0; c < MAX_SERIES / SERIES_CHUNK; c++)
    free(atomic_load(&t->chunks[c]));
  delta_table_free(t->dt);
  free(t->batch); /* empty: the worker flushed before stopping */
  pthread_mutex_destroy(&t->dlock);
  free(t);
}

void engine_thread_quiesce(engine_thread *t) {
  /* First say "I may be holding anything" (0: every reload waits for us),
     then load: a reload either sees our 0 and waits, or has already
     published what we load. Only then say which version we hold. */
  atomic_store_explicit(&t->seen, 0, memory_order_seq_cst);
  gen *g = atomic_load_explicit(&t->e->cur, memory_order_seq_cst);
  atomic_store_explicit(&t->seen, g->version, memory_order_release);
  /* The detail cache is keyed by limit: a new gen's limits may sit where
     the old ones were. */
  if (g != t->g) memset(t->detail_cache, 0, sizeof t->detail_cache);
  t->g = g;
}

void engine_thread_offline(engine_thread *t) {
  t->g = NULL;
  atomic_store_explicit(&t->seen, OFFLINE, memory_order_release);
}

void engine_count(engine_thread *t, eng_counter c, uint64_t n) {
  inc(&t->counters[c], n);
}

void engine_connections(engine_thread *t, int protocol, int delta) {
  atomic_store_explicit(
      &t->conns[protocol],
      atomic_load_explicit(&t->conns[protocol], memory_order_relaxed) + delta,
      memory_order_relaxed);
}

static void observe(histogram *h, int64_t ns) {
  size_t b = 0;
  while (b < NBUCKETS && ns > hist_bounds[b]) b++;
  inc(&h->b[b], 1);
  inc(&h->sum_ns, (uint64_t)ns);
  inc(&h->count, 1);
}

static void histogram_add(histogram_sum *sum, histogram *h) {
  for (size_t b = 0; b <= NBUCKETS; b++) sum->b[b] += get(&h->b[b]);
  sum->sum_ns += get(&h->sum_ns);
  sum->count += get(&h->count);
}

static void observe_latency(engine_thread *t, int64_t ns) {
  observe(&t->hist, ns);
}

/* ---- deciding ---- */

/* Appends a length-prefixed piece to the key buffer. -1 if too long. */
static int key_put(uint8_t *buf, size_t *len, const char *s, size_t n) {
  uint8_t hdr[5];
  size_t h = 0;
  size_t v = n;
  do {
    hdr[h++] = (uint8_t)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
    v >>= 7;
  } while (v);
  if (*len + h + n > KEY_MAX) return -1;
  memcpy(buf + *len, hdr, h);
  if (n) memcpy(buf + *len + h, s, n);
  *len += h + n;
  return 0;
}

/* The store key of a descriptor: its entries, length-prefixed. */
static int descriptor_key(const eng_descriptor *d, uint8_t *buf,
                          size_t *len) {
  *len = 0;
  for (size_t i = 0; i < d->n; i++)
    if (key_put(buf, len, d->entries[i].key, d->entries[i].key_len) ||
        key_put(buf, len, d->entries[i].value, d->entries[i].value_len))
      return -1;
  return 0;
}

/* Whether status a is more restrictive than b. */
static int worse(const eng_status *a, const eng_status *b) {
  if (a->d.allowed != b->d.allowed) return !a->d.allowed;
  if (!a->d.allowed) {
    int64_t ra = a->d.retry_after_ns < 0 ? INT64_MAX : a->d.retry_after_ns;
    int64_t rb = b->d.retry_after_ns < 0 ? INT64_MAX : b->d.retry_after_ns;
    return ra > rb;
  }
  if (a->d.remaining != b->d.remaining) return a->d.remaining < b->d.remaining;
  return a->d.reset_ns > b->d.reset_ns;
}

/* Fills worst and by_descriptor: enforced, limited statuses first. */
static void rank(eng_result *r, size_t ndesc) {
  r->worst = -1;
  for (size_t i = 0; i < ndesc && i < ENG_MAX_DESCRIPTORS; i++)
    r->by_descriptor[i] = -1;
  for (int pass = 0; pass < 2; pass++) /* pass 0: enforced; 1: shadow */
    for (size_t i = 0; i < r->n; i++) {
      eng_status *s = &r->st[i];
      if (s->unlimited || s->shadow != pass) continue;
      int *w = &r->by_descriptor[s->descriptor];
      if (*w < 0 || (r->st[*w].shadow == s->shadow && worse(s, &r->st[*w])))
        *w = (int)i;
      if (r->worst < 0 ||
          (r->st[r->worst].shadow == s->shadow && worse(s, &r->st[r->worst])))
        r->worst = (int)i;
    }
  for (size_t i = 0; i < ndesc && i < ENG_MAX_DESCRIPTORS; i++)
    if (r->by_descriptor[i] < 0) /* only unlimited ones: report one */
      for (size_t k = 0; k < r->n; k++)
        if (r->st[k].descriptor == (int)i) {
          r->by_descriptor[i] = (int)k;
          break;
        }
}

/* The series of a detailed-metric limit for the value `v`. */
static uint32_t detailed_series(engine_thread *t, const cfg_limit *l,
                                uint32_t base, const cfg_entry *last) {
  if (!l->detailed_metric || last->value_len >= sizeof t->detail_cache[0].value)
    return base;
  uint64_t h = fnv1a((uint64_t)(uintptr_t)l * 0x9e3779b97f4a7c15u,
                     last->value, last->value_len);
  size_t slot = (size_t)(h >> 32) % DETAIL_CACHE;
  if (t->detail_cache[slot].limit == l &&
      t->detail_cache[slot].len == last->value_len &&
      !memcmp(t->detail_cache[slot].value, last->value, last->value_len))
    return t->detail_cache[slot].series;
  char rule[1200], dom[256];
  snprintf(rule, sizeof rule, "%s_%.*s", l->rule, (int)last->value_len,
           last->value);
  uint32_t s = base < MAX_SERIES
                   ? series_of(t->e, limit_domain(l, dom, sizeof dom), rule, base)
                   : base;
  if (s >= MAX_SERIES) s = base;
  /* Cached whatever it is (a roll-up too): the lock is not taken again. */
  t->detail_cache[slot].limit = l;
  memcpy(t->detail_cache[slot].value, last->value, last->value_len);
  t->detail_cache[slot].len = last->value_len;
  t->detail_cache[slot].series = s;
  return s;
}

/* ---- fleet mode: decisions in Redis ---- */

/* Counts a rule's outcome in its series (see engine_check_async). */
static void count_rules(engine_thread *t, eng_result *out,
                        const uint32_t *sid) {
  for (size_t i = 0; i < out->n; i++) {
    eng_status *s = &out->st[i];
    counter *c = series_counters(t, sid[i]);
    if (!c) continue;
    /* A rule is counted for what it said: over its limit (denied, or
       shadow_denied), or charged (allowed); a rule that had room in a
       request another rule denied was not charged and is not counted. */
    if (!s->d.allowed) {
      inc(&c[s->shadow ? S_SHADOW_DENIED : S_DENIED], 1);
    } else if (out->allowed) {
      inc(&c[S_ALLOWED], 1);
      if (!s->unlimited && s->d.limit > 0 && s->d.remaining * 5 < s->d.limit)
        inc(&c[S_NEAR_LIMIT], 1);
    }
  }
}

enum { PH_ATOMIC, PH_CHECK, PH_COMMIT };

typedef struct job_check {
  rs_check rc;          /* the Redis key and what the script needs */
  sl_limiter *local;    /* on_store_error: local's limiter, else NULL */
  const void *lkey;     /* its key (the descriptor's) */
  size_t lkey_len;
  int mode;             /* on_store_error */
  unsigned group;       /* calls of one slot */
} job_check;

typedef struct job_group {
  struct eng_job *j;
  int slot;
  rs_call call;
  char *words; /* rs_prepare's, while queued for a batch */
  size_t keys_len, words_len;
} job_group;

/* One request waiting for Redis. */
typedef struct eng_job {
  engine_thread *t;
  gen *g; /* pinned until the answer */
  eng_result *out;
  eng_done_fn done;
  void *ud;
  int adhoc, blocked, phase, waiting, failed, all;
  size_t nc, ngroups, ndesc;
  int64_t now, t0, sent;
  job_check c[ENG_MAX_STATUSES];
  size_t check_of[ENG_MAX_STATUSES]; /* out->st index of check c */
  sl_decision dec[ENG_MAX_STATUSES];
  uint32_t sid[ENG_MAX_STATUSES]; /* series of out->st[i] */
  job_group *groups;
  char *keys;
} eng_job;

void engine_thread_set_remote(engine_thread *t, eng_send_fn send, void *io) {
  t->send = send;
  t->io = io;
}

/*
 * A state key in Redis: "sl:{TAG}" KIND LEN ":" ID KEY, where ID names the
 * limiter, LEN bytes: a rule's id_a "|" id_b (kind 'r': rule and policy,
 * the same on every daemon with the same config), or an ad-hoc policy's
 * id_a (kind 'a', id_b NULL: its canonical form); KEY is the store key.
 * "{}" (no tag) makes Redis Cluster hash the whole key; a tag (hash_tag)
 * puts a request's keys in one slot. The one builder of these names:
 * exact mode's calls, approximate mode's pushes and resets.
 */

/* The most bytes redis_key writes: for a tag, id parts and key of these
   lengths. */
#define REDIS_KEY_MAX(tag_len, id_len, key_len) \
  (4 + (tag_len) + 2 + 20 + 1 + (id_len) + 1 + (key_len))

static size_t redis_key(char *dst, const char *tag, size_t tag_len, char kind,
                        const char *id_a, const char *id_b, const void *key,
                        size_t key_len) {
  size_t la = strlen(id_a), lb = id_b ? strlen(id_b) : 0;
  size_t n = 0;
  memcpy(dst, "sl:{", 4);
  n = 4;
  memcpy(dst + n, tag, tag_len);
  n += tag_len;
  dst[n++] = '}';
  dst[n++] = kind;
  n += fmt_u64(dst + n, la + (id_b ? 1 + lb : 0));
  dst[n++] = ':';
  memcpy(dst + n, id_a, la);
  n += la;
  if (id_b) {
    dst[n++] = '|';
    memcpy(dst + n, id_b, lb);
    n += lb;
  }
  memcpy(dst + n, key, key_len);
  return n + key_len;
}

static void job_free(eng_job *j) {
  atomic_fetch_sub(&j->g->pins, 1);
  free(j->groups);
  free(j->keys);
  free(j);
}

/* Figures for a limit answered by on_store_error allow or deny. */
static void fallback_fixed(const job_check *c, int deny, int64_t retry_ns,
                           sl_decision *d) {
  const sl_policy *p = c->rc.policy;
  int64_t B = p->burst ? p->burst : p->limit;
  memset(d, 0, sizeof *d);
  d->limit = B;
  if (deny && c->rc.cost > 0) {
    d->retry_after_ns = retry_ns;
    d->reset_ns = retry_ns;
  } else {
    d->allowed = 1;
    d->remaining = deny ? 0 : B - c->rc.cost;
  }
}

/*
 * Redis failed for this request: each limit answers per on_store_error.
 * A deny limit denies (and the local limiters only report figures); else
 * the local limiters decide together, all-or-nothing, like sl_take_all.
 */
static void job_fallback(eng_job *j, int64_t now) {
  engine_thread *t = j->t;
  int64_t retry = (int64_t)(t->e->o.breaker_ms > 0 ? t->e->o.breaker_ms : 1000)
                  * 1000000;
  int deny = 0;
  for (size_t c = 0; c < j->nc; c++)
    if (j->c[c].mode == CFG_STORE_ERROR_DENY && !j->c[c].rc.shadow &&
        j->c[c].rc.cost > 0)
      deny = 1;
  sl_check checks[ENG_MAX_STATUSES];
  size_t idx[ENG_MAX_STATUSES], nl = 0;
  int all = !deny;
  for (size_t c = 0; c < j->nc; c++) {
    job_check *jc = &j->c[c];
    if (jc->mode == CFG_STORE_ERROR_LOCAL && jc->local) {
      checks[nl] = (sl_check){jc->local, jc->lkey, jc->lkey_len,
                              deny ? 0 : jc->rc.cost, jc->rc.shadow};
      idx[nl++] = c;
    } else {
      fallback_fixed(jc, jc->mode == CFG_STORE_ERROR_DENY, retry, &j->dec[c]);
    }
  }
  if (nl) {
    sl_decision dec[ENG_MAX_STATUSES];
    int lall = 0;
    /* ECOST cannot happen: the local policy's capacity is smaller, but a
       cost above it is an over-limit request, not an error. */
    if (sl_take_all(checks, nl, now, dec, &lall) == 0) {
      for (size_t k = 0; k < nl; k++) j->dec[idx[k]] = dec[k];
    } else {
      for (size_t k = 0; k < nl; k++) {
        fallback_fixed(&j->c[idx[k]], 1, retry, &j->dec[idx[k]]);
        if (!j->c[idx[k]].rc.shadow && j->c[idx[k]].rc.cost > 0) lall = 0;
      }
    }
    all &= lall;
  }
  j->all = all;
  engine_count(t, EC_STORE_FALLBACKS, 1);
}

/* The answer is complete: fill out, count, tell the caller. */
static void job_finish(eng_job *j) {
  engine_thread *t = j->t;
  eng_result *out = j->out;
  observe_latency(t, clock_mono_ns() - j->t0);
  if (j->adhoc) {
    out->st[0].d = j->dec[0];
    out->allowed = j->dec[0].allowed;
    out->worst = 0;
    out->by_descriptor[0] = 0;
    engine_count(t, out->allowed ? EC_ADHOC_ALLOWED : EC_ADHOC_DENIED, 1);
  } else {
    for (size_t c = 0; c < j->nc; c++) out->st[j->check_of[c]].d = j->dec[c];
    out->allowed = j->all && !j->blocked;
    count_rules(t, out, j->sid);
    engine_count(t, out->allowed ? EC_CHECK_ALLOWED : EC_CHECK_DENIED, 1);
    rank(out, j->ndesc);
  }
}

static void job_reply(void *ud, const redisReply *r, const char *err);

/* Queues a one-group request for the thread's next batched call. */
static int job_queue(eng_job *j) {
  engine_thread *t = j->t;
  job_group *grp = &j->groups[0];
  rs_check rc[ENG_MAX_STATUSES];
  for (size_t c = 0; c < j->nc; c++) rc[c] = j->c[c].rc;
  if (t->nbatch == t->batch_cap) {
    size_t cap = t->batch_cap ? 2 * t->batch_cap : 64;
    job_group **b = realloc(t->batch, cap * sizeof *b);
    if (!b) return SL_ENOMEM;
    t->batch = b;
    t->batch_cap = cap;
  }
  int rc_ = rs_prepare(rc, j->nc, &grp->call, &grp->words, &grp->keys_len,
                       &grp->words_len);
  if (rc_) return rc_;
  t->batch[t->nbatch++] = grp;
  j->phase = PH_ATOMIC;
  j->all = 1;
  j->waiting = 1;
  return 0;
}

/* Sends one call per group for the phase; 0, or an SL_E* from rs_format. */
static int job_send(eng_job *j, int phase) {
  engine_thread *t = j->t;
  if (phase == PH_ATOMIC && j->ngroups == 1 && t->e->o.batch_max > 1)
    return job_queue(j);
  char *cmds[ENG_MAX_STATUSES];
  size_t lens[ENG_MAX_STATUSES];
  for (size_t g = 0; g < j->ngroups; g++) {
    rs_check rc[ENG_MAX_STATUSES];
    size_t n = 0;
    for (size_t c = 0; c < j->nc; c++)
      if (j->c[c].group == g) rc[n++] = j->c[c].rc;
    int rc_ = rs_format(rc, n, phase == PH_CHECK ? RS_DRY : RS_DECIDE, -1,
                        &j->groups[g].call, &cmds[g], &lens[g]);
    if (rc_) {
      while (g-- > 0) free(cmds[g]);
      return rc_;
    }
  }
  j->phase = phase;
  j->all = 1;
  j->sent = clock_mono_ns();
  for (size_t g = 0; g < j->ngroups; g++) {
    engine_count(t, EC_STORE_CALLS, 1);
    if (t->send(t->io, j->groups[g].slot, cmds[g], lens[g], job_reply,
                &j->groups[g]) == 0) {
      j->waiting++;
    } else {
      j->failed = 1;
      engine_count(t, EC_STORE_REFUSED, 1);
    }
  }
  return 0;
}

/* After the last reply of a phase: the next phase (returns 1: more
   replies to come), or the fallback if Redis failed (0: answer now). */
static int job_step(eng_job *j) {
  if (!j->failed && j->phase == PH_CHECK && j->all) {
    if (job_send(j, PH_COMMIT)) j->failed = 1;
    if (j->waiting) return 1;
  }
  if (j->failed) {
    atomic_store_explicit(&j->t->store_failing, 1, memory_order_relaxed);
    /* The request's own time: local limiters accept it (their store
       keeps a grace for stamps slightly in the past). */
    job_fallback(j, j->now);
  }
  return 0;
}

/* A group's answer (r NULL: its call failed); returns 1 when it failed. */
static int group_reply(job_group *grp, const redisReply *r) {
  eng_job *j = grp->j;
  engine_thread *t = j->t;
  int failed = 0;
  j->waiting--;
  observe(&t->shist, clock_mono_ns() - j->sent);
  sl_decision dec[ENG_MAX_STATUSES];
  int allowed = 0;
  int64_t rnow;
  if (!r || r->type == REDIS_REPLY_ERROR ||
      rs_parse(&grp->call, r, dec, &allowed, &rnow)) {
    j->failed = failed = 1;
  } else {
    atomic_store_explicit(&t->store_failing, 0, memory_order_relaxed);
    size_t g = (size_t)(grp - j->groups), k = 0;
    for (size_t c = 0; c < j->nc; c++)
      if (j->c[c].group == g) j->dec[c] = dec[k++];
    j->all &= allowed;
  }
  if (j->waiting || job_step(j)) return failed;
  job_finish(j);
  /* Before unpinning: the caller reads out's rules, which live in j->g. */
  j->done(j->ud, 0, j->out);
  job_free(j);
  return failed;
}

static void job_reply(void *ud, const redisReply *r, const char *err) {
  (void)err;
  job_group *grp = ud;
  engine_thread *t = grp->j->t;
  if (group_reply(grp, r)) engine_count(t, EC_STORE_ERRORS, 1);
}

/* One batched call: its requests, in the order of the script's reply. */
typedef struct eng_batch {
  engine_thread *t;
  size_t n;
  job_group *g[];
} eng_batch;

static void batch_reply(void *ud, const redisReply *r, const char *err) {
  (void)err;
  eng_batch *b = ud;
  int failed = 0;
  for (size_t i = 0; i < b->n; i++) failed |= group_reply(b->g[i], r);
  if (failed) engine_count(b->t, EC_STORE_ERRORS, 1);
  free(b);
}

/* The call for q[0..n) (one slot): sent, or each request answered as a
   failed call (breaker open, out of memory). */
static void batch_send(engine_thread *t, job_group **q, size_t n) {
  rs_request reqs[RS_BATCH_MAX];
  for (size_t i = 0; i < n; i++)
    reqs[i] = (rs_request){&q[i]->call, q[i]->words, q[i]->keys_len,
                           q[i]->words_len};
  char *cmd = NULL;
  size_t len = 0;
  eng_batch *b = malloc(sizeof *b + n * sizeof *b->g);
  int rc = b ? rs_format_batch(reqs, n, RS_DECIDE, -1, &cmd, &len) : SL_ENOMEM;
  int64_t now = clock_mono_ns();
  for (size_t i = 0; i < n; i++) {
    free(q[i]->words);
    q[i]->words = NULL;
    q[i]->j->sent = now;
  }
  engine_count(t, EC_STORE_CALLS, 1);
  if (rc == 0) {
    b->t = t;
    b->n = n;
    memcpy(b->g, q, n * sizeof *q);
    if (t->send(t->io, q[0]->slot, cmd, len, batch_reply, b) == 0) return;
    engine_count(t, EC_STORE_REFUSED, 1);
  } else {
    free(cmd);
    engine_count(t, EC_STORE_ERRORS, 1);
  }
  free(b);
  for (size_t i = 0; i < n; i++) group_reply(q[i], NULL);
}

/* Sorts queued requests by slot, arrival order within one. */
static int by_slot(const void *a, const void *b) {
  const job_group *x = *(job_group *const *)a, *y = *(job_group *const *)b;
  if (x->slot != y->slot) return x->slot < y->slot ? -1 : 1;
  return x->j->t0 < y->j->t0 ? -1 : x->j->t0 > y->j->t0;
}

/* Sends the n queued requests. */
static void flush_queue(engine_thread *t, size_t n) {
  /* Detached first: an answer given here (a refused call) may start the
     connection's next request, which queues anew. */
  job_group **q = t->batch;
  t->batch = NULL;
  t->nbatch = t->batch_cap = 0;
  if (t->e->o.cluster) qsort(q, n, sizeof *q, by_slot);
  size_t max = (size_t)t->e->o.batch_max;
  if (max > RS_BATCH_MAX) max = RS_BATCH_MAX;
  for (size_t i = 0; i < n;) {
    size_t k = 1;
    while (i + k < n && k < max && q[i + k]->slot == q[i]->slot) k++;
    batch_send(t, q + i, k);
    i += k;
  }
  free(q);
}

void engine_thread_flush(engine_thread *t) {
  size_t n;
  while ((n = t->nbatch)) flush_queue(t, n);
}

/*
 * Starts a request in Redis. Returns ENG_PENDING, or 0 when it is already
 * answered (Redis known down: on_store_error), or an SL_E* (ECOST...).
 */
static int job_start(eng_job *j, int64_t now) {
  /* Group the checks by slot (a single group outside a cluster). */
  j->groups = malloc(j->nc * sizeof *j->groups);
  if (!j->groups) return SL_ENOMEM;
  j->ngroups = 0;
  for (size_t c = 0; c < j->nc; c++) {
    int slot = j->t->e->o.cluster
                   ? (int)rc_key_slot(j->c[c].rc.key, j->c[c].rc.key_len)
                   : -1;
    size_t g = 0;
    while (g < j->ngroups && j->groups[g].slot != slot) g++;
    if (g == j->ngroups) {
      j->groups[g].j = j;
      j->groups[g].slot = slot;
      j->ngroups++;
    }
    j->c[c].group = (unsigned)g;
  }
  j->now = now;
  int rc = job_send(j, j->ngroups > 1 ? PH_CHECK : PH_ATOMIC);
  if (rc) return rc;
  if (j->waiting) return ENG_PENDING;
  job_step(j); /* nothing was sent: the breaker is open */
  return 0;
}

static eng_job *job_new(engine_thread *t, eng_result *out, eng_done_fn done,
                        void *ud) {
  eng_job *j = malloc(sizeof *j);
  if (!j) return NULL;
  j->t = t;
  j->g = t->g;
  atomic_fetch_add(&j->g->pins, 1);
  j->out = out;
  j->done = done;
  j->ud = ud;
  j->adhoc = j->blocked = j->waiting = j->failed = 0;
  j->all = 1;
  j->nc = j->ngroups = 0;
  j->ndesc = 1;
  j->groups = NULL;
  j->keys = NULL;
  j->t0 = clock_mono_ns();
  return j;
}

/* Ends a job that went no further than job_start: 0 or rc (not pending). */
static int job_end_now(eng_job *j, int rc) {
  if (rc == 0) job_finish(j);
  job_free(j);
  return rc;
}

/* The request's hash tag (exact mode): the value of the domain's hash_tag
   entry, the first one sent with a value; "" without one. */
static void request_tag(const cfg_domain *dom, const eng_request *req,
                        const char **tag, size_t *tag_len) {
  *tag = "";
  *tag_len = 0;
  for (size_t i = 0; dom->hash_tag && i < req->n && !*tag_len; i++)
    for (size_t k = 0; k < req->descriptors[i].n; k++) {
      const cfg_entry *en = &req->descriptors[i].entries[k];
      if (en->key_len == strlen(dom->hash_tag) &&
          !memcmp(en->key, dom->hash_tag, en->key_len) && en->value_len) {
        *tag = en->value;
        *tag_len = en->value_len;
        break;
      }
    }
}

/* engine_check_async's fleet-mode half: the checks go to Redis. */
static int check_remote(engine_thread *t, const eng_request *req,
                        const cfg_domain *dom, eng_result *out,
                        const sl_check *checks, const size_t *check_of,
                        size_t nc, const uint32_t *sid, int blocked,
                        int64_t now, eng_done_fn done, void *ud) {
  gen *g = t->g;
  const char *tag;
  size_t tag_len;
  request_tag(dom, req, &tag, &tag_len);
  eng_job *j = job_new(t, out, done, ud);
  if (!j) return SL_ENOMEM;
  j->nc = nc;
  j->blocked = blocked;
  memcpy(j->sid, sid, out->n * sizeof *sid);
  j->ndesc = req->n;
  size_t total = 0;
  for (size_t c = 0; c < nc; c++) {
    const cfg_limit *l = out->st[check_of[c]].limit;
    total += REDIS_KEY_MAX(tag_len, strlen(l->rule) + strlen(l->policy_str),
                           checks[c].key_len) +
             checks[c].key_len;
  }
  j->keys = malloc(total);
  if (!j->keys) return job_end_now(j, SL_ENOMEM);
  char *p = j->keys;
  for (size_t c = 0; c < nc; c++) {
    const cfg_limit *l = out->st[check_of[c]].limit;
    job_check *jc = &j->c[c];
    jc->rc.policy = &l->policy;
    jc->rc.key = p;
    jc->rc.key_len = redis_key(p, tag, tag_len, 'r', l->rule, l->policy_str,
                               checks[c].key, checks[c].key_len);
    p += jc->rc.key_len;
    jc->rc.cost = checks[c].cost;
    jc->rc.shadow = checks[c].shadow;
    jc->mode = limit_mode(t->e, l);
    jc->local = g->local[l->index];
    memcpy(p, checks[c].key, checks[c].key_len); /* the request's buffer
                                                    may go before Redis
                                                    answers */
    jc->lkey = p;
    jc->lkey_len = checks[c].key_len;
    p += checks[c].key_len;
    j->check_of[c] = check_of[c];
  }
  int rc = job_start(j, now);
  if (rc == ENG_PENDING) return rc;
  return job_end_now(j, rc);
}

/* ---- approximate mode: local decisions, synced with Redis ---- */

/* A charge whose push failed is pushed again with every round, for up to
   SYNC_CARRY_NS after the first failure, SYNC_CARRY_MAX keys at most: a
   Redis that blinks loses nothing, one that stays away costs bounded
   memory. */
#define SYNC_CARRY_NS (10 * 1000000000LL)
#define SYNC_CARRY_MAX 262144

/* A keyed hash (SipHash, the engine's random key: keys are the clients'
   choice), mixed with the limiter. */
static uint64_t delta_hash(const engine *e, const sl_limiter *lim,
                           const void *key, size_t n) {
  uint64_t h;
  crypto_shorthash((unsigned char *)&h, n ? key : (const void *)"", n,
                   e->delta_key);
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
static eng_delta *delta_find(const delta_table *t, const sl_limiter *lim,
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
static int delta_link(delta_table *t, eng_delta *d) {
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

/* Approximate mode, before a decision: the hash of (lim, key) in the
   thread's delta table, and its slot's cache line on its way, so that this
   miss overlaps the store's (note_charge takes the hash). */
static uint64_t delta_prefetch(engine_thread *t, const sl_limiter *lim,
                               const void *key, size_t key_len) {
  uint64_t h = delta_hash(t->e, lim, key, key_len);
  uintptr_t s = atomic_load_explicit(&t->dhint_slot, memory_order_relaxed);
  size_t m = atomic_load_explicit(&t->dhint_mask, memory_order_relaxed);
  if (s) __builtin_prefetch((const void *)(s + (h & m) * sizeof(delta_slot)));
  return h;
}

/* Records a local charge for the next sync (approximate mode); h is
   delta_prefetch's. The limiter's name in Redis is rule "|" policy (a
   rule's) or canon (id_b NULL: an ad-hoc policy's), as in exact mode
   (redis_key). One lock, and for a key new this interval an entry from the
   thread table's arena. */
static void note_charge(engine_thread *t, sl_limiter *lim, const char *id_a,
                        const char *id_b, const void *key, size_t key_len,
                        int64_t cost, uint64_t h) {
  if (cost <= 0) return;
  pthread_mutex_lock(&t->dlock);
  if (!t->dt) t->dt = delta_table_new();
  eng_delta *d = delta_find(t->dt, lim, key, key_len, h);
  if (d) {
    d->cost += cost;
  } else if (t->dt) {
    size_t id_len = strlen(id_a) + (id_b ? 1 + strlen(id_b) : 0);
    size_t rmax = REDIS_KEY_MAX(0, id_len, key_len);
    d = delta_alloc(t->dt, sizeof *d + key_len + rmax);
    if (d) {
      d->lim = lim;
      d->policy = *sl_limiter_policy(lim);
      d->cost = cost;
      d->h = h;
      d->failed = 0;
      d->counted = 0;
      d->key_len = (uint32_t)key_len;
      memcpy(d->key, key, key_len);
      d->rkey = (char *)d->key + key_len;
      d->rkey_len = (uint32_t)redis_key(d->rkey, "", 0, id_b ? 'r' : 'a',
                                        id_a, id_b, key, key_len);
      if (delta_link(t->dt, d)) d = NULL;
    }
  }
  if (t->dt) { /* the hints follow a new or grown table */
    atomic_store_explicit(&t->dhint_slot, (uintptr_t)t->dt->slot,
                          memory_order_relaxed);
    atomic_store_explicit(&t->dhint_mask, t->dt->mask, memory_order_relaxed);
  }
  pthread_mutex_unlock(&t->dlock);
  /* d NULL: out of memory, the charge is lost for the sync (the fleet can
     overshoot by it). */
}

/* Approximate mode's reset: what the threads have charged to (lim, key)
   and not yet handed to the sync is dropped (the entry's cost becomes 0:
   the sync sends nothing for it and applies no level). Returns whether
   there was any. What a round has already taken is in flight: not here. */
static int forget_charges(engine *e, const sl_limiter *lim, const void *key,
                          size_t key_len) {
  uint64_t h = delta_hash(e, lim, key, key_len);
  int found = 0;
  pthread_mutex_lock(&e->threads_lock);
  for (unsigned i = 0; i < ENG_MAX_THREADS; i++) {
    engine_thread *t = e->threads[i];
    if (!t) continue;
    pthread_mutex_lock(&t->dlock);
    eng_delta *d = delta_find(t->dt, lim, key, key_len, h);
    if (d && d->cost > 0) {
      d->cost = 0;
      found = 1;
    }
    pthread_mutex_unlock(&t->dlock);
  }
  pthread_mutex_unlock(&e->threads_lock);
  pthread_mutex_lock(&e->carry_lock); /* and what waits to be pushed again */
  eng_delta *d = delta_find(e->carry, lim, key, key_len, h);
  if (d && d->cost > 0) {
    d->cost = 0;
    d->counted = d->failed = 0; /* charges after it start afresh */
    found = 1;
  }
  pthread_mutex_unlock(&e->carry_lock);
  return found;
}

void engine_sync_subscribed(engine *e, int on) {
  atomic_store_explicit(&e->sync_subscribed, on, memory_order_relaxed);
}

void engine_reset_channel(const engine *e, char *dst, size_t len) {
  /* (channels are not per database: a fleet's are told apart by its db) */
  snprintf(dst, len, "sl:reset:%d", e->o.db);
}

static const adhoc_entry *adhoc_find(engine *e, const char *canon);

/* The limiter a Redis key's kind and id (redis_key) name here, or NULL:
   a rule's (id "RULE|POLICY") from the limiter map (under reload_lock),
   an ad-hoc policy's (id its canonical form). */
static sl_limiter *limiter_named(engine *e, char kind, const char *id,
                                 size_t id_len) {
  if (kind == 'a') {
    char canon[64];
    if (id_len >= sizeof canon) return NULL;
    memcpy(canon, id, id_len);
    canon[id_len] = '\0';
    const adhoc_entry *a = adhoc_find(e, canon);
    return a ? a->lim : NULL;
  }
  for (size_t i = 0; kind == 'r' && i < e->nlims; i++) {
    const char *m = e->lims[i].id, *sep = strchr(m, '\x1f');
    size_t k = sep ? (size_t)(sep - m) : 0;
    if (sep && strlen(m) == id_len && id[k] == '|' && !memcmp(m, id, k) &&
        !memcmp(sep + 1, id + k + 1, id_len - k - 1))
      return e->lims[i].lim;
  }
  return NULL;
}

/* Parses "LEN:" at *p (below end): LEN, or -1. */
static long long take_len(const char **p, const char *end) {
  long long v = 0;
  const char *q = *p;
  for (; q < end && *q >= '0' && *q <= '9' && v < (1LL << 40); q++)
    v = v * 10 + (*q - '0');
  if (q == *p || q == end || *q != ':') return -1;
  *p = q + 1;
  return v;
}

int engine_sync_reset(engine *e, const void *msg, size_t len) {
  static const char head[] = "sluice-reset ";
  const char *p = msg, *end = p + len;
  size_t hl = sizeof head - 1;
  if (len < hl + 17 || memcmp(p, head, hl) || p[hl + 16] != '\n') return -1;
  if (!memcmp(p + hl, e->instance, 16)) return 0; /* ours: done already */
  int dropped = 0;
  pthread_mutex_lock(&e->reload_lock); /* no limiter freed meanwhile */
  for (p += hl + 17; p < end;) {
    long long n = take_len(&p, end);
    if (n < 0 || n > end - p) break;
    /* "sl:{TAG}" KIND LEN ":" ID KEY */
    const char *k = p, *kend = p + n, *tag_end;
    p = kend;
    if (n < 5 || memcmp(k, "sl:{", 4) ||
        !(tag_end = memchr(k + 4, '}', (size_t)(kend - k - 4))) ||
        kend - tag_end < 2)
      continue;
    char kind = tag_end[1];
    const char *q = tag_end + 2;
    long long idl = take_len(&q, kend);
    if (idl < 0 || idl > kend - q) continue;
    sl_limiter *lim = limiter_named(e, kind, q, (size_t)idl);
    const char *key = q + idl;
    size_t key_len = (size_t)(kend - key);
    if (!lim || key_len > SL_KEY_MAX) continue;
    int had = sl_limiter_reset(lim, key, key_len) == 1;
    had |= forget_charges(e, lim, key, key_len);
    dropped += had;
  }
  pthread_mutex_unlock(&e->reload_lock);
  engine_sync_count(e, ENG_SYNC_RESETS, 1);
  return dropped;
}

/* Approximate mode: lim is about to be freed (a reload; no thread can
   charge it any more). Its entries, in the threads' tables, the round and
   the carry, keep their charges for the sync (their policy and Redis name
   are copies) but lose the limiter: a later one at the same address must
   not take them, nor their fleet level. Under reload_lock, which take and
   apply hold too. */
static void delta_forget(delta_table *t, const sl_limiter *lim) {
  for (eng_delta *d = t ? t->head : NULL; d; d = d->next)
    if (d->lim == lim) d->lim = NULL;
}

static void forget_limiter(engine *e, const sl_limiter *lim) {
  pthread_mutex_lock(&e->threads_lock);
  for (unsigned i = 0; i < ENG_MAX_THREADS; i++) {
    engine_thread *t = e->threads[i];
    if (!t) continue;
    pthread_mutex_lock(&t->dlock);
    delta_forget(t->dt, lim);
    pthread_mutex_unlock(&t->dlock);
  }
  pthread_mutex_unlock(&e->threads_lock);
  pthread_mutex_lock(&e->carry_lock);
  delta_forget(e->carry, lim);
  pthread_mutex_unlock(&e->carry_lock);
  delta_forget(e->round, lim);
}

void engine_sync_count(engine *e, int what, uint64_t n) {
  if (what >= 0 && what < ENG_SYNC_COUNT)
    atomic_fetch_add_explicit(&e->sync_stats[what], n, memory_order_relaxed);
}

/* The carried charges and the threads' tables become the round's
   (e->round): the first whole, the others' entries merged into it (their
   arenas with it). */
eng_delta *engine_sync_take(engine *e) {
  pthread_mutex_lock(&e->reload_lock); /* no limiter freed meanwhile */
  delta_table_free(e->round); /* a round never applied */
  pthread_mutex_lock(&e->carry_lock);
  delta_table *all = e->carry; /* first: what the last rounds failed to push */
  e->carry = NULL;
  pthread_mutex_unlock(&e->carry_lock);
  pthread_mutex_lock(&e->threads_lock);
  for (unsigned i = 0; i < ENG_MAX_THREADS; i++) {
    engine_thread *t = e->threads[i];
    if (!t) continue;
    pthread_mutex_lock(&t->dlock);
    delta_table *dt = t->dt;
    t->dt = NULL;
    pthread_mutex_unlock(&t->dlock);
    if (!dt) continue;
    if (!all) {
      all = dt;
      continue;
    }
    for (eng_delta *d = dt->head, *next; d; d = next) {
      next = d->next;
      eng_delta *x = delta_find(all, d->lim, d->key, d->key_len, d->h);
      if (x)
        x->cost += d->cost;
      else if (delta_link(all, d))
        engine_sync_count(e, ENG_SYNC_LOST, (uint64_t)d->cost);
    }
    delta_chunk **c = &all->chunks;
    while (*c) c = &(*c)->next;
    *c = dt->chunks;
    dt->chunks = NULL;
    delta_table_free(dt);
  }
  pthread_mutex_unlock(&e->threads_lock);
  e->round = all;
  pthread_mutex_unlock(&e->reload_lock);
  return all ? all->head : NULL;
}

const char *engine_delta_key(const eng_delta *d, size_t *len) {
  *len = d->rkey_len;
  return d->rkey;
}
const sl_policy *engine_delta_policy(const eng_delta *d) { return &d->policy; }
int64_t engine_delta_cost(const eng_delta *d) { return d->cost; }
eng_delta *engine_delta_next(const eng_delta *d) { return d->next; }

/* How many keys ahead of the one at hand the sync's passes over a round
   start loading the next ones' table slots and states. */
#define DELTA_AHEAD 8

/* Adds to pend[i] what the threads have charged to the list's i-th
   (limiter, key) since the round took it: not in the fleet's level yet.
   A thread's table is locked for 256 keys at a time, so that its charges
   wait at most that long. */
static void pending_costs(engine *e, eng_delta *list, int64_t *pend) {
  pthread_mutex_lock(&e->threads_lock);
  for (unsigned i = 0; i < ENG_MAX_THREADS; i++) {
    engine_thread *t = e->threads[i];
    if (!t) continue;
    eng_delta *d = list, *ahead = list;
    size_t ahead_k = 0;
    for (size_t k = 0; d;) {
      pthread_mutex_lock(&t->dlock);
      const delta_table *dt = t->dt;
      if (!dt) { /* nothing charged since the round took the tables */
        pthread_mutex_unlock(&t->dlock);
        break;
      }
      for (size_t m = 0; d && m < 256; d = d->next, k++, m++) {
        /* the slot of the key DELTA_AHEAD on starts loading meanwhile */
        for (; ahead && ahead_k < k + DELTA_AHEAD; ahead = ahead->next, ahead_k++)
          __builtin_prefetch(&dt->slot[ahead->h & dt->mask]);
        eng_delta *x =
            d->lim ? delta_find(dt, d->lim, d->key, d->key_len, d->h) : NULL;
        if (x) pend[k] += x->cost;
      }
      pthread_mutex_unlock(&t->dlock);
    }
  }
  pthread_mutex_unlock(&e->threads_lock);
}

/* Keeps d, whose push failed, in e->carry for the next round; its cost is
   lost instead when it first failed over SYNC_CARRY_NS ago, or when the
   carry is full (SYNC_CARRY_MAX) or out of memory. A cost of 0 was
   forgotten by a reset. */
static void carry(engine *e, const eng_delta *d, int64_t mono) {
  if (d->cost <= 0) return;
  size_t size = sizeof *d + d->key_len + d->rkey_len;
  int64_t failed = d->failed ? d->failed : mono;
  int kept = 0;
  pthread_mutex_lock(&e->carry_lock);
  if (mono - failed <= SYNC_CARRY_NS &&
      (!e->carry || e->carry->n < SYNC_CARRY_MAX)) {
    if (!e->carry) e->carry = delta_table_new();
    eng_delta *c = e->carry ? delta_alloc(e->carry, size) : NULL;
    if (c) {
      memcpy(c, d, size);
      c->rkey = (char *)c->key + c->key_len;
      c->failed = failed;
      c->counted = d->cost;
      kept = !delta_link(e->carry, c);
    }
  }
  pthread_mutex_unlock(&e->carry_lock);
  if (!kept)
    engine_sync_count(e, ENG_SYNC_LOST, (uint64_t)d->cost);
  else if (d->cost > d->counted) /* each charge once: what came since */
    engine_sync_count(e, ENG_SYNC_RETRIED, (uint64_t)(d->cost - d->counted));
}

void engine_sync_apply(engine *e, eng_delta *list, const int64_t *level,
                       int64_t now) {
  size_t n = 0;
  for (eng_delta *d = list; d; d = d->next) n++;
  int64_t *pend = level && n ? calloc(n, sizeof *pend) : NULL;
  pthread_mutex_lock(&e->reload_lock);
  if (pend) pending_costs(e, list, pend);
  int64_t mono = clock_mono_ns();
  size_t i = 0, ahead_i = 0;
  eng_delta *ahead = level ? list : NULL;
  for (eng_delta *d = list; d; d = d->next, i++) {
    /* the local state of the key DELTA_AHEAD on starts loading meanwhile */
    for (; ahead && ahead_i < i + DELTA_AHEAD; ahead = ahead->next, ahead_i++)
      if (ahead->lim && level[ahead_i] != ENG_LEVEL_UNSENT &&
          level[ahead_i] != ENG_LEVEL_UNKNOWN)
        limiter_prefetch(ahead->lim, ahead->key, ahead->key_len);
    if (!level || level[i] == ENG_LEVEL_UNSENT) {
      carry(e, d, mono);
      continue;
    }
    if (level[i] == ENG_LEVEL_UNKNOWN) {
      engine_sync_count(e, ENG_SYNC_UNCONFIRMED, (uint64_t)d->cost);
      continue;
    }
    if (!d->lim || !pend) continue; /* reloaded away: pushed, not applied */
    /* The fleet has used more than this daemon saw: charge the rest here
       by force, debt included, so that this daemon's level is the fleet's
       less what it has charged since the round began (pushed next round). */
    int64_t mine;
    limiter_force_to(d->lim, d->key, d->key_len, level[i] - pend[i], now, &mine);
  }
  delta_table_free(e->round); /* list's entries live in its arena */
  e->round = NULL;
  pthread_mutex_unlock(&e->reload_lock);
  free(pend);
}

int engine_check_async(engine_thread *t, const eng_request *req, int64_t now,
                       eng_result *out, eng_done_fn done, void *ud) {
  gen *g = t->g;
  memset(out, 0, offsetof(eng_result, st));
  out->n = 0;
  out->worst = -1;
  const cfg_domain *dom = config_domain(g->cfg, req->domain, req->domain_len);
  if (!dom) return ENG_EDOMAIN;
  if (req->n == 0 || req->n > ENG_MAX_DESCRIPTORS) return ENG_EDESCRIPTOR;

  /* Match every descriptor; collect its limits. */
  const cfg_limit *lims[ENG_MAX_STATUSES];
  int desc_of[ENG_MAX_STATUSES];
  size_t nl = 0;
  for (size_t i = 0; i < req->n; i++) {
    const eng_descriptor *d = &req->descriptors[i];
    if (d->n == 0 || d->n > ENG_MAX_ENTRIES) return ENG_EDESCRIPTOR;
    const cfg_node *node = config_match(dom, d->entries, d->n);
    for (size_t k = 0; node && k < node->nlimits; k++) {
      if (nl == ENG_MAX_STATUSES) return ENG_EDESCRIPTOR;
      lims[nl] = node->limits[k];
      desc_of[nl++] = (int)i;
    }
  }
  /* A matched limit named in another matched limit's `replaces` drops. */
  int dropped[ENG_MAX_STATUSES] = {0};
  for (size_t a = 0; a < nl; a++)
    for (size_t r = 0; r < lims[a]->nreplaces; r++)
      for (size_t b = 0; b < nl; b++)
        if (b != a && lims[b]->name && !strcmp(lims[b]->name, lims[a]->replaces[r]))
          dropped[b] = 1;

  uint8_t keys[ENG_MAX_DESCRIPTORS][KEY_MAX];
  size_t key_len[ENG_MAX_DESCRIPTORS];
  int have_key[ENG_MAX_DESCRIPTORS] = {0};
  sl_check checks[ENG_MAX_STATUSES];
  size_t check_of[ENG_MAX_STATUSES], nc = 0;
  int blocked = 0;
  for (size_t i = 0; i < nl; i++) {
    if (dropped[i]) continue;
    const cfg_limit *l = lims[i];
    const eng_descriptor *d = &req->descriptors[desc_of[i]];
    eng_status *s = &out->st[out->n];
    memset(s, 0, sizeof *s);
    s->limit = l;
    s->policy_str = l->policy_str;
    s->policy = &l->policy;
    s->descriptor = desc_of[i];
    s->shadow = l->shadow;
    int64_t cost = d->hits >= 0 ? d->hits : req->hits;
    if (l->unlimited) {
      s->unlimited = 1;
      s->d.allowed = 1;
      s->d.remaining = UINT32_MAX;
    } else if (l->blocked) {
      /* requests_per_unit: 0 — every request is over the limit, for good:
         no retry_after; reset is the end of the rule's window. */
      int64_t W = l->policy.period_ns > 0 ? l->policy.period_ns : 1000000000;
      s->d.allowed = cost == 0;
      s->d.retry_after_ns = cost == 0 ? 0 : -1;
      s->d.reset_ns = W - now % W;
      if (!s->shadow && cost > 0) blocked = 1;
    } else {
      int k = desc_of[i];
      if (!have_key[k]) {
        if (descriptor_key(d, keys[k], &key_len[k])) return ENG_EDESCRIPTOR;
        have_key[k] = 1;
      }
      checks[nc] = (sl_check){g->lims[l->index], keys[k], key_len[k], cost,
                              s->shadow};
      check_of[nc++] = out->n;
    }
    out->n++;
  }


  /* A blocked rule charges nothing: the others only report figures. */
  if (blocked)
    for (size_t c = 0; c < nc; c++) checks[c].cost = 0;
  uint32_t sid[ENG_MAX_STATUSES];
  for (size_t i = 0; i < out->n; i++) {
    const cfg_limit *l = out->st[i].limit;
    const eng_descriptor *d = &req->descriptors[out->st[i].descriptor];
    sid[i] = detailed_series(t, l, g->series[l->index], &d->entries[d->n - 1]);
  }

  if (t->e->o.remote && nc && t->send && done)
    return check_remote(t, req, dom, out, checks, check_of, nc, sid, blocked,
                        now, done, ud);

  /* Every non-shadow rule must allow. */
  uint64_t dh[ENG_MAX_STATUSES];
  if (t->e->o.sync)
    for (size_t c = 0; c < nc; c++)
      dh[c] = delta_prefetch(t, checks[c].limiter, checks[c].key,
                             checks[c].key_len);
  int64_t t0 = clock_mono_ns();
  sl_decision dec[ENG_MAX_STATUSES];
  int all = 1, rc = 0;
  if (nc) rc = sl_take_all(checks, nc, now, dec, &all);
  observe_latency(t, clock_mono_ns() - t0);
  if (rc) return rc;
  if (t->e->o.sync && all && !blocked)
    for (size_t c = 0; c < nc; c++) {
      const cfg_limit *l = out->st[check_of[c]].limit;
      if (dec[c].allowed)
        note_charge(t, checks[c].limiter, l->rule, l->policy_str,
                    checks[c].key, checks[c].key_len, checks[c].cost, dh[c]);
    }
  if (blocked) all = 0; /* the others report their own (peeked) figures */
  for (size_t c = 0; c < nc; c++) out->st[check_of[c]].d = dec[c];
  out->allowed = all;
  count_rules(t, out, sid);
  engine_count(t, out->allowed ? EC_CHECK_ALLOWED : EC_CHECK_DENIED, 1);
  rank(out, req->n);
  return 0;
}

int engine_check(engine_thread *t, const eng_request *req, int64_t now,
                 eng_result *out) {
  return engine_check_async(t, req, now, out, NULL, NULL);
}

/* ---- ad-hoc policies ---- */

/* The limiter of policy p (canonical `canon`), created on first use. */
static const adhoc_entry *adhoc_get(engine *e, const sl_policy *p,
                                    const char *canon) {
  size_t n = atomic_load_explicit(&e->nadhoc, memory_order_acquire);
  for (size_t i = 0; i < n; i++)
    if (!strcmp(e->adhoc[i].canon, canon)) return &e->adhoc[i];
  const adhoc_entry *found = NULL;
  pthread_mutex_lock(&e->adhoc_lock);
  n = atomic_load_explicit(&e->nadhoc, memory_order_relaxed);
  for (size_t i = 0; i < n && !found; i++)
    if (!strcmp(e->adhoc[i].canon, canon)) found = &e->adhoc[i];
  if (!found && n < ENG_MAX_ADHOC) {
    adhoc_entry *a = &e->adhoc[n];
    snprintf(a->canon, sizeof a->canon, "%s", canon);
    a->policy = *p;
    a->local = NULL;
    int rc = sl_limiter_new(e->store, p, &a->lim);
    if (rc == 0 && e->o.remote && limit_mode(e, NULL) == CFG_STORE_ERROR_LOCAL) {
      sl_policy lp = local_policy(p, limit_fraction(e, NULL));
      if ((rc = sl_limiter_new(e->store, &lp, &a->local))) sl_limiter_free(a->lim);
    }
    if (rc == 0) {
      atomic_store_explicit(&e->nadhoc, n + 1, memory_order_release);
      found = a;
    }
  }
  pthread_mutex_unlock(&e->adhoc_lock);
  return found;
}

/* adhoc_decide's fleet-mode half: one check, in Redis. */
static int adhoc_remote(engine_thread *t, const adhoc_entry *a,
                        const char *key, size_t key_len, int64_t cost,
                        int64_t now, eng_result *out, eng_done_fn done,
                        void *ud) {
  if (key_len > SL_KEY_MAX) return SL_EKEY;
  if (cost < 0) return SL_EINVAL;
  eng_job *j = job_new(t, out, done, ud);
  if (!j) return SL_ENOMEM;
  j->adhoc = 1;
  j->nc = 1;
  j->check_of[0] = 0;
  j->keys = malloc(REDIS_KEY_MAX(0, strlen(a->canon), key_len) + key_len);
  if (!j->keys) return job_end_now(j, SL_ENOMEM);
  job_check *jc = &j->c[0];
  jc->rc.policy = &a->policy;
  jc->rc.key = j->keys;
  jc->rc.key_len =
      redis_key(j->keys, "", 0, 'a', a->canon, NULL, key, key_len);
  jc->rc.cost = cost;
  jc->rc.shadow = 0;
  jc->mode = limit_mode(t->e, NULL);
  jc->local = a->local;
  jc->lkey = j->keys + jc->rc.key_len;
  memcpy(j->keys + jc->rc.key_len, key, key_len);
  jc->lkey_len = key_len;
  int rc = job_start(j, now);
  if (rc == ENG_PENDING) return rc;
  return job_end_now(j, rc);
}

static int adhoc_decide(engine_thread *t, const adhoc_entry *a,
                        const char *key, size_t key_len, int64_t cost,
                        int64_t now, eng_result *out, eng_done_fn done,
                        void *ud) {
  memset(out, 0, sizeof out->allowed);
  out->n = 1;
  eng_status *s = &out->st[0];
  memset(s, 0, sizeof *s);
  s->policy_str = a->canon;
  s->policy = &a->policy;
  if (t->e->o.remote && t->send && done)
    return adhoc_remote(t, a, key, key_len, cost, now, out, done, ud);
  uint64_t dh = t->e->o.sync ? delta_prefetch(t, a->lim, key, key_len) : 0;
  int64_t t0 = clock_mono_ns();
  int rc = sl_limiter_take(a->lim, key, key_len, cost, now, &s->d);
  observe_latency(t, clock_mono_ns() - t0);
  if (rc) return rc;
  if (t->e->o.sync && s->d.allowed)
    note_charge(t, a->lim, a->canon, NULL, key, key_len, cost, dh);
  out->allowed = s->d.allowed;
  out->worst = 0;
  out->by_descriptor[0] = 0;
  engine_count(t, s->d.allowed ? EC_ADHOC_ALLOWED : EC_ADHOC_DENIED, 1);
  return 0;
}

int engine_throttle(engine_thread *t, const char *key, size_t key_len,
                    const char *spec, size_t spec_len, int64_t cost,
                    int64_t now, eng_result *out, char *err, size_t err_len) {
  return engine_throttle_async(t, key, key_len, spec, spec_len, cost, now,
                               out, err, err_len, NULL, NULL);
}

int engine_throttle_async(engine_thread *t, const char *key, size_t key_len,
                          const char *spec, size_t spec_len, int64_t cost,
                          int64_t now, eng_result *out, char *err,
                          size_t err_len, eng_done_fn done, void *ud) {
  /* Per-thread cache by the spec as written: no parsing on the hot path. */
  uint64_t h = fnv1a(FNV1A_INIT, spec, spec_len);
  size_t slot = (size_t)(h % ADHOC_CACHE);
  const adhoc_entry *a = NULL;
  if (t->adhoc_cache[slot].a && t->adhoc_cache[slot].len == spec_len &&
      !memcmp(t->adhoc_cache[slot].spec, spec, spec_len))
    a = t->adhoc_cache[slot].a;
  if (!a) {
    char buf[256];
    if (spec_len >= sizeof buf) {
      snprintf(err, err_len, "policy is too long");
      return SL_EPOLICY;
    }
    memcpy(buf, spec, spec_len);
    buf[spec_len] = '\0';
    sl_policy p;
    if (sl_policy_parse(buf, &p, err, err_len)) return SL_EPOLICY;
    if (t->e->o.remote && rs_policy_check(&p, err, err_len)) return SL_EPOLICY;
    char canon[64];
    sl_policy_format(&p, canon, sizeof canon);
    a = adhoc_get(t->e, &p, canon);
    if (!a) {
      snprintf(err, err_len, "too many distinct ad-hoc policies (max %d)",
               ENG_MAX_ADHOC);
      return ENG_EADHOC;
    }
    if (spec_len < sizeof t->adhoc_cache[slot].spec) {
      memcpy(t->adhoc_cache[slot].spec, spec, spec_len);
      t->adhoc_cache[slot].len = spec_len;
      t->adhoc_cache[slot].a = a;
    }
  }
  return adhoc_decide(t, a, key, key_len, cost, now, out, done, ud);
}

int engine_throttle_policy(engine_thread *t, const char *key, size_t key_len,
                           const sl_policy *p, int64_t cost, int64_t now,
                           eng_result *out) {
  return engine_throttle_policy_async(t, key, key_len, p, cost, now, out,
                                      NULL, NULL);
}

int engine_throttle_policy_async(engine_thread *t, const char *key,
                                 size_t key_len, const sl_policy *p,
                                 int64_t cost, int64_t now, eng_result *out,
                                 eng_done_fn done, void *ud) {
  /* Per-thread cache by the policy's fields: no formatting, no search. */
  uint64_t h = ((uint64_t)p->algo * 0x9e3779b97f4a7c15u) ^
               ((uint64_t)p->limit << 32 | p->burst) ^
               (uint64_t)p->period_ns * 0xff51afd7ed558ccdu;
  size_t slot = (size_t)((h ^ h >> 29) % ADHOC_CACHE);
  const adhoc_entry *a = t->policy_cache[slot];
  if (!a || a->policy.algo != p->algo || a->policy.limit != p->limit ||
      a->policy.burst != p->burst || a->policy.period_ns != p->period_ns) {
    char canon[64];
    if (sl_policy_format(p, canon, sizeof canon) < 0) return SL_EPOLICY;
    if (t->e->o.remote && rs_policy_check(p, NULL, 0)) return SL_EPOLICY;
    a = adhoc_get(t->e, p, canon);
    if (!a) return ENG_EADHOC;
    t->policy_cache[slot] = a;
  }
  return adhoc_decide(t, a, key, key_len, cost, now, out, done, ud);
}

/* ---- resets ---- */

/*
 * A reset drops, for each (limiter, key) it names, this daemon's state at
 * once (the limiter's, its on_store_error: local limiter's, approximate
 * mode's charges not yet pushed) and, in fleet mode, the key's Redis key:
 * one DEL per key (keys of one request may live in different cluster
 * slots; a DEL's reply says whether its key was there), sent on the
 * thread's remote like the decisions, answered through the done callback.
 */

/* One (limiter, key) of a reset: its DEL, and whether this daemon held
   state for it. */
typedef struct reset_item {
  struct reset_job *j;
  char *cmd; /* the DEL, until sent */
  size_t len;
  int slot;
  int local;
  int publish; /* the PUBLISH of the reset (approximate mode) */
} reset_item;

typedef struct reset_job {
  engine_thread *t;
  int remote; /* DEL in Redis (fleet mode), else count the local drops */
  int oom;
  size_t n, cap, waiting;
  reset_item *it;
  char *names; /* approximate mode: the Redis keys, for the PUBLISH */
  size_t names_len;
  eng_reset *out;
  eng_reset_fn done;
  void *ud;
} reset_job;

/* Notes the first failure's reason in out. */
static void reset_fail(reset_job *j, const char *why) {
  if (!j->out->failed++) snprintf(j->out->err, sizeof j->out->err, "%s", why);
}

/* Room for one more item; -1 (out of memory, noted in the job). */
static int reset_grow(reset_job *j) {
  if (j->n < j->cap) return 0;
  size_t cap = j->cap ? 2 * j->cap : 16;
  reset_item *grown = realloc(j->it, cap * sizeof *grown);
  if (!grown) {
    j->oom = 1;
    return -1;
  }
  j->it = grown;
  j->cap = cap;
  return 0;
}

/* A command of argc arguments as RESP (hiredis formats it): malloc'd,
   *len bytes, or NULL (out of memory). */
static char *resp_command(int argc, const char **argv, const size_t *lens,
                          size_t *len) {
  char *cmd = NULL;
  int n = redisFormatCommandArgv(&cmd, argc, argv, lens);
  if (n < 0) return NULL;
  *len = (size_t)n;
  return cmd;
}

/*
 * Drops (lim, key)'s local state (lim, its on_store_error: local limiter
 * `local`, approximate mode's unpushed charges) and, in fleet mode, queues
 * the DEL of its Redis key: redis_key(tag, kind, id_a ["|" id_b], key), as
 * decisions and the sync name it.
 */
static void reset_add(reset_job *j, sl_limiter *lim, sl_limiter *local,
                      const char *tag, size_t tag_len, char kind,
                      const char *id_a, const char *id_b, const void *key,
                      size_t key_len) {
  engine *e = j->t ? j->t->e : NULL;
  int had = 0;
  if (lim) had |= sl_limiter_reset(lim, key, key_len) == 1;
  if (local) had |= sl_limiter_reset(local, key, key_len) == 1;
  if (e && e->o.sync && lim) had |= forget_charges(e, lim, key, key_len);
  if (!j->remote) {
    j->out->dropped += had;
    return;
  }
  if (j->oom || reset_grow(j)) return;
  size_t id_len = strlen(id_a) + (id_b ? 1 + strlen(id_b) : 0);
  char *rkey = malloc(REDIS_KEY_MAX(tag_len, id_len, key_len)), *cmd = NULL;
  size_t rlen = 0, n = 0;
  if (rkey) {
    rlen = redis_key(rkey, tag, tag_len, kind, id_a, id_b, key, key_len);
    /* UNLINK: a sliding_log hash is freed off Redis's main thread */
    cmd = resp_command(2, (const char *[]){"UNLINK", rkey},
                       (const size_t[]){6, rlen}, &n);
  }
  if (!cmd) {
    free(rkey);
    j->oom = 1;
    return;
  }
  reset_item *it = &j->it[j->n++];
  *it = (reset_item){
      j, cmd, n, e->o.cluster ? (int)rc_key_slot(rkey, rlen) : -1, had, 0};
  if (e->o.sync) { /* "LEN:KEY" for the PUBLISH */
    char *grown = realloc(j->names, j->names_len + 21 + rlen);
    if (grown) {
      j->names = grown;
      j->names_len += fmt_u64(grown + j->names_len, rlen);
      grown[j->names_len++] = ':';
      memcpy(grown + j->names_len, rkey, rlen);
      j->names_len += rlen;
    } else {
      j->oom = 1;
    }
  }
  free(rkey);
}

static void reset_job_free(reset_job *j) {
  for (size_t i = 0; i < j->n; i++) free(j->it[i].cmd);
  free(j->it);
  free(j->names);
  free(j);
}

/* The PUBLISH failed: the other daemons were not told (why: the first
   failure, unless a deletion's came first). */
static void reset_unpublished(reset_job *j, const char *why) {
  j->out->unpublished = 1;
  if (!j->out->failed && !j->out->err[0])
    snprintf(j->out->err, sizeof j->out->err, "redis: PUBLISH: %.140s", why);
}

/* A DEL's answer (r NULL: its call failed, err says why). */
static void reset_reply(void *ud, const redisReply *r, const char *err) {
  reset_item *it = ud;
  reset_job *j = it->j;
  if (it->publish) { /* its answer: how many daemons (of that node) heard */
    const char *why = !r                            ? err
                      : r->type == REDIS_REPLY_ERROR ? r->str
                                                     : "unexpected reply";
    if (!r || r->type != REDIS_REPLY_INTEGER) reset_unpublished(j, why);
  } else if (r && r->type == REDIS_REPLY_INTEGER) {
    j->out->dropped += r->integer > 0 || it->local;
  } else {
    char why[160];
    if (r && r->type == REDIS_REPLY_ERROR)
      snprintf(why, sizeof why, "redis: %.140s", r->str);
    else
      snprintf(why, sizeof why, "redis: %.140s",
               err ? err : "unexpected reply to UNLINK");
    reset_fail(j, why);
  }
  if (--j->waiting) return;
  j->done(j->ud, j->out->failed || j->out->unpublished ? ENG_ESTORE : 0,
          j->out);
  reset_job_free(j);
}

/*
 * Approximate mode: after the job's UNLINKs, one PUBLISH of their keys on
 * the resets' channel, to the first key's node (in a cluster a PUBLISH
 * reaches every node's subscribers): "sluice-reset INSTANCE\n" then
 * "LEN:KEY" for each key. The other daemons' sync threads drop their own
 * state for those keys (engine_sync_reset).
 */
static void reset_add_publish(reset_job *j) {
  engine *e = j->t->e;
  char ch[64], head[32];
  engine_reset_channel(e, ch, sizeof ch);
  size_t hl =
      (size_t)snprintf(head, sizeof head, "sluice-reset %s\n", e->instance);
  char *msg = malloc(hl + j->names_len), *cmd = NULL;
  size_t n = 0;
  if (msg) {
    memcpy(msg, head, hl);
    memcpy(msg + hl, j->names, j->names_len);
    cmd = resp_command(3, (const char *[]){"PUBLISH", ch, msg},
                       (const size_t[]){7, strlen(ch), hl + j->names_len}, &n);
    free(msg);
  }
  if (!cmd || reset_grow(j)) {
    free(cmd);
    j->oom = 1;
    return;
  }
  reset_item *it = &j->it[j->n++];
  *it = (reset_item){j, cmd, n, j->it[0].slot, 0, 1};
}

/* Sends the job's DELs. 0 (every answer now in out), ENG_PENDING (the
   last reply calls done and frees the job), ENG_ESTORE (none could be
   sent: Redis known down), SL_ENOMEM; a job not pending is freed here. */
static int reset_run(reset_job *j) {
  if (j->oom) {
    reset_job_free(j);
    return SL_ENOMEM;
  }
  if (!j->remote || j->n == 0) {
    reset_job_free(j);
    return 0;
  }
  engine_thread *t = j->t;
  j->out->keys = (int)j->n;
  if (t->e->o.sync) reset_add_publish(j);
  if (j->oom) {
    reset_job_free(j);
    return SL_ENOMEM;
  }
  j->waiting = 1; /* held until every DEL is out: no early done */
  for (size_t i = 0; i < j->n; i++) {
    reset_item *it = &j->it[i];
    char *cmd = it->cmd;
    it->cmd = NULL; /* the remote's from now on */
    if (t->send(t->io, it->slot, cmd, it->len, reset_reply, it) == 0)
      j->waiting++;
    else if (it->publish)
      reset_unpublished(j, "down");
    else
      reset_fail(j, "redis: down, not retried until --breaker-interval "
                    "has passed since it failed");
  }
  if (--j->waiting) return ENG_PENDING;
  int rc = j->out->failed || j->out->unpublished ? ENG_ESTORE : 0;
  reset_job_free(j);
  return rc;
}

/* A reset job on thread t (NULL: memory mode's engine_reset_key), or NULL
   (out of memory). In fleet mode, rc ENG_EREMOTE when it cannot reach
   Redis from here. */
static reset_job *reset_job_new(engine *e, engine_thread *t, eng_reset *out,
                                eng_reset_fn done, void *ud, int *rc) {
  memset(out, 0, sizeof *out);
  int fleet = e->o.remote || e->o.sync;
  *rc = 0;
  if (fleet && (!t || !t->send || !done)) {
    *rc = ENG_EREMOTE;
    return NULL;
  }
  reset_job *j = calloc(1, sizeof *j);
  if (!j) {
    *rc = SL_ENOMEM;
    return NULL;
  }
  j->t = t;
  j->remote = fleet;
  j->out = out;
  j->done = done;
  j->ud = ud;
  return j;
}

/* The ad-hoc policy whose canonical form is canon, or NULL (none made). */
static const adhoc_entry *adhoc_find(engine *e, const char *canon) {
  size_t n = atomic_load_explicit(&e->nadhoc, memory_order_acquire);
  for (size_t i = 0; i < n; i++)
    if (!strcmp(e->adhoc[i].canon, canon)) return &e->adhoc[i];
  return NULL;
}

static int reset_key(engine *e, engine_thread *t, const char *key,
                     size_t key_len, const char *spec, size_t spec_len,
                     eng_reset *out, eng_reset_fn done, void *ud) {
  int rc;
  reset_job *j = reset_job_new(e, t, out, done, ud, &rc);
  if (!j) return rc;
  if (key_len > SL_KEY_MAX) {
    reset_job_free(j);
    return SL_EKEY;
  }
  if (spec && !spec_len) { /* named, but empty: not "every policy" */
    snprintf(out->err, sizeof out->err, "policy is empty");
    reset_job_free(j);
    return SL_EPOLICY;
  }
  if (spec_len) {
    char buf[256], canon[64];
    sl_policy p;
    if (spec_len >= sizeof buf) {
      snprintf(out->err, sizeof out->err, "policy is too long");
      reset_job_free(j);
      return SL_EPOLICY;
    }
    memcpy(buf, spec, spec_len);
    buf[spec_len] = '\0';
    if (sl_policy_parse(buf, &p, out->err, sizeof out->err) ||
        sl_policy_format(&p, canon, sizeof canon) < 0) {
      reset_job_free(j);
      return SL_EPOLICY;
    }
    /* Named: its Redis key goes whether or not this daemon has used it. */
    const adhoc_entry *a = adhoc_find(e, canon);
    reset_add(j, a ? a->lim : NULL, a ? a->local : NULL, "", 0, 'a', canon,
              NULL, key, key_len);
  } else {
    size_t n = atomic_load_explicit(&e->nadhoc, memory_order_acquire);
    for (size_t i = 0; i < n; i++)
      reset_add(j, e->adhoc[i].lim, e->adhoc[i].local, "", 0, 'a',
                e->adhoc[i].canon, NULL, key, key_len);
  }
  return reset_run(j);
}

int engine_reset_key_async(engine_thread *t, const char *key, size_t key_len,
                           const char *spec, size_t spec_len, eng_reset *out,
                           eng_reset_fn done, void *ud) {
  return reset_key(t->e, t, key, key_len, spec, spec_len, out, done, ud);
}

int engine_reset_descriptor_async(engine_thread *t, const eng_request *req,
                                  eng_reset *out, eng_reset_fn done, void *ud) {
  gen *g = t->g;
  engine *e = t->e;
  const cfg_domain *dom = config_domain(g->cfg, req->domain, req->domain_len);
  memset(out, 0, sizeof *out);
  if (!dom) return ENG_EDOMAIN;
  if (req->n == 0 || req->n > ENG_MAX_DESCRIPTORS) return ENG_EDESCRIPTOR;
  uint8_t keys[ENG_MAX_DESCRIPTORS][KEY_MAX];
  size_t len[ENG_MAX_DESCRIPTORS];
  for (size_t i = 0; i < req->n; i++) {
    const eng_descriptor *d = &req->descriptors[i];
    if (d->n == 0 || d->n > ENG_MAX_ENTRIES ||
        descriptor_key(d, keys[i], &len[i]))
      return ENG_EDESCRIPTOR;
  }
  int rc;
  reset_job *j = reset_job_new(e, t, out, done, ud, &rc);
  if (!j) return rc;
  /* Exact mode's keys carry the request's hash tag; the sync's none. */
  const char *tag = "";
  size_t tag_len = 0;
  if (e->o.remote) request_tag(dom, req, &tag, &tag_len);
  for (size_t i = 0; i < req->n; i++) {
    const eng_descriptor *d = &req->descriptors[i];
    const cfg_node *node = config_match(dom, d->entries, d->n);
    for (size_t k = 0; node && k < node->nlimits; k++) {
      const cfg_limit *l = node->limits[k];
      if (l->unlimited || l->blocked) continue; /* no state anywhere */
      reset_add(j, g->lims[l->index], g->local[l->index], tag, tag_len, 'r',
                l->rule, l->policy_str, keys[i], len[i]);
    }
  }
  return reset_run(j);
}

int engine_reset_descriptor(engine_thread *t, const eng_request *req) {
  eng_reset out;
  int rc = engine_reset_descriptor_async(t, req, &out, NULL, NULL);
  return rc ? rc : out.dropped;
}

int engine_reset_key(engine *e, const char *key, size_t key_len) {
  eng_reset out;
  int rc = reset_key(e, NULL, key, key_len, NULL, 0, &out, NULL, NULL);
  return rc ? rc : out.dropped;
}

/* ---- Prometheus text format ---- */

/* Writes s as a label value: backslash, quote and newline escaped. */
static void label(FILE *f, const char *s) {
  for (; *s; s++) {
    if (*s == '\\' || *s == '"')
      fprintf(f, "\\%c", *s);
    else if (*s == '\n')
      fputs("\\n", f);
    else
      fputc(*s, f);
  }
}

static void help(FILE *f, const char *name, const char *type,
                 const char *text) {
  fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name, text, name, type);
}

/* A histogram in the Prometheus text format: cumulative buckets, sum, count. */
static void print_histogram(FILE *f, const char *name, const histogram_sum *h) {
  uint64_t cum = 0;
  for (size_t b = 0; b < NBUCKETS; b++) {
    cum += h->b[b];
    fprintf(f, "%s_bucket{le=\"%g\"} %llu\n", name,
            (double)hist_bounds[b] / 1e9, (unsigned long long)cum);
  }
  cum += h->b[NBUCKETS];
  fprintf(f, "%s_bucket{le=\"+Inf\"} %llu\n%s_sum %.9f\n%s_count %llu\n",
          name, (unsigned long long)cum, name, (double)h->sum_ns / 1e9, name,
          (unsigned long long)h->count);
}

char *engine_metrics(engine *e, size_t *len) {
  char *buf = NULL;
  size_t n = 0;
  FILE *f = open_memstream(&buf, &n);
  if (!f) return NULL;

  /* Sum the per-thread figures under the thread list's lock. */
  uint64_t counters[EC_COUNT] = {0};
  histogram_sum hist = {{0}, 0, 0}, shist = {{0}, 0, 0};
  int64_t conns[2] = {0, 0};
  int failing = 0;
  size_t ns = atomic_load_explicit(&e->nseries, memory_order_acquire);
  uint64_t *ser = calloc(ns ? ns * S_N : 1, sizeof *ser);
  pthread_mutex_lock(&e->threads_lock);
  for (unsigned i = 0; i < ENG_MAX_THREADS; i++) {
    engine_thread *t = e->threads[i];
    if (!t) continue;
    for (int c = 0; c < EC_COUNT; c++) counters[c] += get(&t->counters[c]);
    histogram_add(&hist, &t->hist);
    histogram_add(&shist, &t->shist);
    failing |= atomic_load_explicit(&t->store_failing, memory_order_relaxed);
    for (int p = 0; p < 2; p++)
      conns[p] += atomic_load_explicit(&t->conns[p], memory_order_relaxed);
    for (size_t s = 0; ser && s < ns; s++) {
      counter *chunk = atomic_load_explicit(&t->chunks[s / SERIES_CHUNK],
                                            memory_order_acquire);
      if (!chunk) continue;
      for (int k = 0; k < S_N; k++)
        ser[s * S_N + k] += get(&chunk[(s % SERIES_CHUNK) * S_N + k]);
    }
  }
  pthread_mutex_unlock(&e->threads_lock);

  help(f, "sluice_build_info", "gauge", "The running version.");
  fprintf(f, "sluice_build_info{version=\"%s\"} 1\n", sl_version_string());

  help(f, "sluice_rule_decisions_total", "counter",
       "Decisions per config rule: allowed, denied, or shadow_denied (a "
       "shadow-mode rule that would have denied).");
  static const char *const results[] = {"allowed", "denied", "shadow_denied"};
  pthread_mutex_lock(&e->series_lock);
  for (size_t s = 0; ser && s < ns; s++)
    for (int k = 0; k < 3; k++) {
      fputs("sluice_rule_decisions_total{domain=\"", f);
      label(f, e->series[s].domain);
      fputs("\",rule=\"", f);
      label(f, e->series[s].rule);
      fprintf(f, "\",result=\"%s\"} %llu\n", results[k],
              (unsigned long long)ser[s * S_N + k]);
    }
  help(f, "sluice_rule_near_limit_total", "counter",
       "Allowed decisions that left less than 20% of the rule's quota.");
  for (size_t s = 0; ser && s < ns; s++) {
    fputs("sluice_rule_near_limit_total{domain=\"", f);
    label(f, e->series[s].domain);
    fputs("\",rule=\"", f);
    label(f, e->series[s].rule);
    fprintf(f, "\"} %llu\n", (unsigned long long)ser[s * S_N + S_NEAR_LIMIT]);
  }
  pthread_mutex_unlock(&e->series_lock);
  free(ser);

  help(f, "sluice_decisions_total", "counter",
       "Decisions by kind (check: config rules; throttle: ad-hoc policy).");
  fprintf(f,
          "sluice_decisions_total{kind=\"check\",result=\"allowed\"} %llu\n"
          "sluice_decisions_total{kind=\"check\",result=\"denied\"} %llu\n"
          "sluice_decisions_total{kind=\"throttle\",result=\"allowed\"} %llu\n"
          "sluice_decisions_total{kind=\"throttle\",result=\"denied\"} %llu\n",
          (unsigned long long)counters[EC_CHECK_ALLOWED],
          (unsigned long long)counters[EC_CHECK_DENIED],
          (unsigned long long)counters[EC_ADHOC_ALLOWED],
          (unsigned long long)counters[EC_ADHOC_DENIED]);

  help(f, "sluice_decision_duration_seconds", "histogram",
       "Time spent deciding (store lookups and algorithms), per request.");
  print_histogram(f, "sluice_decision_duration_seconds", &hist);

  if (e->o.remote) {
    help(f, "sluice_redis_calls_total", "counter",
         "Fleet mode: decision scripts sent to Redis.");
    fprintf(f, "sluice_redis_calls_total %llu\n",
            (unsigned long long)counters[EC_STORE_CALLS]);
    help(f, "sluice_redis_errors_total", "counter",
         "Fleet mode: scripts that failed (timeout, connection lost, error "
         "reply).");
    fprintf(f, "sluice_redis_errors_total %llu\n",
            (unsigned long long)counters[EC_STORE_ERRORS]);
    help(f, "sluice_redis_refused_total", "counter",
         "Fleet mode: scripts not sent because the breaker was open (Redis "
         "down).");
    fprintf(f, "sluice_redis_refused_total %llu\n",
            (unsigned long long)counters[EC_STORE_REFUSED]);
    help(f, "sluice_store_fallbacks_total", "counter",
         "Fleet mode: requests answered by on_store_error instead of Redis.");
    fprintf(f, "sluice_store_fallbacks_total %llu\n",
            (unsigned long long)counters[EC_STORE_FALLBACKS]);
    help(f, "sluice_store_fallback_active", "gauge",
         "Fleet mode: 1 while the last Redis call of some thread failed.");
    fprintf(f, "sluice_store_fallback_active %d\n", failing);
    help(f, "sluice_redis_call_duration_seconds", "histogram",
         "Fleet mode: from sending a script to its reply (batching "
         "included).");
    print_histogram(f, "sluice_redis_call_duration_seconds", &shist);
  }
  if (e->o.sync) {
    static const char *const name[ENG_SYNC_COUNT] = {
        "sluice_sync_rounds_total",
        "sluice_sync_calls_total",
        "sluice_sync_errors_total",
        "sluice_sync_retried_cost_total",
        "sluice_sync_unconfirmed_cost_total",
        "sluice_sync_lost_cost_total",
        "sluice_sync_resets_total"};
    static const char *const what[ENG_SYNC_COUNT] = {
        "Approximate mode: sync rounds that had local charges to push.",
        "Approximate mode: script calls the sync thread sent to Redis.",
        "Approximate mode: sync calls that failed (timeout, connection "
        "lost, error reply).",
        "Approximate mode: cost whose push Redis did not run (no "
        "connection, a redirect), pushed again with the next rounds.",
        "Approximate mode: cost pushed in a call that got no reply (Redis "
        "may have taken it, or take it later); not pushed again.",
        "Approximate mode: cost charged locally and never pushed to Redis "
        "(its pushes failed for 10 s, or too many keys were waiting).",
        "Approximate mode: resets other daemons got and published, applied "
        "here (this daemon's state for their keys dropped)."};
    for (int i = 0; i < ENG_SYNC_COUNT; i++) {
      help(f, name[i], "counter", what[i]);
      fprintf(f, "%s %llu\n", name[i],
              (unsigned long long)atomic_load(&e->sync_stats[i]));
    }
    help(f, "sluice_sync_resets_subscribed", "gauge",
         "Approximate mode: 1 while the sync thread is subscribed to the "
         "resets other daemons publish (0: it would miss them).");
    fprintf(f, "sluice_sync_resets_subscribed %d\n",
            atomic_load_explicit(&e->sync_subscribed, memory_order_relaxed));
  }

  help(f, "sluice_requests_total", "counter", "Requests by protocol.");
  fprintf(f,
          "sluice_requests_total{protocol=\"http\"} %llu\n"
          "sluice_requests_total{protocol=\"resp\"} %llu\n",
          (unsigned long long)counters[EC_HTTP_REQUESTS],
          (unsigned long long)counters[EC_RESP_COMMANDS]);
  help(f, "sluice_request_errors_total", "counter",
       "Requests answered with an error, by protocol.");
  fprintf(f,
          "sluice_request_errors_total{protocol=\"http\"} %llu\n"
          "sluice_request_errors_total{protocol=\"resp\"} %llu\n",
          (unsigned long long)counters[EC_HTTP_ERRORS],
          (unsigned long long)counters[EC_RESP_ERRORS]);
  help(f, "sluice_connections", "gauge", "Open client connections.");
  fprintf(f,
          "sluice_connections{protocol=\"http\"} %lld\n"
          "sluice_connections{protocol=\"resp\"} %lld\n",
          (long long)conns[0], (long long)conns[1]);
  help(f, "sluice_connections_rejected_total", "counter",
       "Connections closed at once because --max-connections was reached.");
  fprintf(f, "sluice_connections_rejected_total %llu\n",
          (unsigned long long)counters[EC_CONNECTIONS_REJECTED]);

  sl_store_stats st;
  sl_store_stats_get(e->store, &st);
  help(f, "sluice_store_keys", "gauge", "Keys held by the store.");
  fprintf(f, "sluice_store_keys %llu\n", (unsigned long long)st.keys);
  help(f, "sluice_store_bytes", "gauge", "Bytes held by the store.");
  fprintf(f, "sluice_store_bytes %llu\n", (unsigned long long)st.bytes);
  help(f, "sluice_store_max_bytes", "gauge", "The store's memory cap.");
  fprintf(f, "sluice_store_max_bytes %llu\n", (unsigned long long)st.max_memory);
  help(f, "sluice_store_expirations_total", "counter",
       "Keys dropped because they were back to fresh.");
  fprintf(f, "sluice_store_expirations_total %llu\n",
          (unsigned long long)st.expirations);
  help(f, "sluice_store_evictions_total", "counter",
       "Live keys dropped to stay under the memory cap.");
  fprintf(f, "sluice_store_evictions_total %llu\n",
          (unsigned long long)st.evictions);
  help(f, "sluice_limiters", "gauge", "Limiters (rules and ad-hoc policies).");
  fprintf(f, "sluice_limiters %llu\n", (unsigned long long)st.limiters);

  help(f, "sluice_config_reloads_total", "counter",
       "Config reloads, by result (a failed one keeps the old config).");
  fprintf(f,
          "sluice_config_reloads_total{result=\"success\"} %llu\n"
          "sluice_config_reloads_total{result=\"failure\"} %llu\n",
          (unsigned long long)atomic_load(&e->reloads_ok),
          (unsigned long long)atomic_load(&e->reloads_failed));
  help(f, "sluice_config_last_reload_timestamp_seconds", "gauge",
       "When the running config was loaded (Unix time).");
  fprintf(f, "sluice_config_last_reload_timestamp_seconds %lld\n",
          (long long)atomic_load(&e->last_reload_s));

  if (fclose(f) != 0) {
    free(buf);
    return NULL;
  }
  *len = n;
  return buf;
}
