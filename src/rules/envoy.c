/*
 * envoy.c — what a descriptor's match means beyond the limits it found,
 * as envoyproxy/ratelimit's GetLimit and cache keys have it: the value
 * each entry counts under (share_threshold: one counter for every value a
 * wildcard matches), and the metric name of the limit for this request
 * (detailed_metric: the whole path of entries with their values;
 * value_to_metric: the request's value at the levels that ask for it).
 * match.c records the path (cfg_match); the engine asks here.
 */
#include "rules.h"

#include <stdio.h>
#include <string.h>

/* The value part of node c's pattern for an entry of key k (envoy:
   TrimPrefix(pattern, key + "_")). */
static const char *pattern_value(const cfg_node *c, const cfg_entry *e,
                                 size_t *len) {
  const char *p = c->pattern;
  size_t plen = strlen(p);
  if (plen > e->key_len && !memcmp(p, e->key, e->key_len) &&
      p[e->key_len] == '_') {
    p += e->key_len + 1;
    plen -= e->key_len + 1;
  }
  *len = plen;
  return p;
}

const char *config_count_value(const cfg_match *m, const cfg_entry *e,
                               size_t i, size_t *len) {
  if (i < CFG_MATCH_MAX && (m->shared >> i & 1))
    return pattern_value(m->path[i], e, len);
  *len = e->value_len;
  return e->value;
}

/* A bounded writer: what does not fit sets `over`. */
typedef struct name_buf {
  char *p;
  size_t len, cap;
  int over;
} name_buf;

static void put(name_buf *b, const char *s, size_t n) {
  if (b->over || b->len + n >= b->cap) {
    b->over = 1;
    return;
  }
  memcpy(b->p + b->len, s, n);
  b->len += n;
}

/* ".key", then "_value" when the value is not empty (or always). */
static void put_entry(name_buf *b, const cfg_entry *e, const char *v,
                      size_t vlen, int always) {
  put(b, ".", 1);
  put(b, e->key, e->key_len);
  if (vlen || always) {
    put(b, "_", 1);
    put(b, v, vlen);
  }
}

/* detailed_metric: envoy's detailedMetricFullKey — every entry's
   "key_value" — or, when an entry shares a wildcard's counter, its
   pattern for that entry and "key[_value]" for the others. */
static void detailed_name(name_buf *b, const cfg_match *m,
                          const cfg_entry *entries, size_t n) {
  for (size_t i = 0; i < n; i++) {
    size_t vlen;
    const char *v = config_count_value(m, &entries[i], i, &vlen);
    put_entry(b, &entries[i], v, vlen, !m->shared);
  }
}

/* value_to_metric: envoy's valueToMetricFullKey — each level's key, with
   the value its match and flags give it. */
static void value_name(name_buf *b, const cfg_match *m,
                       const cfg_entry *entries, size_t n) {
  for (size_t i = 0; i < n && i < m->n; i++) {
    const cfg_entry *e = &entries[i];
    const cfg_node *c = m->path[i];
    const char *v = "";
    size_t vlen = 0;
    if (m->how[i] == CFG_BY_WILDCARD) {
      if (!(m->shared >> i & 1) && c->value_to_metric)
        v = e->value, vlen = e->value_len;
      else
        v = pattern_value(c, e, &vlen);
    } else if (m->how[i] == CFG_BY_VALUE || c->value_to_metric) {
      v = e->value, vlen = e->value_len;
    }
    put_entry(b, e, v, vlen, 0);
  }
}

size_t config_metric_name(const cfg_domain *d, const cfg_match *m,
                          const cfg_entry *entries, size_t n,
                          const cfg_limit *l, char *buf, size_t len) {
  if (!l->dynamic_metric || !m->node || !len) return 0;
  name_buf b = {buf, 0, len, 0};
  put(&b, d->name, strlen(d->name));
  if (l->detailed_metric)
    detailed_name(&b, m, entries, n);
  else
    value_name(&b, m, entries, n);
  /* Several limits on one descriptor: the rule id's "#name" / "#index". */
  if (m->node->nlimits > 1) {
    size_t at = 0;
    while (at < m->node->nlimits && m->node->limits[at] != l) at++;
    char idx[24];
    const char *suffix = l->name;
    if (!suffix) {
      snprintf(idx, sizeof idx, "%zu", at);
      suffix = idx;
    }
    put(&b, "#", 1);
    put(&b, suffix, strlen(suffix));
  }
  if (b.over) return 0;
  buf[b.len] = '\0';
  return b.len;
}
