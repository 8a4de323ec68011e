/*
 * load.c — loading envoyproxy/ratelimit YAML configs (with sluice's
 * extensions) into the rule set of config.h: a file, a directory of them
 * (one domain each), or a string; the YAML document of each; and the top
 * of a domain:
 *
 *   domain: NAME                # required, unique across the files
 *   hash_tag: KEY               # sluice, fleet mode's Redis Cluster slot
 *   shedding: {...}             # sluice, load shedding (shedding.c)
 *   descriptors: [...]          # descriptor.c
 *
 * A domain named by several files is an error, unless the load merges
 * them (CFG_LOAD_MERGE_DOMAINS, envoy's MERGE_DOMAIN_CONFIG): then each
 * file's descriptors join the domain's tree, and a hash_tag must agree.
 *
 * Unknown keys are errors, as in envoy. libyaml's document API gives every
 * node its position, so every error says file:line:col (walk.c). A load
 * either gives a whole config or none, with every error found.
 */
#include "rules.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#define MAX_FILE_BYTES ((size_t)16 << 20)

const char config_default_yaml[] =
    "# sluice's embedded default: each value of `key` gets its own counter,\n"
    "# 100 per minute, sliding window.\n"
    "domain: default\n"
    "descriptors:\n"
    "  - key: key\n"
    "    rate_limit:\n"
    "      policy: \"sliding_window:100/m\"\n";

/* ---- the top of a domain ---- */

/* A domain's top-level keys, as read (hash_tag goes to d directly). */
typedef struct domain_keys {
  cfg_domain *d;
  rules_text domain;
  const yaml_node_t *descriptors;
} domain_keys;

/* The key's value is what goes between the braces of Redis keys; a brace
   in the key's name is a mistake (hash_tag: "{api_key}"). */
static void set_hash_tag(rules_loader *L, const yaml_node_t *v,
                         const rules_key *key, void *conf) {
  cfg_domain *d = ((domain_keys *)conf)->d;
  const char *tag = rules_scalar(L, v, key->name);
  if (tag && !*tag)
    rules_err(L, v, "hash_tag must name a descriptor key, not be empty");
  else if (tag && strpbrk(tag, "{}"))
    rules_err(L, v, "hash_tag must not contain '{' or '}', not '%s'", tag);
  else if (tag && !(d->hash_tag = strdup(tag)))
    rules_err(L, v, "out of memory");
}

static const rules_key domain_key_table[] = {
    {"domain", rules_set_text, offsetof(domain_keys, domain)},
    {"descriptors", rules_set_node, offsetof(domain_keys, descriptors)},
    {"hash_tag", set_hash_tag, 0},
    {"shedding", rules_parse_shedding, 0},
    {NULL, NULL, 0},
};

static const rules_map domain_map = {"at the top", domain_key_table};

static void domain_free(cfg_domain *d) {
  if (!d) return;
  rules_node_free(&d->root);
  free(d->name);
  free(d->hash_tag);
  rules_shedding_free(d->shedding);
  free(d->file);
  free(d);
}

void config_free(sl_config *c) {
  if (!c) return;
  for (size_t i = 0; i < c->ndomains; i++) domain_free(c->domains[i]);
  free(c->domains);
  for (size_t i = 0; i < c->nlimits; i++) rules_limit_free(c->limits[i]);
  free(c->limits);
  for (size_t i = 0; i < c->nfiles; i++) free(c->files[i]);
  free(c->files);
  free(c);
}

/*
 * Adds the descriptors of `extra` (a file's domain, as read into k, that
 * names domain `into` again) to `into`, as envoy's merge does: its
 * descriptors join the tree (a composite key already there is an error),
 * its hash_tag, if any, must be the domain's, and a shedding block is
 * taken when the domain has none.
 */
static void merge_domain(rules_loader *L, cfg_domain *into,
                         cfg_domain *extra, const domain_keys *k) {
  if (extra->hash_tag && !into->hash_tag) {
    into->hash_tag = strdup(extra->hash_tag);
    if (!into->hash_tag) rules_err(L, NULL, "out of memory");
  } else if (extra->hash_tag && strcmp(extra->hash_tag, into->hash_tag)) {
    rules_err(L, k->domain.at, "hash_tag '%s' differs from domain '%s''s "
                               "'%s' (in %s)",
              extra->hash_tag, into->name, into->hash_tag, into->file);
    return;
  }
  if (extra->shedding && into->shedding) {
    rules_err(L, k->domain.at, "domain '%s' has a shedding block already (in "
                               "%s)", into->name, into->file);
    return;
  }
  if (extra->shedding) { /* moved: `extra` is freed after the merge */
    into->shedding = extra->shedding;
    extra->shedding = NULL;
  }
  char path[512];
  snprintf(path, sizeof path, "%s.", into->name);
  if (k->descriptors)
    rules_parse_descriptors(L, &into->root, k->descriptors, path, 1);
}

/*
 * Parses the document's root mapping `root` into a new domain of L->cfg.
 * On errors (reported) the domain is dropped; the limits it made stay in
 * L->cfg->limits, which the failed load frees.
 */
static void parse_domain(rules_loader *L, const yaml_node_t *root) {
  sl_config *cfg = L->cfg;
  domain_keys k = {.d = calloc(1, sizeof(cfg_domain))};
  cfg_domain *d = k.d;
  if (!d) return;
  d->root.key = strdup("");
  d->file = strdup(L->file);
  rules_walk(L, root, &domain_map, &k);
  if (k.domain.s && *k.domain.s) d->name = strdup(k.domain.s);
  const yaml_node_t *domain_at = k.domain.at ? k.domain.at : root;
  if (!d->name) {
    rules_err(L, domain_at, "config file cannot have empty domain");
    goto done;
  }
  for (size_t i = 0; i < cfg->ndomains; i++)
    if (!strcmp(cfg->domains[i]->name, d->name)) {
      if (L->opts & CFG_LOAD_MERGE_DOMAINS) {
        merge_domain(L, cfg->domains[i], d, &k);
      } else {
        /* (--merge-domains merges them: docs/server.md says so) */
        rules_err(L, domain_at, "duplicate domain '%s' (also in %s)",
                  d->name, cfg->domains[i]->file);
      }
      goto done;
    }
  char path[512];
  snprintf(path, sizeof path, "%s.", d->name);
  size_t first_limit = cfg->nlimits;
  if (k.descriptors)
    rules_parse_descriptors(L, &d->root, k.descriptors, path, 1);
  rules_check_split_by(L, d, first_limit);
  if (!L->failed) {
    cfg_domain **grown =
        realloc(cfg->domains, (cfg->ndomains + 1) * sizeof *grown);
    if (grown) {
      cfg->domains = grown;
      cfg->domains[cfg->ndomains++] = d;
      d = NULL;
    } else {
      rules_err(L, NULL, "out of memory");
    }
  }
done:
  domain_free(d);
}

/* Parses one file's text into cfg as a domain. 0, or -1 (errors added). */
static int load_text(sl_config *cfg, const char *text, size_t len,
                     const char *file, unsigned opts, cfg_errors *errs) {
  char **files = realloc(cfg->files, (cfg->nfiles + 1) * sizeof *files);
  if (!files) return -1;
  cfg->files = files;
  cfg->files[cfg->nfiles] = strdup(file);
  if (!cfg->files[cfg->nfiles]) return -1;
  file = cfg->files[cfg->nfiles++];

  yaml_parser_t parser;
  yaml_document_t doc;
  if (!yaml_parser_initialize(&parser)) return -1;
  yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
  if (!yaml_parser_load(&parser, &doc)) {
    /* libyaml: "did not find expected key while parsing a block mapping" */
    yaml_mark_t m = parser.problem_mark;
    rules_errorf(errs, file, (int)m.line + 1, (int)m.column + 1, "%s%s%s",
                 parser.problem ? parser.problem : "malformed YAML",
                 parser.context ? " " : "",
                 parser.context ? parser.context : "");
    yaml_parser_delete(&parser);
    return -1;
  }
  yaml_parser_delete(&parser);

  rules_loader L = {
      .file = file, .doc = &doc, .errs = errs, .cfg = cfg, .opts = opts};
  yaml_node_t *root = yaml_document_get_root_node(&doc);
  if (!root)
    rules_err(&L, NULL, "empty config (expected domain: and descriptors:)");
  else if (root->type != YAML_MAPPING_NODE)
    rules_err(&L, root, "a config must be a mapping with domain: and "
                        "descriptors:, not %s", rules_type_name(root));
  else
    parse_domain(&L, root);
  yaml_document_delete(&doc);
  return L.failed ? -1 : 0;
}

/* ---- files and directories ---- */

static sl_config *new_config(void) { return calloc(1, sizeof(sl_config)); }

/* Indexes each domain's tree (once its every file is read: merged
   domains grow until then) and sorts the domains; frees and returns NULL
   when there were errors. */
static sl_config *finish(sl_config *c, cfg_errors *errs, int failed) {
  for (size_t i = 0; !failed && i < c->ndomains; i++)
    if (rules_index_tree(&c->domains[i]->root)) {
      rules_errorf(errs, c->domains[i]->file, 0, 0, "out of memory");
      failed = 1;
    }
  if (failed || (errs && errs->n)) {
    config_free(c);
    return NULL;
  }
  rules_sort_domains(c);
  return c;
}

sl_config *config_load_string(const char *yaml, size_t len, const char *name,
                              cfg_errors *errs) {
  sl_config *c = new_config();
  if (!c) return NULL;
  int failed = load_text(c, yaml, len, name, 0, errs);
  return finish(c, errs, failed);
}

/* Reads a whole file (at most MAX_FILE_BYTES). NULL with an error. */
static char *read_file(const char *path, size_t *len, cfg_errors *errs) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    rules_errorf(errs, path, 0, 0, "%s", strerror(errno));
    return NULL;
  }
  char *buf = NULL;
  size_t n = 0, cap = 0;
  for (;;) {
    if (n == cap) {
      if (cap >= MAX_FILE_BYTES) {
        rules_errorf(errs, path, 0, 0, "larger than %zu bytes",
                     MAX_FILE_BYTES);
        free(buf);
        fclose(f);
        return NULL;
      }
      cap = cap ? cap * 2 : 4096;
      char *grown = realloc(buf, cap + 1);
      if (!grown) {
        free(buf);
        fclose(f);
        return NULL;
      }
      buf = grown;
    }
    size_t got = fread(buf + n, 1, cap - n, f);
    n += got;
    if (got == 0) break;
  }
  int bad = ferror(f);
  fclose(f);
  if (bad) {
    rules_errorf(errs, path, 0, 0, "read error");
    free(buf);
    return NULL;
  }
  buf[n] = '\0';
  *len = n;
  return buf;
}

/* Loads the file at path into c: 0, or -1 (errors added). */
static int load_file(sl_config *c, const char *path, unsigned opts,
                     cfg_errors *errs) {
  size_t len;
  char *text = read_file(path, &len, errs);
  int failed = !text || load_text(c, text, len, path, opts, errs);
  free(text);
  return failed ? -1 : 0;
}

/* A config file's name: *.yaml or *.yml, not hidden. */
static int yaml_name(const char *n) {
  size_t l = strlen(n);
  return n[0] != '.' && ((l > 5 && !strcmp(n + l - 5, ".yaml")) ||
                         (l > 4 && !strcmp(n + l - 4, ".yml")));
}

static int name_cmp(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Loads every config file of directory `path` into c, in name order: 0, or
   -1 (errors added; every file is read all the same). */
static int load_dir(sl_config *c, const char *path, unsigned opts,
                    cfg_errors *errs) {
  DIR *dir = opendir(path);
  if (!dir) {
    rules_errorf(errs, path, 0, 0, "%s", strerror(errno));
    return -1;
  }
  char **names = NULL;
  size_t n = 0;
  for (struct dirent *e; (e = readdir(dir));) {
    if (!yaml_name(e->d_name)) continue;
    char **grown = realloc(names, (n + 1) * sizeof *grown);
    if (!grown) break;
    names = grown;
    names[n] = malloc(strlen(path) + strlen(e->d_name) + 2);
    if (!names[n]) break;
    sprintf(names[n++], "%s/%s", path, e->d_name);
  }
  closedir(dir);
  int failed = 0;
  if (n) qsort(names, n, sizeof *names, name_cmp);
  if (n == 0) {
    rules_errorf(errs, path, 0, 0,
                 "no *.yaml or *.yml files in this directory");
    failed = 1;
  }
  for (size_t i = 0; i < n; i++) {
    failed |= load_file(c, names[i], opts, errs) != 0;
    free(names[i]);
  }
  free(names);
  return failed ? -1 : 0;
}

sl_config *config_load(const char *path, cfg_errors *errs) {
  return config_load_opts(path, 0, errs);
}

int config_env_merge_domains(void) {
  const char *v = getenv("MERGE_DOMAIN_CONFIG");
  if (!v) return 0;
  static const char *const yes[] = {"true", "1", "yes", "on"};
  for (size_t i = 0; i < sizeof yes / sizeof *yes; i++)
    if (!strcasecmp(v, yes[i])) return 1;
  return 0;
}

sl_config *config_load_opts(const char *path, unsigned opts,
                            cfg_errors *errs) {
  struct stat st;
  if (stat(path, &st) != 0) {
    rules_errorf(errs, path, 0, 0, "%s", strerror(errno));
    return NULL;
  }
  sl_config *c = new_config();
  if (!c) return NULL;
  int failed = S_ISDIR(st.st_mode) ? load_dir(c, path, opts, errs)
                                    : load_file(c, path, opts, errs);
  return finish(c, errs, failed != 0);
}
