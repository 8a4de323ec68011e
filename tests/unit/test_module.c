/*
 * test_module.c — the Redis module's commands (src/module/) called
 * directly, through the fake Redis of fake_redis.c, so that they run under
 * ASan/UBSan (a sanitized module cannot load into a plain redis-server;
 * tests/integration/module.sh runs the real one).
 *
 * Loading (the commands, their flags and key positions, the API fetched
 * by name), replies on a fixed clock, every error, keys of another type
 * left untouched, TTLs equal to the time to fresh, what is replicated,
 * sliding_log's hash, SL.DECIDE's keys, modes and all-or-nothing, redis-
 * cell's own key format, and the library's decisions on random traces.
 * Every command is checked to answer exactly one well-formed reply, to
 * free every string it made, to use the API as Redis allows, and to
 * signal as modified exactly the keys it wrote.
 */
#include "helpers.h"

#include "algo/algo.h"
#include "base/fmt.h"
#include "fake_redis.h"

#define T0_MS (INT64_C(1767225600) * 1000)
#define WT "WRONGTYPE Operation against a key holding the wrong kind of value"

static RedisModuleCtx ctx;

/* Checks that the last command behaved (one reply, nothing leaked, the
   API used as Redis allows) and returns its reply's text. */
static const char *checked(int rc) {
  const char *why;
  assert_int_equal(rc, REDISMODULE_OK);
  if (!fake_reply_ok(&ctx)) fail_msg("not one complete reply");
  if (fake_live_strings() != 0)
    fail_msg("%ld strings not freed", fake_live_strings());
  if (fake_violations(&why)) fail_msg("API misuse: %s", why);
  return fake_reply_text(&ctx);
}

/* Runs command `name` with the NULL-terminated words after it. */
static const char *run(const char *name, ...) {
  const char *args[32];
  int n = 0;
  va_list ap;
  va_start(ap, name);
  while ((args[n] = va_arg(ap, const char *))) n++;
  va_end(ap);
  return checked(fake_call(&ctx, name, n, args));
}

#define RUN(...) run(__VA_ARGS__, (const char *)NULL)
#define EXPECT(want, ...) assert_string_equal(RUN(__VA_ARGS__), want)

/* The module loaded with TESTCLOCK, the clock at T0. */
static int setup(void **state) {
  (void)state;
  const char *args[] = {"TESTCLOCK"};
  assert_int_equal(fake_init(T0_MS, args, 1, NULL), REDISMODULE_OK);
  fake_ctx_init(&ctx, "");
  char ns[32];
  snprintf(ns, sizeof ns, "%lld", (long long)T0);
  EXPECT("OK", "sl.clock", ns);
  return 0;
}

static int teardown(void **state) {
  (void)state;
  fake_ctx_clear(&ctx);
  fake_reset();
  fake_refuse_event(0);
  return 0;
}

/* Sets the module's test clock to T0 + ms. */
static void clock_at(int64_t ms) {
  char ns[32];
  snprintf(ns, sizeof ns, "%lld", (long long)(T0 + MS(ms)));
  EXPECT("OK", "sl.clock", ns);
}

/* SL.VERSION names the library's version and the decide.lua that
   SL.DECIDE mirrors, so a daemon can tell a module of another build. */
static void version_names_the_script_it_speaks(void **state) {
  (void)state;
  char want[128];
  snprintf(want, sizeof want, "%s %s", sl_version_string(), SL_DECIDE_SHA);
  EXPECT(want, "sl.version");
  EXPECT("ERR wrong number of arguments for 'sl.version' command",
         "sl.version", "x");
}

static void loads_commands_with_their_keys(void **state) {
  (void)state;
  static const struct {
    const char *name, *flags;
    int first, last, step;
  } want[] = {
      {"sl.throttle", "write deny-oom fast", 1, 1, 1},
      {"cl.throttle", "write deny-oom fast", 1, 1, 1},
      {"sl.reset", "write fast", 1, 1, 1},
      {"sl.decide", "write deny-oom getkeys-api", 2, 2, 1},
      {"sl.version", "readonly fast", 0, 0, 0},
      {"sl.clock", "fast", 0, 0, 0},
  };
  int n;
  const fake_cmd *c = fake_commands(&n);
  assert_int_equal(n, 6);
  for (int i = 0; i < n; i++) {
    assert_string_equal(c[i].name, want[i].name);
    assert_string_equal(c[i].flags, want[i].flags);
    assert_int_equal(c[i].first, want[i].first);
    assert_int_equal(c[i].last, want[i].last);
    assert_int_equal(c[i].step, want[i].step);
  }
  /* Without TESTCLOCK there is no SL.CLOCK; other arguments refuse. */
  assert_int_equal(fake_init(T0_MS, NULL, 0, NULL), REDISMODULE_OK);
  fake_commands(&n);
  assert_int_equal(n, 5);
  const char *bad[] = {"VERBOSE"};
  assert_int_equal(fake_init(T0_MS, bad, 1, NULL), REDISMODULE_ERR);
  /* A Redis without one of the functions used (older than 7.0). */
  assert_int_equal(fake_init(T0_MS, NULL, 0, "SetAbsExpire"),
                   REDISMODULE_ERR);
}

static void throttle_replies_on_a_fixed_clock(void **state) {
  (void)state;
  EXPECT("1 10 9 0 360000 0", "sl.throttle", "tb", "token_bucket:10/1h");
  EXPECT("1 10 0 0 3600000 0", "sl.throttle", "tb", "token_bucket:10/1h", "9");
  EXPECT("0 10 0 360000 3600000 0", "sl.throttle", "tb", "token_bucket:10/1h");
  EXPECT("1 10 0 0 3600000 0", "sl.throttle", "tb", "token_bucket:10/1h", "0");
  assert_int_equal(fake_expire("tb"), T0_MS + 3600000);
  EXPECT("1 2 1 0 1800000 0", "sl.throttle", "lk", "leaky_bucket:2/1h");
  EXPECT("1 2 0 0 3600000 1800000", "sl.throttle", "lk", "leaky_bucket:2/1h");
  EXPECT("1 5 2 0 3600000 0", "sl.throttle", "fw", "fixed_window:5/1h", "3");
  EXPECT("1 2 1 0 3600000 0", "sl.throttle", "sl", "sliding_log:2/1h");
  assert_int_equal(fake_type("sl"), FK_HASH);
  EXPECT("1 4 3 0 7200000 0", "sl.throttle", "sw", "sliding_window:4/1h");
  EXPECT("1 16 15 0 2000 0", "sl.throttle", "g2", "gcra:30/60s:burst=16", "1");
  assert_int_equal(fake_expire("g2"), T0_MS + 2000);
}

static void a_write_is_replicated_with_its_absolute_expiry(void **state) {
  (void)state;
  EXPECT("1 10 9 0 360000 0", "sl.throttle", "tb", "token_bucket:10/1h");
  char want[64];
  snprintf(want, sizeof want, " PXAT %lld;", (long long)(T0_MS + 360000));
  assert_int_equal(ctx.nrepl, 1);
  assert_memory_equal(ctx.repl, "SET tb ", 7);
  assert_non_null(strstr(ctx.repl, want));
  /* A denial and a peek write nothing. */
  EXPECT("1 10 0 0 3600000 0", "sl.throttle", "tb", "token_bucket:10/1h", "9");
  EXPECT("0 10 0 360000 3600000 0", "sl.throttle", "tb", "token_bucket:10/1h");
  assert_int_equal(ctx.nrepl, 0);
  EXPECT("1", "sl.reset", "tb");
  assert_string_equal(ctx.repl, "DEL tb;");
  EXPECT("0", "sl.reset", "tb");
  assert_int_equal(ctx.nrepl, 0);
  assert_int_equal(fake_type("tb"), FK_NONE);
}

/* Only a write tells WATCH and client-side caching that a key changed,
   as only the script's writes do: a denial, a peek or a reset of nothing
   signals nothing (Redis itself would signal every key the module opened
   for writing; checked() also fails any command whose written and
   signalled keys differ). */
static void only_a_write_signals_a_change(void **state) {
  (void)state;
  EXPECT("1 1 0 0 3600000 0", "sl.throttle", "w", "fixed_window:1/1h");
  assert_int_equal(fake_signalled(&ctx), 1);
  EXPECT("0 1 0 3600000 3600000 0", "sl.throttle", "w", "fixed_window:1/1h");
  assert_int_equal(fake_signalled(&ctx), 0);
  EXPECT("0 1 0 -1 3600", "cl.throttle", "c", "0", "1", "3600", "1");
  assert_int_equal(fake_signalled(&ctx), 1);
  EXPECT("1 1 0 3600 3600", "cl.throttle", "c", "0", "1", "3600", "1");
  assert_int_equal(fake_signalled(&ctx), 0);
  EXPECT("1 2 1 0 3600000 0", "sl.throttle", "s", "sliding_log:2/1h");
  assert_int_equal(fake_signalled(&ctx), 1);
  EXPECT("0", "sl.reset", "none");
  assert_int_equal(fake_signalled(&ctx), 0);
  EXPECT("1", "sl.reset", "w");
  assert_int_equal(fake_signalled(&ctx), 1);
}

/* The keyspace events of what is written are the script's own (SET key
   value PX: "set", "expire"; sliding_log's DEL, HDEL, HSET, PEXPIRE), so
   a listener cannot tell the module from decide.lua; nothing written,
   nothing announced. */
static void writes_fire_the_scripts_keyspace_events(void **state) {
  (void)state;
  struct {
    int64_t at_ms;
    const char *cmd, *key, *arg, *events;
  } steps[] = {
      {0, "sl.throttle", "tb", "token_bucket:1/1h", "set tb;expire tb;"},
      {0, "sl.throttle", "tb", "token_bucket:1/1h", ""},
      {0, "cl.throttle", "c", NULL, "set c;expire c;"},
      {0, "cl.throttle", "c", NULL, ""},
      {0, "sl.throttle", "s", "sliding_log:2/1s", "hset s;expire s;"},
      {600, "sl.throttle", "s", "sliding_log:2/1s", "hset s;expire s;"},
      {1200, "sl.throttle", "s", "sliding_log:2/1s",
       "hdel s;hset s;expire s;"},
      {5000, "sl.throttle", "s", "sliding_log:2/1s",
       "del s;hset s;expire s;"},
      {5000, "sl.reset", "s", NULL, "del s;"},
      {5000, "sl.reset", "s", NULL, ""},
  };
  for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
    clock_at(steps[i].at_ms);
    if (!strcmp(steps[i].cmd, "cl.throttle"))
      RUN(steps[i].cmd, steps[i].key, "0", "1", "3600", "1");
    else if (steps[i].arg)
      RUN(steps[i].cmd, steps[i].key, steps[i].arg);
    else
      RUN(steps[i].cmd, steps[i].key);
    if (strcmp(ctx.events, steps[i].events))
      fail_msg("step %zu (%s %s): events '%s', want '%s'", i, steps[i].cmd,
               steps[i].key, ctx.events, steps[i].events);
  }
}

/* Where Redis has nothing to feed (no replica, no backlog, no AOF), a
   write is only counted as a change; a fork, an AOF or a backlog make the
   module replicate again, and a fork's end reads the state anew. */
static void a_write_nothing_takes_is_only_counted(void **state) {
  (void)state;
  fake_set_feeds(0, 0, 0);
  fake_fire(REDISMODULE_EVENT_REPLICA_CHANGE, 1);
  EXPECT("1 10 9 0 360000 0", "sl.throttle", "tb", "token_bucket:10/1h");
  assert_int_equal(ctx.nrepl, 0);
  assert_int_equal(fake_verbatim(), 1);
  EXPECT("1 2 1 0 3600000 0", "sl.throttle", "sl", "sliding_log:2/1h");
  assert_int_equal(ctx.nrepl, 0);
  assert_int_equal(fake_verbatim(), 4); /* entry, meta, expiry */
  EXPECT("1", "sl.reset", "tb");
  assert_int_equal(ctx.nrepl, 0);
  assert_int_equal(fake_verbatim(), 5);
  /* A fork (a replica's sync starts with one): replicated from then on. */
  fake_fire(REDISMODULE_EVENT_FORK_CHILD, REDISMODULE_SUBEVENT_FORK_CHILD_BORN);
  EXPECT("1 10 9 0 360000 0", "sl.throttle", "tb", "token_bucket:10/1h");
  assert_int_equal(ctx.nrepl, 1);
  assert_int_equal(fake_verbatim(), 5);
  /* Its end with a backlog left (a replica synced): still replicated. */
  fake_set_feeds(0, 1, 0);
  fake_fire(REDISMODULE_EVENT_FORK_CHILD, REDISMODULE_SUBEVENT_FORK_CHILD_DIED);
  EXPECT("1 10 8 0 720000 0", "sl.throttle", "tb", "token_bucket:10/1h");
  assert_int_equal(ctx.nrepl, 1);
  /* A plain save's end, nothing to feed: counted only. */
  fake_set_feeds(0, 0, 0);
  fake_fire(REDISMODULE_EVENT_FORK_CHILD, REDISMODULE_SUBEVENT_FORK_CHILD_DIED);
  EXPECT("1 10 7 0 1080000 0", "sl.throttle", "tb", "token_bucket:10/1h");
  assert_int_equal(ctx.nrepl, 0);
  assert_int_equal(fake_verbatim(), 6);
  /* An AOF turned on (CONFIG SET appendonly yes): read at the
     configuration's event, which Redis fires before the next command. */
  fake_set_feeds(0, 0, REDISMODULE_CTX_FLAGS_AOF);
  fake_fire(REDISMODULE_EVENT_CONFIG, 0);
  EXPECT("1 10 6 0 1440000 0", "sl.throttle", "tb", "token_bucket:10/1h");
  assert_int_equal(ctx.nrepl, 1);
  /* And turned off again: counted only. */
  fake_set_feeds(0, 0, 0);
  fake_fire(REDISMODULE_EVENT_CONFIG, 0);
  EXPECT("1 10 5 0 1800000 0", "sl.throttle", "tb", "token_bucket:10/1h");
  assert_int_equal(ctx.nrepl, 0);
  assert_int_equal(fake_verbatim(), 7);
  /* A replica's role: replicated (its own writes Redis drops itself). */
  fake_set_feeds(0, 0, REDISMODULE_CTX_FLAGS_SLAVE);
  fake_fire(REDISMODULE_EVENT_REPLICATION_ROLE_CHANGED, 1);
  EXPECT("1 10 4 0 2160000 0", "sl.throttle", "tb", "token_bucket:10/1h");
  assert_int_equal(ctx.nrepl, 1);
  assert_int_equal(fake_verbatim(), 7);
}

/* A Redis without the configuration event (before 7.0) tells nobody of
   an AOF turned on: the module reads its flag at every write there. */
static void without_the_config_event_the_aof_is_read_per_write(void **state) {
  teardown(state);
  fake_refuse_event(REDISMODULE_EVENT_CONFIG);
  setup(state);
  fake_set_feeds(0, 0, 0);
  fake_fire(REDISMODULE_EVENT_REPLICA_CHANGE, 1);
  long counted = fake_verbatim();
  EXPECT("1 10 9 0 360000 0", "sl.throttle", "tb", "token_bucket:10/1h");
  assert_int_equal(ctx.nrepl, 0);
  assert_int_equal(fake_verbatim(), counted + 1);
  fake_set_feeds(0, 0, REDISMODULE_CTX_FLAGS_AOF);
  EXPECT("1 10 8 0 720000 0", "sl.throttle", "tb", "token_bucket:10/1h");
  assert_int_equal(ctx.nrepl, 1);
}

static void redis_cell_readme(void **state) {
  (void)state;
  EXPECT("0 16 15 -1 2", "cl.throttle", "user123", "15", "30", "60");
  EXPECT("0 16 10 -1 12", "cl.throttle", "user123", "15", "30", "60", "5");
  EXPECT("1 16 10 -1 12", "cl.throttle", "user123", "15", "30", "60", "17");
  EXPECT("1 16 10 2 12", "cl.throttle", "user123", "15", "30", "60", "11");
  clock_at(2000);
  EXPECT("0 16 10 -1 12", "cl.throttle", "user123", "15", "30", "60");
}

/* A key redis-cell wrote (its TAT in ns, as a decimal string) is read as
   the same GCRA state: 15 max burst, 30 per 60 s (T = 2 s, 32 s of
   tolerance), a TAT 5 s ahead leaves 13 and resets in 5 s, as redis-cell
   answers. */
static void reads_redis_cells_keys(void **state) {
  (void)state;
  char tat[32];
  snprintf(tat, sizeof tat, "%lld", (long long)(T0 + SEC(5)));
  fake_put_string("user456", tat, strlen(tat), T0_MS + 5000);
  EXPECT("0 16 13 -1 5", "cl.throttle", "user456", "15", "30", "60", "0");
  EXPECT("0 16 12 -1 7", "cl.throttle", "user456", "15", "30", "60");
  /* CL.THROTTLE keeps redis-cell's layout (one state per key, the TAT in
     ns as decimal text), so redis-cell could read the key back. */
  size_t n;
  const char *v = fake_get_string("user456", &n);
  assert_non_null(v);
  char want[32];
  snprintf(want, sizeof want, "%lld", (long long)(T0 + SEC(7)));
  assert_int_equal(n, strlen(want));
  assert_memory_equal(v, want, n);
  assert_int_equal(fake_expire("user456"), T0_MS + 7000);
  /* The same key through SL.THROTTLE's gcra; not through other layouts. */
  fake_put_string("c2", tat, strlen(tat), -1);
  EXPECT("1 16 13 0 5000 0", "sl.throttle", "c2", "gcra:30/60s:burst=16", "0");
  EXPECT(WT, "sl.throttle", "c2", "token_bucket:30/60s");
  /* Not a TAT: too long, signed, not digits, past any time sluice takes. */
  static const char *const bad[] = {"99999999999999999999", "-5", "12a",
                                    "9223372036854775807", ""};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    fake_put_string("x", bad[i], strlen(bad[i]), -1);
    EXPECT(WT, "cl.throttle", "x", "15", "30", "60");
  }
}

/* Every bad input: an error, no key written, nothing replicated. */
static void bad_input_gets_redis_style_errors(void **state) {
  (void)state;
  static const char *const cases[][10] = {
      {"ERR wrong number of arguments for 'sl.throttle' command",
       "sl.throttle", "k"},
      {"ERR wrong number of arguments for 'sl.throttle' command",
       "sl.throttle", "k", "token_bucket:1/s", "1", "2"},
      {"ERR invalid policy: policy 'bogus' is not "
       "ALGORITHM:LIMIT/PERIOD[:burst=N]",
       "sl.throttle", "k", "bogus"},
      {"ERR cost must be an integer >= 0", "sl.throttle", "k",
       "token_bucket:1/s", "-1"},
      {"ERR cost must be an integer >= 0", "sl.throttle", "k",
       "token_bucket:1/s", "99999999999999999999"},
      {"ERR cost must be an integer >= 0", "sl.throttle", "k",
       "token_bucket:1/s", "1x"},
      {"ERR cost 11 can never be allowed by token_bucket:10/1s",
       "sl.throttle", "k", "token_bucket:10/1s", "11"},
      {"Cell error: Store error: Usage: cl.throttle <key> <max_burst> "
       "<count per period> <period> [<quantity>]",
       "cl.throttle", "k", "1", "2"},
      {"Cell error: Store error: Couldn't parse as integer: x", "cl.throttle",
       "k", "1", "x", "60"},
      {"Cell error: Store error: Zero rates are not supported", "cl.throttle",
       "k", "1", "0", "60"},
      {"ERR wrong number of arguments for 'sl.decide' command", "sl.decide",
       "1", "k"},
      {"ERR sluice SL.DECIDE: malformed arguments", "sl.decide", "1", "k",
       "", "0", "0", "0", "short"},
      {"ERR wrong number of arguments for 'sl.reset' command", "sl.reset"},
      {"ERR SL.CLOCK: ns since the epoch, or -1 for Redis's clock",
       "sl.clock", "-2"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    int n = 0;
    while (n < 8 && cases[i][2 + n]) n++;
    const char *text = checked(fake_call(&ctx, cases[i][1], n, &cases[i][2]));
    assert_string_equal(text, cases[i][0]);
    assert_int_equal(ctx.replies[0].kind, 'e');
    assert_int_equal(ctx.nrepl, 0);
    assert_int_equal(fake_nkeys(), 0);
  }
  /* A policy too long for the cache is refused, not cut. */
  char longp[300];
  memset(longp, 'x', sizeof longp - 1);
  longp[sizeof longp - 1] = '\0';
  EXPECT("ERR invalid policy: policy is too long", "sl.throttle", "k", longp);
}

static void keys_of_another_type_are_left_alone(void **state) {
  (void)state;
  fake_put_string("str", "hello", 5, -1);
  fake_put_other("list");
  fake_put_string("short", "12.45", 5, -1);
  fake_put_hash_field("h", "x", "y", 1);
  EXPECT("1 10 9 0 100 0", "sl.throttle", "tb", "token_bucket:10/1s");
  EXPECT(WT, "sl.throttle", "str", "token_bucket:10/1s");
  EXPECT(WT, "sl.throttle", "list", "gcra:10/1s");
  EXPECT(WT, "sl.throttle", "h", "token_bucket:10/1s");
  EXPECT(WT, "sl.throttle", "h", "sliding_log:10/1s");
  EXPECT(WT, "sl.throttle", "tb", "sliding_log:10/1s");
  EXPECT(WT, "sl.throttle", "tb", "fixed_window:10/1s");
  EXPECT(WT, "cl.throttle", "short", "1", "1", "1");
  size_t n;
  const char *v = fake_get_string("str", &n);
  assert_int_equal(n, 5);
  assert_memory_equal(v, "hello", 5);
  assert_int_equal(fake_expire("str"), -1);
  assert_int_equal(fake_type("list"), FK_OTHER);
  assert_int_equal(fake_hash_len("h"), 1);
}

static void an_expired_key_starts_afresh(void **state) {
  (void)state;
  EXPECT("1 1 0 0 1000 0", "sl.throttle", "k", "token_bucket:1/1s");
  EXPECT("0 1 0 1000 1000 0", "sl.throttle", "k", "token_bucket:1/1s");
  /* Redis's clock passes the TTL; the module's (fixed) clock does not. */
  fake_set_ms(T0_MS + 1000);
  EXPECT("1 1 0 0 1000 0", "sl.throttle", "k", "token_bucket:1/1s");
  assert_int_equal(fake_expire("k"), T0_MS + 2000);
}

static void sliding_log_keeps_its_hash(void **state) {
  (void)state;
  EXPECT("1 2 1 0 1000 0", "sl.throttle", "l", "sliding_log:2/1s");
  clock_at(100);
  EXPECT("1 2 0 0 1000 0", "sl.throttle", "l", "sliding_log:2/1s");
  assert_int_equal(fake_hash_len("l"), 3); /* meta and two entries */
  assert_non_null(strstr(ctx.repl, "HSET l 1 "));
  assert_non_null(strstr(ctx.repl, "HSET l m "));
  char want[64];
  snprintf(want, sizeof want, "PEXPIREAT l %lld;", (long long)T0_MS + 1000);
  assert_non_null(strstr(ctx.repl, want));
  EXPECT("0 2 0 900 1000 0", "sl.throttle", "l", "sliding_log:2/1s");
  /* The first entry expired: its field is dropped, replicated as HDEL. */
  clock_at(1050);
  EXPECT("1 2 0 0 1000 0", "sl.throttle", "l", "sliding_log:2/1s");
  assert_non_null(strstr(ctx.repl, "HDEL l 0;"));
  assert_int_equal(fake_hash_len("l"), 3);
  /* Both expired: the key starts afresh (DEL, then the new entry). */
  clock_at(2500);
  EXPECT("1 2 1 0 1000 0", "sl.throttle", "l", "sliding_log:2/1s");
  assert_memory_equal(ctx.repl, "DEL l;", 6);
  assert_int_equal(fake_hash_len("l"), 2);
  /* A hash whose meta claims more entries than it holds is not ours. */
  fake_put_hash_field("bad", "m", "\x00\x00\x00\x00\x00\x00\x00\x00"
                      "\x09\x00\x00\x00" "0123456789abcdef0123456789abcdef"
                      "0123", 48);
  EXPECT(WT, "sl.throttle", "bad", "sliding_log:2/1s");
}

/* decide.lua's nums word for `spec` and `cost` (script.c's prepare()). */
static void nums_of(const char *spec, int64_t cost, char out[32]) {
  sl_policy pub = policy_of(spec);
  algo_policy p;
  assert_int_equal(algo_policy_compile(&pub, &p, NULL, 0), 0);
  int bucket = pub.algo == SL_TOKEN_BUCKET || pub.algo == SL_LEAKY_BUCKET ||
               pub.algo == SL_GCRA;
  int64_t v[4] = {cost, bucket ? (int64_t)p.cap : p.L,
                  bucket ? p.Lg : p.W / NS_PER_MS,
                  bucket ? p.Wg : 0};
  for (int i = 0; i < 4; i++)
    for (int b = 0; b < 8; b++)
      out[8 * i + b] = (char)((uint64_t)v[i] >> (8 * b));
}

static void decide_reports_keys_and_decides_all_or_nothing(void **state) {
  (void)state;
  const char *gk[] = {"2", "a", "b", "", "0", "0", "0", "x", "0", "0", "x"};
  assert_int_equal(fake_getkeys(&ctx, "sl.decide", 11, gk), REDISMODULE_OK);
  assert_int_equal(ctx.nkeypos, 2);
  assert_int_equal(ctx.keypos[0], 2);
  assert_int_equal(ctx.keypos[1], 3);
  assert_int_equal(ctx.nreplies, 0);
  const char *junk[] = {"99999999999999999999999", "a"};
  assert_int_equal(fake_getkeys(&ctx, "sl.decide", 2, junk), REDISMODULE_OK);
  assert_int_equal(ctx.nkeypos, 0);

  char n1[32], n2[32];
  nums_of("token_bucket:10/1h", 1, n1);
  nums_of("fixed_window:1/1h", 1, n2);
  const char *args[] = {"2", "a", "b", "", "0", "0", "0", n1, "2", "0", n2};
  size_t lens[] = {1, 1, 1, 0, 1, 1, 1, 32, 1, 1, 32};
  char t0[32];
  snprintf(t0, sizeof t0, "%lld", (long long)T0);
  char want[256];
  /* First request: both allow, both charged. */
  checked(fake_call_bin(&ctx, "sl.decide", 11, args, lens));
  snprintf(want, sizeof want, "%s 1 1 10 9 %lld 0 0 1 1 0 %lld 0 0", t0,
           (long long)SEC(360), (long long)SEC(3600));
  assert_string_equal(fake_reply_text(&ctx), want);
  /* Second: the window denies, so the bucket is not charged (a peek). */
  checked(fake_call_bin(&ctx, "sl.decide", 11, args, lens));
  snprintf(want, sizeof want, "%s 0 1 10 9 %lld 0 0 0 1 0 %lld %lld 0", t0,
           (long long)SEC(360), (long long)SEC(3600), (long long)SEC(3600));
  assert_string_equal(fake_reply_text(&ctx), want);
  assert_int_equal(ctx.nrepl, 0);
  /* Dry mode charges nothing; a repeated key is refused. */
  args[4] = "1";
  checked(fake_call_bin(&ctx, "sl.decide", 11, args, lens));
  assert_int_equal(ctx.nrepl, 0);
  args[4] = "0";
  args[1] = "b";
  assert_string_equal(checked(fake_call_bin(&ctx, "sl.decide", 11, args, lens)),
                      "ERR sluice SL.DECIDE: malformed arguments (a key "
                      "repeats)");
  /* Forced: every key charged whatever it holds; level and limit back. */
  args[1] = "a";
  args[4] = "f\x02";
  lens[4] = 2;
  checked(fake_call_bin(&ctx, "sl.decide", 11, args, lens));
  assert_int_equal(ctx.nreplies, 3);
  assert_int_equal(ctx.replies[2].n, 32);
  /* A batch of two one-key requests: "g" and their sizes. */
  const char *batch[] = {"2", "c", "d", "", "g\x01\x01", "0", "0", n1,
                         "0", "0", n1};
  size_t blens[] = {1, 1, 1, 0, 3, 1, 1, 32, 1, 1, 32};
  checked(fake_call_bin(&ctx, "sl.decide", 11, batch, blens));
  assert_int_equal(ctx.replies[0].n, 1 + 2 + 12);
  assert_int_equal(ctx.nrepl, 2);
  /* A key of another type: WRONGTYPE, nothing written. */
  fake_put_other("b");
  args[4] = "0";
  lens[4] = 1;
  assert_string_equal(checked(fake_call_bin(&ctx, "sl.decide", 11, args, lens)),
                      WT);
  assert_int_equal(ctx.nrepl, 0);
}

/* The one bulk reply of the last call (REPLY_P) as its int64 values,
   written as fake_reply_text writes an array's ("v0 v1 ..."). */
static const char *packed_text(char *out, size_t cap) {
  assert_int_equal(ctx.nreplies, 1);
  assert_int_equal(ctx.replies[0].kind, '$');
  long long n = ctx.replies[0].n;
  assert_int_equal(n % 8, 0);
  size_t at = 0;
  for (long long i = 0; i < n / 8; i++) {
    uint64_t v = 0;
    for (int b = 7; b >= 0; b--)
      v = v << 8 | (unsigned char)ctx.replies[0].s[8 * i + b];
    at += (size_t)snprintf(out + at, cap - at, "%s%lld", i ? " " : "",
                           (long long)v);
    assert_true(at < cap);
  }
  return out;
}

/* "p" before the mode: the same values, as one string of int64. */
static void decide_packs_its_reply_when_asked(void **state) {
  (void)state;
  char n1[32], n2[32], want[256], got[256];
  nums_of("token_bucket:10/1h", 1, n1);
  nums_of("fixed_window:1/1h", 1, n2);
  const char *plain[] = {"2", "a", "b", "", "0", "0", "0", n1, "2", "0", n2};
  const char *packed[] = {"2", "c", "d", "", "p0", "0", "0", n1, "2", "0", n2};
  size_t lens[] = {1, 1, 1, 0, 1, 1, 1, 32, 1, 1, 32};
  size_t plens[] = {1, 1, 1, 0, 2, 1, 1, 32, 1, 1, 32};
  for (int round = 0; round < 2; round++) { /* charged, then denied */
    checked(fake_call_bin(&ctx, "sl.decide", 11, plain, lens));
    snprintf(want, sizeof want, "%s", fake_reply_text(&ctx));
    checked(fake_call_bin(&ctx, "sl.decide", 11, packed, plens));
    assert_string_equal(packed_text(got, sizeof got), want);
  }
  /* A batch ("pg") and a peek ("p1") alike. */
  const char *batch[] = {"2", "e", "f", "", "g\x01\x01", "0", "0", n1,
                         "0", "0", n1};
  const char *pbatch[] = {"2", "g", "h", "", "pg\x01\x01", "0", "0", n1,
                          "0", "0", n1};
  size_t blens[] = {1, 1, 1, 0, 3, 1, 1, 32, 1, 1, 32};
  size_t pblens[] = {1, 1, 1, 0, 4, 1, 1, 32, 1, 1, 32};
  checked(fake_call_bin(&ctx, "sl.decide", 11, batch, blens));
  snprintf(want, sizeof want, "%s", fake_reply_text(&ctx));
  checked(fake_call_bin(&ctx, "sl.decide", 11, pbatch, pblens));
  assert_string_equal(packed_text(got, sizeof got), want);
  plain[4] = "1";
  packed[4] = "p1";
  checked(fake_call_bin(&ctx, "sl.decide", 11, plain, lens));
  snprintf(want, sizeof want, "%s", fake_reply_text(&ctx));
  checked(fake_call_bin(&ctx, "sl.decide", 11, packed, plens));
  assert_string_equal(packed_text(got, sizeof got), want);
  /* A forced call's reply is one string already: "p" changes nothing. */
  packed[4] = "pf\x02";
  plens[4] = 3;
  checked(fake_call_bin(&ctx, "sl.decide", 11, packed, plens));
  assert_int_equal(ctx.nreplies, 3);
  assert_int_equal(ctx.replies[2].n, 32);
  /* "p" alone is no mode. */
  packed[4] = "p";
  plens[4] = 1;
  assert_string_equal(checked(fake_call_bin(&ctx, "sl.decide", 11, packed, plens)),
                      "ERR sluice SL.DECIDE: malformed arguments");
}

/* SL.THROTTLE makes the library's decisions (sl_limiter_take on a memory
   store) on random traces, for every algorithm. */
/* decide.lua's cell nums: quantity, ei, dvt, limit. */
static void cell_nums(int64_t q, int64_t ei, int64_t dvt, int64_t limit,
                      char out[32]) {
  int64_t v[4] = {q, ei, dvt, limit};
  for (int i = 0; i < 4; i++)
    for (int b = 0; b < 8; b++)
      out[8 * i + b] = (char)((uint64_t)v[i] >> (8 * b));
}

/* SL.DECIDE's cell (algorithm "7", exact mode's CL.THROTTLE): the same
   decision and key as the module's own CL.THROTTLE; a limited request
   that never fits answers retry 0; malformed cells refused. */
static void decide_cell_is_cl_throttle(void **state) {
  (void)state;
  char n[32];
  cell_nums(1, SEC(1), SEC(5), 5, n);
  const char *args[] = {"1", "a", "", "0", "7", "0", n};
  size_t lens[] = {1, 1, 0, 1, 1, 1, 32};
  char want[256];
  snprintf(want, sizeof want, "%lld 1 1 5 4 %lld 0 0", (long long)T0,
           (long long)SEC(1));
  assert_string_equal(checked(fake_call_bin(&ctx, "sl.decide", 7, args, lens)),
                      want);
  EXPECT("0 5 4 -1 1", "cl.throttle", "b", "4", "1", "1");
  size_t la, lb;
  const char *va = fake_get_string("a", &la), *vb = fake_get_string("b", &lb);
  assert_non_null(va);
  assert_non_null(vb);
  assert_int_equal(la, lb);
  assert_memory_equal(va, vb, la);
  assert_int_equal(fake_expire("a"), fake_expire("b"));
  /* Above the limit (quantity limit + 1): limited, no retry (0). */
  cell_nums(6, SEC(1), SEC(5), 5, n);
  snprintf(want, sizeof want, "%lld 0 0 5 4 %lld 0 0", (long long)T0,
           (long long)SEC(1));
  assert_string_equal(checked(fake_call_bin(&ctx, "sl.decide", 7, args, lens)),
                      want);
  /* Malformed: dvt not ei * limit, past 2^52 ns, a quantity past limit + 1,
     forced, or beside another key. */
  const int64_t bad[][4] = {{1, SEC(1), SEC(4), 5},
                            {1, INT64_C(1) << 50, INT64_C(1) << 52, 4},
                            {7, SEC(1), SEC(5), 5},
                            {-1, SEC(1), SEC(5), 5}};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    cell_nums(bad[i][0], bad[i][1], bad[i][2], bad[i][3], n);
    assert_string_equal(
        checked(fake_call_bin(&ctx, "sl.decide", 7, args, lens)),
        "ERR sluice SL.DECIDE: malformed arguments");
  }
  cell_nums(1, SEC(1), SEC(5), 5, n);
  args[3] = "f\x01";
  lens[3] = 2;
  assert_string_equal(checked(fake_call_bin(&ctx, "sl.decide", 7, args, lens)),
                      "ERR sluice SL.DECIDE: malformed arguments");
  char n2[32];
  nums_of("token_bucket:10/1h", 1, n2);
  const char *two[] = {"2", "c", "d", "", "0", "7", "0", n, "0", "0", n2};
  size_t tlens[] = {1, 1, 1, 0, 1, 1, 1, 32, 1, 1, 32};
  assert_string_equal(checked(fake_call_bin(&ctx, "sl.decide", 11, two, tlens)),
                      "ERR sluice SL.DECIDE: malformed arguments");
  /* A key of another layout: WRONGTYPE. */
  fake_put_other("a");
  args[3] = "0";
  lens[3] = 1;
  assert_string_equal(checked(fake_call_bin(&ctx, "sl.decide", 7, args, lens)),
                      WT);
}

static void throttle_decides_as_the_library(void **state) {
  (void)state;
  static const char *const specs[] = {
      "token_bucket:5/1s", "leaky_bucket:4/1s:burst=6", "gcra:7/3s:burst=3",
      "fixed_window:5/1s", "sliding_window:6/2s", "sliding_log:4/1s"};
  uint64_t rnd = 19;
  for (size_t a = 0; a < sizeof specs / sizeof specs[0]; a++) {
    sl_store *s = store_with_cap(0);
    sl_limiter *lim = limiter_of(s, specs[a]);
    int64_t t = T0;
    uint32_t burst = sl_limiter_policy(lim)->burst;
    for (int i = 0; i < 300; i++) {
      rnd = rnd * 6364136223846793005ULL + 1442695040888963407ULL;
      t += MS((int64_t)(rnd >> 33) % 400);
      int64_t cost = (int64_t)(rnd >> 20) % (burst + 1);
      char c[24];
      snprintf(c, sizeof c, "%lld", (long long)cost);
      clock_at((t - T0) / NS_PER_MS);
      fake_set_ms(t / NS_PER_MS);
      const char *got = RUN("sl.throttle", "k", specs[a], c);
      sl_decision d = take(lim, "k", cost, t);
      char want[160];
      snprintf(want, sizeof want, "%d %lld %lld %lld %lld %lld", d.allowed,
               (long long)d.limit, (long long)d.remaining,
               (long long)ns_to_ms_up(d.retry_after_ns),
               (long long)ns_to_ms_up(d.reset_ns),
               (long long)ns_to_ms_up(d.delay_ns));
      if (strcmp(got, want))
        fail_msg("%s step %d: module '%s', library '%s'", specs[a], i, got,
                 want);
    }
    sl_limiter_free(lim);
    sl_store_free(s);
    fake_reset();
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(version_names_the_script_it_speaks,
                                      setup, teardown),
      cmocka_unit_test_setup_teardown(loads_commands_with_their_keys, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(throttle_replies_on_a_fixed_clock,
                                      setup, teardown),
      cmocka_unit_test_setup_teardown(
          a_write_is_replicated_with_its_absolute_expiry, setup, teardown),
      cmocka_unit_test_setup_teardown(only_a_write_signals_a_change, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(writes_fire_the_scripts_keyspace_events,
                                      setup, teardown),
      cmocka_unit_test_setup_teardown(a_write_nothing_takes_is_only_counted,
                                      setup, teardown),
      cmocka_unit_test_setup_teardown(
          without_the_config_event_the_aof_is_read_per_write, setup,
          teardown),
      cmocka_unit_test_setup_teardown(redis_cell_readme, setup, teardown),
      cmocka_unit_test_setup_teardown(reads_redis_cells_keys, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(bad_input_gets_redis_style_errors,
                                      setup, teardown),
      cmocka_unit_test_setup_teardown(keys_of_another_type_are_left_alone,
                                      setup, teardown),
      cmocka_unit_test_setup_teardown(an_expired_key_starts_afresh, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(sliding_log_keeps_its_hash, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(
          decide_reports_keys_and_decides_all_or_nothing, setup, teardown),
      cmocka_unit_test_setup_teardown(decide_packs_its_reply_when_asked,
                                      setup, teardown),
      cmocka_unit_test_setup_teardown(decide_cell_is_cl_throttle, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(throttle_decides_as_the_library, setup,
                                      teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
