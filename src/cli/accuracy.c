/*
 * accuracy.c — `sluice accuracy`: how far each algorithm strays from the
 * ideal sliding limit, "at most L in any trailing window W".
 *
 * Synthetic traces, generated from a seed with integer times, go through
 * every algorithm at the same L per W (buckets with burst L), each on its
 * own limiter. Every decision is judged against the ideal window (t - W, t]
 * over the algorithm's *own* allowed history, per key:
 *   false allow  allowed, and the window total with it exceeds L;
 *   false deny   denied, though the window total plus its cost fits in L;
 *   worst_window the largest allowed total any key had in one window.
 * sliding_log is that ideal, so it must score zero and zero: the lab checks
 * itself with it. Judging each algorithm on its own history (not on an
 * ideal limiter's) keeps one early mistake from being counted again and
 * again afterwards.
 */
#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "../sim/lab.h"
#include "sluice.h"
#include "../sim/svg.h"

#define MAX_TRACE_REQUESTS 20000000u

typedef struct trace_req {
  int64_t t;
  uint32_t key;
} trace_req;

typedef struct trace_params {
  uint32_t limit;
  int64_t period_ns;
  uint32_t windows; /* the trace spans windows x period */
  uint32_t keys;    /* many-keys only */
} trace_params;

typedef struct trace {
  trace_req *r;
  size_t n, cap;
  uint32_t nkeys;
  uint64_t rng;
} trace;

/* Appends a request; -1 when the trace would pass the cap. */
static int push(trace *tr, int64_t t, uint32_t key) {
  if (tr->n == tr->cap) {
    if (tr->cap >= MAX_TRACE_REQUESTS) return -1;
    size_t ncap = tr->cap ? tr->cap * 2 : 4096;
    trace_req *n = realloc(tr->r, ncap * sizeof *n);
    if (!n) return -1;
    tr->r = n;
    tr->cap = ncap;
  }
  tr->r[tr->n++] = (trace_req){t, key};
  return 0;
}

/* n requests for `key` at uniform random times in [from, to): given their
   number, the arrival times of a Poisson process are exactly that. */
static int uniform(trace *tr, uint64_t n, int64_t from, int64_t to,
                   uint32_t key) {
  if (to <= from) return 0;
  for (uint64_t i = 0; i < n; i++)
    if (push(tr, from + (int64_t)lab_rand_below(&tr->rng, (uint64_t)(to - from)),
             key))
      return -1;
  return 0;
}

static int gen_poisson(trace *tr, const trace_params *p, uint64_t num,
                       uint64_t den) {
  uint64_t n = (uint64_t)p->limit * p->windows * num / den;
  if (n > MAX_TRACE_REQUESTS) return -1;
  tr->nkeys = 1;
  return uniform(tr, n, 0, p->period_ns * p->windows, 0);
}
static int gen_half(trace *tr, const trace_params *p) {
  return gen_poisson(tr, p, 1, 2);
}
static int gen_one(trace *tr, const trace_params *p) {
  return gen_poisson(tr, p, 1, 1);
}
static int gen_two(trace *tr, const trace_params *p) {
  return gen_poisson(tr, p, 2, 1);
}

/* Bursts at 4x the limit lasting W/10 to W/2, then W/2 to 2W of silence:
   under the limit on average, far over it while on. */
static int gen_onoff(trace *tr, const trace_params *p) {
  const int64_t W = p->period_ns, end = W * p->windows;
  tr->nkeys = 1;
  for (int64_t t = 0; t < end;) {
    int64_t on = W / 10 + (int64_t)lab_rand_below(&tr->rng, (uint64_t)(W * 4 / 10) + 1);
    int64_t stop = t + on < end ? t + on : end;
    uint64_t n = (uint64_t)((__extension__(unsigned __int128)4 * p->limit *
                             (uint64_t)(stop - t)) / (uint64_t)W);
    if (uniform(tr, n, t, stop, 0)) return -1;
    t = stop + W / 2 + (int64_t)lab_rand_below(&tr->rng, (uint64_t)(W * 3 / 2) + 1);
  }
  return 0;
}

/* The limit's worth in the last 1% of a window, and again in the first 1%
   of the next, at every other boundary: the fixed window's worst case. */
static int gen_boundary(trace *tr, const trace_params *p) {
  const int64_t W = p->period_ns, end = W * p->windows, e = W / 100 ? W / 100 : 1;
  tr->nkeys = 1;
  for (int64_t k = 1; k * W < end; k += 2) {
    if (uniform(tr, p->limit, k * W - e, k * W, 0) ||
        uniform(tr, p->limit, k * W, k * W + e < end ? k * W + e : end, 0))
      return -1;
  }
  return 0;
}

/* Many sources with Zipf popularity (source k has weight 1/k): in total
   keys/1000 times the limit, so the few heaviest sources run far over it
   while the long tail stays well under, as real traffic does. */
static int gen_many(trace *tr, const trace_params *p) {
  const uint32_t K = p->keys;
  const int64_t end = p->period_ns * p->windows;
  uint64_t n = (uint64_t)p->limit * p->windows * K / 1000;
  if (n > MAX_TRACE_REQUESTS) return -1;
  uint64_t *cum = malloc((size_t)K * sizeof *cum);
  if (!cum) return -1;
  uint64_t total = 0;
  for (uint32_t k = 0; k < K; k++) {
    total += (UINT64_C(1) << 40) / (k + 1);
    cum[k] = total;
  }
  tr->nkeys = K;
  for (uint64_t i = 0; i < n; i++) {
    uint64_t u = lab_rand_below(&tr->rng, total);
    uint32_t lo = 0, hi = K - 1; /* first k with cum[k] > u */
    while (lo < hi) {
      uint32_t mid = lo + (hi - lo) / 2;
      if (cum[mid] > u)
        hi = mid;
      else
        lo = mid + 1;
    }
    if (push(tr, (int64_t)lab_rand_below(&tr->rng, (uint64_t)end), lo)) {
      free(cum);
      return -1;
    }
  }
  free(cum);
  return 0;
}

static const struct {
  const char *name;
  const char *what;
  int (*gen)(trace *, const trace_params *);
} traces[] = {
    {"poisson-0.5x", "Poisson arrivals at half the limit", gen_half},
    {"poisson-1x", "Poisson arrivals at the limit", gen_one},
    {"poisson-2x", "Poisson arrivals at twice the limit", gen_two},
    {"on-off", "bursts at 4x the limit for W/10..W/2, then W/2..2W idle",
     gen_onoff},
    {"boundary", "L requests just before every other window boundary, L just "
                 "after", gen_boundary},
    {"many-keys", "sources with Zipf popularity, keys/1000 x L per W in all, "
                  "judged per key", gen_many},
};
#define NTRACES (sizeof traces / sizeof traces[0])

static int req_cmp(const void *a, const void *b) {
  const trace_req *x = a, *y = b;
  if (x->t != y->t) return x->t < y->t ? -1 : 1;
  return (x->key > y->key) - (x->key < y->key);
}

/* "src" + decimal, or "client" for single-key traces; returns the length. */
static size_t key_name(const trace *tr, uint32_t key, char *buf) {
  if (tr->nkeys == 1) {
    memcpy(buf, "client", 7);
    return 6;
  }
  memcpy(buf, "src", 3);
  size_t n = 3 + fmt_u64(buf + 3, key);
  buf[n] = '\0';
  return n;
}

typedef struct result {
  uint64_t requests, false_allow, false_deny;
  int64_t worst, plot_worst;
} result;

/*
 * Runs one trace through one algorithm and judges every decision; fills
 * lane `lane` of chart (when set) with key 0's window total and the wrong
 * decisions. Returns 0, or an SL_E* code.
 */
static int judge(const trace *tr, const sl_policy *pol, result *res,
                 svg_chart *chart, size_t lane) {
  memset(res, 0, sizeof *res);
  sl_store_options so;
  sl_store_options_init(&so);
  /* Room for every key: an eviction would forget a key's history and make
     the algorithm look more lenient than it is. */
  so.max_memory = (size_t)2 << 30;
  so.expected_keys = tr->nkeys;
  sl_store *store = NULL;
  sl_limiter *lim = NULL;
  lab_window win;
  int rc = sl_store_new(&so, &store);
  if (!rc) rc = sl_limiter_new(store, pol, &lim);
  if (!rc && lab_window_init(&win, pol->period_ns, tr->nkeys)) rc = SL_ENOMEM;
  if (rc) {
    sl_limiter_free(lim);
    sl_store_free(store);
    return rc;
  }
  const int64_t L = pol->limit;
  size_t next_bin = 0;
  char key[32];
  for (size_t i = 0; i < tr->n && !rc; i++) {
    const trace_req *q = &tr->r[i];
    /* Key 0's window total at the end of every bin passed: within a bin
       (W / 880 or less) it only grows, as entries stay for all of W, so the
       bin's end shows its peak. */
    if (chart)
      for (; next_bin < chart->nbins &&
             svg_bin_start(chart, next_bin + 1) - 1 < q->t;
           next_bin++) {
        int64_t at = svg_bin_start(chart, next_bin + 1) - 1;
        svg_level(chart, lane, at, lab_window_sum(&win, 0, at));
      }
    size_t klen = key_name(tr, q->key, key);
    sl_decision d;
    if ((rc = sl_limiter_take(lim, key, klen, 1, q->t, &d))) break;
    int64_t sum = lab_window_sum(&win, q->key, q->t);
    res->requests++;
    if (d.allowed) {
      if (sum + 1 > L) {
        res->false_allow++;
        if (chart) svg_count(chart, lane, q->t, 0, 1);
      }
      if (lab_window_add(&win, q->key, q->t, 1)) rc = SL_ENOMEM;
      if (q->key == 0 && sum + 1 > res->plot_worst) res->plot_worst = sum + 1;
    } else if (sum + 1 <= L) {
      res->false_deny++;
      if (chart) svg_count(chart, lane, q->t, 2, 1);
    }
  }
  if (chart)
    for (; next_bin < chart->nbins; next_bin++) {
      int64_t at = svg_bin_start(chart, next_bin + 1) - 1;
      svg_level(chart, lane, at, lab_window_sum(&win, 0, at));
    }
  res->worst = win.worst;
  sl_store_stats st;
  sl_store_stats_get(store, &st);
  if (!rc && st.evictions) rc = SL_ENOMEM; /* the judgement would be wrong */
  lab_window_free(&win);
  sl_limiter_free(lim);
  sl_store_free(store);
  return rc;
}

/* 100 * n / d with three decimals, rounded half up, as text. */
static char *pct(uint64_t n, uint64_t d, char *buf, size_t len) {
  uint64_t milli = d ? (uint64_t)(((__extension__(unsigned __int128)n) * 100000 + d / 2) / d) : 0;
  snprintf(buf, len, "%llu.%03llu", (unsigned long long)(milli / 1000),
           (unsigned long long)(milli % 1000));
  return buf;
}

static void accuracy_usage(FILE *f) {
  fprintf(f,
          "usage: sluice accuracy [--seed S] [--trace NAME[,NAME...]] "
          "[--svg DIR] [OPTIONS]\n"
          "\n"
          "Replays synthetic traces through every algorithm at the same limit\n"
          "L per W (buckets with burst L) and judges each decision against\n"
          "the ideal \"at most L in any trailing window W\", on the\n"
          "algorithm's own allowed history, per key: a false allow is an\n"
          "allowed request that takes the window (t-W, t] over L; a false\n"
          "deny is a denied request that would have fitted. Prints, per trace\n"
          "and algorithm:\n"
          "  accuracy trace=NAME algo=ALGO requests=N false_allow_pct=X "
          "false_deny_pct=Y worst_window=K limit=L\n"
          "then the same as a Markdown table. Deterministic for a seed.\n"
          "\n"
          "options:\n"
          "  -s, --seed S        seed of the traces (default 1)\n"
          "  -t, --trace LIST    traces to run, comma-separated (default all;\n"
          "                      see --list-traces)\n"
          "  -o, --svg DIR       write one chart per trace, DIR/accuracy-NAME.svg\n"
          "  -L, --limit L       the limit (default 100)\n"
          "  -p, --period P      the window, as in policies: [N]ms|s|m|h|d\n"
          "                      (default m)\n"
          "  -w, --windows N     trace length in windows (default 60)\n"
          "  -k, --keys N        sources in many-keys (default 100000)\n"
          "  -l, --list-traces   list the traces\n"
          "  -h, --help          this help\n"
          "\n"
          "Exit status: 0; 1 on an error while running; 2 on bad options.\n");
}

/* The command line, read; the policies and traces it picks. */
typedef struct acc_args {
  int64_t seed, limit, windows, keys;
  const char *period, *svg_dir;
  sl_policy pols[SL_RATE_ALGO_COUNT];
  int selected[NTRACES];
} acc_args;

/* Every algorithm's policy at the same limit (buckets: burst L); the period
   is checked by the policy parser. 0, or 2 after a message. */
static int make_policies(acc_args *a) {
  for (int al = 0; al < SL_RATE_ALGO_COUNT; al++) {
    char spec[128], err[256];
    const char *name = sl_algo_name((sl_algo)al);
    int window = al == SL_FIXED_WINDOW || al == SL_SLIDING_LOG ||
                 al == SL_SLIDING_WINDOW;
    snprintf(spec, sizeof spec, window ? "%s:%lld/%s" : "%s:%lld/%s:burst=%lld",
             name, (long long)a->limit, a->period, (long long)a->limit);
    if (sl_policy_parse(spec, &a->pols[al], err, sizeof err)) {
      fprintf(stderr, "sluice accuracy: --period '%s': %s\n", a->period, err);
      return 2;
    }
  }
  return 0;
}

/* Marks the traces of the comma-separated list `only` (NULL: all). 0, or
   the exit status after a message. */
static int select_traces(acc_args *a, const char *only) {
  if (!only) {
    for (size_t i = 0; i < NTRACES; i++) a->selected[i] = 1;
    return 0;
  }
  char *list = strdup(only), *save = NULL;
  if (!list) return 1;
  for (char *t = strtok_r(list, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
    size_t i = 0;
    while (i < NTRACES && strcmp(traces[i].name, t)) i++;
    if (i == NTRACES) {
      fprintf(stderr, "sluice accuracy: no trace '%s' (try --list-traces)\n",
              t);
      free(list);
      return 2;
    }
    a->selected[i] = 1;
  }
  free(list);
  return 0;
}

/* Reads the options into *a. -1 to go on, else the exit status (after
   --help or --list-traces, or a message). */
static int parse_args(int argc, char **argv, acc_args *a) {
  static const struct option opts[] = {
      {"seed", required_argument, NULL, 's'},
      {"trace", required_argument, NULL, 't'},
      {"svg", required_argument, NULL, 'o'},
      {"limit", required_argument, NULL, 'L'},
      {"period", required_argument, NULL, 'p'},
      {"windows", required_argument, NULL, 'w'},
      {"keys", required_argument, NULL, 'k'},
      {"list-traces", no_argument, NULL, 'l'},
      {"help", no_argument, NULL, 'h'},
      {NULL, 0, NULL, 0}};
  *a = (acc_args){.seed = 1, .limit = 100, .windows = 60, .keys = 100000,
                  .period = "m"};
  const char *only = NULL;
  int c;
  optind = 1;
  while ((c = getopt_long(argc, argv, "s:t:o:L:p:w:k:lh", opts, NULL)) != -1) {
    const char *what = NULL;
    switch (c) {
    case 's':
      if (parse_int(optarg, 0, INT64_MAX, 0, &a->seed)) what = "--seed";
      break;
    case 't': only = optarg; break;
    case 'o': a->svg_dir = optarg; break;
    case 'L':
      if (parse_int(optarg, 1, 1000000, 0, &a->limit)) what = "--limit";
      break;
    case 'p': a->period = optarg; break;
    case 'w':
      if (parse_int(optarg, 1, 100000, 0, &a->windows)) what = "--windows";
      break;
    case 'k':
      if (parse_int(optarg, 1, 10000000, 0, &a->keys)) what = "--keys";
      break;
    case 'l':
      for (size_t i = 0; i < NTRACES; i++)
        printf("%-14s %s\n", traces[i].name, traces[i].what);
      return 0;
    case 'h': accuracy_usage(stdout); return 0;
    default: accuracy_usage(stderr); return 2;
    }
    if (what) {
      fprintf(stderr, "sluice accuracy: %s '%s' is out of range (see "
                      "--help)\n", what, optarg);
      return 2;
    }
  }
  if (optind < argc) {
    fprintf(stderr, "sluice accuracy: unexpected argument '%s'\n",
            argv[optind]);
    return 2;
  }
  int status = make_policies(a);
  if (!status) status = select_traces(a, only);
  return status ? status : -1;
}

/*
 * Writes trace i's chart (filled by judge) to DIR/accuracy-NAME.svg, with
 * its captions and one scale for every lane: top, the most any algorithm
 * let through, or the limit. 0, or 1 after a message.
 */
static int write_chart(const acc_args *a, size_t i, const trace *tr,
                       const result *row, svg_chart *chart, int64_t top) {
  char per[40], path[4096], x[32], y[32];
  snprintf(chart->title, sizeof chart->title, "sluice accuracy: %s",
           traces[i].name);
  snprintf(chart->subtitle, sizeof chart->subtitle,
           "%s; %lld per %s, %zu requests, seed %lld.\n"
           "Line: what each algorithm allowed %s in the trailing window "
           "(t-%s, t]; above the limit, it let too much through.",
           traces[i].what, (long long)a->limit,
           lab_fmt_short(a->pols[0].period_ns, per, sizeof per), tr->n,
           (long long)a->seed,
           tr->nkeys > 1 ? "the busiest source (src0)" : "the client", per);
  snprintf(chart->level_legend, sizeof chart->level_legend,
           "allowed in the trailing window");
  chart->kinds[0] = (svg_kind){"false allow", "#d62728", 0};
  chart->kinds[2] = (svg_kind){"false deny (below the line)", "#7b3fb5", 1};
  /* One scale for all lanes, so they compare at a glance. */
  top += top / 10;
  for (int al = 0; al < SL_RATE_ALGO_COUNT; al++) {
    svg_lane *l = &chart->lanes[al];
    const result *res = &row[al];
    snprintf(l->title, sizeof l->title, "%s", sl_algo_name((sl_algo)al));
    snprintf(l->note, sizeof l->note,
             "false allows %s%%, false denies %s%%, worst window %lld",
             pct(res->false_allow, res->requests, x, sizeof x),
             pct(res->false_deny, res->requests, y, sizeof y),
             (long long)res->worst);
    l->level_name = NULL; /* the legend names the line */
    l->level_max = top;
    l->ref = a->limit;
    snprintf(l->ref_name, sizeof l->ref_name, "limit %lld",
             (long long)a->limit);
    if (al == SL_FIXED_WINDOW || al == SL_SLIDING_WINDOW)
      l->boundary_ns = a->pols[0].period_ns;
  }
  snprintf(path, sizeof path, "%s/accuracy-%s.svg", a->svg_dir,
           traces[i].name);
  FILE *f = fopen(path, "w");
  if (!f || svg_chart_write(chart, f) || fclose(f)) {
    fprintf(stderr, "sluice accuracy: %s: %s\n", path, strerror(errno));
    return 1;
  }
  return 0;
}

/*
 * Generates trace i, judges every algorithm on it into row[] (printing one
 * "accuracy ..." line each) and, with --svg, draws it. 0, or the exit
 * status after a message.
 */
static int run_trace(const acc_args *a, size_t i, result *row) {
  const trace_params tp = {(uint32_t)a->limit, a->pols[0].period_ns,
                           (uint32_t)a->windows, (uint32_t)a->keys};
  /* Each trace its own stream, so a trace is the same alone or in the full
     run. */
  trace tr = {0};
  uint64_t s = (uint64_t)a->seed ^ (UINT64_C(0x9e3779b97f4a7c15) * (i + 1));
  tr.rng = lab_rand(&s);
  if (traces[i].gen(&tr, &tp)) {
    fprintf(stderr, "sluice accuracy: trace %s would hold more than %u "
                    "requests (or memory ran out): lower --windows, "
                    "--limit or --keys\n", traces[i].name,
            MAX_TRACE_REQUESTS);
    free(tr.r);
    return 2;
  }
  qsort(tr.r, tr.n, sizeof *tr.r, req_cmp);
  svg_chart chart, *ch = NULL;
  if (a->svg_dir) {
    if (svg_chart_init(&chart, SL_RATE_ALGO_COUNT, 0, tp.period_ns * tp.windows)) {
      fprintf(stderr, "sluice accuracy: out of memory\n");
      free(tr.r);
      return 1;
    }
    ch = &chart;
  }
  int64_t top = a->limit;
  int rc = 0;
  char x[32], y[32];
  for (int al = 0; al < SL_RATE_ALGO_COUNT && !rc; al++) {
    result *res = &row[al];
    int e = judge(&tr, &a->pols[al], res, ch, (size_t)al);
    if (e) {
      fprintf(stderr, "sluice accuracy: trace %s, %s: %s\n", traces[i].name,
              sl_algo_name((sl_algo)al), sl_strerror(e));
      rc = 1;
      break;
    }
    if (res->plot_worst > top) top = res->plot_worst;
    printf("accuracy trace=%s algo=%s requests=%llu false_allow_pct=%s "
           "false_deny_pct=%s worst_window=%lld limit=%lld\n",
           traces[i].name, sl_algo_name((sl_algo)al),
           (unsigned long long)res->requests,
           pct(res->false_allow, res->requests, x, sizeof x),
           pct(res->false_deny, res->requests, y, sizeof y),
           (long long)res->worst, (long long)a->limit);
  }
  if (ch && !rc) rc = write_chart(a, i, &tr, row, ch, top);
  if (ch) svg_chart_free(&chart);
  free(tr.r);
  return rc;
}

/* The results again, as a Markdown table. */
static void print_table(const acc_args *a,
                        result table[NTRACES][SL_RATE_ALGO_COUNT]) {
  char x[32], y[32];
  printf("\n| trace | algorithm | requests | false allow %% | false deny %% "
         "| worst window | limit |\n"
         "|---|---|---:|---:|---:|---:|---:|\n");
  for (size_t i = 0; i < NTRACES; i++) {
    if (!a->selected[i]) continue;
    for (int al = 0; al < SL_RATE_ALGO_COUNT; al++) {
      const result *res = &table[i][al];
      printf("| %s | %s | %llu | %s | %s | %lld | %lld |\n", traces[i].name,
             sl_algo_name((sl_algo)al), (unsigned long long)res->requests,
             pct(res->false_allow, res->requests, x, sizeof x),
             pct(res->false_deny, res->requests, y, sizeof y),
             (long long)res->worst, (long long)a->limit);
    }
  }
}

int cmd_accuracy(int argc, char **argv) {
  acc_args a;
  int status = parse_args(argc, argv, &a);
  if (status >= 0) return status;
  if (a.svg_dir && mkdir(a.svg_dir, 0777) && errno != EEXIST) {
    fprintf(stderr, "sluice accuracy: %s: %s\n", a.svg_dir, strerror(errno));
    return 1;
  }
  result table[NTRACES][SL_RATE_ALGO_COUNT];
  for (size_t i = 0; i < NTRACES; i++)
    if (a.selected[i] && (status = run_trace(&a, i, table[i])) != 0)
      return status;
  print_table(&a, table);
  return fflush(stdout) ? 1 : 0;
}
