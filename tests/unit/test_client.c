/*
 * test_client.c — exact mode's Redis client (src/fleet/client.c) on a
 * fake event loop: what it writes and when it fails a request, the node
 * or nothing, as a node answers TRYAGAIN, NOSCRIPT (and refuses the
 * SCRIPT LOAD), ASK, MOVED (the map read again), or nothing in time, and
 * as memory runs out.
 *
 * The client gets its seams from the test: the event loop (loop.h) is
 * played here — a "socket" records what the client writes, and the test
 * hands it Redis's replies (feed) and the timer's wake-ups (tick); its
 * clock is the test's (base/clock.h's override: fake_ns); and its memory
 * comes from an allocator that can be made to fail (fail_from). No Redis,
 * no network: fleet_cluster.sh runs the same code against a real cluster.
 */
#include <stdarg.h>
#include <stdlib.h>

#define TEST_FAKE_CLOCK
#include "helpers.h"

#include "base/log.h"
#include "fleet/client.h"
#include "fleet/client_internal.h"
#include "fleet/script.h"

/* ---- what client.c sees instead of the world ---- */

/* The clock: fake_ns (helpers.h, TEST_FAKE_CLOCK). */

/* Allocations of at least fail_from bytes fail (0: none do). */
static size_t fail_from;

static void *t_alloc(void *ud, void *p, size_t old, size_t n) {
  (void)ud, (void)old;
  if (n == 0) {
    free(p);
    return NULL;
  }
  return fail_from && n >= fail_from ? NULL : realloc(p, n);
}

static const rc_alloc test_alloc = {t_alloc, NULL};

/* The log: warnings that say a node is down are counted. */
static int downs;
static char last_log[512];

static void log_sink(void *ud, const char *level, const char *msg) {
  (void)ud;
  snprintf(last_log, sizeof last_log, "%s", msg);
  if (!strcmp(level, "warn") && strstr(last_log, "; down for")) downs++;
}

/* A connection: what the client wrote to it, and its callbacks. */
struct rc_sock {
  void *ud; /* the client's */
  rc_io_fn on_connect;
  rc_read_fn on_read;
  char *out;
  size_t out_len;
  int closed;
  struct rc_sock *next;
};
typedef struct rc_sock fake_sock;

/* A client's timer: its callback, fired by tick(). */
struct rc_timer {
  rc_tick_fn on_tick;
  void *ud; /* the client */
  struct rc_timer *next;
};

static fake_sock *socks;
static struct rc_timer *timers;

static void socks_free(void) {
  while (socks) {
    fake_sock *f = socks;
    socks = f->next;
    free(f->out);
    free(f);
  }
}

static rc_sock *fake_connect(void *loop, const struct sockaddr *sa,
                             socklen_t salen, rc_io_fn cb, void *ud) {
  (void)loop, (void)sa, (void)salen;
  fake_sock *f = calloc(1, sizeof *f);
  assert_non_null(f);
  f->ud = ud;
  f->on_connect = cb;
  f->next = socks;
  socks = f;
  return f;
}

/* Written at once, and said so at once. */
static void fake_write(rc_sock *f, const char *buf, size_t len, rc_io_fn cb) {
  f->out = realloc(f->out, f->out_len + len + 1);
  assert_non_null(f->out);
  memcpy(f->out + f->out_len, buf, len);
  f->out_len += len;
  f->out[f->out_len] = '\0';
  cb(f->ud, NULL);
}

static void fake_read_start(rc_sock *f, rc_read_fn cb) { f->on_read = cb; }

static void fake_close(rc_sock *f) { f->closed = 1; }

static rc_timer *fake_timer_new(void *loop, rc_tick_fn cb, void *ud) {
  (void)loop;
  struct rc_timer *t = calloc(1, sizeof *t);
  assert_non_null(t);
  t->on_tick = cb;
  t->ud = ud;
  t->next = timers;
  timers = t;
  return t;
}

/* (The client keeps when it armed it for: rc_client_timer_at.) */
static void fake_timer_arm(rc_timer *t, int64_t in_ns) {
  (void)t;
  assert_true(in_ns > 0);
}

static void fake_timer_free(rc_timer *t) {
  for (struct rc_timer **pp = &timers; *pp; pp = &(*pp)->next)
    if (*pp == t) {
      *pp = t->next;
      break;
    }
  free(t);
}

static const rc_loop fake_loop = {
    NULL,           fake_connect,   fake_write,      fake_read_start, fake_close,
    fake_timer_new, fake_timer_arm, fake_timer_free, NULL,            NULL};

/* The loop client_with gives a client (a test may ask for its wake). */
static rc_loop loop_for_next = {0};

/* ---- local helpers ---- */

/* What a command's callback was told. */
typedef struct outcome {
  int calls;
  int type; /* the reply's, or -1: failed */
  size_t elements; /* an array's */
  long long last; /* an array's last element, an integer */
  char err[128];
} outcome;

static void record(void *ud, const redisReply *r, const char *err) {
  outcome *o = ud;
  o->calls++;
  o->type = r ? r->type : -1;
  o->elements = r && r->type == REDIS_REPLY_ARRAY ? r->elements : 0;
  o->last = o->elements && r->element[o->elements - 1]->type ==
                               REDIS_REPLY_INTEGER
                ? r->element[o->elements - 1]->integer
                : -1;
  snprintf(o->err, sizeof o->err, "%s", err ? err : "");
}

/* The slot map's entry for slot x (the node that serves it). */
static int slot_of(rc_client *c, int x) {
  return rc_client_router(c)->t.slot_node[x];
}

static void set_slot(rc_client *c, int x, int nd) {
  rt_set_slot(rc_client_router(c), x, nd);
}

static int node_state(rc_client *c, int nd) {
  return rc_client_node_state(c, nd);
}

/* A client on nodes 127.0.0.1:7000.. (the first serves every slot), with
   timeout_ms and breaker_ms; every socket and counter afresh. */
static rc_client *client_with(int nodes, int timeout_ms, int breaker_ms) {
  socks_free();
  downs = 0;
  fail_from = 0;
  static rc_topology t;
  memset(&t, 0, sizeof t);
  for (int i = 0; i < nodes; i++)
    assert_int_equal(rc_topology_node(&t, "127.0.0.1", 7000 + i), i);
  memset(t.slot_node, 0, sizeof t.slot_node);
  rc_config cfg;
  memset(&cfg, 0, sizeof cfg);
  cfg.cluster = nodes > 1;
  cfg.timeout_ms = timeout_ms;
  cfg.breaker_ms = breaker_ms;
  rc_client *c = rc_client_new(loop_for_next.connect ? &loop_for_next
                                                     : &fake_loop,
                                &cfg, &t, &test_alloc);
  assert_non_null(c);
  loop_for_next = (rc_loop){0};
  return c;
}

static rc_client *client_of(int nodes, int timeout_ms) {
  return client_with(nodes, timeout_ms, 1000);
}

static fake_sock *sock_of(rc_client *c, int nd) {
  assert_non_null(rc_client_node_sock(c, nd));
  return rc_client_node_sock(c, nd);
}

/* Redis's bytes on node nd's connection, read by the client. */
static void feed(rc_client *c, int nd, const char *resp) {
  fake_sock *f = sock_of(c, nd);
  f->on_read(f->ud, NULL, resp, strlen(resp));
}

#define LOADED "$40\r\n0123456789012345678901234567890123456789\r\n"
/* SL.VERSION where the module is not loaded. */
#define NO_MODULE "-ERR unknown command 'SL.VERSION', with args beginning with: \r\n"

/* Connects node nd (its handshake written, then what was queued) and
   answers the handshake's SCRIPT LOAD and its question for the module. */
static void connect_node(rc_client *c, int nd) {
  fake_sock *f = sock_of(c, nd);
  assert_int_equal(node_state(c, nd), RC_NODE_CONNECTING);
  f->on_connect(f->ud, NULL);
  assert_int_equal(node_state(c, nd), RC_NODE_UP);
  assert_non_null(strstr(f->out, "SCRIPT"));
  feed(c, nd, LOADED);
  feed(c, nd, NO_MODULE);
}

/* A command of its own words (RESP), malloc'd as rc_send wants it. */
static char *cmd_of(const char *word, size_t *len) {
  char buf[256];
  int n = snprintf(buf, sizeof buf, "*2\r\n$3\r\nGET\r\n$%zu\r\n%s\r\n",
                   strlen(word), word);
  *len = (size_t)n;
  char *c = malloc(*len);
  assert_non_null(c);
  memcpy(c, buf, *len);
  return c;
}

static void send_get(rc_client *c, int slot, const char *key, outcome *o) {
  size_t len;
  char *cmd = cmd_of(key, &len);
  assert_int_equal(rc_send(c, slot, cmd, len, record, o), 0);
}

/* How many times s occurs in what node nd's connection was sent. */
static int sent(rc_client *c, int nd, const char *s) {
  fake_sock *f = sock_of(c, nd);
  int n = 0;
  for (const char *p = f->out; p && (p = strstr(p, s)); p += strlen(s)) n++;
  return n;
}

/* The timer's wake-up at fake time `at`. */
static void tick(rc_client *c, int64_t at) {
  fake_ns = at;
  for (struct rc_timer *t = timers; t; t = t->next)
    if (t->ud == c) {
      t->on_tick(t->ud);
      return;
    }
  fail_msg("the client has no timer");
}

#define REPLY "$1\r\nv\r\n"

/* A call for `slot` goes to node nd (connected for it if new) and gets
   Redis's answer. */
static void served_by(rc_client *c, int slot, const char *key, int nd) {
  outcome o = {0};
  char want[64];
  send_get(c, slot, key, &o);
  rc_flush(c);
  if (node_state(c, nd) == RC_NODE_CONNECTING) connect_node(c, nd);
  snprintf(want, sizeof want, "$%zu\r\n%s\r\n", strlen(key), key);
  assert_int_equal(sent(c, nd, want), 1);
  feed(c, nd, REPLY);
  assert_int_equal(o.calls, 1);
  assert_int_equal(o.type, REDIS_REPLY_STRING);
}
#define TRYAGAIN "-TRYAGAIN Multiple keys request during rehashing of slot\r\n"

/* ---- TRYAGAIN near the deadline ---- */

/* A request tried again after TRYAGAIN whose answer then comes after its
   deadline fails alone, at its deadline: the node stays up, and the
   request sent behind it on the same connection gets Redis's answer. */
static void a_retried_request_past_its_deadline_fails_alone(void **state) {
  (void)state;
  rc_client *c = client_of(1, 100);
  int64_t t0 = fake_ns;
  outcome a = {0}, b = {0};
  send_get(c, -1, "a", &a);
  rc_flush(c);
  connect_node(c, 0);
  /* TRYAGAIN 40 ms in: 60 ms left, a retry after 1 ms */
  fake_ns = t0 + MS(40);
  feed(c, 0, TRYAGAIN);
  assert_int_equal(a.calls, 0);
  fake_ns = t0 + MS(41);
  rc_flush(c);
  assert_int_equal(sent(c, 0, "$1\r\na\r\n"), 2);
  /* b, sent 50 ms in (deadline t0 + 150 ms), waits behind a's retry */
  fake_ns = t0 + MS(50);
  send_get(c, -1, "b", &b);
  rc_flush(c);
  /* a's deadline passes with no answer: a fails, alone */
  tick(c, t0 + MS(100));
  assert_int_equal(a.calls, 1);
  assert_int_equal(a.type, -1);
  assert_int_equal(b.calls, 0);
  assert_int_equal(downs, 0);
  assert_int_equal(node_state(c, 0), RC_NODE_UP);
  /* a's late answer is dropped; b's is b's */
  fake_ns = t0 + MS(120);
  feed(c, 0, REPLY REPLY);
  assert_int_equal(a.calls, 1);
  assert_int_equal(b.calls, 1);
  assert_int_equal(b.type, REDIS_REPLY_STRING);
  tick(c, t0 + MS(200));
  assert_int_equal(downs, 0);
  rc_client_free(c);
}

/* The retried request's own late answer is not a dead node; but a node
   that answers nothing at all, the retried request included, still fails
   within the timeout of the retry's sending. */
static void a_silent_node_still_fails_after_a_retry(void **state) {
  (void)state;
  rc_client *c = client_of(1, 100);
  int64_t t0 = fake_ns;
  outcome a = {0};
  send_get(c, -1, "a", &a);
  rc_flush(c);
  connect_node(c, 0);
  fake_ns = t0 + MS(40);
  feed(c, 0, TRYAGAIN);
  fake_ns = t0 + MS(41);
  rc_flush(c);
  tick(c, t0 + MS(100));
  assert_int_equal(a.calls, 1);
  assert_int_equal(downs, 0);
  /* the retry was sent at 41 ms: the node has until 141 ms */
  tick(c, t0 + MS(141));
  assert_int_equal(downs, 1);
  assert_int_equal(node_state(c, 0), RC_NODE_DOWN);
  assert_int_equal(a.calls, 1);
  rc_client_free(c);
}

/* TRYAGAIN with too little of the deadline left for a pause and an
   answer: the request fails at once, alone, and is not sent again. */
static void tryagain_near_the_deadline_is_not_retried(void **state) {
  (void)state;
  rc_client *c = client_of(1, 100);
  int64_t t0 = fake_ns;
  outcome a = {0};
  send_get(c, -1, "a", &a);
  rc_flush(c);
  connect_node(c, 0);
  /* 5 ms left: room for a 1 ms pause, not for an answer with a margin */
  fake_ns = t0 + MS(95);
  feed(c, 0, TRYAGAIN);
  assert_int_equal(a.calls, 1);
  assert_int_equal(a.type, -1);
  fake_ns = t0 + MS(97);
  rc_flush(c);
  assert_int_equal(sent(c, 0, "$1\r\na\r\n"), 1);
  assert_int_equal(rc_client_retries(c), 0);
  assert_int_equal(downs, 0);
  rc_client_free(c);
}

/* ---- NOSCRIPT, then SCRIPT LOAD refused ---- */

#define NOSCRIPT "-NOSCRIPT No matching script. Please use EVAL.\r\n"

/* A node that answers NOSCRIPT and then refuses the SCRIPT LOAD (out of
   memory, an ACL, ...) fails the request that waited for the script, not
   the node and the other requests on it. */
static void a_refused_script_load_fails_only_its_request(void **state) {
  (void)state;
  rc_client *c = client_of(1, 100);
  outcome a = {0}, b = {0}, d = {0};
  send_get(c, -1, "a", &a);
  rc_flush(c);
  connect_node(c, 0);
  feed(c, 0, NOSCRIPT);
  /* b goes behind the SCRIPT LOAD and a's resend */
  send_get(c, -1, "b", &b);
  rc_flush(c);
  assert_int_equal(sent(c, 0, "SCRIPT"), 2);
  assert_int_equal(sent(c, 0, "$1\r\na\r\n"), 2);
  feed(c, 0, "-OOM command not allowed when used memory > 'maxmemory'.\r\n");
  assert_int_equal(downs, 0);
  assert_int_equal(node_state(c, 0), RC_NODE_UP);
  assert_int_equal(a.calls, 0);
  /* a, still without its script: failed, not sent a third time */
  feed(c, 0, NOSCRIPT);
  assert_int_equal(a.calls, 1);
  assert_int_equal(a.type, REDIS_REPLY_ERROR);
  rc_flush(c);
  assert_int_equal(sent(c, 0, "$1\r\na\r\n"), 2);
  feed(c, 0, REPLY);
  assert_int_equal(b.calls, 1);
  assert_int_equal(b.type, REDIS_REPLY_STRING);
  /* the node goes on */
  send_get(c, -1, "d", &d);
  rc_flush(c);
  feed(c, 0, REPLY);
  assert_int_equal(d.type, REDIS_REPLY_STRING);
  assert_int_equal(downs, 0);
  rc_client_free(c);
}

/* ---- out of memory ---- */

/* A command of `len` bytes (a GET of a long key). */
static char *long_cmd(size_t len) {
  char *cmd = malloc(len);
  assert_non_null(cmd);
  size_t klen = len - 22; /* "*2\r\n$3\r\nGET\r\n$NNNN\r\n" ... "\r\n" */
  int n = sprintf(cmd, "*2\r\n$3\r\nGET\r\n$%zu\r\n", klen);
  assert_int_equal((size_t)n + klen + 2, len);
  memset(cmd + n, 'k', klen);
  memcpy(cmd + n + klen, "\r\n", 2);
  return cmd;
}

/* ASK: the resend goes after ASKING, whose flag lasts one command. When
   the resend cannot be queued, neither is its ASKING: a lone ASKING would
   flag the next command for that node, whatever its slot, and the
   importing node would serve it (a key the source still holds, created
   anew there). */
static void no_asking_is_queued_without_its_command(void **state) {
  (void)state;
  rc_client *c = client_of(2, 100);
  set_slot(c, 5, 1);
  outcome a = {0};
  size_t len = 5000;
  assert_int_equal(rc_send(c, 0, long_cmd(len), len, record, &a), 0);
  rc_flush(c);
  connect_node(c, 0);
  /* node 1's buffer can take ASKING (its first 4096 bytes), not both */
  fail_from = 8192;
  feed(c, 0, "-ASK 0 127.0.0.1:7001\r\n");
  fail_from = 0;
  assert_int_equal(a.calls, 1);
  assert_int_equal(a.type, -1);
  size_t queued_bytes;
  assert_int_equal(rc_client_node_queued(c, 1, &queued_bytes), 0);
  assert_int_equal(queued_bytes, 0);
  /* the next command for node 1 goes without ASKING */
  served_by(c, 5, "b", 1);
  assert_int_equal(sent(c, 1, "ASKING"), 0);
  rc_client_free(c);
}

/* ---- MOVED: the whole map read again ---- */

#define SLOTS_SENT "$7\r\nCLUSTER\r\n$5\r\nSLOTS\r\n"
#define NODE_ID "$40\r\n0123456789012345678901234567890123456789\r\n"
/* CLUSTER SLOTS: 0-8191 on 127.0.0.1:7001, 8192-16383 on :7002 (new) */
#define SLOTS                                                       \
  "*2\r\n"                                                          \
  "*3\r\n:0\r\n:8191\r\n*3\r\n$9\r\n127.0.0.1\r\n:7001\r\n" NODE_ID \
  "*3\r\n:8192\r\n:16383\r\n*3\r\n$9\r\n127.0.0.1\r\n:7002\r\n" NODE_ID

/* A MOVED updates its slot and has the node it names send the whole map
   (CLUSTER SLOTS): the other slots it moved need no MOVED of their own,
   a node it names for the first time is added. Once a second at most. */
static void a_moved_reads_the_whole_map_again(void **state) {
  (void)state;
  rc_client *c = client_of(2, 100);
  outcome a = {0}, d = {0}, m = {0};
  send_get(c, 10, "a", &a);
  rc_flush(c);
  connect_node(c, 0);
  feed(c, 0, "-MOVED 10 127.0.0.1:7001\r\n");
  assert_int_equal(slot_of(c, 10), 1);
  rc_flush(c);
  connect_node(c, 1);
  assert_int_equal(sent(c, 1, SLOTS_SENT), 1);
  feed(c, 1, REPLY SLOTS);
  assert_int_equal(a.type, REDIS_REPLY_STRING);
  assert_int_equal(rt_nodes(rc_client_router(c)), 3);
  assert_int_equal(rt_addr(rc_client_router(c), 2)->port, 7002);
  assert_int_equal(slot_of(c, 0), 1);
  assert_int_equal(slot_of(c, 8191), 1);
  assert_int_equal(slot_of(c, 8192), 2);
  assert_int_equal(slot_of(c, 16383), 2);
  /* slot 9000 goes to the new node at once */
  served_by(c, 9000, "b", 2);
  /* another MOVED within the second: its slot, no CLUSTER SLOTS */
  send_get(c, 20, "d", &d);
  rc_flush(c);
  feed(c, 1, "-MOVED 20 127.0.0.1:7000\r\n");
  rc_flush(c);
  feed(c, 0, REPLY);
  assert_int_equal(d.type, REDIS_REPLY_STRING);
  assert_int_equal(slot_of(c, 20), 0);
  assert_int_equal(sent(c, 0, SLOTS_SENT), 0);
  /* a second later, a MOVED reads the map again */
  fake_ns += SEC(1);
  send_get(c, 20, "m", &m);
  rc_flush(c);
  feed(c, 0, "-MOVED 20 127.0.0.1:7001\r\n");
  rc_flush(c);
  assert_int_equal(sent(c, 1, SLOTS_SENT), 2);
  feed(c, 1, REPLY SLOTS);
  assert_int_equal(m.type, REDIS_REPLY_STRING);
  assert_int_equal(slot_of(c, 20), 1);
  assert_int_equal(downs, 0);
  rc_client_free(c);
}

/* ---- a master that dies: the map read again from another node ---- */

/* CLUSTER SLOTS: every slot on 127.0.0.1:PORT (7000: the dead node, not
   failed over yet; 7002: its replica, promoted) */
#define SLOTS_ON(port) \
  "*1\r\n*3\r\n:0\r\n:16383\r\n*3\r\n$9\r\n127.0.0.1\r\n:" port "\r\n" NODE_ID

/* Node nd dies: its connection breaks, and the new connection its calls
   are sent again on is refused (what it was asked fails). */
static void dies(rc_client *c, int nd) {
  fake_sock *f = sock_of(c, nd);
  f->on_read(f->ud, "connection reset by peer", NULL, 0);
  if (node_state(c, nd) == RC_NODE_CONNECTING) {
    f = sock_of(c, nd);
    f->on_connect(f->ud, "connection refused");
  }
  assert_int_equal(node_state(c, nd), RC_NODE_DOWN);
}

/* Node 0 dies under a call for slot 10 (which fails); the map is asked
   of node 1, which answers `slots`. */
static void master_dies(rc_client *c, const char *slots) {
  outcome a = {0};
  send_get(c, 10, "a", &a);
  rc_flush(c);
  connect_node(c, 0);
  dies(c, 0);
  assert_int_equal(a.calls, 1);
  assert_int_equal(a.type, -1);
  rc_flush(c);
  connect_node(c, 1);
  assert_int_equal(sent(c, 1, SLOTS_SENT), 1);
  feed(c, 1, slots);
}

/* A master that dies answers nothing, not even a MOVED: its failure has
   the map read from another node (here one never used: connected for
   it), and its slots' next calls go to the master that map names, with
   no MOVED. A node that serves no slot failing asks nothing. */
static void a_dead_master_is_relearned_from_another_node(void **state) {
  (void)state;
  rc_client *c = client_of(3, 100);
  master_dies(c, SLOTS_ON("7002")); /* (its call answered per
                                       on_store_error) */
  for (int x = 0; x < 16384; x++) assert_int_equal(slot_of(c, x), 2);
  served_by(c, 10, "b", 2);
  /* node 1 (no slot) fails two seconds later: no CLUSTER SLOTS (a call
     in flight on it, so that its connection's end is a failure: an idle
     one closed is no failure) */
  fake_ns += SEC(2);
  outcome e = {0};
  set_slot(c, 30, 1);
  send_get(c, 30, "e", &e);
  set_slot(c, 30, 2);
  rc_flush(c);
  dies(c, 1);
  assert_int_equal(e.type, -1);
  rc_flush(c);
  assert_int_equal(sent(c, 2, SLOTS_SENT), 0);
  assert_int_equal(downs, 2);
  rc_client_free(c);
}

/* Until its replica takes over, the map read still gives the dead node its
   slots, which stay with it (never "nobody"). The calls it refuses while
   down (a long breaker here) ask again, once a second at most, so that the
   promotion is learned within about a second of it. */
static void a_refused_call_asks_again_until_the_replica_takes_over(
    void **state) {
  (void)state;
  rc_client *c = client_with(3, 100, 5000);
  set_slot(c, 20, 1);
  int64_t t0 = fake_ns;
  outcome a = {0}, d = {0}, b = {0};
  send_get(c, 10, "a", &a);
  send_get(c, 20, "d", &d);
  rc_flush(c);
  connect_node(c, 0);
  connect_node(c, 1);
  feed(c, 1, REPLY);
  dies(c, 0);
  rc_flush(c);
  assert_int_equal(sent(c, 1, SLOTS_SENT), 1); /* the node that is up */
  feed(c, 1, SLOTS_ON("7000"));
  assert_int_equal(slot_of(c, 10), 0);
  assert_int_equal(slot_of(c, 20), 0);
  size_t len;
  for (int64_t at = 100; at < 1000; at += 300) {
    fake_ns = t0 + MS(at);
    assert_int_equal(rc_send(c, 10, cmd_of("x", &len), len, record, &b), -1);
    rc_flush(c);
  }
  assert_int_equal(sent(c, 1, SLOTS_SENT), 1);
  /* the replica has taken over; a second after the last ask, a refused
     call asks again */
  fake_ns = t0 + SEC(1);
  assert_int_equal(rc_send(c, 10, cmd_of("x", &len), len, record, &b), -1);
  rc_flush(c);
  assert_int_equal(sent(c, 1, SLOTS_SENT), 2);
  feed(c, 1, SLOTS_ON("7002"));
  assert_int_equal(slot_of(c, 10), 2);
  served_by(c, 10, "b", 2);
  assert_int_equal(downs, 1);
  rc_client_free(c);
}

/* With the breaker's interval past, the next call for a dead node is its
   probe; its connect is refused: that failure asks for the map again. */
static void a_failed_probe_asks_again(void **state) {
  (void)state;
  rc_client *c = client_of(3, 100);
  int64_t t0 = fake_ns;
  outcome b = {0};
  master_dies(c, SLOTS_ON("7000"));
  fake_ns = t0 + SEC(1);
  send_get(c, 10, "b", &b); /* the probe */
  rc_flush(c);
  fake_sock *f = sock_of(c, 0);
  f->on_connect(f->ud, "connection refused");
  assert_int_equal(b.calls, 1);
  assert_int_equal(b.type, -1);
  rc_flush(c);
  assert_int_equal(sent(c, 1, SLOTS_SENT), 2);
  feed(c, 1, SLOTS_ON("7002"));
  served_by(c, 10, "d", 2);
  assert_int_equal(downs, 2);
  rc_client_free(c);
}

/* ---- the workers' shared map ---- */

/* Another client on nodes 127.0.0.1:PORT, numbered in the order given,
   node `owner` serving every slot (the sockets of others kept). */
static rc_client *client_on(const int *ports, int n, int owner) {
  static rc_topology t;
  memset(&t, 0, sizeof t);
  for (int i = 0; i < n; i++)
    assert_int_equal(rc_topology_node(&t, "127.0.0.1", ports[i]), i);
  memset(t.slot_node, owner, sizeof t.slot_node);
  rc_config cfg;
  memset(&cfg, 0, sizeof cfg);
  cfg.cluster = 1;
  cfg.timeout_ms = 100;
  cfg.breaker_ms = 1000;
  rc_client *c = rc_client_new(&fake_loop, &cfg, &t, &test_alloc);
  assert_non_null(c);
  return c;
}

/* The map one worker's client reads reaches the others: a client that
   had no call for the dead master (its nodes numbered otherwise) sends
   its first call for those slots to the new master, with no failure and
   no CLUSTER SLOTS of its own. A client not sharing keeps the old map. */
static void a_map_one_client_reads_is_taken_by_the_others(void **state) {
  (void)state;
  rc_client *c = client_of(3, 100);
  static const int rev[3] = {7002, 7001, 7000};
  rc_client *idle = client_on(rev, 3, 2), *alone = client_on(rev, 3, 2);
  rc_shared_map *m = rc_shared_map_new();
  assert_non_null(m);
  rc_client_share(c, m);
  rc_client_share(idle, m);
  master_dies(c, SLOTS_ON("7002"));
  served_by(idle, 10, "b", 0); /* 7002 */
  assert_int_equal(sent(idle, 0, SLOTS_SENT), 0);
  for (int x = 0; x < 16384; x++) assert_int_equal(slot_of(idle, x), 0);
  assert_null(rc_client_node_sock(idle, 2)); /* the dead 7000: never tried */
  for (int x = 0; x < 16384; x++) assert_int_equal(slot_of(alone, x), 2);
  assert_int_equal(downs, 1);
  rc_client_free(alone);
  rc_client_free(idle);
  rc_client_free(c);
  rc_shared_map_free(m);
}

/* A map asked for inside rc_flush (node 2, which serves slot 10, times
   out in its deadline check, after the nodes were flushed) is written at
   once, by the timer: left queued, its own deadline would fail node 0, a
   healthy node that was never sent it. */
static void a_map_asked_for_in_a_flush_is_written_at_once(void **state) {
  (void)state;
  rc_client *c = client_of(3, 100);
  set_slot(c, 10, 2);
  served_by(c, 20, "z", 0); /* node 0: connected and up */
  outcome a = {0};
  send_get(c, 10, "a", &a);
  rc_flush(c);
  connect_node(c, 2); /* and silent */
  fake_ns += SEC(1) / 10 + 1;
  rc_flush(c); /* its deadline check fails node 2 */
  assert_int_equal(a.type, -1);
  assert_true(rc_client_timer_at(c) && rc_client_timer_at(c) <= fake_ns);
  tick(c, fake_ns);
  assert_int_equal(sent(c, 0, SLOTS_SENT), 1);
  feed(c, 0, SLOTS_ON("7000"));
  assert_int_equal(slot_of(c, 10), 0);
  tick(c, fake_ns + SEC(1));
  assert_int_equal(node_state(c, 0), RC_NODE_UP);
  assert_int_equal(downs, 1);
  rc_client_free(c);
}

/* A map another client shared last can be older than what this one
   knows (read from a node that had not heard of the promotion yet): the
   slots it gives to a node this client has down stay where they are. */
static void a_shared_map_never_routes_to_a_node_this_client_has_down(
    void **state) {
  (void)state;
  rc_client *c = client_of(3, 100);
  static const int same[3] = {7000, 7001, 7002};
  rc_client *other = client_on(same, 3, 0);
  rc_shared_map *m = rc_shared_map_new();
  assert_non_null(m);
  rc_client_share(c, m);
  rc_client_share(other, m);
  master_dies(c, SLOTS_ON("7002")); /* c: node 0 down, slots on 2 */
  /* other took that map with its call, then reads a stale one (every
     slot still on 7000) after a MOVED, and shares it */
  outcome b = {0};
  send_get(other, 20, "b", &b);
  rc_flush(other);
  connect_node(other, 2);
  feed(other, 2, "-MOVED 20 127.0.0.1:7001\r\n");
  rc_flush(other);
  connect_node(other, 1);
  feed(other, 1, REPLY SLOTS_ON("7000"));
  assert_int_equal(b.type, REDIS_REPLY_STRING);
  assert_int_equal(slot_of(other, 10), 0);
  /* c keeps node 2 for the slots, and its next call goes there */
  served_by(c, 10, "d", 2);
  for (int x = 0; x < 16384; x++) assert_int_equal(slot_of(c, x), 2);
  rc_client_free(other);
  rc_client_free(c);
  rc_shared_map_free(m);
}

/* ---- connections Redis closes, deadlines from the arrival ---- */

/* Redis's end of node nd's connection: closed (EOF, or a reset). */
static void closed_by_redis(rc_client *c, int nd) {
  fake_sock *f = sock_of(c, nd);
  f->on_read(f->ud, "socket closed by peer", NULL, 0);
}

/* A decide.lua call of its own words: "g" mode, one key per request
   (keys k0, k1, ...), or mode "0" (one request) when n is 0. */
static char *script_call(int n, size_t *len) {
  const char *argv[3 + 1 + 2 + 3 * 4];
  size_t lens[sizeof argv / sizeof *argv];
  char keys[4][16], mode[6] = "g", nk[16];
  int k = n ? n : 1, c = 0;
  argv[c++] = "EVALSHA";
  argv[c++] = "0123456789012345678901234567890123456789";
  snprintf(nk, sizeof nk, "%d", k);
  argv[c++] = nk;
  for (int i = 0; i < k; i++) {
    snprintf(keys[i], sizeof keys[i], "k%d", i);
    argv[c++] = keys[i];
    mode[1 + i] = 1;
  }
  argv[c++] = "";
  argv[c++] = n ? mode : "0";
  for (int i = 0; i < 3 * k; i++) argv[c++] = "v";
  for (int i = 0; i < c; i++) lens[i] = strlen(argv[i]);
  if (n) lens[5 + k - 1] = 1 + (size_t)n; /* (the mode's bytes) */
  char *cmd;
  int l = redisFormatCommandArgv(&cmd, c, argv, lens);
  assert_true(l > 0);
  *len = (size_t)l;
  return cmd;
}

/* One request's reply (one key): now, allowed, six figures. */
#define DECIDED "*8\r\n$3\r\n123\r\n:1\r\n:1\r\n:10\r\n:9\r\n:0\r\n:0\r\n:0\r\n"
/* A dry call's mode ("1") and its first value. */
#define DRY "$1\r\n1\r\n$1\r\nv\r\n"

/* Redis closing an idle connection (its `timeout`, CLIENT KILL) is no
   failure: no breaker, no warning, and the next call goes on a new
   connection and gets Redis's answer. */
static void an_idle_connection_closed_by_redis_is_no_failure(void **state) {
  (void)state;
  rc_client *c = client_of(1, 100);
  served_by(c, -1, "a", 0);
  fake_sock *old = sock_of(c, 0);
  closed_by_redis(c, 0);
  assert_true(old->closed);
  assert_int_equal(node_state(c, 0), RC_NODE_DOWN);
  assert_false(rt_node_down(rc_client_router(c), 0, fake_ns));
  assert_null(rc_client_node_sock(c, 0)); /* (no connection before a call) */
  served_by(c, -1, "b", 0);
  assert_int_equal(downs, 0);
  rc_client_free(c);
}

/* A call written to a connection that Redis then closes, before its
   reply, may have run: a decision that charges goes again on a new
   connection as dry calls, a request each (decided, charged at most
   once), whose replies are joined into the batch's; a dry call goes
   again as it is. No breaker. */
static void a_call_in_flight_when_redis_closes_is_checked_again(void **state) {
  (void)state;
  rc_client *c = client_of(1, 100);
  served_by(c, -1, "a", 0);
  outcome b = {0}, one = {0};
  size_t len;
  char *cmd = script_call(2, &len);
  assert_int_equal(rc_send(c, -1, cmd, len, record, &b), 0);
  cmd = script_call(0, &len);
  assert_int_equal(rc_send(c, -1, cmd, len, record, &one), 0);
  rc_flush(c);
  assert_int_equal(sent(c, 0, "EVALSHA\r\n"), 2);
  closed_by_redis(c, 0);
  assert_int_equal(b.calls + one.calls, 0);
  connect_node(c, 0); /* the new connection: at once */
  assert_int_equal(sent(c, 0, "EVALSHA\r\n"), 3);
  assert_int_equal(sent(c, 0, DRY), 3);
  feed(c, 0, DECIDED DECIDED DECIDED);
  assert_int_equal(b.calls, 1);
  assert_int_equal(b.type, REDIS_REPLY_ARRAY);
  assert_int_equal(one.calls, 1);
  assert_int_equal(one.type, REDIS_REPLY_ARRAY);
  assert_int_equal(downs, 0);
  rc_client_free(c);
}

/* A call goes again once: lost with its second connection too (which
   had answered its handshake), it fails, still without the breaker. The
   next connection, dead before any reply, is let go once (the one before
   it had worked: conn_lost); a second such connection in a row is a
   failure of the node. */
static void a_call_lost_twice_fails_and_a_fresh_connection_opens_the_breaker(
    void **state) {
  (void)state;
  rc_client *c = client_of(1, 100);
  served_by(c, -1, "a", 0);
  outcome b = {0};
  send_get(c, -1, "b", &b);
  rc_flush(c);
  closed_by_redis(c, 0);
  connect_node(c, 0);
  assert_int_equal(sent(c, 0, "$1\r\nb\r\n"), 1);
  closed_by_redis(c, 0);
  assert_int_equal(b.calls, 1);
  assert_int_equal(b.type, -1);
  assert_int_equal(downs, 0);
  outcome d = {0};
  send_get(c, -1, "d", &d);
  rc_flush(c);
  for (int i = 0; i < 2; i++) {
    fake_sock *f = sock_of(c, 0);
    f->on_connect(f->ud, NULL);
    closed_by_redis(c, 0); /* before its handshake's reply */
  }
  assert_int_equal(d.type, -1);
  assert_int_equal(downs, 1);
  assert_true(rt_node_down(rc_client_router(c), 0, fake_ns));
  rc_client_free(c);
}

/* Connects node nd's new connection and has Redis close it before any
   reply (a CLIENT KILL landing on the reconnection's handshake). */
static void killed_before_its_first_reply(rc_client *c, int nd) {
  fake_sock *f = sock_of(c, nd);
  assert_int_equal(node_state(c, nd), RC_NODE_CONNECTING);
  f->on_connect(f->ud, NULL);
  assert_non_null(strstr(f->out, "SCRIPT"));
  closed_by_redis(c, nd);
}

/* CLIENT KILL repeated quickly: the connection that replaced a killed one
   is killed too, before its first reply. The node's connection before it
   had worked, so that is no failure either: no breaker, no warning, and
   the calls on it go again on a third connection (a charging decision as
   a dry check) and are decided by Redis — both the call that was new on
   it and the one already sent again after the first kill. */
static void a_fresh_connection_killed_after_a_working_one_is_no_failure(
    void **state) {
  (void)state;
  rc_client *c = client_of(1, 100);
  served_by(c, -1, "a", 0);
  outcome one = {0}, b = {0};
  size_t len;
  char *cmd = script_call(0, &len);
  assert_int_equal(rc_send(c, -1, cmd, len, record, &one), 0);
  rc_flush(c);
  closed_by_redis(c, 0); /* one in flight: sent again, dry */
  send_get(c, -1, "b", &b);
  rc_flush(c);
  killed_before_its_first_reply(c, 0);
  assert_int_equal(downs, 0);
  assert_false(rt_node_down(rc_client_router(c), 0, fake_ns));
  assert_int_equal(one.calls + b.calls, 0);
  connect_node(c, 0); /* the third connection: at once */
  assert_int_equal(sent(c, 0, DRY), 1);
  assert_int_equal(sent(c, 0, "$1\r\nb\r\n"), 1);
  feed(c, 0, DECIDED REPLY);
  assert_int_equal(one.calls, 1);
  assert_int_equal(one.type, REDIS_REPLY_ARRAY);
  assert_int_equal(b.calls, 1);
  assert_int_equal(b.type, REDIS_REPLY_STRING);
  assert_int_equal(downs, 0);
  rc_client_free(c);
}

/* A server that closes every connection before answering (a proxy with
   no backend, protected mode) opens the breaker at the first connection
   when none had worked before, and says so; one that says why before it
   closes (Redis at maxclients) fails the node on that reply, even right
   after a working connection, and the warning carries its words. */
static void a_server_that_closes_every_connection_opens_the_breaker(
    void **state) {
  (void)state;
  rc_client *c = client_of(1, 100);
  outcome d = {0};
  send_get(c, -1, "d", &d);
  rc_flush(c);
  killed_before_its_first_reply(c, 0);
  assert_int_equal(d.calls, 1);
  assert_int_equal(d.type, -1);
  assert_int_equal(downs, 1);
  assert_true(rt_node_down(rc_client_router(c), 0, fake_ns));
  rc_client_free(c);

  c = client_of(1, 100);
  served_by(c, -1, "a", 0);
  closed_by_redis(c, 0);
  outcome e = {0};
  send_get(c, -1, "e", &e);
  rc_flush(c);
  fake_sock *f = sock_of(c, 0);
  f->on_connect(f->ud, NULL);
  feed(c, 0, "-ERR max number of clients reached\r\n");
  assert_int_equal(e.calls, 1);
  assert_int_equal(e.type, -1);
  assert_int_equal(downs, 1);
  assert_non_null(strstr(last_log, "max number of clients reached"));
  assert_true(rt_node_down(rc_client_router(c), 0, fake_ns));
  rc_client_free(c);
}

/* The timeout counts from the request's arrival (rc_send_since), and the
   request is answered the answer's slack before it (1 ms here): the time
   it waited for its loop pass's end counts. The node fails only when it
   leaves a command unanswered for the timeout from its queuing. */
static void a_request_is_answered_within_the_timeout_of_its_arrival(
    void **state) {
  (void)state;
  rc_client *c = client_of(1, 100);
  served_by(c, -1, "a", 0);
  int64_t arrived = fake_ns;
  fake_ns += MS(30); /* a long pass */
  outcome b = {0};
  size_t len;
  char *cmd = cmd_of("b", &len);
  assert_int_equal(rc_send_since(c, -1, cmd, len, arrived, record, &b), 0);
  rc_flush(c);
  assert_int_equal(rc_client_timer_at(c), arrived + MS(99));
  tick(c, arrived + MS(99));
  assert_int_equal(b.calls, 1);
  assert_int_equal(b.type, -1);
  assert_string_equal(b.err, "timeout");
  assert_int_equal(downs, 0);
  tick(c, arrived + MS(130));
  assert_int_equal(downs, 1);
  rc_client_free(c);
}

/* ---- the Redis module ---- */

/* SL.VERSION where the module is loaded, built from the decide.lua whose
   SHA-1 is sha. */
static const char *module_version(const char *sha) {
  static char buf[128];
  snprintf(buf, sizeof buf, "*2\r\n+0.1.0\r\n$40\r\n%s\r\n", sha);
  return buf;
}

/* The commands' names as sent (the script's text mentions EVALSHA). */
#define EVALSHA_WORD "$7\r\nEVALSHA\r\n"
#define DECIDE_WORD "$9\r\nSL.DECIDE\r\n"

/* How many times s occurs in all node nd was sent, binary included (a
   call's packed numbers hold NUL bytes, where sent() stops). */
static int sent_bin(rc_client *c, int nd, const char *s) {
  fake_sock *f = sock_of(c, nd);
  int n = 0;
  size_t sl = strlen(s);
  const char *p = f->out, *end = f->out + f->out_len;
  while (p && (p = memmem(p, (size_t)(end - p), s, sl))) {
    n++;
    p += sl;
  }
  return n;
}

/* One exact-mode call (rs_format's EVALSHA) sent on node 0. */
static void send_call(rc_client *c, outcome *o) {
  sl_policy p = {SL_TOKEN_BUCKET, 10, 10, 1000000000};
  rs_check chk = {.policy = &p, .key = "k", .key_len = 1, .cost = 1};
  rs_call call;
  char *cmd;
  size_t len;
  assert_int_equal(rs_format(&chk, 1, RS_DECIDE, -1, &call, &cmd, &len), 0);
  assert_int_equal(rc_send(c, -1, cmd, len, record, o), 0);
  rc_flush(c);
}

/* A node whose handshake finds the module gets SL.DECIDE instead of the
   script's EVALSHA; after a reconnect to a node without it, EVALSHA
   again (the handshake asks at every connect). */
static void the_module_is_found_at_each_connect(void **state) {
  (void)state;
  rc_client *c = client_of(1, 100);
  outcome o = {0};
  send_call(c, &o); /* connects: queued behind the handshake, as EVALSHA */
  fake_sock *f = sock_of(c, 0);
  f->on_connect(f->ud, NULL);
  assert_int_equal(sent(c, 0, "SL.VERSION"), 1); /* the question */
  feed(c, 0, LOADED);
  feed(c, 0, module_version(rs_script_sha()));
  feed(c, 0, REPLY);
  assert_int_equal(o.calls, 1);
  assert_int_equal(sent_bin(c, 0, EVALSHA_WORD), 1);
  send_call(c, &o);
  assert_int_equal(sent_bin(c, 0, DECIDE_WORD), 1);
  assert_int_equal(sent_bin(c, 0, EVALSHA_WORD), 1);
  feed(c, 0, REPLY);
  assert_int_equal(o.calls, 2);
  closed_by_redis(c, 0);
  send_call(c, &o);
  connect_node(c, 0); /* this time: no module */
  feed(c, 0, REPLY);
  int before = sent_bin(c, 0, EVALSHA_WORD);
  send_call(c, &o);
  assert_int_equal(sent_bin(c, 0, EVALSHA_WORD), before + 1);
  assert_int_equal(sent_bin(c, 0, DECIDE_WORD), 0);
  feed(c, 0, REPLY);
  assert_int_equal(o.calls, 4);
  rc_client_free(c);
}

/* The module's packed reply (decide.lua's REPLY_P, asked for by the "p"
   every decision carries) reaches the caller as the script's array. */
static void a_packed_reply_reaches_its_caller_as_an_array(void **state) {
  (void)state;
  rc_client *c = client_of(1, 100);
  outcome o = {0};
  send_call(c, &o); /* connects: queued behind the handshake */
  fake_sock *f = sock_of(c, 0);
  f->on_connect(f->ud, NULL);
  feed(c, 0, LOADED);
  feed(c, 0, module_version(rs_script_sha()));
  feed(c, 0, REPLY);
  send_call(c, &o);
  assert_int_equal(sent_bin(c, 0, DECIDE_WORD), 1);
  assert_int_equal(sent_bin(c, 0, "$2\r\np0\r\n"), 2); /* both calls */
  /* now, the request's answer, six figures: little-endian int64 */
  const long long v[8] = {1767225600000000000, 1, 1, 10, 9, 100000000, 0, 7};
  char resp[8 * 8 + 16];
  size_t at = (size_t)snprintf(resp, sizeof resp, "$64\r\n");
  for (int i = 0; i < 8; i++)
    for (int b = 0; b < 8; b++)
      resp[at++] = (char)((unsigned long long)v[i] >> (8 * b));
  memcpy(resp + at, "\r\n", 2);
  f->on_read(f->ud, NULL, resp, at + 2);
  assert_int_equal(o.calls, 2);
  assert_int_equal(o.type, REDIS_REPLY_ARRAY);
  assert_int_equal(o.elements, 8);
  assert_int_equal(o.last, 7);
  rc_client_free(c);
}

static int wakes;
static void count_wake(void *ud) {
  assert_ptr_equal(ud, &wakes);
  wakes++;
}

/* A queued command asks the loop's owner for a flush (rc_loop.wake), and
   only the flush writes it: the daemon's worker runs that flush inside
   its loop's pass, where sockets may be written and closed. */
static void a_queued_command_asks_for_a_flush(void **state) {
  (void)state;
  loop_for_next = fake_loop;
  loop_for_next.wake = count_wake;
  loop_for_next.wake_ud = &wakes;
  rc_client *c = client_of(1, 100);
  wakes = 0;
  outcome o = {0};
  send_get(c, 0, "wakeme", &o);
  assert_true(wakes >= 1);
  assert_null(rc_client_node_sock(c, 0)); /* no connect before the flush */
  rc_flush(c);
  connect_node(c, 0);
  assert_int_equal(sent(c, 0, "wakeme"), 1);
  feed(c, 0, REPLY);
  assert_int_equal(o.calls, 1);
  wakes = 0; /* and on an open connection */
  send_get(c, 0, "zq9x", &o);
  assert_true(wakes >= 1);
  assert_int_equal(sent(c, 0, "zq9x"), 0);
  rc_flush(c);
  assert_int_equal(sent(c, 0, "zq9x"), 1);
  feed(c, 0, REPLY);
  assert_int_equal(o.calls, 2);
  rc_client_free(c);
}

/* A module built from another decide.lua (an upgrade half done) gets the
   script's EVALSHA, never an SL.DECIDE whose arguments it may read
   otherwise, and the log says why. */
static void a_module_of_another_build_gets_the_script(void **state) {
  (void)state;
  rc_client *c = client_of(1, 100);
  outcome o = {0};
  send_call(c, &o);
  fake_sock *f = sock_of(c, 0);
  f->on_connect(f->ud, NULL);
  feed(c, 0, LOADED);
  feed(c, 0, module_version("0123456789abcdef0123456789abcdef01234567"));
  assert_non_null(strstr(last_log, "another decide.lua"));
  feed(c, 0, REPLY);
  send_call(c, &o);
  assert_int_equal(sent_bin(c, 0, EVALSHA_WORD), 2);
  assert_int_equal(sent_bin(c, 0, DECIDE_WORD), 0);
  feed(c, 0, REPLY);
  assert_int_equal(o.calls, 2);
  rc_client_free(c);
}

int main(void) {
  fake_clock_install();
  log_set_sink(log_sink, NULL);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(an_idle_connection_closed_by_redis_is_no_failure),
      cmocka_unit_test(a_call_in_flight_when_redis_closes_is_checked_again),
      cmocka_unit_test(
          a_call_lost_twice_fails_and_a_fresh_connection_opens_the_breaker),
      cmocka_unit_test(
          a_fresh_connection_killed_after_a_working_one_is_no_failure),
      cmocka_unit_test(a_server_that_closes_every_connection_opens_the_breaker),
      cmocka_unit_test(a_request_is_answered_within_the_timeout_of_its_arrival),
      cmocka_unit_test(a_retried_request_past_its_deadline_fails_alone),
      cmocka_unit_test(a_silent_node_still_fails_after_a_retry),
      cmocka_unit_test(tryagain_near_the_deadline_is_not_retried),
      cmocka_unit_test(a_refused_script_load_fails_only_its_request),
      cmocka_unit_test(no_asking_is_queued_without_its_command),
      cmocka_unit_test(a_moved_reads_the_whole_map_again),
      cmocka_unit_test(a_dead_master_is_relearned_from_another_node),
      cmocka_unit_test(a_refused_call_asks_again_until_the_replica_takes_over),
      cmocka_unit_test(a_failed_probe_asks_again),
      cmocka_unit_test(a_map_one_client_reads_is_taken_by_the_others),
      cmocka_unit_test(a_map_asked_for_in_a_flush_is_written_at_once),
      cmocka_unit_test(
          a_shared_map_never_routes_to_a_node_this_client_has_down),
      cmocka_unit_test(the_module_is_found_at_each_connect),
      cmocka_unit_test(a_packed_reply_reaches_its_caller_as_an_array),
      cmocka_unit_test(a_queued_command_asks_for_a_flush),
      cmocka_unit_test(a_module_of_another_build_gets_the_script),
  };
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  socks_free();
  return rc;
}
