/*
 * config.h — the daemon's rules: envoyproxy/ratelimit YAML configs, loaded
 * into a tree of descriptors, and matched against requests.
 *
 * A config is a set of domains; a domain is a tree of descriptor nodes
 * (key, optional value) carrying zero or more limits. A request names a
 * domain and one or more descriptors, each an ordered list of (key, value)
 * entries; each descriptor is matched level by level against the tree the
 * way envoyproxy/ratelimit does it (key_value first, then a "prefix*"
 * wildcard value, then the key alone; a limit applies only at the depth of
 * the descriptor's last entry).
 *
 * Files are YAML (libyaml). Every error carries file:line:col.
 */
#ifndef SLUICE_CONFIG_H
#define SLUICE_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#include "sluice.h"

/* Where something is in a config file (line and column start at 1). */
typedef struct cfg_pos {
  const char *file;
  int line, col;
} cfg_pos;

/* One limit on a descriptor (a descriptor may carry several). */
typedef struct cfg_limit {
  char *name;      /* rate_limit.name, or NULL */
  char *rule;      /* metric/rule id: "domain.key_value.key" (+"#i"/name) */
  char *policy_str; /* canonical policy, or "unlimited" / "blocked" */
  sl_policy policy; /* unless unlimited; blocked: its window (period_ns) */
  int unlimited;    /* always allowed, nothing counted */
  int blocked;      /* requests_per_unit: 0 — always denied */
  int shadow;       /* shadow_mode: evaluated and counted, never denies */
  int detailed_metric;
  char **replaces; /* names of limits this one replaces */
  size_t nreplaces;
  const char *unit_name; /* envoy unit ("MINUTE") when given by unit */
  uint32_t requests_per_unit;
  cfg_pos pos;
  size_t index; /* position in sl_config.limits */
} cfg_limit;

typedef struct cfg_node {
  char *key;
  char *value; /* NULL: key only (each value its own counter) */
  int wildcard; /* value ends in '*': prefix match on the rest */
  cfg_limit **limits;
  size_t nlimits;
  struct cfg_node **children; /* sorted: exact by (key, value), then key-only */
  size_t nchildren;
  struct cfg_node **wildcards; /* children with wildcard values, in order */
  size_t nwildcards;
  cfg_pos pos;
} cfg_node;

typedef struct cfg_domain {
  char *name;
  cfg_node root; /* key/value unused */
  char *file;
} cfg_domain;

typedef struct sl_config {
  cfg_domain **domains; /* sorted by name */
  size_t ndomains;
  cfg_limit **limits; /* every limit, in load order */
  size_t nlimits;
  char **files; /* the files it was loaded from */
  size_t nfiles;
} sl_config;

/* A list of errors, each "file:line:col: message". */
typedef struct cfg_errors {
  char **msgs;
  size_t n;
} cfg_errors;

void cfg_errors_free(cfg_errors *e);

/*
 * Loads PATH: a YAML file, or a directory whose *.yaml / *.yml files (in
 * name order) each define one domain. Returns the config, or NULL with the
 * reasons in *errs (at most 50).
 */
sl_config *config_load(const char *path, cfg_errors *errs);

/* Loads one YAML document from memory; `name` stands for its file name. */
sl_config *config_load_string(const char *yaml, size_t len, const char *name,
                              cfg_errors *errs);

/* The embedded default: domain "default", descriptor "key" at
   sliding_window:100/m, each value its own counter. */
extern const char config_default_yaml[];

void config_free(sl_config *c);

const cfg_domain *config_domain(const sl_config *c, const char *name,
                                size_t len);

/* One (key, value) entry of a request descriptor. */
typedef struct cfg_entry {
  const char *key;
  size_t key_len;
  const char *value;
  size_t value_len;
} cfg_entry;

/*
 * Matches a descriptor against a domain. Returns the node whose limits
 * apply (it has nlimits > 0), or NULL when no limit applies.
 */
const cfg_node *config_match(const cfg_domain *d, const cfg_entry *entries,
                             size_t n);

#endif /* SLUICE_CONFIG_H */
