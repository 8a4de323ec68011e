/*
 * metadata.c — a descriptor's `metadata:` (envoyproxy/ratelimit): any YAML
 * mapping, kept as the JSON object a front end can hand back with the
 * limit's answer (the HTTP check's JSON, the gRPC response's dynamic
 * metadata). Types follow what envoy's YAML reader (yaml.v2, YAML 1.1)
 * makes of a plain scalar before it becomes a protobuf Struct: null, a
 * boolean (true/false/yes/no/on/off), a number, else a string; a quoted
 * scalar is always a string. Nesting is bounded, so a hostile file cannot
 * exhaust the stack.
 */
#include "rules.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "../base/json.h"
#include "../base/strbuf.h"

#define MAX_METADATA_DEPTH 16

/* Whether s is a YAML 1.1 number as yaml.v2 reads one: an integer
   (decimal, sign allowed) or a decimal with a point or an exponent. */
static int is_number(const char *s) {
  const char *p = s + (*s == '-' || *s == '+');
  size_t digits = 0;
  while (*p >= '0' && *p <= '9') p++, digits++;
  if (*p == '.') {
    p++;
    while (*p >= '0' && *p <= '9') p++, digits++;
  }
  if (digits && (*p == 'e' || *p == 'E')) {
    p++;
    p += *p == '-' || *p == '+';
    if (!(*p >= '0' && *p <= '9')) return 0;
    while (*p >= '0' && *p <= '9') p++;
  }
  /* JSON wants no leading '+' nor a bare '.5': those stay strings. */
  return digits && !*p && *s != '+' && s[*s == '-'] != '.';
}

/* A scalar as JSON. */
static void json_scalar(strbuf *b, const yaml_node_t *n) {
  const char *s = (const char *)n->data.scalar.value;
  size_t len = n->data.scalar.length;
  if (n->data.scalar.style != YAML_PLAIN_SCALAR_STYLE) {
    json_put_str(b, s, len);
    return;
  }
  static const char *const yes[] = {"true", "yes", "on"};
  static const char *const no[] = {"false", "no", "off"};
  if (!len || !strcmp(s, "~") || !strcasecmp(s, "null")) {
    strbuf_add(b, "null", 4);
    return;
  }
  for (int i = 0; i < 3; i++) {
    if (!strcasecmp(s, yes[i]) || !strcasecmp(s, no[i])) {
      strbuf_addf(b, "%s", !strcasecmp(s, yes[i]) ? "true" : "false");
      return;
    }
  }
  if (strlen(s) == len && is_number(s))
    strbuf_add(b, s, len);
  else
    json_put_str(b, s, len);
}

/* Appends node n as JSON: 0, or -1 with an error reported. */
static int json_node(rules_loader *L, strbuf *b, const yaml_node_t *n,
                     int depth) {
  if (depth > MAX_METADATA_DEPTH) {
    rules_err(L, n, "metadata nested deeper than %d levels",
              MAX_METADATA_DEPTH);
    return -1;
  }
  if (n->type == YAML_SCALAR_NODE) {
    json_scalar(b, n);
    return 0;
  }
  if (n->type == YAML_SEQUENCE_NODE) {
    strbuf_add(b, "[", 1);
    for (yaml_node_item_t *it = n->data.sequence.items.start;
         it < n->data.sequence.items.top; it++) {
      if (it != n->data.sequence.items.start) strbuf_add(b, ",", 1);
      if (json_node(L, b, rules_node(L, *it), depth + 1)) return -1;
    }
    strbuf_add(b, "]", 1);
    return 0;
  }
  if (n->type != YAML_MAPPING_NODE) {
    rules_err(L, n, "metadata holds an empty node");
    return -1;
  }
  strbuf_add(b, "{", 1);
  for (yaml_node_pair_t *p = n->data.mapping.pairs.start;
       p < n->data.mapping.pairs.top; p++) {
    const yaml_node_t *k = rules_node(L, p->key);
    if (k->type != YAML_SCALAR_NODE) {
      rules_err(L, k, "a metadata key must be a scalar, not %s",
                rules_type_name(k));
      return -1;
    }
    if (p != n->data.mapping.pairs.start) strbuf_add(b, ",", 1);
    json_put_str(b, (const char *)k->data.scalar.value, k->data.scalar.length);
    strbuf_add(b, ":", 1);
    if (json_node(L, b, rules_node(L, p->value), depth + 1)) return -1;
  }
  strbuf_add(b, "}", 1);
  return 0;
}

char *rules_metadata_json(rules_loader *L, const yaml_node_t *n) {
  if (n->type == YAML_SCALAR_NODE && n->data.scalar.length == 0)
    return NULL; /* metadata: (nothing): none, as envoy */
  if (n->type != YAML_MAPPING_NODE) {
    rules_err(L, n, "metadata must be a mapping, not %s",
              rules_type_name(n));
    return NULL;
  }
  if (n->data.mapping.pairs.top == n->data.mapping.pairs.start) return NULL;
  strbuf b = STRBUF_INIT;
  if (json_node(L, &b, n, 1)) {
    strbuf_free(&b);
    return NULL;
  }
  if (b.oom) {
    rules_err(L, n, "out of memory");
    strbuf_free(&b);
    return NULL;
  }
  size_t cap;
  return strbuf_take(&b, &cap); /* NUL-terminated, as every strbuf */
}
