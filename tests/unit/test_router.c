/*
 * test_router.c — Redis Cluster's routing decisions (src/fleet/router.c),
 * which exact mode's client and approximate mode's sync thread both
 * follow: what to do with each answer a node gives instead of running a
 * call (MOVED, ASK, NOSCRIPT, TRYAGAIN), the breaker, and whom to ask for
 * the slot map and when (after a MOVED; after a master dies). No I/O and
 * no clock: the time is an argument, so every case is a few calls.
 * test_client.c and test_sync.c check that each client does what it is
 * told; fleet_cluster.sh runs both against a real cluster.
 */
#include "helpers.h"

#include "fleet/router.h"

/* ---- local helpers ---- */

#define T SEC(1000) /* the tests' "now" */

/* A router on nodes 127.0.0.1:7000.. (node 0 serving every slot), a
   cluster when there are several, breaker 1 s, timeout 50 ms. */
static rt_router *router_of(int nodes) {
  static rt_router r;
  static rc_topology t;
  memset(&t, 0, sizeof t);
  for (int i = 0; i < nodes; i++)
    assert_int_equal(rc_topology_node(&t, "127.0.0.1", 7000 + i), i);
  memset(t.slot_node, 0, sizeof t.slot_node);
  rt_init(&r, &t, nodes > 1, 1000, 50);
  return &r;
}

/* The router's answer to error text err from node n for call c. */
static rt_action on_error(rt_router *r, rt_call *c, int n, const char *err) {
  return rt_on_reply(r, c, n, err, strlen(err));
}

/* A CLUSTER SLOTS reply from RESP text. */
static redisReply *reply_of(const char *resp) {
  redisReader *rd = redisReaderCreate();
  assert_non_null(rd);
  assert_int_equal(redisReaderFeed(rd, resp, strlen(resp)), REDIS_OK);
  void *x = NULL;
  assert_int_equal(redisReaderGetReply(rd, &x), REDIS_OK);
  assert_non_null(x);
  redisReaderFree(rd);
  return x;
}

#define NODE_ID "$40\r\n0123456789012345678901234567890123456789\r\n"
/* every slot on 127.0.0.1:PORT */
#define SLOTS_ON(port) \
  "*1\r\n*3\r\n:0\r\n:16383\r\n*3\r\n$9\r\n127.0.0.1\r\n:" port "\r\n" NODE_ID

/* ---- the map ---- */

static void a_slot_no_node_is_known_for_goes_to_node_0(void **state) {
  (void)state;
  rt_router *r = router_of(3);
  rt_set_slot(r, 7, 2);
  assert_int_equal(rt_slot_node(r, 7), 2);
  assert_int_equal(rt_slot_node(r, -1), 0);
  rt_set_slot(r, 8, 0xff);
  assert_int_equal(rt_slot_node(r, 8), 0);
  assert_true(rt_serves_slots(r, 2));
  assert_false(rt_serves_slots(r, 1));
}

/* ---- a node's answer ---- */

/* A reply that is no error, or an error the router does not follow, is
   the call's answer. */
static void other_replies_are_accepted(void **state) {
  (void)state;
  rt_router *r = router_of(2);
  rt_call c = {0};
  assert_int_equal(rt_on_reply(r, &c, 0, NULL, 0).verb, RT_ACCEPT);
  assert_int_equal(on_error(r, &c, 0, "ERR wrong number of arguments").verb,
                   RT_ACCEPT);
  assert_int_equal(on_error(r, &c, 0, "CLUSTERDOWN The cluster is down").verb,
                   RT_ACCEPT);
  assert_int_equal(on_error(r, &c, 0, "MOVED x 127.0.0.1:7001").verb,
                   RT_ACCEPT);
  assert_int_equal(c.redirects, 0);
}

/* MOVED: the slot is learned (a node never seen added), the call goes
   there, and the map is to be read again from that node. */
static void moved_learns_the_slot_and_resends_there(void **state) {
  (void)state;
  rt_router *r = router_of(2);
  rt_call c = {0};
  rt_action a = on_error(r, &c, 0, "MOVED 10 127.0.0.1:7005");
  assert_int_equal(a.verb, RT_RESEND);
  assert_int_equal(a.node, 2);
  assert_true(a.map);
  assert_int_equal(rt_nodes(r), 3);
  assert_int_equal(rt_addr(r, 2)->port, 7005);
  assert_int_equal(rt_slot_node(r, 10), 2);
  assert_int_equal(rt_slot_node(r, 11), 0);
  assert_int_equal(c.redirects, 1);
  assert_false(c.asking);
}

/* A redirect that names no host means the answering node's host. */
static void a_redirect_without_a_host_is_the_answering_nodes(void **state) {
  (void)state;
  rt_router *r = router_of(1);
  rc_topology t;
  memset(&t, 0, sizeof t);
  rc_topology_node(&t, "10.0.0.9", 7000);
  rt_init(r, &t, 1, 1000, 50);
  rt_call c = {0};
  rt_action a = on_error(r, &c, 0, "MOVED 3 :7001");
  assert_int_equal(a.verb, RT_RESEND);
  assert_string_equal(rt_addr(r, a.node)->host, "10.0.0.9");
  assert_int_equal(rt_addr(r, a.node)->port, 7001);
}

/* ASK: sent there once, after ASKING; the map keeps the slot where it is
   and is not read again. */
static void ask_resends_after_asking_and_learns_nothing(void **state) {
  (void)state;
  rt_router *r = router_of(2);
  rt_call c = {0};
  rt_action a = on_error(r, &c, 0, "ASK 10 127.0.0.1:7001");
  assert_int_equal(a.verb, RT_RESEND);
  assert_int_equal(a.node, 1);
  assert_false(a.map);
  assert_true(c.asking);
  assert_int_equal(rt_slot_node(r, 10), 0);
}

/* NOSCRIPT: the script is loaded on the node that said it, then the call
   sent again there, after ASKING again when it was an ASK's. */
static void noscript_loads_and_keeps_asking(void **state) {
  (void)state;
  rt_router *r = router_of(2);
  rt_call c = {0};
  on_error(r, &c, 0, "ASK 10 127.0.0.1:7001");
  rt_action a = on_error(r, &c, 1, "NOSCRIPT No matching script.");
  assert_int_equal(a.verb, RT_LOAD);
  assert_int_equal(a.node, 1);
  assert_true(c.asking);
  assert_int_equal(c.redirects, 2);
  /* a MOVED after it: no ASKING any more */
  a = on_error(r, &c, 1, "MOVED 10 127.0.0.1:7000");
  assert_int_equal(a.verb, RT_RESEND);
  assert_false(c.asking);
}

/* Once the SCRIPT LOAD a NOSCRIPT asked for was refused, the next
   NOSCRIPT is the call's answer; a redirect to another node gives it a
   load of its own again. */
static void a_refused_load_is_not_tried_again_on_that_node(void **state) {
  (void)state;
  rt_router *r = router_of(2);
  rt_call c = {0};
  on_error(r, &c, 0, "NOSCRIPT No matching script.");
  c.load_refused = 1;
  assert_int_equal(on_error(r, &c, 0, "NOSCRIPT No matching script.").verb,
                   RT_ACCEPT);
  on_error(r, &c, 0, "ASK 10 127.0.0.1:7001");
  assert_false(c.load_refused);
  assert_int_equal(on_error(r, &c, 1, "NOSCRIPT No matching script.").verb,
                   RT_LOAD);
}

/* Redirects and loads together: at most RT_MAX_REDIRECTS a call, then the
   error is its answer. TRYAGAIN is not counted. */
static void a_call_follows_at_most_five_redirects(void **state) {
  (void)state;
  rt_router *r = router_of(2);
  rt_call c = {0};
  for (int i = 0; i < RT_MAX_REDIRECTS; i++)
    assert_int_equal(on_error(r, &c, 0, i % 2 ? "NOSCRIPT x"
                                               : "ASK 10 127.0.0.1:7001")
                         .verb,
                     i % 2 ? RT_LOAD : RT_RESEND);
  assert_int_equal(on_error(r, &c, 0, "MOVED 10 127.0.0.1:7001").verb,
                   RT_ACCEPT);
  assert_int_equal(on_error(r, &c, 0, "NOSCRIPT x").verb, RT_ACCEPT);
  assert_int_equal(on_error(r, &c, 0, "TRYAGAIN Multiple keys").verb,
                   RT_SPLIT);
  assert_int_equal(rt_slot_node(r, 10), 0);
}

/* A redirect to a node the map has no room for is the call's answer. */
static void a_redirect_to_a_full_map_is_accepted(void **state) {
  (void)state;
  rt_router *r = router_of(2);
  char err[64];
  for (int i = 2; i < RC_MAX_NODES; i++) {
    rt_call c = {0};
    snprintf(err, sizeof err, "ASK 1 127.0.0.1:%d", 7000 + i);
    assert_int_equal(on_error(r, &c, 0, err).verb, RT_RESEND);
  }
  rt_call c = {0};
  assert_int_equal(on_error(r, &c, 0, "MOVED 1 127.0.0.1:9999").verb,
                   RT_ACCEPT);
  assert_int_equal(rt_slot_node(r, 1), 0);
}

static void followable_answers_are_the_four_kinds(void **state) {
  (void)state;
  static const char *yes[] = {"MOVED 1 h:1", "ASK 1 h:1", "NOSCRIPT x",
                              "TRYAGAIN y"};
  static const char *no[] = {"ERR x", "CLUSTERDOWN", "MOVED", "ASKING", ""};
  for (size_t i = 0; i < 4; i++)
    assert_true(rt_followable(yes[i], strlen(yes[i])));
  for (size_t i = 0; i < 5; i++)
    assert_false(rt_followable(no[i], strlen(no[i])));
  assert_false(rt_followable(NULL, 0));
}

/* TRYAGAIN for a single request: tried again after 1 ms, doubled up to
   32 ms, while its deadline leaves room for the pause and an answer (the
   pause again, at least a tenth of the timeout); then it fails. */
static void tryagain_pauses_double_within_the_deadline(void **state) {
  (void)state;
  rt_router *r = router_of(2);
  rt_call c = {0};
  c.deadline = T + SEC(1);
  c.redirects = 3;
  c.asking = 1;
  int64_t want[] = {1, 2, 4, 8, 16, 32, 32};
  for (int i = 0; i < 7; i++) {
    rt_action a = rt_retry(r, &c, T);
    assert_int_equal(a.verb, RT_RETRY);
    assert_int_equal(a.at, T + MS(want[i]));
    assert_int_equal(c.tries, i + 1);
  }
  assert_int_equal(c.redirects, 0);
  assert_false(c.asking);
  /* 5 ms left: a 1 ms pause fits, an answer with its margin does not */
  rt_call d = {0};
  d.deadline = T + MS(5);
  rt_action a = rt_retry(r, &d, T);
  assert_int_equal(a.verb, RT_FAIL);
  assert_string_equal(a.why, "TRYAGAIN until the deadline");
  assert_int_equal(d.tries, 0);
  d.deadline = T + MS(6);
  assert_int_equal(rt_retry(r, &d, T).verb, RT_RETRY);
}

/* ---- the breaker ---- */

static void a_failed_node_is_down_for_the_breaker_interval(void **state) {
  (void)state;
  rt_router *r = router_of(2);
  assert_false(rt_node_down(r, 1, T));
  rt_node_failed(r, 1, T);
  assert_true(rt_node_down(r, 1, T + MS(999)));
  assert_false(rt_node_down(r, 1, T + SEC(1)));
  rt_node_up(r, 1);
  rt_node_closed(r, 1);
  assert_false(rt_node_down(r, 1, T + SEC(1)));
}

/* ---- whom to ask for the map, and when ---- */

/* After a MOVED: one at a time, at most once a second, never from a node
   that is down; the answer is read into the map (new nodes added, slots
   it names no master for kept). */
static void the_map_is_asked_for_once_a_second_one_at_a_time(void **state) {
  (void)state;
  rt_router *r = router_of(2);
  assert_true(rt_map_due(r, 1, T));
  rt_map_begin(r, 1, T);
  assert_false(rt_map_due(r, 1, T + SEC(2))); /* still out */
  redisReply *slots = reply_of(
      "*1\r\n*3\r\n:0\r\n:99\r\n*3\r\n$9\r\n127.0.0.1\r\n:7002\r\n" NODE_ID);
  assert_int_equal(rt_map_end(r, 1, slots), 100);
  freeReplyObject(slots);
  assert_int_equal(rt_nodes(r), 3);
  assert_int_equal(rt_slot_node(r, 99), 2);
  assert_int_equal(rt_slot_node(r, 100), 0);
  assert_false(rt_map_due(r, 1, T + MS(999)));
  assert_true(rt_map_due(r, 1, T + SEC(1)));
  rt_node_failed(r, 1, T + SEC(1));
  assert_false(rt_map_due(r, 1, T + SEC(1)));
  assert_true(rt_map_due(r, 0, T + SEC(1)));
  /* a failed ask ends it too */
  rt_map_begin(r, 0, T + SEC(1));
  assert_int_equal(rt_map_end(r, 0, NULL), -1);
  assert_true(rt_map_due(r, 0, T + SEC(2)));
  /* one node, no cluster: never */
  assert_false(rt_map_due(router_of(1), 0, T));
}

/* A node that serves slots fails: the next node after the one asked last
   that is connected is asked, else the first that is not down; the failed
   node and those down never. A node that serves no slot asks nothing. */
static void a_dead_master_is_relearned_from_the_next_node(void **state) {
  (void)state;
  rt_router *r = router_of(4);
  rt_set_slot(r, 5, 3);
  rt_node_failed(r, 0, T);
  assert_int_equal(rt_relearn(r, 0, T), 1); /* none up: the first idle */
  rt_node_up(r, 2);
  assert_int_equal(rt_relearn(r, 0, T), 2); /* connected first */
  rt_node_failed(r, 2, T);
  assert_int_equal(rt_relearn(r, 0, T), 1);
  rt_map_begin(r, 1, T); /* asked: the turn moves on */
  rt_map_end(r, 1, NULL);
  assert_int_equal(rt_relearn(r, 0, T + MS(999)), -1); /* once a second */
  rt_node_failed(r, 0, T + MS(500)); /* its probe failed */
  rt_node_failed(r, 2, T + MS(500));
  assert_int_equal(rt_relearn(r, 0, T + SEC(1)), 3);
  assert_int_equal(rt_relearn(r, 1, T + SEC(1)), -1); /* serves no slot */
  /* the node to ask because one that serves slots is down */
  assert_int_equal(rt_relearn_any(r, T + SEC(1)), 3);
  rt_node_up(r, 0);
  assert_int_equal(rt_relearn_any(r, T + SEC(1)), -1); /* (2: no slot) */
  /* every other node down: nobody */
  rt_router *q = router_of(2);
  rt_node_failed(q, 0, T);
  rt_node_failed(q, 1, T);
  assert_int_equal(rt_relearn(q, 0, T), -1);
}

/* Until the failover, the map read still gives the dead node its slots
   (never "nobody"); the next ask, a second later, learns the promotion. */
static void the_dead_node_keeps_its_slots_until_a_map_names_another(
    void **state) {
  (void)state;
  rt_router *r = router_of(3);
  rt_node_failed(r, 0, T);
  rt_map_begin(r, rt_relearn(r, 0, T), T);
  redisReply *stale = reply_of(SLOTS_ON("7000"));
  assert_int_equal(rt_map_end(r, 1, stale), 16384);
  freeReplyObject(stale);
  assert_int_equal(rt_slot_node(r, 10), 0);
  assert_int_equal(rt_relearn(r, 0, T + MS(500)), -1);
  int from = rt_relearn(r, 0, T + SEC(1));
  assert_int_equal(from, 2);
  rt_map_begin(r, from, T + SEC(1));
  redisReply *promoted = reply_of(SLOTS_ON("7002"));
  rt_map_end(r, from, promoted);
  freeReplyObject(promoted);
  for (int x = 0; x < 16384; x++) assert_int_equal(rt_slot_node(r, x), 2);
}

/* ---- the workers' shared map ---- */

/* A map one router publishes reaches another (nodes matched by address,
   added if new), except slots for a node the other has down; a router
   that shares nothing keeps its own. */
static void a_published_map_is_adopted_but_not_onto_a_down_node(
    void **state) {
  (void)state;
  static rt_router a, b;
  rc_topology t;
  memset(&t, 0, sizeof t);
  rc_topology_node(&t, "127.0.0.1", 7000);
  rc_topology_node(&t, "127.0.0.1", 7001);
  memset(t.slot_node, 0, sizeof t.slot_node);
  rt_init(&a, &t, 1, 1000, 50);
  rc_topology u;
  memset(&u, 0, sizeof u);
  rc_topology_node(&u, "127.0.0.1", 7001); /* numbered otherwise */
  rc_topology_node(&u, "127.0.0.1", 7000);
  memset(u.slot_node, 1, sizeof u.slot_node);
  rt_init(&b, &u, 1, 1000, 50);
  rc_shared_map *m = rc_shared_map_new();
  assert_non_null(m);
  rt_share(&a, m);
  rt_share(&b, m);
  rt_adopt(&b, T); /* nothing published yet */
  assert_int_equal(rt_slot_node(&b, 0), 1);
  rt_set_slot(&a, 1, 1);
  rc_topology_node(&a.t, "127.0.0.1", 7002);
  rt_set_slot(&a, 2, 2);
  rt_publish(&a);
  rt_node_failed(&b, 0, T); /* b has 7001 down */
  rt_adopt(&b, T);
  assert_int_equal(rt_slot_node(&b, 0), 1);  /* 7000 */
  assert_int_equal(rt_slot_node(&b, 1), 1);  /* 7001 is down here: kept */
  assert_int_equal(rt_nodes(&b), 3);
  assert_int_equal(rt_addr(&b, 2)->port, 7002);
  assert_int_equal(rt_slot_node(&b, 2), 2);
  rc_shared_map_free(m);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(a_slot_no_node_is_known_for_goes_to_node_0),
      cmocka_unit_test(other_replies_are_accepted),
      cmocka_unit_test(moved_learns_the_slot_and_resends_there),
      cmocka_unit_test(a_redirect_without_a_host_is_the_answering_nodes),
      cmocka_unit_test(ask_resends_after_asking_and_learns_nothing),
      cmocka_unit_test(noscript_loads_and_keeps_asking),
      cmocka_unit_test(a_refused_load_is_not_tried_again_on_that_node),
      cmocka_unit_test(a_call_follows_at_most_five_redirects),
      cmocka_unit_test(a_redirect_to_a_full_map_is_accepted),
      cmocka_unit_test(followable_answers_are_the_four_kinds),
      cmocka_unit_test(tryagain_pauses_double_within_the_deadline),
      cmocka_unit_test(a_failed_node_is_down_for_the_breaker_interval),
      cmocka_unit_test(the_map_is_asked_for_once_a_second_one_at_a_time),
      cmocka_unit_test(a_dead_master_is_relearned_from_the_next_node),
      cmocka_unit_test(
          the_dead_node_keeps_its_slots_until_a_map_names_another),
      cmocka_unit_test(a_published_map_is_adopted_but_not_onto_a_down_node),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
