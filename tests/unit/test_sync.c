/*
 * test_sync.c — approximate mode's sync thread (src/fleet/sync.c): what a
 * round's pass sends, and what it reports for each key (the fleet's
 * level; UNSENT: Redis did not run it, carried to the next round;
 * UNKNOWN: it may have), when an append fails, and when following a
 * moving slot's answers would run the round past its interval.
 *
 * The sync runs on the test's thread (sync_internal.h: no thread, one
 * pass at a time), against a real engine in approximate mode (the round's
 * keys) and fake Redis nodes, through a transport of the test's
 * (rs_transport): each connection is one end of a socketpair whose other
 * end the test plays: before each of the sync's reads, a node reads what
 * it was sent (heard) and answers each command with its next scripted
 * reply (says). The clock is the test's (base/clock.h's override:
 * fake_ns), and every reply can be made to "take" some of it
 * (latency_ms); appends can be made to fail as hiredis's do when out of
 * memory (fail_append).
 * fleet.sh and fleet_cluster.sh run the same code against real Redis.
 */
#include <fcntl.h>
#include <stdarg.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define TEST_FAKE_CLOCK
#include "helpers.h"

#include "base/log.h"
#include "rules/config.h"
#include "fleet/router.h"
#include "fleet/script.h"
#include "fleet/slot.h"
#include "fleet/sync_internal.h"
#include "engine/engine.h"
#include "engine_fixture.h"

/* ---- what sync.c sees instead of the world ---- */

#define NODES 3

/* The fake nodes 127.0.0.1:7000..: the test's end of each connection,
   and what each answers, in order, to the commands it receives. */
#define SCRIPT_MAX 32
static struct fake_node {
  int peer;       /* -1: none yet */
  int fd;         /* the sync's end */
  int latency_ms; /* what each of its replies takes of the clock */
  int dead;       /* connecting to it fails (dies) */
  redisReader *in;
  char reply[SCRIPT_MAX][128]; /* says(): the replies to give, in order */
  size_t reply_len[SCRIPT_MAX], nreply, next;
  char heard[64][16]; /* the names of the commands received */
  int nheard;
} fake[NODES];

/* The clock: fake_ns (helpers.h, TEST_FAKE_CLOCK). */

/* Node f reads what it was sent, and answers each command with its next
   reply (none left: no answer, and the read times out). */
static void serve(struct fake_node *f) {
  char buf[4096];
  ssize_t r;
  while ((r = read(f->peer, buf, sizeof buf)) > 0)
    redisReaderFeed(f->in, buf, (size_t)r);
  void *x;
  while (redisReaderGetReply(f->in, &x) == REDIS_OK && x) {
    redisReply *c = x;
    if (c->type == REDIS_REPLY_ARRAY && c->elements && f->nheard < 64)
      snprintf(f->heard[f->nheard++], sizeof f->heard[0], "%s",
               c->element[0]->str);
    freeReplyObject(c);
    if (f->next < f->nreply) {
      size_t len = f->reply_len[f->next];
      assert_int_equal(write(f->peer, f->reply[f->next++], len), (ssize_t)len);
    }
  }
}

/* A reply read: what was appended is sent (as hiredis does first, unless
   the context failed), its node answers, and the clock moves by the
   node's latency. */
static int timed_get_reply(void *ud, redisContext *c, void **reply) {
  (void)ud;
  struct fake_node *f = NULL;
  for (int i = 0; i < NODES; i++)
    if (fake[i].peer >= 0 && fake[i].fd == c->fd) f = &fake[i];
  int done = 0;
  while (f && !c->err && !done && redisBufferWrite(c, &done) == REDIS_OK) {
  }
  if (f) serve(f);
  int rc = redisGetReply(c, reply);
  if (f) fake_ns += MS(f->latency_ms);
  return rc;
}

/* The fail_append-th append from now fails (0: none), as hiredis's does
   when out of memory: the context's error set, nothing appended. */
static int fail_append, appends;

static int append_fails(redisContext *c) {
  if (!fail_append || ++appends != fail_append) return 0;
  c->err = REDIS_ERR_OOM;
  snprintf(c->errstr, sizeof c->errstr, "Out of memory");
  return 1;
}

static int t_append(void *ud, redisContext *c, const char *cmd, size_t len) {
  (void)ud;
  return append_fails(c) ? REDIS_ERR : redisAppendFormattedCommand(c, cmd, len);
}

static void log_sink(void *ud, const char *level, const char *msg) {
  (void)ud, (void)level, (void)msg;
}

/* A connection to fake node a->port - 7000: a socketpair, no handshake. */
static redisContext *t_connect(void *ud, const rc_config *c, const rc_addr *a,
                               char *err, size_t len) {
  (void)ud, (void)c;
  int i = a->port - 7000;
  int sv[2];
  if (i < 0 || i >= NODES || fake[i].dead ||
      socketpair(AF_UNIX, SOCK_STREAM, 0, sv)) {
    snprintf(err, len, "%s:%d: no such node", a->host, a->port);
    return NULL;
  }
  if (fake[i].peer >= 0) close(fake[i].peer);
  fake[i].peer = sv[1];
  fake[i].fd = sv[0];
  if (fake[i].in) redisReaderFree(fake[i].in);
  fake[i].in = redisReaderCreate(); /* (a new connection) */
  fcntl(sv[1], F_SETFL, O_NONBLOCK);
  redisContext *r = redisConnectFd(sv[0]);
  assert_non_null(r);
  /* a reply the test forgot fails the read, not the test run */
  redisSetTimeout(r, (struct timeval){1, 0});
  return r;
}

static const rs_transport fake_io = {NULL, t_connect, t_append,
                                     timed_get_reply};

/* ---- local helpers (the engine's: engine_fixture.h) ---- */

#define POLICY "fixed_window:100/h"

/* A sync of nodes (the first serving every slot), interval_ms, on e. */
static rs_sync *sync_of(engine *e, int nodes, int interval_ms) {
  for (int i = 0; i < NODES; i++) {
    if (fake[i].peer >= 0) close(fake[i].peer);
    if (fake[i].in) redisReaderFree(fake[i].in);
    memset(&fake[i], 0, sizeof fake[i]);
    fake[i].peer = fake[i].fd = -1;
  }
  fail_append = appends = 0;
  static rc_topology t;
  memset(&t, 0, sizeof t);
  for (int i = 0; i < nodes; i++)
    assert_int_equal(rc_topology_node(&t, "127.0.0.1", 7000 + i), i);
  rc_config cfg;
  memset(&cfg, 0, sizeof cfg);
  cfg.cluster = nodes > 1;
  cfg.timeout_ms = interval_ms;
  cfg.breaker_ms = 1000;
  rs_sync *s = rs_sync_new(approx_of(e), &cfg, &t, interval_ms, &fake_io);
  assert_non_null(s);
  /* connected now: the test writes the replies before the pass */
  for (int i = 0; i < nodes; i++) assert_non_null(rs_sync_connect(s, i));
  return s;
}

static void sync_free(rs_sync *s) { rs_sync_free(s); }

/* The slot map's entry for slot x (the node that serves it). */
static int slot_of(rs_sync *s, int x) {
  return rs_sync_router(s)->t.slot_node[x];
}

/* No CLUSTER SLOTS is asked for (the test looks at something else). */
static void no_map_refresh(rs_sync *s) {
  rt_map_not_before(rs_sync_router(s), INT64_MAX);
}

static void pass(rs_sync *s, approx_delta **d, size_t n, const int64_t *cost,
                 int64_t *level) {
  rs_sync_pass(s, d, n, cost, level);
}

static void read_resets(rs_sync *s) { rs_sync_read_resets(s); }

/* A round: the engine's charges, as pass() takes them. */
typedef struct pass_keys {
  approx_delta *list;
  size_t n;
  approx_delta **d;
  int64_t *cost, *level;
  int *slot;
} pass_keys;

static pass_keys take_round(engine *e) {
  pass_keys r = {approx_take(approx_of(e)), 0, NULL, NULL, NULL, NULL};
  for (approx_delta *d = r.list; d; d = approx_delta_next(d)) r.n++;
  r.d = calloc(r.n, sizeof *r.d);
  r.cost = calloc(r.n, sizeof *r.cost);
  r.level = calloc(r.n, sizeof *r.level);
  r.slot = calloc(r.n, sizeof *r.slot);
  assert_true(r.d && r.cost && r.level && r.slot);
  size_t i = 0;
  for (approx_delta *d = r.list; d; d = approx_delta_next(d), i++) {
    size_t len;
    const char *k = approx_delta_key(d, &len);
    r.d[i] = d;
    r.cost[i] = approx_delta_cost(d);
    r.slot[i] = (int)rc_key_slot(k, len);
  }
  return r;
}

/* Applies the round's levels and frees it. */
static void round_done(engine *e, pass_keys *r) {
  approx_apply(approx_of(e), r->list, r->level, T0);
  free(r->d), free(r->cost), free(r->level), free(r->slot);
}

/* n ad-hoc keys k0, k1, ... charged once each; each in a slot of its own. */
static void charge_keys(engine_thread *t, int n) {
  for (int i = 0; i < n; i++) {
    char key[16];
    snprintf(key, sizeof key, "k%d", i);
    throttle(t, key, POLICY, 1, T0);
  }
}

/* Node nd's next reply: bytes[0..len). */
static void says(int nd, const char *bytes, size_t len) {
  struct fake_node *f = &fake[nd];
  assert_true(f->nreply < SCRIPT_MAX && len <= sizeof f->reply[0]);
  memcpy(f->reply[f->nreply], bytes, len);
  f->reply_len[f->nreply++] = len;
}

/* Node nd's next reply to a forced call of one key: its level. */
static void says_level(int nd, int64_t level) {
  char b[128];
  int n = sprintf(b, "*2\r\n:%lld\r\n$16\r\n", (long long)T0);
  for (int w = 0; w < 2; w++) {
    uint64_t v = w ? 100 : (uint64_t)level;
    for (int x = 0; x < 8; x++) b[n++] = (char)(v >> (8 * x));
  }
  memcpy(b + n, "\r\n", 2);
  says(nd, b, (size_t)n + 2);
}

/* How many commands named `name` node nd has received. */
static int heard(int nd, const char *name) {
  int n = 0;
  for (int i = 0; i < fake[nd].nheard; i++)
    n += !strcasecmp(fake[nd].heard[i], name);
  return n;
}

static int count_level(const pass_keys *r, int64_t level) {
  int n = 0;
  for (size_t i = 0; i < r->n; i++) n += r->level[i] == level;
  return n;
}

static fixture sync_fixture(void) {
  engine_opts o = approx_opts();
  return fixture_with(&o, "domain: d\ndescriptors: []\n");
}

/* ---- an append that fails: nothing was sent ---- */

/* The second batch of a node cannot be appended (out of memory): nothing
   of the pass was written to that node, so every one of its batches is
   UNSENT (carried), none UNKNOWN (never pushed again). */
static void a_failed_append_leaves_the_nodes_batches_unsent(void **state) {
  (void)state;
  fixture f = sync_fixture();
  charge_keys(f.t, 2);
  rs_sync *s = sync_of(f.e, 2, 100);
  pass_keys r = take_round(f.e);
  assert_int_equal(r.n, 2);
  assert_int_not_equal(r.slot[0], r.slot[1]); /* two batches, node 0 */
  fail_append = 2;
  no_map_refresh(s); /* (node 0 down: no map asked; below) */
  pass(s, r.d, r.n, r.cost, r.level);
  assert_int_equal(count_level(&r, APPROX_LEVEL_UNSENT), 2);
  assert_int_equal(heard(0, "EVALSHA"), 0);
  round_done(f.e, &r);
  sync_free(s);
  fixture_free(&f);
}

/* A follow-up call (NOSCRIPT: SCRIPT LOAD, then the call) whose SCRIPT
   LOAD cannot be appended was not sent either: UNSENT. */
static void a_failed_append_of_a_follow_up_leaves_it_unsent(void **state) {
  (void)state;
  fixture f = sync_fixture();
  charge_keys(f.t, 1);
  rs_sync *s = sync_of(f.e, 1, 100);
  pass_keys r = take_round(f.e);
  static const char noscript[] = "-NOSCRIPT No matching script.\r\n";
  says(0, noscript, sizeof noscript - 1);
  fail_append = 2; /* the pipeline's append went; the SCRIPT LOAD fails */
  pass(s, r.d, r.n, r.cost, r.level);
  assert_int_equal(r.level[0], APPROX_LEVEL_UNSENT);
  assert_int_equal(heard(0, "EVALSHA"), 1);
  assert_int_equal(heard(0, "SCRIPT"), 0);
  round_done(f.e, &r);
  sync_free(s);
  fixture_free(&f);
}

/* ---- the round's budget ---- */

/* A round whose keys' slots all moved (MOVED to node 1, each its own
   call there, 30 ms a reply) follows them only while its interval (100
   ms) lasts: the calls not made are UNSENT (carried to the next round),
   and every MOVED is learned all the same, so that the next round sends
   them straight to node 1. */
static void follow_ups_stop_at_the_end_of_the_interval(void **state) {
  (void)state;
  fixture f = sync_fixture();
  charge_keys(f.t, 6);
  rs_sync *s = sync_of(f.e, 2, 100);
  pass_keys r = take_round(f.e);
  assert_int_equal(r.n, 6);
  /* node 0's answers, one call per slot in slot order */
  int slots[6];
  for (size_t i = 0; i < 6; i++) slots[i] = r.slot[i];
  for (int i = 0; i < 6; i++)
    for (int j = i + 1; j < 6; j++) {
      assert_int_not_equal(slots[i], slots[j]);
      if (slots[j] < slots[i]) {
        int x = slots[i];
        slots[i] = slots[j];
        slots[j] = x;
      }
    }
  for (int i = 0; i < 6; i++) {
    char b[64];
    int n = sprintf(b, "-MOVED %d 127.0.0.1:7001\r\n", slots[i]);
    says(0, b, (size_t)n);
    says_level(1, 90); /* (node 1's answer, should it be asked) */
  }
  fake[1].latency_ms = 30;
  no_map_refresh(s); /* no CLUSTER SLOTS here (tested below) */
  int64_t t0 = fake_ns;
  pass(s, r.d, r.n, r.cost, r.level);
  /* calls started at 0, 30, 60 and 90 ms; none at 120 */
  assert_int_equal(heard(1, "EVALSHA"), 4);
  assert_int_equal(count_level(&r, 90), 4);
  assert_int_equal(count_level(&r, APPROX_LEVEL_UNSENT), 2);
  assert_true(fake_ns - t0 <= MS(120));
  for (int i = 0; i < 6; i++) assert_int_equal(slot_of(s, slots[i]), 1);
  round_done(f.e, &r);
  /* the two come back with the next round, sent to node 1 at once */
  pass_keys r2 = take_round(f.e);
  assert_int_equal(r2.n, 2);
  fake[1].latency_ms = 0;
  pass(s, r2.d, r2.n, r2.cost, r2.level);
  assert_int_equal(count_level(&r2, 90), 2);
  assert_int_equal(heard(0, "EVALSHA"), 6);
  assert_int_equal(heard(1, "EVALSHA"), 6);
  round_done(f.e, &r2);
  sync_free(s);
  fixture_free(&f);
}

/* ---- MOVED: the whole map read again ---- */

/* A MOVED has the sync read the whole map again (CLUSTER SLOTS, from the
   node the MOVED named; once a second at most): the next rounds send
   every key of the slots that moved with it straight to its node. */
static void a_moved_reads_the_whole_map_again(void **state) {
  (void)state;
  fixture f = sync_fixture();
  charge_keys(f.t, 1);
  rs_sync *s = sync_of(f.e, 2, 100);
  pass_keys r = take_round(f.e);
  char b[128];
  int n = sprintf(b, "-MOVED %d 127.0.0.1:7001\r\n", r.slot[0]);
  says(0, b, (size_t)n);
  static const char slots[] =
      "*1\r\n*3\r\n:0\r\n:16383\r\n*2\r\n$9\r\n127.0.0.1\r\n:7001\r\n";
  says(1, slots, sizeof slots - 1);
  says_level(1, 90);
  pass(s, r.d, r.n, r.cost, r.level);
  assert_int_equal(r.level[0], 90);
  assert_int_equal(heard(1, "CLUSTER"), 1);
  for (int x = 0; x < 16384; x++) assert_int_equal(slot_of(s, x), 1);
  round_done(f.e, &r);
  /* other keys, other slots: to node 1 at once, no MOVED */
  charge_keys(f.t, 4);
  r = take_round(f.e);
  for (size_t i = 0; i < r.n; i++) says_level(1, 80);
  pass(s, r.d, r.n, r.cost, r.level);
  assert_int_equal(count_level(&r, 80), 4);
  assert_int_equal(heard(0, "EVALSHA"), 1);
  assert_int_equal(heard(1, "CLUSTER"), 1);
  round_done(f.e, &r);
  sync_free(s);
  fixture_free(&f);
}

/* ---- a master that dies: the map read again from another node ---- */

/* Node nd's next reply: CLUSTER SLOTS with every slot on 127.0.0.1:port
   (7000: the dead node, not failed over yet; 7002: its replica,
   promoted). */
static void says_slots_on(int nd, int port) {
  char b[128];
  int n = sprintf(
      b, "*1\r\n*3\r\n:0\r\n:16383\r\n*2\r\n$9\r\n127.0.0.1\r\n:%d\r\n", port);
  says(nd, b, (size_t)n);
}

/* Node nd dies: its connection closes, and no new one can be made. */
static void dies(int nd) {
  close(fake[nd].peer);
  fake[nd].peer = -1;
  fake[nd].dead = 1;
}

/* A master that dies answers nothing, not even a MOVED: the round that
   finds it gone (its charges not sent: carried) has the map read from
   another node, and the next round sends them to the master that map
   names, with no MOVED. */
static void a_dead_master_is_relearned_from_another_node(void **state) {
  (void)state;
  fixture f = sync_fixture();
  charge_keys(f.t, 2);
  rs_sync *s = sync_of(f.e, 3, 100);
  dies(0);
  says_slots_on(1, 7002);
  pass_keys r = take_round(f.e);
  pass(s, r.d, r.n, r.cost, r.level);
  assert_int_equal(count_level(&r, APPROX_LEVEL_UNSENT), 2);
  assert_int_equal(heard(1, "CLUSTER"), 1);
  for (int x = 0; x < 16384; x++) assert_int_equal(slot_of(s, x), 2);
  round_done(f.e, &r);
  r = take_round(f.e);
  assert_int_equal(r.n, 2);
  says_level(2, 90);
  says_level(2, 90);
  pass(s, r.d, r.n, r.cost, r.level);
  assert_int_equal(count_level(&r, 90), 2);
  assert_int_equal(heard(2, "EVALSHA"), 2);
  assert_int_equal(heard(1, "EVALSHA") + heard(1, "CLUSTER"), 1);
  round_done(f.e, &r);
  sync_free(s);
  fixture_free(&f);
}

/* Until its replica takes over, the map read still gives the dead node its
   slots, which stay with it (never "nobody"); the rounds ask again while
   it is down, once a second at most, and the first after the promotion is
   learned sends the carried charges to the new master. */
static void a_dead_master_is_asked_about_until_its_replica_takes_over(
    void **state) {
  (void)state;
  fixture f = sync_fixture();
  charge_keys(f.t, 1);
  rs_sync *s = sync_of(f.e, 3, 100);
  int64_t t0 = fake_ns;
  dies(0);
  says_slots_on(1, 7000);
  pass_keys r = take_round(f.e);
  pass(s, r.d, r.n, r.cost, r.level);
  assert_int_equal(r.level[0], APPROX_LEVEL_UNSENT);
  assert_int_equal(heard(1, "CLUSTER"), 1);
  assert_int_equal(slot_of(s, r.slot[0]), 0);
  round_done(f.e, &r);
  /* rounds within the second: carried again, no CLUSTER SLOTS */
  for (int i = 1; i < 10; i++) {
    fake_ns = t0 + MS(100 * i);
    r = take_round(f.e);
    pass(s, r.d, r.n, r.cost, r.level);
    assert_int_equal(r.level[0], APPROX_LEVEL_UNSENT);
    round_done(f.e, &r);
  }
  assert_int_equal(heard(1, "CLUSTER"), 1);
  /* the replica has taken over; a second after the last ask, the next
     node in turn is asked (node 2, the new master itself) */
  says_slots_on(2, 7002);
  fake_ns = t0 + SEC(1);
  r = take_round(f.e);
  pass(s, r.d, r.n, r.cost, r.level);
  assert_int_equal(heard(1, "CLUSTER"), 1);
  assert_int_equal(heard(2, "CLUSTER"), 1);
  assert_int_equal(slot_of(s, r.slot[0]), 2);
  round_done(f.e, &r);
  r = take_round(f.e);
  assert_int_equal(r.n, 1);
  says_level(2, 95);
  pass(s, r.d, r.n, r.cost, r.level);
  assert_int_equal(r.level[0], 95);
  assert_int_equal(heard(2, "EVALSHA"), 1);
  round_done(f.e, &r);
  sync_free(s);
  fixture_free(&f);
}

/* ---- the resets' subscription ---- */

#define SUBSCRIBED "*3\r\n$9\r\nsubscribe\r\n$10\r\nsl:reset:0\r\n:1\r\n"
#define PONG "*2\r\n$4\r\npong\r\n$0\r\n\r\n"

/* Redis delivers `count` messages on node nd's subscribed connection
   (in one write: a socketpair's buffer counts each write's overhead). */
static void publishes(int nd, const char *payload, int count) {
  char one[256];
  int n = snprintf(one, sizeof one,
                   "*3\r\n$7\r\nmessage\r\n$10\r\nsl:reset:0\r\n$%zu\r\n%s\r\n",
                   strlen(payload), payload);
  char *b = malloc((size_t)n * (size_t)count);
  assert_non_null(b);
  for (int i = 0; i < count; i++)
    memcpy(b + (size_t)i * (size_t)n, one, (size_t)n);
  ssize_t want = (ssize_t)n * count;
  assert_int_equal(write(fake[nd].peer, b, (size_t)want), want);
  free(b);
}

/* A sample of the engine's /metrics. */
static long long metric_of(engine *e, const char *name) {
  size_t len;
  char *m = engine_metrics(e, &len);
  char want[128];
  snprintf(want, sizeof want, "\n%s ", name);
  const char *p = strstr(m, want);
  long long v = p ? strtoll(p + strlen(want), NULL, 10) : -1;
  free(m);
  return v;
}

#define RESETS "sluice_sync_resets_total"
#define SUBSCRIBED_NOW "sluice_sync_resets_subscribed"
#define NOTHING_TO_DROP "sluice-reset 00000000000000aa\n"

/* The subscription: its messages read after each round (at most
   SYNC_SUB_MAX_MSGS at a time: a flood does not hold the rounds up), a
   PING once a second, and one left unanswered for the timeout drops it
   (a connection that died without a word); the next round subscribes
   again. */
static void the_resets_subscription_reads_pings_and_comes_back(void **state) {
  (void)state;
  fixture f = sync_fixture();
  rs_sync *s = sync_of(f.e, 1, 100);
  says(0, SUBSCRIBED, strlen(SUBSCRIBED));
  read_resets(s);
  assert_true(rs_sync_subscribed(s));
  assert_int_equal(heard(0, "SUBSCRIBE"), 1);
  assert_int_equal(metric_of(f.e, SUBSCRIBED_NOW), 1);
  publishes(0, NOTHING_TO_DROP "3:abc", 1);
  read_resets(s);
  assert_int_equal(metric_of(f.e, RESETS), 1);
  publishes(0, NOTHING_TO_DROP, SYNC_SUB_MAX_MSGS + 10);
  read_resets(s);
  assert_int_equal(metric_of(f.e, RESETS), 1 + SYNC_SUB_MAX_MSGS);
  read_resets(s);
  assert_int_equal(metric_of(f.e, RESETS), 1 + SYNC_SUB_MAX_MSGS + 10);
  /* a second on: a PING, answered */
  fake_ns += SEC(1);
  read_resets(s);
  says(0, PONG, strlen(PONG));
  serve(&fake[0]);
  assert_int_equal(heard(0, "PING"), 1);
  fake_ns += MS(200);
  read_resets(s);
  assert_true(rs_sync_subscribed(s));
  assert_false(rs_sync_ping_waits(s));
  /* another second: a PING left unanswered past the timeout (100 ms) */
  fake_ns += SEC(1);
  read_resets(s);
  serve(&fake[0]);
  assert_int_equal(heard(0, "PING"), 2);
  fake_ns += MS(101);
  read_resets(s); /* dropped, and subscribed again at once: not answered */
  assert_false(rs_sync_subscribed(s));
  assert_int_equal(metric_of(f.e, SUBSCRIBED_NOW), 0);
  fake_ns += SEC(1); /* the breaker */
  says(0, SUBSCRIBED, strlen(SUBSCRIBED));
  read_resets(s);
  assert_true(rs_sync_subscribed(s));
  assert_int_equal(metric_of(f.e, SUBSCRIBED_NOW), 1);
  sync_free(s);
  fixture_free(&f);
}

int main(void) {
  fake_clock_install();
  log_set_sink(log_sink, NULL);
  for (int i = 0; i < NODES; i++) fake[i].peer = -1;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(a_failed_append_leaves_the_nodes_batches_unsent),
      cmocka_unit_test(a_failed_append_of_a_follow_up_leaves_it_unsent),
      cmocka_unit_test(follow_ups_stop_at_the_end_of_the_interval),
      cmocka_unit_test(a_moved_reads_the_whole_map_again),
      cmocka_unit_test(the_resets_subscription_reads_pings_and_comes_back),
      cmocka_unit_test(a_dead_master_is_relearned_from_another_node),
      cmocka_unit_test(
          a_dead_master_is_asked_about_until_its_replica_takes_over),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
