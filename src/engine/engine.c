/*
 * engine.c — the engine's life: config generations, the limiters of their
 * rules, the worker threads, the backend, the metrics registry.
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
 * Locks, in the order they nest (a thread holding one may take only those
 * after it): reload_lock (reloads, the limiter map; the backends' sync
 * takes it to keep limiters alive: engine_limiters_lock) -> threads_lock
 * (the thread list) -> a backend's own locks -> metrics' series_lock ->
 * adhoc_lock (making an ad-hoc policy) -> the store's shard locks (inside
 * the library). The request path takes none of the first two.
 */
#include "internal.h"

#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../base/clock.h"
#include "../base/strbuf.h"
#include "memory.h"
#include "../limiter.h"

#define STR_(x) #x
#define STR(x) STR_(x)

/* ---- generations ---- */

static void gen_free(gen *g) {
  if (!g) return;
  split_free(g);
  shed_free(g);
  config_free(g->cfg);
  free(g->lims);
  free(g->local);
  free(g->cand);
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
 * The map's limiter for (rule, policy, evict_below), created when new
 * (evict_below is set before any thread sees it, so a rule whose bound
 * changes gets a new limiter), marked used by the gen being built. NULL
 * when out of memory.
 */
sl_limiter *map_limiter(engine *e, const char *rule, const char *canon,
                        const sl_policy *p, uint32_t evict_below) {
  size_t idlen = strlen(rule) + strlen(canon) + 2 + 11;
  char *id = malloc(idlen);
  if (!id) return NULL;
  snprintf(id, idlen, "%s\x1f%s", rule, canon);
  if (evict_below) /* the id of a rule without a bound is as it was */
    snprintf(id + strlen(id), 12, "\x1f%u", evict_below);
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
    sl_limiter_set_evict_below(e->lims[k].lim, evict_below);
    e->nlims++;
  }
  e->lims[k].used = 1;
  return e->lims[k].lim;
}

int engine_fallible(const engine *e) {
  return (e->backend->ops->flags & ENG_BACKEND_FALLIBLE) != 0;
}

int limit_mode(const engine *e, const cfg_limit *l) {
  int m = l && l->on_store_error ? l->on_store_error : e->o.on_store_error;
  return m ? m : CFG_STORE_ERROR_ALLOW;
}

/* on_store_error: local's policy: the same algorithm and period at the
   limit's fraction of the limit (and burst), at least 1. */
sl_policy local_policy(const engine *e, const cfg_limit *l,
                       const sl_policy *p) {
  double fraction = l && l->local_fraction > 0 ? l->local_fraction
                    : e->o.local_fraction > 0  ? e->o.local_fraction
                                               : CFG_LOCAL_FRACTION_DEFAULT;
  sl_policy lp = *p;
  uint32_t lim = (uint32_t)(p->limit * fraction); /* rounded down */
  uint32_t b = (uint32_t)(p->burst * fraction);
  lp.limit = lim < 1 ? 1 : lim;
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
  size_t n = cfg->nlimits ? cfg->nlimits : 1;
  g->lims = calloc(n, sizeof *g->lims);
  g->local = calloc(n, sizeof *g->local);
  g->cand = calloc(n, sizeof *g->cand);
  g->series = calloc(n, sizeof *g->series);
  if (!g->lims || !g->local || !g->cand || !g->series) goto fail;
  for (size_t i = 0; i < e->nlims; i++) e->lims[i].used = 0;
  for (size_t i = 0; i < cfg->nlimits; i++) {
    const cfg_limit *l = cfg->limits[i];
    char dom[256];
    g->series[i] = metrics_series(e->metrics, limit_domain(l, dom, sizeof dom),
                                  l->rule, SERIES_NONE);
    if (l->candidate_str) {
      metrics_series_candidate(e->metrics, g->series[i]);
      if (!(g->cand[i] = map_limiter(e, l->candidate_rule, l->candidate_str,
                                     &l->candidate, 0)))
        goto fail;
    }
    if (l->unlimited || l->blocked) continue;
    if (!(g->lims[i] = map_limiter(e, l->rule, l->policy_str, &l->policy,
                                   l->evict_below)))
      goto fail;
    if (engine_fallible(e) && limit_mode(e, l) == CFG_STORE_ERROR_LOCAL) {
      sl_policy lp = local_policy(e, l, &l->policy);
      char canon[64], rule[1200];
      sl_policy_format(&lp, canon, sizeof canon);
      snprintf(rule, sizeof rule, "%s\x1flocal", l->rule);
      if (!(g->local[i] = map_limiter(e, rule, canon, &lp, l->evict_below)))
        goto fail;
    }
  }
  g->cfg = cfg;
  if (split_build(e, g, cfg)) goto fail;
  if (shed_build(g, cfg, atomic_load(&e->cur))) goto fail;
  g->version = ++e->next_version;
  return g;
fail:
  split_free(g);
  shed_free(g);
  free(g->lims);
  free(g->local);
  free(g->cand);
  free(g->series);
  free(g);
  return NULL;
}

/* Frees the map's limiters that no gen uses any more (after a retire);
   the backend first drops what it keeps of each. */
static void drop_unused_limiters(engine *e) {
  size_t w = 0;
  for (size_t i = 0; i < e->nlims; i++) {
    if (e->lims[i].used) {
      e->lims[w++] = e->lims[i];
    } else {
      if (e->backend->ops->forget)
        e->backend->ops->forget(e->backend, e->lims[i].lim);
      sl_limiter_free(e->lims[i].lim);
      free(e->lims[i].id);
    }
  }
  e->nlims = w;
}

/* ---- the engine ---- */

/* The engine's metrics, in the order they are shown (backend's between
   the decisions and the daemon's own). */
static const metric_def engine_metric_defs[M_COUNT] = {
    [M_BUILD] = {"sluice_build_info", NULL, METRIC_GAUGE, METRIC_GLOBAL,
                 METRIC_GROUP_DECISIONS, "The running version."},
    [M_RULE_DECISIONS] = {"sluice_rule_decisions_total", NULL, METRIC_COUNTER,
                          METRIC_SERIES, METRIC_GROUP_DECISIONS,
                          "Decisions per config rule: allowed, denied, or "
                          "shadow_denied (a shadow-mode rule that would "
                          "have denied)."},
    [M_RULE_CANDIDATE] = {"sluice_rule_candidate_divergences_total", NULL,
                          METRIC_COUNTER, METRIC_SERIES_CAND,
                          METRIC_GROUP_DECISIONS,
                          "Decisions where a rule's candidate policy "
                          "disagreed with the enforced one: would_deny (the "
                          "rule allowed, the candidate would have denied) "
                          "or would_allow (the reverse)."},
    [M_RULE_NEAR_LIMIT] = {"sluice_rule_near_limit_total", NULL, METRIC_COUNTER,
                           METRIC_SERIES_NEAR, METRIC_GROUP_DECISIONS,
                           "Allowed decisions that left less than 20% of "
                           "the rule's quota."},
    [M_CHECK_ALLOWED] = {"sluice_decisions_total",
                         "kind=\"check\",result=\"allowed\"", METRIC_COUNTER,
                         METRIC_THREADS, METRIC_GROUP_DECISIONS,
                         "Decisions by kind (check: config rules; "
                         "throttle: ad-hoc policy)."},
    [M_CHECK_DENIED] = {"sluice_decisions_total",
                        "kind=\"check\",result=\"denied\"", METRIC_COUNTER,
                        METRIC_THREADS, METRIC_GROUP_DECISIONS, NULL},
    [M_ADHOC_ALLOWED] = {"sluice_decisions_total",
                         "kind=\"throttle\",result=\"allowed\"", METRIC_COUNTER,
                         METRIC_THREADS, METRIC_GROUP_DECISIONS, NULL},
    [M_ADHOC_DENIED] = {"sluice_decisions_total",
                        "kind=\"throttle\",result=\"denied\"", METRIC_COUNTER,
                        METRIC_THREADS, METRIC_GROUP_DECISIONS, NULL},
    [M_LATENCY] = {"sluice_decision_duration_seconds", NULL, METRIC_HISTOGRAM,
                   METRIC_THREADS, METRIC_GROUP_DECISIONS,
                   "Time spent deciding (store lookups and algorithms), per "
                   "request."},
    [M_HTTP_REQUESTS] = {"sluice_requests_total", "protocol=\"http\"",
                         METRIC_COUNTER, METRIC_THREADS, METRIC_GROUP_DAEMON,
                         "Requests by protocol."},
    [M_RESP_COMMANDS] = {"sluice_requests_total", "protocol=\"resp\"",
                         METRIC_COUNTER, METRIC_THREADS, METRIC_GROUP_DAEMON,
                         NULL},
    [M_HTTP_ERRORS] = {"sluice_request_errors_total", "protocol=\"http\"",
                       METRIC_COUNTER, METRIC_THREADS, METRIC_GROUP_DAEMON,
                       "Requests answered with an error, by protocol."},
    [M_RESP_ERRORS] = {"sluice_request_errors_total", "protocol=\"resp\"",
                       METRIC_COUNTER, METRIC_THREADS, METRIC_GROUP_DAEMON,
                       NULL},
    [M_CONN_HTTP] = {"sluice_connections", "protocol=\"http\"", METRIC_GAUGE,
                     METRIC_THREADS, METRIC_GROUP_DAEMON,
                     "Open client connections."},
    [M_CONN_RESP] = {"sluice_connections", "protocol=\"resp\"", METRIC_GAUGE,
                     METRIC_THREADS, METRIC_GROUP_DAEMON, NULL},
    [M_REJECTED_HTTP] = {"sluice_connections_rejected_total",
                         "protocol=\"http\"", METRIC_COUNTER, METRIC_THREADS,
                         METRIC_GROUP_DAEMON,
                         "Connections closed at once, by listener, because "
                         "--max-connections or the listener's own budget "
                         "was reached."},
    [M_REJECTED_RESP] = {"sluice_connections_rejected_total",
                         "protocol=\"resp\"", METRIC_COUNTER, METRIC_THREADS,
                         METRIC_GROUP_DAEMON, NULL},
    [M_FD_PAUSES_HTTP] = {"sluice_accept_pauses_total", "protocol=\"http\"",
                          METRIC_COUNTER, METRIC_THREADS, METRIC_GROUP_DAEMON,
                          "Times a listener stopped accepting for a moment "
                          "because the process was out of file descriptors."},
    [M_FD_PAUSES_RESP] = {"sluice_accept_pauses_total", "protocol=\"resp\"",
                          METRIC_COUNTER, METRIC_THREADS, METRIC_GROUP_DAEMON,
                          NULL},
    [M_CONN_GRPC] = {"sluice_connections", "protocol=\"grpc\"", METRIC_GAUGE,
                     METRIC_THREADS, METRIC_GROUP_DAEMON, NULL},
    [M_REJECTED_GRPC] = {"sluice_connections_rejected_total",
                         "protocol=\"grpc\"", METRIC_COUNTER, METRIC_THREADS,
                         METRIC_GROUP_DAEMON, NULL},
    [M_FD_PAUSES_GRPC] = {"sluice_accept_pauses_total", "protocol=\"grpc\"",
                          METRIC_COUNTER, METRIC_THREADS, METRIC_GROUP_DAEMON,
                          NULL},
    [M_GRPC_REQUESTS] = {"sluice_grpc_calls_total", NULL, METRIC_COUNTER,
                         METRIC_THREADS, METRIC_GROUP_DAEMON,
                         "gRPC calls answered (--grpc), every method, "
                         "when the answer's last frame is sent (not a call "
                         "its client reset first)."},
    [M_GRPC_ERRORS] = {"sluice_grpc_errors_total", NULL, METRIC_COUNTER,
                       METRIC_THREADS, METRIC_GROUP_DAEMON,
                       "gRPC calls answered with a status other than OK "
                       "(a malformed or oversized request, an unknown "
                       "method, a failed decision)."},
    [M_GRPC_UNKNOWN_DOMAIN] = {"sluice_grpc_unknown_domain_total", NULL,
                               METRIC_COUNTER, METRIC_THREADS,
                               METRIC_GROUP_DAEMON,
                               "ShouldRateLimit calls for a domain no rule "
                               "names, answered OK as envoyproxy/ratelimit "
                               "answers them."},
    [M_WAITING] = {"sluice_waiting", NULL, METRIC_GAUGE, METRIC_THREADS,
                   METRIC_GROUP_DAEMON,
                   "Answers held now by the wait mode (a leaky_bucket's "
                   "delay served before answering; --max-waiting)."},
    [M_WAITS_SERVED] = {"sluice_waits_total", "result=\"served\"",
                        METRIC_COUNTER, METRIC_THREADS, METRIC_GROUP_DAEMON,
                        "Wait-mode requests: served (held for their delay, "
                        "then answered), full (refused with 503: "
                        "--max-waiting held already)."},
    [M_WAITS_FULL] = {"sluice_waits_total", "result=\"full\"",
                      METRIC_COUNTER, METRIC_THREADS, METRIC_GROUP_DAEMON,
                      NULL},
    [M_STORE_KEYS] = {"sluice_store_keys", NULL, METRIC_GAUGE, METRIC_GLOBAL,
                      METRIC_GROUP_DAEMON, "Keys held by the store."},
    [M_STORE_BYTES] = {"sluice_store_bytes", NULL, METRIC_GAUGE, METRIC_GLOBAL,
                       METRIC_GROUP_DAEMON, "Bytes held by the store."},
    [M_STORE_MAX_BYTES] = {"sluice_store_max_bytes", NULL, METRIC_GAUGE,
                           METRIC_GLOBAL, METRIC_GROUP_DAEMON,
                           "The store's memory cap."},
    [M_STORE_EXPIRED] = {"sluice_store_expirations_total", NULL, METRIC_COUNTER,
                         METRIC_GLOBAL, METRIC_GROUP_DAEMON,
                         "Keys dropped because they were back to fresh."},
    [M_STORE_EVICTED] = {"sluice_store_evictions_total", NULL, METRIC_COUNTER,
                         METRIC_GLOBAL, METRIC_GROUP_DAEMON,
                         "Live keys dropped to stay under the memory cap."},
    [M_STORE_EVICTED_UNITS] = {"sluice_store_evicted_units_total", NULL,
                               METRIC_COUNTER, METRIC_GLOBAL,
                               METRIC_GROUP_DAEMON,
                               "What evictions gave back: the units of cost "
                               "the evicted keys held, the most they could "
                               "be admitted beyond their limits."},
    [M_LIMITERS] = {"sluice_limiters", NULL, METRIC_GAUGE, METRIC_GLOBAL,
                    METRIC_GROUP_DAEMON,
                    "Limiters (rules and ad-hoc policies)."},
    [M_ADHOC_LIVE] = {"sluice_adhoc_policies", NULL, METRIC_GAUGE,
                      METRIC_GLOBAL, METRIC_GROUP_DAEMON,
                      "Ad-hoc policies in use (at most " STR(ENG_MAX_ADHOC)
                      "; those that own no key are freed)."},
    [M_STATE_OK] = {"sluice_state_saves_total", "result=\"success\"",
                    METRIC_COUNTER, METRIC_GLOBAL, METRIC_GROUP_DAEMON,
                    "Saves of --state-file, by result."},
    [M_STATE_FAILED] = {"sluice_state_saves_total", "result=\"failure\"",
                        METRIC_COUNTER, METRIC_GLOBAL, METRIC_GROUP_DAEMON,
                        NULL},
    [M_STATE_KEYS] = {"sluice_state_saved_keys", NULL, METRIC_GAUGE,
                      METRIC_GLOBAL, METRIC_GROUP_DAEMON,
                      "Keys in the last --state-file save."},
    [M_STATE_MS] = {"sluice_state_save_milliseconds", NULL, METRIC_GAUGE,
                    METRIC_GLOBAL, METRIC_GROUP_DAEMON,
                    "How long the last --state-file save took."},
    [M_RELOADS_OK] = {"sluice_config_reloads_total", "result=\"success\"",
                      METRIC_COUNTER, METRIC_GLOBAL, METRIC_GROUP_DAEMON,
                      "Config reloads, by result (a failed one keeps the old "
                      "config)."},
    [M_RELOADS_FAILED] = {"sluice_config_reloads_total", "result=\"failure\"",
                          METRIC_COUNTER, METRIC_GLOBAL, METRIC_GROUP_DAEMON,
                          NULL},
    [M_RELOAD_TIME] = {"sluice_config_last_reload_timestamp_seconds", NULL,
                       METRIC_GAUGE, METRIC_GLOBAL, METRIC_GROUP_DAEMON,
                       "When the running config was loaded (Unix time)."},
};

/* Registers the engine's metrics (their ids in e->mid). */
static int register_metrics(engine *e) {
  snprintf(e->build_labels, sizeof e->build_labels, "version=\"%s\"",
           sl_version_string());
  for (int i = 0; i < M_COUNT; i++) {
    metric_def d = engine_metric_defs[i];
    if (i == M_BUILD) d.labels = e->build_labels;
    if ((e->mid[i] = metrics_add(e->metrics, &d)) < 0) return -1;
  }
  metrics_global_set(e->metrics, e->mid[M_BUILD], 1);
  return 0;
}

engine *engine_new(const engine_opts *opts, sl_config *cfg, char *err,
                   size_t err_len) {
  eng_backend *backend =
      opts && opts->backend ? opts->backend : memory_backend();
  engine *e = calloc(1, sizeof *e);
  if (!e) {
    snprintf(err, err_len, "out of memory");
    config_free(cfg);
    if (backend->ops->free) backend->ops->free(backend);
    return NULL;
  }
  if (opts) e->o = *opts;
  e->backend = backend;
  if (e->o.charging == ENG_CHARGE_ALL && backend != memory_backend()) {
    /* Only the memory backend charges a denied request (memory.c). */
    snprintf(err, err_len, "--charging envoy works in memory mode only, "
                           "not with the %s store", backend->ops->name);
    config_free(cfg);
    backend->ops->free(backend);
    free(e);
    return NULL;
  }
  pthread_mutex_init(&e->reload_lock, NULL);
  pthread_mutex_init(&e->threads_lock, NULL);
  pthread_mutex_init(&e->adhoc_lock, NULL);
  sl_store_options so;
  sl_store_options_init(&so);
  so.max_memory = e->o.max_memory;
  int rc = sl_store_new(&so, &e->store);
  if (rc) {
    snprintf(err, err_len, "store: %s%s", sl_strerror(rc),
             rc == SL_EINVAL ? " (--max-memory too small)" : "");
    goto fail;
  }
  e->metrics = metrics_new();
  if (!e->metrics || register_metrics(e)) {
    snprintf(err, err_len, "out of memory");
    goto fail;
  }
  if (backend->ops->attach && backend->ops->attach(backend, e, err, err_len))
    goto fail;
  pthread_mutex_lock(&e->reload_lock);
  gen *g = gen_build(e, cfg);
  pthread_mutex_unlock(&e->reload_lock);
  if (!g) {
    snprintf(err, err_len, "out of memory building the rules");
    goto fail;
  }
  atomic_store(&e->cur, g);
  metrics_global_set(e->metrics, e->mid[M_RELOAD_TIME], (uint64_t)time(NULL));
  return e;
fail:
  config_free(cfg);
  engine_free(e);
  return NULL;
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
  for (size_t i = 0; i < na; i++) { /* (a FREE slot's are NULL) */
    sl_limiter_free(e->adhoc[i].lim);
    sl_limiter_free(e->adhoc[i].local);
  }
  sl_limiter_free(atomic_load(&e->cell));
  if (e->backend->ops->free) e->backend->ops->free(e->backend);
  metrics_free(e->metrics);
  sl_store_free(e->store);
  pthread_mutex_destroy(&e->reload_lock);
  pthread_mutex_destroy(&e->threads_lock);
  pthread_mutex_destroy(&e->adhoc_lock);
  free(e);
}

/* Whether an online thread may still hold a gen older than version. */
static int threads_behind(engine *e, uint64_t version) {
  int behind = 0;
  pthread_mutex_lock(&e->threads_lock);
  for (unsigned i = 0; i < ENG_MAX_THREADS; i++) {
    engine_thread *t = e->threads[i];
    if (!t) continue;
    uint64_t seen = atomic_load_explicit(&t->seen, memory_order_seq_cst);
    if (seen != OFFLINE && seen < version) behind = 1;
  }
  pthread_mutex_unlock(&e->threads_lock);
  return behind;
}

int threads_past_epoch(engine *e, uint64_t epoch) {
  int past = 1;
  pthread_mutex_lock(&e->threads_lock);
  for (unsigned i = 0; i < ENG_MAX_THREADS; i++) {
    engine_thread *t = e->threads[i];
    if (!t) continue;
    uint64_t seen = atomic_load_explicit(&t->seen, memory_order_seq_cst);
    if (seen == OFFLINE) continue; /* holds nothing until its quiesce */
    if (seen == 0 ||
        atomic_load_explicit(&t->aseen, memory_order_acquire) < epoch)
      past = 0;
  }
  pthread_mutex_unlock(&e->threads_lock);
  return past;
}

void engine_maintain(engine *e) {
  pthread_mutex_lock(&e->reload_lock);
  adhoc_reclaim(e);
  pthread_mutex_unlock(&e->reload_lock);
}

int engine_reload(engine *e, sl_config *cfg) {
  pthread_mutex_lock(&e->reload_lock);
  gen *g = gen_build(e, cfg);
  if (!g) {
    /* Keep the old gen's limiters: mark them all used again. */
    for (size_t i = 0; i < e->nlims; i++) e->lims[i].used = 1;
    pthread_mutex_unlock(&e->reload_lock);
    config_free(cfg); /* ours from the call on, as the header says */
    metrics_global_add(e->metrics, e->mid[M_RELOADS_FAILED], 1);
    return -1;
  }
  /* seq_cst, paired with engine_thread_quiesce: either a thread's "I am
     looking" is seen below, or its load of `cur` sees g. */
  gen *old = atomic_exchange_explicit(&e->cur, g, memory_order_seq_cst);
  /* Wait until no online thread can still hold `old`, and no decision
     waiting for the backend uses its rules (they end within the store's
     timeout). */
  while (threads_behind(e, g->version) || atomic_load(&old->pins) != 0) {
    struct timespec nap = {0, 1000000};
    nanosleep(&nap, NULL);
  }
  gen_free(old);
  drop_unused_limiters(e);
  pthread_mutex_unlock(&e->reload_lock);
  metrics_global_add(e->metrics, e->mid[M_RELOADS_OK], 1);
  metrics_global_set(e->metrics, e->mid[M_RELOAD_TIME], (uint64_t)time(NULL));
  return 0;
}

void engine_note_reload_failure(engine *e) {
  metrics_global_add(e->metrics, e->mid[M_RELOADS_FAILED], 1);
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
  atomic_init(&t->seen, OFFLINE);
  int failed = 0;
  if (e->backend->ops->thread_new)
    t->bt = e->backend->ops->thread_new(e->backend, t, &failed);
  if (failed) {
    free(t);
    return NULL;
  }
  pthread_mutex_lock(&e->threads_lock);
  unsigned i = 0;
  while (i < ENG_MAX_THREADS && e->threads[i]) i++;
  if (i < ENG_MAX_THREADS) {
    t->slot = i;
    e->threads[i] = t;
  }
  pthread_mutex_unlock(&e->threads_lock);
  if (i == ENG_MAX_THREADS) {
    if (e->backend->ops->thread_free)
      e->backend->ops->thread_free(e->backend, t->bt);
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
  if (e->backend->ops->thread_free)
    e->backend->ops->thread_free(e->backend, t->bt);
  metric_slots_dispose(&t->m);
  free(t);
}

void engine_thread_quiesce(engine_thread *t) {
  /* First say "I may be holding anything" (0: every reload waits for us),
     then load: a reload either sees our 0 and waits, or has already
     published what we load. Only then say which version we hold. */
  atomic_store_explicit(&t->seen, 0, memory_order_seq_cst);
  gen *g = atomic_load_explicit(&t->e->cur, memory_order_seq_cst);
  /* The same for the ad-hoc policies (adhoc.c): a new epoch retired some,
     which the caches may hold. */
  uint64_t epoch = atomic_load_explicit(&t->e->adhoc_epoch,
                                        memory_order_seq_cst);
  if (epoch != t->adhoc_epoch) {
    memset(t->adhoc_cache, 0, sizeof t->adhoc_cache);
    memset(t->policy_cache, 0, sizeof t->policy_cache);
    t->adhoc_epoch = epoch;
  }
  atomic_store_explicit(&t->aseen, epoch, memory_order_release);
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

void engine_thread_flush(engine_thread *t) {
  if (t->e->backend->ops->flush)
    t->e->backend->ops->flush(t->e->backend, t->bt);
}

/* ---- what backends use ---- */

metric_slots *engine_thread_metrics(engine_thread *t) { return &t->m; }
metrics *engine_metrics_registry(engine *e) { return e->metrics; }
eng_backend *engine_backend(engine *e) { return e->backend; }
void *engine_thread_backend(engine_thread *t) { return t->bt; }

void engine_limiters_lock(engine *e) { pthread_mutex_lock(&e->reload_lock); }
void engine_limiters_unlock(engine *e) {
  pthread_mutex_unlock(&e->reload_lock);
}

sl_limiter *engine_limiter_named(engine *e, char kind, const char *id,
                                 size_t id_len, char sep) {
  if (kind == 'a') {
    const adhoc_entry *a = adhoc_find(e, id, id_len);
    /* (Under reload_lock: adhoc_reclaim frees none meanwhile.) */
    return a ? a->lim : NULL;
  }
  /* A map id is "RULE\x1fPOLICY": the name matches when RULE, sep and
     POLICY are its bytes. */
  for (size_t i = 0; kind == 'r' && i < e->nlims; i++) {
    const char *m = e->lims[i].id, *x = strchr(m, '\x1f');
    size_t k = x ? (size_t)(x - m) : 0;
    if (x && strlen(m) == id_len && id[k] == sep && !memcmp(m, id, k) &&
        !memcmp(x + 1, id + k + 1, id_len - k - 1))
      return e->lims[i].lim;
  }
  return NULL;
}

/* ---- metrics ---- */

void engine_count(engine_thread *t, eng_counter c, uint64_t n) {
  static const int which[EC_FRONT_COUNT] = {
      [EC_HTTP_REQUESTS] = M_HTTP_REQUESTS,
      [EC_HTTP_ERRORS] = M_HTTP_ERRORS,
      [EC_RESP_COMMANDS] = M_RESP_COMMANDS,
      [EC_RESP_ERRORS] = M_RESP_ERRORS,
      [EC_REJECTED_HTTP] = M_REJECTED_HTTP,
      [EC_REJECTED_RESP] = M_REJECTED_RESP,
      [EC_FD_PAUSES_HTTP] = M_FD_PAUSES_HTTP,
      [EC_FD_PAUSES_RESP] = M_FD_PAUSES_RESP,
      [EC_REJECTED_GRPC] = M_REJECTED_GRPC,
      [EC_FD_PAUSES_GRPC] = M_FD_PAUSES_GRPC,
      [EC_GRPC_REQUESTS] = M_GRPC_REQUESTS,
      [EC_GRPC_ERRORS] = M_GRPC_ERRORS,
      [EC_GRPC_UNKNOWN_DOMAIN] = M_GRPC_UNKNOWN_DOMAIN,
      [EC_WAITS_SERVED] = M_WAITS_SERVED,
      [EC_WAITS_FULL] = M_WAITS_FULL};
  metric_add(&t->m, t->e->mid[which[c]], n);
}

void engine_connections(engine_thread *t, int protocol, int delta) {
  static const int which[] = {M_CONN_HTTP, M_CONN_RESP, M_CONN_GRPC};
  metric_add(&t->m, t->e->mid[which[protocol]], (uint64_t)(int64_t)delta);
}

void engine_waiting(engine_thread *t, int delta) {
  metric_add(&t->m, t->e->mid[M_WAITING], (uint64_t)(int64_t)delta);
}

/* The metrics as text (json 0) or JSON (1), the store's figures fresh. */
static char *render_metrics(engine *e, size_t *len, int json) {
  /* The store's figures, as of this scrape. */
  sl_store_stats st;
  sl_store_stats_get(e->store, &st);
  const struct {
    int m;
    uint64_t v;
  } store[] = {{M_STORE_KEYS, st.keys},
               {M_STORE_BYTES, st.bytes},
               {M_STORE_MAX_BYTES, st.max_memory},
               {M_STORE_EXPIRED, st.expirations},
               {M_STORE_EVICTED, st.evictions},
               {M_STORE_EVICTED_UNITS, st.evicted_units},
               {M_LIMITERS, st.limiters},
               {M_ADHOC_LIVE, atomic_load(&e->adhoc_live)}};
  for (size_t i = 0; i < sizeof store / sizeof store[0]; i++)
    metrics_global_set(e->metrics, e->mid[store[i].m], store[i].v);
  /* The threads' values, summed under the thread list's lock. */
  metric_slots *slots[ENG_MAX_THREADS];
  size_t n = 0;
  pthread_mutex_lock(&e->threads_lock);
  for (unsigned i = 0; i < ENG_MAX_THREADS; i++)
    if (e->threads[i]) slots[n++] = &e->threads[i]->m;
  char *text = json ? metrics_render_json(e->metrics, slots, n, len)
                    : metrics_render(e->metrics, slots, n, len);
  pthread_mutex_unlock(&e->threads_lock);
  if (text && !json) { /* the shedders' families after the others */
    strbuf b = STRBUF_INIT; /* text is malloc'd: the buffer may grow it */
    b.p = text;
    b.len = *len;
    b.cap = *len + 1;
    /* A try: a worker that scrapes while a reload waits for it must not
       wait for the reload (the families are left out of that scrape). */
    if (pthread_mutex_trylock(&e->reload_lock) == 0) {
      shed_render(e, &b, clock_wall_ns());
      pthread_mutex_unlock(&e->reload_lock);
    }
    if (b.oom) {
      strbuf_free(&b);
      return NULL;
    }
    size_t cap;
    *len = b.len;
    text = strbuf_take(&b, &cap);
  }
  return text;
}

char *engine_metrics(engine *e, size_t *len) {
  return render_metrics(e, len, 0);
}

char *engine_metrics_json(engine *e, size_t *len) {
  return render_metrics(e, len, 1);
}
