/*
 * bench.c — `sluice bench`: decisions per second and bytes per key of the
 * real path (sl_limiter_take on a shared store), plus the "floor" anchor.
 * Under a concurrency policy (-p concurrency:N) a decision is an acquire
 * and the release of its lease.
 *
 * Keys are "user:N", N uniform random in [0, keys), written into a small
 * per-thread buffer for each decision, as a server finds a key in the
 * request it just read (in cache). Every key is decided once before timing,
 * so the table holds all of them, as in a steady state. Each thread draws
 * from its own slice of the keys (distinct keys; shards are still shared)
 * with its own PRNG and reads the wall clock once per 64 decisions, as an
 * event loop would once per iteration.
 *
 * The floor is the least any keyed limiter can do per decision: the same
 * key formatting and the same SipHash, then a read-modify-write of one
 * cache line at a collision-free index, no locks. `--keys 1` measures one
 * hot key shared by every thread and reports whether any update was lost.
 */
#include <getopt.h>
#include <pthread.h>
#include <sodium.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../base/clock.h"
#include "cli.h"
#include "sluice.h"

#define CLOCK_EVERY 64

static void bench_usage(FILE *f) {
  fprintf(f,
          "usage: sluice bench [OPTIONS]\n"
          "\n"
          "Measures the decision path and prints one line per configuration:\n"
          "  algo=A keys=N threads=T decisions_per_s=D ns_per_decision=X "
          "bytes_per_key=B\n"
          "Keys are user:N, uniform random; each thread uses its own slice\n"
          "of them. All keys are decided once before timing.\n"
          "\n"
          "options:\n"
          "  -a, --algo LIST     algorithms, comma-separated, 'all' (default)\n"
          "                      or 'floor' (hash + one cache line, no locks:\n"
          "                      the anchor)\n"
          "  -k, --keys N        distinct keys (default 1000000); 1 = one hot\n"
          "                      key shared by all threads, which also reports\n"
          "                      lost_updates\n"
          "  -t, --threads LIST  thread counts, comma-separated (default 1)\n"
          "  -s, --seconds S     timed seconds per configuration (default 2)\n"
          "  -b, --batch N       decide N requests per sl_limiter_take_batch\n"
          "                      call instead of one per sl_limiter_take\n"
          "  -r, --repeat N      run each configuration N times and print the\n"
          "                      best (for noisy machines; default 1)\n"
          "  -S, --shed          check a load shedder (sl_shedder_take, both\n"
          "                      signals live, never shedding) before each\n"
          "                      decision, as the daemon does\n"
          "  -p, --policy SPEC   use this policy (its algorithm) instead of\n"
          "                      ALGO:1000/h, which keeps every key live\n"
          "  -h, --help          this help\n");
}

typedef struct bench_cfg {
  const char *algo; /* a policy algorithm name, or "floor" */
  const char *policy;
  int64_t keys;
  int threads;
  int seconds;
  int batch;
  int repeat;
  int shed; /* a load shedder's check before each decision (issue 16) */
} bench_cfg;

typedef struct keyset {
  int64_t n;
} keyset;

/* Writes "user:N" into buf (>= 32 bytes) and returns its length. */
static size_t format_key(char *buf, int64_t n) {
  memcpy(buf, "user:", 5);
  return 5 + fmt_i64(buf + 5, n);
}

typedef struct worker {
  pthread_t tid;
  const bench_cfg *cfg;
  const keyset *ks;
  sl_limiter *lim;
  sl_shedder *shed;     /* --shed: checked (and charged) first */
  uint8_t *floor_table; /* 64 bytes per key, for the floor */
  const uint8_t *hkey;
  int index;
  int64_t fixed_now; /* 0: read the wall clock */
  atomic_int *stop;
  uint64_t decisions, allowed;
  int errors;
} worker;

/* The monotonic clock in seconds, for rates. */
static double mono_s(void) { return (double)clock_mono_ns() / 1e9; }

static uint64_t splitmix64(uint64_t *x) {
  uint64_t z = (*x += UINT64_C(0x9e3779b97f4a7c15));
  z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
  z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
  return z ^ (z >> 31);
}

/* A key index of this worker's slice, uniform. */
static int64_t pick(worker *w, uint64_t *rng) {
  int64_t n = w->ks->n, t = w->cfg->threads;
  if (n == 1) return 0;
  int64_t slice = n / t;
  uint64_t r = (uint64_t)(((unsigned __int128)splitmix64(rng) * (uint64_t)slice) >> 64);
  return (int64_t)r * t + w->index;
}

static void *run_floor(void *arg) {
  worker *w = arg;
  uint64_t rng = (uint64_t)w->index * 7919 + 1, n = 0;
  while (!atomic_load_explicit(w->stop, memory_order_relaxed)) {
    for (int i = 0; i < 1024; i++) {
      int64_t k = pick(w, &rng);
      char key[32];
      size_t len = format_key(key, k);
      uint64_t h;
      crypto_shorthash((unsigned char *)&h, (const unsigned char *)key, len,
                       w->hkey);
      uint64_t *line = (uint64_t *)(w->floor_table + (size_t)k * 64);
      line[0] += h | 1; /* read-modify-write the key's line */
      line[1] += 1;
    }
    n += 1024;
  }
  w->decisions = w->allowed = n;
  return NULL;
}

static void *run_limiter(void *arg) {
  worker *w = arg;
  uint64_t rng = (uint64_t)w->index * 7919 + 1, n = 0, ok = 0;
  int batch = w->cfg->batch;
  sl_request reqs[256];
  sl_decision out[256];
  int errs[256];
  char keys[256][32];
  while (!atomic_load_explicit(w->stop, memory_order_relaxed)) {
    for (int i = 0; i < 1024; i += CLOCK_EVERY) {
      int64_t now = w->fixed_now ? w->fixed_now : clock_wall_ns();
      if (batch > 1) {
        for (int j = 0; j < CLOCK_EVERY; j += batch) {
          for (int b = 0; b < batch; b++) {
            reqs[b].key = keys[b];
            reqs[b].key_len = format_key(keys[b], pick(w, &rng));
            reqs[b].cost = 1;
          }
          w->errors += sl_limiter_take_batch(w->lim, reqs, (size_t)batch, now,
                                             out, errs);
          for (int b = 0; b < batch; b++)
            if (!errs[b]) ok += (uint64_t)out[b].allowed;
        }
      } else {
        for (int j = 0; j < CLOCK_EVERY; j++) {
          size_t len = format_key(keys[0], pick(w, &rng));
          sl_decision d;
          if (w->shed) { /* the daemon's order: the shedder, then the rule */
            sl_shed_decision sd;
            sl_shedder_take(w->shed, 2, 1, now, &sd);
            if (sd.shed) continue;
          }
          if (sl_limiter_take(w->lim, keys[0], len, 1, now, &d))
            w->errors++;
          else
            ok += (uint64_t)d.allowed;
          /* A concurrency policy: the decision is an acquire and its
             release, the pair a request in flight costs. */
          if (d.lease &&
              sl_release(w->lim, keys[0], len, d.lease, now, NULL) != 1)
            w->errors++;
        }
      }
    }
    n += 1024;
  }
  w->decisions = n;
  w->allowed = ok;
  return NULL;
}


/*
 * Runs one configuration and writes its line to out; *rate gets its
 * decisions per second. 0, or 1 on any error.
 */
static int bench_one(const bench_cfg *cfg, const keyset *ks, FILE *out,
                     double *rate) {
  int is_floor = strcmp(cfg->algo, "floor") == 0;
  sl_store *store = NULL;
  sl_limiter *lim = NULL;
  uint8_t *table = NULL;
  uint8_t hkey[crypto_shorthash_KEYBYTES];
  randombytes_buf(hkey, sizeof hkey);
  int64_t keys_live = ks->n, now = 0;
  char spec[128];
  if (cfg->policy)
    snprintf(spec, sizeof spec, "%s", cfg->policy);
  else if (ks->n == 1) /* a hot key: a limit it never reaches */
    snprintf(spec, sizeof spec, "%s:1000000000/s", cfg->algo);
  else
    snprintf(spec, sizeof spec, "%s:1000/h", cfg->algo);

  if (is_floor) {
    table = calloc((size_t)ks->n, 64);
    if (!table) return 1;
  } else {
    sl_policy pol;
    char err[256];
    if (sl_policy_parse(spec, &pol, err, sizeof err)) {
      fprintf(stderr, "sluice bench: policy %s: %s\n", spec, err);
      return 1;
    }
    sl_store_options so;
    sl_store_options_init(&so);
    so.max_memory = (size_t)ks->n * 512 + ((size_t)64 << 20);
    int rc = sl_store_new(&so, &store);
    if (!rc) rc = sl_limiter_new(store, &pol, &lim);
    if (rc) {
      fprintf(stderr, "sluice bench: %s\n", sl_strerror(rc));
      sl_store_free(store);
      return 1;
    }
    /* Every key once, untimed: the table holds them all from the start. */
    now = clock_wall_ns();
    for (int64_t k = 0; k < ks->n; k++) {
      sl_decision d;
      char key[32];
      size_t len = format_key(key, k);
      if (sl_limiter_take(lim, key, len, 1, now, &d)) {
        fprintf(stderr, "sluice bench: warm-up failed at key %lld\n",
                (long long)k);
        sl_limiter_free(lim);
        sl_store_free(store);
        return 1;
      }
    }
  }

  /* --shed: both signals live, neither ever sheds (a capacity no run
     reaches, a fresh report of 10%), so every decision pays the check. */
  sl_shedder *shed = NULL;
  if (cfg->shed) {
    sl_shed_opts so = {3, {SL_SHED_NEVER, 900, 600}, UINT64_C(1) << 50,
                       1000000000, 0, SL_SHED_MAX};
    if (sl_shedder_new(&so, &shed, NULL, 0) ||
        sl_shedder_report(shed, "bench", 5, 100, INT64_C(3600) * 1000000000,
                          clock_wall_ns())) {
      sl_shedder_free(shed);
      sl_limiter_free(lim);
      sl_store_free(store);
      free(table);
      return 1;
    }
  }
  atomic_int stop;
  atomic_init(&stop, 0);
  worker *ws = calloc((size_t)cfg->threads, sizeof *ws);
  if (!ws) {
    sl_shedder_free(shed);
    free(table);
    sl_limiter_free(lim);
    sl_store_free(store);
    return 1;
  }
  double t0 = mono_s();
  for (int i = 0; i < cfg->threads; i++) {
    /* A hot key is decided at one instant: no refill, so its remaining
       must account for every single decision. */
    ws[i] = (worker){.cfg = cfg, .ks = ks, .lim = lim, .shed = shed,
                     .floor_table = table,
                     .hkey = hkey, .index = i, .stop = &stop,
                     .fixed_now = ks->n == 1 ? now : 0};
    pthread_create(&ws[i].tid, NULL, is_floor ? run_floor : run_limiter,
                   &ws[i]);
  }
  struct timespec nap = {cfg->seconds, 0};
  nanosleep(&nap, NULL);
  atomic_store(&stop, 1);
  uint64_t total = 0, allowed = 0;
  int errors = 0;
  for (int i = 0; i < cfg->threads; i++) {
    pthread_join(ws[i].tid, NULL);
    total += ws[i].decisions;
    allowed += ws[i].allowed;
    errors += ws[i].errors;
  }
  double elapsed = mono_s() - t0;

  double bytes_per_key;
  if (is_floor) {
    bytes_per_key = 64;
  } else {
    sl_store_stats st;
    sl_store_stats_get(store, &st);
    keys_live = (int64_t)st.keys;
    bytes_per_key = st.keys ? (double)st.bytes / (double)st.keys : 0;
  }
  *rate = (double)total / elapsed;
  fprintf(out, "algo=%s keys=%lld threads=%d decisions_per_s=%.0f "
          "ns_per_decision=%.1f bytes_per_key=%.1f",
          cfg->algo, (long long)ks->n, cfg->threads, *rate,
          elapsed * 1e9 * cfg->threads / (double)total, bytes_per_key);
  if (!is_floor)
    fprintf(out, " live_keys=%lld policy=%s", (long long)keys_live, spec);
  if (cfg->batch > 1) fprintf(out, " batch=%d", cfg->batch);
  if (shed) fprintf(out, " shed=1");
  if (!is_floor && ks->n == 1) {
    /* The hot key's limit is never reached: every decision must count. */
    sl_decision d;
    sl_limiter_take(lim, "user:0", 6, 0, now, &d);
    long long counted = (long long)(d.limit - d.remaining) - 1; /* warm-up */
    fprintf(out, " lost_updates=%lld", (long long)allowed - counted);
  }
  fprintf(out, " errors=%d\n", errors);
  sl_shedder_free(shed);
  free(ws);
  free(table);
  sl_limiter_free(lim);
  sl_store_free(store);
  return errors != 0;
}

/* Splits a comma-separated list in place; returns the count (max `max`). */
static int split_list(char *s, char **out, int max) {
  int n = 0;
  for (char *tok = strtok(s, ","); tok && n < max; tok = strtok(NULL, ","))
    out[n++] = tok;
  return n;
}

/*
 * The algorithms to run, into algos (16 at most): the comma-separated list
 * in buf (split in place; "all": every one and the floor), or the one
 * `policy` (NULL: none) names. Their number, or -1 after a message.
 */
static int pick_algos(char *buf, const char *policy, char **algos) {
  static char *all[] = {"floor", "token_bucket", "leaky_bucket", "fixed_window",
                        "sliding_log", "sliding_window", "gcra"};
  int na = split_list(buf, algos, 16);
  if (na == 1 && !strcmp(algos[0], "all")) {
    na = (int)(sizeof all / sizeof all[0]);
    memcpy(algos, all, sizeof all);
  }
  if (policy) { /* the policy names its own algorithm */
    sl_policy pol;
    char err[256];
    if (sl_policy_parse(policy, &pol, err, sizeof err)) {
      fprintf(stderr, "sluice bench: --policy: %s\n", err);
      return -1;
    }
    algos[0] = (char *)sl_algo_name(pol.algo);
    na = 1;
  }
  for (int i = 0; i < na; i++) {
    int known = !strcmp(algos[i], "floor");
    for (int a = 0; a < SL_ALGO_COUNT; a++)
      known |= !strcmp(algos[i], sl_algo_name((sl_algo)a));
    if (!known) {
      fprintf(stderr, "sluice bench: unknown algorithm '%s'\n", algos[i]);
      return -1;
    }
  }
  return na;
}

/*
 * Runs cfg `repeat` times and prints the best run's line: noise on a
 * shared machine only slows a run down. bench_one's status (0 or 1), or
 * -1 out of memory.
 */
static int bench_best(const bench_cfg *cfg, const keyset *ks) {
  char *best = NULL;
  double best_rate = -1;
  int rc = 0;
  for (int r = 0; r < cfg->repeat; r++) {
    char *line = NULL;
    size_t len = 0;
    double rate = 0;
    FILE *out = open_memstream(&line, &len);
    if (!out) {
      free(best);
      return -1;
    }
    rc |= bench_one(cfg, ks, out, &rate);
    fclose(out);
    if (rate > best_rate) {
      free(best);
      best = line;
      best_rate = rate;
    } else {
      free(line);
    }
  }
  if (best) fputs(best, stdout);
  fflush(stdout);
  free(best);
  return rc;
}

int cmd_bench(int argc, char **argv) {
  static const struct option opts[] = {
      {"algo", required_argument, NULL, 'a'},
      {"keys", required_argument, NULL, 'k'},
      {"threads", required_argument, NULL, 't'},
      {"seconds", required_argument, NULL, 's'},
      {"batch", required_argument, NULL, 'b'},
      {"policy", required_argument, NULL, 'p'},
      {"repeat", required_argument, NULL, 'r'},
      {"shed", no_argument, NULL, 'S'},
      {"help", no_argument, NULL, 'h'},
      {NULL, 0, NULL, 0}};
  char algos_buf[256] = "all", threads_buf[256] = "1";
  bench_cfg base = {.keys = 1000000, .seconds = 2, .batch = 1, .repeat = 1};
  int c;
  int64_t v;
  optind = 1;
  while ((c = getopt_long(argc, argv, "a:k:t:s:b:p:r:Sh", opts, NULL)) != -1) {
    switch (c) {
    case 'a':
      snprintf(algos_buf, sizeof algos_buf, "%s", optarg);
      break;
    case 'k':
      if (parse_int(optarg, 1, 100000000, 0, &v)) goto bad;
      base.keys = v;
      break;
    case 't':
      snprintf(threads_buf, sizeof threads_buf, "%s", optarg);
      break;
    case 's':
      if (parse_int(optarg, 1, 3600, 0, &v)) goto bad;
      base.seconds = (int)v;
      break;
    case 'b':
      if (parse_int(optarg, 1, 256, 0, &v) || CLOCK_EVERY % v) {
        fprintf(stderr, "sluice bench: --batch must divide %d\n", CLOCK_EVERY);
        return 2;
      }
      base.batch = (int)v;
      break;
    case 'p':
      base.policy = optarg;
      break;
    case 'r':
      if (parse_int(optarg, 1, 100, 0, &v)) goto bad;
      base.repeat = (int)v;
      break;
    case 'S':
      base.shed = 1;
      break;
    case 'h':
      bench_usage(stdout);
      return 0;
    default:
      bench_usage(stderr);
      return 2;
    }
  }
  if (optind != argc) {
    fprintf(stderr, "sluice bench: unexpected argument '%s'\n", argv[optind]);
    return 2;
  }
  char *algos[16], *threads[16];
  int na = pick_algos(algos_buf, base.policy, algos),
      nt = split_list(threads_buf, threads, 16);
  if (na < 0) return 2;
  for (int i = 0; i < nt; i++)
    if (parse_int(threads[i], 1, 256, 0, &v)) {
      fprintf(stderr, "sluice bench: --threads '%s' is not a number in "
                      "1..256\n", threads[i]);
      return 2;
    }

  if (sodium_init() < 0) return 1;
  keyset ks = {base.keys};
  int rc = 0;
  for (int a = 0; a < na; a++)
    for (int t = 0; t < nt; t++) {
      bench_cfg cfg = base;
      cfg.algo = algos[a];
      parse_int(threads[t], 1, 256, 0, &v);
      cfg.threads = (int)v;
      int e = bench_best(&cfg, &ks);
      if (e < 0) return 1;
      rc |= e;
    }
  return rc;
bad:
  fprintf(stderr, "sluice bench: bad value '%s' for an option\n", optarg);
  bench_usage(stderr);
  return 2;
}
