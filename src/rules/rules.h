/*
 * rules.h — what the files of src/rules/ share to build a rule set (the
 * public side is config.h): the parsers of descriptors and rate limits,
 * the fleet-mode keys of a descriptor, freeing, and the ordering that the
 * lookups of match.c rely on. Internal to src/rules/.
 *
 *   load.c         files, directories, a document, the top of a domain
 *   descriptor.c   a descriptor's keys, its limits and its children
 *   limit.c        a rate limit's keys -> a policy; replaces
 *   metadata.c     a descriptor's metadata, as JSON
 *   envoy.c        what a match says beyond its node: shared counters,
 *                  metric names
 *   store_error.c  on_store_error / local_fraction, and the daemon's flag
 *   split.c        a limit split into sub-counters, and their shares
 *   shedding.c     a domain's shedding: block (priority classes)
 *   match.c        sorting for lookup; domains and descriptors found
 *   walk.c         the YAML walk: errors, scalars, key tables (walk.h)
 */
#ifndef SLUICE_RULES_RULES_H
#define SLUICE_RULES_RULES_H

#include "config.h"
#include "walk.h"

/* What a descriptor says about each of its own limits (not its children's,
   as envoy's shadow_mode). */
typedef struct limit_flags {
  int shadow, detailed, on_store_error;
  double local_fraction;
  int quota_mode, dynamic_metric;
  char *metadata; /* JSON (metadata.c); each limit takes a copy */
} limit_flags;

/* ---- descriptor.c ---- */

/*
 * Parses the list `seq` of descriptors into children of parent. `path` is
 * the rule id so far ("domain." or "domain.key_value."), depth the list's
 * nesting (1 at the top). Errors go to L; what parsed is kept in parent
 * and L->cfg either way (the caller drops it on errors).
 */
void rules_parse_descriptors(rules_loader *L, cfg_node *parent,
                             const yaml_node_t *seq, const char *path,
                             int depth);

/* Frees what node n holds (its children, recursively), not n itself nor
   its limits (sl_config.limits owns them). */
void rules_node_free(cfg_node *n);

/* ---- limit.c ---- */

/*
 * Parses one rate limit mapping into a new limit of descriptor d, whose
 * rule id is `path`, with the descriptor's flags; the limit is number
 * `index` of `of` on d (several: its rule id gets "#name" or "#index").
 * On any error in it, nothing is added.
 */
void rules_parse_limit(rules_loader *L, cfg_node *d, const yaml_node_t *map,
                       const char *path, const limit_flags *flags, int index,
                       int of);

void rules_limit_free(cfg_limit *l);

/* ---- split.c ---- */

/* Reads a rate limit's `split` mapping v into l (split, split_by). */
void rules_parse_split(rules_loader *L, cfg_limit *l, const yaml_node_t *v);
/* Once l's policy is known: a split limit has a limit and a burst of at
   least its counters (an error at `at` otherwise). */
void rules_check_split_policy(rules_loader *L, const cfg_limit *l,
                              const yaml_node_t *at);
/* Once domain d is parsed: each split limit of L->cfg->limits[first..]
   splits by a key some descriptor of d has. */
void rules_check_split_by(rules_loader *L, const cfg_domain *d, size_t first);

/* ---- metadata.c ---- */

/* A descriptor's metadata mapping as a malloc'd JSON object; NULL when it
   is empty, or on an error (reported). */
char *rules_metadata_json(rules_loader *L, const yaml_node_t *n);

/* ---- store_error.c ---- */

/* A descriptor's on_store_error and local_fraction, as read. */
typedef struct store_error_keys {
  int mode;     /* a cfg_store_error: DEFAULT when absent or invalid */
  int bad_mode; /* on_store_error was given and is no mode */
  double fraction; /* 0: not given, or invalid */
  const yaml_node_t *fraction_at;
} store_error_keys;

/* Key handlers of on_store_error and local_fraction: they fill the
   store_error_keys at key->offset, with an error at a bad value. */
rules_key_fn rules_set_store_error, rules_set_local_fraction;

/* Once a descriptor's keys are read: a local_fraction needs
   on_store_error: local (reported only when both values are valid). */
void rules_check_store_error(rules_loader *L, const store_error_keys *k);

/* ---- shedding.c ---- */

/* The `shedding:` key of a domain (conf: load.c's domain_keys, whose first
   field is the domain): its block into the domain's cfg_shedding. */
rules_key_fn rules_parse_shedding;
void rules_shedding_free(cfg_shedding *sh);

/* ---- match.c ---- */

/* The order of a node's children for lookup: by key, then value, the
   key-only child (value NULL) first. */
int rules_node_cmp(const cfg_node *a, const cfg_node *b);

/* Readies the tree under n for config_match: its wildcard children in file
   order, its children sorted, recursively. 0, or -1 out of memory. */
int rules_index_tree(cfg_node *n);

/* Sorts c's domains by name for config_domain. */
void rules_sort_domains(sl_config *c);

#endif /* SLUICE_RULES_RULES_H */
