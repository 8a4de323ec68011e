/*
 * test_slot.c — Redis Cluster routing (src/fleet/slot.c): the key slot
 * against CLUSTER KEYSLOT's answers, the slot map's nodes, the MOVED / ASK
 * parser both fleet clients share, and the TRYAGAIN split of a batched
 * script call into its requests and the join of their replies (read back
 * with rs_parse, as the engine reads the batch's). The cluster itself is
 * exercised by tests/integration/fleet_cluster.sh (a live slot migration).
 */
#include "helpers.h"

#include "fleet/script.h"
#include "fleet/slot.h"

/* ---- local helpers ---- */

static rs_check chk(const sl_policy *p, const char *key, int64_t cost) {
  rs_check c = {.policy = p, .key = key, .key_len = strlen(key), .cost = cost};
  return c;
}

/* A reply tree from RESP text; also reads a command back into its words
   (an array of bulk strings). */
static redisReply *reply_of(const char *resp, size_t len) {
  redisReader *rd = redisReaderCreate();
  assert_non_null(rd);
  assert_int_equal(redisReaderFeed(rd, resp, len), REDIS_OK);
  void *r = NULL;
  assert_int_equal(redisReaderGetReply(rd, &r), REDIS_OK);
  assert_non_null(r);
  redisReaderFree(rd);
  return r;
}

static void assert_word(const redisReply *w, size_t i, const char *want,
                        size_t want_len) {
  assert_true(i < w->elements);
  assert_int_equal(w->element[i]->type, REDIS_REPLY_STRING);
  if (w->element[i]->len != want_len ||
      memcmp(w->element[i]->str, want, want_len) != 0)
    fail_msg("word %zu is '%.*s', want '%.*s'", i, (int)w->element[i]->len,
             w->element[i]->str, (int)want_len, want);
}

/* Three requests (keys a | b, c | d) in one call of mode m (RS_DECIDE or
   RS_FORCE): the command in *cmd, the calls in k[3]. */
static size_t batch_of_three(int m, rs_call k[3], char **cmd) {
  static sl_policy p;
  p = policy_of("gcra:10/s");
  rs_check c1[] = {chk(&p, "a", 1)}, c2[] = {chk(&p, "b", 2), chk(&p, "c", 1)},
           c3[] = {chk(&p, "d", 3)};
  const rs_check *cs[] = {c1, c2, c3};
  size_t ns[] = {1, 2, 1};
  rs_request q[3];
  char *words[3];
  for (int i = 0; i < 3; i++) {
    q[i].call = &k[i];
    assert_int_equal(rs_prepare_force(cs[i], ns[i], &k[i], &words[i],
                                      &q[i].keys_len, &q[i].len),
                     0);
    q[i].words = words[i];
  }
  size_t len = 0;
  assert_int_equal(rs_format_batch(q, 3, m, -1, cmd, &len), 0);
  for (int i = 0; i < 3; i++) free(words[i]);
  return len;
}

#define NOW "$19\r\n1767225600123456789\r\n"
#define KEY6(a, l, r) ":" #a "\r\n:" #l "\r\n:" #r "\r\n:0\r\n:0\r\n:0\r\n"

/* ---- the key slot ---- */

static void key_slot_is_cluster_keyslot(void **state) {
  (void)state;
  /* CLUSTER KEYSLOT's answers (Redis 7.0) */
  static const struct {
    const char *key;
    unsigned slot;
  } cases[] = {{"123456789", 12739},    {"foo", 12182},
               {"bar", 5061},           {"{user1000}.following", 3443},
               {"foo{}{bar}", 8363},    {"foo{{bar}}zap", 4015},
               {"foo{bar}{zap}", 5061}, {"{bar", 4015},
               {"{{bar", 16086}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    assert_int_equal(rc_key_slot(cases[i].key, strlen(cases[i].key)),
                     cases[i].slot);
}

/* ---- the slot map ---- */

static void topology_nodes_keep_their_index(void **state) {
  (void)state;
  static rc_topology t;
  memset(&t, 0, sizeof t);
  assert_int_equal(rc_topology_node(&t, "10.0.0.1", 7000), 0);
  assert_int_equal(rc_topology_node(&t, "10.0.0.1", 7001), 1);
  assert_int_equal(rc_topology_node(&t, "10.0.0.2", 7000), 2);
  assert_int_equal(rc_topology_node(&t, "10.0.0.1", 7001), 1);
  assert_int_equal(t.nnodes, 3);
  char host[300];
  memset(host, 'h', sizeof host - 1);
  host[sizeof host - 1] = '\0';
  assert_int_equal(rc_topology_node(&t, host, 1), -1); /* too long */
  for (int i = 3; i < RC_MAX_NODES; i++)
    assert_int_equal(rc_topology_node(&t, "10.0.0.3", 1000 + i), i);
  assert_int_equal(rc_topology_node(&t, "10.0.0.4", 1), -1); /* full */
  assert_int_equal(rc_topology_node(&t, "10.0.0.2", 7000), 2);
  assert_int_equal(t.nnodes, RC_MAX_NODES);
}

/* A CLUSTER SLOTS reply (Redis 7.0's shape: master, then replicas, each
   host, port, id, hostnames): ranges on a known node, a new one, one with
   a replica, one whose master knows no host of its own, and malformed
   ones, which change nothing. */
static void cluster_slots_are_read_into_the_map(void **state) {
  (void)state;
  static rc_topology t;
  memset(&t, 0, sizeof t);
  memset(t.slot_node, 0xff, sizeof t.slot_node);
  assert_int_equal(rc_topology_node(&t, "10.0.0.1", 7000), 0);
  assert_int_equal(rc_topology_node(&t, "10.0.0.2", 7000), 1);
#define ID "$40\r\n0123456789012345678901234567890123456789\r\n"
#define NODE(hlen, host, port) \
  "*4\r\n$" #hlen "\r\n" host "\r\n:" #port "\r\n" ID "*0\r\n"
  static const char slots[] =
      "*6\r\n"
      /* 0-99 on the second node, a replica beside it */
      "*4\r\n:0\r\n:99\r\n" NODE(8, "10.0.0.2", 7000)
      NODE(8, "10.0.0.9", 7000)
      /* 100-199 on a new node */
      "*3\r\n:100\r\n:199\r\n" NODE(8, "10.0.0.3", 7001)
      /* 200 on a node that names no host: the one asked */
      "*3\r\n:200\r\n:200\r\n" NODE(0, "", 7002)
      /* malformed: no master; a port 0; an integer for a host */
      "*2\r\n:300\r\n:399\r\n"
      "*3\r\n:400\r\n:499\r\n" NODE(8, "10.0.0.4", 0)
      "*3\r\n:500\r\n:599\r\n*2\r\n:1\r\n:7000\r\n";
#undef NODE
#undef ID
  redisReply *r = reply_of(slots, sizeof slots - 1);
  assert_int_equal(rc_topology_read(&t, r, "10.0.0.1"), 201);
  freeReplyObject(r);
  assert_int_equal(t.nnodes, 4);
  assert_int_equal(t.slot_node[0], 1);
  assert_int_equal(t.slot_node[99], 1);
  assert_int_equal(t.slot_node[100], 2);
  assert_string_equal(t.nodes[2].host, "10.0.0.3");
  assert_int_equal(t.nodes[2].port, 7001);
  assert_int_equal(t.slot_node[200], 3);
  assert_string_equal(t.nodes[3].host, "10.0.0.1");
  assert_int_equal(t.nodes[3].port, 7002);
  for (int s = 201; s < 16384; s++) assert_int_equal(t.slot_node[s], 0xff);
  /* not an array: nothing */
  r = reply_of("-CLUSTERDOWN\r\n", 14);
  assert_int_equal(rc_topology_read(&t, r, "x"), -1);
  freeReplyObject(r);
  assert_int_equal(t.nnodes, 4);
}

/* ---- redirects ---- */

static rc_redirect parsed(const char *err) {
  rc_redirect rd;
  memset(&rd, 0x55, sizeof rd);
  if (rc_parse_redirect(err, strlen(err), &rd))
    fail_msg("'%s' did not parse", err);
  return rd;
}

static void moved_and_ask_parse(void **state) {
  (void)state;
  rc_redirect rd = parsed("MOVED 3999 127.0.0.1:6381");
  assert_int_equal(rd.ask, 0);
  assert_int_equal(rd.slot, 3999);
  assert_string_equal(rd.host, "127.0.0.1");
  assert_int_equal(rd.port, 6381);
  rd = parsed("ASK 16383 redis-2.example:7000");
  assert_int_equal(rd.ask, 1);
  assert_int_equal(rd.slot, 16383);
  assert_string_equal(rd.host, "redis-2.example");
  assert_int_equal(rd.port, 7000);
  /* IPv6: the last colon separates the port */
  rd = parsed("MOVED 0 ::1:30001");
  assert_string_equal(rd.host, "::1");
  assert_int_equal(rd.port, 30001);
  /* no host (cluster-preferred-endpoint-type unknown): the node's own */
  rd = parsed("ASK 12 :6380");
  assert_string_equal(rd.host, "");
  assert_int_equal(rd.port, 6380);
}

static void malformed_redirects_are_refused(void **state) {
  (void)state;
  static const char *bad[] = {
      "MOVED",
      "MOVED ",
      "MOVED 3999",
      "MOVED 3999 ",
      "MOVED 16384 h:1",
      "MOVED -1 h:1",
      "MOVED x h:1",
      "MOVED 1 h",
      "MOVED 1 h:0",
      "MOVED 1 h:65536",
      "MOVED 1 h:12x",
      "MOVED 1 h:",
      "MOVED 1 a b:1",
      "ASK 1",
      "ASKING 1 h:1",
      "moved 1 h:1",
      "TRYAGAIN Multiple keys request during rehashing of slot",
      "NOSCRIPT No matching script.",
      "ERR x",
      ""};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    rc_redirect rd;
    if (rc_parse_redirect(bad[i], strlen(bad[i]), &rd) != -1)
      fail_msg("'%s' parsed", bad[i]);
  }
  /* a host too long for the struct */
  char big[400];
  snprintf(big, sizeof big, "MOVED 1 %0300d:1", 0);
  rc_redirect rd;
  assert_int_equal(rc_parse_redirect(big, strlen(big), &rd), -1);
  /* only len bytes are read */
  assert_int_equal(rc_parse_redirect("MOVED 1 h:12", 11, &rd), 0);
  assert_int_equal(rd.port, 1);
  assert_int_equal(rc_parse_redirect(NULL, 0, &rd), -1);
}

/* ---- TRYAGAIN's split and join ---- */

/* Each part: EVALSHA sha k_i, its keys, now, the mode's letter and k_i,
   its three values per key, byte for byte the batch's. */
static void split_gives_each_request_its_own_call(void **state) {
  (void)state;
  for (int m = RS_DECIDE; m <= RS_FORCE; m += RS_FORCE - RS_DECIDE) {
    rs_call k[3];
    char *cmd;
    size_t len = batch_of_three(m, k, &cmd);
    redisReply *w = reply_of(cmd, len);
    assert_int_equal(w->elements, 5 + 4 * 4);
    rc_split *sp = rc_batch_split(cmd, len);
    assert_non_null(sp);
    assert_int_equal(sp->n, 3);
    static const size_t keys[] = {1, 2, 1}, first[] = {0, 1, 3};
    char letter = m == RS_FORCE ? 'f' : 'g';
    for (size_t i = 0; i < 3; i++) {
      assert_int_equal(sp->part[i].keys, keys[i]);
      redisReply *pw = reply_of(sp->part[i].cmd, sp->part[i].len);
      size_t n = keys[i];
      assert_int_equal(pw->elements, 5 + 4 * n);
      assert_word(pw, 0, "EVALSHA", 7);
      assert_word(pw, 1, rs_script_sha(), 40);
      assert_word(pw, 2, n == 1 ? "1" : "2", 1);
      for (size_t x = 0; x < n; x++)
        assert_word(pw, 3 + x, w->element[3 + first[i] + x]->str,
                    w->element[3 + first[i] + x]->len);
      assert_word(pw, 3 + n, "", 0); /* now: Redis TIME */
      char mode[2] = {letter, (char)n};
      assert_word(pw, 4 + n, mode, 2);
      for (size_t x = 0; x < 3 * n; x++) {
        const redisReply *v = w->element[5 + 4 + 3 * first[i] + x];
        assert_word(pw, 5 + n + x, v->str, v->len);
      }
      freeReplyObject(pw);
    }
    rc_split_free(sp);
    freeReplyObject(w);
    free(cmd);
  }
}

static void split_refuses_what_is_no_batch(void **state) {
  (void)state;
  sl_policy p = policy_of("gcra:10/s");
  rs_check two[] = {chk(&p, "a", 1), chk(&p, "b", 1)};
  rs_call k;
  char *cmd;
  size_t len;
  /* one request, even of two keys ("0"), and a batch of one ("f\x01") */
  assert_int_equal(rs_format(two, 2, RS_DECIDE, -1, &k, &cmd, &len), 0);
  assert_null(rc_batch_split(cmd, len));
  free(cmd);
  assert_int_equal(rs_format(two, 2, RS_FORCE, -1, &k, &cmd, &len), 0);
  assert_null(rc_batch_split(cmd, len));
  free(cmd);
  /* a batch, cut short or with a byte too many; other commands */
  rs_call k3[3];
  len = batch_of_three(RS_DECIDE, k3, &cmd);
  for (size_t cut = 0; cut < len; cut += 7)
    assert_null(rc_batch_split(cmd, cut));
  assert_null(rc_batch_split(cmd, len - 1));
  char *more = malloc(len + 1);
  memcpy(more, cmd, len);
  more[len] = '\n';
  assert_null(rc_batch_split(more, len + 1));
  free(more);
  /* the request sizes must add up to the keys */
  char *mode = memmem(cmd, len, "$5\r\npg\x01\x02\x01", 9);
  assert_non_null(mode);
  mode[8] = 3;
  assert_null(rc_batch_split(cmd, len));
  mode[8] = 0;
  assert_null(rc_batch_split(cmd, len));
  free(cmd);
  static const char get[] = "*2\r\n$3\r\nGET\r\n$1\r\nx\r\n";
  assert_null(rc_batch_split(get, sizeof get - 1));
  assert_null(rc_batch_split("", 0));
  assert_null(rc_batch_split(NULL, 0));
  rc_split_free(NULL);
}

/* The joined reply reads, request by request, as the batch's would (the
   exact-mode client's: a forced call's parts are read one by one). */
static void join_gives_the_batch_reply(void **state) {
  (void)state;
  rs_call k[3];
  char *cmd;
  size_t len = batch_of_three(RS_DECIDE, k, &cmd);
  rc_split *sp = rc_batch_split(cmd, len);
  assert_non_null(sp);
  static const char *parts[] = {"*8\r\n" NOW ":1\r\n" KEY6(1, 10, 9),
                                "*14\r\n" NOW ":1\r\n" KEY6(1, 10, 8)
                                    KEY6(1, 10, 7),
                                "*8\r\n" NOW ":1\r\n" KEY6(1, 10, 2)};
  redisReply *reply[3];
  for (int i = 0; i < 3; i++) reply[i] = reply_of(parts[i], strlen(parts[i]));
  redisReply *r = rc_batch_join(sp, reply);
  assert_non_null(r);
  for (int i = 0; i < 3; i++) assert_null(reply[i]);
  assert_int_equal(r->elements, k[0].elements);
  static const int64_t want[3][2] = {{9, 9}, {8, 7}, {2, 2}};
  for (int i = 0; i < 3; i++) {
    sl_decision out[2];
    int allowed = 0;
    int64_t now = 0;
    assert_int_equal(rs_parse(&k[i], r, out, &allowed, &now), 0);
    assert_int_equal(allowed, 1);
    assert_true(now == INT64_C(1767225600123456789));
    assert_int_equal(out[0].remaining, want[i][0]);
    if (i == 1) assert_int_equal(out[1].remaining, want[i][1]);
  }
  freeReplyObject(r);
  rc_split_free(sp);
  free(cmd);
}

/* A part that failed (NULL), or answered an error or a reply of another
   shape, fails its own request only; none answered: no reply. */
static void join_fails_only_the_failed_parts(void **state) {
  (void)state;
  rs_call k[3];
  char *cmd;
  size_t len = batch_of_three(RS_DECIDE, k, &cmd);
  rc_split *sp = rc_batch_split(cmd, len);
  assert_non_null(sp);
  static const char ok0[] = "*8\r\n" NOW ":1\r\n" KEY6(1, 10, 9),
                    err[] = "-TRYAGAIN Multiple keys request\r\n",
                    short2[] = "*2\r\n" NOW ":1\r\n";
  redisReply *reply[3] = {NULL, reply_of(err, sizeof err - 1),
                          reply_of(ok0, sizeof ok0 - 1)};
  redisReply *r = rc_batch_join(sp, reply);
  assert_non_null(r);
  sl_decision out[2];
  int allowed;
  assert_int_equal(rs_parse(&k[0], r, out, &allowed, NULL), SL_EINVAL);
  assert_int_equal(rs_parse(&k[1], r, out, &allowed, NULL), SL_EINVAL);
  assert_int_equal(rs_parse(&k[2], r, out, &allowed, NULL), 0);
  assert_int_equal(out[0].remaining, 9);
  freeReplyObject(r);
  /* nothing usable: NULL, and every reply freed */
  reply[0] = reply_of(short2, sizeof short2 - 1);
  reply[1] = NULL;
  reply[2] = reply_of(err, sizeof err - 1);
  assert_null(rc_batch_join(sp, reply));
  for (int i = 0; i < 3; i++) assert_null(reply[i]);
  rc_split_free(sp);
  free(cmd);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(key_slot_is_cluster_keyslot),
      cmocka_unit_test(topology_nodes_keep_their_index),
      cmocka_unit_test(cluster_slots_are_read_into_the_map),
      cmocka_unit_test(moved_and_ask_parse),
      cmocka_unit_test(malformed_redirects_are_refused),
      cmocka_unit_test(split_gives_each_request_its_own_call),
      cmocka_unit_test(split_refuses_what_is_no_batch),
      cmocka_unit_test(join_gives_the_batch_reply),
      cmocka_unit_test(join_fails_only_the_failed_parts),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
