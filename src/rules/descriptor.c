/*
 * descriptor.c — a domain's descriptors, as envoyproxy/ratelimit writes
 * them and with sluice's extensions, into the tree of config.h:
 *
 *   - key: KEY                  # required
 *     value: VALUE              # optional; each '*' matches any run
 *     rate_limit: {...}         # optional (limit.c)
 *     rate_limits: [{...}, ...] # sluice: several limits at once
 *     shadow_mode: true         # counted, never denies
 *     detailed_metric: true     # metrics per value of a key-only match
 *     on_store_error: local     # sluice, fleet mode (store_error.c)
 *     local_fraction: 0.5
 *     descriptors: [...]        # nested, up to 32 levels
 *     share_threshold: true     # envoy: a wildcard's values, one counter
 *     value_to_metric: true     # envoy: the request's value in metrics
 *     quota_mode: true          # envoy: over the limit denies only when
 *                               # every quota limit of the request is
 *     metadata: {...}           # envoy: any mapping, answered with the
 *                               # limit (metadata.c)
 *
 * The flags are the descriptor's own limits', not its children's (as
 * envoy's shadow_mode). Each level's composite keys (key, or key_value)
 * are unique, as in envoy.
 */
#include "rules.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DEPTH 32

/* A descriptor's keys, as read. */
typedef struct descriptor_keys {
  rules_text key, value;
  const yaml_node_t *rate_limit, *rate_limits, *descriptors;
  int shadow, detailed;
  store_error_keys store_error;
  /* envoyproxy/ratelimit's later keys */
  int share_threshold, value_to_metric, quota_mode;
  const yaml_node_t *metadata;
} descriptor_keys;

static const rules_key descriptor_key_table[] = {
    {"key", rules_set_text, offsetof(descriptor_keys, key)},
    {"value", rules_set_text, offsetof(descriptor_keys, value)},
    {"rate_limit", rules_set_node, offsetof(descriptor_keys, rate_limit)},
    {"rate_limits", rules_set_node, offsetof(descriptor_keys, rate_limits)},
    {"descriptors", rules_set_node, offsetof(descriptor_keys, descriptors)},
    {"shadow_mode", rules_set_flag, offsetof(descriptor_keys, shadow)},
    {"detailed_metric", rules_set_flag, offsetof(descriptor_keys, detailed)},
    {"on_store_error", rules_set_store_error,
     offsetof(descriptor_keys, store_error)},
    {"local_fraction", rules_set_local_fraction,
     offsetof(descriptor_keys, store_error)},
    /* envoyproxy/ratelimit's later keys */
    {"share_threshold", rules_set_flag,
     offsetof(descriptor_keys, share_threshold)},
    {"value_to_metric", rules_set_flag,
     offsetof(descriptor_keys, value_to_metric)},
    {"quota_mode", rules_set_flag, offsetof(descriptor_keys, quota_mode)},
    {"metadata", rules_set_node, offsetof(descriptor_keys, metadata)},
    {NULL, NULL, 0},
};

static const rules_map descriptor_map = {"in a descriptor",
                                         descriptor_key_table};

void rules_node_free(cfg_node *n) {
  for (size_t i = 0; i < n->nchildren; i++) {
    rules_node_free(n->children[i]);
    free(n->children[i]);
  }
  free(n->children);
  free(n->wildcards);
  free(n->limits); /* the limits themselves are owned by sl_config.limits */
  free(n->key);
  free(n->value);
  free(n->pattern);
}

/*
 * Adds the child (key, value) of parent at `map`, whose rule id is `sub`.
 * NULL when it is a duplicate composite key (reported) or out of memory.
 */
static cfg_node *add_child(rules_loader *L, cfg_node *parent,
                           const yaml_node_t *map, const char *key,
                           const char *value, const char *sub) {
  /* Duplicate composite keys at one level are errors, as in envoy. */
  const cfg_node probe = {.key = (char *)key, .value = (char *)value};
  for (size_t i = 0; i < parent->nchildren; i++) {
    const cfg_node *o = parent->children[i];
    if (!rules_node_cmp(o, &probe)) {
      if (strcmp(o->pos.file, L->file)) /* merged domains: another file */
        rules_err(L, map, "duplicate descriptor composite key '%s' (first "
                          "in %s at line %d)", sub, o->pos.file, o->pos.line);
      else
        rules_err(L, map, "duplicate descriptor composite key '%s' (first "
                          "at line %d)", sub, o->pos.line);
      return NULL;
    }
  }
  cfg_node *d = calloc(1, sizeof *d);
  if (!d) {
    rules_err(L, map, "out of memory"); /* never a descriptor left out */
    return NULL;
  }
  d->key = strdup(key);
  d->value = value ? strdup(value) : NULL;
  /* As envoy: a '*' anywhere in the composite key makes a wildcard. */
  d->wildcard = strchr(key, '*') || (value && strchr(value, '*'));
  if (d->wildcard) {
    size_t kl = strlen(key), vl = value ? strlen(value) : 0;
    d->pattern = malloc(kl + 1 + vl + 1);
    if (d->pattern && value)
      sprintf(d->pattern, "%s_%s", key, value);
    else if (d->pattern)
      memcpy(d->pattern, key, kl + 1);
  }
  d->pos = (cfg_pos){L->file, (int)map->start_mark.line + 1,
                     (int)map->start_mark.column + 1};
  cfg_node **grown =
      realloc(parent->children, (parent->nchildren + 1) * sizeof *grown);
  if (!grown || !d->key || (value && !d->value) ||
      (d->wildcard && !d->pattern)) {
    rules_err(L, map, "out of memory");
    if (grown) parent->children = grown;
    rules_node_free(d);
    free(d);
    return NULL;
  }
  parent->children = grown;
  parent->children[parent->nchildren++] = d;
  return d;
}

/* The limits of descriptor d: its rate_limit, or each of its rate_limits. */
static void parse_limits(rules_loader *L, cfg_node *d,
                         const descriptor_keys *k, const char *sub,
                         const limit_flags *flags) {
  const yaml_node_t *rl = k->rate_limit, *rls = k->rate_limits;
  if (rl && rls) {
    rules_err(L, rls, "give either rate_limit or rate_limits, not both");
  } else if (rl) {
    rules_parse_limit(L, d, rl, sub, flags, 0, 1);
  } else if (rls) {
    if (rls->type != YAML_SEQUENCE_NODE) {
      rules_err(L, rls, "rate_limits must be a list of rate limits");
      return;
    }
    int of =
        (int)(rls->data.sequence.items.top - rls->data.sequence.items.start);
    int i = 0;
    for (yaml_node_item_t *it = rls->data.sequence.items.start;
         it < rls->data.sequence.items.top; it++, i++)
      rules_parse_limit(L, d, rules_node(L, *it), sub, flags, i, of);
  }
}

/* One descriptor mapping into a child of parent (rule id so far `path`). */
static void parse_descriptor(rules_loader *L, cfg_node *parent,
                             const yaml_node_t *map, const char *path,
                             int depth) {
  if (map->type != YAML_MAPPING_NODE) {
    rules_err(L, map, "a descriptor must be a mapping, not %s",
              rules_type_name(map));
    return;
  }
  descriptor_keys k = {0};
  rules_walk(L, map, &descriptor_map, &k);
  rules_check_store_error(L, &k.store_error);
  const char *key = k.key.s, *value = k.value.s;
  if (!key || !*key) {
    rules_err(L, k.key.at ? k.key.at : map, "descriptor has empty key");
    return;
  }
  if (value && !*value) value = NULL; /* as envoy: empty value = key only */
  char sub[1024];
  if (value)
    snprintf(sub, sizeof sub, "%s%s_%s", path, key, value);
  else
    snprintf(sub, sizeof sub, "%s%s", path, key);
  if (k.share_threshold && !strchr(sub + strlen(path), '*')) {
    /* envoy's words, with the composite key as envoy names it */
    rules_err(L, map, "share_threshold can only be used with wildcard values "
                      "(containing '*'), but found key '%s'",
              sub + strlen(path));
    return;
  }
  cfg_node *d = add_child(L, parent, map, key, value, sub);
  if (!d) return;
  d->share_threshold = k.share_threshold;
  d->value_to_metric = k.value_to_metric;
  d->value_to_metric_path = k.value_to_metric || parent->value_to_metric_path;

  limit_flags flags = {.shadow = k.shadow,
                       .detailed = k.detailed,
                       .on_store_error = k.store_error.mode,
                       .local_fraction = k.store_error.fraction,
                       .quota_mode = k.quota_mode,
                       .dynamic_metric =
                           k.detailed || d->value_to_metric_path};
  size_t errors_before = L->nerr;
  if (k.metadata) flags.metadata = rules_metadata_json(L, k.metadata);
  if (L->nerr > errors_before) return;
  parse_limits(L, d, &k, sub, &flags);
  free(flags.metadata);
  if (k.descriptors) {
    strncat(sub, ".", sizeof sub - strlen(sub) - 1);
    rules_parse_descriptors(L, d, k.descriptors, sub, depth + 1);
  }
}

void rules_parse_descriptors(rules_loader *L, cfg_node *parent,
                             const yaml_node_t *seq, const char *path,
                             int depth) {
  if (seq->type == YAML_SCALAR_NODE && seq->data.scalar.length == 0) return;
  if (seq->type != YAML_SEQUENCE_NODE) {
    rules_err(L, seq, "descriptors must be a list, not %s",
              rules_type_name(seq));
    return;
  }
  if (depth > MAX_DEPTH) {
    rules_err(L, seq, "descriptors nested deeper than %d levels", MAX_DEPTH);
    return;
  }
  for (yaml_node_item_t *it = seq->data.sequence.items.start;
       it < seq->data.sequence.items.top; it++)
    parse_descriptor(L, parent, rules_node(L, *it), path, depth);
}
