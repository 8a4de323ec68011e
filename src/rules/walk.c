/*
 * walk.c — walking a libyaml document for the rules' parsers: the error
 * list (every error says file:line:col, from the node it is about), typed
 * readers of scalars, and the key-table walk of a mapping (walk.h).
 */
#include "walk.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ---- errors ---- */

void cfg_errors_free(cfg_errors *e) {
  if (!e) return;
  for (size_t i = 0; i < e->n; i++) free(e->msgs[i]);
  free(e->msgs);
  e->msgs = NULL;
  e->n = 0;
}

static void add_error(cfg_errors *e, const char *file, int line, int col,
                      const char *fmt, va_list ap) {
  if (!e || e->n >= RULES_MAX_ERRORS) return;
  char msg[512];
  vsnprintf(msg, sizeof msg, fmt, ap);
  char full[800];
  if (line > 0)
    snprintf(full, sizeof full, "%s:%d:%d: %s", file, line, col, msg);
  else
    snprintf(full, sizeof full, "%s: %s", file, msg);
  char **grown = realloc(e->msgs, (e->n + 1) * sizeof *grown);
  if (!grown) return;
  e->msgs = grown;
  e->msgs[e->n] = strdup(full);
  if (e->msgs[e->n]) e->n++;
}

void rules_errorf(cfg_errors *e, const char *file, int line, int col,
                  const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  add_error(e, file, line, col, fmt, ap);
  va_end(ap);
}

void rules_err(rules_loader *L, const yaml_node_t *n, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  add_error(L->errs, L->file, n ? (int)n->start_mark.line + 1 : 0,
            n ? (int)n->start_mark.column + 1 : 0, fmt, ap);
  va_end(ap);
  L->failed = 1;
  L->nerr++;
}

/* ---- nodes and scalars ---- */

yaml_node_t *rules_node(rules_loader *L, int index) {
  return yaml_document_get_node(L->doc, index);
}

const char *rules_type_name(const yaml_node_t *n) {
  switch (n->type) {
  case YAML_SCALAR_NODE:
    return "a scalar";
  case YAML_SEQUENCE_NODE:
    return "a list";
  case YAML_MAPPING_NODE:
    return "a mapping";
  default:
    return "empty";
  }
}

const char *rules_scalar(rules_loader *L, const yaml_node_t *n,
                         const char *what) {
  if (n->type != YAML_SCALAR_NODE) {
    rules_err(L, n, "%s must be a scalar, not %s", what, rules_type_name(n));
    return NULL;
  }
  const char *s = (const char *)n->data.scalar.value;
  /* Lookups compare NUL-terminated names: "a\0b" would stand for "a". */
  if (strlen(s) != n->data.scalar.length) {
    rules_err(L, n, "%s contains a NUL byte", what);
    return NULL;
  }
  return s;
}

int rules_bool(rules_loader *L, const yaml_node_t *n, const char *what,
               int *out) {
  const char *s = rules_scalar(L, n, what);
  if (!s) return -1;
  static const char *const yes[] = {"true", "yes", "on"};
  static const char *const no[] = {"false", "no", "off"};
  for (int i = 0; i < 3; i++) {
    if (!strcasecmp(s, yes[i])) return *out = 1, 0;
    if (!strcasecmp(s, no[i])) return *out = 0, 0;
  }
  rules_err(L, n, "%s must be true or false, not '%s'", what, s);
  return -1;
}

int rules_u32(rules_loader *L, const yaml_node_t *n, const char *what,
              uint32_t *out) {
  const char *s = rules_scalar(L, n, what);
  if (!s) return -1;
  uint64_t v = 0;
  if (!*s) goto bad;
  for (const char *p = s; *p; p++) {
    if (*p < '0' || *p > '9') goto bad;
    v = v * 10 + (uint64_t)(*p - '0');
    if (v > UINT32_MAX) {
      rules_err(L, n, "%s '%s' is too large (max 4294967295)", what, s);
      return -1;
    }
  }
  *out = (uint32_t)v;
  return 0;
bad:
  rules_err(L, n, "%s must be a whole number, not '%s'", what, s);
  return -1;
}

/* ---- key tables ---- */

void rules_set_text(rules_loader *L, const yaml_node_t *v,
                    const rules_key *key, void *conf) {
  rules_text *t = (rules_text *)((char *)conf + key->offset);
  t->at = v;
  t->s = rules_scalar(L, v, key->name);
}

void rules_set_count(rules_loader *L, const yaml_node_t *v,
                     const rules_key *key, void *conf) {
  rules_count *c = (rules_count *)((char *)conf + key->offset);
  c->at = v;
  c->ok = rules_u32(L, v, key->name, &c->v) == 0;
}

void rules_set_flag(rules_loader *L, const yaml_node_t *v,
                    const rules_key *key, void *conf) {
  rules_bool(L, v, key->name, (int *)((char *)conf + key->offset));
}

void rules_set_node(rules_loader *L, const yaml_node_t *v,
                    const rules_key *key, void *conf) {
  (void)L;
  *(const yaml_node_t **)((char *)conf + key->offset) = v;
}

/* Rejects a key twice in one mapping (YAML allows it; silently last wins
   would hide mistakes): 1 with an error when k is among the keys before
   `upto`. */
static int dup_key(rules_loader *L, const yaml_node_t *map,
                   const yaml_node_pair_t *upto, const char *k,
                   const yaml_node_t *kn) {
  for (yaml_node_pair_t *q = map->data.mapping.pairs.start; q < upto; q++) {
    yaml_node_t *qk = rules_node(L, q->key);
    if (qk->type == YAML_SCALAR_NODE &&
        !strcmp((const char *)qk->data.scalar.value, k)) {
      rules_err(L, kn, "duplicate key '%s'", k);
      return 1;
    }
  }
  return 0;
}

/* Reports unknown key k at kn with kind's keys, in table order: "a, b or
   c". */
static void unknown_key(rules_loader *L, const yaml_node_t *kn, const char *k,
                        const rules_map *kind) {
  char list[512] = "";
  size_t len = 0;
  for (const rules_key *key = kind->keys; key->name && len < sizeof list;
       key++) {
    const char *sep = key == kind->keys ? "" : key[1].name ? ", " : " or ";
    len += (size_t)snprintf(list + len, sizeof list - len, "%s%s", sep,
                            key->name);
  }
  rules_err(L, kn, "unknown key '%s' %s (expected %s)", k, kind->where, list);
}

void rules_walk(rules_loader *L, const yaml_node_t *map,
                const rules_map *kind, void *conf) {
  for (yaml_node_pair_t *p = map->data.mapping.pairs.start;
       p < map->data.mapping.pairs.top; p++) {
    yaml_node_t *kn = rules_node(L, p->key), *v = rules_node(L, p->value);
    if (!kn || !v) continue;
    const char *k = rules_scalar(L, kn, "a key");
    if (!k || dup_key(L, map, p, k, kn)) continue;
    const rules_key *key = kind->keys;
    while (key->name && strcmp(key->name, k)) key++;
    if (key->name)
      key->set(L, v, key, conf);
    else
      unknown_key(L, kn, k, kind);
  }
}
