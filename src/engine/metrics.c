/*
 * metrics.c — the registry, the threads' values and the series, and the
 * Prometheus text they render as.
 */
#include "metrics.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../base/hash.h"
#include "../base/json.h"

static const int64_t hist_bounds[HIST_BUCKETS] = {
    1000,   2500,   5000,   10000,   25000,   50000,
    100000, 250000, 500000, 1000000, 10000000};

typedef struct series {
  char *domain, *rule;
  uint64_t hash;
  uint32_t details; /* detailed_metric series made under this one */
  int candidate;    /* metrics_series_candidate's mark */
} series;

struct metrics {
  metric_def defs[METRICS_MAX + HISTOGRAMS_MAX];
  int id[METRICS_MAX + HISTOGRAMS_MAX]; /* each def's value or histogram */
  size_t ndefs;
  int ncounters, nhists;
  metric_counter global[METRICS_MAX];

  pthread_mutex_t series_lock;
  series *series;
  _Atomic size_t nseries;
  size_t series_cap;
  uint32_t *series_index; /* open addressing: series index + 1, 0 empty */
  size_t index_cap;       /* a power of two, at least 2x nseries */
};

metrics *metrics_new(void) {
  metrics *m = calloc(1, sizeof *m);
  if (m) pthread_mutex_init(&m->series_lock, NULL);
  return m;
}

void metrics_free(metrics *m) {
  if (!m) return;
  size_t ns = atomic_load(&m->nseries);
  for (size_t i = 0; i < ns; i++) {
    free(m->series[i].domain);
    free(m->series[i].rule);
  }
  free(m->series);
  free(m->series_index);
  pthread_mutex_destroy(&m->series_lock);
  free(m);
}

int metrics_add(metrics *m, const metric_def *d) {
  if (m->ndefs == sizeof m->defs / sizeof m->defs[0]) return -1;
  int id;
  if (d->kind == METRIC_HISTOGRAM) {
    if (m->nhists == HISTOGRAMS_MAX) return -1;
    id = m->nhists++;
  } else if (d->scope == METRIC_SERIES || d->scope == METRIC_SERIES_NEAR ||
             d->scope == METRIC_SERIES_CAND) {
    id = 0;
  } else {
    if (m->ncounters == METRICS_MAX) return -1;
    id = m->ncounters++;
  }
  m->defs[m->ndefs] = *d;
  m->id[m->ndefs++] = id;
  return id;
}

void metric_observe(metric_slots *s, int hist, int64_t ns) {
  metric_histogram *h = &s->h[hist];
  size_t b = 0;
  while (b < HIST_BUCKETS && ns > hist_bounds[b]) b++;
  metric_bump(&h->b[b], 1);
  metric_bump(&h->sum_ns, (uint64_t)ns);
  metric_bump(&h->count, 1);
}

void metrics_global_add(metrics *m, int id, uint64_t n) {
  atomic_fetch_add_explicit(&m->global[id], n, memory_order_relaxed);
}

void metrics_global_set(metrics *m, int id, uint64_t v) {
  atomic_store_explicit(&m->global[id], v, memory_order_relaxed);
}

/* ---- series ---- */

static uint64_t series_hash(const char *domain, const char *rule) {
  /* (0xff between the two: no byte of UTF-8 text, so no two pairs of
     strings hash as one) */
  return fnv1a_str(fnv1a(fnv1a_str(FNV1A_INIT, domain), "\xff", 1), rule);
}

/* Rebuilds the hash index at twice the size (under series_lock). */
static int series_grow_index(metrics *m) {
  size_t cap = m->index_cap ? m->index_cap * 2 : 256;
  uint32_t *idx = calloc(cap, sizeof *idx);
  if (!idx) return -1;
  size_t n = atomic_load_explicit(&m->nseries, memory_order_relaxed);
  for (size_t i = 0; i < n; i++) {
    size_t k = m->series[i].hash & (cap - 1);
    while (idx[k]) k = (k + 1) & (cap - 1);
    idx[k] = (uint32_t)i + 1;
  }
  free(m->series_index);
  m->series_index = idx;
  m->index_cap = cap;
  return 0;
}

uint32_t metrics_series(metrics *m, const char *domain, const char *rule,
                        uint32_t base) {
  uint64_t h = series_hash(domain, rule);
  uint32_t idx = base == SERIES_NONE ? MAX_SERIES : base;
  pthread_mutex_lock(&m->series_lock);
  size_t n = atomic_load_explicit(&m->nseries, memory_order_relaxed);
  if (m->index_cap < 2 * (n + 1) && series_grow_index(m)) goto done;
  size_t k = h & (m->index_cap - 1);
  for (uint32_t v; (v = m->series_index[k]); k = (k + 1) & (m->index_cap - 1)) {
    const series *x = &m->series[v - 1];
    if (x->hash == h && !strcmp(x->rule, rule) && !strcmp(x->domain, domain)) {
      idx = v - 1;
      goto done;
    }
  }
  if (n >= MAX_SERIES) goto done;
  if (base != SERIES_NONE && m->series[base].details >= SERIES_PER_RULE)
    goto done;
  if (n == m->series_cap) {
    size_t cap = m->series_cap ? m->series_cap * 2 : 64;
    series *grown = realloc(m->series, cap * sizeof *grown);
    if (!grown) goto done;
    m->series = grown;
    m->series_cap = cap;
  }
  m->series[n] = (series){strdup(domain), strdup(rule), h, 0, 0};
  if (!m->series[n].domain || !m->series[n].rule) {
    free(m->series[n].domain);
    free(m->series[n].rule);
    goto done;
  }
  m->series_index[k] = (uint32_t)n + 1;
  if (base != SERIES_NONE) m->series[base].details++;
  idx = (uint32_t)n;
  atomic_store_explicit(&m->nseries, n + 1, memory_order_release);
done:
  pthread_mutex_unlock(&m->series_lock);
  return idx;
}

void metrics_series_candidate(metrics *m, uint32_t id) {
  pthread_mutex_lock(&m->series_lock);
  if (id < atomic_load_explicit(&m->nseries, memory_order_relaxed))
    m->series[id].candidate = 1;
  pthread_mutex_unlock(&m->series_lock);
}

metric_counter *metric_series(metric_slots *s, uint32_t id) {
  if (id >= MAX_SERIES) return NULL;
  _Atomic(metric_counter *) *slot = &s->chunks[id / SERIES_CHUNK];
  metric_counter *chunk = atomic_load_explicit(slot, memory_order_acquire);
  if (!chunk) {
    chunk = calloc(SERIES_CHUNK * S_N, sizeof *chunk);
    if (!chunk) return NULL;
    atomic_store_explicit(slot, chunk, memory_order_release);
  }
  return &chunk[(id % SERIES_CHUNK) * S_N];
}

void metric_slots_dispose(metric_slots *s) {
  for (size_t c = 0; c < MAX_SERIES / SERIES_CHUNK; c++) {
    free(atomic_load(&s->chunks[c]));
    atomic_store(&s->chunks[c], NULL);
  }
}

/* ---- the Prometheus text format ---- */

static uint64_t get(metric_counter *c) {
  return atomic_load_explicit(c, memory_order_relaxed);
}

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

static const char *type_name(metric_kind k) {
  return k == METRIC_COUNTER ? "counter"
         : k == METRIC_GAUGE ? "gauge"
                             : "histogram";
}

/* A histogram's cumulative buckets, sum and count, summed over threads. */
static void render_histogram(FILE *f, const char *name, int id,
                             metric_slots *const *threads, size_t n) {
  uint64_t b[HIST_BUCKETS + 1] = {0}, sum_ns = 0, count = 0;
  for (size_t t = 0; t < n; t++) {
    metric_histogram *h = &threads[t]->h[id];
    for (size_t k = 0; k <= HIST_BUCKETS; k++) b[k] += get(&h->b[k]);
    sum_ns += get(&h->sum_ns);
    count += get(&h->count);
  }
  uint64_t cum = 0;
  for (size_t k = 0; k < HIST_BUCKETS; k++) {
    cum += b[k];
    fprintf(f, "%s_bucket{le=\"%g\"} %llu\n", name,
            (double)hist_bounds[k] / 1e9, (unsigned long long)cum);
  }
  cum += b[HIST_BUCKETS];
  fprintf(f, "%s_bucket{le=\"+Inf\"} %llu\n%s_sum %.9f\n%s_count %llu\n", name,
          (unsigned long long)cum, name, (double)sum_ns / 1e9, name,
          (unsigned long long)count);
}

/* Series s's candidate divergences (a METRIC_SERIES_CAND family), when
   its rule has a candidate or it counted one. Under series_lock. */
static void render_divergences(FILE *f, metrics *m, const metric_def *d,
                               size_t s, const uint64_t *v) {
  static const char *const dirs[] = {"would_deny", "would_allow"};
  if (!m->series[s].candidate && !v[S_CAND_WOULD_DENY] &&
      !v[S_CAND_WOULD_ALLOW])
    return;
  for (int k = 0; k < 2; k++) {
    fprintf(f, "%s{domain=\"", d->name);
    label(f, m->series[s].domain);
    fputs("\",rule=\"", f);
    label(f, m->series[s].rule);
    fprintf(f, "\",direction=\"%s\"} %llu\n", dirs[k],
            (unsigned long long)v[S_CAND_WOULD_DENY + k]);
  }
}

/* The series of a METRIC_SERIES family (a sample per result) or of a
   METRIC_SERIES_NEAR one (a sample per series). */
static void render_series(FILE *f, metrics *m, const metric_def *d,
                          const uint64_t *ser, size_t ns) {
  static const char *const results[] = {"allowed", "denied", "shadow_denied"};
  pthread_mutex_lock(&m->series_lock);
  for (size_t s = 0; ser && s < ns; s++) {
    if (d->scope == METRIC_SERIES_CAND) {
      render_divergences(f, m, d, s, &ser[s * S_N]);
      continue;
    }
    int per_result = d->scope == METRIC_SERIES;
    for (int k = 0; k < (per_result ? 3 : 1); k++) {
      fprintf(f, "%s{domain=\"", d->name);
      label(f, m->series[s].domain);
      fputs("\",rule=\"", f);
      label(f, m->series[s].rule);
      if (per_result)
        fprintf(f, "\",result=\"%s\"} %llu\n", results[k],
                (unsigned long long)ser[s * S_N + k]);
      else
        fprintf(f, "\"} %llu\n",
                (unsigned long long)ser[s * S_N + S_NEAR_LIMIT]);
    }
  }
  pthread_mutex_unlock(&m->series_lock);
}

/* The value of counter or gauge def i: the threads' (summed, or any) or
   the global one. */
static uint64_t value_of(metrics *m, size_t i, metric_slots *const *threads,
                         size_t n) {
  const metric_def *d = &m->defs[i];
  int id = m->id[i];
  if (d->scope == METRIC_GLOBAL) return get(&m->global[id]);
  uint64_t v = 0;
  for (size_t t = 0; t < n; t++) {
    uint64_t x = get(&threads[t]->v[id]);
    v = d->scope == METRIC_THREADS_ANY ? (v || x) : v + x;
  }
  return v;
}

/* The series' counters summed over the threads (calloc'd), or NULL. */
static uint64_t *sum_series(metrics *m, metric_slots *const *threads, size_t n,
                            size_t *ns) {
  *ns = atomic_load_explicit(&m->nseries, memory_order_acquire);
  uint64_t *ser = calloc(*ns ? *ns * S_N : 1, sizeof *ser);
  for (size_t t = 0; ser && t < n; t++)
    for (size_t s = 0; s < *ns; s++) {
      metric_counter *chunk = atomic_load_explicit(
          &threads[t]->chunks[s / SERIES_CHUNK], memory_order_acquire);
      if (!chunk) continue;
      for (int k = 0; k < S_N; k++)
        ser[s * S_N + k] += get(&chunk[(s % SERIES_CHUNK) * S_N + k]);
    }
  return ser;
}

/* The same figures as JSON (metrics_render_json): a histogram as its
   count, sum and cumulative buckets; the series as one object each. */
static void json_histogram(FILE *f, int id, metric_slots *const *threads,
                           size_t n) {
  uint64_t b[HIST_BUCKETS + 1] = {0}, sum_ns = 0, count = 0;
  for (size_t t = 0; t < n; t++) {
    metric_histogram *h = &threads[t]->h[id];
    for (size_t k = 0; k <= HIST_BUCKETS; k++) b[k] += get(&h->b[k]);
    sum_ns += get(&h->sum_ns);
    count += get(&h->count);
  }
  fprintf(f, ",\"count\":%llu,\"sum_ns\":%llu,\"buckets\":[",
          (unsigned long long)count, (unsigned long long)sum_ns);
  uint64_t cum = 0;
  for (size_t k = 0; k <= HIST_BUCKETS; k++) {
    cum += b[k];
    if (k < HIST_BUCKETS)
      fprintf(f, "%s[%lld,%llu]", k ? "," : "", (long long)hist_bounds[k],
              (unsigned long long)cum);
    else
      fprintf(f, ",[null,%llu]", (unsigned long long)cum);
  }
  fputc(']', f);
}

static void json_series(FILE *f, metrics *m, const uint64_t *ser, size_t ns) {
  pthread_mutex_lock(&m->series_lock);
  for (size_t s = 0; ser && s < ns; s++) {
    fputs(s ? ",{\"domain\":" : "{\"domain\":", f);
    json_bytes_file(f, m->series[s].domain);
    fputs(",\"rule\":", f);
    json_bytes_file(f, m->series[s].rule);
    const uint64_t *v = &ser[s * S_N];
    fprintf(f, ",\"allowed\":%llu,\"denied\":%llu,\"shadow_denied\":%llu,"
               "\"near_limit\":%llu",
            (unsigned long long)v[S_ALLOWED], (unsigned long long)v[S_DENIED],
            (unsigned long long)v[S_SHADOW_DENIED],
            (unsigned long long)v[S_NEAR_LIMIT]);
    if (m->series[s].candidate || v[S_CAND_WOULD_DENY] || v[S_CAND_WOULD_ALLOW])
      fprintf(f, ",\"candidate_would_deny\":%llu,\"candidate_would_allow\":%llu",
              (unsigned long long)v[S_CAND_WOULD_DENY],
              (unsigned long long)v[S_CAND_WOULD_ALLOW]);
    fputc('}', f);
  }
  pthread_mutex_unlock(&m->series_lock);
}

/* Both formats from one walk over the registry (json: 0 Prometheus text,
   1 JSON), so /metrics and /v1/stats cannot disagree. */
static char *render(metrics *m, metric_slots *const *threads, size_t n,
                    size_t *len, int json) {
  char *text = NULL;
  size_t tlen = 0;
  FILE *f = open_memstream(&text, &tlen);
  if (!f) return NULL;
  size_t ns;
  uint64_t *ser = sum_series(m, threads, n, &ns);
  const char *family = NULL;
  if (json) fputs("{\"metrics\":[", f);
  int first = 1;
  for (int group = METRIC_GROUP_DECISIONS; group <= METRIC_GROUP_DAEMON;
       group++)
    for (size_t i = 0; i < m->ndefs; i++) {
      const metric_def *d = &m->defs[i];
      if (d->group != group) continue;
      if (json) {
        if (d->scope == METRIC_SERIES_NEAR || d->scope == METRIC_SERIES_CAND)
          continue; /* in "series" */
        fprintf(f, "%s{\"name\":\"%s\",\"kind\":\"%s\"", first ? "" : ",",
                d->name, type_name(d->kind));
        first = 0;
        if (d->labels) {
          fputs(",\"labels\":", f);
          json_bytes_file(f, d->labels);
        }
        if (d->kind == METRIC_HISTOGRAM)
          json_histogram(f, m->id[i], threads, n);
        else if (d->scope == METRIC_SERIES)
          fputs(",\"in\":\"series\"", f);
        else if (d->kind == METRIC_GAUGE)
          fprintf(f, ",\"value\":%lld",
                  (long long)(int64_t)value_of(m, i, threads, n));
        else
          fprintf(f, ",\"value\":%llu",
                  (unsigned long long)value_of(m, i, threads, n));
        fputc('}', f);
        continue;
      }
      if (!family || strcmp(family, d->name))
        fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", d->name, d->help, d->name,
                type_name(d->kind));
      family = d->name;
      if (d->kind == METRIC_HISTOGRAM) {
        render_histogram(f, d->name, m->id[i], threads, n);
      } else if (d->scope == METRIC_SERIES || d->scope == METRIC_SERIES_NEAR ||
                 d->scope == METRIC_SERIES_CAND) {
        render_series(f, m, d, ser, ns);
      } else {
        uint64_t v = value_of(m, i, threads, n);
        fprintf(f, d->labels ? "%s{%s} " : "%s%s ", d->name,
                d->labels ? d->labels : "");
        if (d->kind == METRIC_GAUGE) /* (a gauge may go below 0) */
          fprintf(f, "%lld\n", (long long)(int64_t)v);
        else
          fprintf(f, "%llu\n", (unsigned long long)v);
      }
    }
  if (json) {
    fputs("],\"series\":[", f);
    json_series(f, m, ser, ns);
    fputs("]}\n", f);
  }
  free(ser);
  if (fclose(f) != 0) {
    free(text);
    return NULL;
  }
  *len = tlen;
  return text;
}

char *metrics_render(metrics *m, metric_slots *const *threads, size_t n,
                     size_t *len) {
  return render(m, threads, n, len, 0);
}

char *metrics_render_json(metrics *m, metric_slots *const *threads, size_t n,
                          size_t *len) {
  return render(m, threads, n, len, 1);
}
