/*
 * test_config.c — the daemon's YAML rules (src/rules/): loading
 * strings, files and directories; envoyproxy/ratelimit's README examples 1-9
 * as matching outcomes; sluice's extensions (policy:, algorithm/period/burst,
 * rate_limits); fleet mode's on_store_error, local_fraction and hash_tag
 * (and the --on-store-error parser); flags and rule ids; every load
 * error with its exact file:line:col and message; lookups with counted and
 * binary strings; the embedded default; the key tables' walk that the
 * parsers share (rules/walk.h).
 */
#include <sys/stat.h>
#include <unistd.h>

#include "helpers.h"

#include "fixtures.h"
#include "rules/config.h"
#include "rules/walk.h"

#define MIN_NS (INT64_C(60) * NS_PER_S)
#define HOUR_NS (INT64_C(3600) * NS_PER_S)
#define DAY_NS (INT64_C(86400) * NS_PER_S)

/* ---- local helpers ---- */

/* Loads yaml (named "t.yaml"), failing the test with its errors. */
static sl_config *load_ok(const char *yaml) {
  cfg_errors e = {0};
  sl_config *c = config_load_string(yaml, strlen(yaml), "t.yaml", &e);
  if (!c || e.n) {
    for (size_t i = 0; i < e.n; i++) print_error("%s\n", e.msgs[i]);
    cfg_errors_free(&e);
    config_free(c);
    fail_msg("the config did not load");
  }
  return c;
}

/* A load that failed (c NULL) with exactly the n messages of want, in
   order; frees e (and c, when it loaded after all). */
static void errors_are(sl_config *c, cfg_errors *e, const char *const *want,
                       size_t n) {
  int bad = c != NULL || e->n != n;
  for (size_t i = 0; i < n; i++)
    if (i >= e->n || strcmp(e->msgs[i], want[i])) {
      print_error("error %zu: want \"%s\"\n", i, want[i]);
      bad = 1;
    }
  if (bad) {
    for (size_t k = 0; k < e->n; k++) print_error("got: %s\n", e->msgs[k]);
    cfg_errors_free(e);
    config_free(c);
    fail_msg("expected the load to fail with exactly %zu error(s)", n);
  }
  cfg_errors_free(e);
}

/* Loads yaml expecting it to fail with exactly the n messages of want. */
static void expect_errors(const char *yaml, const char *const *want,
                          size_t n) {
  cfg_errors e = {0};
  sl_config *c = config_load_string(yaml, strlen(yaml), "t.yaml", &e);
  errors_are(c, &e, want, n);
}

/* The messages of a NULL-terminated argument list, into want[16]. */
static size_t collect(va_list ap, const char **want) {
  size_t n = 0;
  for (const char *w; (w = va_arg(ap, const char *)); n++) {
    if (n == 16) fail_msg("more than 16 expected messages");
    want[n] = w;
  }
  return n;
}

/* Loads yaml expecting it to fail with exactly the messages given (a NULL-
   terminated list), in order. */
static void load_fails_with(const char *yaml, ...) {
  const char *want[16];
  va_list ap;
  va_start(ap, yaml);
  size_t n = collect(ap, want);
  va_end(ap);
  expect_errors(yaml, want, n);
}

/* The same for config_load(path): a file or a directory. */
static void path_fails_with(const char *path, ...) {
  const char *want[16];
  va_list ap;
  va_start(ap, path);
  size_t n = collect(ap, want);
  va_end(ap);
  cfg_errors e = {0};
  sl_config *c = config_load(path, &e);
  errors_are(c, &e, want, n);
}

/* Loads yaml expecting it to fail, the first error being `want`. */
static void load_fails_first_with(const char *yaml, const char *want,
                                  void *end) {
  assert_null(end);
  cfg_errors e = {0};
  sl_config *c = config_load_string(yaml, strlen(yaml), "t.yaml", &e);
  assert_null(c);
  assert_true(e.n >= 1);
  assert_string_equal(e.msgs[0], want);
  cfg_errors_free(&e);
}

/* The single limit of a config that has exactly one. */
static const cfg_limit *only_limit(const sl_config *c) {
  assert_int_equal(c->nlimits, 1);
  return c->limits[0];
}

#define MAX_PAIRS 20

/*
 * Matches a descriptor, given as key, value, key, value, ..., NULL, in
 * `domain`. Returns the matched node's first limit, or NULL.
 */
static const cfg_limit *match(const sl_config *c, const char *domain, ...) {
  cfg_entry es[MAX_PAIRS];
  size_t n = 0;
  va_list ap;
  va_start(ap, domain);
  for (const char *k; (k = va_arg(ap, const char *));) {
    const char *v = va_arg(ap, const char *);
    assert_true(n < MAX_PAIRS);
    es[n++] = (cfg_entry){k, strlen(k), v, strlen(v)};
  }
  va_end(ap);
  const cfg_domain *d = config_domain(c, domain, strlen(domain));
  assert_non_null(d);
  const cfg_node *node = config_match(d, es, n);
  if (!node) return NULL;
  assert_true(node->nlimits > 0);
  return node->limits[0];
}

/* The rule id a descriptor matches, or NULL (same arguments as match). */
#define RULE(...) rule_or_null(match(__VA_ARGS__, NULL))
static const char *rule_or_null(const cfg_limit *l) {
  return l ? l->rule : NULL;
}

static void assert_policy(const cfg_limit *l, sl_algo algo, uint32_t limit,
                          uint32_t burst, int64_t period_ns,
                          const char *canon) {
  assert_non_null(l);
  assert_int_equal(l->policy.algo, algo);
  assert_int_equal(l->policy.limit, limit);
  assert_int_equal(l->policy.burst, burst);
  assert_int_equal(l->policy.period_ns, period_ns);
  assert_string_equal(l->policy_str, canon);
  assert_false(l->unlimited);
  assert_false(l->blocked);
}

/* A fresh temporary directory (removed by rm_tree). */
static char *temp_dir(void) {
  char *dir = strdup("/tmp/sluice-test-config-XXXXXX");
  assert_non_null(dir);
  assert_non_null(mkdtemp(dir));
  return dir;
}

static void write_file(const char *dir, const char *name, const char *text) {
  char path[512];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fputs(text, f);
  assert_int_equal(fclose(f), 0);
}

static void rm_tree(char *dir) {
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  assert_int_equal(system(cmd), 0);
  free(dir);
}

static const char one_rule[] =
    "domain: d\n"
    "descriptors:\n"
    "  - key: k\n"
    "    rate_limit:\n"
    "      unit: second\n"
    "      requests_per_unit: 5\n";

/* ---- loading ---- */

static void load_string_gives_one_domain_with_its_rule(void **state) {
  (void)state;
  sl_config *c = load_ok(one_rule);
  assert_int_equal(c->ndomains, 1);
  assert_string_equal(c->domains[0]->name, "d");
  assert_string_equal(c->domains[0]->file, "t.yaml");
  assert_int_equal(c->nfiles, 1);
  assert_string_equal(c->files[0], "t.yaml");
  const cfg_limit *l = only_limit(c);
  assert_string_equal(l->rule, "d.k");
  assert_int_equal(l->index, 0);
  assert_policy(l, SL_FIXED_WINDOW, 5, 0, NS_PER_S, "fixed_window:5/s");
  config_free(c);
}

static void load_string_without_descriptors_gives_a_domain_without_rules(
    void **state) {
  (void)state;
  sl_config *c = load_ok("domain: empty\n");
  assert_int_equal(c->ndomains, 1);
  assert_int_equal(c->nlimits, 0);
  assert_null(RULE(c, "empty", "k", "v"));
  config_free(c);
  c = load_ok("domain: empty\ndescriptors:\n");
  assert_int_equal(c->nlimits, 0);
  config_free(c);
  c = load_ok("domain: empty\ndescriptors: []\n");
  assert_int_equal(c->nlimits, 0);
  config_free(c);
}

static void load_string_needs_no_nul_terminator(void **state) {
  (void)state;
  /* The same text followed by garbage that is not part of the length. */
  char buf[sizeof one_rule + 16];
  memcpy(buf, one_rule, strlen(one_rule));
  memcpy(buf + strlen(one_rule), "  - key: [oops", 14);
  cfg_errors e = {0};
  sl_config *c = config_load_string(buf, strlen(one_rule), "t.yaml", &e);
  assert_non_null(c);
  assert_int_equal(e.n, 0);
  assert_int_equal(c->nlimits, 1);
  config_free(c);
}

static void load_reads_a_file(void **state) {
  (void)state;
  char *dir = temp_dir();
  write_file(dir, "rules.yaml", one_rule);
  char path[512];
  snprintf(path, sizeof path, "%s/rules.yaml", dir);
  cfg_errors e = {0};
  sl_config *c = config_load(path, &e);
  assert_non_null(c);
  assert_int_equal(e.n, 0);
  assert_int_equal(c->nfiles, 1);
  assert_string_equal(c->files[0], path);
  assert_string_equal(c->domains[0]->file, path);
  assert_string_equal(RULE(c, "d", "k", "x"), "d.k");
  config_free(c);
  rm_tree(dir);
}

static void load_of_a_file_reports_errors_under_its_path(void **state) {
  (void)state;
  char *dir = temp_dir();
  write_file(dir, "bad.yml", "domain: d\nbogus: 1\n");
  char path[512], want[640];
  snprintf(path, sizeof path, "%s/bad.yml", dir);
  snprintf(want, sizeof want,
           "%s:2:1: unknown key 'bogus' at the top (expected domain, "
           "descriptors, hash_tag or shedding)", path);
  path_fails_with(path, want, NULL);
  rm_tree(dir);
}

static void load_reads_every_yaml_and_yml_file_of_a_directory_in_name_order(
    void **state) {
  (void)state;
  char *dir = temp_dir();
  write_file(dir, "b.yml", "domain: beta\n");
  write_file(dir, "a.yaml", one_rule);
  write_file(dir, "c.yaml", "domain: gamma\n");
  write_file(dir, "notes.txt", "not: yaml: at all: [\n");
  write_file(dir, "x.yaml.bak", "domain: backup\n");
  write_file(dir, ".hidden.yaml", "domain: hidden\n");
  cfg_errors e = {0};
  sl_config *c = config_load(dir, &e);
  assert_non_null(c);
  assert_int_equal(e.n, 0);
  assert_int_equal(c->nfiles, 3);
  char want[600];
  const char *names[] = {"a.yaml", "b.yml", "c.yaml"};
  for (int i = 0; i < 3; i++) {
    snprintf(want, sizeof want, "%s/%s", dir, names[i]);
    assert_string_equal(c->files[i], want);
  }
  assert_int_equal(c->ndomains, 3);
  /* Domains are sorted by name for lookup. */
  assert_string_equal(c->domains[0]->name, "beta");
  assert_string_equal(c->domains[1]->name, "d");
  assert_string_equal(c->domains[2]->name, "gamma");
  assert_null(config_domain(c, "hidden", 6));
  assert_null(config_domain(c, "backup", 6));
  config_free(c);
  rm_tree(dir);
}

static void load_of_a_directory_without_yaml_files_fails(void **state) {
  (void)state;
  char *dir = temp_dir();
  write_file(dir, "readme.txt", "hello\n");
  char want[600];
  snprintf(want, sizeof want, "%s: no *.yaml or *.yml files in this directory",
           dir);
  path_fails_with(dir, want, NULL);
  rm_tree(dir);
}

static void load_of_a_missing_path_fails_with_the_system_error(void **state) {
  (void)state;
  path_fails_with("/nonexistent/sluice.yaml",
                  "/nonexistent/sluice.yaml: No such file or directory", NULL);
}

static void load_of_a_directory_rejects_a_domain_defined_twice(void **state) {
  (void)state;
  char *dir = temp_dir();
  write_file(dir, "1.yaml", one_rule);
  write_file(dir, "2.yaml", "# the same domain again\ndomain: d\n");
  char want[1200];
  snprintf(want, sizeof want,
           "%s/2.yaml:2:9: duplicate domain 'd' (also in %s/1.yaml)", dir,
           dir);
  path_fails_with(dir, want, NULL);
  rm_tree(dir);
}

static void load_of_a_directory_reports_the_errors_of_every_file(
    void **state) {
  (void)state;
  char *dir = temp_dir();
  write_file(dir, "1.yaml", "domain: a\nx: 1\n");
  write_file(dir, "2.yaml", one_rule);
  write_file(dir, "3.yaml", "domain: c\ny: 1\n");
  char want1[640], want3[640];
  snprintf(want1, sizeof want1,
           "%s/1.yaml:2:1: unknown key 'x' at the top (expected domain, "
           "descriptors, hash_tag or shedding)", dir);
  snprintf(want3, sizeof want3,
           "%s/3.yaml:2:1: unknown key 'y' at the top (expected domain, "
           "descriptors, hash_tag or shedding)", dir);
  path_fails_with(dir, want1, want3, NULL);
  rm_tree(dir);
}

static void domains_are_found_by_a_counted_name(void **state) {
  (void)state;
  sl_config *c = load_ok(one_rule);
  const char buf[] = "dd";
  assert_non_null(config_domain(c, buf, 1));
  assert_null(config_domain(c, buf, 2));
  assert_null(config_domain(c, buf, 0));
  assert_null(config_domain(c, "e", 1));
  config_free(c);
}

/* ---- envoyproxy/ratelimit's README examples ---- */

static void example1_each_listed_value_has_its_own_limit(void **state) {
  (void)state;
  sl_config *c = load_ok(yaml_fixture("envoy/example1.yaml"));
  const cfg_limit *u = match(c, "mongo_cps", "database", "users", NULL);
  const cfg_limit *d = match(c, "mongo_cps", "database", "default", NULL);
  assert_string_equal(u->rule, "mongo_cps.database_users");
  assert_string_equal(d->rule, "mongo_cps.database_default");
  assert_ptr_not_equal(u, d);
  assert_policy(u, SL_FIXED_WINDOW, 500, 0, NS_PER_S, "fixed_window:500/s");
  assert_null(RULE(c, "mongo_cps", "database", "other"));
  assert_null(RULE(c, "mongo_cps", "table", "users"));
  config_free(c);
}

static void example2_nested_descriptor_limits_each_number(void **state) {
  (void)state;
  sl_config *c = load_ok(yaml_fixture("envoy/example2.yaml"));
  const cfg_limit *m = match(c, "messaging", "message_type", "marketing",
                             "to_number", "2061111111", NULL);
  assert_string_equal(m->rule, "messaging.message_type_marketing.to_number");
  assert_policy(m, SL_FIXED_WINDOW, 5, 0, DAY_NS, "fixed_window:5/d");
  /* Any number matches the key-only descriptor: the same rule. */
  assert_ptr_equal(match(c, "messaging", "message_type", "marketing",
                         "to_number", "2062222222", NULL),
                   m);
  config_free(c);
}

static void example2_key_only_top_level_limits_any_number(void **state) {
  (void)state;
  sl_config *c = load_ok(yaml_fixture("envoy/example2.yaml"));
  const cfg_limit *t = match(c, "messaging", "to_number", "2061111111", NULL);
  assert_string_equal(t->rule, "messaging.to_number");
  assert_policy(t, SL_FIXED_WINDOW, 100, 0, DAY_NS, "fixed_window:100/d");
  config_free(c);
}

static void example2_placeholder_without_a_limit_matches_nothing(
    void **state) {
  (void)state;
  sl_config *c = load_ok(yaml_fixture("envoy/example2.yaml"));
  assert_null(RULE(c, "messaging", "message_type", "marketing"));
  assert_null(RULE(c, "messaging", "message_type", "transactional",
                   "to_number", "2061111111"));
  config_free(c);
}

static void example3_key_value_is_preferred_to_the_key_alone(void **state) {
  (void)state;
  /* As in the README: the key-only rule first, the specific one second. */
  sl_config *c = load_ok(yaml_fixture("envoy/example3.yaml"));
  const cfg_limit *any =
      match(c, "edge_proxy_per_ip", "remote_address", "50.0.0.1", NULL);
  assert_string_equal(any->rule, "edge_proxy_per_ip.remote_address");
  assert_policy(any, SL_FIXED_WINDOW, 10, 0, NS_PER_S, "fixed_window:10/s");
  const cfg_limit *ban =
      match(c, "edge_proxy_per_ip", "remote_address", "50.0.0.5", NULL);
  assert_string_equal(ban->rule, "edge_proxy_per_ip.remote_address_50.0.0.5");
  assert_true(ban->blocked);
  config_free(c);
}

static void example3_order_in_the_file_does_not_matter(void **state) {
  (void)state;
  sl_config *c = load_ok("domain: e\n"
                         "descriptors:\n"
                         "  - key: remote_address\n"
                         "    value: 50.0.0.5\n"
                         "    rate_limit: {unit: second, requests_per_unit: 0}\n"
                         "  - key: remote_address\n"
                         "    rate_limit: {unit: second, requests_per_unit: 10}\n");
  assert_string_equal(RULE(c, "e", "remote_address", "50.0.0.5"),
                      "e.remote_address_50.0.0.5");
  assert_string_equal(RULE(c, "e", "remote_address", "50.0.0.6"),
                      "e.remote_address");
  config_free(c);
}

static void example4_a_limit_applies_only_at_the_request_depth(void **state) {
  (void)state;
  sl_config *c = load_ok(yaml_fixture("envoy/example4.yaml"));
  assert_null(RULE(c, "example4", "key", "value", "subkey", "subvalue"));
  assert_string_equal(RULE(c, "example4", "key", "value"), "example4.key_value");
  config_free(c);
}

static void example4_a_nested_descriptor_matches_two_entries(void **state) {
  (void)state;
  sl_config *c = load_ok(yaml_fixture("envoy/example4-nested.yaml"));
  assert_string_equal(RULE(c, "example4", "key", "value", "subkey", "subvalue"),
                      "example4.key_value.subkey");
  assert_null(RULE(c, "example4", "key", "value"));
  assert_null(RULE(c, "example4", "key", "value", "subkey", "subvalue",
                   "third", "x"));
  config_free(c);
}

static void example5_unlimited_descriptor_is_always_allowed(void **state) {
  (void)state;
  sl_config *c = load_ok(yaml_fixture("envoy/example5.yaml"));
  const cfg_limit *ldap = match(c, "internal", "ldap", "x", NULL);
  assert_non_null(ldap);
  assert_true(ldap->unlimited);
  assert_false(ldap->blocked);
  assert_string_equal(ldap->policy_str, "unlimited");
  assert_string_equal(ldap->rule, "internal.ldap");
  assert_policy(match(c, "internal", "azure", "x", NULL), SL_FIXED_WINDOW, 100,
                0, MIN_NS, "fixed_window:100/m");
  config_free(c);
}

static void example6_shadow_mode_is_per_descriptor(void **state) {
  (void)state;
  sl_config *c = load_ok(yaml_fixture("envoy/example6.yaml"));
  const cfg_limit *a =
      match(c, "example6", "service", "auth-service", "user", "user-a", NULL);
  const cfg_limit *b =
      match(c, "example6", "service", "auth-service", "user", "user-b", NULL);
  assert_true(a->shadow);
  assert_int_equal(a->policy.limit, 10);
  assert_false(b->shadow);
  assert_int_equal(b->policy.limit, 20);
  assert_string_equal(a->rule, "example6.service.user_user-a");
  assert_null(RULE(c, "example6", "service", "auth-service", "user", "user-c"));
  config_free(c);
}

static void example7_replaces_names_the_limit_it_replaces(void **state) {
  (void)state;
  sl_config *c = load_ok(yaml_fixture("envoy/example7.yaml"));
  const cfg_limit *one =
      match(c, "example7", "key_1", "value_1", "user", "bkthomps", NULL);
  const cfg_limit *two =
      match(c, "example7", "key_2", "value_2", "user", "bkthomps", NULL);
  assert_string_equal(one->name, "specific_limit");
  assert_int_equal(one->nreplaces, 0);
  assert_int_equal(one->policy.limit, 5);
  assert_null(two->name);
  assert_int_equal(two->nreplaces, 1);
  assert_string_equal(two->replaces[0], "specific_limit");
  assert_int_equal(two->policy.limit, 10);
  config_free(c);
}

static void example8_detailed_metric_is_per_descriptor(void **state) {
  (void)state;
  sl_config *c = load_ok(yaml_fixture("envoy/example8.yaml"));
  const cfg_limit *any = match(c, "example8", "key1", "unspecified", NULL);
  const cfg_limit *v1 = match(c, "example8", "key1", "value1", NULL);
  assert_true(any->detailed_metric);
  assert_int_equal(any->policy.limit, 10);
  assert_false(v1->detailed_metric);
  assert_int_equal(v1->policy.limit, 20);
  config_free(c);
}

static void example9_wildcard_value_matches_by_prefix(void **state) {
  (void)state;
  sl_config *c = load_ok(yaml_fixture("envoy/example9.yaml"));
  assert_string_equal(RULE(c, "example9", "key1", "value_1"),
                      "example9.key1_value*");
  assert_ptr_equal(match(c, "example9", "key1", "value_1", NULL),
                   match(c, "example9", "key1", "value_2", NULL));
  assert_non_null(match(c, "example9", "key1", "value", NULL));
  assert_null(RULE(c, "example9", "key1", "valu"));
  assert_null(RULE(c, "example9", "key1", "other"));
  assert_null(RULE(c, "example9", "key2", "value_1"));
  config_free(c);
}

/* ---- matching beyond the examples ---- */

static void exact_value_beats_a_wildcard_and_a_wildcard_beats_the_key(
    void **state) {
  (void)state;
  sl_config *c = load_ok("domain: d\n"
                         "descriptors:\n"
                         "  - key: path\n"
                         "    rate_limit: {unit: second, requests_per_unit: 1}\n"
                         "  - key: path\n"
                         "    value: /api/*\n"
                         "    rate_limit: {unit: second, requests_per_unit: 2}\n"
                         "  - key: path\n"
                         "    value: /api/login\n"
                         "    rate_limit: {unit: second, requests_per_unit: 3}\n");
  assert_string_equal(RULE(c, "d", "path", "/api/login"), "d.path_/api/login");
  assert_string_equal(RULE(c, "d", "path", "/api/users"), "d.path_/api/*");
  assert_string_equal(RULE(c, "d", "path", "/home"), "d.path");
  config_free(c);
}

static void a_lone_star_matches_every_value(void **state) {
  (void)state;
  sl_config *c = load_ok("domain: d\n"
                         "descriptors:\n"
                         "  - key: k\n"
                         "    value: \"*\"\n"
                         "    rate_limit: {unit: second, requests_per_unit: 1}\n");
  assert_string_equal(RULE(c, "d", "k", "anything"), "d.k_*");
  assert_string_equal(RULE(c, "d", "k", ""), "d.k_*");
  config_free(c);
}

static void wildcards_work_at_nested_levels(void **state) {
  (void)state;
  sl_config *c = load_ok("domain: d\n"
                         "descriptors:\n"
                         "  - key: tenant\n"
                         "    descriptors:\n"
                         "      - key: path\n"
                         "        value: /v1/*\n"
                         "        rate_limit: {unit: second, requests_per_unit: 1}\n");
  assert_string_equal(RULE(c, "d", "tenant", "t1", "path", "/v1/x"),
                      "d.tenant.path_/v1/*");
  assert_null(RULE(c, "d", "tenant", "t1", "path", "/v2/x"));
  assert_null(RULE(c, "d", "path", "/v1/x"));
  config_free(c);
}

static void a_node_with_a_limit_and_children_serves_both_depths(
    void **state) {
  (void)state;
  sl_config *c = load_ok("domain: d\n"
                         "descriptors:\n"
                         "  - key: a\n"
                         "    rate_limit: {unit: second, requests_per_unit: 1}\n"
                         "    descriptors:\n"
                         "      - key: b\n"
                         "        rate_limit: {unit: second, requests_per_unit: 2}\n");
  assert_string_equal(RULE(c, "d", "a", "x"), "d.a");
  assert_string_equal(RULE(c, "d", "a", "x", "b", "y"), "d.a.b");
  assert_null(RULE(c, "d", "a", "x", "c", "y"));
  assert_null(RULE(c, "d", "a", "x", "b", "y", "c", "z"));
  config_free(c);
}

static void a_deeper_level_falls_back_to_its_key_only_child(void **state) {
  (void)state;
  sl_config *c = load_ok("domain: d\n"
                         "descriptors:\n"
                         "  - key: a\n"
                         "    descriptors:\n"
                         "      - key: b\n"
                         "        value: vip\n"
                         "        rate_limit: {unit: second, requests_per_unit: 100}\n"
                         "      - key: b\n"
                         "        rate_limit: {unit: second, requests_per_unit: 1}\n");
  assert_string_equal(RULE(c, "d", "a", "x", "b", "vip"), "d.a.b_vip");
  assert_string_equal(RULE(c, "d", "a", "x", "b", "pleb"), "d.a.b");
  config_free(c);
}

static void an_empty_request_descriptor_matches_nothing(void **state) {
  (void)state;
  sl_config *c = load_ok(one_rule);
  assert_null(config_match(config_domain(c, "d", 1), NULL, 0));
  config_free(c);
}

static void keys_and_values_are_case_sensitive(void **state) {
  (void)state;
  sl_config *c = load_ok("domain: d\n"
                         "descriptors:\n"
                         "  - key: Key\n"
                         "    value: Value\n"
                         "    rate_limit: {unit: second, requests_per_unit: 1}\n");
  assert_non_null(match(c, "d", "Key", "Value", NULL));
  assert_null(RULE(c, "d", "key", "Value"));
  assert_null(RULE(c, "d", "Key", "value"));
  assert_null(config_domain(c, "D", 1));
  config_free(c);
}

static void many_siblings_are_all_found(void **state) {
  (void)state;
  /* Enough children that the lookup's binary search has work to do. */
  char yaml[16384] = "domain: d\ndescriptors:\n";
  for (int i = 0; i < 100; i++) {
    char line[256];
    snprintf(line, sizeof line,
             "  - key: k%02d\n    value: v%d\n"
             "    rate_limit: {unit: second, requests_per_unit: %d}\n"
             "  - key: k%02d\n"
             "    rate_limit: {unit: minute, requests_per_unit: %d}\n",
             i % 37, i, i + 1, i + 37, i + 1);
    strcat(yaml, line);
  }
  sl_config *c = load_ok(yaml);
  for (int i = 0; i < 100; i++) {
    char k[16], v[16], other[16], want[48];
    snprintf(k, sizeof k, "k%02d", i % 37);
    snprintf(v, sizeof v, "v%d", i);
    snprintf(want, sizeof want, "d.k%02d_v%d", i % 37, i);
    assert_string_equal(RULE(c, "d", k, v), want);
    snprintf(other, sizeof other, "k%02d", i + 37);
    snprintf(want, sizeof want, "d.k%02d", i + 37);
    assert_string_equal(RULE(c, "d", other, "zzz"), want);
  }
  config_free(c);
}

/* ---- sluice's extensions ---- */

static void policy_field_takes_any_algorithm(void **state) {
  (void)state;
  sl_config *c = load_ok("domain: d\n"
                         "descriptors:\n"
                         "  - key: k\n"
                         "    rate_limit:\n"
                         "      policy: \"sliding_window:100/m\"\n"
                         "  - key: g\n"
                         "    rate_limit:\n"
                         "      policy: gcra:50/s:burst=100\n");
  assert_policy(match(c, "d", "k", "x", NULL), SL_SLIDING_WINDOW, 100, 0,
                MIN_NS, "sliding_window:100/m");
  const cfg_limit *g = match(c, "d", "g", "x", NULL);
  assert_policy(g, SL_GCRA, 50, 100, NS_PER_S, "gcra:50/s:burst=100");
  assert_null(g->unit_name);
  config_free(c);
}

static void policy_is_kept_in_its_canonical_spelling(void **state) {
  (void)state;
  sl_config *c = load_ok("domain: d\n"
                         "descriptors:\n"
                         "  - key: k\n"
                         "    rate_limit: {policy: \"token_bucket:5/1s:burst=5\"}\n");
  assert_string_equal(only_limit(c)->policy_str, "token_bucket:5/s");
  config_free(c);
}

static void algorithm_period_and_burst_build_a_policy(void **state) {
  (void)state;
  sl_config *c = load_ok("domain: d\n"
                         "descriptors:\n"
                         "  - key: k\n"
                         "    rate_limit:\n"
                         "      algorithm: token_bucket\n"
                         "      unit: second\n"
                         "      requests_per_unit: 2\n"
                         "      burst: 10\n");
  const cfg_limit *l = only_limit(c);
  assert_policy(l, SL_TOKEN_BUCKET, 2, 10, NS_PER_S,
                "token_bucket:2/s:burst=10");
  assert_string_equal(l->unit_name, "SECOND");
  assert_int_equal(l->requests_per_unit, 2);
  config_free(c);
}

static void evict_below_bounds_what_a_limit_may_evict(void **state) {
  (void)state;
  sl_config *c = load_ok("domain: d\n"
                         "descriptors:\n"
                         "  - key: k\n"
                         "    rate_limit:\n"
                         "      policy: \"gcra:50/s\"\n"
                         "      evict_below: 1\n"
                         "  - key: l\n"
                         "    rate_limit: {unit: second, requests_per_unit: 5}\n");
  assert_int_equal(match(c, "d", "k", "x", NULL)->evict_below, 1);
  assert_int_equal(match(c, "d", "l", "x", NULL)->evict_below, 0);
  config_free(c);
  load_fails_with("domain: d\n"
                  "descriptors:\n"
                  "  - key: a\n"
                  "    rate_limit: {unlimited: true, evict_below: 1}\n",
                  "t.yaml:4:17: should not specify a rate limit (unit, "
                  "requests_per_unit, policy, ...) when unlimited",
                  NULL);
}

static void algorithm_defaults_to_fixed_window_as_in_envoy(void **state) {
  (void)state;
  sl_config *c = load_ok(one_rule);
  assert_int_equal(only_limit(c)->policy.algo, SL_FIXED_WINDOW);
  config_free(c);
}

static void period_takes_any_duration(void **state) {
  (void)state;
  sl_config *c = load_ok("domain: d\n"
                         "descriptors:\n"
                         "  - key: k\n"
                         "    rate_limit:\n"
                         "      period: 30s\n"
                         "      requests_per_unit: 10\n"
                         "  - key: l\n"
                         "    rate_limit:\n"
                         "      algorithm: sliding_log\n"
                         "      period: 15m\n"
                         "      requests_per_unit: 3\n");
  const cfg_limit *k = match(c, "d", "k", "x", NULL);
  assert_policy(k, SL_FIXED_WINDOW, 10, 0, 30 * NS_PER_S,
                "fixed_window:10/30s");
  assert_null(k->unit_name);
  assert_policy(match(c, "d", "l", "x", NULL), SL_SLIDING_LOG, 3, 0,
                15 * MIN_NS, "sliding_log:3/15m");
  config_free(c);
}

static void rate_limits_put_several_limits_on_one_descriptor(void **state) {
  (void)state;
  sl_config *c = load_ok("domain: api\n"
                         "descriptors:\n"
                         "  - key: user\n"
                         "    rate_limits:\n"
                         "      - unit: second\n"
                         "        requests_per_unit: 10\n"
                         "      - unit: day\n"
                         "        requests_per_unit: 10000\n");
  assert_int_equal(c->nlimits, 2);
  const cfg_domain *d = config_domain(c, "api", 3);
  cfg_entry e = {"user", 4, "alice", 5};
  const cfg_node *n = config_match(d, &e, 1);
  assert_non_null(n);
  assert_int_equal(n->nlimits, 2);
  assert_string_equal(n->limits[0]->rule, "api.user#0");
  assert_string_equal(n->limits[1]->rule, "api.user#1");
  assert_policy(n->limits[0], SL_FIXED_WINDOW, 10, 0, NS_PER_S,
                "fixed_window:10/s");
  assert_policy(n->limits[1], SL_FIXED_WINDOW, 10000, 0, DAY_NS,
                "fixed_window:10000/d");
  assert_ptr_equal(c->limits[0], n->limits[0]);
  assert_ptr_equal(c->limits[1], n->limits[1]);
  assert_int_equal(n->limits[1]->index, 1);
  config_free(c);
}

static void rate_limits_named_get_their_name_in_the_rule_id(void **state) {
  (void)state;
  sl_config *c = load_ok("domain: api\n"
                         "descriptors:\n"
                         "  - key: user\n"
                         "    rate_limits:\n"
                         "      - {name: burst, policy: \"gcra:10/s\"}\n"
                         "      - {unit: day, requests_per_unit: 9}\n");
  assert_string_equal(c->limits[0]->rule, "api.user#burst");
  assert_string_equal(c->limits[0]->name, "burst");
  assert_string_equal(c->limits[1]->rule, "api.user#1");
  config_free(c);
}

static void rate_limits_of_one_entry_has_the_plain_rule_id(void **state) {
  (void)state;
  sl_config *c = load_ok("domain: api\n"
                         "descriptors:\n"
                         "  - key: user\n"
                         "    rate_limits:\n"
                         "      - {unit: day, requests_per_unit: 9}\n");
  assert_string_equal(only_limit(c)->rule, "api.user");
  config_free(c);
}

static void unit_names_are_case_insensitive(void **state) {
  (void)state;
  static const struct {
    const char *unit, *canon_unit;
    int64_t period_ns;
    const char *policy;
  } cases[] = {
      {"second", "SECOND", NS_PER_S, "fixed_window:7/s"},
      {"SECOND", "SECOND", NS_PER_S, "fixed_window:7/s"},
      {"Minute", "MINUTE", MIN_NS, "fixed_window:7/m"},
      {"hOuR", "HOUR", HOUR_NS, "fixed_window:7/h"},
      {"DAY", "DAY", DAY_NS, "fixed_window:7/d"},
      {"week", "WEEK", 7 * DAY_NS, "fixed_window:7/7d"},
      {"Month", "MONTH", 30 * DAY_NS, "fixed_window:7/30d"},
      {"YEAR", "YEAR", 365 * DAY_NS, "fixed_window:7/365d"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char yaml[256];
    snprintf(yaml, sizeof yaml,
             "domain: d\ndescriptors:\n  - key: k\n"
             "    rate_limit: {unit: %s, requests_per_unit: 7}\n",
             cases[i].unit);
    sl_config *c = load_ok(yaml);
    const cfg_limit *l = only_limit(c);
    assert_string_equal(l->unit_name, cases[i].canon_unit);
    assert_policy(l, SL_FIXED_WINDOW, 7, 0, cases[i].period_ns,
                  cases[i].policy);
    config_free(c);
  }
}

static void requests_per_unit_zero_blocks_with_the_unit_as_window(
    void **state) {
  (void)state;
  sl_config *c = load_ok("domain: d\n"
                         "descriptors:\n"
                         "  - key: k\n"
                         "    rate_limit: {unit: hour, requests_per_unit: 0}\n");
  const cfg_limit *l = only_limit(c);
  assert_true(l->blocked);
  assert_false(l->unlimited);
  assert_string_equal(l->policy_str, "blocked");
  assert_int_equal(l->policy.period_ns, HOUR_NS);
  assert_int_equal(l->requests_per_unit, 0);
  assert_string_equal(l->unit_name, "HOUR");
  config_free(c);
}

static void requests_per_unit_zero_with_a_period_blocks_for_that_window(
    void **state) {
  (void)state;
  sl_config *c = load_ok("domain: d\n"
                         "descriptors:\n"
                         "  - key: k\n"
                         "    rate_limit: {period: 45s, requests_per_unit: 0}\n");
  const cfg_limit *l = only_limit(c);
  assert_true(l->blocked);
  assert_int_equal(l->policy.period_ns, 45 * NS_PER_S);
  config_free(c);
}

static void unlimited_false_is_an_ordinary_limit(void **state) {
  (void)state;
  sl_config *c = load_ok("domain: d\n"
                         "descriptors:\n"
                         "  - key: k\n"
                         "    rate_limit: {unlimited: false, unit: second, "
                         "requests_per_unit: 3}\n");
  assert_policy(only_limit(c), SL_FIXED_WINDOW, 3, 0, NS_PER_S,
                "fixed_window:3/s");
  config_free(c);
}

static void shadow_and_detailed_flags_apply_to_every_limit_of_a_descriptor(
    void **state) {
  (void)state;
  sl_config *c = load_ok("domain: d\n"
                         "descriptors:\n"
                         "  - key: k\n"
                         "    shadow_mode: yes\n"
                         "    detailed_metric: On\n"
                         "    rate_limits:\n"
                         "      - {unit: second, requests_per_unit: 1}\n"
                         "      - {unit: day, requests_per_unit: 2}\n"
                         "  - key: plain\n"
                         "    shadow_mode: false\n"
                         "    detailed_metric: no\n"
                         "    rate_limit: {unit: second, requests_per_unit: 1}\n");
  assert_int_equal(c->nlimits, 3);
  for (int i = 0; i < 2; i++) {
    assert_true(c->limits[i]->shadow);
    assert_true(c->limits[i]->detailed_metric);
  }
  assert_false(c->limits[2]->shadow);
  assert_false(c->limits[2]->detailed_metric);
  config_free(c);
}

static void flags_are_not_inherited_by_nested_descriptors(void **state) {
  (void)state;
  sl_config *c = load_ok("domain: d\n"
                         "descriptors:\n"
                         "  - key: a\n"
                         "    shadow_mode: true\n"
                         "    rate_limit: {unit: second, requests_per_unit: 1}\n"
                         "    descriptors:\n"
                         "      - key: b\n"
                         "        rate_limit: {unit: second, requests_per_unit: 1}\n");
  assert_true(match(c, "d", "a", "x", NULL)->shadow);
  assert_false(match(c, "d", "a", "x", "b", "y", NULL)->shadow);
  config_free(c);
}

static void rule_ids_join_domain_and_each_level(void **state) {
  (void)state;
  sl_config *c = load_ok("domain: dom\n"
                         "descriptors:\n"
                         "  - key: a\n"
                         "    value: 1\n"
                         "    descriptors:\n"
                         "      - key: b\n"
                         "        descriptors:\n"
                         "          - key: c\n"
                         "            value: x*\n"
                         "            rate_limit: {unit: second, requests_per_unit: 1}\n");
  assert_string_equal(only_limit(c)->rule, "dom.a_1.b.c_x*");
  config_free(c);
}

static void empty_value_means_the_key_alone_as_in_envoy(void **state) {
  (void)state;
  sl_config *c = load_ok("domain: d\n"
                         "descriptors:\n"
                         "  - key: k\n"
                         "    value: \"\"\n"
                         "    rate_limit: {unit: second, requests_per_unit: 1}\n");
  assert_string_equal(RULE(c, "d", "k", "anything"), "d.k");
  config_free(c);
}

static void limits_remember_where_they_were_defined(void **state) {
  (void)state;
  sl_config *c = load_ok(one_rule);
  const cfg_limit *l = only_limit(c);
  assert_string_equal(l->pos.file, "t.yaml");
  assert_int_equal(l->pos.line, 5);
  assert_int_equal(l->pos.col, 7);
  const cfg_node *n = config_match(config_domain(c, "d", 1),
                                   &(cfg_entry){"k", 1, "v", 1}, 1);
  assert_int_equal(n->pos.line, 3);
  assert_int_equal(n->pos.col, 5);
  config_free(c);
}

static void limits_are_listed_in_load_order(void **state) {
  (void)state;
  sl_config *c = load_ok("domain: d\n"
                         "descriptors:\n"
                         "  - key: z\n"
                         "    rate_limit: {unit: second, requests_per_unit: 1}\n"
                         "  - key: a\n"
                         "    rate_limit: {unit: second, requests_per_unit: 2}\n"
                         "    descriptors:\n"
                         "      - key: m\n"
                         "        rate_limit: {unit: second, requests_per_unit: 3}\n");
  assert_int_equal(c->nlimits, 3);
  assert_string_equal(c->limits[0]->rule, "d.z");
  assert_string_equal(c->limits[1]->rule, "d.a");
  assert_string_equal(c->limits[2]->rule, "d.a.m");
  for (size_t i = 0; i < 3; i++) assert_int_equal(c->limits[i]->index, i);
  config_free(c);
}

/* ---- errors: each with file:line:col ---- */

static void duplicate_composite_key_is_an_error(void **state) {
  (void)state;
  load_fails_with("domain: d\n"
                  "descriptors:\n"
                  "  - key: a\n"
                  "    value: b\n"
                  "    rate_limit: {unit: second, requests_per_unit: 1}\n"
                  "  - key: a\n"
                  "    value: b\n"
                  "    rate_limit: {unit: second, requests_per_unit: 2}\n",
                  "t.yaml:6:5: duplicate descriptor composite key 'd.a_b' "
                  "(first at line 3)",
                  NULL);
}

static void duplicate_key_only_descriptor_is_an_error(void **state) {
  (void)state;
  load_fails_with("domain: d\n"
                  "descriptors:\n"
                  "  - key: a\n"
                  "    descriptors:\n"
                  "      - key: b\n"
                  "      - key: b\n",
                  "t.yaml:6:9: duplicate descriptor composite key 'd.a.b' "
                  "(first at line 5)",
                  NULL);
}

static void the_same_key_at_two_levels_is_no_duplicate(void **state) {
  (void)state;
  sl_config *c = load_ok("domain: d\n"
                         "descriptors:\n"
                         "  - key: a\n"
                         "    descriptors:\n"
                         "      - key: a\n"
                         "        rate_limit: {unit: second, requests_per_unit: 1}\n"
                         "  - key: a\n"
                         "    value: a\n");
  assert_string_equal(RULE(c, "d", "a", "x", "a", "y"), "d.a.a");
  config_free(c);
}

static void empty_domain_is_an_error(void **state) {
  (void)state;
  load_fails_with("domain: \"\"\ndescriptors: []\n",
                  "t.yaml:1:9: config file cannot have empty domain", NULL);
}

static void missing_domain_is_an_error_at_the_document(void **state) {
  (void)state;
  load_fails_with("descriptors: []\n",
                  "t.yaml:1:1: config file cannot have empty domain", NULL);
}

static void unknown_top_level_key_is_an_error(void **state) {
  (void)state;
  load_fails_with("domain: d\nfoo: 1\n",
                  "t.yaml:2:1: unknown key 'foo' at the top (expected domain, "
                  "descriptors, hash_tag or shedding)",
                  NULL);
}

static void unknown_descriptor_key_is_an_error(void **state) {
  (void)state;
  load_fails_with("domain: d\n"
                  "descriptors:\n"
                  "  - key: a\n"
                  "    rate_limt: {unit: second}\n",
                  "t.yaml:4:5: unknown key 'rate_limt' in a descriptor "
                  "(expected key, value, rate_limit, rate_limits, descriptors, "
                  "shadow_mode, detailed_metric, on_store_error, "
                  "local_fraction, share_threshold, value_to_metric, "
                  "quota_mode or metadata)",
                  NULL);
}

static void unknown_rate_limit_key_is_an_error(void **state) {
  (void)state;
  load_fails_first_with("domain: d\n"
                  "descriptors:\n"
                  "  - key: a\n"
                  "    rate_limit:\n"
                  "      unit: second\n"
                  "      requests_per_unit: 1\n"
                  "      per_unit: 2\n",
                  "t.yaml:7:7: unknown key 'per_unit' in a rate limit "
                  "(expected unit, requests_per_unit, unlimited, name, "
                  "replaces, policy, algorithm, period, burst, evict_below, split, "
                  "candidate, calendar, tz or max_wait)",
                  NULL);
}

static void unknown_replaces_key_is_an_error(void **state) {
  (void)state;
  load_fails_with("domain: d\n"
                  "descriptors:\n"
                  "  - key: a\n"
                  "    rate_limit:\n"
                  "      unit: second\n"
                  "      requests_per_unit: 1\n"
                  "      replaces:\n"
                  "        - name: x\n"
                  "          nme: y\n",
                  "t.yaml:9:11: unknown key 'nme' in replaces (expected name)",
                  NULL);
}

/* Bug: a replaces entry took a key given twice silently (the last name
   won), where every other mapping rejects it. */
static void a_key_twice_in_a_replaces_entry_is_an_error(void **state) {
  (void)state;
  load_fails_with("domain: d\n"
                  "descriptors:\n"
                  "  - key: a\n"
                  "    rate_limit:\n"
                  "      unit: second\n"
                  "      requests_per_unit: 1\n"
                  "      replaces:\n"
                  "        - name: x\n"
                  "          name: y\n",
                  "t.yaml:9:11: duplicate key 'name'", NULL);
}

static void duplicate_mapping_key_is_an_error(void **state) {
  (void)state;
  load_fails_with("domain: d\ndomain: e\n",
                  "t.yaml:2:1: duplicate key 'domain'", NULL);
}

static void bad_unit_is_an_error(void **state) {
  (void)state;
  load_fails_with("domain: d\n"
                  "descriptors:\n"
                  "  - key: a\n"
                  "    rate_limit:\n"
                  "      unit: fortnight\n"
                  "      requests_per_unit: 1\n",
                  "t.yaml:5:13: invalid rate limit unit 'fortnight' (expected "
                  "second, minute, hour, day, week, month or year)",
                  NULL);
}

static void bad_policy_is_an_error_with_the_policy_message(void **state) {
  (void)state;
  load_fails_with("domain: d\n"
                  "descriptors:\n"
                  "  - key: a\n"
                  "    rate_limit:\n"
                  "      policy: \"tokenbucket:1/s\"\n",
                  "t.yaml:5:15: unknown algorithm 'tokenbucket' (expected "
                  "token_bucket, leaky_bucket, fixed_window, sliding_log, "
                  "sliding_window, gcra or concurrency)",
                  NULL);
}

static void bad_algorithm_is_an_error_at_the_algorithm(void **state) {
  (void)state;
  load_fails_with("domain: d\n"
                  "descriptors:\n"
                  "  - key: a\n"
                  "    rate_limit:\n"
                  "      unit: second\n"
                  "      requests_per_unit: 1\n"
                  "      algorithm: fixed\n",
                  "t.yaml:7:18: unknown algorithm 'fixed' (expected "
                  "token_bucket, leaky_bucket, fixed_window, sliding_log, "
                  "sliding_window, gcra or concurrency)",
                  NULL);
}

static void bad_period_is_an_error_at_the_period(void **state) {
  (void)state;
  load_fails_with("domain: d\n"
                  "descriptors:\n"
                  "  - key: a\n"
                  "    rate_limit:\n"
                  "      period: 30x\n"
                  "      requests_per_unit: 1\n",
                  "t.yaml:5:15: period '30x' needs a unit: ms, s, m, h or d "
                  "(e.g. 15m)",
                  NULL);
}

static void burst_on_a_window_algorithm_is_an_error_at_the_burst(
    void **state) {
  (void)state;
  load_fails_with("domain: d\n"
                  "descriptors:\n"
                  "  - key: a\n"
                  "    rate_limit:\n"
                  "      unit: second\n"
                  "      requests_per_unit: 1\n"
                  "      burst: 5\n",
                  "t.yaml:7:14: burst is not allowed for fixed_window (window "
                  "algorithms have none)",
                  NULL);
}

static void both_unit_and_period_is_an_error(void **state) {
  (void)state;
  load_fails_with("domain: d\n"
                  "descriptors:\n"
                  "  - key: a\n"
                  "    rate_limit:\n"
                  "      unit: second\n"
                  "      period: 30s\n"
                  "      requests_per_unit: 1\n",
                  "t.yaml:6:15: give either unit or period, not both", NULL);
}

static void policy_with_unit_is_an_error(void **state) {
  (void)state;
  load_fails_with("domain: d\n"
                  "descriptors:\n"
                  "  - key: a\n"
                  "    rate_limit:\n"
                  "      unit: second\n"
                  "      policy: \"gcra:1/s\"\n",
                  "t.yaml:6:15: policy replaces unit, requests_per_unit, "
                  "algorithm, period and burst: give one or the other",
                  NULL);
}

static void unlimited_with_a_unit_is_an_error(void **state) {
  (void)state;
  load_fails_with("domain: d\n"
                  "descriptors:\n"
                  "  - key: a\n"
                  "    rate_limit: {unlimited: true, unit: hour}\n",
                  "t.yaml:4:17: should not specify a rate limit (unit, "
                  "requests_per_unit, policy, ...) when unlimited",
                  NULL);
}

static void rate_limit_without_unit_is_an_error(void **state) {
  (void)state;
  load_fails_with("domain: d\n"
                  "descriptors:\n"
                  "  - key: a\n"
                  "    rate_limit: {requests_per_unit: 5}\n",
                  "t.yaml:4:17: a rate limit needs a unit (or period) and "
                  "requests_per_unit, or a policy, or unlimited: true",
                  NULL);
}

static void rate_limit_without_requests_per_unit_is_an_error(void **state) {
  (void)state;
  load_fails_with("domain: d\n"
                  "descriptors:\n"
                  "  - key: a\n"
                  "    rate_limit: {unit: second}\n",
                  "t.yaml:4:17: a rate limit needs requests_per_unit", NULL);
}

static void rate_limit_and_rate_limits_together_is_an_error(void **state) {
  (void)state;
  load_fails_with("domain: d\n"
                  "descriptors:\n"
                  "  - key: a\n"
                  "    rate_limit: {unit: second, requests_per_unit: 5}\n"
                  "    rate_limits: []\n",
                  "t.yaml:5:18: give either rate_limit or rate_limits, not "
                  "both",
                  NULL);
}

static void replaces_naming_its_own_limit_is_an_error(void **state) {
  (void)state;
  load_fails_with("domain: d\n"
                  "descriptors:\n"
                  "  - key: a\n"
                  "    rate_limit:\n"
                  "      name: x\n"
                  "      unit: second\n"
                  "      requests_per_unit: 1\n"
                  "      replaces: [{name: x}]\n",
                  "t.yaml:8:18: replaces should not contain name of same "
                  "descriptor",
                  NULL);
}

static void empty_replaces_entry_is_an_error(void **state) {
  (void)state;
  load_fails_with("domain: d\n"
                  "descriptors:\n"
                  "  - key: a\n"
                  "    rate_limit:\n"
                  "      unit: second\n"
                  "      requests_per_unit: 1\n"
                  "      replaces:\n"
                  "        - name: \"\"\n",
                  "t.yaml:8:11: should not have an empty replaces entry",
                  NULL);
}

static void empty_key_is_an_error(void **state) {
  (void)state;
  load_fails_with("domain: d\n"
                  "descriptors:\n"
                  "  - value: a\n",
                  "t.yaml:3:5: descriptor has empty key", NULL);
  load_fails_with("domain: d\n"
                  "descriptors:\n"
                  "  - key: \"\"\n",
                  "t.yaml:3:10: descriptor has empty key", NULL);
}

static void requests_per_unit_must_be_a_whole_number(void **state) {
  (void)state;
  load_fails_first_with("domain: d\n"
                        "descriptors:\n"
                        "  - key: a\n"
                        "    rate_limit: {unit: second, requests_per_unit: -1}\n",
                        "t.yaml:4:51: requests_per_unit must be a whole "
                        "number, not '-1'",
                        NULL);
}

static void requests_per_unit_above_32_bits_is_an_error(void **state) {
  (void)state;
  load_fails_first_with("domain: d\n"
                        "descriptors:\n"
                        "  - key: a\n"
                        "    rate_limit: {unit: second, "
                        "requests_per_unit: 4294967296}\n",
                        "t.yaml:4:51: requests_per_unit '4294967296' is too "
                        "large (max 4294967295)",
                        NULL);
}

static void flags_must_be_booleans(void **state) {
  (void)state;
  load_fails_with("domain: d\n"
                  "descriptors:\n"
                  "  - key: a\n"
                  "    shadow_mode: maybe\n",
                  "t.yaml:4:18: shadow_mode must be true or false, not 'maybe'",
                  NULL);
}

static void nesting_of_32_levels_loads(void **state) {
  (void)state;
  char yaml[16384] = "domain: d\ndescriptors:\n";
  char ind[200] = "";
  for (int i = 0; i < 31; i++) {
    char line[512];
    snprintf(line, sizeof line, "%s  - key: k%d\n%s    descriptors:\n", ind, i,
             ind);
    strcat(yaml, line);
    strcat(ind, "    ");
  }
  strcat(yaml, ind);
  strcat(yaml, "  - key: last\n");
  strcat(yaml, ind);
  strcat(yaml, "    rate_limit: {unit: second, requests_per_unit: 1}\n");
  sl_config *c = load_ok(yaml);
  /* k0 .. k30 and "last": a 32-entry descriptor reaches the limit. */
  cfg_entry es[32];
  char keys[32][8];
  for (int i = 0; i < 32; i++) {
    snprintf(keys[i], sizeof keys[i], i < 31 ? "k%d" : "last", i);
    es[i] = (cfg_entry){keys[i], strlen(keys[i]), "v", 1};
  }
  const cfg_node *n = config_match(config_domain(c, "d", 1), es, 32);
  assert_non_null(n);
  assert_int_equal(n->nlimits, 1);
  config_free(c);
}

static void nesting_deeper_than_32_levels_is_an_error(void **state) {
  (void)state;
  char yaml[16384] = "domain: d\ndescriptors:\n";
  char ind[200] = "";
  for (int i = 0; i < 33; i++) {
    char line[512];
    snprintf(line, sizeof line, "%s  - key: k%d\n%s    descriptors:\n", ind, i,
             ind);
    strcat(yaml, line);
    strcat(ind, "    ");
  }
  strcat(yaml, ind);
  strcat(yaml, "  - key: last\n");
  /* The 33rd list starts at line 3 + 2 * 32, its '-' in column 4 * 32 + 3. */
  load_fails_with(yaml,
                  "t.yaml:67:131: descriptors nested deeper than 32 levels",
                  NULL);
}

static void a_list_document_is_an_error(void **state) {
  (void)state;
  load_fails_with("- domain: d\n",
                  "t.yaml:1:1: a config must be a mapping with domain: and "
                  "descriptors:, not a list",
                  NULL);
}

static void a_scalar_document_is_an_error(void **state) {
  (void)state;
  load_fails_with("# a comment\nhello\n",
                  "t.yaml:2:1: a config must be a mapping with domain: and "
                  "descriptors:, not a scalar",
                  NULL);
}

static void an_empty_document_is_an_error(void **state) {
  (void)state;
  load_fails_with("", "t.yaml: empty config (expected domain: and "
                      "descriptors:)", NULL);
  load_fails_with("# only a comment\n", "t.yaml: empty config (expected "
                                        "domain: and descriptors:)", NULL);
}

static void a_descriptor_that_is_not_a_mapping_is_an_error(void **state) {
  (void)state;
  load_fails_with("domain: d\n"
                  "descriptors:\n"
                  "  - key\n",
                  "t.yaml:3:5: a descriptor must be a mapping, not a scalar",
                  NULL);
}

static void descriptors_that_are_not_a_list_is_an_error(void **state) {
  (void)state;
  load_fails_with("domain: d\n"
                  "descriptors: {key: a}\n",
                  "t.yaml:2:14: descriptors must be a list, not a mapping",
                  NULL);
}

static void a_rate_limit_that_is_not_a_mapping_is_an_error(void **state) {
  (void)state;
  load_fails_with("domain: d\n"
                  "descriptors:\n"
                  "  - key: a\n"
                  "    rate_limit: 5\n",
                  "t.yaml:4:17: a rate limit must be a mapping, not a scalar",
                  NULL);
}

static void a_domain_that_is_not_a_scalar_is_an_error(void **state) {
  (void)state;
  load_fails_with("domain: [a, b]\n",
                  "t.yaml:1:9: domain must be a scalar, not a list",
                  "t.yaml:1:9: config file cannot have empty domain", NULL);
}

static void a_nul_byte_in_a_value_is_an_error(void **state) {
  (void)state;
  load_fails_with("domain: d\n"
                  "descriptors:\n"
                  "  - key: a\n"
                  "    value: \"x\\0y\"\n",
                  "t.yaml:4:12: value contains a NUL byte", NULL);
}

static void yaml_syntax_error_in_a_block_is_reported_where_it_is(
    void **state) {
  (void)state;
  load_fails_with("domain: d\n"
                  "descriptors:\n"
                  "  - key: a\n"
                  "   value: b\n",
                  "t.yaml:4:4: did not find expected '-' indicator while "
                  "parsing a block collection",
                  NULL);
}

static void yaml_syntax_error_in_a_flow_is_reported_where_it_is(
    void **state) {
  (void)state;
  load_fails_with("domain: [d\n",
                  "t.yaml:2:1: did not find expected ',' or ']' while parsing "
                  "a flow sequence",
                  NULL);
}

static void yaml_tab_indentation_is_a_syntax_error(void **state) {
  (void)state;
  load_fails_with("domain: d\n"
                  "descriptors:\n"
                  "\t- key: a\n",
                  "t.yaml:3:1: found character that cannot start any token "
                  "while scanning for the next token",
                  NULL);
}

static void several_errors_in_one_file_are_all_reported(void **state) {
  (void)state;
  load_fails_with("domain: d\n"
                  "descriptors:\n"
                  "  - key: a\n"
                  "    rate_limit: {unit: fortnight, requests_per_unit: 1}\n"
                  "  - key: b\n"
                  "    bogus: true\n",
                  "t.yaml:4:24: invalid rate limit unit 'fortnight' (expected "
                  "second, minute, hour, day, week, month or year)",
                  "t.yaml:6:5: unknown key 'bogus' in a descriptor (expected "
                  "key, value, rate_limit, rate_limits, descriptors, "
                  "shadow_mode, detailed_metric, on_store_error, "
                  "local_fraction, share_threshold, value_to_metric, "
                  "quota_mode or metadata)",
                  NULL);
}

static void errors_stop_at_fifty(void **state) {
  (void)state;
  char yaml[16384] = "domain: d\n";
  for (int i = 0; i < 80; i++) {
    char line[32];
    snprintf(line, sizeof line, "x%d: 1\n", i);
    strcat(yaml, line);
  }
  cfg_errors e = {0};
  assert_null(config_load_string(yaml, strlen(yaml), "t.yaml", &e));
  assert_int_equal(e.n, 50);
  assert_string_equal(e.msgs[49], "t.yaml:51:1: unknown key 'x49' at the top "
                                  "(expected domain, descriptors, "
                                  "hash_tag or shedding)");
  cfg_errors_free(&e);
}

static void a_null_error_list_is_allowed(void **state) {
  (void)state;
  const char *bad = "domain: d\nfoo: 1\n";
  assert_null(config_load_string(bad, strlen(bad), "t.yaml", NULL));
  assert_null(config_load("/nonexistent/sluice.yaml", NULL));
}

/* ---- lookups with counted and binary strings ---- */

static void lookups_use_the_lengths_not_nul_terminators(void **state) {
  (void)state;
  sl_config *c = load_ok("domain: mongo_cps\n"
                         "descriptors:\n"
                         "  - key: database\n"
                         "    value: users\n"
                         "    rate_limit: {unit: second, requests_per_unit: 1}\n"
                         "  - key: data\n"
                         "    rate_limit: {unit: second, requests_per_unit: 2}\n");
  /* One buffer, no terminators between the pieces. */
  const char buf[] = "mongo_cpsXdatabaseusersX";
  const cfg_domain *d = config_domain(c, buf, 9);
  assert_non_null(d);
  cfg_entry e = {buf + 10, 8, buf + 18, 5};
  const cfg_node *n = config_match(d, &e, 1);
  assert_non_null(n);
  assert_string_equal(n->limits[0]->rule, "mongo_cps.database_users");
  /* "user" (a prefix of "users") is another value: no exact match. */
  e.value_len = 4;
  assert_null(config_match(d, &e, 1));
  /* "data" (a prefix of "database") is the key-only rule "data". */
  e.key_len = 4;
  n = config_match(d, &e, 1);
  assert_non_null(n);
  assert_string_equal(n->limits[0]->rule, "mongo_cps.data");
  /* "databaseusersX" as a key is nothing. */
  e.key_len = 14;
  assert_null(config_match(d, &e, 1));
  config_free(c);
}

static void binary_values_match_a_key_only_descriptor(void **state) {
  (void)state;
  sl_config *c = load_ok("domain: d\n"
                         "descriptors:\n"
                         "  - key: k\n"
                         "    rate_limit: {unit: second, requests_per_unit: 1}\n");
  const cfg_domain *d = config_domain(c, "d", 1);
  const char value[] = {'\0', '\xff', '\r', '\n', '*', '\0'};
  cfg_entry e = {"k", 1, value, sizeof value};
  const cfg_node *n = config_match(d, &e, 1);
  assert_non_null(n);
  assert_string_equal(n->limits[0]->rule, "d.k");
  e.value_len = 0;
  assert_non_null(config_match(d, &e, 1));
  config_free(c);
}

static void utf8_and_high_bytes_match_exactly(void **state) {
  (void)state;
  sl_config *c = load_ok("domain: d\n"
                         "descriptors:\n"
                         "  - key: city\n"
                         "    value: \"Z\xc3\xbcrich\"\n"
                         "    rate_limit: {unit: second, requests_per_unit: 1}\n"
                         "  - key: city\n"
                         "    value: Zurich\n"
                         "    rate_limit: {unit: second, requests_per_unit: 2}\n");
  assert_int_equal(match(c, "d", "city", "Z\xc3\xbcrich", NULL)->policy.limit,
                   1);
  assert_int_equal(match(c, "d", "city", "Zurich", NULL)->policy.limit, 2);
  assert_null(RULE(c, "d", "city", "Z\xc3rich"));
  config_free(c);
}

/* ---- the embedded default ---- */

static void default_config_loads_and_limits_any_key(void **state) {
  (void)state;
  cfg_errors e = {0};
  sl_config *c = config_load_string(config_default_yaml,
                                    strlen(config_default_yaml), "<default>",
                                    &e);
  assert_non_null(c);
  assert_int_equal(e.n, 0);
  assert_int_equal(c->ndomains, 1);
  assert_string_equal(c->domains[0]->name, "default");
  const cfg_limit *l = match(c, "default", "key", "alice", NULL);
  assert_policy(l, SL_SLIDING_WINDOW, 100, 0, MIN_NS, "sliding_window:100/m");
  assert_string_equal(l->rule, "default.key");
  assert_ptr_equal(match(c, "default", "key", "", NULL), l);
  assert_null(RULE(c, "default", "other", "alice"));
  assert_null(RULE(c, "default", "key", "alice", "more", "x"));
  config_free(c);
}

/* ---- key tables (rules/walk.h) ---- */

/* What a walk of the test table fills: each key's text. */
typedef struct abcd {
  rules_text a, b, c, d;
} abcd;

/*
 * Walks the root mapping of yaml (named "t.yaml") with the first nkeys of
 * a, b, c, d as the table of a map "in a test"; the errors go to e, the
 * values to *out. *out points into *doc: the caller deletes it.
 */
static void walk_with(const char *yaml, size_t nkeys, abcd *out,
                      cfg_errors *e, yaml_document_t *doc) {
  static const rules_key all[] = {
      {"a", rules_set_text, offsetof(abcd, a)},
      {"b", rules_set_text, offsetof(abcd, b)},
      {"c", rules_set_text, offsetof(abcd, c)},
      {"d", rules_set_text, offsetof(abcd, d)},
  };
  rules_key keys[5] = {{0}};
  memcpy(keys, all, nkeys * sizeof *keys);
  const rules_map kind = {"in a test", keys};
  yaml_parser_t parser;
  assert_true(yaml_parser_initialize(&parser));
  yaml_parser_set_input_string(&parser, (const unsigned char *)yaml,
                               strlen(yaml));
  assert_true(yaml_parser_load(&parser, doc));
  yaml_parser_delete(&parser);
  rules_loader L = {.file = "t.yaml", .doc = doc, .errs = e};
  rules_walk(&L, yaml_document_get_root_node(doc), &kind, out);
  assert_int_equal(L.failed, e->n > 0);
}

/* The one error of walking yaml with the first nkeys keys. */
static void walk_fails_with(const char *yaml, size_t nkeys, const char *want) {
  abcd out = {0};
  cfg_errors e = {0};
  yaml_document_t doc;
  walk_with(yaml, nkeys, &out, &e, &doc);
  yaml_document_delete(&doc);
  errors_are(NULL, &e, &want, 1);
}

static void a_key_table_names_its_keys_in_the_unknown_key_message(
    void **state) {
  (void)state;
  walk_fails_with("x: 1\n", 1, "t.yaml:1:1: unknown key 'x' in a test "
                               "(expected a)");
  walk_fails_with("x: 1\n", 2, "t.yaml:1:1: unknown key 'x' in a test "
                               "(expected a or b)");
  walk_fails_with("x: 1\n", 3, "t.yaml:1:1: unknown key 'x' in a test "
                               "(expected a, b or c)");
  /* A key added to the table is parsed and named alike. */
  walk_fails_with("d: 1\n", 3, "t.yaml:1:1: unknown key 'd' in a test "
                               "(expected a, b or c)");
  walk_fails_with("d: 1\nx: 1\n", 4, "t.yaml:2:1: unknown key 'x' in a test "
                                     "(expected a, b, c or d)");
}

static void a_key_table_sends_each_value_to_its_handler(void **state) {
  (void)state;
  abcd out = {0};
  cfg_errors e = {0};
  yaml_document_t doc;
  walk_with("c: three\na: one\n", 4, &out, &e, &doc);
  assert_int_equal(e.n, 0);
  assert_string_equal(out.a.s, "one");
  assert_int_equal(out.a.at->start_mark.line, 1); /* from 0 */
  assert_string_equal(out.c.s, "three");
  assert_null(out.b.at);
  assert_null(out.d.s);
  yaml_document_delete(&doc);
}

static void a_key_table_walk_rejects_a_key_twice_and_a_key_not_scalar(
    void **state) {
  (void)state;
  walk_fails_with("a: 1\na: 2\n", 4, "t.yaml:2:1: duplicate key 'a'");
  walk_fails_with("[a]: 1\n", 4, "t.yaml:1:1: a key must be a scalar, not "
                                 "a list");
}

/* ---- from the bugs found in review (fixed) ---- */

/* Bug: parse_limit's errors_before is taken after the key loop, and
   L->failed is file-wide, so every valid rate limit after an earlier error
   gets a spurious "invalid rate limit". */
static void a_valid_limit_after_an_invalid_one_gets_no_error(void **state) {
  (void)state;
  const char *want[] = {
      "t.yaml:4:24: invalid rate limit unit 'fortnight' (expected second, "
      "minute, hour, day, week, month or year)"};
  expect_errors("domain: d\n"
                "descriptors:\n"
                "  - key: a\n"
                "    rate_limit: {unit: fortnight, requests_per_unit: 1}\n"
                "  - key: b\n"
                "    rate_limit: {unit: second, requests_per_unit: 1}\n",
                want, 1);
}

/* Same cause: a key-level error inside a rate limit adds a second, vague
   "invalid rate limit" at the mapping. */
static void an_unknown_rate_limit_key_is_reported_once(void **state) {
  (void)state;
  const char *want[] = {
      "t.yaml:6:7: unknown key 'per_unit' in a rate limit (expected unit, "
      "requests_per_unit, unlimited, name, replaces, policy, algorithm, "
      "period, burst, evict_below, split, candidate, calendar, tz or max_wait)"};
  expect_errors("domain: d\n"
                "descriptors:\n"
                "  - key: a\n"
                "    rate_limit:\n"
                "      unit: second\n"
                "      per_unit: 2\n"
                "      requests_per_unit: 1\n",
                want, 1);
}

/* Bug: cmp_n uses strncmp, which stops at a NUL in the request's value,
   then reads s[tlen] past the end of the shorter stored string (heap
   out-of-bounds read under ASan), and may match "users" for "users\0x". */
static void a_value_with_a_nul_byte_is_not_the_value_before_it(void **state) {
  (void)state;
  sl_config *c = load_ok("domain: d\n"
                         "descriptors:\n"
                         "  - key: database\n"
                         "    value: users\n"
                         "    rate_limit: {unit: second, requests_per_unit: 1}\n");
  const cfg_domain *d = config_domain(c, "d", 1);
  static const char v[] = "users\0xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx";
  cfg_entry e = {"database", 8, v, sizeof v - 1};
  assert_null(config_match(d, &e, 1));
  e.value_len = 6; /* "users\0" */
  assert_null(config_match(d, &e, 1));
  config_free(c);
}

/* Same bug in config_domain: "d\0..." must not find domain "d". */
static void a_domain_with_a_nul_byte_is_not_the_domain_before_it(
    void **state) {
  (void)state;
  sl_config *c = load_ok("domain: d\n");
  static const char name[] = "d\0zzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzz";
  assert_null(config_domain(c, name, sizeof name - 1));
  config_free(c);
}

/* Divergence from envoyproxy/ratelimit: its wildcardKeys are tried in the
   order of the file; sluice sorts them, so with overlapping wildcards the
   one that sorts first wins ("a*" before "ab*"), whatever the file says. */
static void overlapping_wildcards_are_tried_in_file_order(void **state) {
  (void)state;
  sl_config *c = load_ok("domain: d\n"
                         "descriptors:\n"
                         "  - key: k\n"
                         "    value: ab*\n"
                         "    rate_limit: {unit: second, requests_per_unit: 1}\n"
                         "  - key: k\n"
                         "    value: a*\n"
                         "    rate_limit: {unit: second, requests_per_unit: 2}\n");
  cfg_entry e = {"k", 1, "abc", 3};
  const cfg_node *n = config_match(config_domain(c, "d", 1), &e, 1);
  assert_non_null(n);
  assert_string_equal(n->limits[0]->rule, "d.k_ab*");
  config_free(c);
}

/* ---- fleet mode: on_store_error, local_fraction, hash_tag ---- */

/* Exact: every fraction below is parsed to the double nearest it. */
static void assert_fraction(double got, double want) {
  if (got != want) fail_msg("fraction %.17g, want %.17g", got, want);
}

static void on_store_error_is_unset_by_default(void **state) {
  (void)state;
  sl_config *c = load_ok(one_rule);
  const cfg_limit *l = only_limit(c);
  assert_int_equal(l->on_store_error, CFG_STORE_ERROR_DEFAULT);
  assert_fraction(l->local_fraction, 0);
  assert_null(c->domains[0]->hash_tag);
  config_free(c);
}

static void on_store_error_takes_allow_deny_and_local_in_any_case(
    void **state) {
  (void)state;
  sl_config *c = load_ok("domain: d\n"
                         "descriptors:\n"
                         "  - key: a\n"
                         "    on_store_error: allow\n"
                         "    rate_limit: {unit: second, requests_per_unit: 1}\n"
                         "  - key: b\n"
                         "    on_store_error: deny\n"
                         "    rate_limit: {unit: second, requests_per_unit: 1}\n"
                         "  - key: c\n"
                         "    on_store_error: local\n"
                         "    rate_limit: {unit: second, requests_per_unit: 1}\n"
                         "  - key: e\n"
                         "    on_store_error: Deny\n"
                         "    rate_limit: {unit: second, requests_per_unit: 1}\n");
  assert_int_equal(c->nlimits, 4);
  assert_int_equal(c->limits[0]->on_store_error, CFG_STORE_ERROR_ALLOW);
  assert_int_equal(c->limits[1]->on_store_error, CFG_STORE_ERROR_DENY);
  assert_int_equal(c->limits[2]->on_store_error, CFG_STORE_ERROR_LOCAL);
  assert_int_equal(c->limits[3]->on_store_error, CFG_STORE_ERROR_DENY);
  for (int i = 0; i < 4; i++) assert_fraction(c->limits[i]->local_fraction, 0);
  config_free(c);
}

static void on_store_error_applies_to_every_limit_of_a_descriptor(
    void **state) {
  (void)state;
  sl_config *c = load_ok("domain: d\n"
                         "descriptors:\n"
                         "  - key: k\n"
                         "    on_store_error: local\n"
                         "    local_fraction: 0.25\n"
                         "    rate_limits:\n"
                         "      - {unit: second, requests_per_unit: 1}\n"
                         "      - {unit: day, requests_per_unit: 2}\n");
  assert_int_equal(c->nlimits, 2);
  for (int i = 0; i < 2; i++) {
    assert_int_equal(c->limits[i]->on_store_error, CFG_STORE_ERROR_LOCAL);
    assert_fraction(c->limits[i]->local_fraction, 0.25);
  }
  config_free(c);
}

static void on_store_error_is_not_inherited_by_nested_descriptors(
    void **state) {
  (void)state;
  sl_config *c = load_ok("domain: d\n"
                         "descriptors:\n"
                         "  - key: a\n"
                         "    on_store_error: local\n"
                         "    local_fraction: 0.5\n"
                         "    rate_limit: {unit: second, requests_per_unit: 1}\n"
                         "    descriptors:\n"
                         "      - key: b\n"
                         "        rate_limit: {unit: second, requests_per_unit: 1}\n");
  const cfg_limit *a = match(c, "d", "a", "x", NULL);
  const cfg_limit *b = match(c, "d", "a", "x", "b", "y", NULL);
  assert_int_equal(a->on_store_error, CFG_STORE_ERROR_LOCAL);
  assert_fraction(a->local_fraction, 0.5);
  assert_int_equal(b->on_store_error, CFG_STORE_ERROR_DEFAULT);
  assert_fraction(b->local_fraction, 0);
  config_free(c);
}

/* The fraction of a descriptor `on_store_error: local` with this
   local_fraction (as written in YAML). */
static double loaded_fraction(const char *written) {
  char yaml[256];
  snprintf(yaml, sizeof yaml,
           "domain: d\n"
           "descriptors:\n"
           "  - key: k\n"
           "    on_store_error: local\n"
           "    local_fraction: %s\n"
           "    rate_limit: {unit: second, requests_per_unit: 1}\n",
           written);
  sl_config *c = load_ok(yaml);
  double f = only_limit(c)->local_fraction;
  config_free(c);
  return f;
}

static void local_fraction_takes_a_decimal_or_a_percentage(void **state) {
  (void)state;
  assert_fraction(loaded_fraction("0.5"), 0.5);
  assert_fraction(loaded_fraction("0.3"), 0.3);
  assert_fraction(loaded_fraction(".25"), 0.25);
  assert_fraction(loaded_fraction("1"), 1);
  assert_fraction(loaded_fraction("1.0"), 1);
  assert_fraction(loaded_fraction("0.001"), 0.001);
  assert_fraction(loaded_fraction("50%"), 0.5);
  assert_fraction(loaded_fraction("\"30%\""), 0.3);
  assert_fraction(loaded_fraction("12.5%"), 0.125);
  assert_fraction(loaded_fraction("100%"), 1);
}

static void bad_on_store_error_is_an_error_at_its_value(void **state) {
  (void)state;
  load_fails_with("domain: d\n"
                  "descriptors:\n"
                  "  - key: a\n"
                  "    on_store_error: maybe\n"
                  "    rate_limit: {unit: second, requests_per_unit: 1}\n",
                  "t.yaml:4:21: on_store_error must be allow, deny or local, "
                  "not 'maybe'",
                  NULL);
  load_fails_with("domain: d\n"
                  "descriptors:\n"
                  "  - key: a\n"
                  "    on_store_error: local:0.5\n",
                  "t.yaml:4:21: on_store_error must be allow, deny or local, "
                  "not 'local:0.5'",
                  NULL);
  load_fails_with("domain: d\n"
                  "descriptors:\n"
                  "  - key: a\n"
                  "    on_store_error: [allow]\n",
                  "t.yaml:4:21: on_store_error must be a scalar, not a list",
                  NULL);
}

static void bad_local_fraction_is_an_error_at_its_value(void **state) {
  (void)state;
  static const struct {
    const char *written, *msg;
  } cases[] = {
      {"half", "t.yaml:5:21: local_fraction must be a decimal such as 0.5 "
               "or a percentage such as 50%, not 'half'"},
      {"-0.5", "t.yaml:5:21: local_fraction must be a decimal such as 0.5 "
               "or a percentage such as 50%, not '-0.5'"},
      {"1e-1", "t.yaml:5:21: local_fraction must be a decimal such as 0.5 "
               "or a percentage such as 50%, not '1e-1'"},
      {"0.1.2", "t.yaml:5:21: local_fraction must be a decimal such as 0.5 "
                "or a percentage such as 50%, not '0.1.2'"},
      {"\"50 %\"", "t.yaml:5:21: local_fraction must be a decimal such as "
                   "0.5 or a percentage such as 50%, not '50 %'"},
      {"\"%\"", "t.yaml:5:21: local_fraction must be a decimal such as 0.5 "
                "or a percentage such as 50%, not '%'"},
      {"0", "t.yaml:5:21: local_fraction must be more than 0 and at most 1 "
            "(100%), not '0'"},
      {"0%", "t.yaml:5:21: local_fraction must be more than 0 and at most 1 "
             "(100%), not '0%'"},
      {"1.5", "t.yaml:5:21: local_fraction must be more than 0 and at most 1 "
              "(100%), not '1.5'"},
      {"150%", "t.yaml:5:21: local_fraction must be more than 0 and at most "
               "1 (100%), not '150%'"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char yaml[256];
    snprintf(yaml, sizeof yaml,
             "domain: d\n"
             "descriptors:\n"
             "  - key: k\n"
             "    on_store_error: local\n"
             "    local_fraction: %s\n"
             "    rate_limit: {unit: second, requests_per_unit: 1}\n",
             cases[i].written);
    load_fails_with(yaml, cases[i].msg, NULL);
  }
}

static void local_fraction_is_an_error_with_allow_or_deny(void **state) {
  (void)state;
  load_fails_with("domain: d\n"
                  "descriptors:\n"
                  "  - key: a\n"
                  "    on_store_error: allow\n"
                  "    local_fraction: 0.5\n"
                  "    rate_limit: {unit: second, requests_per_unit: 1}\n"
                  "  - key: b\n"
                  "    local_fraction: 30%\n"
                  "    on_store_error: deny\n"
                  "    rate_limit: {unit: second, requests_per_unit: 1}\n",
                  "t.yaml:5:21: local_fraction is only for on_store_error: "
                  "local, not allow",
                  "t.yaml:8:21: local_fraction is only for on_store_error: "
                  "local, not deny",
                  NULL);
}

static void local_fraction_without_on_store_error_is_an_error(void **state) {
  (void)state;
  load_fails_with("domain: d\n"
                  "descriptors:\n"
                  "  - key: a\n"
                  "    local_fraction: 0.5\n"
                  "    rate_limit: {unit: second, requests_per_unit: 1}\n",
                  "t.yaml:4:21: local_fraction needs on_store_error: local",
                  NULL);
}

static void a_bad_on_store_error_beside_a_fraction_is_reported_once(
    void **state) {
  (void)state;
  load_fails_with("domain: d\n"
                  "descriptors:\n"
                  "  - key: a\n"
                  "    on_store_error: lokal\n"
                  "    local_fraction: 0.5\n",
                  "t.yaml:4:21: on_store_error must be allow, deny or local, "
                  "not 'lokal'",
                  NULL);
}

static void hash_tag_names_the_key_of_a_domain(void **state) {
  (void)state;
  sl_config *c = load_ok("domain: api\n"
                         "hash_tag: api_key\n"
                         "descriptors:\n"
                         "  - key: api_key\n"
                         "    rate_limit: {unit: second, requests_per_unit: 1}\n");
  assert_string_equal(c->domains[0]->hash_tag, "api_key");
  config_free(c);
}

static void hash_tag_is_per_domain(void **state) {
  (void)state;
  char *dir = temp_dir();
  write_file(dir, "a.yaml", "domain: a\nhash_tag: user\n");
  write_file(dir, "b.yaml", "domain: b\n");
  cfg_errors e = {0};
  sl_config *c = config_load(dir, &e);
  assert_non_null(c);
  assert_string_equal(config_domain(c, "a", 1)->hash_tag, "user");
  assert_null(config_domain(c, "b", 1)->hash_tag);
  config_free(c);
  rm_tree(dir);
}

static void bad_hash_tag_is_an_error_at_its_value(void **state) {
  (void)state;
  load_fails_with("domain: d\nhash_tag: \"\"\n",
                  "t.yaml:2:11: hash_tag must name a descriptor key, not be "
                  "empty",
                  NULL);
  load_fails_with("domain: d\nhash_tag: \"a{b\"\n",
                  "t.yaml:2:11: hash_tag must not contain '{' or '}', not "
                  "'a{b'",
                  NULL);
  load_fails_with("domain: d\nhash_tag: \"user}\"\n",
                  "t.yaml:2:11: hash_tag must not contain '{' or '}', not "
                  "'user}'",
                  NULL);
  load_fails_with("domain: d\nhash_tag: [a, b]\n",
                  "t.yaml:2:11: hash_tag must be a scalar, not a list", NULL);
  load_fails_with("domain: d\nhash_tag: a\nhash_tag: b\n",
                  "t.yaml:3:1: duplicate key 'hash_tag'", NULL);
}

static void store_error_names_are_the_config_spellings(void **state) {
  (void)state;
  assert_string_equal(cfg_store_error_name(CFG_STORE_ERROR_DEFAULT),
                      "default");
  assert_string_equal(cfg_store_error_name(CFG_STORE_ERROR_ALLOW), "allow");
  assert_string_equal(cfg_store_error_name(CFG_STORE_ERROR_DENY), "deny");
  assert_string_equal(cfg_store_error_name(CFG_STORE_ERROR_LOCAL), "local");
  assert_string_equal(cfg_store_error_name(-1), "unknown");
  assert_string_equal(cfg_store_error_name(4), "unknown");
}

/* The mode and fraction the daemon-wide flag value gives. */
static void flag_gives(const char *s, int want_mode, double want_fraction) {
  int mode = -1;
  double fraction = -1;
  char err[256] = "";
  if (cfg_parse_store_error(s, &mode, &fraction, err, sizeof err))
    fail_msg("'%s': %s", s, err);
  assert_int_equal(mode, want_mode);
  assert_fraction(fraction, want_fraction);
}

static void store_error_flag_takes_a_mode_and_a_local_fraction(void **state) {
  (void)state;
  /* allow and deny carry the default fraction for `local` limits. */
  flag_gives("allow", CFG_STORE_ERROR_ALLOW, CFG_LOCAL_FRACTION_DEFAULT);
  flag_gives("deny", CFG_STORE_ERROR_DENY, CFG_LOCAL_FRACTION_DEFAULT);
  flag_gives("local", CFG_STORE_ERROR_LOCAL, 0.5);
  flag_gives("local:0.3", CFG_STORE_ERROR_LOCAL, 0.3);
  flag_gives("local:30%", CFG_STORE_ERROR_LOCAL, 0.3);
  flag_gives("local:1", CFG_STORE_ERROR_LOCAL, 1);
  flag_gives("LOCAL:100%", CFG_STORE_ERROR_LOCAL, 1);
  flag_gives("Allow", CFG_STORE_ERROR_ALLOW, CFG_LOCAL_FRACTION_DEFAULT);
}

/* The flag value fails with exactly this message, changing nothing. */
static void flag_fails_with(const char *s, const char *want) {
  int mode = -1;
  double fraction = -1;
  char err[256] = "";
  assert_int_equal(cfg_parse_store_error(s, &mode, &fraction, err, sizeof err),
                   SL_EINVAL);
  assert_string_equal(err, want);
  assert_int_equal(mode, -1);
  assert_fraction(fraction, -1);
}

static void bad_store_error_flags_say_what_is_wrong(void **state) {
  (void)state;
  flag_fails_with("maybe", "must be allow, deny, local or local:FRACTION, "
                           "not 'maybe'");
  flag_fails_with("", "must be allow, deny, local or local:FRACTION, not ''");
  flag_fails_with("locale", "must be allow, deny, local or local:FRACTION, "
                            "not 'locale'");
  flag_fails_with("allow:0.3", "takes a fraction only with local (e.g. "
                               "local:0.3), not 'allow:0.3'");
  flag_fails_with("deny:", "takes a fraction only with local (e.g. "
                           "local:0.3), not 'deny:'");
  flag_fails_with("local:", "local's fraction must be a decimal such as 0.5 "
                            "or a percentage such as 50%, not ''");
  flag_fails_with("local:abc", "local's fraction must be a decimal such as "
                               "0.5 or a percentage such as 50%, not 'abc'");
  flag_fails_with("local:0.3:1", "local's fraction must be a decimal such as "
                                 "0.5 or a percentage such as 50%, not "
                                 "'0.3:1'");
  flag_fails_with("local:0", "local's fraction must be more than 0 and at "
                             "most 1 (100%), not '0'");
  flag_fails_with("local:1.5", "local's fraction must be more than 0 and at "
                               "most 1 (100%), not '1.5'");
  flag_fails_with("local:101%", "local's fraction must be more than 0 and at "
                                "most 1 (100%), not '101%'");
}

static void store_error_flag_needs_no_error_buffer(void **state) {
  (void)state;
  int mode = 0;
  double fraction = 0;
  assert_int_equal(cfg_parse_store_error("maybe", &mode, &fraction, NULL, 0),
                   SL_EINVAL);
  assert_int_equal(cfg_parse_store_error(NULL, &mode, &fraction, NULL, 0),
                   SL_EINVAL);
  assert_int_equal(cfg_parse_store_error("deny", &mode, &fraction, NULL, 0),
                   0);
  assert_int_equal(mode, CFG_STORE_ERROR_DENY);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(a_valid_limit_after_an_invalid_one_gets_no_error),
      cmocka_unit_test(an_unknown_rate_limit_key_is_reported_once),
      cmocka_unit_test(a_value_with_a_nul_byte_is_not_the_value_before_it),
      cmocka_unit_test(a_domain_with_a_nul_byte_is_not_the_domain_before_it),
      cmocka_unit_test(overlapping_wildcards_are_tried_in_file_order),
      cmocka_unit_test(load_string_gives_one_domain_with_its_rule),
      cmocka_unit_test(
          load_string_without_descriptors_gives_a_domain_without_rules),
      cmocka_unit_test(load_string_needs_no_nul_terminator),
      cmocka_unit_test(load_reads_a_file),
      cmocka_unit_test(load_of_a_file_reports_errors_under_its_path),
      cmocka_unit_test(
          load_reads_every_yaml_and_yml_file_of_a_directory_in_name_order),
      cmocka_unit_test(load_of_a_directory_without_yaml_files_fails),
      cmocka_unit_test(load_of_a_missing_path_fails_with_the_system_error),
      cmocka_unit_test(load_of_a_directory_rejects_a_domain_defined_twice),
      cmocka_unit_test(load_of_a_directory_reports_the_errors_of_every_file),
      cmocka_unit_test(domains_are_found_by_a_counted_name),
      cmocka_unit_test(example1_each_listed_value_has_its_own_limit),
      cmocka_unit_test(example2_nested_descriptor_limits_each_number),
      cmocka_unit_test(example2_key_only_top_level_limits_any_number),
      cmocka_unit_test(example2_placeholder_without_a_limit_matches_nothing),
      cmocka_unit_test(example3_key_value_is_preferred_to_the_key_alone),
      cmocka_unit_test(example3_order_in_the_file_does_not_matter),
      cmocka_unit_test(example4_a_limit_applies_only_at_the_request_depth),
      cmocka_unit_test(example4_a_nested_descriptor_matches_two_entries),
      cmocka_unit_test(example5_unlimited_descriptor_is_always_allowed),
      cmocka_unit_test(example6_shadow_mode_is_per_descriptor),
      cmocka_unit_test(example7_replaces_names_the_limit_it_replaces),
      cmocka_unit_test(example8_detailed_metric_is_per_descriptor),
      cmocka_unit_test(example9_wildcard_value_matches_by_prefix),
      cmocka_unit_test(
          exact_value_beats_a_wildcard_and_a_wildcard_beats_the_key),
      cmocka_unit_test(a_lone_star_matches_every_value),
      cmocka_unit_test(wildcards_work_at_nested_levels),
      cmocka_unit_test(a_node_with_a_limit_and_children_serves_both_depths),
      cmocka_unit_test(a_deeper_level_falls_back_to_its_key_only_child),
      cmocka_unit_test(an_empty_request_descriptor_matches_nothing),
      cmocka_unit_test(keys_and_values_are_case_sensitive),
      cmocka_unit_test(many_siblings_are_all_found),
      cmocka_unit_test(policy_field_takes_any_algorithm),
      cmocka_unit_test(policy_is_kept_in_its_canonical_spelling),
      cmocka_unit_test(algorithm_period_and_burst_build_a_policy),
      cmocka_unit_test(evict_below_bounds_what_a_limit_may_evict),
      cmocka_unit_test(algorithm_defaults_to_fixed_window_as_in_envoy),
      cmocka_unit_test(period_takes_any_duration),
      cmocka_unit_test(rate_limits_put_several_limits_on_one_descriptor),
      cmocka_unit_test(rate_limits_named_get_their_name_in_the_rule_id),
      cmocka_unit_test(rate_limits_of_one_entry_has_the_plain_rule_id),
      cmocka_unit_test(unit_names_are_case_insensitive),
      cmocka_unit_test(requests_per_unit_zero_blocks_with_the_unit_as_window),
      cmocka_unit_test(
          requests_per_unit_zero_with_a_period_blocks_for_that_window),
      cmocka_unit_test(unlimited_false_is_an_ordinary_limit),
      cmocka_unit_test(
          shadow_and_detailed_flags_apply_to_every_limit_of_a_descriptor),
      cmocka_unit_test(flags_are_not_inherited_by_nested_descriptors),
      cmocka_unit_test(rule_ids_join_domain_and_each_level),
      cmocka_unit_test(empty_value_means_the_key_alone_as_in_envoy),
      cmocka_unit_test(limits_remember_where_they_were_defined),
      cmocka_unit_test(limits_are_listed_in_load_order),
      cmocka_unit_test(duplicate_composite_key_is_an_error),
      cmocka_unit_test(duplicate_key_only_descriptor_is_an_error),
      cmocka_unit_test(the_same_key_at_two_levels_is_no_duplicate),
      cmocka_unit_test(empty_domain_is_an_error),
      cmocka_unit_test(missing_domain_is_an_error_at_the_document),
      cmocka_unit_test(unknown_top_level_key_is_an_error),
      cmocka_unit_test(unknown_descriptor_key_is_an_error),
      cmocka_unit_test(unknown_rate_limit_key_is_an_error),
      cmocka_unit_test(unknown_replaces_key_is_an_error),
      cmocka_unit_test(a_key_twice_in_a_replaces_entry_is_an_error),
      cmocka_unit_test(duplicate_mapping_key_is_an_error),
      cmocka_unit_test(bad_unit_is_an_error),
      cmocka_unit_test(bad_policy_is_an_error_with_the_policy_message),
      cmocka_unit_test(bad_algorithm_is_an_error_at_the_algorithm),
      cmocka_unit_test(bad_period_is_an_error_at_the_period),
      cmocka_unit_test(burst_on_a_window_algorithm_is_an_error_at_the_burst),
      cmocka_unit_test(both_unit_and_period_is_an_error),
      cmocka_unit_test(policy_with_unit_is_an_error),
      cmocka_unit_test(unlimited_with_a_unit_is_an_error),
      cmocka_unit_test(rate_limit_without_unit_is_an_error),
      cmocka_unit_test(rate_limit_without_requests_per_unit_is_an_error),
      cmocka_unit_test(rate_limit_and_rate_limits_together_is_an_error),
      cmocka_unit_test(replaces_naming_its_own_limit_is_an_error),
      cmocka_unit_test(empty_replaces_entry_is_an_error),
      cmocka_unit_test(empty_key_is_an_error),
      cmocka_unit_test(requests_per_unit_must_be_a_whole_number),
      cmocka_unit_test(requests_per_unit_above_32_bits_is_an_error),
      cmocka_unit_test(flags_must_be_booleans),
      cmocka_unit_test(nesting_of_32_levels_loads),
      cmocka_unit_test(nesting_deeper_than_32_levels_is_an_error),
      cmocka_unit_test(a_list_document_is_an_error),
      cmocka_unit_test(a_scalar_document_is_an_error),
      cmocka_unit_test(an_empty_document_is_an_error),
      cmocka_unit_test(a_descriptor_that_is_not_a_mapping_is_an_error),
      cmocka_unit_test(descriptors_that_are_not_a_list_is_an_error),
      cmocka_unit_test(a_rate_limit_that_is_not_a_mapping_is_an_error),
      cmocka_unit_test(a_domain_that_is_not_a_scalar_is_an_error),
      cmocka_unit_test(a_nul_byte_in_a_value_is_an_error),
      cmocka_unit_test(yaml_syntax_error_in_a_block_is_reported_where_it_is),
      cmocka_unit_test(yaml_syntax_error_in_a_flow_is_reported_where_it_is),
      cmocka_unit_test(yaml_tab_indentation_is_a_syntax_error),
      cmocka_unit_test(several_errors_in_one_file_are_all_reported),
      cmocka_unit_test(errors_stop_at_fifty),
      cmocka_unit_test(a_null_error_list_is_allowed),
      cmocka_unit_test(lookups_use_the_lengths_not_nul_terminators),
      cmocka_unit_test(binary_values_match_a_key_only_descriptor),
      cmocka_unit_test(utf8_and_high_bytes_match_exactly),
      cmocka_unit_test(default_config_loads_and_limits_any_key),
      cmocka_unit_test(on_store_error_is_unset_by_default),
      cmocka_unit_test(on_store_error_takes_allow_deny_and_local_in_any_case),
      cmocka_unit_test(on_store_error_applies_to_every_limit_of_a_descriptor),
      cmocka_unit_test(on_store_error_is_not_inherited_by_nested_descriptors),
      cmocka_unit_test(local_fraction_takes_a_decimal_or_a_percentage),
      cmocka_unit_test(bad_on_store_error_is_an_error_at_its_value),
      cmocka_unit_test(bad_local_fraction_is_an_error_at_its_value),
      cmocka_unit_test(local_fraction_is_an_error_with_allow_or_deny),
      cmocka_unit_test(local_fraction_without_on_store_error_is_an_error),
      cmocka_unit_test(a_bad_on_store_error_beside_a_fraction_is_reported_once),
      cmocka_unit_test(hash_tag_names_the_key_of_a_domain),
      cmocka_unit_test(hash_tag_is_per_domain),
      cmocka_unit_test(bad_hash_tag_is_an_error_at_its_value),
      cmocka_unit_test(store_error_names_are_the_config_spellings),
      cmocka_unit_test(store_error_flag_takes_a_mode_and_a_local_fraction),
      cmocka_unit_test(bad_store_error_flags_say_what_is_wrong),
      cmocka_unit_test(store_error_flag_needs_no_error_buffer),
      cmocka_unit_test(a_key_table_names_its_keys_in_the_unknown_key_message),
      cmocka_unit_test(a_key_table_sends_each_value_to_its_handler),
      cmocka_unit_test(
          a_key_table_walk_rejects_a_key_twice_and_a_key_not_scalar),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
