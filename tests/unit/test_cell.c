/*
 * test_cell.c — CL.THROTTLE as redis-cell decides it (src/algo/cell.c):
 * redis-cell's own test table (redis-cell-impl/src/lib.rs, it_rate_limits),
 * its rates (the truncated emission interval, zero rates), one state per
 * key through the engine when calls alternate rates on one key (a trace
 * worked out by hand from redis-cell's rate_limit), and thousands of
 * distinct rates that cost nothing but their keys.
 */
#include "helpers.h"

#include "algo/cell.h"
#include "engine/engine.h"
#include "rules/config.h"
#include "engine_fixture.h"


static const char *const empty_yaml = "domain: d\ndescriptors: []\n";

/* redis-cell's seconds in its reply: whole, plus one if >= 1 ms is left. */
static int64_t secs(int64_t ns) {
  return ns / NS_PER_S + ((ns % NS_PER_S) / NS_PER_MS > 0);
}

static algo_cell rate_of(int64_t burst, int64_t count, int64_t period) {
  algo_cell c;
  assert_int_equal(algo_cell_rate(burst, count, period, &c), 0);
  return c;
}

/* redis-cell's it_rate_limits, case for case: limit 5 at 1 per second. */
static void redis_cells_own_table(void **state) {
  (void)state;
  algo_cell c = rate_of(4, 1, 1);
  static const struct {
    int64_t at_ms, qty, remaining, reset_ms, retry_ms;
    int limited;
  } cases[] = {
      {0, 6, 5, 0, -1, 1},       {0, 1, 4, 1000, -1, 0},
      {0, 1, 3, 2000, -1, 0},    {0, 1, 2, 3000, -1, 0},
      {0, 1, 1, 4000, -1, 0},    {0, 1, 0, 5000, -1, 0},
      {0, 1, 0, 5000, 1000, 1},  {3000, 1, 2, 3000, -1, 0},
      {3100, 1, 1, 3900, -1, 0}, {4000, 1, 1, 4000, -1, 0},
      {8000, 1, 4, 1000, -1, 0}, {9500, 1, 4, 1000, -1, 0},
      {9500, 0, 4, 1000, -1, 0}, {9500, 2, 2, 3000, -1, 0},
      {9500, 5, 2, 3000, 3000, 1},
  };
  int64_t tat = -1;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    sl_decision d;
    int64_t next = 0;
    int changed = algo_cell_decide(&c, tat, T0 + cases[i].at_ms * NS_PER_MS,
                                   cases[i].qty, &d, &next);
    if (changed) tat = next;
    if (d.allowed == cases[i].limited || d.limit != 5 ||
        d.remaining != cases[i].remaining ||
        d.reset_ns != cases[i].reset_ms * NS_PER_MS ||
        d.retry_after_ns !=
            (cases[i].retry_ms < 0 ? -1 : cases[i].retry_ms * NS_PER_MS))
      fail_msg("case %zu: allowed %d remaining %lld reset %lld retry %lld", i,
               d.allowed, (long long)d.remaining, (long long)d.reset_ns,
               (long long)d.retry_after_ns);
  }
}

/* Rate::per_period: a double division truncated to whole ns; an interval
   that truncates to 0 is redis-cell's "Zero rates are not supported". */
static void rates_truncate_as_redis_cell_does(void **state) {
  (void)state;
  algo_cell c = rate_of(0, 3, 1);
  assert_int_equal(c.ei, 333333333);
  assert_int_equal(c.dvt, 333333333);
  c = rate_of(14, 30, 60);
  assert_int_equal(c.ei, 2 * NS_PER_S);
  assert_int_equal(c.limit, 15);
  assert_int_equal(algo_cell_rate(0, 4294967295, 1, &c), 1);
  assert_int_equal(algo_cell_rate(-1, 1, 1, &c), -1);
  assert_int_equal(algo_cell_rate(0, 0, 1, &c), -1);
  assert_int_equal(algo_cell_rate(0, 1, 0, &c), -1);
  /* A full burst that takes more than 2^60 ns to drain. */
  assert_int_equal(algo_cell_rate(4294967294, 1, 315360000, &c), -1);
}

/* One CL.THROTTLE through the engine; the reply's five numbers. */
static void cl(engine_thread *t, const char *key, int64_t burst,
               int64_t count, int64_t period, int64_t qty, int64_t now,
               const int64_t want[5]) {
  algo_cell rate = rate_of(burst, count, period);
  sl_policy p = {SL_GCRA, (uint32_t)count, (uint32_t)(burst + 1),
                 period * NS_PER_S};
  eng_query q = {.kind = ENG_QUERY_CELL, .key = key, .key_len = strlen(key),
                 .policy = &p, .cell = &rate, .cost = qty, .now = now};
  eng_result r;
  int rc = engine_decide(t, &q, &r, NULL, NULL);
  if (rc) fail_msg("CL.THROTTLE %s: rc %d: %s", key, rc, r.msg);
  const sl_decision *d = &r.st[0].d;
  int64_t got[5] = {!d->allowed, d->limit, d->remaining,
                    !d->allowed && d->retry_after_ns >= 0
                        ? secs(d->retry_after_ns)
                        : -1,
                    secs(d->reset_ns)};
  for (int i = 0; i < 5; i++)
    if (got[i] != want[i])
      fail_msg("CL.THROTTLE %s %lld %lld %lld %lld at +%lld ms: got [%lld "
               "%lld %lld %lld %lld], want [%lld %lld %lld %lld %lld]",
               key, (long long)burst, (long long)count, (long long)period,
               (long long)qty, (long long)((now - T0) / NS_PER_MS),
               (long long)got[0], (long long)got[1], (long long)got[2],
               (long long)got[3], (long long)got[4], (long long)want[0],
               (long long)want[1], (long long)want[2], (long long)want[3],
               (long long)want[4]);
}

/*
 * One key, two rates in turn: A = 4 1 1 (limit 5, ei 1 s), B = 1 2 1
 * (limit 2, ei 0.5 s), and C = 0 3 1 (ei 333333333 ns) on another key.
 * Each line worked out by hand from redis-cell's rate_limit: every call
 * applies its own rate to the key's one TAT.
 */
static void alternating_rates_share_one_state(void **state) {
  (void)state;
  fixture f = fixture_with(NULL, empty_yaml);
  engine_thread *t = f.t;
  /* TAT 0 -> 1 s -> 2 s. */
  cl(t, "k", 4, 1, 1, 1, T0, (int64_t[]){0, 5, 4, -1, 1});
  cl(t, "k", 4, 1, 1, 1, T0, (int64_t[]){0, 5, 3, -1, 2});
  /* B sees A's TAT: new 2.5 s, 1.5 s past its tolerance of 1 s. */
  cl(t, "k", 1, 2, 1, 1, T0, (int64_t[]){1, 2, 0, 2, 2});
  /* At 1.5 s B just fits (TAT 2.5 s); A then goes on from it. */
  cl(t, "k", 1, 2, 1, 1, T0 + 1500 * NS_PER_MS, (int64_t[]){0, 2, 0, -1, 1});
  cl(t, "k", 4, 1, 1, 1, T0 + 1500 * NS_PER_MS, (int64_t[]){0, 5, 3, -1, 2});
  /* Peeks: A has room, B's tolerance is 1 s under a TAT 2 s ahead. */
  cl(t, "k", 4, 1, 1, 0, T0 + 1500 * NS_PER_MS, (int64_t[]){0, 5, 3, -1, 2});
  cl(t, "k", 1, 2, 1, 0, T0 + 1500 * NS_PER_MS, (int64_t[]){1, 2, 0, 1, 2});
  /* More than A's limit never fits: limited, no retry. */
  cl(t, "k", 4, 1, 1, 6, T0 + 1500 * NS_PER_MS, (int64_t[]){1, 5, 3, -1, 2});
  /* TAT 3.5 s is past at 5 s: B starts afresh. */
  cl(t, "k", 1, 2, 1, 1, T0 + 5000 * NS_PER_MS, (int64_t[]){0, 2, 1, -1, 1});
  /* A third of a second: truncated to whole ns, as redis-cell does. */
  cl(t, "c", 0, 3, 1, 1, T0 + 10 * NS_PER_S, (int64_t[]){0, 1, 0, -1, 1});
  cl(t, "c", 0, 3, 1, 1, T0 + 10 * NS_PER_S, (int64_t[]){1, 1, 0, 1, 1});
  fixture_free(&f);
}

/* 2,000 distinct rates on one key and on 2,000 keys: no ad-hoc policy is
   made, nothing is refused, and the store holds one state per key. */
static void distinct_rates_exhaust_nothing(void **state) {
  (void)state;
  fixture f = fixture_with(NULL, empty_yaml);
  char key[32];
  for (int64_t i = 1; i <= 2000; i++) {
    algo_cell rate = rate_of(10, i, 3600);
    sl_policy p = {SL_GCRA, (uint32_t)i, 11, 3600 * NS_PER_S};
    for (int same = 0; same < 2; same++) {
      snprintf(key, sizeof key, same ? "one" : "k%lld", (long long)i);
      eng_query q = {.kind = ENG_QUERY_CELL, .key = key,
                     .key_len = strlen(key), .policy = &p, .cell = &rate,
                     .cost = 1, .now = T0};
      eng_result r;
      int rc = engine_decide(f.t, &q, &r, NULL, NULL);
      if (rc) fail_msg("rate %lld: rc %d: %s", (long long)i, rc, r.msg);
    }
  }
  sl_store_stats st;
  sl_store_stats_get(engine_store(f.e), &st);
  assert_int_equal(st.keys, 2001);
  fixture_free(&f);
}

/* A reset of the key under every ad-hoc policy forgets its cell state. */
static void a_reset_forgets_the_cell_state(void **state) {
  (void)state;
  fixture f = fixture_with(NULL, empty_yaml);
  cl(f.t, "r", 0, 1, 60, 1, T0, (int64_t[]){0, 1, 0, -1, 60});
  cl(f.t, "r", 0, 1, 60, 1, T0, (int64_t[]){1, 1, 0, 60, 60});
  eng_query q = {.kind = ENG_QUERY_POLICY, .key = "r", .key_len = 1};
  eng_reset out;
  assert_int_equal(engine_reset(f.t, &q, &out, NULL, NULL), 0);
  assert_int_equal(out.dropped, 1);
  cl(f.t, "r", 0, 1, 60, 1, T0, (int64_t[]){0, 1, 0, -1, 60});
  fixture_free(&f);
}

/* One query of a trace: SL.THROTTLE key spec cost, or CL.THROTTLE key
   max_burst count period qty (spec NULL). */
typedef struct step {
  const char *key, *spec;
  int64_t burst, count, period, cost;
} step;

static const step trace[] = {
    {"a", "gcra:1000/h", 0, 0, 0, 1},
    {"a", "gcra:1000/h", 0, 0, 0, 1},
    {"c", NULL, 4, 1, 1, 1},
    {"b", "token_bucket:2/s", 0, 0, 0, 2},
    {"b", "token_bucket:2/s", 0, 0, 0, 1}, /* denied */
    {"c", NULL, 1, 2, 1, 1},               /* another rate, one state */
    {"x", "bogus", 0, 0, 0, 1},            /* refused policy */
    {"b", "token_bucket:2/s", 0, 0, 0, 3}, /* above the burst */
    {"c", NULL, 4, 1, 1, 7},               /* never fits */
    {"a", "sliding_log:3/m", 0, 0, 0, 0},  /* a peek */
    {"d", NULL, 0, 3, 1, 1},
    {"d", NULL, 0, 3, 1, 1},
    {"a", "gcra:1000/h", 0, 0, 0, 2},
};
#define TRACE_N (sizeof trace / sizeof trace[0])

/* The queries of trace at now, into q (with the rates and policies they
   point to). */
static void trace_queries(eng_query *q, algo_cell *rate, sl_policy *p,
                          int64_t now) {
  for (size_t i = 0; i < TRACE_N; i++) {
    const step *s = &trace[i];
    q[i] = (eng_query){.key = s->key, .key_len = strlen(s->key),
                       .cost = s->cost, .now = now};
    if (s->spec) {
      q[i].kind = ENG_QUERY_POLICY;
      q[i].spec = s->spec;
      q[i].spec_len = strlen(s->spec);
      continue;
    }
    rate[i] = rate_of(s->burst, s->count, s->period);
    p[i] = (sl_policy){SL_GCRA, (uint32_t)s->count, (uint32_t)(s->burst + 1),
                       s->period * NS_PER_S};
    q[i].kind = ENG_QUERY_CELL;
    q[i].cell = &rate[i];
    q[i].policy = &p[i];
  }
}

/* A pipeline's decisions in one engine_decide_batch (what it cannot
   decide, alone, as resp_batch.c does) equal one engine_decide each, in
   order, field for field and error for error. */
static void a_batch_decides_as_one_at_a_time(void **state) {
  (void)state;
  eng_query q[TRACE_N];
  algo_cell rate[TRACE_N];
  sl_policy p[TRACE_N];
  trace_queries(q, rate, p, T0);
  fixture one = fixture_with(NULL, empty_yaml);
  fixture many = fixture_with(NULL, empty_yaml);
  eng_batch_item it[TRACE_N];
  for (size_t i = 0; i < TRACE_N; i++) it[i].q = &q[i];
  /* In two batches, as a full one and the rest would go. */
  assert_int_equal(engine_decide_batch(many.t, it, 8), 0);
  assert_int_equal(engine_decide_batch(many.t, it + 8, TRACE_N - 8), 0);
  for (size_t i = 0; i < TRACE_N; i++) {
    eng_result r1, r2;
    int rc1 = engine_decide(one.t, &q[i], &r1, NULL, NULL);
    int rc2 = it[i].rc;
    if (rc2) { /* undecided: decided alone, and charged nothing before */
      rc2 = engine_decide(many.t, &q[i], &r2, NULL, NULL);
      assert_string_equal(r1.msg, r2.msg);
    } else {
      r2.st[0].d = it[i].d;
    }
    if (rc1 != rc2) fail_msg("step %zu: rc %d alone, %d batched", i, rc1, rc2);
    const sl_decision *a = &r1.st[0].d, *b = &r2.st[0].d;
    if (!rc1 && (a->allowed != b->allowed || a->limit != b->limit ||
                 a->remaining != b->remaining || a->reset_ns != b->reset_ns ||
                 a->retry_after_ns != b->retry_after_ns ||
                 a->delay_ns != b->delay_ns))
      fail_msg("step %zu: decisions differ (allowed %d/%d remaining "
               "%lld/%lld reset %lld/%lld)",
               i, r1.st[0].d.allowed, r2.st[0].d.allowed,
               (long long)r1.st[0].d.remaining, (long long)r2.st[0].d.remaining,
               (long long)r1.st[0].d.reset_ns, (long long)r2.st[0].d.reset_ns);
  }
  assert_int_not_equal(it[4].d.allowed, 1); /* the trace has denials */
  assert_int_not_equal(it[6].rc, 0);        /* and refusals */
  fixture_free(&one);
  fixture_free(&many);
}

/* What an observer saw: one line per decision. */
typedef struct seen {
  char line[TRACE_N][128];
  size_t n;
} seen;

static void record(void *ud, unsigned slot, const eng_query *q,
                   const eng_result *out) {
  (void)slot;
  seen *s = ud;
  assert_true(s->n < TRACE_N);
  const eng_status *st = &out->st[0];
  snprintf(s->line[s->n++], sizeof s->line[0],
           "%.*s %s n=%zu allowed=%d/%d limit=%lld remaining=%lld "
           "reset=%lld worst=%d",
           (int)q->key_len, (const char *)q->key, st->policy_str, out->n,
           out->allowed, st->d.allowed, (long long)st->d.limit,
           (long long)st->d.remaining, (long long)st->d.reset_ns, out->worst);
}

/* With an observer (top keys, the denial log), a pipeline is still
   batched, and the observer sees every batched decision as engine_decide
   shows it, in order. */
static void a_batch_shows_the_observer_each_decision(void **state) {
  (void)state;
  eng_query q[TRACE_N];
  algo_cell rate[TRACE_N];
  sl_policy p[TRACE_N];
  trace_queries(q, rate, p, T0);
  seen s1 = {.n = 0}, s2 = {.n = 0};
  engine_opts o1 = {.observe = record, .observe_ud = &s1};
  engine_opts o2 = {.observe = record, .observe_ud = &s2};
  fixture one = fixture_with(&o1, empty_yaml);
  fixture many = fixture_with(&o2, empty_yaml);
  eng_batch_item it[TRACE_N];
  for (size_t i = 0; i < TRACE_N; i++) it[i].q = &q[i];
  assert_int_equal(engine_decide_batch(many.t, it, 8), 0);
  assert_int_equal(engine_decide_batch(many.t, it + 8, TRACE_N - 8), 0);
  size_t decided = 0;
  for (size_t i = 0; i < TRACE_N; i++) {
    eng_result r;
    int rc = engine_decide(one.t, &q[i], &r, NULL, NULL);
    assert_int_equal(rc != 0, it[i].rc != 0); /* (refusals: no decision) */
    decided += rc == 0;
  }
  assert_int_equal(s1.n, decided);
  assert_int_equal(s2.n, decided);
  for (size_t i = 0; i < decided; i++)
    assert_string_equal(s2.line[i], s1.line[i]);
  fixture_free(&one);
  fixture_free(&many);
}

/* CL.THROTTLE's arguments (algo_cell_args, both front ends' one check):
   redis-cell's texts and order, Rust's integer parse, sluice's bounds. */
static void arguments_are_checked_as_redis_cell_checks_them(void **state) {
  (void)state;
  static const struct {
    const char *words[7];
    const char *want; /* NULL: accepted */
  } cases[] = {
      {{"CL.THROTTLE", "k", "1", "2"}, ALGO_CELL_USAGE},
      {{"CL.THROTTLE", "k", "1", "2", "3", "4", "5"}, ALGO_CELL_USAGE},
      {{"cl.throttle", "k", "x", "y", "60"},
       "Cell error: Store error: Couldn't parse as integer: x"},
      {{"CL.THROTTLE", "k", "1", " 1", "60"},
       "Cell error: Store error: Couldn't parse as integer:  1"},
      {{"CL.THROTTLE", "k", "1", "1.0", "60"},
       "Cell error: Store error: Couldn't parse as integer: 1.0"},
      {{"CL.THROTTLE", "k", "9223372036854775808", "1", "60"},
       "Cell error: Store error: Couldn't parse as integer: "
       "9223372036854775808"},
      {{"CL.THROTTLE", "k", "1", "1", "60", ""},
       "Cell error: Store error: Couldn't parse as integer: "},
      /* the zero rate before any range, as redis-cell (which has none) */
      {{"CL.THROTTLE", "k", "-1", "0", "60"},
       "Cell error: Store error: Zero rates are not supported"},
      {{"CL.THROTTLE", "k", "1", "5", "0", "-3"},
       "Cell error: Store error: Zero rates are not supported"},
      {{"CL.THROTTLE", "k", "1", "2000000000", "1"},
       "Cell error: Store error: Zero rates are not supported"},
      {{"CL.THROTTLE", "k", "1", "-1", "5"},
       "Cell error: Store error: count per period must be positive, at most "
       "4294967295 (got -1)"},
      {{"CL.THROTTLE", "k", "1", "1", "-5"},
       "Cell error: Store error: period must be positive, at most 315360000 "
       "seconds (got -5)"},
      {{"CL.THROTTLE", "k", "-1", "1", "5"},
       "Cell error: Store error: max_burst must be 0..4294967294 (got -1)"},
      {{"CL.THROTTLE", "k", "1", "1", "5", "-2"},
       "Cell error: Store error: quantity must be >= 0 (got -2)"},
      {{"CL.THROTTLE", "k", "+15", "30", "60"}, NULL},
      {{"CL.THROTTLE", "k", "15", "30", "60", "0"}, NULL},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    size_t len[7] = {0};
    int argc = 0;
    while (argc < 7 && cases[i].words[argc]) {
      len[argc] = strlen(cases[i].words[argc]);
      argc++;
    }
    algo_cell rate;
    int64_t v[4];
    char err[400] = "";
    int rc = algo_cell_args(argc, cases[i].words, len, &rate, v, err,
                            sizeof err);
    if (!cases[i].want) {
      assert_int_equal(rc, 0);
      continue;
    }
    assert_int_equal(rc, -1);
    assert_string_equal(err, cases[i].want);
  }
  /* the numbers, the rate, a quantity of 1 when not given */
  const char *w[] = {"CL.THROTTLE", "k", "+15", "30", "60"};
  size_t len[] = {11, 1, 3, 2, 2};
  algo_cell rate;
  int64_t v[4];
  char err[64];
  assert_int_equal(algo_cell_args(5, w, len, &rate, v, err, sizeof err), 0);
  assert_int_equal(v[0], 15);
  assert_int_equal(v[1], 30);
  assert_int_equal(v[2], 60);
  assert_int_equal(v[3], 1);
  assert_int_equal(rate.ei, 2 * NS_PER_S);
  assert_int_equal(rate.limit, 16);
  assert_int_equal(rate.dvt, 32 * NS_PER_S);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(redis_cells_own_table),
      cmocka_unit_test(rates_truncate_as_redis_cell_does),
      cmocka_unit_test(alternating_rates_share_one_state),
      cmocka_unit_test(distinct_rates_exhaust_nothing),
      cmocka_unit_test(a_reset_forgets_the_cell_state),
      cmocka_unit_test(a_batch_decides_as_one_at_a_time),
      cmocka_unit_test(a_batch_shows_the_observer_each_decision),
      cmocka_unit_test(arguments_are_checked_as_redis_cell_checks_them),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
