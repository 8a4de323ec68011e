/*
 * test_envoy_config.c — envoyproxy/ratelimit's later config features, as
 * its own test/config/config_test.go checks them (the files it loads are
 * in tests/fixtures/envoy/test_*.yaml, as they are there): '*' anywhere
 * in a value, share_threshold (one counter for every value a wildcard
 * matches), value_to_metric and detailed_metric names (the whole path of
 * entries), metadata, merged domains, quota_mode; and, through the engine,
 * what they do to decisions and metrics, and envoy's charging model
 * (engine_opts.charging).
 */
#include "helpers.h"

#include "engine/engine.h"
#include "fixtures.h"
#include "rules/config.h"

#include "engine_fixture.h"

/* ---- local helpers ---- */

static fixture fixture_of(const char *yaml) { return fixture_with(NULL, yaml); }

static sl_config *load_fixture(const char *name) {
  cfg_errors e = {0};
  const char *yaml = yaml_fixture(name);
  sl_config *c = config_load_string(yaml, strlen(yaml), name, &e);
  for (size_t i = 0; i < e.n; i++) print_error("%s\n", e.msgs[i]);
  cfg_errors_free(&e);
  if (!c) fail_msg("%s did not load", name);
  return c;
}

/* A descriptor given as key, value, ..., NULL. */
typedef struct entries {
  cfg_entry e[16];
  size_t n;
} entries;

static entries entries_of(const char *k, ...) {
  entries d = {.n = 0};
  va_list ap;
  va_start(ap, k);
  for (; k; k = va_arg(ap, const char *)) {
    const char *v = va_arg(ap, const char *);
    d.e[d.n++] = (cfg_entry){k, strlen(k), v, strlen(v)};
  }
  va_end(ap);
  return d;
}

/*
 * The limit (its first) the descriptor matches in domain, and its metric
 * name as envoy's Stats.Key: the dynamic name, or the rule id. NULL and
 * "" when nothing matches. *m gets the match.
 */
static const cfg_limit *limit_of(const sl_config *c, const char *domain,
                                 const entries *d, cfg_match *m,
                                 char *name, size_t len) {
  const cfg_domain *dom = config_domain(c, domain, strlen(domain));
  assert_non_null(dom);
  const cfg_node *n = config_match_path(dom, d->e, d->n, m);
  name[0] = '\0';
  if (!n) return NULL;
  const cfg_limit *l = n->limits[0];
  if (!config_metric_name(dom, m, d->e, d->n, l, name, len))
    snprintf(name, len, "%s", l->rule);
  return l;
}

/* Asserts the descriptor's limit: its requests_per_unit and stats name. */
static void stats_key_is(const sl_config *c, const char *domain,
                         const entries *d, uint32_t rpu, const char *want) {
  cfg_match m;
  char name[512];
  const cfg_limit *l = limit_of(c, domain, d, &m, name, sizeof name);
  if (!l) fail_msg("no limit, want %s", want);
  assert_int_equal(l->requests_per_unit, rpu);
  assert_string_equal(name, want);
}

static void no_limit(const sl_config *c, const char *domain,
                     const entries *d) {
  cfg_match m;
  char name[512];
  assert_null(limit_of(c, domain, d, &m, name, sizeof name));
}

/* The load of yaml fails with exactly the message want. */
static void load_fails_with(const char *yaml, const char *want) {
  cfg_errors e = {0};
  sl_config *c = config_load_string(yaml, strlen(yaml), "t.yaml", &e);
  assert_null(c);
  if (e.n != 1 || strcmp(e.msgs[0], want)) {
    for (size_t i = 0; i < e.n; i++) print_error("got: %s\n", e.msgs[i]);
    cfg_errors_free(&e);
    fail_msg("want: %s", want);
  }
  cfg_errors_free(&e);
}

/* ---- wildcards (TestWildcardConfig) ---- */

static void wildcards_match_anywhere_as_envoy_does(void **state) {
  (void)state;
  sl_config *c = load_fixture("envoy/test_wildcard.yaml");
  entries d = entries_of("noVal", "foo1", NULL);
  stats_key_is(c, "test-domain", &d, 20, "test-domain.noVal");
  d = entries_of("wild", "foo1", NULL);
  stats_key_is(c, "test-domain", &d, 20, "test-domain.wild_foo*");
  d = entries_of("wild", "foo2", NULL);
  stats_key_is(c, "test-domain", &d, 20, "test-domain.wild_foo*");
  d = entries_of("nestedWild", "val1", "wild", "goo2", NULL);
  stats_key_is(c, "test-domain", &d, 20,
               "test-domain.nestedWild_val1.wild_goo*");
  d = entries_of("wild", "bar", NULL);
  no_limit(c, "test-domain", &d);
  d = entries_of("noWild", "foo1", NULL); /* no eager match */
  no_limit(c, "test-domain", &d);
  /* bar*b: a prefix and a suffix; '*' matches the empty run too. */
  static const char *const mid_yes[] = {"barab", "bar123b", "barb"};
  for (size_t i = 0; i < 3; i++) {
    d = entries_of("midWild", mid_yes[i], NULL);
    stats_key_is(c, "test-domain", &d, 20, "test-domain.midWild_bar*b");
  }
  d = entries_of("midWild", "bara", NULL);
  no_limit(c, "test-domain", &d);
  d = entries_of("midWild", "xbarb", NULL);
  no_limit(c, "test-domain", &d);
  /* foo*bar*baz: the parts in order. */
  d = entries_of("multiWild", "foo123bar456baz", NULL);
  stats_key_is(c, "test-domain", &d, 10, "test-domain.multiWild_foo*bar*baz");
  d = entries_of("multiWild", "foobarbaz", NULL);
  stats_key_is(c, "test-domain", &d, 10, "test-domain.multiWild_foo*bar*baz");
  d = entries_of("multiWild", "foo123baz", NULL);
  no_limit(c, "test-domain", &d);
  d = entries_of("multiWild", "bar456baz", NULL);
  no_limit(c, "test-domain", &d);
  config_free(c);
}

/* The parts between the first and the last are found in what lies
   between them: "a*b*b" needs two b's, and overlapping parts do not
   count twice. */
static void wildcard_parts_do_not_overlap(void **state) {
  (void)state;
  const char *yaml = "domain: d\n"
                     "descriptors:\n"
                     "  - key: k\n"
                     "    value: a*bc*c\n"
                     "    rate_limit: {unit: minute, requests_per_unit: 1}\n";
  cfg_errors e = {0};
  sl_config *c = config_load_string(yaml, strlen(yaml), "t.yaml", &e);
  assert_non_null(c);
  entries d = entries_of("k", "abc", NULL); /* "bc" and "c" would overlap */
  no_limit(c, "d", &d);
  d = entries_of("k", "abcc", NULL);
  stats_key_is(c, "d", &d, 1, "d.k_a*bc*c");
  d = entries_of("k", "a--bc--c", NULL);
  stats_key_is(c, "d", &d, 1, "d.k_a*bc*c");
  config_free(c);
}

/* An exact value wins over a wildcard, a wildcard over the key alone, and
   wildcards are tried in file order. */
static void wildcards_rank_between_values_and_keys(void **state) {
  (void)state;
  const char *yaml = "domain: d\n"
                     "descriptors:\n"
                     "  - key: k\n"
                     "    rate_limit: {unit: minute, requests_per_unit: 1}\n"
                     "  - key: k\n"
                     "    value: a*z\n"
                     "    rate_limit: {unit: minute, requests_per_unit: 2}\n"
                     "  - key: k\n"
                     "    value: ab*\n"
                     "    rate_limit: {unit: minute, requests_per_unit: 3}\n"
                     "  - key: k\n"
                     "    value: abz\n"
                     "    rate_limit: {unit: minute, requests_per_unit: 4}\n";
  cfg_errors e = {0};
  sl_config *c = config_load_string(yaml, strlen(yaml), "t.yaml", &e);
  assert_non_null(c);
  entries d = entries_of("k", "abz", NULL);
  stats_key_is(c, "d", &d, 4, "d.k_abz");
  d = entries_of("k", "abyz", NULL);
  stats_key_is(c, "d", &d, 2, "d.k_a*z");
  d = entries_of("k", "aby", NULL);
  stats_key_is(c, "d", &d, 3, "d.k_ab*");
  d = entries_of("k", "q", NULL);
  stats_key_is(c, "d", &d, 1, "d.k");
  config_free(c);
}

/* ---- share_threshold (TestShareThreshold) ---- */

static void share_threshold_counts_under_the_pattern(void **state) {
  (void)state;
  sl_config *c = load_fixture("envoy/test_share_threshold.yaml");
  cfg_match m;
  char name[512];
  static const char *const files[] = {"files/a.pdf", "files/b.csv",
                                      "files/c.txt"};
  for (size_t i = 0; i < 3; i++) {
    entries d = entries_of("files", files[i], NULL);
    assert_non_null(limit_of(c, "test-domain", &d, &m, name, sizeof name));
    assert_int_equal(m.shared, 1);
    size_t len;
    const char *v = config_count_value(&m, &d.e[0], 0, &len);
    assert_int_equal(len, 7);
    assert_memory_equal(v, "files/*", 7);
    assert_string_equal(name, "test-domain.files_files/*");
  }
  /* value_to_metric and detailed_metric yield to the shared pattern. */
  entries d = entries_of("route", "api/v1", "method", "GET", NULL);
  stats_key_is(c, "test-domain", &d, 60, "test-domain.route_api/*.method");
  d = entries_of("service", "svc/user", "endpoint", "get", NULL);
  stats_key_is(c, "test-domain", &d, 80,
               "test-domain.service_svc/*.endpoint_get");
  /* Nested, and the same key at two levels. */
  d = entries_of("nested", "parent", "files", "nested/file1.txt", NULL);
  stats_key_is(c, "test-domain", &d, 200,
               "test-domain.nested_parent.files_nested/*");
  d = entries_of("files", "top/file1.txt", "files", "nested/file1.txt", NULL);
  assert_non_null(limit_of(c, "test-domain", &d, &m, name, sizeof name));
  assert_int_equal(m.shared, 3);
  assert_string_equal(name, "test-domain.files_top/*.files_nested/*");
  /* A wildcard without share_threshold below a shared one. */
  d = entries_of("path", "path/foo", "file", "file/doc1", "type", "pdf",
                 NULL);
  assert_non_null(limit_of(c, "test-domain", &d, &m, name, sizeof name));
  assert_int_equal(m.shared, 1);
  assert_string_equal(name, "test-domain.path_path/*.file_file/*.type");
  d = entries_of("user", "user/alice", "resource", "res/file1", "action",
                 "read", NULL);
  stats_key_is(c, "test-domain", &d, 150,
               "test-domain.user_user/*.resource_res/*.action");
  /* An explicit value keeps its own counter. */
  d = entries_of("file", "test1", NULL);
  assert_non_null(limit_of(c, "test-domain", &d, &m, name, sizeof name));
  assert_int_equal(m.shared, 0);
  assert_string_equal(name, "test-domain.file_test1");
  d = entries_of("file", "test23", NULL);
  stats_key_is(c, "test-domain", &d, 100, "test-domain.file_test*");
  /* Middle and multiple wildcards. */
  d = entries_of("midpath", "/api/foo/v1", NULL);
  stats_key_is(c, "test-domain", &d, 100, "test-domain.midpath_/api*v1");
  d = entries_of("midpath", "/api/v2", NULL);
  no_limit(c, "test-domain", &d);
  d = entries_of("multiroute", "svcAepBrpc", NULL);
  stats_key_is(c, "test-domain", &d, 50, "test-domain.multiroute_svc*ep*rpc");
  d = entries_of("multiroute", "svcABCrpc", NULL);
  no_limit(c, "test-domain", &d);
  d = entries_of("midroute", "/api-beta-v2", NULL);
  stats_key_is(c, "test-domain", &d, 80, "test-domain.midroute_/api*v2");
  d = entries_of("tenant", "t1prod", "resource", "resAv2", NULL);
  stats_key_is(c, "test-domain", &d, 60,
               "test-domain.tenant_t*prod.resource_res*v2");
  config_free(c);
}

static void share_threshold_needs_a_wildcard(void **state) {
  (void)state;
  load_fails_with("domain: d\n"
                  "descriptors:\n"
                  "  - key: files\n"
                  "    value: files/a\n"
                  "    share_threshold: true\n"
                  "    rate_limit: {unit: minute, requests_per_unit: 1}\n",
                  "t.yaml:3:5: share_threshold can only be used with "
                  "wildcard values (containing '*'), but found key "
                  "'files_files/a'");
}

/* ---- metric names (TestDetailedMetric, TestValueToMetric_*) ---- */

static const char realistic[] =
    "domain: nested\n"
    "descriptors:\n"
    "  - key: key_1\n"
    "    detailed_metric: true\n"
    "    rate_limit: {unit: minute, requests_per_unit: 500}\n"
    "  - key: key_1\n"
    "    value: some-value-for-key-1\n"
    "    rate_limit: {unit: minute, requests_per_unit: 500}\n"
    "  - key: key_2\n"
    "    detailed_metric: true\n"
    "    rate_limit: {unit: minute, requests_per_unit: 5000}\n"
    "    descriptors:\n"
    "      - key: key_3\n"
    "        detailed_metric: true\n"
    "      - key: key_3\n"
    "        value: requested-key3-value\n"
    "        detailed_metric: true\n"
    "        rate_limit: {unit: minute, requests_per_unit: 5}\n"
    "  - key: key_2\n"
    "    value: specific-id\n"
    "    detailed_metric: true\n"
    "    rate_limit: {unit: minute, requests_per_unit: 50000}\n"
    "    descriptors:\n"
    "      - key: key_3\n"
    "        detailed_metric: true\n"
    "      - key: key_3\n"
    "        value: requested-key3-value\n"
    "        detailed_metric: true\n"
    "        rate_limit: {unit: minute, requests_per_unit: 100}\n";

static void detailed_metric_names_the_whole_path(void **state) {
  (void)state;
  sl_config *c = cfg_of(realistic);
  entries d = entries_of("key_1", "value-for-key-1", NULL);
  stats_key_is(c, "nested", &d, 500, "nested.key_1_value-for-key-1");
  d = entries_of("key_2", "key-2-value", NULL);
  stats_key_is(c, "nested", &d, 5000, "nested.key_2_key-2-value");
  d = entries_of("key_2", "key-2-value", "key_3", "requested-key3-value",
                 NULL);
  stats_key_is(c, "nested", &d, 5,
               "nested.key_2_key-2-value.key_3_requested-key3-value");
  d = entries_of("key_2", "specific-id", "key_3", "requested-key3-value",
                 NULL);
  stats_key_is(c, "nested", &d, 100,
               "nested.key_2_specific-id.key_3_requested-key3-value");
  config_free(c);

  /* A parent with children: its detailed name is its own entry. */
  c = cfg_of("domain: nested\n"
             "descriptors:\n"
             "  - key: key-1\n"
             "    detailed_metric: true\n"
             "    rate_limit: {unit: minute, requests_per_unit: 100}\n"
             "    descriptors:\n"
             "      - key: key-2\n"
             "        rate_limit: {unit: minute, requests_per_unit: 5}\n");
  d = entries_of("key-1", "value-1", NULL);
  stats_key_is(c, "nested", &d, 100, "nested.key-1_value-1");
  d = entries_of("key-1", "value-1", "key-2", "value-2", NULL);
  stats_key_is(c, "nested", &d, 5, "nested.key-1.key-2");
  config_free(c);

  c = load_fixture("envoy/test_basic_config.yaml");
  d = entries_of("key7", "unspecified_value", NULL);
  stats_key_is(c, "test-domain", &d, 70, "test-domain.key7_unspecified_value");
  d = entries_of("key1", "value1", "subkey1", "subvalue1", NULL);
  stats_key_is(c, "test-domain", &d, 10,
               "test-domain.key1_value1.subkey1_subvalue1");
  d = entries_of("key2", "something", NULL);
  stats_key_is(c, "test-domain", &d, 20, "test-domain.key2");
  d = entries_of("key2", "value3", NULL); /* whitelisted: no limit */
  no_limit(c, "test-domain", &d);
  config_free(c);
}

static const char value_to_metric_yaml[] =
    "domain: domain\n"
    "descriptors:\n"
    "  - key: route\n"
    "    value_to_metric: true\n"
    "    descriptors:\n"
    "      - key: http_method\n"
    "        value_to_metric: true\n"
    "        descriptors:\n"
    "          - key: subject_id\n"
    "            rate_limit: {unit: minute, requests_per_unit: 60}\n"
    "      - key: http_method\n"
    "        value: POST\n"
    "        value_to_metric: true\n"
    "        descriptors:\n"
    "          - key: subject_id\n"
    "            rate_limit: {unit: minute, requests_per_unit: 30}\n"
    "  - key: user\n"
    "    value_to_metric: true\n"
    "    descriptors:\n"
    "      - key: action\n"
    "        value: read*\n"
    "        value_to_metric: true\n"
    "        descriptors:\n"
    "          - key: resource\n"
    "            rate_limit: {unit: minute, requests_per_unit: 100}\n"
    "  - key: k1\n"
    "    descriptors:\n"
    "      - key: k2\n"
    "        value_to_metric: true\n"
    "        descriptors:\n"
    "          - key: k3\n"
    "            detailed_metric: true\n"
    "            rate_limit: {unit: minute, requests_per_unit: 1}\n"
    "      - key: k2b\n"
    "        value_to_metric: true\n"
    "        descriptors:\n"
    "          - key: k3\n"
    "            rate_limit: {unit: minute, requests_per_unit: 2}\n";

static void value_to_metric_names_the_values_asked_for(void **state) {
  (void)state;
  sl_config *c = cfg_of(value_to_metric_yaml);
  entries d = entries_of("route", "draw", "http_method", "GET", "subject_id",
                         "123", NULL);
  stats_key_is(c, "domain", &d, 60,
               "domain.route_draw.http_method_GET.subject_id");
  d = entries_of("route", "api", "http_method", "POST", "subject_id", "u",
                 NULL);
  stats_key_is(c, "domain", &d, 30,
               "domain.route_api.http_method_POST.subject_id");
  /* An empty value: the key alone. */
  d = entries_of("route", "", "http_method", "", "subject_id", "123", NULL);
  stats_key_is(c, "domain", &d, 60, "domain.route.http_method.subject_id");
  /* A wildcard with value_to_metric: the whole value. */
  d = entries_of("user", "alice", "action", "readfile", "resource", "docs",
                 NULL);
  stats_key_is(c, "domain", &d, 100,
               "domain.user_alice.action_readfile.resource");
  /* Only the level that asks; detailed_metric wins where it is set. */
  d = entries_of("k1", "X", "k2b", "Y", "k3", "Z", NULL);
  stats_key_is(c, "domain", &d, 2, "domain.k1.k2b_Y.k3");
  d = entries_of("k1", "X", "k2", "Y", "k3", "Z", NULL);
  stats_key_is(c, "domain", &d, 1, "domain.k1_X.k2_Y.k3_Z");
  config_free(c);
}

/* ---- metadata (TestMetadata) ---- */

static void metadata_is_kept_as_json(void **state) {
  (void)state;
  sl_config *c = load_fixture("envoy/test_metadata.yaml");
  cfg_match m;
  char name[256];
  entries d = entries_of("key1", "value1", "subkey1", "something", NULL);
  const cfg_limit *l = limit_of(c, "test-domain", &d, &m, name, sizeof name);
  assert_non_null(l);
  assert_string_equal(l->metadata, "{\"name\":\"service_1\"}");
  d = entries_of("key2", "something", NULL);
  l = limit_of(c, "test-domain", &d, &m, name, sizeof name);
  assert_string_equal(l->metadata,
                      "{\"service_with_quota\":{\"name\":\"service_2\"}}");
  d = entries_of("key1", "value1", "subkey1", "subvalue1", NULL);
  l = limit_of(c, "test-domain", &d, &m, name, sizeof name);
  assert_null(l->metadata);
  config_free(c);

  c = cfg_of("domain: d\n"
             "descriptors:\n"
             "  - key: k\n"
             "    metadata: {n: 12, f: -1.5e3, b: yes, z: ~, s: 'on',\n"
             "               l: [1, \"two\", {x: \"q\\\"\"}], t: 0x10}\n"
             "    rate_limit: {unit: minute, requests_per_unit: 1}\n");
  d = entries_of("k", "v", NULL);
  l = limit_of(c, "d", &d, &m, name, sizeof name);
  assert_string_equal(l->metadata,
                      "{\"n\":12,\"f\":-1.5e3,\"b\":true,\"z\":null,"
                      "\"s\":\"on\",\"l\":[1,\"two\",{\"x\":\"q\\\"\"}],"
                      "\"t\":\"0x10\"}");
  config_free(c);
  load_fails_with("domain: d\n"
                  "descriptors:\n"
                  "  - key: k\n"
                  "    metadata: [1, 2]\n",
                  "t.yaml:4:15: metadata must be a mapping, not a list");
}

/* ---- merged domains (TestDomainMerge) ---- */

/* A directory of copies of the two merge fixtures (and a third naming the
   first's key again when `dup`); its path in dir. */
static void merge_dir(char *dir, size_t len, int dup) {
  snprintf(dir, len, "/tmp/sluice-test-merge-XXXXXX");
  assert_non_null(mkdtemp(dir));
  const char *names[] = {"envoy/test_merge_domain_key1.yaml",
                         "envoy/test_merge_domain_key2.yaml",
                         "envoy/test_merge_domain_key1.yaml"};
  for (int i = 0; i < 2 + dup; i++) {
    char dst[512];
    snprintf(dst, sizeof dst, "%s/%d.yaml", dir, i + 1);
    FILE *f = fopen(dst, "w");
    assert_non_null(f);
    fputs(yaml_fixture(names[i]), f);
    fclose(f);
  }
}

static void rm_dir(const char *dir) {
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  assert_int_equal(system(cmd), 0);
}

static void merged_domains_join_their_descriptors(void **state) {
  (void)state;
  char dir[64];
  merge_dir(dir, sizeof dir, 0);
  cfg_errors e = {0};
  assert_null(config_load(dir, &e)); /* not merged: a duplicate domain */
  assert_int_equal(e.n, 1);
  assert_non_null(strstr(e.msgs[0], "duplicate domain 'test-domain'"));
  cfg_errors_free(&e);

  sl_config *c = config_load_opts(dir, CFG_LOAD_MERGE_DOMAINS, &e);
  assert_non_null(c);
  assert_int_equal(c->ndomains, 1);
  entries d = entries_of("key1", "value1", NULL);
  stats_key_is(c, "test-domain", &d, 10, "test-domain.key1_value1");
  d = entries_of("key2", "value2", NULL);
  stats_key_is(c, "test-domain", &d, 20, "test-domain.key2_value2");
  config_free(c);
  rm_dir(dir);

  /* TestDuplicateKeyDomainMerge: a key twice across the files. */
  merge_dir(dir, sizeof dir, 1);
  assert_null(config_load_opts(dir, CFG_LOAD_MERGE_DOMAINS, &e));
  assert_int_equal(e.n, 1);
  char want[300];
  snprintf(want, sizeof want, "%s/3.yaml:6:5: duplicate descriptor composite "
                              "key 'test-domain.key1_value1' (first in "
                              "%s/1.yaml at line 6)", dir, dir);
  assert_string_equal(e.msgs[0], want);
  cfg_errors_free(&e);
  rm_dir(dir);
}

static void merge_domain_config_env_is_read_as_envoy_reads_it(void **state) {
  (void)state;
  unsetenv("MERGE_DOMAIN_CONFIG");
  assert_false(config_env_merge_domains());
  static const char *const yes[] = {"true", "TRUE", "1"};
  for (size_t i = 0; i < 3; i++) {
    setenv("MERGE_DOMAIN_CONFIG", yes[i], 1);
    assert_true(config_env_merge_domains());
  }
  setenv("MERGE_DOMAIN_CONFIG", "false", 1);
  assert_false(config_env_merge_domains());
  unsetenv("MERGE_DOMAIN_CONFIG");
}

/* ---- through the engine ---- */

static eng_result decide(engine_thread *t, const char *domain, entries *es,
                         size_t nd, int64_t hits, int want_rc) {
  eng_descriptor ds[4];
  memset(ds, 0, sizeof ds);
  for (size_t i = 0; i < nd; i++) {
    ds[i].n = es[i].n;
    ds[i].hits = -1;
    memcpy(ds[i].entries, es[i].e, es[i].n * sizeof(cfg_entry));
  }
  eng_request r = {domain, strlen(domain), ds, nd, hits};
  eng_result out;
  int rc = do_check(t, &r, T0, &out);
  if (rc != want_rc) fail_msg("rc %d (%s), want %d", rc, out.msg, want_rc);
  return out;
}

static void share_threshold_shares_one_counter(void **state) {
  (void)state;
  fixture f = fixture_of("domain: d\n"
                         "descriptors:\n"
                         "  - key: files\n"
                         "    value: files/*\n"
                         "    share_threshold: true\n"
                         "    rate_limit: {unit: hour, requests_per_unit: 10}\n"
                         "  - key: files_no_share\n"
                         "    value: files_no_share/*\n"
                         "    rate_limit: {unit: hour, requests_per_unit: 10}\n"
                         "  - key: path\n"
                         "    rate_limit: {unit: hour, requests_per_unit: 2}\n");
  entries a = entries_of("files", "files/a.pdf", NULL);
  entries b = entries_of("files", "files/b.csv", NULL);
  entries c = entries_of("files", "files/c.txt", NULL);
  for (int i = 0; i < 5; i++) {
    assert_true(decide(f.t, "d", &a, 1, 1, 0).allowed);
    assert_true(decide(f.t, "d", &b, 1, 1, 0).allowed);
  }
  assert_false(decide(f.t, "d", &c, 1, 1, 0).allowed);
  /* Without share_threshold, each value its own counter. */
  entries x = entries_of("files_no_share", "files_no_share/a.pdf", NULL);
  entries y = entries_of("files_no_share", "files_no_share/b.csv", NULL);
  for (int i = 0; i < 10; i++) assert_true(decide(f.t, "d", &x, 1, 1, 0).allowed);
  assert_false(decide(f.t, "d", &x, 1, 1, 0).allowed);
  assert_true(decide(f.t, "d", &y, 1, 1, 0).allowed);
  /* A reset of any value the pattern matches resets the shared counter. */
  eng_descriptor rd = {.n = 1, .hits = -1};
  rd.entries[0] = a.e[0];
  eng_request rr = {"d", 1, &rd, 1, 1};
  assert_int_equal(do_reset_descriptor(f.t, &rr), 1);
  assert_true(decide(f.t, "d", &c, 1, 1, 0).allowed);
  fixture_free(&f);
}

static long long metric_value(const char *text, const char *series) {
  const char *p = strstr(text, series);
  return p ? strtoll(p + strlen(series) + 1, NULL, 10) : -1;
}

static void metrics_take_envoy_names(void **state) {
  (void)state;
  fixture f = fixture_of(value_to_metric_yaml);
  entries d = entries_of("route", "draw", "http_method", "GET", "subject_id",
                         "123", NULL);
  decide(f.t, "domain", &d, 1, 1, 0);
  d = entries_of("k1", "X", "k2", "Y", "k3", "Z", NULL);
  decide(f.t, "domain", &d, 1, 1, 0);
  size_t len;
  char *m = engine_metrics(f.e, &len);
  assert_int_equal(
      metric_value(m, "sluice_rule_decisions_total{domain=\"domain\",rule="
                      "\"domain.route_draw.http_method_GET.subject_id\","
                      "result=\"allowed\"}"), 1);
  assert_int_equal(
      metric_value(m, "sluice_rule_decisions_total{domain=\"domain\",rule="
                      "\"domain.k1_X.k2_Y.k3_Z\",result=\"allowed\"}"), 1);
  free(m);
  fixture_free(&f);
}

static const char quota_yaml[] =
    "domain: d\n"
    "descriptors:\n"
    "  - key: q1\n"
    "    quota_mode: true\n"
    "    rate_limit: {unit: hour, requests_per_unit: 1}\n"
    "  - key: q2\n"
    "    quota_mode: true\n"
    "    rate_limit: {unit: hour, requests_per_unit: 2}\n"
    "  - key: r\n"
    "    rate_limit: {unit: hour, requests_per_unit: 3}\n";

/* envoy: OVER_LIMIT when a rate limit is over, or when every quota limit
   is; a quota limit over on its own does not deny. */
static void quota_mode_denies_only_when_every_quota_is_over(void **state) {
  (void)state;
  fixture f = fixture_of(quota_yaml);
  entries two[2] = {entries_of("q1", "a", NULL), entries_of("q2", "a", NULL)};
  assert_true(decide(f.t, "d", two, 2, 1, 0).allowed); /* q1 1/1, q2 1/2 */
  eng_result r = decide(f.t, "d", two, 2, 1, 0);       /* q1 over, q2 ok */
  assert_true(r.allowed);
  assert_false(r.st[0].d.allowed);
  assert_true(r.st[0].quota);
  r = decide(f.t, "d", two, 2, 1, 0); /* both over */
  assert_false(r.allowed);
  /* A quota alone, over: denied. */
  entries one = entries_of("q1", "b", NULL);
  assert_true(decide(f.t, "d", &one, 1, 1, 0).allowed);
  assert_false(decide(f.t, "d", &one, 1, 1, 0).allowed);
  /* A rate limit over denies whatever the quotas say. */
  entries mix[2] = {entries_of("q2", "c", NULL), entries_of("r", "c", NULL)};
  for (int i = 0; i < 2; i++) assert_true(decide(f.t, "d", mix, 2, 1, 0).allowed);
  entries ronly = entries_of("r", "c", NULL);
  assert_true(decide(f.t, "d", &ronly, 1, 1, 0).allowed); /* r 3/3 */
  assert_false(decide(f.t, "d", mix, 2, 1, 0).allowed);
  fixture_free(&f);
}

static const char charging_yaml[] =
    "domain: d\n"
    "descriptors:\n"
    "  - key: a\n"
    "    rate_limit: {unit: hour, requests_per_unit: 2}\n"
    "  - key: b\n"
    "    rate_limit: {unit: hour, requests_per_unit: 5}\n";

/* sluice's default: a denied request charges nothing; a cost above a
   capacity is an error (400 over HTTP). */
static void default_charging_charges_allowed_requests_only(void **state) {
  (void)state;
  fixture f = fixture_of(charging_yaml);
  entries ab[2] = {entries_of("a", "x", NULL), entries_of("b", "x", NULL)};
  for (int i = 0; i < 2; i++) assert_true(decide(f.t, "d", ab, 2, 1, 0).allowed);
  eng_result r = decide(f.t, "d", ab, 2, 1, 0);
  assert_false(r.allowed);
  assert_int_equal(r.st[1].d.remaining, 3); /* b not charged */
  decide(f.t, "d", ab + 1, 1, 6, SL_ECOST);
  fixture_free(&f);
}

/* envoy's: every matched limit is charged, denied or not, and a cost
   above a capacity is OVER_LIMIT. */
static void envoy_charging_charges_every_matched_limit(void **state) {
  (void)state;
  engine_opts o = {.charging = ENG_CHARGE_ALL};
  fixture f = fixture_with(&o, charging_yaml);
  entries ab[2] = {entries_of("a", "x", NULL), entries_of("b", "x", NULL)};
  for (int i = 0; i < 2; i++) assert_true(decide(f.t, "d", ab, 2, 1, 0).allowed);
  eng_result r = decide(f.t, "d", ab, 2, 1, 0);
  assert_false(r.allowed);
  assert_false(r.st[0].d.allowed);
  assert_true(r.st[1].d.allowed);
  assert_int_equal(r.st[1].d.remaining, 2); /* b charged: 3 of 5 */
  /* hits above the limit: denied (not an error), and the window spent. */
  entries c = entries_of("b", "y", NULL);
  r = decide(f.t, "d", &c, 1, 6, 0);
  assert_false(r.allowed);
  assert_int_equal(r.st[0].d.remaining, 0);
  assert_true(r.st[0].d.retry_after_ns > 0);
  assert_false(decide(f.t, "d", &c, 1, 1, 0).allowed);
  fixture_free(&f);
}

static void envoy_charging_needs_the_memory_store(void **state) {
  (void)state;
  engine_opts o = approx_opts();
  o.charging = ENG_CHARGE_ALL;
  char err[256] = "";
  engine *e = engine_new(&o, cfg_of(charging_yaml), err, sizeof err);
  assert_null(e);
  assert_non_null(strstr(err, "--charging envoy works in memory mode only"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(wildcards_match_anywhere_as_envoy_does),
      cmocka_unit_test(wildcard_parts_do_not_overlap),
      cmocka_unit_test(wildcards_rank_between_values_and_keys),
      cmocka_unit_test(share_threshold_counts_under_the_pattern),
      cmocka_unit_test(share_threshold_needs_a_wildcard),
      cmocka_unit_test(detailed_metric_names_the_whole_path),
      cmocka_unit_test(value_to_metric_names_the_values_asked_for),
      cmocka_unit_test(metadata_is_kept_as_json),
      cmocka_unit_test(merged_domains_join_their_descriptors),
      cmocka_unit_test(merge_domain_config_env_is_read_as_envoy_reads_it),
      cmocka_unit_test(share_threshold_shares_one_counter),
      cmocka_unit_test(metrics_take_envoy_names),
      cmocka_unit_test(quota_mode_denies_only_when_every_quota_is_over),
      cmocka_unit_test(default_charging_charges_allowed_requests_only),
      cmocka_unit_test(envoy_charging_charges_every_matched_limit),
      cmocka_unit_test(envoy_charging_needs_the_memory_store),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
