/*
 * test_split.c — a hot limit split into sub-counters (a rate limit's
 * `split`): the config's keys and their errors, the shares of the limit
 * and burst for each algorithm, the sub-counter a request takes (by a
 * descriptor's value, or in turn), in memory mode (each sub-counter a key
 * of its own) and in exact fleet mode (each on a slot of its own, spread
 * over the cluster's masters), and resets that drop every sub-counter.
 */
#include "helpers.h"

#include "rules/config.h"
#include "engine/engine.h"
#include "engine_fixture.h"
#include "fleet/keys.h"
#include "fleet/slot.h"

/* ---- helpers ---- */

/* A load of yaml that fails with `want` as its first error. */
static void load_fails_with(const char *yaml, const char *want) {
  cfg_errors e = {0};
  sl_config *c = config_load_string(yaml, strlen(yaml), "t.yaml", &e);
  assert_null(c);
  assert_true(e.n >= 1);
  if (strcmp(e.msgs[0], want))
    fail_msg("got   '%s'\nwant  '%s'", e.msgs[0], want);
  cfg_errors_free(&e);
}

/* A config with one descriptor `tier` (and `client`), whose limit is
   `limit` (a flow mapping) and splits as `split`. */
static char *yaml_with(const char *limit, const char *split) {
  static char buf[1024];
  snprintf(buf, sizeof buf,
           "domain: d\n"
           "descriptors:\n"
           "  - key: tier\n"
           "    rate_limit: {%.*s, split: %s}\n"
           "  - key: client\n"
           "    rate_limit: {unit: hour, requests_per_unit: 1000}\n",
           (int)strlen(limit) - 2, limit + 1, split);
  return buf;
}

static eng_descriptor desc1(const char *k, const char *v) {
  eng_descriptor d;
  memset(&d, 0, sizeof d);
  d.hits = -1;
  d.entries[0] = (cfg_entry){k, strlen(k), v, strlen(v)};
  d.n = 1;
  return d;
}

/* One request on (tier=gold), with (client=c) as a second descriptor when
   c is not NULL; the tier's status (st[0]). */
static eng_result tier_check(engine_thread *t, const char *c, int64_t now) {
  eng_descriptor d[2] = {desc1("tier", "gold"), desc1("client", c ? c : "")};
  eng_request r = {"d", 1, d, c ? 2 : 1, 1};
  eng_result out;
  assert_int_equal(do_check(t, &r, now, &out), 0);
  return out;
}


/* ---- the config ---- */

static void split_reads_counters_and_by(void **state) {
  (void)state;
  sl_config *c = cfg_of(yaml_with("{unit: second, requests_per_unit: 10}",
                                  "{counters: 3, by: client}"));
  const cfg_limit *l = c->limits[0];
  assert_int_equal(l->split, 3);
  assert_string_equal(l->split_by, "client");
  config_free(c);
  c = cfg_of(yaml_with("{unit: second, requests_per_unit: 10}",
                       "{counters: 2, rotate: true}"));
  assert_int_equal(c->limits[0]->split, 2);
  assert_null(c->limits[0]->split_by);
  config_free(c);
  /* One counter is no split at all. */
  c = cfg_of(yaml_with("{unit: second, requests_per_unit: 10}",
                       "{counters: 1, rotate: true}"));
  assert_int_equal(c->limits[0]->split, 0);
  config_free(c);
}

static void split_errors_say_what_and_where(void **state) {
  (void)state;
  const char *lim = "{unit: second, requests_per_unit: 10}";
  load_fails_with(yaml_with(lim, "{counters: 0, by: client}"),
                  "t.yaml:4:73: split's counters must be 1 to 64, not 0");
  load_fails_with(yaml_with(lim, "{counters: 65, rotate: true}"),
                  "t.yaml:4:73: split's counters must be 1 to 64, not 65");
  load_fails_with(yaml_with(lim, "{counters: x, rotate: true}"),
                  "t.yaml:4:73: counters must be a whole number, not 'x'");
  load_fails_with(yaml_with(lim, "{rotate: true}"),
                  "t.yaml:4:62: split needs counters: N (1 to 64 "
                  "sub-counters)");
  load_fails_with(yaml_with(lim, "{counters: 3}"),
                  "t.yaml:4:62: split needs by: KEY (the descriptor key "
                  "whose value picks the sub-counter) or rotate: true");
  load_fails_with(yaml_with(lim, "{counters: 3, by: client, rotate: true}"),
                  "t.yaml:4:80: split takes by: KEY or rotate: true, not "
                  "both");
  load_fails_with(yaml_with(lim, "{counters: 3, by: nobody}"),
                  "t.yaml:4:62: split by 'nobody': no descriptor of domain "
                  "'d' has that key (by names the request entry whose value "
                  "picks the sub-counter)");
  load_fails_with(yaml_with(lim, "{counters: 3, every: 2}"),
                  "t.yaml:4:76: unknown key 'every' in split (expected "
                  "counters, by or rotate)");
  load_fails_with(yaml_with(lim, "3"),
                  "t.yaml:4:62: split must be a mapping {counters: N, by: "
                  "KEY} or {counters: N, rotate: true}, not a scalar");
  load_fails_with(yaml_with(lim, "{counters: 11, rotate: true}"),
                  "t.yaml:4:62: split into 11 counters needs a limit of at "
                  "least 11 (each sub-counter's share is at least 1), not "
                  "10");
  load_fails_with(yaml_with("{policy: \"token_bucket:100/s:burst=4\"}",
                            "{counters: 5, rotate: true}"),
                  "t.yaml:4:63: split into 5 counters needs a limit and "
                  "burst of at least 5 (each sub-counter's share is at "
                  "least 1), not 4");
  load_fails_with(yaml_with("{unlimited: true}", "{counters: 2, rotate: true}"),
                  "t.yaml:4:42: split needs a limit to divide, not "
                  "unlimited: true");
  load_fails_with(yaml_with("{unit: second, requests_per_unit: 0}",
                            "{counters: 2, rotate: true}"),
                  "t.yaml:4:61: split needs a limit to divide, not "
                  "requests_per_unit: 0");
}

static void an_unknown_key_in_a_rate_limit_lists_split(void **state) {
  (void)state;
  load_fails_with("domain: d\n"
                  "descriptors:\n"
                  "  - key: k\n"
                  "    rate_limit: {unit: second, requests_per_unit: 1, "
                  "splt: 2}\n",
                  "t.yaml:4:54: unknown key 'splt' in a rate limit (expected "
                  "unit, requests_per_unit, unlimited, name, replaces, "
                  "policy, algorithm, period, burst, evict_below, split, "
                  "candidate, calendar, tz or max_wait)");
}

/* ---- the shares ---- */

static void parts_spread_the_remainder_and_add_up(void **state) {
  (void)state;
  assert_int_equal(cfg_split_part(10, 3, 0), 4);
  assert_int_equal(cfg_split_part(10, 3, 1), 3);
  assert_int_equal(cfg_split_part(10, 3, 2), 3);
  assert_int_equal(cfg_split_part(7, 1, 0), 7);
  for (uint32_t n = 1; n <= CFG_SPLIT_MAX; n++)
    for (uint32_t total = n; total < 300; total += 7) {
      uint32_t sum = 0, lo = UINT32_MAX, hi = 0;
      for (uint32_t i = 0; i < n; i++) {
        uint32_t p = cfg_split_part(total, n, i);
        sum += p;
        lo = p < lo ? p : lo;
        hi = p > hi ? p : hi;
      }
      assert_int_equal(sum, total);
      assert_true(hi - lo <= 1);
      assert_true(lo >= 1);
    }
  assert_int_equal(cfg_split_part(UINT32_MAX, 64, 0), UINT32_MAX / 64 + 1);
}

/* Sums the shares of spec split n ways: limit and burst. */
static void share_sums(const char *spec, uint32_t n, uint64_t *limit,
                       uint64_t *burst, sl_policy *first) {
  sl_policy p;
  assert_int_equal(sl_policy_parse(spec, &p, NULL, 0), 0);
  *limit = *burst = 0;
  for (uint32_t i = 0; i < n; i++) {
    sl_policy s;
    cfg_split_share(&p, n, i, &s);
    assert_int_equal(s.algo, p.algo);
    assert_true(s.period_ns == p.period_ns);
    assert_int_equal(sl_policy_validate(&s, NULL, 0), 0);
    *limit += s.limit;
    *burst += s.burst;
    if (i == 0) *first = s;
  }
}

static void each_algorithms_share_divides_rate_and_burst(void **state) {
  (void)state;
  uint64_t l, b;
  sl_policy s;
  /* The buckets and GCRA: the rate (limit per period) and the burst. */
  static const char *const buckets[] = {"token_bucket:100/s:burst=7",
                                        "leaky_bucket:100/s:burst=7",
                                        "gcra:100/s:burst=7"};
  for (size_t i = 0; i < 3; i++) {
    share_sums(buckets[i], 3, &l, &b, &s);
    assert_int_equal(l, 100);
    assert_int_equal(b, 7);
    assert_int_equal(s.limit, 34);
    assert_int_equal(s.burst, 3);
  }
  /* A bucket without a burst: its capacity is its limit, and so is each
     share's. */
  share_sums("token_bucket:10/s", 4, &l, &b, &s);
  assert_int_equal(l, 10);
  assert_int_equal(b, 10);
  assert_int_equal(s.limit, s.burst);
  /* The windows: the count per window; no burst. */
  static const char *const windows[] = {"fixed_window:50/m",
                                        "sliding_window:50/m",
                                        "sliding_log:50/m"};
  for (size_t i = 0; i < 3; i++) {
    share_sums(windows[i], 8, &l, &b, &s);
    assert_int_equal(l, 50);
    assert_int_equal(b, 0);
    assert_int_equal(s.limit, 7);
  }
}

/* ---- memory mode ---- */

static void by_a_key_one_client_gets_its_share_and_others_theirs(
    void **state) {
  (void)state;
  fixture f = fixture_with(NULL, yaml_with("{unit: hour, requests_per_unit: "
                                           "9}",
                                           "{counters: 3, by: client}"));
  /* alice always lands on one sub-counter: 3 of the 9, then denied. */
  int allowed = 0;
  for (int i = 0; i < 10; i++) {
    eng_result r = tier_check(f.t, "alice", T0 + i);
    allowed += r.allowed;
    assert_int_equal(r.st[0].d.limit, 3);
  }
  assert_int_equal(allowed, 3);
  /* Many clients together take the whole limit, and not one more. */
  char name[32];
  for (int i = 0; i < 300; i++) {
    snprintf(name, sizeof name, "client-%d", i);
    allowed += tier_check(f.t, name, T0 + 100 + i).allowed;
  }
  assert_int_equal(allowed, 9);
  fixture_free(&f);
}

static void rotation_admits_exactly_the_logical_limit(void **state) {
  (void)state;
  static const char *const limits[] = {
      "{unit: hour, requests_per_unit: 10}",
      "{policy: \"sliding_log:10/h\"}",
      "{policy: \"sliding_window:10/h\"}",
      "{policy: \"token_bucket:10/h\"}",
      "{policy: \"leaky_bucket:10/h\"}",
      "{policy: \"gcra:10/h\"}",
  };
  for (size_t a = 0; a < sizeof limits / sizeof limits[0]; a++) {
    fixture f =
        fixture_with(NULL, yaml_with(limits[a], "{counters: 3, rotate: true}"));
    int allowed = 0;
    for (int i = 0; i < 30; i++) allowed += tier_check(f.t, NULL, T0 + i).allowed;
    if (allowed != 10) fail_msg("%s: %d allowed, want 10", limits[a], allowed);
    fixture_free(&f);
  }
}

static void a_request_without_the_by_entry_rotates(void **state) {
  (void)state;
  fixture f = fixture_with(NULL, yaml_with("{unit: hour, requests_per_unit: "
                                           "6}",
                                           "{counters: 3, by: client}"));
  int allowed = 0;
  for (int i = 0; i < 12; i++) allowed += tier_check(f.t, NULL, T0 + i).allowed;
  assert_int_equal(allowed, 6);
  fixture_free(&f);
}

static void a_reset_drops_every_sub_counter(void **state) {
  (void)state;
  fixture f = fixture_with(NULL, yaml_with("{unit: hour, requests_per_unit: "
                                           "6}",
                                           "{counters: 3, rotate: true}"));
  for (int i = 0; i < 6; i++) assert_true(tier_check(f.t, NULL, T0 + i).allowed);
  assert_false(tier_check(f.t, NULL, T0 + 7).allowed);
  eng_descriptor d = desc1("tier", "gold");
  eng_request r = {"d", 1, &d, 1, 1};
  assert_int_equal(do_reset_descriptor(f.t, &r), 3);
  int allowed = 0;
  for (int i = 0; i < 9; i++) allowed += tier_check(f.t, NULL, T0 + 10 + i).allowed;
  assert_int_equal(allowed, 6);
  fixture_free(&f);
}

static void a_reload_keeps_the_sub_counters_state(void **state) {
  (void)state;
  const char *y = yaml_with("{unit: hour, requests_per_unit: 4}",
                            "{counters: 2, rotate: true}");
  char yaml[1024];
  snprintf(yaml, sizeof yaml, "%s", y);
  fixture f = fixture_with(NULL, yaml);
  for (int i = 0; i < 4; i++) assert_true(tier_check(f.t, NULL, T0 + i).allowed);
  reload(&f, yaml);
  assert_false(tier_check(f.t, NULL, T0 + 5).allowed);
  assert_false(tier_check(f.t, NULL, T0 + 6).allowed);
  fixture_free(&f);
}

/* ---- exact fleet mode: where the sub-counters live ---- */

static void every_slot_has_a_short_tag(void **state) {
  (void)state;
  for (unsigned s = 0; s < 16384; s++) {
    size_t len;
    const char *t = rc_slot_tag(s, &len);
    assert_true(len >= 1 && len <= RC_SLOT_TAG_MAX);
    char key[16];
    int n = snprintf(key, sizeof key, "x{%s}y", t);
    assert_int_equal(rc_key_slot(key, (size_t)n), s);
  }
}

/* The master of slot s in a cluster of m masters holding even ranges, as
   redis-cli --cluster create makes them (master i from round(i*16384/m)). */
static unsigned master_of(unsigned s, unsigned m) {
  unsigned i = 0;
  while (i + 1 < m && s >= (unsigned)((i + 1) * 16384.0 / m + 0.5)) i++;
  return i;
}

static void sub_counters_land_on_distinct_masters(void **state) {
  (void)state;
  char key[32];
  for (unsigned n = 2; n <= 8; n++) {
    int apart = 0;
    for (int k = 0; k < 2000; k++) {
      int len = snprintf(key, sizeof key, "tier-%d", k);
      unsigned seen = 0;
      for (unsigned i = 0; i < n; i++) {
        eng_name nm = {'r', "d.tier", "fixed_window:3/s#0/3", (uint16_t)i,
                       (uint16_t)n};
        char rk[256];
        size_t rl = redis_key(rk, "ignored", 7, &nm, key, (size_t)len);
        unsigned slot = rc_key_slot(rk, rl);
        assert_int_equal(slot, redis_sub_slot(&nm, key, (size_t)len));
        seen |= 1u << master_of(slot, n);
      }
      apart += __builtin_popcount(seen) == (int)n;
    }
    /* n sub-counters on n masters, one each: always, but where a start
       falls within a slot of a range's edge (about n in 16,384). */
    if (apart < 1990) fail_msg("n=%u: %d of 2000 apart", n, apart);
  }
}

/* The first key of an EVALSHA command (RESP): its slot. */
static unsigned first_key_slot(const char *cmd) {
  const char *p = cmd;
  for (int skip = 0; skip < 7; skip++) p = strstr(p, "\r\n") + 2;
  /* p at "$LEN\r\n" of the first key */
  long len = strtol(p + 1, NULL, 10);
  p = strstr(p, "\r\n") + 2;
  return rc_key_slot(p, (size_t)len);
}

static fixture exact_fixture(const char *yaml, fake_redis *r) {
  engine_opts o = exact_opts((fleet_opts){.cluster = 1, .batch_max = 1}, 0);
  fixture f = fixture_with(&o, yaml);
  fleet_thread_set_transport(f.t, send_fake, NULL, r);
  return f;
}

static void on_done(void *ud, int rc, eng_result *out) {
  (void)ud, (void)rc;
  free(out);
}

/* A decision sent to the fake Redis, answered by answer_all. */
static void send_one(engine_thread *t, eng_request *req) {
  eng_result *out = malloc(sizeof *out);
  assert_non_null(out);
  assert_int_equal(do_check_async(t, req, T0, out, on_done, out), ENG_PENDING);
}

/* Fails every call sent (on_store_error answers them), and forgets them. */
static void answer_all(fake_redis *r) {
  int n = r->n;
  for (int i = 0; i < n; i++) answer_fail(r, i, "test");
  fake_free(r);
}

static void rotation_spreads_calls_over_the_sub_counters_slots(void **state) {
  (void)state;
  fake_redis r = {0};
  fixture f = exact_fixture(yaml_with("{unit: second, requests_per_unit: 300}",
                                      "{counters: 3, rotate: true}"),
                            &r);
  eng_descriptor d = desc1("tier", "gold");
  eng_request req = {"d", 1, &d, 1, 1};
  unsigned slots[3];
  for (int i = 0; i < 6; i++) {
    send_one(f.t, &req);
    assert_int_equal(r.n, i + 1);
    unsigned s = first_key_slot(r.cmd[i]);
    assert_int_equal(r.slot[i], (int)s);
    if (i < 3)
      slots[i] = s;
    else
      assert_int_equal(s, slots[i % 3]); /* in turn */
  }
  assert_true(slots[0] != slots[1] && slots[1] != slots[2] &&
              slots[0] != slots[2]);
  for (int i = 0; i < 3; i++) assert_true(strstr(r.cmd[i], "#0/3") ||
                                          strstr(r.cmd[i], "#1/3") ||
                                          strstr(r.cmd[i], "#2/3"));
  answer_all(&r);
  fixture_free(&f);
}

static void by_a_key_one_client_stays_on_one_slot(void **state) {
  (void)state;
  fake_redis r = {0};
  fixture f = exact_fixture(yaml_with("{unit: second, requests_per_unit: 300}",
                                      "{counters: 4, by: client}"),
                            &r);
  /* One descriptor (tier) whose client comes in a second descriptor: the
     client rule's key is in a slot of its own, so each request is two
     dry calls (check, then commit); the tier's call is on alice's slot
     each time. */
  eng_descriptor d[2] = {desc1("tier", "gold"), desc1("client", "alice")};
  eng_request req = {"d", 1, d, 2, 1};
  unsigned first = 0;
  for (int i = 0; i < 4; i++) {
    send_one(f.t, &req);
    assert_int_equal(r.n, 2 * (i + 1));
    for (int c = 2 * i; c < 2 * i + 2; c++)
      if (strstr(r.cmd[c], "d.tier")) {
        unsigned s = first_key_slot(r.cmd[c]);
        if (i == 0) first = s;
        assert_int_equal(s, first);
      }
  }
  answer_all(&r);
  fixture_free(&f);
}

static void clients_spread_evenly_over_the_sub_counters(void **state) {
  (void)state;
  fake_redis r = {0};
  fixture f = exact_fixture(yaml_with("{unit: second, requests_per_unit: 300}",
                                      "{counters: 4, by: client}"),
                            &r);
  /* 4,000 clients: each sub-counter takes a quarter, give or take 10%. */
  unsigned slots[4] = {0}, counts[4] = {0}, nslots = 0;
  char name[32];
  for (int i = 0; i < 4000; i++) {
    snprintf(name, sizeof name, "user-%d", i);
    eng_descriptor d[2] = {desc1("tier", "gold"), desc1("client", name)};
    eng_request req = {"d", 1, d, 2, 1};
    send_one(f.t, &req);
    for (int c = 0; c < r.n; c++)
      if (strstr(r.cmd[c], "d.tier")) {
        unsigned s = first_key_slot(r.cmd[c]), k = 0;
        while (k < nslots && slots[k] != s) k++;
        if (k == nslots) {
          assert_true(nslots < 4);
          slots[nslots++] = s;
        }
        counts[k]++;
      }
    answer_all(&r);
  }
  assert_int_equal(nslots, 4);
  for (int k = 0; k < 4; k++) assert_in_range(counts[k], 900, 1100);
  fixture_free(&f);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(split_reads_counters_and_by),
      cmocka_unit_test(split_errors_say_what_and_where),
      cmocka_unit_test(an_unknown_key_in_a_rate_limit_lists_split),
      cmocka_unit_test(parts_spread_the_remainder_and_add_up),
      cmocka_unit_test(each_algorithms_share_divides_rate_and_burst),
      cmocka_unit_test(by_a_key_one_client_gets_its_share_and_others_theirs),
      cmocka_unit_test(rotation_admits_exactly_the_logical_limit),
      cmocka_unit_test(a_request_without_the_by_entry_rotates),
      cmocka_unit_test(a_reset_drops_every_sub_counter),
      cmocka_unit_test(a_reload_keeps_the_sub_counters_state),
      cmocka_unit_test(every_slot_has_a_short_tag),
      cmocka_unit_test(sub_counters_land_on_distinct_masters),
      cmocka_unit_test(rotation_spreads_calls_over_the_sub_counters_slots),
      cmocka_unit_test(by_a_key_one_client_stays_on_one_slot),
      cmocka_unit_test(clients_spread_evenly_over_the_sub_counters),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
