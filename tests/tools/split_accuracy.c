/*
 * split_accuracy.c — what splitting a hot limit into sub-counters costs in
 * accuracy (docs/fleet.md, "Hot keys"): the same traces through the engine
 * in memory mode (where sub-counters are keys of their own, as in Redis),
 * for each algorithm, unsplit, split N ways in turn, and split N ways by a
 * client key; printed as key=value lines, one per (algorithm, trace,
 * mode):
 *   allowed       requests let through over the trace
 *   vs_unsplit    allowed / the unsplit limit's allowed, in %
 *   worst_window  the most allowed in any trailing window of the period
 *                 (the limit's L when nothing is over-admitted)
 *
 * Traces (demand twice the limit, evenly spaced, over 10 periods): many
 * clients (1,000, uniform), skewed (one client sends half), one client.
 *
 *   build/tests/tools/split_accuracy [N] [LIMIT]   (defaults 4 and 120)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "rules/config.h"

#define PERIOD_NS (INT64_C(60) * 1000000000)
#define T0 (INT64_C(1767225600) * 1000000000)
#define PERIODS 10

static const char *const algos[] = {"fixed_window",   "sliding_window",
                                    "sliding_log",    "token_bucket",
                                    "leaky_bucket",   "gcra"};
static const char *const traces[] = {"many", "skewed", "one"};
static const char *const modes[] = {"unsplit", "rotate", "by_client"};

/* The engine on the config for (algorithm, mode), or NULL. */
static engine *engine_for(const char *algo, const char *mode, unsigned n,
                          unsigned limit) {
  char yaml[512], split[64] = "";
  if (!strcmp(mode, "rotate"))
    snprintf(split, sizeof split, ", split: {counters: %u, rotate: true}", n);
  else if (!strcmp(mode, "by_client"))
    snprintf(split, sizeof split, ", split: {counters: %u, by: client}", n);
  snprintf(yaml, sizeof yaml,
           "domain: d\n"
           "descriptors:\n"
           "  - key: tier\n"
           "    rate_limit: {policy: \"%s:%u/m\"%s}\n"
           "  - key: client\n"
           "    rate_limit: {unlimited: true}\n",
           algo, limit, split);
  cfg_errors errs = {0};
  sl_config *c = config_load_string(yaml, strlen(yaml), "split.yaml", &errs);
  if (!c) {
    for (size_t i = 0; i < errs.n; i++) fprintf(stderr, "%s\n", errs.msgs[i]);
    cfg_errors_free(&errs);
    return NULL;
  }
  char err[256];
  engine *e = engine_new(NULL, c, err, sizeof err);
  if (!e) fprintf(stderr, "engine_new: %s\n", err);
  return e;
}

/* The client of request i of trace `trace` (xorshift, the same each run). */
static unsigned client_of(const char *trace, uint64_t *rng) {
  *rng ^= *rng << 13, *rng ^= *rng >> 7, *rng ^= *rng << 17;
  if (!strcmp(trace, "one")) return 0;
  if (!strcmp(trace, "skewed") && (*rng >> 40) % 2 == 0) return 0;
  return 1 + (unsigned)((*rng >> 20) % 1000);
}

/* Runs one trace; allowed and the worst trailing window. -1 on error. */
static int run(engine *e, const char *trace, unsigned limit, long *allowed,
               long *worst) {
  engine_thread *t = engine_thread_new(e);
  if (!t) return -1;
  size_t nreq = (size_t)2 * limit * PERIODS;
  int64_t *at = malloc(nreq * sizeof *at);
  if (!at) return -1;
  size_t nat = 0, lo = 0;
  uint64_t rng = 88172645463325252u;
  *allowed = *worst = 0;
  for (size_t i = 0; i < nreq; i++) {
    int64_t now = T0 + (int64_t)i * (PERIOD_NS / (2 * (int64_t)limit));
    char client[16];
    snprintf(client, sizeof client, "c%u", client_of(trace, &rng));
    eng_descriptor d[2];
    memset(d, 0, sizeof d);
    d[0].entries[0] = (cfg_entry){"tier", 4, "gold", 4};
    d[1].entries[0] = (cfg_entry){"client", 6, client, strlen(client)};
    d[0].n = d[1].n = 1;
    d[0].hits = d[1].hits = -1;
    eng_request req = {"d", 1, d, 2, 1};
    eng_query q = {.kind = ENG_QUERY_RULES, .req = &req, .now = now};
    eng_result out;
    engine_thread_quiesce(t);
    if (engine_decide(t, &q, &out, NULL, NULL)) {
      free(at);
      return -1;
    }
    if (!out.allowed) continue;
    (*allowed)++;
    at[nat++] = now;
    while (at[lo] <= now - PERIOD_NS) lo++;
    if ((long)(nat - lo) > *worst) *worst = (long)(nat - lo);
  }
  free(at);
  engine_thread_free(t);
  return 0;
}

int main(int argc, char **argv) {
  unsigned n = argc > 1 ? (unsigned)atoi(argv[1]) : 4;
  unsigned limit = argc > 2 ? (unsigned)atoi(argv[2]) : 120;
  printf("counters=%u limit=%u period=1m periods=%d demand=2x\n", n, limit,
         PERIODS);
  for (size_t a = 0; a < sizeof algos / sizeof algos[0]; a++)
    for (size_t tr = 0; tr < sizeof traces / sizeof traces[0]; tr++) {
      long base = 0;
      for (size_t m = 0; m < sizeof modes / sizeof modes[0]; m++) {
        engine *e = engine_for(algos[a], modes[m], n, limit);
        long allowed, worst;
        if (!e || run(e, traces[tr], limit, &allowed, &worst)) return 1;
        engine_free(e);
        if (m == 0) base = allowed;
        printf("algo=%s trace=%s mode=%s allowed=%ld vs_unsplit=%ld%% "
               "worst_window=%ld\n",
               algos[a], traces[tr], modes[m], allowed,
               base ? 100 * allowed / base : 0, worst);
      }
    }
  return 0;
}
