/*
 * parity.c — proves that exact mode's Redis script (src/fleet/decide.lua)
 * decides as the core engine does, field for field.
 *
 *   parity --port P [--host H] [--seed S] [--steps N] [--traces T] [--time]
 *
 * For each of the six algorithms it runs T random traces of N requests.
 * A trace picks one to three policies within rs_policy_check's range (edge
 * ones among them: burst != limit, odd limits over long periods at the
 * bound, 1/ms, LIMIT near 2^32, 3650-day windows), three keys, and a start
 * time (2026, near 0, or near 2^62), then sends random requests — single
 * checks and several at once with repeated keys, shadow checks, cost-0
 * peeks, costs up to the largest (and past it: ECOST), dry calls — at
 * times that step by 0, by less than an emission interval, to window
 * boundaries, past the period, through long idle gaps and backwards. Each
 * request goes both to sl_take_all on a memory store and, through
 * rs_format + EVALSHA with the same clock (the now_ns override), to Redis;
 * rs_parse's figures must equal the engine's, every field of every check.
 * A dry request's expected figures come from a replay of the trace so far
 * on a fresh store, each merged key charged alone.
 *
 * Keys and TTLs: each EVALSHA runs in MULTI with PTTL and PERSIST of its
 * keys. A charged key must have had a TTL (PERSIST answers 1) of exactly
 * its time to fresh (PTTL <= ceil(reset) when no clock went back, and
 * close to it); an uncharged one must not have gained one. PERSIST keeps
 * the trace's keys alive: Redis expires them in real time, the trace runs
 * on its own clock (and the memory store is told never to expire). A call
 * whose sliding_log key Redis 7.0 deleted at the script's PEXPIRE of a ms
 * or two (its clock ticked past the TTL within the command) is sent again
 * on the keys' saved states (guarded_exec), counted in the last line. A
 * sliding_log hash must hold exactly its entries and "m". A last phase
 * checks real expiry: charged keys of 20 ms policies are gone 60 ms later,
 * and peeks or denials of a missing key create none.
 *
 * --native sends every call as the Redis module's SL.DECIDE (rs_native)
 * instead of EVALSHA: the same traces, decided by build/sluice-redis.so.
 *
 * --time leaves the clock to Redis (TIME): the engine then decides at the
 * instant the script reports, and keys expire for real; a last check sees
 * first requests allowed with the right figures.
 *
 * Batches: rounds of several requests at one instant go to Redis as one
 * batched call (decide.lua's "g" mode), decided in order by the engine
 * (batch_trace).
 *
 * Forced charges (force_trace, on the test clock): traces where forced
 * calls and ordinary requests take turns. A forced call is one to eight
 * requests of one key each (keys repeat), costs 0 (a reading), below the
 * burst, at it and up to four times it, mostly past what is left: one
 * call in decide.lua's "f" mode (rs_prepare_force + rs_format_batch with
 * RS_FORCE) and sl_limiter_force in the same order; each request's signed
 * level must be the engine's (its other figures 1, the limit, 0, 0, 0).
 * Its keys are probed as above: one whose level fell has its time to
 * fresh as TTL (a peek's reset on the engine after the call), one charged
 * only past the most its state counts may have, one not charged has
 * none. The ordinary requests in between (as above: several checks,
 * shadows, peeks, dry calls replayed with the forced charges) decide on
 * keys in debt: denials, remaining 0, retry-after and reset across the
 * debt, leaky_bucket's delay. Times also step back by a ns or two: where
 * a debt at fill_max, seen from an earlier clock, passes it. Per
 * algorithm it prints the forced charges compared, how many left a
 * negative level or were stopped at the most the state counts, the
 * ordinary checks on a key in debt and the keys seen out of their debt
 * again; none of debts, checks on them or repayments is a failure.
 *
 * Fixed traces (on the test clock, after sliding_window's random ones)
 * reach the products where the script's double estimate of floor(a*b/c)
 * is one too high or one too low, so that its exact fix-ups in both
 * directions are compared with the engine too (wide_traces). Fixed forced
 * traces of gcra and leaky_bucket (after their random ones) read and
 * charge a debt that a clock a ns or two behind the TAT sees past
 * algo_fill_max by under a ns, where T < 1 ns or T = 1 ns puts a whole
 * unit in that ns (past_fm_traces); the engine's levels there are checked
 * against the ones each trace was built for.
 *
 * Calendar windows (on the test clock, after fixed_window's random
 * traces): fixed_window counted in windows of varying length that start
 * off the epoch's grid (days of 23 to 25 hours from +05:30 midnight,
 * months of 28 to 31 days), sent with their start as phase_ns as the
 * daemon sends them, against limiter_take_windows (calendar_traces).
 *
 * CL.THROTTLE's cell (on the test clock, after the six): traces of one
 * key whose every call names its own random rate, through decide.lua's
 * algorithm "7" (or --native the module's), against algo_cell_decide; the
 * key's value (the TAT in decimal ns) and PTTL after each call
 * (cell_traces).
 *
 * Prints "parity: ALGO decisions=N mismatches=M" per algorithm (forced
 * charges are decisions too), then "parity: forced charges=N negative
 * levels=M", and exits 1 on any mismatch (the first ones printed in full,
 * naming their trace and step; -DPRINT_MAX=N prints more), 2 on a usage or
 * connection error. Deterministic for a seed (the --time mode aside); key
 * names carry the pid, so two runs of a seed on one server can share keys
 * only when a pid is reused (redis_parity.sh starts a fresh server).
 */
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

/* algo/cell.h (CL.THROTTLE's rate) brings algo.h, whose type slog this
   file's locals are named after: renamed here, as nothing below uses it. */
#define slog algo_slog_unused
#include "algo/cell.h"
#undef slog
#include "fleet/script.h"
#include "limiter.h"
#include "sluice.h"

#define MAXP 3 /* policies per trace */
#define NKEYS 3
#define MAXC 6 /* checks per request */
#define NS_MS INT64_C(1000000)
#define NS_S INT64_C(1000000000)
#define NS_D (INT64_C(86400) * NS_S)
#ifndef PRINT_MAX
#define PRINT_MAX 5 /* mismatches printed in full (-DPRINT_MAX=N for more) */
#endif

/* ---- randomness (splitmix64: deterministic per seed) ---- */

static uint64_t rng;
static uint64_t rnd64(void) {
  uint64_t z = (rng += UINT64_C(0x9e3779b97f4a7c15));
  z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
  z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
  return z ^ (z >> 31);
}
/* Uniform in [lo, hi] (lo <= hi). */
static int64_t rnd(int64_t lo, int64_t hi) {
  uint64_t span = (uint64_t)hi - (uint64_t)lo + 1;
  return span ? (int64_t)((uint64_t)lo + rnd64() % span) : (int64_t)rnd64();
}
static int pct(int p) { return rnd(0, 99) < p; }

static int time_mode; /* --time: Redis's clock */
static redisContext *rc;
static int native;    /* --native: the module's SL.DECIDE, not EVALSHA */

/* Queues one formatted call of the script: as it is, or (--native) as
   the module's SL.DECIDE (rs_native rewrites it in place). */
static void append_call(const char *cmd, size_t len) {
  if (native) { /* SL.DECIDE's head over the end of EVALSHA's */
    char hdr[RS_NATIVE_HDR];
    size_t hl, at = rs_native(cmd, len, hdr, &hl);
    if (at == (size_t)-1 || hl > at) {
      fprintf(stderr, "parity: rs_native refused a call\n");
      exit(2);
    }
    memcpy((char *)cmd + at - hl, hdr, hl);
    cmd += at - hl;
    len -= at - hl;
  }
  redisAppendFormattedCommand(rc, cmd, len);
}

/* ---- policies ---- */

typedef struct tpol {
  sl_policy p;
  char spec[96];
  int64_t B;  /* the largest cost */
  int64_t T;  /* emission interval, ns (>= 1) */
  int64_t H;  /* time to refill from empty (buckets), else the period */
} tpol;

static int is_bucket(sl_algo a) {
  return a == SL_TOKEN_BUCKET || a == SL_LEAKY_BUCKET || a == SL_GCRA;
}

static int64_t gcd64(int64_t a, int64_t b) {
  while (b) {
    int64_t r = a % b;
    a = b;
    b = r;
  }
  return a;
}

/* Fills *tp from (algo, limit, burst, period) when rs_policy_check accepts
   it; returns 0, or -1. */
static int make_pol(tpol *tp, sl_algo algo, int64_t limit, int64_t burst,
                    int64_t period_ns) {
  if (limit < 1 || limit > SL_LIMIT_MAX || burst < 0 || burst > SL_LIMIT_MAX)
    return -1;
  sl_policy p = {algo, (uint32_t)limit,
                 is_bucket(algo) ? (uint32_t)burst : 0, period_ns};
  if (rs_policy_check(&p, NULL, 0) != 0) return -1;
  tp->p = p;
  if (sl_policy_format(&p, tp->spec, sizeof tp->spec) < 0) return -1;
  tp->B = is_bucket(algo) && burst ? burst : limit;
  tp->T = period_ns / limit > 0 ? period_ns / limit : 1;
  tp->H = is_bucket(algo) ? (int64_t)((__int128)tp->B * period_ns / limit)
                          : period_ns;
  if (tp->H < 1) tp->H = 1;
  return 0;
}

/* The largest burst the script takes for (limit, period): 2*(burst*Wg +
   Lg) <= 2^53. */
static int64_t max_burst(int64_t limit, int64_t period_ns) {
  int64_t g = gcd64(limit, period_ns);
  int64_t Lg = limit / g, Wg = period_ns / g;
  int64_t b = ((INT64_C(1) << 52) - Lg) / Wg;
  return b > (int64_t)SL_LIMIT_MAX ? (int64_t)SL_LIMIT_MAX : b;
}

static const struct {
  int64_t limit;
  int64_t period_ns;
} pairs[] = {
    {1, NS_MS},
    {10, NS_S},
    {3, NS_S},
    {7, NS_D},
    {999, 31 * NS_D},
    {1000000, 31 * NS_D},
    {1000000, NS_D},
    {4294967295, NS_MS},
    {4294967295, NS_D},
    {4294967295, 52 * NS_D},
    {5, 3600 * NS_S},
    {60, 60 * NS_S},
    {13, 52 * NS_D},
    {3, 10 * NS_MS},
    {7, 3650 * NS_D},
    {4294967295, 3650 * NS_D},
};
#define NPAIRS (sizeof pairs / sizeof pairs[0])

/* A random period: whole ms, from 1 ms to 3650 days, mostly short. */
static int64_t rnd_period(void) {
  switch (rnd(0, 7)) {
    case 0: return rnd(1, 20) * NS_MS;
    case 1: return rnd(1, 2000) * NS_MS;
    case 2: return rnd(1, 120) * NS_S;
    case 3: return rnd(1, 48) * 3600 * NS_S;
    case 4: return rnd(1, 31) * NS_D;
    case 5: return rnd(1, INT64_C(60) * 86400000) * NS_MS;
    case 6: return rnd(1, 3650) * NS_D;
    default: return rnd(1, 1000) * NS_MS;
  }
}

static int64_t rnd_limit(void) {
  switch (rnd(0, 5)) {
    case 0: return rnd(1, 10);
    case 1: return rnd(1, 1000);
    case 2: return rnd(1, 1000000);
    case 3: return rnd(1, 4294967295);
    case 4: return rnd(4294967000, 4294967295);
    default: return rnd(1, 100);
  }
}

/* A policy of algo: an edge pair or a random one, with a burst for the
   buckets (= limit, below, above, or the largest the script takes). */
static tpol pick_pol(sl_algo algo) {
  tpol tp;
  for (int tries = 0;; tries++) {
    int64_t limit, period;
    if (time_mode) { /* short periods, so that Redis's clock runs through */
      limit = rnd(1, 20);
      period = rnd(1, 50) * NS_MS;
    } else if (pct(45)) {
      size_t i = (size_t)rnd(0, NPAIRS - 1);
      limit = pairs[i].limit;
      period = pairs[i].period_ns;
    } else {
      limit = rnd_limit();
      period = rnd_period();
    }
    int64_t burst = 0;
    if (is_bucket(algo)) {
      int64_t mb = max_burst(limit, period);
      if (mb < 1) continue;
      switch (rnd(0, 4)) {
        case 0: burst = mb; break;
        case 1: burst = rnd(1, mb); break;
        case 2: burst = rnd(1, limit < mb ? limit : mb); break;
        default: burst = limit <= mb ? limit : rnd(1, mb); break;
      }
    }
    if (make_pol(&tp, algo, limit, burst, period) == 0) return tp;
    if (tries > 1000) {
      fprintf(stderr, "parity: no policy found for %s\n", sl_algo_name(algo));
      exit(2);
    }
  }
}

/* ---- requests ---- */

typedef struct treq {
  int m; /* checks */
  int pi[MAXC], ki[MAXC];
  int64_t cost[MAXC];
  int shadow[MAXC];
  int dry;
  int force; /* a forced charge (force_trace): one check, by force */
  int64_t t;
} treq;

typedef struct trace {
  sl_algo algo;
  const char *kind; /* "" (run_trace), "batch", "force" */
  int id;
  int np;
  tpol pol[MAXP];
  char kname[MAXP][NKEYS][96]; /* Redis key names */
  int kfresh[MAXP][NKEYS];     /* never charged so far */
  sl_store *store;
  sl_limiter *lim[MAXP];
  treq *hist; /* committed requests, for the dry replays */
  int nh;
  int64_t tmax; /* latest time of a committed request */
} trace;

/* Given requests on one policy, in place of random ones. */
#define FIXED_MAX 8
typedef struct fixed_trace {
  tpol pol;
  int n;
  treq req[FIXED_MAX];
} fixed_trace;

static const char *const knames[NKEYS] = {"a", "b", "c"};

static long decisions[SL_ALGO_COUNT], mismatches[SL_ALGO_COUNT];
/* What the traces exercised, per algorithm: checks allowed and denied,
   requests that were ECOST, dry, and denied while a check would allow. */
static long n_allow[SL_ALGO_COUNT], n_deny[SL_ALGO_COUNT],
    n_ecost[SL_ALGO_COUNT], n_dry[SL_ALGO_COUNT], n_partial[SL_ALGO_COUNT],
    n_big[SL_ALGO_COUNT], /* durations of 2^53 ns or more */
    n_batched[SL_ALGO_COUNT]; /* checks decided in batched calls */
static long ttl_checks, failures;
static int printed;

static sl_store *new_store(void) {
  sl_store_options o;
  sl_store_options_init(&o);
  o.shards = 1;
  o.expiry_grace_ns = SL_TIME_MAX_NS; /* never expire: Redis keys persist */
  sl_store *s = NULL;
  if (sl_store_new(&o, &s) != 0) {
    fprintf(stderr, "parity: sl_store_new failed\n");
    exit(2);
  }
  return s;
}

static void limiters(trace *tr, sl_store *s, sl_limiter **lim) {
  for (int i = 0; i < tr->np; i++)
    if (sl_limiter_new(s, &tr->pol[i].p, &lim[i]) != 0) {
      fprintf(stderr, "parity: sl_limiter_new(%s) failed\n", tr->pol[i].spec);
      exit(2);
    }
}

/* The request's checks for sl_take_all. */
static void c_checks(const treq *q, sl_limiter **lim, sl_check *cc) {
  for (int i = 0; i < q->m; i++)
    cc[i] = (sl_check){lim[q->pi[i]], knames[q->ki[i]], 1, q->cost[i],
                       q->shadow[i]};
}

/* Distinct (policy, key) pairs of q, as rs_format merges them: map[i],
   the merged cost and shadow; returns their count, or SL_ECOST. */
static int merge(const trace *tr, const treq *q, int *map, int *upi,
                 int *uki, int64_t *ucost, int *ushadow) {
  int nu = 0;
  for (int i = 0; i < q->m; i++) {
    int u = 0;
    while (u < nu && !(upi[u] == q->pi[i] && uki[u] == q->ki[i])) u++;
    if (u == nu) {
      upi[nu] = q->pi[i];
      uki[nu] = q->ki[i];
      ucost[nu] = 0;
      ushadow[nu++] = 1;
    }
    ushadow[u] &= q->shadow[i] != 0;
    if (q->cost[i] > tr->pol[upi[u]].B - ucost[u]) return SL_ECOST;
    ucost[u] += q->cost[i];
    map[i] = u;
  }
  return nu;
}

/* What a dry request must answer: the trace so far replayed on a fresh
   store, then each merged key decided (and charged there) alone. */
static int dry_expect(trace *tr, const treq *q, sl_decision *out,
                      int *allowed) {
  int map[MAXC], upi[MAXC], uki[MAXC], ushadow[MAXC];
  int64_t ucost[MAXC];
  int nu = merge(tr, q, map, upi, uki, ucost, ushadow);
  *allowed = 0;
  if (nu < 0) return nu;
  sl_store *s = new_store();
  sl_limiter *lim[MAXP];
  limiters(tr, s, lim);
  sl_check cc[MAXC];
  sl_decision d[MAXC];
  int all;
  for (int h = 0; h < tr->nh; h++) {
    const treq *hq = &tr->hist[h];
    if (hq->force) {
      int64_t level;
      sl_limiter_force(lim[hq->pi[0]], knames[hq->ki[0]], 1, hq->cost[0],
                       hq->t, &level);
      continue;
    }
    c_checks(hq, lim, cc);
    sl_take_all(cc, (size_t)hq->m, hq->t, d, &all);
  }
  sl_decision ud[MAXC];
  int ok = 1, rcode = 0;
  for (int u = 0; u < nu && !rcode; u++) {
    sl_check one = {lim[upi[u]], knames[uki[u]], 1, ucost[u], 0};
    rcode = sl_take_all(&one, 1, q->t, &ud[u], &all);
    if (!ud[u].allowed && !ushadow[u]) ok = 0;
  }
  for (int i = 0; i < tr->np; i++) sl_limiter_free(lim[i]);
  sl_store_free(s);
  if (rcode) return rcode;
  for (int i = 0; i < q->m; i++) out[i] = ud[map[i]];
  *allowed = ok;
  return 0;
}

/* ---- reporting ---- */

#define RING 6
static char ring[RING][512];
static int ring_n;

static void describe(const trace *tr, const treq *q, char *buf, size_t len) {
  size_t o = (size_t)snprintf(buf, len, "t=%" PRId64 "%s:", q->t,
                              q->dry ? " dry" : q->force ? " force" : "");
  for (int i = 0; i < q->m && o < len; i++)
    o += (size_t)snprintf(buf + o, len - o, " [p%d %s cost=%" PRId64 "%s]",
                          q->pi[i], knames[q->ki[i]], q->cost[i],
                          q->shadow[i] ? " shadow" : "");
  (void)tr;
}

static void print_dec(const char *who, int rcode, int all,
                      const sl_decision *d, int m) {
  fprintf(stderr, "    %s: rc=%d allowed=%d\n", who, rcode, all);
  if (rcode) return;
  for (int i = 0; i < m; i++)
    fprintf(stderr,
            "      #%d allowed=%d limit=%" PRId64 " remaining=%" PRId64
            " reset=%" PRId64 " retry=%" PRId64 " delay=%" PRId64 "\n",
            i, d[i].allowed, d[i].limit, d[i].remaining, d[i].reset_ns,
            d[i].retry_after_ns, d[i].delay_ns);
}

static void mismatch(trace *tr, int step, const treq *q, const char *what,
                     int crc, int call, const sl_decision *cd, int rrc,
                     int rall, const sl_decision *rd) {
  mismatches[tr->algo]++;
  failures++;
  if (printed++ >= PRINT_MAX) return;
  fprintf(stderr, "MISMATCH %s (%s), %s trace %d, step %d\n",
          sl_algo_name(tr->algo), what, *tr->kind ? tr->kind : "random",
          tr->id, step);
  for (int i = 0; i < tr->np; i++)
    fprintf(stderr, "    p%d = %s\n", i, tr->pol[i].spec);
  fprintf(stderr, "    before (oldest first):\n");
  int first = ring_n > RING ? ring_n - RING : 0;
  for (int i = first; i < ring_n; i++)
    fprintf(stderr, "      %s\n", ring[i % RING]);
  char buf[512];
  describe(tr, q, buf, sizeof buf);
  fprintf(stderr, "    request %s\n", buf);
  print_dec("engine", crc, call, cd, q->m);
  print_dec("script", rrc, rall, rd, q->m);
}

static void note(trace *tr, const treq *q, int all) {
  char *slot = ring[ring_n++ % RING];
  describe(tr, q, slot, sizeof ring[0] - 12);
  strcat(slot, all ? " -> allowed" : " -> denied");
}

static void fail_msg(trace *tr, int step, const char *key, const char *fmt,
                     ...) __attribute__((format(printf, 4, 5)));
static void fail_msg(trace *tr, int step, const char *key, const char *fmt,
                     ...) {
  failures++;
  mismatches[tr->algo]++;
  if (printed++ >= PRINT_MAX) return;
  fprintf(stderr, "FAIL %s %s trace %d step %d key %s: ",
          sl_algo_name(tr->algo), *tr->kind ? tr->kind : "random", tr->id,
          step, key);
  va_list ap;
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fprintf(stderr, "\n");
  for (int i = 0; i < tr->np; i++)
    fprintf(stderr, "    p%d = %s\n", i, tr->pol[i].spec);
}

static int same(const sl_decision *a, const sl_decision *b) {
  return a->allowed == b->allowed && a->limit == b->limit &&
         a->remaining == b->remaining && a->reset_ns == b->reset_ns &&
         a->retry_after_ns == b->retry_after_ns && a->delay_ns == b->delay_ns;
}

static void die_reply(const char *what, redisReply *r) {
  fprintf(stderr, "parity: %s: %s\n", what,
          !r ? (rc->errstr[0] ? rc->errstr : "no reply")
             : r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
  exit(2);
}

/* ---- one trace ---- */

static int64_t clamp_t(int64_t t) {
  if (t < 0) return 0;
  if (t >= SL_TIME_MAX_NS) return SL_TIME_MAX_NS - 1;
  return t;
}

/* The next request time: steps of every size, some backwards, and some to
   exact instants where the arithmetic turns (a period or a refill after
   the last request, an emission interval, an eighth of a window). */
static int64_t next_time(const trace *tr, int64_t t) {
  const tpol *p = &tr->pol[rnd(0, tr->np - 1)];
  int64_t W = p->p.period_ns, T = p->T, H = p->H;
  int64_t s = pct(50) ? W : H;
  int r = (int)rnd(0, 99);
  if (r < 10) return t;
  if (r < 18) return clamp_t(t + rnd(1, 1000));
  if (r < 38) return clamp_t(t + rnd(0, 2 * T));
  if (r < 48) return clamp_t(t + rnd(0, s / 4));
  if (r < 56) return clamp_t(t + rnd(0, s));
  if (r < 62) /* to a window boundary, give or take a ns */
    return clamp_t((t / W + 1) * W + rnd(-2, 2));
  if (r < 66) /* to an eighth of a window (W is a multiple of 64 ns) */
    return clamp_t((t / W + rnd(0, 1)) * W + W / 8 * rnd(1, 7));
  if (r < 74) { /* exactly a period, a refill or an interval later */
    int64_t d = r < 67 ? W : r < 70 ? H : T;
    return clamp_t(t + d + rnd(-1, 1));
  }
  if (r < 81) return clamp_t(t + rnd(s, 3 * s));
  if (r < 85) /* a long idle gap (within the valid times) */
    return clamp_t(t + rnd(3 * s, s < SL_TIME_MAX_NS / 40 ? 40 * s
                                                          : SL_TIME_MAX_NS));
  if (r < 94) return clamp_t(t - rnd(1, W < NS_S ? W : NS_S));
  return clamp_t(t - rnd(W, 3 * W));
}

static int64_t rnd_cost(const tpol *p) {
  int64_t B = p->B;
  int r = (int)rnd(0, 99);
  if (r < 10) return 0;
  if (r < 55) return 1;
  if (r < 75) return rnd(1, B < 10 ? B : 10);
  if (r < 88) return rnd(1, B);
  if (r < 94) return B;
  return rnd(B / 2, B);
}

static treq gen_req(trace *tr, int64_t t) {
  treq q;
  memset(&q, 0, sizeof q);
  q.t = t;
  q.m = pct(55) ? 1 : (int)rnd(2, MAXC);
  q.dry = pct(10);
  for (int i = 0; i < q.m; i++) {
    q.pi[i] = (int)rnd(0, tr->np - 1);
    q.ki[i] = (int)rnd(0, NKEYS - 1);
    q.cost[i] = rnd_cost(&tr->pol[q.pi[i]]);
    q.shadow[i] = pct(15);
  }
  /* Several checks on one key would mostly pass ECOST: keep it rare. */
  if (q.m > 1 && pct(70))
    for (int i = 0; i < q.m; i++)
      if (q.cost[i] > 1) q.cost[i] = rnd(0, 2);
  return q;
}

/*
 * Redis 7.0 deletes a key at PEXPIRE when its expiry is already past: the
 * command reads the clock twice (the base of the TTL, then the check),
 * so a TTL of a ms or two is "past" when the ms ticks over in between, or
 * when Redis is preempted there under CPU load (about 1 in 20000 calls of
 * PEXPIRE 1 on an idle machine, and PEXPIRE 2 too under load; SET ... PX
 * never deletes). sliding_log's slog_write ends with PEXPIRE of its time
 * to fresh, 1 ms for a 1 ms window: on the test clock, which is not
 * Redis's, such a charge can be lost in the script itself, before any
 * PERSIST, and the key's state with it. On Redis's own clock that loses
 * under a ms of a log whose entries expire then anyway (and Redis 7.2
 * reads the clock once per script); here it would fail the TTL probe and
 * every later decision on the key. So the call's sliding_log keys are
 * saved (DUMP) before it and checked (EXISTS) at the end of its MULTI: a
 * key that existed and is gone was lost so, and the call is sent again on
 * the saved states (RESTORE; the script is deterministic on this clock).
 * A key that did not exist and is gone was either lost or not written: the
 * call is sent once more, and where it exists then, it was lost.
 */
static long redone; /* calls that lost a key at PEXPIRE, sent again */

#define MAXG (MAXP * NKEYS) /* keys of one guarded call, at most */

enum { PROBE_FULL, PROBE_PERSIST };

/* MULTI, the call, its keys' probes (PROBE_FULL: PTTL, PERSIST, and HGET m,
   HLEN for sliding_log keys; PROBE_PERSIST: PERSIST), EXISTS of each
   sliding_log key, EXEC. Returns the EXEC reply (its elements checked). */
static redisReply *exec_call(const char *cmd, size_t len, int n,
                             char keys[][96], const int *slog, int probes) {
  redisAppendCommand(rc, "MULTI");
  append_call(cmd, len);
  int queued = 1;
  for (int u = 0; u < n; u++) {
    if (probes == PROBE_FULL) {
      redisAppendCommand(rc, "PTTL %s", keys[u]);
      queued++;
    }
    redisAppendCommand(rc, "PERSIST %s", keys[u]);
    queued++;
    if (probes == PROBE_FULL && slog[u]) {
      redisAppendCommand(rc, "HGET %s m", keys[u]);
      redisAppendCommand(rc, "HLEN %s", keys[u]);
      queued += 2;
    }
  }
  for (int u = 0; u < n; u++)
    if (slog[u]) {
      redisAppendCommand(rc, "EXISTS %s", keys[u]);
      queued++;
    }
  redisAppendCommand(rc, "EXEC");
  redisReply *r = NULL;
  for (int i = 0; i < 1 + queued; i++) {
    if (redisGetReply(rc, (void **)&r) != REDIS_OK || !r)
      die_reply("MULTI", r);
    if (r->type == REDIS_REPLY_ERROR) die_reply("MULTI", r);
    freeReplyObject(r);
  }
  if (redisGetReply(rc, (void **)&r) != REDIS_OK || !r)
    die_reply("EXEC", r);
  if (r->type != REDIS_REPLY_ARRAY || r->elements != (size_t)queued)
    die_reply("EXEC", r);
  /* The module's packed reply read as the script's, as the daemon does. */
  if (!(r->element[0] = rs_unpack(r->element[0]))) die_reply("EXEC", NULL);
  return r;
}

/* exec_call, sent again on the saved states of the sliding_log keys while
   one of them was lost at PEXPIRE (see redone above). */
static redisReply *guarded_exec(const char *cmd, size_t len, int n,
                                char keys[][96], const int *slog,
                                int probes) {
  redisReply *dump[MAXG] = {0};
  int ns = 0;
  for (int u = 0; u < n; u++)
    if (slog[u]) {
      redisAppendCommand(rc, "DUMP %s", keys[u]);
      ns++;
    }
  for (int u = 0; u < n; u++)
    if (slog[u] && (redisGetReply(rc, (void **)&dump[u]) != REDIS_OK ||
                    !dump[u] || dump[u]->type == REDIS_REPLY_ERROR))
      die_reply("DUMP", dump[u]);
  redisReply *whole = NULL;
  int prev_gone = 0, was_lost = 0;
  for (int tries = 0;; tries++) {
    whole = exec_call(cmd, len, n, keys, slog, probes);
    if (!ns) break;
    int lost = 0, gone = 0;
    size_t e = whole->elements - (size_t)ns;
    for (int u = 0; u < n; u++) {
      if (!slog[u]) continue;
      if (whole->element[e++]->integer == 0) {
        gone++;
        lost += dump[u]->type != REDIS_REPLY_NIL;
      }
    }
    if (lost || (tries && gone < prev_gone)) was_lost = 1;
    /* Nothing gone; or only keys that did not exist, a second time: they
       were not written. Past 8 tries the probes say what happened. */
    if (!gone || (!lost && tries) || tries == 8) break;
    prev_gone = gone;
    freeReplyObject(whole);
    for (int u = 0; u < n; u++) {
      if (!slog[u]) continue;
      if (dump[u]->type == REDIS_REPLY_NIL)
        redisAppendCommand(rc, "DEL %s", keys[u]);
      else
        redisAppendCommand(rc, "RESTORE %s 0 %b REPLACE", keys[u],
                           dump[u]->str, dump[u]->len);
    }
    for (int u = 0; u < n; u++) {
      if (!slog[u]) continue;
      redisReply *y = NULL;
      if (redisGetReply(rc, (void **)&y) != REDIS_OK || !y ||
          y->type == REDIS_REPLY_ERROR)
        die_reply("RESTORE", y);
      freeReplyObject(y);
    }
  }
  redone += was_lost;
  for (int u = 0; u < n; u++)
    if (dump[u]) freeReplyObject(dump[u]);
  return whole;
}

/* Sends the EVALSHA (with the TTL probes in MULTI, the clock overridden,
   guarded against keys lost at PEXPIRE) and reads the script's reply into
   *out; the probes' replies into pttl/persist/hlen/meta (per merged key).
   Returns the EXEC reply to free (or the plain reply in --time mode). */
static redisReply *send_req(const char *cmd, size_t len, int nu,
                        char keys[][96], const int *slog,
                        const redisReply **out) {
  if (time_mode) {
    append_call(cmd, len);
    redisReply *r = NULL;
    if (redisGetReply(rc, (void **)&r) != REDIS_OK) die_reply("EVALSHA", r);
    if (!(r = rs_unpack(r))) die_reply("EVALSHA", NULL);
    *out = r;
    return r;
  }
  redisReply *r = guarded_exec(cmd, len, nu, keys, slog, PROBE_FULL);
  *out = r->element[0];
  return r;
}

/* A new trace: its policies (fixed's, else one to MAXP random ones), key
   names unique to this run ("KIND ID"), a fresh store and limiters. */
static void trace_open(trace *tr, sl_algo algo, const char *kind, int id,
                       const tpol *fixed) {
  memset(tr, 0, sizeof *tr);
  tr->algo = algo;
  tr->kind = kind;
  tr->id = id;
  tr->np = fixed ? 1 : (int)rnd(1, MAXP);
  for (int i = 0; i < tr->np; i++) {
    tr->pol[i] = fixed ? *fixed : pick_pol(algo);
    /* A batched call's sliding_log keys: no window under 3 ms (the same
       limit over 3 ms; no draw from the generator, so that every other
       trace of a seed stays as it was). Redis 7.0's PEXPIRE can delete a
       key of a 1-2 ms TTL within the script (see guarded_exec), and a
       later request of the same batch may create it again, out of the
       guard's sight. A forced call is such a batch too (its keys repeat:
       seed 89 at --steps 200 --traces 20 once read level 0 for -26 on a
       1 ms window). The other traces keep such windows, guarded. */
    tpol wider;
    if (!fixed && algo == SL_SLIDING_LOG &&
        (!strcmp(kind, "batch") || !strcmp(kind, "force")) &&
        tr->pol[i].p.period_ns < 3 * NS_MS &&
        make_pol(&wider, algo, tr->pol[i].p.limit, 0, 3 * NS_MS) == 0)
      tr->pol[i] = wider;
    for (int k = 0; k < NKEYS; k++) {
      snprintf(tr->kname[i][k], sizeof tr->kname[i][k],
               "parity:%d:%" PRIu64 ":%s:%s%d:p%d:%s", (int)getpid(), rng,
               sl_algo_name(algo), kind, id, i, knames[k]);
      tr->kfresh[i][k] = 1;
    }
  }
  tr->store = new_store();
  limiters(tr, tr->store, tr->lim);
  tr->tmax = -1;
  ring_n = 0;
}

/* The Redis names of a call's nu merged keys (policy upi[u], key uki[u])
   and which are sliding_log hashes: send_req's keys and slog. */
static void call_keys(const trace *tr, int nu, const int *upi, const int *uki,
                      char keys[][96], int *slog) {
  for (int u = 0; u < nu; u++) {
    snprintf(keys[u], 96, "%s", tr->kname[upi[u]][uki[u]]);
    slog[u] = tr->algo == SL_SLIDING_LOG;
  }
}

static void trace_close(trace *tr) {
  for (int i = 0; i < tr->np; i++) sl_limiter_free(tr->lim[i]);
  sl_store_free(tr->store);
  free(tr->hist);
}

/* sliding_log's hash after a call: "m" (HGET) and its field count (HLEN):
   exactly the entries the meta counts, and "m". */
static void slog_probe(trace *tr, int step, const char *key,
                       const redisReply *m, const redisReply *hl) {
  long long cnt = 0;
  if (m->type == REDIS_REPLY_STRING && m->len >= 12) {
    const unsigned char *b = (const unsigned char *)m->str + 8;
    cnt = (long long)b[0] | (long long)b[1] << 8 | (long long)b[2] << 16 |
          (long long)b[3] << 24;
    if (hl->integer != cnt + 1)
      fail_msg(tr, step, key, "sliding_log hash has %lld fields for %lld "
               "entries", hl->integer, cnt);
  } else if (hl->integer != 0) {
    fail_msg(tr, step, key, "sliding_log hash of %lld fields and no meta",
             hl->integer);
  }
}

/*
 * One request q of trace tr (step `step`), as run_trace sends it: through
 * rs_format + EVALSHA (in MULTI with the TTL probes) and through
 * sl_take_all (dry_expect for a dry one), every field compared; the probes
 * checked; counted; committed to tr->hist (room for it is the caller's).
 * Returns q's time: Redis's in --time mode.
 */
static int64_t decide_step(trace *tr, int step, treq q) {
  const sl_algo algo = tr->algo;
  int map[MAXC], upi[MAXC], uki[MAXC], ushadow[MAXC];
  int64_t ucost[MAXC];
  int nu = merge(tr, &q, map, upi, uki, ucost, ushadow);

  rs_check rq[MAXC];
  for (int i = 0; i < q.m; i++) {
    const char *k = tr->kname[q.pi[i]][q.ki[i]];
    rq[i] = (rs_check){.policy = &tr->pol[q.pi[i]].p, .key = k,
                       .key_len = strlen(k), .cost = q.cost[i],
                       .shadow = q.shadow[i]};
  }
  rs_call call;
  char *cmd = NULL;
  size_t len = 0;
  int rrc = rs_format(rq, (size_t)q.m, q.dry, time_mode ? -1 : q.t, &call,
                      &cmd, &len);
  sl_decision cd[MAXC], rd[MAXC];
  int call_c = 0, call_r = 0, crc;
  memset(cd, 0, sizeof cd);
  memset(rd, 0, sizeof rd);
  if (rrc == 0 && nu >= 0 && (size_t)nu != call.nu) {
    mismatch(tr, step, &q, "merged key count", 0, 0, cd, rrc, 0, rd);
    free(cmd);
    return q.t;
  }
  redisReply *whole = NULL;
  if (rrc == 0) {
    char keys[MAXC][96];
    int slog[MAXC];
    call_keys(tr, nu, upi, uki, keys, slog);
    const redisReply *r = NULL;
    whole = send_req(cmd, len, nu, keys, slog, &r);
    int64_t now = -1;
    if (r->type == REDIS_REPLY_ERROR) die_reply("EVALSHA", (redisReply *)r);
    if (rs_parse(&call, r, rd, &call_r, &now) != 0) {
      mismatch(tr, step, &q, "rs_parse failed", 0, 0, cd, SL_EINVAL, 0, rd);
      freeReplyObject(whole);
      free(cmd);
      return q.t;
    }
    if (time_mode) {
      /* Redis runs on this machine: its TIME is this clock. */
      struct timespec ts;
      clock_gettime(CLOCK_REALTIME, &ts);
      int64_t here = (int64_t)ts.tv_sec * NS_S + ts.tv_nsec;
      if (now < here - 60 * NS_S || now > here + 60 * NS_S)
        fail_msg(tr, step, "-", "the script's clock %" PRId64
                 " is far from this machine's %" PRId64, now, here);
      q.t = now;
    } else if (now != q.t) {
      fail_msg(tr, step, "-", "the script's clock %" PRId64
               ", expected %" PRId64, now, q.t);
    }
    /* The engine at the same instant. */
    if (q.dry) {
      crc = dry_expect(tr, &q, cd, &call_c);
    } else {
      sl_check cc[MAXC];
      c_checks(&q, tr->lim, cc);
      crc = sl_take_all(cc, (size_t)q.m, q.t, cd, &call_c);
    }
    /* The probes: who got a TTL, what it was; sliding_log's fields. */
    if (!time_mode && crc == 0) {
      size_t e = 1;
      for (int u = 0; u < nu; u++) {
        const redisReply *pttl = whole->element[e++];
        const redisReply *pers = whole->element[e++];
        int charged = !q.dry && call_c && ucost[u] > 0;
        for (int i = 0; i < q.m; i++)
          if (map[i] == u && !cd[i].allowed) charged = 0;
        int64_t reset = 0;
        for (int i = 0; i < q.m; i++)
          if (map[i] == u) reset = cd[i].reset_ns;
        ttl_checks++;
        if (charged) {
          tr->kfresh[upi[u]][uki[u]] = 0;
          long long want = (reset + NS_MS - 1) / NS_MS;
          if (want < 1) want = 1;
          if (pers->integer != 1)
            fail_msg(tr, step, keys[u], "charged, but it had no TTL");
          else if (q.t >= tr->tmax &&
                   (pttl->integer > want ||
                    (want > 5000 && pttl->integer < want - 5000)))
            fail_msg(tr, step, keys[u], "PTTL %lld, time to fresh %lld ms",
                     pttl->integer, want);
        } else if (pers->integer != 0) {
          fail_msg(tr, step, keys[u], "not charged, yet it had a TTL "
                   "(%lld ms)", pttl->integer);
        } else if (tr->kfresh[upi[u]][uki[u]] && pttl->integer != -2) {
          fail_msg(tr, step, keys[u], "never charged, yet it exists "
                   "(PTTL %lld)", pttl->integer);
        }
        if (slog[u]) {
          slog_probe(tr, step, keys[u], whole->element[e],
                     whole->element[e + 1]);
          e += 2;
        }
      }
    }
  } else if (q.dry) {
    crc = dry_expect(tr, &q, cd, &call_c);
  } else {
    sl_check cc[MAXC];
    c_checks(&q, tr->lim, cc);
    crc = sl_take_all(cc, (size_t)q.m, q.t, cd, &call_c);
  }

  decisions[algo] += q.m;
  if (crc == SL_ECOST) n_ecost[algo]++;
  if (crc == 0) {
    int some = 0;
    for (int i = 0; i < q.m; i++) {
      if (cd[i].allowed) n_allow[algo]++; else n_deny[algo]++;
      if (cd[i].reset_ns >= INT64_C(1) << 53 ||
          cd[i].retry_after_ns >= INT64_C(1) << 53)
        n_big[algo]++;
      some |= cd[i].allowed && q.cost[i] > 0;
    }
    if (q.dry) n_dry[algo]++;
    else if (!call_c && some) n_partial[algo]++;
  }
  if (crc != rrc) {
    mismatch(tr, step, &q, "return code", crc, call_c, cd, rrc, call_r, rd);
  } else if (crc == 0) {
    int ok = call_c == call_r;
    for (int i = 0; i < q.m; i++) ok &= same(&cd[i], &rd[i]);
    if (!ok) mismatch(tr, step, &q, "decision", crc, call_c, cd, rrc,
                      call_r, rd);
  }
  if (crc == 0 && !q.dry) {
    tr->hist[tr->nh++] = q;
    if (q.t > tr->tmax) tr->tmax = q.t;
  }
  note(tr, &q, call_c);
  if (whole) freeReplyObject(whole);
  free(cmd);
  if (time_mode && pct(30)) usleep((useconds_t)rnd(0, 3000));
  return q.t;
}

/* A trace's first instant: near 0, within 30 periods of the end of time,
   or in 2026-2027. */
static int64_t start_time(const trace *tr) {
  int64_t W = tr->pol[0].p.period_ns;
  switch (rnd(0, 5)) {
    case 0: return rnd(0, 3 * NS_MS); /* a clock shorter than 7 digits */
    case 1: return clamp_t(SL_TIME_MAX_NS - 1 - rnd(1, 30) * W);
    default: return INT64_C(1767225600) * NS_S + rnd(0, 400 * NS_D);
  }
}

/* Runs a trace of steps random requests, or fx's requests on fx's policy. */
static void run_trace(sl_algo algo, int id, int steps, const fixed_trace *fx) {
  trace tr;
  trace_open(&tr, algo, "", id, fx ? &fx->pol : NULL);
  if (fx) steps = fx->n;
  tr.hist = calloc((size_t)steps, sizeof *tr.hist);
  if (!tr.hist) exit(2);

  int64_t t = fx ? 0 : start_time(&tr); /* fx's requests carry their times */

  for (int step = 0; step < steps; step++) {
    if (step && !fx) t = next_time(&tr, t);
    treq q = fx ? fx->req[step] : gen_req(&tr, t);
    t = decide_step(&tr, step, q);
  }
  trace_close(&tr);
}

/* ---- batches: several requests in one EVALSHA ---- */

#define MAXB 12 /* requests per batched call */

/*
 * Rounds of 2..MAXB random requests (dry ones aside) at one instant, sent
 * as one call (rs_prepare + rs_format_batch, decide.lua's "g" mode), and
 * decided one after the other by sl_take_all: each request's answer and
 * every field of its checks must agree, ECOST ones included (left out of
 * the call, as the daemon leaves them out). The call runs in MULTI with a
 * PERSIST of the trace's keys (Redis expires on real time, the trace runs
 * on its own clock).
 */
static void batch_trace(sl_algo algo, int id, int rounds) {
  trace tr;
  trace_open(&tr, algo, "batch", id, NULL);
  int64_t t = INT64_C(1767225600) * NS_S + rnd(0, 400 * NS_D);
  for (int round = 0; round < rounds; round++) {
    if (round) t = next_time(&tr, t);
    int k = (int)rnd(2, MAXB), n = 0;
    treq q[MAXB];
    rs_call calls[MAXB];
    rs_request reqs[MAXB];
    int prc[MAXB], at[MAXB];
    for (int i = 0; i < k; i++) {
      q[i] = gen_req(&tr, t);
      q[i].dry = 0;
      rs_check rq[MAXC];
      for (int c = 0; c < q[i].m; c++) {
        const char *kn = tr.kname[q[i].pi[c]][q[i].ki[c]];
        rq[c] = (rs_check){.policy = &tr.pol[q[i].pi[c]].p, .key = kn,
                           .key_len = strlen(kn), .cost = q[i].cost[c],
                           .shadow = q[i].shadow[c]};
      }
      char *words = NULL;
      reqs[n].call = &calls[i];
      prc[i] = rs_prepare(rq, (size_t)q[i].m, &calls[i], &words,
                          &reqs[n].keys_len, &reqs[n].len);
      at[i] = -1;
      if (prc[i] == 0) {
        reqs[n].words = words;
        at[i] = n++;
      }
    }
    redisReply *whole = NULL, *r = NULL;
    if (n) {
      char *cmd = NULL;
      size_t len = 0;
      if (rs_format_batch(reqs, (size_t)n, 0, t, &cmd, &len) != 0) {
        fprintf(stderr, "parity: rs_format_batch failed\n");
        exit(2);
      }
      /* In MULTI with the PERSISTs: no key may expire in between. */
      char keys[MAXG][96];
      int slog[MAXG], np = 0;
      for (int p = 0; p < tr.np; p++)
        for (int kk = 0; kk < NKEYS; kk++, np++) {
          snprintf(keys[np], sizeof keys[np], "%s", tr.kname[p][kk]);
          slog[np] = algo == SL_SLIDING_LOG;
        }
      whole = guarded_exec(cmd, len, np, keys, slog, PROBE_PERSIST);
      r = whole->element[0];
      if (r->type == REDIS_REPLY_ERROR) die_reply("EVALSHA", r);
      free(cmd);
      for (int i = 0; i < n; i++) free((char *)reqs[i].words);
    }
    for (int i = 0; i < k; i++) {
      sl_check cc[MAXC];
      sl_decision cd[MAXC], rd[MAXC];
      int call_c = 0, call_r = 0;
      memset(cd, 0, sizeof cd);
      memset(rd, 0, sizeof rd);
      c_checks(&q[i], tr.lim, cc);
      int crc = sl_take_all(cc, (size_t)q[i].m, t, cd, &call_c);
      int rrc = prc[i];
      int64_t now = -1;
      if (at[i] >= 0 && rs_parse(&calls[i], r, rd, &call_r, &now) != 0)
        rrc = SL_EINVAL;
      else if (at[i] >= 0 && now != t)
        fail_msg(&tr, round, "-", "the script's clock %" PRId64
                 ", expected %" PRId64, now, t);
      decisions[algo] += q[i].m;
      n_batched[algo] += q[i].m;
      if (crc != rrc) {
        mismatch(&tr, round, &q[i], "batched: return code", crc, call_c, cd,
                 rrc, call_r, rd);
      } else if (crc == 0) {
        int ok = call_c == call_r;
        for (int c = 0; c < q[i].m; c++) ok &= same(&cd[c], &rd[c]);
        if (!ok)
          mismatch(&tr, round, &q[i], "batched: decision", crc, call_c, cd,
                   rrc, call_r, rd);
        if (t > tr.tmax) tr.tmax = t;
      }
      note(&tr, &q[i], call_c);
    }
    if (whole) freeReplyObject(whole);
  }
  trace_close(&tr);
}

/* ---- forced charges: debts, and decisions on them ---- */

#define MAXF 8 /* requests in one forced call */

/*
 * Traces that mix forced calls with ordinary requests. A forced call is
 * 1..MAXF requests of one key each (keys repeat within a call), at one
 * instant, with costs of 0 (a reading), below the largest, at it and up to
 * four times it, so that keys go deep into debt: one EVALSHA in "f" mode
 * (rs_prepare_force + rs_format_batch(RS_FORCE)), and sl_limiter_force on
 * the memory store in the same order; every request's signed level must
 * be the engine's (and the script's other figures 1, the limit, 0, 0, 0).
 * The call runs in MULTI with the TTL probes of its keys: one whose level
 * fell must have got its time to fresh as TTL (the reset of a peek on the
 * engine after the call); one charged only with costs that no longer fit
 * (a debt at its most: the state may be rewritten as it was) may have;
 * one not charged must not have. The ordinary requests between the calls
 * are run_trace's (decide_step), deciding on keys in debt: denials,
 * remaining 0, retry-after and reset across the debt, leaky_bucket's
 * delay, peeks, dry calls (their replays charge the forced costs too).
 */

/* What the forced traces exercised, per algorithm: forced charges
   compared, those that left a negative level, those stopped at the most
   the state counts (a level above the one before less the cost), ordinary
   checks on a key in debt, and keys seen back out of their debt. */
static long n_forced[SL_ALGO_COUNT], n_negative[SL_ALGO_COUNT],
    n_stopped[SL_ALGO_COUNT], /* charges that did not fit the state */
    n_on_debt[SL_ALGO_COUNT], n_repaid[SL_ALGO_COUNT];

/* A forced cost: 0 (reads the level), small, below B, B, up to 4 B. */
static int64_t rnd_force_cost(const tpol *p) {
  int64_t B = p->B;
  int r = (int)rnd(0, 99);
  if (r < 8) return 0;
  if (r < 16) return rnd(1, B < 10 ? B : 10);
  if (r < 28) return rnd(1, B);
  if (r < 40) return B;
  if (r < 70) return rnd(B, 2 * B);
  return rnd(2 * B, 4 * B);
}

/* The engine's signed level of key ki under policy pi at t (a forced
   charge of 0 reads it and changes nothing). */
static int64_t level_of(trace *tr, int pi, int ki, int64_t t) {
  int64_t level = 0;
  int rcode = sl_limiter_force(tr->lim[pi], knames[ki], 1, 0, t, &level);
  if (rcode) {
    fprintf(stderr, "parity: sl_limiter_force(0) failed: %s\n",
            sl_err_name(rcode));
    exit(2);
  }
  return level;
}

/* Whether a forced level of a bucket lies below what a debt of
   algo_fill_max leaves: a debt past it, which only gcra and leaky_bucket
   see, with the clock behind a stored TAT (mismatches are tagged so). */
static int past_fill_max(const tpol *tp, int64_t level) {
  if (!is_bucket(tp->p.algo)) return 0;
  int64_t g = gcd64(tp->p.limit, tp->p.period_ns);
  __int128 Lg = tp->p.limit / g, Wg = tp->p.period_ns / g, cap = tp->B * Wg;
  __int128 most = ((__int128)1 << 53) - 2 * Lg - cap;
  if (most < cap) most = cap;
  __int128 low = cap - most; /* <= 0: floor(low / Wg) */
  return (__int128)level < (low - (Wg - 1)) / Wg;
}

/* Prints one forced call whose figures differ (bad[i]: request i's). */
static void force_mismatch(trace *tr, int step, const char *what,
                           const treq *q, int k, const int *bad,
                           const int *crc, const int64_t *lvl,
                           const int64_t *lim, const int *rrc,
                           const int *rall, const sl_decision *rd) {
  if (printed++ >= PRINT_MAX) return;
  int past = 0, over = 0;
  for (int i = 0; i < k; i++) {
    if (!bad[i] || crc[i]) continue;
    past |= past_fill_max(&tr->pol[q[i].pi[0]], lvl[i]);
    over |= lvl[i] > lim[i]; /* no level exceeds the limit */
  }
  fprintf(stderr, "MISMATCH %s (forced: %s), %s trace %d, step %d%s%s\n",
          sl_algo_name(tr->algo), what, tr->kind, tr->id, step,
          past ? " [the engine's debt is past fill_max: a clock behind the "
                 "stored TAT]" : "",
          over ? " [the engine's level is above the limit: it overflowed]"
               : "");
  for (int i = 0; i < tr->np; i++)
    fprintf(stderr, "    p%d = %s\n", i, tr->pol[i].spec);
  fprintf(stderr, "    before (oldest first):\n");
  int first = ring_n > RING ? ring_n - RING : 0;
  for (int i = first; i < ring_n; i++)
    fprintf(stderr, "      %s\n", ring[i % RING]);
  fprintf(stderr, "    forced call at t=%" PRId64 ", %d requests:\n", q[0].t,
          k);
  for (int i = 0; i < k; i++)
    fprintf(stderr,
            "    %s#%d [p%d %s cost=%" PRId64 "] engine: rc=%d level=%" PRId64
            " limit=%" PRId64 "; script: rc=%d allowed=%d/%d limit=%" PRId64
            " remaining=%" PRId64 " reset=%" PRId64 " retry=%" PRId64
            " delay=%" PRId64 "\n",
            bad[i] ? "> " : "  ", i, q[i].pi[0], knames[q[i].ki[0]],
            q[i].cost[0], crc[i], lvl[i], lim[i], rrc[i], rall[i],
            rd[i].allowed, rd[i].limit, rd[i].remaining, rd[i].reset_ns,
            rd[i].retry_after_ns, rd[i].delay_ns);
}

/* One forced call of the k requests q (one check each, all at q[0].t;
   step `step` of tr), compared and probed. */
static void force_call(trace *tr, int step, const treq *q, int k) {
  const sl_algo algo = tr->algo;
  const int64_t t = q[0].t;
  int nu = 0;
  rs_call calls[MAXF];
  rs_request reqs[MAXF] = {0}; /* (gcc -O2 with ASan: maybe-uninitialized) */
  int upi[MAXF], uki[MAXF], map[MAXF];
  int64_t ucost[MAXF], before[MAXF], cur[MAXF];
  for (int i = 0; i < k; i++) {
    int u = 0;
    while (u < nu && !(upi[u] == q[i].pi[0] && uki[u] == q[i].ki[0])) u++;
    if (u == nu) {
      upi[nu] = q[i].pi[0];
      uki[nu] = q[i].ki[0];
      ucost[nu] = 0;
      before[nu] = cur[nu] = level_of(tr, q[i].pi[0], q[i].ki[0], t);
      nu++;
    }
    map[i] = u;
    ucost[u] += q[i].cost[0];
    const char *kn = tr->kname[q[i].pi[0]][q[i].ki[0]];
    rs_check rq = {.policy = &tr->pol[q[i].pi[0]].p, .key = kn,
                   .key_len = strlen(kn), .cost = q[i].cost[0]};
    char *words = NULL;
    int prc = rs_prepare_force(&rq, 1, &calls[i], &words, &reqs[i].keys_len,
                               &reqs[i].len);
    if (prc) {
      fprintf(stderr, "parity: rs_prepare_force(%s, cost %" PRId64
              ") failed: %s\n", tr->pol[q[i].pi[0]].spec, q[i].cost[0],
              sl_err_name(prc));
      exit(2);
    }
    reqs[i].call = &calls[i];
    reqs[i].words = words;
  }
  char *cmd = NULL;
  size_t len = 0;
  if (rs_format_batch(reqs, (size_t)k, RS_FORCE, t, &cmd, &len) != 0) {
    fprintf(stderr, "parity: rs_format_batch(RS_FORCE) failed\n");
    exit(2);
  }
  for (int i = 0; i < k; i++) free((char *)reqs[i].words);
  char keys[MAXF][96];
  int slog[MAXF];
  call_keys(tr, nu, upi, uki, keys, slog);
  const redisReply *r = NULL;
  redisReply *whole = send_req(cmd, len, nu, keys, slog, &r);
  free(cmd);
  if (r->type == REDIS_REPLY_ERROR)
    die_reply("EVALSHA (force)", (redisReply *)r);

  /* The engine, request by request; the script's figures for each. */
  int crc[MAXF], rrc[MAXF], rall[MAXF], bad[MAXF], nbad = 0;
  int64_t lvl[MAXF], lim[MAXF];
  sl_decision rd[MAXF];
  for (int i = 0; i < k; i++) {
    lvl[i] = 0;
    crc[i] = sl_limiter_force(tr->lim[q[i].pi[0]], knames[q[i].ki[0]], 1,
                              q[i].cost[0], t, &lvl[i]);
    sl_check peek = {tr->lim[q[i].pi[0]], knames[q[i].ki[0]], 1, 0, 0};
    sl_decision pd;
    int pall;
    memset(&pd, 0, sizeof pd);
    sl_take_all(&peek, 1, t, &pd, &pall);
    lim[i] = pd.limit;
    memset(&rd[i], 0, sizeof rd[i]);
    rall[i] = 0;
    int64_t now = -1;
    rrc[i] = rs_parse(&calls[i], r, &rd[i], &rall[i], &now);
    if (rrc[i] == 0 && now != t)
      fail_msg(tr, step, "-", "the script's clock %" PRId64
               ", expected %" PRId64, now, t);
    bad[i] = crc[i] != 0 || rrc[i] != 0 || rall[i] != 1 ||
             rd[i].allowed != 1 || rd[i].limit != lim[i] ||
             rd[i].remaining != lvl[i] || rd[i].reset_ns != 0 ||
             rd[i].retry_after_ns != 0 || rd[i].delay_ns != 0;
    nbad += bad[i];
    decisions[algo]++;
    n_forced[algo]++;
    if (lvl[i] < 0) n_negative[algo]++;
    if (crc[i] == 0 && lvl[i] != cur[map[i]] - q[i].cost[0])
      n_stopped[algo]++;
    cur[map[i]] = lvl[i];
    tr->hist[tr->nh++] = q[i];
  }
  if (nbad) {
    mismatches[algo] += nbad;
    failures += nbad;
    force_mismatch(tr, step, "level", q, k, bad, crc, lvl, lim, rrc, rall,
                   rd);
  }

  /* The probes: a key whose level fell got its time to fresh as TTL. */
  size_t e = 1;
  for (int u = 0; u < nu; u++) {
    const redisReply *pttl = whole->element[e++];
    const redisReply *pers = whole->element[e++];
    int64_t after = level_of(tr, upi[u], uki[u], t);
    sl_check peek = {tr->lim[upi[u]], knames[uki[u]], 1, 0, 0};
    sl_decision pd;
    int pall;
    memset(&pd, 0, sizeof pd);
    sl_take_all(&peek, 1, t, &pd, &pall);
    int fell = after < before[u];
    ttl_checks++;
    if (fell || (ucost[u] > 0 && pers->integer == 1)) {
      tr->kfresh[upi[u]][uki[u]] = 0;
      long long want = (pd.reset_ns + NS_MS - 1) / NS_MS;
      if (want < 1) want = 1;
      if (pers->integer != 1)
        fail_msg(tr, step, keys[u], "forced from level %" PRId64 " to %"
                 PRId64 ", but it had no TTL", before[u], after);
      else if (t >= tr->tmax &&
               (pttl->integer > want ||
                (want > 5000 && pttl->integer < want - 5000)))
        fail_msg(tr, step, keys[u], "forced to level %" PRId64 ": PTTL "
                 "%lld, time to fresh %lld ms", after, pttl->integer, want);
    } else if (ucost[u] == 0 && pers->integer != 0) {
      fail_msg(tr, step, keys[u], "forced cost 0, yet it had a TTL "
               "(%lld ms)", pttl->integer);
    } else if (ucost[u] == 0 && tr->kfresh[upi[u]][uki[u]] &&
               pttl->integer != -2) {
      fail_msg(tr, step, keys[u], "never charged, yet it exists (PTTL "
               "%lld)", pttl->integer);
    }
    if (slog[u]) {
      slog_probe(tr, step, keys[u], whole->element[e], whole->element[e + 1]);
      e += 2;
    }
  }
  if (t > tr->tmax) tr->tmax = t;
  for (int i = 0; i < k; i++) {
    char *slot = ring[ring_n++ % RING];
    describe(tr, &q[i], slot, sizeof ring[0] - 40);
    size_t o = strlen(slot);
    snprintf(slot + o, sizeof ring[0] - o, " -> level %" PRId64, lvl[i]);
  }
  freeReplyObject(whole);
}

/* One random forced call at t (step `step` of tr): 1..MAXF requests of
   one key each, keys repeating, rnd_force_cost's costs (force_call). */
static void forced_step(trace *tr, int step, int64_t t) {
  int k = (int)rnd(1, MAXF);
  treq q[MAXF];
  for (int i = 0; i < k; i++) {
    memset(&q[i], 0, sizeof q[i]);
    q[i].m = 1;
    q[i].force = 1;
    q[i].t = t;
    if (i && pct(40)) { /* the same key again */
      int j = (int)rnd(0, i - 1);
      q[i].pi[0] = q[j].pi[0];
      q[i].ki[0] = q[j].ki[0];
    } else {
      q[i].pi[0] = (int)rnd(0, tr->np - 1);
      q[i].ki[0] = (int)rnd(0, NKEYS - 1);
    }
    q[i].cost[0] = rnd_force_cost(&tr->pol[q[i].pi[0]]);
  }
  force_call(tr, step, q, k);
}

/* Forced calls (forced_step) and ordinary requests (decide_step) in turn
   on one trace, on the test clock (next_time), steps of them. */
static void force_trace(sl_algo algo, int id, int steps) {
  trace tr;
  trace_open(&tr, algo, "force", id, NULL);
  tr.hist = calloc((size_t)steps * MAXF, sizeof *tr.hist);
  if (!tr.hist) exit(2);
  int owed[MAXP][NKEYS];
  memset(owed, 0, sizeof owed);
  int64_t t = start_time(&tr);
  for (int step = 0; step < steps; step++) {
    /* next_time's steps, and some of a ns or two backwards: to the edge
       where a debt at fill_max seen from an earlier clock passes it */
    if (step) t = pct(6) ? clamp_t(t - rnd(1, 2)) : next_time(&tr, t);
    /* keys seen in debt before, now out of it */
    for (int p = 0; p < tr.np; p++)
      for (int kk = 0; kk < NKEYS; kk++)
        if (owed[p][kk] && level_of(&tr, p, kk, t) >= 0) {
          owed[p][kk] = 0;
          n_repaid[algo]++;
        }
    if (pct(45)) {
      forced_step(&tr, step, t);
    } else {
      treq q = gen_req(&tr, t);
      for (int i = 0; i < q.m; i++)
        if (level_of(&tr, q.pi[i], q.ki[i], t) < 0) n_on_debt[algo]++;
      decide_step(&tr, step, q);
    }
    for (int p = 0; p < tr.np; p++)
      for (int kk = 0; kk < NKEYS; kk++)
        if (level_of(&tr, p, kk, t) < 0) owed[p][kk] = 1;
  }
  trace_close(&tr);
}

/* ---- forced charges past fill_max by under a ns ---- */

/*
 * gcra's and leaky_bucket's forced level seen from a clock behind the
 * stored TAT, where the debt passes algo_fill_max (fm) by a ns at most:
 * fm < debt <= (floor(fm/Lg) + 1)*Lg ticks. Like any debt past fm it is
 * reported at the stop, floor((cap - fm)/Wg) (algo_tat_force), and a
 * charge on it changes nothing. The script reported such a debt as it
 * stood, floor((cap - debt)/Wg), wherever its distance d in ns did not
 * pass floor(fm/Lg) + 1 (its test for a debt beyond the stop): a lower
 * level wherever a multiple of Wg lies between, which is always the case
 * when T < 1 ns (Lg > Wg) and the debt passes fm by a unit or more, and
 * sometimes at T = 1 ns (Lg = Wg = 1: a debt of fm + 1). Random traces
 * reach fm only with bursts near the largest the script takes (their
 * costs are at most 4 B; fm is then within 2 units of cap), and the band
 * only through steps of a ns or two, forward then back. Each row is a
 * trace on key "a" at S + dt; `want` is the level the engine must read at
 * each forced step's instant afterwards (a take is compared as ever).
 */
#define NFSTEP 6
static const struct {
  int64_t limit, burst, period_ns;
  int n;
  struct {
    int64_t dt;
    int force; /* 0: an ordinary take of cost */
    int64_t cost, want;
  } s[NFSTEP];
} past_fm[] = {
    /* Lg = 2147483627, Wg = 161000000, cap = 27972655 Wg; fm = cap +
       49773738, so the stop is at level -1. At S+1 the debt is
       fm - Lg + Wg, level 12; seen from S it is fm + Wg: level -2 in the
       script, d = floor(fm/Lg) + 1 exactly. */
    {4294967254, 27972655, 322 * NS_MS, 6,
     {{0, 1, 100055310, -1},
      {1, 1, 1, 12},
      {0, 1, 0, -1},
      {0, 1, 42109064, -1}, /* past the stop: nothing changes */
      {0, 0, 1, 0},         /* denied */
      {1, 1, 0, 12}}},
    /* An ordinary take of B - 1, then a reading 1 ns before it: a debt
       of cap - Wg + Lg = fm + 1936709889 (script: -13); 2 ns before,
       d passes floor(fm/Lg) + 1 (the script's other branch). */
    {4294967254, 27972655, 322 * NS_MS, 5,
     {{0, 0, 27972654, 0},
      {-1, 1, 0, -1},
      {-1, 1, 3, -1},
      {-2, 1, 0, -1},
      {0, 1, 0, 1}}},
    /* T = 1 ns (Lg = Wg = 1), cap = 10^6, fm = 2^53 - 2 - 10^6: charged
       to the stop, then to it again 1 ns later; from S the debt is
       fm + 1 (script: one less). */
    {1000000, 1000000, NS_MS, 4,
     {{0, 1, INT64_C(1) << 53, -INT64_C(9007199252740990)},
      {1, 1, 1, -INT64_C(9007199252740990)},
      {0, 1, 0, -INT64_C(9007199252740990)},
      {0, 1, 5, -INT64_C(9007199252740990)}}},
};
#define NPASTFM (sizeof past_fm / sizeof past_fm[0])

static void past_fm_traces(sl_algo algo) {
  const int64_t S = INT64_C(1767225600) * NS_S + 123456789;
  for (size_t r = 0; r < NPASTFM; r++) {
    tpol pol;
    if (make_pol(&pol, algo, past_fm[r].limit, past_fm[r].burst,
                 past_fm[r].period_ns) != 0) {
      fprintf(stderr, "parity: past_fm row %zu refused\n", r);
      exit(2);
    }
    trace tr;
    trace_open(&tr, algo, "past-fm", (int)r, &pol);
    tr.hist = calloc(NFSTEP, sizeof *tr.hist);
    if (!tr.hist) exit(2);
    for (int i = 0; i < past_fm[r].n; i++) {
      treq q;
      memset(&q, 0, sizeof q);
      q.m = 1;
      q.t = S + past_fm[r].s[i].dt;
      q.cost[0] = past_fm[r].s[i].cost;
      q.force = past_fm[r].s[i].force;
      if (!q.force) {
        decide_step(&tr, i, q);
        continue;
      }
      force_call(&tr, i, &q, 1);
      int64_t got = level_of(&tr, 0, 0, q.t);
      if (got != past_fm[r].s[i].want)
        fail_msg(&tr, i, "a", "the engine's level %" PRId64 ", not the %"
                 PRId64 " this trace was built for", got,
                 past_fm[r].s[i].want);
    }
    trace_close(&tr);
  }
}

/* ---- sliding_window's wide products ---- */

/*
 * The script's sliding_window needs q = floor(a*b/c) with a*b up to 2^84
 * (muldiv in decide.lua): a double estimate, then exact comparisons of a*b
 * with q*c that step q down while it is too high and up while it is too
 * low. The estimate is off only where a*b/c lies within about 2^-52 of
 * itself from an integer, which random traces practically never reach;
 * these traces go there through the public path. Each row is one trace
 * on sliding_window:4294967295/31d (L, W in ns), key "a", S a window start:
 *   at S - 1     prev charged: the count of the window before S;
 *   at S + e     a peek: remaining = L - K, K = prev - floor(prev*e/W);
 *                two requests denied in the window, room = L - cost < K:
 *                retry = W - e - floor(room*W/prev);
 *                c1 charged: the current count;
 *                two denied into the next window, x = L - cost < c1:
 *                retry = 2W - e - floor(x*W/c1).
 * prev*e/W is estimated too high in the first row, too low in the second;
 * room*W/prev and x*W/c1 too high for [0], too low for [1]. So each row
 * makes the script mismatch the engine without the downward loop, and
 * without the upward one. wide_traces checks that the estimates are off
 * that way (as decide.lua computes them), and that the engine reaches
 * those quotients.
 */
static const struct {
  int64_t prev, e, room[2], c1, x[2];
} wide[] = {
    /* e = 7.97 days: prev*e/W = 565554408.99999993, estimated 565554409 */
    {2200000000, 688536785938909, {997980320, 920625508}, 1817107980,
     {985982249, 1405939540}},
    /* e = 14.2 days: prev*e/W = 1008050923 exactly, estimated 1008050922 */
    {2200000000, 1227256178256000, {1153105521, 227252993}, 1885685174,
     {1619489429, 1825948350}},
};
#define NWIDE (sizeof wide / sizeof wide[0])
#define NWREQ 7
static int n_wide[2]; /* estimates reached too high, too low */

/* floor(a*b/c), and how the script's estimate must miss it. */
typedef struct wide_q {
  int64_t a, b, c;
  int want; /* +1: estimated too high, -1: too low */
} wide_q;

/* The script's double estimate of floor(a*b/c) (decide.lua's muldiv
   before its fix-ups) minus the exact quotient; 0 where the product is
   below 2^53 (muldiv divides it exactly, with no fix-up). */
static int64_t est_off(int64_t a, int64_t b, int64_t c) {
  double p = (double)a * (double)b;
  if (p < 9007199254740992.0) return 0;
  return (int64_t)floor(p / (double)c) - (int64_t)((__int128)a * b / c);
}

static void wide_fail(size_t r, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void wide_fail(size_t r, const char *fmt, ...) {
  failures++;
  mismatches[SL_SLIDING_WINDOW]++;
  fprintf(stderr, "FAIL sliding_window wide row %zu: ", r);
  va_list ap;
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fprintf(stderr, "\n");
}

static void wide_traces(void) {
  const int64_t L = SL_LIMIT_MAX, W = 31 * NS_D;
  const int64_t S = (INT64_C(1767225600) * NS_S / W + 1) * W;
  for (size_t r = 0; r < NWIDE; r++) {
    const int64_t prev = wide[r].prev, e = wide[r].e, c1 = wide[r].c1;
    fixed_trace fx;
    memset(&fx, 0, sizeof fx);
    if (make_pol(&fx.pol, SL_SLIDING_WINDOW, L, 0, W) != 0) {
      fprintf(stderr, "parity: sliding_window:%" PRId64 "/31d refused\n", L);
      exit(2);
    }
    const int64_t cost[NWREQ] = {prev, 0, L - wide[r].room[0],
                                 L - wide[r].room[1], c1, L - wide[r].x[0],
                                 L - wide[r].x[1]};
    fx.n = NWREQ;
    for (int i = 0; i < NWREQ; i++) {
      fx.req[i].m = 1;
      fx.req[i].cost[0] = cost[i];
      fx.req[i].t = i ? S + e : S - 1;
    }

    /* The quotients, and how the script's estimates miss them. */
    const wide_q qs[5] = {{prev, e, W, r ? -1 : 1},
                          {wide[r].room[0], W, prev, 1},
                          {wide[r].room[1], W, prev, -1},
                          {wide[r].x[0], W, c1, 1},
                          {wide[r].x[1], W, c1, -1}};
    for (int j = 0; j < 5; j++) {
      int64_t off = est_off(qs[j].a, qs[j].b, qs[j].c);
      if (off * qs[j].want > 0)
        n_wide[qs[j].want < 0]++;
      else
        wide_fail(r, "floor(%" PRId64 "*%" PRId64 "/%" PRId64
                  ") is estimated %+" PRId64 " off, not too %s",
                  qs[j].a, qs[j].b, qs[j].c, off,
                  qs[j].want > 0 ? "high" : "low");
    }

    /* The engine's figures that carry them. */
    sl_store *s = new_store();
    sl_limiter *lim;
    if (sl_limiter_new(s, &fx.pol.p, &lim) != 0) exit(2);
    sl_decision d[NWREQ];
    int all;
    for (int i = 0; i < NWREQ; i++) {
      sl_check c = {lim, "a", 1, cost[i], 0};
      if (sl_take_all(&c, 1, fx.req[i].t, &d[i], &all) != 0) exit(2);
    }
    sl_limiter_free(lim);
    sl_store_free(s);
    const int64_t K = prev - (int64_t)((__int128)prev * e / W);
    int64_t retry[NWREQ] = {0};
    for (int j = 0; j < 2; j++) {
      retry[2 + j] = W - e - (int64_t)((__int128)wide[r].room[j] * W / prev);
      retry[5 + j] = 2 * W - e - (int64_t)((__int128)wide[r].x[j] * W / c1);
    }
    for (int i = 0; i < NWREQ; i++) {
      int allow = i <= 1 || i == 4;
      if (d[i].allowed != allow || d[i].retry_after_ns != retry[i] ||
          (i == 1 && d[i].remaining != L - K))
        wide_fail(r, "request %d: the engine answers allowed=%d "
                  "remaining=%" PRId64 " retry=%" PRId64 ", not the "
                  "figures this trace was built for", i, d[i].allowed,
                  d[i].remaining, d[i].retry_after_ns);
    }

    run_trace(SL_SLIDING_WINDOW, 100 + (int)r, 0, &fx);
  }
}

/* ---- calendar windows ---- */

/* A calendar quota as the daemon sends it: a fixed_window policy whose
   period is the longest window (its keys live that long), each decision
   in the window that holds its instant, given as a start (the phase) and
   a length that varies (a day of 23, 24 or 25 hours, a month of 28 to 31
   days), starting off the epoch's grid (+05:30, a DST shift). */
static const struct {
  int64_t limit, longest_h;
  int64_t len_h[6]; /* consecutive windows' lengths, hours */
} cal[] = {
    {1, 25, {24, 24, 23, 24, 25, 24}},
    {3, 25, {24, 25, 24, 23, 24, 24}},
    {5, 745, {31 * 24, 30 * 24, 31 * 24 - 1, 28 * 24, 29 * 24, 30 * 24 + 1}},
};
#define NCAL (sizeof cal / sizeof cal[0])
#define NCALW 6 /* windows per row */
#define NCALR 9 /* requests per window */
static long n_cal, n_cal_denied;

static void cal_fail(size_t r, int w, int i, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void cal_fail(size_t r, int w, int i, const char *fmt, ...) {
  failures++;
  mismatches[SL_FIXED_WINDOW]++;
  if (printed++ >= PRINT_MAX) return;
  fprintf(stderr, "FAIL fixed_window calendar row %zu window %d request %d: ",
          r, w, i);
  va_list ap;
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fprintf(stderr, "\n");
}

/* An instant of window [s, e) for request i: its first ns, its last,
   one a ns or a ms past the start, one that steps back (the clock going
   back within the window, or into the one before), else at random. */
static int64_t cal_time(int i, int64_t s, int64_t e, int64_t prev) {
  switch (i) {
  case 0: return s;
  case 1: return s + 1;
  case 2: return s + NS_MS;
  case 7: return prev - rnd(1, 2 * NS_S);
  case 8: return e - 1;
  default: return rnd(s, e - 1);
  }
}

/*
 * Every request of a calendar row decided by limiter_take_windows (memory
 * mode) and by the script or the module (the window's start as phase_ns,
 * its length as the period, as exact.c sends them), every field compared;
 * a charged key must have a TTL of its window's remaining time.
 */
static void calendar_traces(void) {
  for (size_t r = 0; r < NCAL; r++) {
    const int64_t L = cal[r].limit, H = 3600 * NS_S;
    sl_policy pol = {SL_FIXED_WINDOW, (uint32_t)L, 0, cal[r].longest_h * H};
    sl_store *st = new_store();
    sl_limiter *lim;
    if (sl_limiter_new(st, &pol, &lim) != 0) exit(2);
    char key[2][96];
    for (int k = 0; k < 2; k++)
      snprintf(key[k], sizeof key[k], "parity %d calendar %zu %c",
               (int)getpid(), r, 'a' + k);
    /* 2026-11-25 00:00 +05:30: off the grid of every length. */
    int64_t s = INT64_C(1764009000) * NS_S, t = s;
    for (int w = 0; w < NCALW; s += cal[r].len_h[w++] * H) {
      const int64_t e = s + cal[r].len_h[w] * H;
      for (int i = 0; i < NCALR; i++) {
        t = cal_time(i, s, e, t);
        /* The window that holds t (one back, where the clock went). */
        int64_t ws = s, we = e;
        if (t < s) {
          we = s;
          ws = s - cal[r].len_h[w - 1] * H;
        }
        const int k = (int)rnd(0, 1);
        const int64_t cost = rnd(0, 3) ? rnd(1, L) : 0;
        sl_check c = {lim, key[k], strlen(key[k]), cost, 0};
        limiter_window win = {ws, we};
        sl_decision cd, rd;
        int call_c = 0, call_r = 0;
        int crc = limiter_take_windows(&c, &win, 1, t, &cd, &call_c);
        sl_policy wp = pol;
        wp.period_ns = we - ws;
        rs_check q = {.policy = &wp, .key = key[k], .key_len = strlen(key[k]),
                      .cost = cost, .phase_ns = ws};
        rs_call call;
        char *cmd;
        size_t len;
        if (crc || rs_format(&q, 1, 0, t, &call, &cmd, &len)) {
          cal_fail(r, w, i, "engine rc %d, or rs_format refused it", crc);
          continue;
        }
        int slog = 0;
        redisReply *whole =
            guarded_exec(cmd, len, 1, &key[k], &slog, PROBE_FULL);
        free(cmd);
        const redisReply *y = whole->element[0];
        decisions[SL_FIXED_WINDOW]++;
        n_cal++;
        n_cal_denied += !cd.allowed;
        if (y->type == REDIS_REPLY_ERROR)
          cal_fail(r, w, i, "%s answers %s", native ? "SL.DECIDE" : "EVALSHA",
                   y->str);
        else if (rs_parse(&call, y, &rd, &call_r, NULL) || call_r != call_c ||
                 !same(&cd, &rd))
          cal_fail(r, w, i, "at %+" PRId64 " ns of [%" PRId64 ", %" PRId64
                   ") cost %" PRId64 ": engine allowed=%d remaining=%" PRId64
                   " reset=%" PRId64 " retry=%" PRId64 ", Redis allowed=%d "
                   "remaining=%" PRId64 " reset=%" PRId64 " retry=%" PRId64,
                   t - ws, ws, we, cost, cd.allowed, cd.remaining, cd.reset_ns,
                   cd.retry_after_ns, rd.allowed, rd.remaining, rd.reset_ns,
                   rd.retry_after_ns);
        /* A charge's TTL: the window's rest (a clock gone back charges
           the later window it stored, whose rest is reset). */
        long long pttl = whole->element[1]->integer,
                  pers = whole->element[2]->integer;
        long long want = (cd.reset_ns + NS_MS - 1) / NS_MS;
        ttl_checks++;
        if (call_c && cost > 0 &&
            (pers != 1 || pttl > want || pttl < want - 5000))
          cal_fail(r, w, i, "charged: PTTL %lld (persist %lld), want %lld",
                   pttl, pers, want);
        else if (!(call_c && cost > 0) && pers != 0)
          cal_fail(r, w, i, "not charged, yet it had a TTL (%lld ms)", pttl);
        freeReplyObject(whole);
      }
    }
    sl_limiter_free(lim);
    sl_store_free(st);
  }
}

/* ---- real expiry ---- */

static long long cmd_int(const char *fmt, const char *key) {
  redisReply *r = redisCommand(rc, fmt, key);
  if (!r || r->type != REDIS_REPLY_INTEGER) die_reply(fmt, r);
  long long v = r->integer;
  freeReplyObject(r);
  return v;
}

/* One request of `cost` on key under spec at now (-1: TIME); returns its
   allowed figure. */
static int one(const char *spec, const char *key, int64_t cost, int64_t now,
               sl_decision *d) {
  sl_policy p;
  char err[256];
  if (sl_policy_parse(spec, &p, err, sizeof err)) {
    fprintf(stderr, "parity: %s: %s\n", spec, err);
    exit(2);
  }
  rs_check c = {.policy = &p, .key = key, .key_len = strlen(key),
                .cost = cost};
  rs_call call;
  char *cmd;
  size_t len;
  if (rs_format(&c, 1, 0, now, &call, &cmd, &len)) exit(2);
  append_call(cmd, len);
  free(cmd);
  redisReply *r = NULL;
  if (redisGetReply(rc, (void **)&r) != REDIS_OK) die_reply("EVALSHA", r);
  if (!(r = rs_unpack(r))) die_reply("EVALSHA", NULL);
  int all = 0;
  if (r->type == REDIS_REPLY_ERROR || rs_parse(&call, r, d, &all, NULL))
    die_reply("EVALSHA", r);
  freeReplyObject(r);
  return all;
}

static void expiry_phase(void) {
  static const char *const specs[] = {
      "token_bucket:4/20ms", "leaky_bucket:4/20ms",   "fixed_window:4/20ms",
      "sliding_log:4/20ms",  "sliding_window:4/20ms", "gcra:4/20ms"};
  char key[6][96];
  int64_t t = INT64_C(1767225600) * NS_S + 7 * NS_MS + 123;
  for (int i = 0; i < 6; i++) {
    sl_decision d;
    snprintf(key[i], sizeof key[i], "parity:%d:expiry:%d", (int)getpid(), i);
    /* A peek and a denial leave no key behind. */
    one(specs[i], key[i], 0, t, &d);
    if (cmd_int("EXISTS %s", key[i]) != 0) {
      fprintf(stderr, "FAIL %s: a peek created the key\n", specs[i]);
      failures++;
    }
    one(specs[i], key[i], 3, t, &d);
    long long pttl = cmd_int("PTTL %s", key[i]);
    long long most = strstr(specs[i], "sliding_window") ? 40 : 20;
    if (pttl <= 0 || pttl > most) {
      fprintf(stderr, "FAIL %s: PTTL %lld after a charge (want 1..%lld)\n",
              specs[i], pttl, most);
      failures++;
    }
    one(specs[i], key[i], 4, t, &d); /* denied: no change */
    if (d.allowed) {
      fprintf(stderr, "FAIL %s: 3 + 4 of 4 allowed\n", specs[i]);
      failures++;
    }
  }
  usleep(70 * 1000);
  for (int i = 0; i < 6; i++)
    if (cmd_int("EXISTS %s", key[i]) != 0) {
      fprintf(stderr, "FAIL %s: the key outlived its time to fresh\n",
              specs[i]);
      failures++;
    }
}

/* On Redis's clock: a first request on a new key is allowed, with the
   policy's limit and what is left; the bucket takes its emission interval
   to refill that unit; a request over what is left is denied. */
static void time_smoke(void) {
  static const struct {
    const char *spec;
    int64_t limit, reset_max;
  } cases[] = {{"token_bucket:5/s", 5, 200 * NS_MS},
               {"gcra:5/s", 5, 200 * NS_MS},
               {"leaky_bucket:5/s", 5, 200 * NS_MS},
               {"fixed_window:5/h", 5, 3600 * NS_S},
               {"sliding_window:5/h", 5, 7200 * NS_S},
               {"sliding_log:5/h", 5, 3600 * NS_S}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char key[96];
    snprintf(key, sizeof key, "parity:%d:smoke:%zu", (int)getpid(), i);
    sl_decision d;
    int all = one(cases[i].spec, key, 1, -1, &d);
    if (!all || !d.allowed || d.limit != cases[i].limit || d.remaining != 4 ||
        d.reset_ns <= 0 || d.reset_ns > cases[i].reset_max ||
        d.retry_after_ns != 0) {
      fprintf(stderr,
              "FAIL %s on Redis's clock: first request allowed=%d limit=%"
              PRId64 " remaining=%" PRId64 " reset=%" PRId64 "\n",
              cases[i].spec, d.allowed, d.limit, d.remaining, d.reset_ns);
      failures++;
    }
    all = one(cases[i].spec, key, 5, -1, &d);
    if (all || d.allowed || d.retry_after_ns <= 0) {
      fprintf(stderr, "FAIL %s on Redis's clock: 1 + 5 of 5 allowed\n",
              cases[i].spec);
      failures++;
    }
  }
}

/* ---- main ---- */

static void usage(void) {
  fprintf(stderr,
          "usage: parity --port P [--host H] [--seed S] [--steps N] "
          "[--traces T] [--time] [--native]\n");
  exit(2);
}

/* ---- CL.THROTTLE's cell (decide.lua's "7") ---- */

static long n_cell, n_cell_denied, n_cell_never, n_cell_far, n_cell_refused;

static void cell_fail(int step, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void cell_fail(int step, const char *key, const char *fmt, ...) {
  failures++;
  if (printed++ >= PRINT_MAX) return;
  fprintf(stderr, "FAIL cell step %d key %s: ", step, key);
  va_list ap;
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fprintf(stderr, "\n");
}

/* A random rate of the script's range (rs_cell_check), edge ones among
   them: 1 us and sub-us intervals, a DVT at 2^52 - EI. */
static void cell_rate(int64_t *burst, int64_t *count, int64_t *period) {
  static const int64_t periods[] = {1, 2, 3, 60, 3600, 86400, 30 * 86400};
  *period = periods[rnd(0, 6)];
  *count = pct(30) ? rnd(1, 3) : pct(50) ? rnd(1, 1000) : rnd(1, 4000000);
  *burst = pct(30) ? 0 : pct(70) ? rnd(0, 20) : rnd(0, 100000);
}

/*
 * Traces of CL.THROTTLE on one key whose every call names a random rate
 * (the key's one TAT, reconfigured on the fly), as the daemon sends them
 * in exact mode: rs_format with rs_check.cell, against algo_cell_decide
 * (the memory engine's decision) on the same clock; every field compared,
 * the key's value (the TAT in decimal ns, redis-cell's layout) and its TTL
 * checked after each call. Now and then the key is set from outside to a
 * TAT far ahead (as redis-cell or the module may leave it), which the
 * script must read as limited at any rate.
 */
static void cell_traces(int traces, int steps) {
  for (int id = 0; id < traces; id++) {
    char key[96];
    snprintf(key, sizeof key, "sl:{}c4:cellparity:%d:%" PRIu64 ":%d",
             (int)getpid(), rng, id);
    int64_t t = pct(20) ? rnd(1, 5 * NS_S) : INT64_C(1785000000) * NS_S +
                                                  rnd(0, NS_D);
    int64_t tat = -1;
    for (int step = 0; step < steps; step++) {
      int64_t burst, count, period;
      cell_rate(&burst, &count, &period);
      algo_cell rate;
      if (algo_cell_rate(burst, count, period, &rate)) continue;
      sl_policy pol = {SL_GCRA, (uint32_t)count, (uint32_t)(burst + 1),
                       period * NS_S};
      int64_t qty = pct(10)   ? 0
                    : pct(10) ? rnd(rate.limit, rate.limit + 3)
                    : pct(3)  ? rnd(0, INT64_C(1) << 40)
                              : rnd(1, 3);
      rs_check ck = {.policy = &pol, .key = key, .key_len = strlen(key),
                     .cost = qty, .cell = &rate};
      rs_call call;
      char *cmd;
      size_t len;
      int frc = rs_format(&ck, 1, RS_DECIDE, t, &call, &cmd, &len);
      if (rs_cell_check(&rate)) { /* beyond the script: refused */
        if (frc != SL_EPOLICY) {
          cell_fail(step, key, "rs_format gave %d for an inexact rate",
                   frc);
        }
        free(cmd);
        n_cell_refused++;
        continue;
      }
      if (frc) {
        fprintf(stderr, "parity: rs_format (cell) failed: %d\n", frc);
        exit(2);
      }
      if (pct(3)) { /* a TAT far ahead, written by another */
        tat = t + rnd(INT64_C(1) << 52, INT64_C(1) << 56);
        redisReply *x = redisCommand(rc, "SET %s %lld", key, (long long)tat);
        freeReplyObject(x);
        n_cell_far++;
      }
      char keys[1][96];
      int slog[1] = {0};
      snprintf(keys[0], sizeof keys[0], "%s", key);
      redisReply *whole = exec_call(cmd, len, 1, keys, slog, PROBE_FULL);
      free(cmd);
      sl_decision got, want;
      int all;
      if (rs_parse(&call, whole->element[0], &got, &all, NULL))
        die_reply("cell reply", whole->element[0]);
      int64_t next;
      int changed = algo_cell_decide(&rate, tat, t, qty, &want, &next);
      if (changed) tat = next;
      if (want.allowed) want.retry_after_ns = -1;
      n_cell++;
      n_cell_denied += !want.allowed;
      n_cell_never += qty > rate.limit;
      long long pttl = whole->element[1]->integer;
      if (!same(&got, &want) || all != want.allowed)
        cell_fail(step, key,
                 "rate %lld %lld %lld qty %lld at %lld: script "
                 "[%d %lld %lld %lld %lld] engine [%d %lld %lld %lld %lld]",
                 (long long)burst, (long long)count, (long long)period,
                 (long long)qty, (long long)t, got.allowed,
                 (long long)got.limit, (long long)got.remaining,
                 (long long)got.reset_ns, (long long)got.retry_after_ns,
                 want.allowed, (long long)want.limit,
                 (long long)want.remaining, (long long)want.reset_ns,
                 (long long)want.retry_after_ns);
      /* (its TTL counts down in real time: a 1 ms one may read 0) */
      else if (changed && (pttl < 0 || pttl > (next - t + NS_MS - 1) / NS_MS))
        cell_fail(step, key, "PTTL %lld for a TAT %lld ns ahead", pttl,
                 (long long)(next - t));
      freeReplyObject(whole);
      redisReply *v = redisCommand(rc, "GET %s", key);
      char dec[24] = "";
      if (tat >= 0) snprintf(dec, sizeof dec, "%lld", (long long)tat);
      if (!v || (tat < 0 ? v->type != REDIS_REPLY_NIL
                         : v->type != REDIS_REPLY_STRING || strcmp(v->str, dec)))
        cell_fail(step, key, "the key holds %s, not the TAT %s",
                 v && v->type == REDIS_REPLY_STRING ? v->str : "nothing",
                 tat < 0 ? "(none)" : dec);
      freeReplyObject(v);
      /* time moves: not at all, by under an interval, by whole ones, or
         back a little */
      int64_t step_ns = pct(20) ? 0
                        : pct(40) ? rnd(0, rate.ei)
                        : pct(70) ? rnd(0, 3 * rate.dvt)
                        : pct(50) ? rnd(0, NS_S)
                                  : -rnd(0, NS_MS);
      if (t + step_ns > 0) t += step_ns;
    }
    redisReply *x = redisCommand(rc, "DEL %s", key);
    freeReplyObject(x);
  }
  printf("parity: cell decisions=%ld (denied=%ld, above the limit=%ld, TATs "
         "set far ahead=%ld; rates refused as beyond 2^52 ns=%ld)\n",
         n_cell, n_cell_denied, n_cell_never, n_cell_far, n_cell_refused);
}

int main(int argc, char **argv) {
  const char *host = "127.0.0.1";
  int port = 0, steps = 150, traces = 10;
  uint64_t seed = 1;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--time")) {
      time_mode = 1;
      continue;
    }
    if (!strcmp(a, "--native")) {
      native = 1;
      continue;
    }
    if (i + 1 >= argc) usage();
    const char *v = argv[++i];
    if (!strcmp(a, "--port")) port = atoi(v);
    else if (!strcmp(a, "--host")) host = v;
    else if (!strcmp(a, "--seed")) seed = strtoull(v, NULL, 10);
    else if (!strcmp(a, "--steps")) steps = atoi(v);
    else if (!strcmp(a, "--traces")) traces = atoi(v);
    else usage();
  }
  if (port <= 0 || steps < 1 || traces < 1) usage();
  rng = seed;

  struct timeval tv = {10, 0};
  rc = redisConnectWithTimeout(host, port, tv);
  if (!rc || rc->err) {
    fprintf(stderr, "parity: cannot connect to %s:%d: %s\n", host, port,
            rc ? rc->errstr : "out of memory");
    return 2;
  }
  tv.tv_sec = 60; /* a script stuck in a loop fails the run, not hangs it */
  redisSetTimeout(rc, tv);
  size_t slen;
  const char *src = rs_script(&slen);
  redisReply *r = redisCommand(rc, "SCRIPT LOAD %b", src, slen);
  if (!r || r->type != REDIS_REPLY_STRING) die_reply("SCRIPT LOAD", r);
  if (strcmp(r->str, rs_script_sha()) != 0) {
    fprintf(stderr, "parity: SCRIPT LOAD gave %s, rs_script_sha() %s\n",
            r->str, rs_script_sha());
    return 1;
  }
  freeReplyObject(r);

  static const sl_algo order[] = {SL_TOKEN_BUCKET, SL_LEAKY_BUCKET,
                                  SL_FIXED_WINDOW, SL_SLIDING_LOG,
                                  SL_SLIDING_WINDOW, SL_GCRA};
  for (size_t a = 0; a < 6; a++) {
    for (int id = 0; id < traces; id++) run_trace(order[a], id, steps, NULL);
    /* batched calls: on the test clock only (one instant per call) */
    for (int id = 0; id < traces && !time_mode; id++)
      batch_trace(order[a], id, steps / 4 + 1);
    /* forced charges: on the test clock only */
    for (int id = 0; id < traces && !time_mode; id++)
      force_trace(order[a], id, steps);
    sl_algo al = order[a];
    if (al == SL_SLIDING_WINDOW && !time_mode) wide_traces();
    if (al == SL_FIXED_WINDOW && !time_mode) calendar_traces();
    if ((al == SL_GCRA || al == SL_LEAKY_BUCKET) && !time_mode)
      past_fm_traces(al);
    /* The forced traces must have reached what they are for. */
    if (!time_mode && n_forced[al] >= 200 &&
        (!n_negative[al] || !n_on_debt[al] || !n_repaid[al])) {
      fprintf(stderr, "FAIL %s: the forced traces made no debt, decided "
              "on none or saw none paid back\n", sl_algo_name(al));
      failures++;
      mismatches[al]++;
    }
    printf("parity: %s decisions=%ld mismatches=%ld\n", sl_algo_name(al),
           decisions[al], mismatches[al]);
    printf("parity:   (allowed=%ld denied=%ld, requests: ecost=%ld dry=%ld "
           "denied-by-another=%ld; durations >= 2^53 ns=%ld; checks in "
           "batched calls=%ld)\n",
           n_allow[al], n_deny[al], n_ecost[al], n_dry[al], n_partial[al],
           n_big[al], n_batched[al]);
    if (!time_mode)
      printf("parity:   (forced charges=%ld, negative levels=%ld, stopped "
             "at the most the state counts=%ld; ordinary checks on keys in "
             "debt=%ld; keys back out of a debt=%ld)\n",
             n_forced[al], n_negative[al], n_stopped[al], n_on_debt[al],
             n_repaid[al]);
    if (al == SL_FIXED_WINDOW && !time_mode)
      printf("parity:   (calendar windows: %ld checks with a phase, %ld "
             "denied)\n", n_cal, n_cal_denied);
    if (al == SL_SLIDING_WINDOW && !time_mode)
      printf("parity:   (%d fixed traces where the script's double estimate "
             "of a product's quotient is off: %d too high, %d too low)\n",
             (int)NWIDE, n_wide[0], n_wide[1]);
    fflush(stdout);
  }
  if (!time_mode) {
    long nf = 0, nn = 0;
    for (int a = 0; a < SL_ALGO_COUNT; a++) {
      nf += n_forced[a];
      nn += n_negative[a];
    }
    printf("parity: forced charges=%ld negative levels=%ld\n", nf, nn);
  }
  if (!time_mode) cell_traces(traces, steps);
  if (time_mode)
    time_smoke();
  else
    expiry_phase();
  printf("parity: ttl checks=%ld failures=%ld\n", ttl_checks, failures);
  printf("parity: calls sent again after Redis lost a key at PEXPIRE=%ld\n",
         redone);
  redisFree(rc);
  return failures ? 1 : 0;
}
