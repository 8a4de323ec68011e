/*
 * test_properties.c — random traces through the pure algorithms (algo/algo.h),
 * checked against the definitions of the spec: window bounds, retry_after,
 * reset, fresh_at, the bucket equivalence, and small reference models.
 *
 * Deterministic: every trace comes from a fixed-seed splitmix64.
 */
#include "helpers.h"

#include "algo/algo.h"

/* ---- PRNG -------------------------------------------------------------------- */

typedef struct rng {
  uint64_t s;
} rng;

static uint64_t rng_next(rng *r) { return splitmix64(&r->s); }

/* Uniform-ish in [lo, hi] (modulo bias is irrelevant here). */
static int64_t rng_range(rng *r, int64_t lo, int64_t hi) {
  if (hi <= lo) return lo;
  return lo + (int64_t)(rng_next(r) % (uint64_t)(hi - lo + 1));
}

/* ---- policies ----------------------------------------------------------------- */

#define MAX_POLICIES 64
#define STEPS 300

typedef struct pol {
  uint32_t limit, burst;
  int64_t period_ns;
} pol;

static int is_bucket(sl_algo a) {
  return a == SL_TOKEN_BUCKET || a == SL_LEAKY_BUCKET || a == SL_GCRA;
}

/* The policies every algorithm is tried with (burst ignored by windows). */
static size_t policies_for(sl_algo algo, pol *out) {
  static const pol fixed[] = {
      {7, 0, 3 * NS_PER_S},      {1000, 0, 3600 * NS_PER_S},
      {1, 0, NS_PER_MS},         {2, 0, NS_PER_S},
      {100, 0, 60 * NS_PER_S},   {10, 0, 900 * NS_PER_S},
      {13, 0, 7 * NS_PER_MS},    {1, 0, 86400 * NS_PER_S},
      {50, 0, NS_PER_S},         {3, 0, 10 * NS_PER_S},
      {3, 0, 1000003 * NS_PER_MS},           {50, 0, 37 * NS_PER_MS},
      {4, 0, NS_PER_MS},                 {1, 0, 2 * NS_PER_MS},
      {3, 5, 10 * NS_PER_S},     {2, 10, NS_PER_S},
      {50, 100, NS_PER_S},       {5, 1, NS_PER_S},
      {1, 50, NS_PER_S},         {7, 2, 3 * NS_PER_S},
      {7, 3, 10 * NS_PER_MS},                {49, 17, 999983 * NS_PER_MS},
  };
  static const int64_t periods[] = {
      NS_PER_MS,        7 * NS_PER_MS,   NS_PER_S,          3 * NS_PER_S,
      10 * NS_PER_S,    60 * NS_PER_S,   900 * NS_PER_S,    3600 * NS_PER_S,
      86400 * NS_PER_S, 1001 * NS_PER_MS, 13 * NS_PER_S,    997 * NS_PER_MS,
      1000003 * NS_PER_MS, 37 * NS_PER_MS, 3 * NS_PER_MS};
  size_t n = 0;
  for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++) {
    if (fixed[i].burst && !is_bucket(algo)) continue;
    out[n++] = fixed[i];
  }
  rng r = {UINT64_C(0x5111ce)};
  while (n < 48) {
    pol p;
    p.limit = (uint32_t)rng_range(&r, 1, 50);
    p.period_ns = periods[rng_range(&r, 0, sizeof periods / sizeof periods[0] - 1)];
    p.burst = is_bucket(algo) && rng_range(&r, 0, 1) ? (uint32_t)rng_range(&r, 1, 60) : 0;
    out[n++] = p;
  }
  return n;
}

static sl_policy pub_of(sl_algo algo, const pol *p) {
  sl_policy s;
  s.algo = algo;
  s.limit = p->limit;
  s.burst = is_bucket(algo) ? p->burst : 0;
  s.period_ns = p->period_ns;
  return s;
}

/* ---- traces ----------------------------------------------------------------- */

typedef struct trace {
  int n;
  int64_t t[STEPS];
  int64_t cost[STEPS];
} trace;

/* Non-decreasing times with gaps of 0 .. several periods, costs 0..B. */
static void make_trace_from(const algo_policy *p, uint64_t seed, int64_t t0,
                            trace *tr) {
  rng r = {seed};
  int64_t W = p->W, L = p->L, B = p->B;
  int64_t T = (W + L - 1) / L;
  int64_t t = t0 + rng_range(&r, 0, 3 * W);
  tr->n = STEPS;
  for (int i = 0; i < STEPS; i++) {
    int64_t k = rng_range(&r, 0, 99);
    if (i == 0 || k < 25)
      ; /* same instant */
    else if (k < 60)
      t += rng_range(&r, 0, 2 * T);
    else if (k < 85)
      t += rng_range(&r, 0, W);
    else if (k < 94)
      t += rng_range(&r, 0, 4 * W);
    else { /* right at, or next to, the next window boundary */
      int64_t edge = (t / W + 1) * W + rng_range(&r, -1, 1);
      if (edge > t) t = edge;
    }
    int64_t c = rng_range(&r, 0, 99);
    if (c < 55)
      tr->cost[i] = 1;
    else if (c < 70)
      tr->cost[i] = 0;
    else if (c < 92)
      tr->cost[i] = rng_range(&r, 0, B);
    else
      tr->cost[i] = B;
    if (tr->cost[i] > B) tr->cost[i] = B;
    if (t >= SL_TIME_MAX_NS) t = SL_TIME_MAX_NS - 1;
    tr->t[i] = t;
  }
}

static void make_trace(const algo_policy *p, uint64_t seed, trace *tr) {
  make_trace_from(p, seed, T0, tr);
}

/* ---- a key driven through one algorithm, the way the store does it ------ */

enum {
  CHK_RETRY = 1 << 0,   /* retry_after is the least wait */
  CHK_RESET = 1 << 1,   /* reset is the least wait to fresh */
  CHK_FRESHAT = 1 << 2, /* fresh_at agrees with reset */
  CHK_BOUNDS = 1 << 3,  /* 0 <= remaining <= limit, limit, zero fields */
  CHK_FRESHEQ = 1 << 4, /* a state at fresh_at decides like no state */
  CHK_CHANGE = 1 << 5,  /* only allowed cost > 0 changes state */
};

typedef struct runner {
  algo_policy p;
  algo_state st;
  int has; /* the key has state (else it is fresh: NULL) */
  slog *log;
  char name[96];
  uint64_t seed;
  int step;
  int64_t t_start;
} runner;

/*
 * Whether the policy compiles. Periods that are not a whole number of ms
 * cannot be written in the policy syntax; should validation ever reject
 * them, those policies are skipped. Every other policy must compile.
 */
static int compiles(const sl_policy *pub) {
  algo_policy ap;
  if (algo_policy_compile(pub, &ap, NULL, 0) == 0) return 1;
  if (pub->period_ns % NS_PER_MS != 0) return 0;
  char err[160] = "";
  algo_policy_compile(pub, &ap, err, sizeof err);
  fail_msg("compile %s %u/%lldns burst %u: %s", sl_algo_name(pub->algo),
           pub->limit, (long long)pub->period_ns, pub->burst, err);
  return 0;
}

static void runner_init(runner *r, const sl_policy *pub, uint64_t seed) {
  char err[160];
  memset(r, 0, sizeof *r);
  if (algo_policy_compile(pub, &r->p, err, sizeof err) != 0)
    fail_msg("compile %s %u/%lldns burst %u: %s", sl_algo_name(pub->algo),
             pub->limit, (long long)pub->period_ns, pub->burst, err);
  if (sl_policy_format(pub, r->name, sizeof r->name) < 0)
    snprintf(r->name, sizeof r->name, "?");
  if (pub->algo == SL_SLIDING_LOG) {
    /* Room for LIMIT entries; a trace never logs more than STEPS instants,
       which bounds the block for the huge limits of the extreme policies. */
    uint32_t cap = pub->limit <= (1u << 16) ? pub->limit : STEPS + 1;
    r->log = slog_init(malloc(slog_bytes(cap)), cap);
    assert_non_null(r->log);
    r->st.a = (int64_t)(uintptr_t)r->log;
  }
  r->seed = seed;
}

static void runner_free(runner *r) { free(r->log); }

static const algo_state *runner_state(const runner *r) {
  return r->has ? &r->st : NULL;
}

static void runner_drop(runner *r) {
  r->has = 0;
  if (r->log) slog_init(r->log, r->log->cap);
}

/* Decides on a copy of the state; never changes it. */
static sl_decision peek_at(const runner *r, int64_t t, int64_t cost) {
  sl_decision d;
  memset(&d, 0x5a, sizeof d);
  algo_state next = {0, 0};
  r->p.ops->decide(&r->p, runner_state(r), t, cost, &d, &next);
  return d;
}

#define WHERE "%s seed=%llx step=%d t=start+%lld cost=%lld: "
#define WHERE_ARGS(r, t, cost)                                             \
  (r)->name, (unsigned long long)(r)->seed, (r)->step,                     \
      (long long)((t) - (r)->t_start), (long long)(cost)

static int same_decision(const sl_decision *a, const sl_decision *b) {
  return a->allowed == b->allowed && a->limit == b->limit &&
         a->remaining == b->remaining && a->reset_ns == b->reset_ns &&
         a->retry_after_ns == b->retry_after_ns && a->delay_ns == b->delay_ns;
}

static void dump(const char *what, const sl_decision *d) {
  print_message("  %s: allowed=%d limit=%lld remaining=%lld reset=%lld "
                "retry=%lld delay=%lld\n",
                what, d->allowed, (long long)d->limit, (long long)d->remaining,
                (long long)d->reset_ns, (long long)d->retry_after_ns,
                (long long)d->delay_ns);
}

/* One request at t, with the checks asked for. Returns its decision. */
static sl_decision runner_step(runner *r, int64_t t, int64_t cost,
                               unsigned chk) {
  const algo_policy *p = &r->p;
  /* The store drops a key from fresh_at on: it must not matter. */
  if (r->has && p->ops->fresh_at(p, &r->st) <= t) {
    if (chk & CHK_FRESHEQ) {
      const int64_t costs[3] = {cost, 0, p->B};
      for (int k = 0; k < 3; k++) {
        sl_decision with = peek_at(r, t, costs[k]);
        runner tmp = *r;
        tmp.has = 0;
        sl_decision without = peek_at(&tmp, t, costs[k]);
        if (!same_decision(&with, &without)) {
          dump("with state", &with);
          dump("fresh", &without);
          fail_msg(WHERE "state past fresh_at=start+%lld decides unlike a "
                   "fresh key (for cost %lld)",
                   WHERE_ARGS(r, t, cost),
                   (long long)(p->ops->fresh_at(p, &r->st) - r->t_start),
                   (long long)costs[k]);
        }
      }
    }
    runner_drop(r);
  }

  sl_decision d;
  memset(&d, 0x5a, sizeof d);
  algo_state next = {INT64_MIN, INT64_MIN};
  int ch = p->ops->decide(p, runner_state(r), t, cost, &d, &next);

  if (chk & CHK_CHANGE) {
    if (cost == 0 && !d.allowed)
      fail_msg(WHERE "a peek was denied", WHERE_ARGS(r, t, cost));
    if (ch != (d.allowed && cost > 0))
      fail_msg(WHERE "decide returned %d for allowed=%d", WHERE_ARGS(r, t, cost),
               ch, d.allowed);
  }
  if (chk & CHK_BOUNDS) {
    if (d.limit != p->B)
      fail_msg(WHERE "limit %lld, want %lld", WHERE_ARGS(r, t, cost),
               (long long)d.limit, (long long)p->B);
    if (d.remaining < 0 || d.remaining > d.limit)
      fail_msg(WHERE "remaining %lld outside [0, %lld]", WHERE_ARGS(r, t, cost),
               (long long)d.remaining, (long long)d.limit);
    if (d.allowed && d.retry_after_ns != 0)
      fail_msg(WHERE "allowed with retry_after %lld", WHERE_ARGS(r, t, cost),
               (long long)d.retry_after_ns);
    if (!d.allowed && d.retry_after_ns <= 0)
      fail_msg(WHERE "denied with retry_after %lld", WHERE_ARGS(r, t, cost),
               (long long)d.retry_after_ns);
    if (d.reset_ns < 0)
      fail_msg(WHERE "negative reset %lld", WHERE_ARGS(r, t, cost),
               (long long)d.reset_ns);
    if (d.delay_ns != 0 && (p->pub.algo != SL_LEAKY_BUCKET || !d.allowed))
      fail_msg(WHERE "delay %lld", WHERE_ARGS(r, t, cost), (long long)d.delay_ns);
    if (d.delay_ns < 0)
      fail_msg(WHERE "negative delay", WHERE_ARGS(r, t, cost));
  }
  if ((chk & CHK_RETRY) && !d.allowed) {
    int64_t ra = d.retry_after_ns;
    if (ra <= 0)
      fail_msg(WHERE "denied with retry_after %lld", WHERE_ARGS(r, t, cost),
               (long long)ra);
    sl_decision at = peek_at(r, t + ra, cost);
    sl_decision before = peek_at(r, t + ra - 1, cost);
    if (!at.allowed || before.allowed) {
      dump("denied", &d);
      fail_msg(WHERE "retry_after %lld: allowed at t+ra: %d, at t+ra-1: %d",
               WHERE_ARGS(r, t, cost), (long long)ra, at.allowed,
               before.allowed);
    }
  }

  if (ch) {
    if (p->pub.algo == SL_SLIDING_LOG)
      slog_commit(p, r->log, t, cost);
    else
      r->st = next;
    r->has = 1;
  }

  if (chk & CHK_RESET) {
    int64_t rs = d.reset_ns;
    sl_decision at = peek_at(r, t + rs, 0);
    if (at.remaining != d.limit || at.reset_ns != 0) {
      dump("decision", &d);
      dump("peek at t+reset", &at);
      fail_msg(WHERE "not fresh at t+reset", WHERE_ARGS(r, t, cost));
    }
    if (rs > 0) {
      sl_decision before = peek_at(r, t + rs - 1, 0);
      if (before.reset_ns != 1) {
        dump("decision", &d);
        dump("peek at t+reset-1", &before);
        fail_msg(WHERE "reset %lld is not the least wait", WHERE_ARGS(r, t, cost),
                 (long long)rs);
      }
    }
  }
  if (chk & CHK_FRESHAT) {
    if (r->has) {
      int64_t fa = p->ops->fresh_at(p, &r->st);
      int64_t want = fa > t ? fa - t : 0;
      if (ch && fa != t + d.reset_ns)
        fail_msg(WHERE "fresh_at=t+%lld after an allowed request, reset %lld",
                 WHERE_ARGS(r, t, cost), (long long)(fa - t),
                 (long long)d.reset_ns);
      if (d.reset_ns != want)
        fail_msg(WHERE "reset %lld but fresh_at is t+%lld", WHERE_ARGS(r, t, cost),
                 (long long)d.reset_ns, (long long)(fa - t));
    } else if (d.reset_ns != 0) {
      fail_msg(WHERE "fresh key reports reset %lld", WHERE_ARGS(r, t, cost),
               (long long)d.reset_ns);
    }
  }
  r->step++;
  return d;
}

/* Runs every trace of every policy of `algo` with the given checks. */
static void run_all(sl_algo algo, unsigned chk) {
  pol pols[MAX_POLICIES];
  size_t n = policies_for(algo, pols);
  static trace tr;
  for (size_t i = 0; i < n; i++) {
    sl_policy pub = pub_of(algo, &pols[i]);
    if (!compiles(&pub)) continue;
    for (uint64_t k = 0; k < 6; k++) {
      uint64_t seed = (uint64_t)i * 1000 + k * 17 + 1;
      runner r;
      runner_init(&r, &pub, seed);
      make_trace(&r.p, seed, &tr);
      r.t_start = tr.t[0];
      for (int s = 0; s < tr.n; s++) runner_step(&r, tr.t[s], tr.cost[s], chk);
      runner_free(&r);
    }
  }
}

#define PER_ALGO_TEST(prop, chk)                                          \
  static void prop##_token_bucket(void **state) {                         \
    (void)state;                                                          \
    run_all(SL_TOKEN_BUCKET, chk);                                        \
  }                                                                       \
  static void prop##_leaky_bucket(void **state) {                         \
    (void)state;                                                          \
    run_all(SL_LEAKY_BUCKET, chk);                                        \
  }                                                                       \
  static void prop##_gcra(void **state) {                                 \
    (void)state;                                                          \
    run_all(SL_GCRA, chk);                                                \
  }                                                                       \
  static void prop##_fixed_window(void **state) {                         \
    (void)state;                                                          \
    run_all(SL_FIXED_WINDOW, chk);                                        \
  }                                                                       \
  static void prop##_sliding_log(void **state) {                          \
    (void)state;                                                          \
    run_all(SL_SLIDING_LOG, chk);                                         \
  }                                                                       \
  static void prop##_sliding_window(void **state) {                       \
    (void)state;                                                          \
    run_all(SL_SLIDING_WINDOW, chk);                                      \
  }

PER_ALGO_TEST(retry_after_is_the_least_wait, CHK_RETRY)
PER_ALGO_TEST(reset_is_the_least_wait_to_fresh, CHK_RESET)
PER_ALGO_TEST(fresh_at_agrees_with_reset, CHK_FRESHAT)
PER_ALGO_TEST(remaining_stays_within_zero_and_limit, CHK_BOUNDS)
PER_ALGO_TEST(state_past_fresh_at_decides_like_a_fresh_key, CHK_FRESHEQ)
PER_ALGO_TEST(only_allowed_cost_changes_state, CHK_CHANGE)

/* ---- bounds over windows and intervals ---------------------------------- */

/* Largest allowed cost in any window (t - W, t] of the trace. */
static void check_window_bound(sl_algo algo, int64_t factor) {
  pol pols[MAX_POLICIES];
  size_t n = policies_for(algo, pols);
  static trace tr;
  static int64_t at[STEPS], ac[STEPS];
  for (size_t i = 0; i < n; i++) {
    sl_policy pub = pub_of(algo, &pols[i]);
    if (!compiles(&pub)) continue;
    for (uint64_t k = 0; k < 3; k++) {
      uint64_t seed = (uint64_t)i * 1000 + k * 17 + 2;
      runner r;
      runner_init(&r, &pub, seed);
      make_trace(&r.p, seed, &tr);
      r.t_start = tr.t[0];
      int na = 0, lo = 0;
      int64_t sum = 0;
      for (int s = 0; s < tr.n; s++) {
        sl_decision d = runner_step(&r, tr.t[s], tr.cost[s], 0);
        if (!d.allowed || tr.cost[s] == 0) continue;
        at[na] = tr.t[s];
        ac[na++] = tr.cost[s];
        sum += tr.cost[s];
        while (at[lo] <= tr.t[s] - r.p.W) sum -= ac[lo++];
        if (sum > factor * r.p.L)
          fail_msg(WHERE "%lld allowed in the window ending here, bound %lld",
                   WHERE_ARGS(&r, tr.t[s], tr.cost[s]), (long long)sum,
                   (long long)(factor * r.p.L));
      }
      runner_free(&r);
    }
  }
}

static void sliding_log_never_allows_more_than_limit_in_any_window(void **state) {
  (void)state;
  check_window_bound(SL_SLIDING_LOG, 1);
}

static void fixed_window_never_allows_more_than_twice_limit_in_any_window(void **state) {
  (void)state;
  check_window_bound(SL_FIXED_WINDOW, 2);
}

/*
 * Over any closed interval [t_i, t_j]: allowed cost <= B + rho * (t_j - t_i),
 * checked as allowed * PERIOD <= B * PERIOD + LIMIT * tau.
 */
static void check_bucket_bound(sl_algo algo) {
  pol pols[MAX_POLICIES];
  size_t n = policies_for(algo, pols);
  static trace tr;
  for (size_t i = 0; i < n; i++) {
    sl_policy pub = pub_of(algo, &pols[i]);
    if (!compiles(&pub)) continue;
    for (uint64_t k = 0; k < 3; k++) {
      uint64_t seed = (uint64_t)i * 1000 + k * 17 + 3;
      runner r;
      runner_init(&r, &pub, seed);
      make_trace(&r.p, seed, &tr);
      r.t_start = tr.t[0];
      /* S_j*W - L*t_j - min_{i<=j}(S_{i-1}*W - L*t_i) <= B*W */
      i128 W = r.p.W, L = r.p.L, S = 0, best = 0;
      int any = 0;
      for (int s = 0; s < tr.n; s++) {
        sl_decision d = runner_step(&r, tr.t[s], tr.cost[s], 0);
        if (!d.allowed || tr.cost[s] == 0) continue;
        i128 g = S * W - L * tr.t[s];
        if (!any || g < best) best = g;
        any = 1;
        S += tr.cost[s];
        if (S * W - L * tr.t[s] - best > (i128)r.p.B * W)
          fail_msg(WHERE "more than B + rho*tau allowed over an interval "
                   "ending here", WHERE_ARGS(&r, tr.t[s], tr.cost[s]));
      }
      runner_free(&r);
    }
  }
}

static void token_bucket_never_exceeds_burst_plus_rate_times_interval(void **state) {
  (void)state;
  check_bucket_bound(SL_TOKEN_BUCKET);
}

static void gcra_never_exceeds_burst_plus_rate_times_interval(void **state) {
  (void)state;
  check_bucket_bound(SL_GCRA);
}

static void leaky_bucket_never_exceeds_burst_plus_rate_times_interval(void **state) {
  (void)state;
  check_bucket_bound(SL_LEAKY_BUCKET);
}

/* ---- the bucket equivalence ----------------------------------------------- */

static void token_bucket_gcra_and_leaky_bucket_decide_alike(void **state) {
  (void)state;
  pol pols[MAX_POLICIES];
  size_t n = policies_for(SL_TOKEN_BUCKET, pols);
  static trace tr;
  for (size_t i = 0; i < n; i++) {
    sl_policy tb = pub_of(SL_TOKEN_BUCKET, &pols[i]);
    if (!compiles(&tb)) continue;
    for (uint64_t k = 0; k < 4; k++) {
      uint64_t seed = (uint64_t)i * 1000 + k * 17 + 4;
      runner r[3];
      const sl_algo algos[3] = {SL_TOKEN_BUCKET, SL_GCRA, SL_LEAKY_BUCKET};
      for (int a = 0; a < 3; a++) {
        sl_policy pub = pub_of(algos[a], &pols[i]);
        runner_init(&r[a], &pub, seed);
      }
      make_trace(&r[0].p, seed, &tr);
      for (int a = 0; a < 3; a++) r[a].t_start = tr.t[0];
      for (int s = 0; s < tr.n; s++) {
        sl_decision d[3];
        for (int a = 0; a < 3; a++) d[a] = runner_step(&r[a], tr.t[s], tr.cost[s], 0);
        for (int a = 1; a < 3; a++) {
          if (d[a].allowed != d[0].allowed || d[a].limit != d[0].limit ||
              d[a].remaining != d[0].remaining ||
              d[a].retry_after_ns != d[0].retry_after_ns ||
              d[a].reset_ns != d[0].reset_ns) {
            dump("token_bucket", &d[0]);
            dump(sl_algo_name(algos[a]), &d[a]);
            fail_msg(WHERE "differs from token_bucket",
                     WHERE_ARGS(&r[a], tr.t[s], tr.cost[s]));
          }
        }
      }
      for (int a = 0; a < 3; a++) runner_free(&r[a]);
    }
  }
}

/* ---- reference models, straight from the spec ----------------------------- */

typedef struct model {
  sl_algo algo;
  i128 L, W, B;
  int has;
  /* token_bucket: tokens*W at `last`; gcra: TAT*L; leaky: free_at*L */
  i128 x;
  int64_t last;
  /* fixed_window / sliding_window: last two windows with traffic */
  int64_t s1, s0;
  i128 c1, c0;
  /* sliding_log */
  int n;
  int64_t lt[STEPS];
  i128 lc[STEPS];
} model;

static i128 floor_div(i128 a, i128 b) {
  i128 q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}
static i128 ceil_div_any(i128 a, i128 b) { return -floor_div(-a, b); }

/* allowed, remaining and (leaky) delay for a request, per the spec. */
static void model_step(model *m, int64_t t, int64_t c, int *allowed,
                       int64_t *remaining, int64_t *delay) {
  i128 L = m->L, W = m->W, B = m->B;
  *delay = 0;
  switch (m->algo) {
  case SL_TOKEN_BUCKET: {
    i128 tok = B * W;
    if (m->has) {
      int64_t te = t > m->last ? t : m->last;
      tok = m->x + L * (te - m->last);
      if (tok > B * W) tok = B * W;
    }
    *allowed = tok >= c * W;
    if (*allowed) tok -= c * W;
    *remaining = (int64_t)floor_div(tok, W);
    if (*allowed && c > 0) {
      m->x = tok;
      m->last = m->has && m->last > t ? m->last : t;
      m->has = 1;
    }
    break;
  }
  case SL_GCRA: {
    i128 now = (i128)t * L;
    i128 tat = m->has && m->x > now ? m->x : now;
    i128 nw = tat + c * W;
    *allowed = nw - now <= B * W;
    i128 after = *allowed ? nw : tat;
    *remaining = (int64_t)floor_div(now + B * W - after, W);
    if (*remaining < 0) *remaining = 0;
    if (*allowed && c > 0) {
      m->x = nw;
      m->has = 1;
    }
    break;
  }
  case SL_LEAKY_BUCKET: {
    i128 now = (i128)t * L;
    i128 fr = m->has && m->x > now ? m->x : now;
    i128 level = fr - now;
    *allowed = level + c * W <= B * W;
    i128 after = *allowed ? level + c * W : level;
    *remaining = (int64_t)floor_div(B * W - after, W);
    if (*remaining < 0) *remaining = 0;
    if (*allowed) *delay = (int64_t)ceil_div_any(level, L);
    if (*allowed && c > 0) {
      m->x = fr + c * W;
      m->has = 1;
    }
    break;
  }
  case SL_FIXED_WINDOW: {
    int64_t k = t - t % (int64_t)W;
    i128 count = m->has && m->s1 == k ? m->c1 : 0;
    *allowed = count + c <= L;
    if (*allowed) count += c;
    *remaining = (int64_t)(L - count);
    if (*allowed && c > 0) {
      m->s1 = k;
      m->c1 = count;
      m->has = 1;
    }
    break;
  }
  case SL_SLIDING_LOG: {
    i128 live = 0;
    for (int i = 0; i < m->n; i++)
      if (m->lt[i] > t - (int64_t)W) live += m->lc[i];
    *allowed = live + c <= L;
    *remaining = (int64_t)(L - live - (*allowed ? c : 0));
    if (*allowed && c > 0) {
      m->lt[m->n] = t;
      m->lc[m->n++] = c;
    }
    break;
  }
  case SL_SLIDING_WINDOW: {
    int64_t k = t - t % (int64_t)W;
    int64_t e = t - k;
    i128 curr = 0, prev = 0;
    if (m->has) {
      if (m->s1 == k) {
        curr = m->c1;
        if (m->s0 == k - (int64_t)W) prev = m->c0;
      } else if (m->s1 == k - (int64_t)W) {
        prev = m->c1;
      }
    }
    *allowed = prev * (W - e) + (curr + c) * W <= L * W;
    if (*allowed) curr += c;
    i128 room = L * W - prev * (W - e) - curr * W;
    *remaining = room < 0 ? 0 : (int64_t)(room / W);
    if (*allowed && c > 0) {
      if (m->has && m->s1 == k) {
        m->c1 = curr;
      } else {
        m->s0 = m->has ? m->s1 : INT64_MIN;
        m->c0 = m->has ? m->c1 : 0;
        m->s1 = k;
        m->c1 = curr;
      }
      m->has = 1;
    }
    break;
  }
  default:
    fail_msg("no model");
  }
}

static void check_model(sl_algo algo) {
  pol pols[MAX_POLICIES];
  size_t n = policies_for(algo, pols);
  static trace tr;
  static model m;
  for (size_t i = 0; i < n; i++) {
    sl_policy pub = pub_of(algo, &pols[i]);
    if (!compiles(&pub)) continue;
    for (uint64_t k = 0; k < 3; k++) {
      uint64_t seed = (uint64_t)i * 1000 + k * 17 + 5;
      runner r;
      runner_init(&r, &pub, seed);
      make_trace(&r.p, seed, &tr);
      r.t_start = tr.t[0];
      memset(&m, 0, sizeof m);
      m.algo = algo;
      m.L = r.p.L;
      m.W = r.p.W;
      m.B = r.p.B;
      for (int s = 0; s < tr.n; s++) {
        int allowed = -1;
        int64_t remaining = -1, delay = -1;
        model_step(&m, tr.t[s], tr.cost[s], &allowed, &remaining, &delay);
        int64_t st = r.step;
        sl_decision d = runner_step(&r, tr.t[s], tr.cost[s], 0);
        if (d.allowed != allowed || d.remaining != remaining ||
            (algo == SL_LEAKY_BUCKET && d.delay_ns != delay)) {
          dump("library", &d);
          print_message("  model: allowed=%d remaining=%lld delay=%lld\n",
                        allowed, (long long)remaining, (long long)delay);
          r.step = (int)st;
          fail_msg(WHERE "differs from the spec's model",
                   WHERE_ARGS(&r, tr.t[s], tr.cost[s]));
        }
      }
      runner_free(&r);
    }
  }
}

static void token_bucket_matches_spec_model(void **state) {
  (void)state;
  check_model(SL_TOKEN_BUCKET);
}
static void gcra_matches_spec_model(void **state) {
  (void)state;
  check_model(SL_GCRA);
}
static void leaky_bucket_matches_spec_model_including_delay(void **state) {
  (void)state;
  check_model(SL_LEAKY_BUCKET);
}
static void fixed_window_matches_spec_model(void **state) {
  (void)state;
  check_model(SL_FIXED_WINDOW);
}
static void sliding_log_matches_spec_model(void **state) {
  (void)state;
  check_model(SL_SLIDING_LOG);
}
static void sliding_window_matches_spec_model(void **state) {
  (void)state;
  check_model(SL_SLIDING_WINDOW);
}

/* Consecutive allowed leaky requests leave (at least) cost*T apart. */
static void leaky_bucket_spaces_departures_by_cost_times_T(void **state) {
  (void)state;
  pol pols[MAX_POLICIES];
  size_t n = policies_for(SL_LEAKY_BUCKET, pols);
  static trace tr;
  for (size_t i = 0; i < n; i++) {
    sl_policy pub = pub_of(SL_LEAKY_BUCKET, &pols[i]);
    if (!compiles(&pub)) continue;
    uint64_t seed = (uint64_t)i * 1000 + 6;
    runner r;
    runner_init(&r, &pub, seed);
    make_trace(&r.p, seed, &tr);
    r.t_start = tr.t[0];
    int any = 0;
    int64_t prev_dep = 0, prev_cost = 0;
    for (int s = 0; s < tr.n; s++) {
      sl_decision d = runner_step(&r, tr.t[s], tr.cost[s], 0);
      if (!d.allowed || tr.cost[s] == 0) continue;
      int64_t dep = tr.t[s] + d.delay_ns;
      if (any) {
        /* dep >= prev_dep + prev_cost*T, within rounding up to 1 ns */
        i128 gap = (i128)(dep - prev_dep) * r.p.L;
        i128 need = (i128)prev_cost * r.p.W - r.p.L;
        if (gap < need)
          fail_msg(WHERE "left %lld ns after the previous (cost %lld)",
                   WHERE_ARGS(&r, tr.t[s], tr.cost[s]),
                   (long long)(dep - prev_dep), (long long)prev_cost);
        /* and never later than needed: the queue is work-conserving */
        if (d.delay_ns > 0 && (dep - prev_dep - 1) * (i128)r.p.L >
                                  (i128)prev_cost * r.p.W)
          fail_msg(WHERE "waits %lld ns after the previous (cost %lld)",
                   WHERE_ARGS(&r, tr.t[s], tr.cost[s]),
                   (long long)(dep - prev_dep), (long long)prev_cost);
      }
      any = 1;
      prev_dep = dep;
      prev_cost = tr.cost[s];
    }
    runner_free(&r);
  }
}

/* ---- extremes --------------------------------------------------------------- */

/*
 * The largest limits and bursts, the longest and shortest periods, and times
 * up to the end of the valid range: every definition still holds (and the
 * sanitizer builds see no overflow). Policies that validation rejects for
 * exactness (bucket refill horizons) are skipped.
 */
static void extreme_policies_hold_to_every_definition(void **state) {
  (void)state;
  static const pol ext[] = {
      {4294967295u, 0, NS_PER_MS},
      {4294967295u, 4294967295u, NS_PER_S},
      {4294967295u, 1, NS_PER_S},
      {1, 4294967295u, NS_PER_MS},
      {1, 0, SL_PERIOD_MAX_NS},
      {4294967295u, 0, SL_PERIOD_MAX_NS},
      {4294967291u, 0, 999999937 * NS_PER_MS},
      {65537, 3, NS_PER_MS},
      {3, 65537, NS_PER_MS},
  };
  const unsigned all = CHK_RETRY | CHK_RESET | CHK_FRESHAT | CHK_BOUNDS |
                       CHK_FRESHEQ | CHK_CHANGE;
  static trace tr;
  int ran = 0;
  for (int a = 0; a < SL_RATE_ALGO_COUNT; a++) {
    for (size_t i = 0; i < sizeof ext / sizeof ext[0]; i++) {
      sl_policy pub = pub_of((sl_algo)a, &ext[i]);
      algo_policy ap;
      if (algo_policy_compile(&pub, &ap, NULL, 0) != 0) continue;
      for (uint64_t k = 0; k < 4; k++) {
        uint64_t seed = (uint64_t)i * 1000 + k * 17 + 8 + (uint64_t)a * 100000;
        /* half the traces end near SL_TIME_MAX_NS */
        int64_t t0 = k % 2 && ap.W < SL_TIME_MAX_NS / 1200
                         ? SL_TIME_MAX_NS - 600 * ap.W
                         : T0;
        runner r;
        runner_init(&r, &pub, seed);
        make_trace_from(&r.p, seed, t0, &tr);
        r.t_start = tr.t[0];
        for (int s = 0; s < tr.n; s++) runner_step(&r, tr.t[s], tr.cost[s], all);
        runner_free(&r);
        ran++;
      }
    }
  }
  assert_true(ran >= 4 * 6 * 5);
}

/* ---- the store decides like the pure algorithm ---------------------------- */

/*
 * Several keys through one limiter, interleaved, against one pure runner per
 * key: every figure must match. Keys cover the empty key, inline keys up to
 * 16 bytes, long keys, and keys that differ only by trailing NUL bytes.
 */
#define NSPECIAL 10
#define NKEYS (NSPECIAL + 30)
static void check_limiter_like_pure(sl_algo algo) {
  static char big[SL_KEY_MAX];
  memset(big, 'k', sizeof big);
  static const struct {
    const char *b;
    size_t len;
  } special[NSPECIAL] = {
      {"", 0},           {"ab", 2},        {"ab\0", 3},
      {"ab\0\0", 4},     {"0123456789abcdef", 16},
      {"0123456789abcdef\0", 17},          {"0123456789abcdefg", 17},
      {NULL, SL_KEY_MAX}, {NULL, SL_KEY_MAX - 1},
      {"0123456789abcdeX", 16},
  };
  /* Plus keys that differ only in their first or their second 8 bytes. */
  static char gen[NKEYS - NSPECIAL][17];
  const char *kb[NKEYS];
  size_t kl[NKEYS];
  for (int k = 0; k < NKEYS; k++) {
    if (k < NSPECIAL) {
      kb[k] = special[k].b ? special[k].b : big;
      kl[k] = special[k].len;
    } else {
      int j = k - NSPECIAL;
      if (j % 2)
        snprintf(gen[j], sizeof gen[j], "0123456789abcd%02d", j);
      else
        snprintf(gen[j], sizeof gen[j], "%02d3456789abcdef", j);
      kb[k] = gen[j];
      kl[k] = 16;
    }
  }
  static const uint8_t hkey[16] = {1, 2, 3, 4, 5, 6, 7, 8,
                                   9, 10, 11, 12, 13, 14, 15, 16};
  pol pols[MAX_POLICIES];
  size_t n = policies_for(algo, pols);
  static trace tr;
  for (size_t i = 0; i < n; i++) {
    sl_policy pub = pub_of(algo, &pols[i]);
    if (!compiles(&pub)) continue;
    uint64_t seed = (uint64_t)i * 1000 + 7;
    /* One shard and a fixed hash key: keys share a table and collide. */
    sl_store_options o;
    sl_store_options_init(&o);
    o.shards = 1;
    o.hash_key = hkey;
    sl_store *s = NULL;
    assert_int_equal(sl_store_new(&o, &s), 0);
    sl_limiter *lim = NULL;
    assert_int_equal(sl_limiter_new(s, &pub, &lim), 0);
    static runner r[NKEYS];
    for (int k = 0; k < NKEYS; k++) runner_init(&r[k], &pub, seed);
    make_trace(&r[0].p, seed, &tr);
    for (int k = 0; k < NKEYS; k++) r[k].t_start = tr.t[0];
    rng pick = {seed ^ UINT64_C(0xabcdef)};
    for (int st = 0; st < tr.n; st++) {
      int k = (int)rng_range(&pick, 0, NKEYS - 1);
      sl_decision want = runner_step(&r[k], tr.t[st], tr.cost[st], 0);
      sl_decision got;
      memset(&got, 0x5a, sizeof got);
      int rc = sl_limiter_take(lim, kb[k], kl[k], tr.cost[st],
                               tr.t[st], &got);
      if (rc != 0 || !same_decision(&got, &want)) {
        dump("pure", &want);
        dump("limiter", &got);
        fail_msg(WHERE "key #%d (%zu bytes): limiter rc=%d differs from the "
                 "pure algorithm", WHERE_ARGS(&r[k], tr.t[st], tr.cost[st]), k,
                 kl[k], rc);
      }
    }
    for (int k = 0; k < NKEYS; k++) runner_free(&r[k]);
    sl_limiter_free(lim);
    sl_store_free(s);
  }
}

static void limiter_decides_like_the_pure_algorithm_token_bucket(void **state) {
  (void)state;
  check_limiter_like_pure(SL_TOKEN_BUCKET);
}
static void limiter_decides_like_the_pure_algorithm_leaky_bucket(void **state) {
  (void)state;
  check_limiter_like_pure(SL_LEAKY_BUCKET);
}
static void limiter_decides_like_the_pure_algorithm_gcra(void **state) {
  (void)state;
  check_limiter_like_pure(SL_GCRA);
}
static void limiter_decides_like_the_pure_algorithm_fixed_window(void **state) {
  (void)state;
  check_limiter_like_pure(SL_FIXED_WINDOW);
}
static void limiter_decides_like_the_pure_algorithm_sliding_log(void **state) {
  (void)state;
  check_limiter_like_pure(SL_SLIDING_LOG);
}
static void limiter_decides_like_the_pure_algorithm_sliding_window(void **state) {
  (void)state;
  check_limiter_like_pure(SL_SLIDING_WINDOW);
}

#define ALGO_TESTS(prop)                                                  \
  cmocka_unit_test(prop##_token_bucket),                                  \
      cmocka_unit_test(prop##_leaky_bucket), cmocka_unit_test(prop##_gcra), \
      cmocka_unit_test(prop##_fixed_window),                              \
      cmocka_unit_test(prop##_sliding_log),                               \
      cmocka_unit_test(prop##_sliding_window)

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(sliding_log_never_allows_more_than_limit_in_any_window),
      cmocka_unit_test(fixed_window_never_allows_more_than_twice_limit_in_any_window),
      cmocka_unit_test(token_bucket_never_exceeds_burst_plus_rate_times_interval),
      cmocka_unit_test(gcra_never_exceeds_burst_plus_rate_times_interval),
      cmocka_unit_test(leaky_bucket_never_exceeds_burst_plus_rate_times_interval),
      ALGO_TESTS(retry_after_is_the_least_wait),
      ALGO_TESTS(reset_is_the_least_wait_to_fresh),
      ALGO_TESTS(fresh_at_agrees_with_reset),
      ALGO_TESTS(remaining_stays_within_zero_and_limit),
      ALGO_TESTS(state_past_fresh_at_decides_like_a_fresh_key),
      ALGO_TESTS(only_allowed_cost_changes_state),
      cmocka_unit_test(token_bucket_gcra_and_leaky_bucket_decide_alike),
      cmocka_unit_test(token_bucket_matches_spec_model),
      cmocka_unit_test(gcra_matches_spec_model),
      cmocka_unit_test(leaky_bucket_matches_spec_model_including_delay),
      cmocka_unit_test(fixed_window_matches_spec_model),
      cmocka_unit_test(sliding_log_matches_spec_model),
      cmocka_unit_test(sliding_window_matches_spec_model),
      cmocka_unit_test(leaky_bucket_spaces_departures_by_cost_times_T),
      ALGO_TESTS(limiter_decides_like_the_pure_algorithm),
      cmocka_unit_test(extreme_policies_hold_to_every_definition),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
