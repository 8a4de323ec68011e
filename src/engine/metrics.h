/*
 * metrics.h — the engine's metrics as data: a registry of metrics (name,
 * labels, kind, help), their values (per thread, written without locks by
 * their thread; or global), and one renderer of the Prometheus text
 * format.
 *
 * Whoever counts something registers it once, before the worker threads
 * exist: the engine its decisions, requests and store figures, a store
 * backend its own (Redis calls, sync rounds). The request path then adds
 * to its thread's slots by id — one relaxed store, no lock, no shared
 * cache line — and a scrape sums the threads' values under the engine's
 * thread lock. Per-rule series (sluice_rule_decisions_total and
 * sluice_rule_near_limit_total, one per rule and, for detailed_metric
 * rules, per value) have a registry of their own: they come and go with
 * configs and requests, up to MAX_SERIES.
 */
#ifndef SLUICE_ENGINE_METRICS_H
#define SLUICE_ENGINE_METRICS_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define METRICS_MAX 64 /* counters and gauges, all registrants */
#define HISTOGRAMS_MAX 4
#define MAX_SERIES 65536 /* per-rule series */
#define SERIES_CHUNK 256
#define SERIES_NONE UINT32_MAX /* a series_of base: none (a rule's own) */

/* What a series counts (sluice_rule_*): */
enum {
  S_ALLOWED,
  S_DENIED,
  S_SHADOW_DENIED,
  S_NEAR_LIMIT,
  S_CAND_WOULD_DENY,  /* its candidate denied what the rule allowed */
  S_CAND_WOULD_ALLOW, /* its candidate allowed what the rule denied */
  S_N
};

typedef _Atomic uint64_t metric_counter;

/* Latency histogram bounds, in ns (Prometheus le= in seconds). */
#define HIST_BUCKETS 11

/* A latency histogram (one thread writes it). */
typedef struct metric_histogram {
  metric_counter b[HIST_BUCKETS + 1];
  metric_counter sum_ns, count;
} metric_histogram;

/* One thread's values. */
typedef struct metric_slots {
  metric_counter v[METRICS_MAX];
  metric_histogram h[HISTOGRAMS_MAX];
  _Atomic(metric_counter *) chunks[MAX_SERIES / SERIES_CHUNK];
} metric_slots;

typedef enum metric_kind {
  METRIC_COUNTER,
  METRIC_GAUGE,
  METRIC_HISTOGRAM
} metric_kind;

/* Where a metric's value lives and how a scrape reads it. */
typedef enum metric_scope {
  METRIC_THREADS,     /* per thread, summed */
  METRIC_THREADS_ANY, /* per thread 0/1, reported 1 if any thread's is */
  METRIC_GLOBAL,      /* one value (metrics_global_*), any thread */
  METRIC_SERIES,      /* the per-rule series' results: a sample per series
                         and result (allowed, denied, shadow_denied) */
  METRIC_SERIES_NEAR, /* the per-rule series' near-limit counts */
  METRIC_SERIES_CAND  /* the per-rule series' candidate divergences: a
                         sample per direction, for the series of a rule
                         with a candidate (or that counted one) */
} metric_scope;

/* Where a metric is rendered among the others (stable within a group):
   the engine's decisions first, then the store backend's, then the
   requests, connections, store and config. */
enum { METRIC_GROUP_DECISIONS, METRIC_GROUP_BACKEND, METRIC_GROUP_DAEMON };

typedef struct metric_def {
  const char *name;   /* the family's name */
  const char *labels; /* this metric's labels, as between braces; NULL */
  metric_kind kind;
  metric_scope scope;
  int group;
  const char *help; /* the family's (its first metric's is used) */
} metric_def;

typedef struct metrics metrics;

metrics *metrics_new(void);
void metrics_free(metrics *m);

/*
 * Registers a metric (d is copied; its strings must outlive m). Returns
 * its id (a counter/gauge id, or for METRIC_HISTOGRAM a histogram id), or
 * -1 when the registry is full. Before any thread counts: not thread-safe.
 */
int metrics_add(metrics *m, const metric_def *d);

/* Adds n to a counter only its own thread writes: a plain load and
   store (relaxed atomics, so that a scrape may read it at any time), no
   read-modify-write. */
static inline void metric_bump(metric_counter *c, uint64_t n) {
  atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + n,
                        memory_order_relaxed);
}

/* A thread's values, written only by that thread. */
static inline void metric_add(metric_slots *s, int id, uint64_t n) {
  metric_bump(&s->v[id], n);
}
static inline void metric_set(metric_slots *s, int id, uint64_t v) {
  atomic_store_explicit(&s->v[id], v, memory_order_relaxed);
}
void metric_observe(metric_slots *s, int hist, int64_t ns);

/* A METRIC_GLOBAL metric's value, from any thread. */
void metrics_global_add(metrics *m, int id, uint64_t n);
void metrics_global_set(metrics *m, int id, uint64_t v);

/* ---- per-rule series ---- */

/*
 * The index of series (domain, rule), created if new. A detailed series
 * (per value of a rule) names its rule's series as `base`: past
 * SERIES_PER_RULE of them, base itself is returned (values roll up). When
 * the registry is full, MAX_SERIES (not counted) or base. Thread-safe.
 */
#define SERIES_PER_RULE 1000
uint32_t metrics_series(metrics *m, const char *domain, const char *rule,
                        uint32_t base);

/* Marks series id as a rule's with a candidate policy: its divergences
   are rendered, zeros included. Thread-safe. */
void metrics_series_candidate(metrics *m, uint32_t id);

/* Thread s's counters of series id (allocated on first use), or NULL. */
metric_counter *metric_series(metric_slots *s, uint32_t id);

/* Frees the series counters of a thread's slots. */
void metric_slots_dispose(metric_slots *s);

/*
 * Renders every metric in the Prometheus text format: the threads'
 * values summed (threads[0..n), read while the caller keeps them alive),
 * the global ones, and the series. A malloc'd string of *len bytes, or
 * NULL when out of memory.
 */
char *metrics_render(metrics *m, metric_slots *const *threads, size_t n,
                     size_t *len);

/*
 * The same figures as one JSON document (GET /v1/stats, the page's live
 * view): {"metrics": [{"name", "kind", "labels"?, "value" | "count",
 * "sum_ns", "buckets": [[le_ns|null, cumulative], ...]}], "series":
 * [{"domain", "rule", "allowed", "denied", "shadow_denied",
 * "near_limit"}]}. A malloc'd string of *len bytes, or NULL.
 */
char *metrics_render_json(metrics *m, metric_slots *const *threads, size_t n,
                          size_t *len);

#endif /* SLUICE_ENGINE_METRICS_H */
