/*
 * match.c — finding what applies to a request: its domain by name, and the
 * node of a domain's descriptor tree its descriptor matches, the way
 * envoyproxy/ratelimit does it (at each level the exact key_value first,
 * then a "prefix*" wildcard value in file order, then the key alone; a
 * limit applies only at the depth of the descriptor's last entry).
 *
 * The loader hands over each tree and the domain list once, through
 * rules_index_tree and rules_sort_domains; the binary searches below rely
 * on the order those set, so both sides of that contract live here.
 * Requests carry counted strings that may hold any byte (NUL included);
 * the stored names are NUL-terminated and hold no NUL (the loader refuses
 * such scalars).
 */
#include "rules.h"

#include <stdlib.h>
#include <string.h>

/* ---- the order lookups rely on ---- */

static int str_cmp_null(const char *a, const char *b) {
  if (!a || !b) return (a != NULL) - (b != NULL); /* NULL first */
  return strcmp(a, b);
}

int rules_node_cmp(const cfg_node *a, const cfg_node *b) {
  int c = strcmp(a->key, b->key);
  return c ? c : str_cmp_null(a->value, b->value);
}

static int child_cmp(const void *pa, const void *pb) {
  return rules_node_cmp(*(cfg_node *const *)pa, *(cfg_node *const *)pb);
}

int rules_index_tree(cfg_node *n) {
  for (size_t i = 0; i < n->nchildren; i++) {
    cfg_node *c = n->children[i];
    /* Collected before the sort: envoy tries wildcards in file order. */
    if (c->wildcard) {
      cfg_node **grown =
          realloc(n->wildcards, (n->nwildcards + 1) * sizeof *grown);
      if (!grown) return -1;
      n->wildcards = grown;
      n->wildcards[n->nwildcards++] = c;
    }
    if (rules_index_tree(c)) return -1;
  }
  if (n->nchildren)
    qsort(n->children, n->nchildren, sizeof *n->children, child_cmp);
  return 0;
}

static int domain_cmp(const void *pa, const void *pb) {
  return strcmp((*(cfg_domain *const *)pa)->name,
                (*(cfg_domain *const *)pb)->name);
}

void rules_sort_domains(sl_config *c) {
  if (c->ndomains)
    qsort(c->domains, c->ndomains, sizeof *c->domains, domain_cmp);
}

/* ---- lookups ---- */

/*
 * Compares a stored string (NUL-terminated, no NUL inside: scalars with one
 * are refused) with a counted one that may hold any byte, in strcmp's
 * order, so it agrees with the sort.
 */
static int cmp_n(const char *s, const char *t, size_t tlen) {
  size_t slen = strlen(s);
  int c = memcmp(s, t, slen < tlen ? slen : tlen);
  return c ? c : (slen > tlen) - (slen < tlen);
}

const cfg_domain *config_domain(const sl_config *c, const char *name,
                                size_t len) {
  size_t lo = 0, hi = c->ndomains;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    int cmp = cmp_n(c->domains[mid]->name, name, len);
    if (cmp == 0) return c->domains[mid];
    if (cmp < 0)
      lo = mid + 1;
    else
      hi = mid;
  }
  return NULL;
}

/* The child (key, value) of n; value NULL finds the key-only child. */
static const cfg_node *find_child(const cfg_node *n, const cfg_entry *e,
                                  int with_value) {
  size_t lo = 0, hi = n->nchildren;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    const cfg_node *c = n->children[mid];
    int cmp = cmp_n(c->key, e->key, e->key_len);
    if (!cmp) {
      if (!with_value)
        cmp = c->value != NULL; /* key-only sorts first */
      else
        cmp = !c->value ? -1 : cmp_n(c->value, e->value, e->value_len);
    }
    if (!cmp) return c;
    if (cmp < 0)
      lo = mid + 1;
    else
      hi = mid;
  }
  return NULL;
}

/*
 * Whether `s` (slen bytes, any byte) matches the wildcard pattern `pat`
 * (NUL-terminated), each '*' standing for any run of bytes, the empty one
 * included — envoyproxy/ratelimit's wildcardMatch: the first literal part
 * must begin s, the last must end it, and the parts between are found in
 * order, each at its leftmost place, in what lies between. Linear in slen
 * per part (memmem), so a hostile value costs no backtracking.
 */
static int glob_match(const char *pat, const char *s, size_t slen) {
  const char *star = strchr(pat, '*');
  if (!star) return strlen(pat) == slen && !memcmp(pat, s, slen);
  size_t first = (size_t)(star - pat);
  const char *last = strrchr(pat, '*') + 1;
  size_t last_len = strlen(last);
  if (slen < first + last_len || memcmp(s, pat, first) ||
      memcmp(s + slen - last_len, last, last_len))
    return 0;
  const char *rest = s + first, *end = s + slen - last_len;
  for (const char *p = star + 1; p < last;) {
    const char *q = strchr(p, '*'); /* the next part is [p, q) */
    size_t plen = (size_t)(q - p);
    if (plen) {
      const char *at = memmem(rest, (size_t)(end - rest), p, plen);
      if (!at) return 0;
      rest = at + plen;
    }
    p = q + 1;
  }
  return 1;
}

/*
 * The first wildcard child of level (in file order) whose pattern matches
 * the entry's composite "key_value", as envoy builds it, or NULL.
 */
static const cfg_node *find_wildcard(const cfg_node *level,
                                     const cfg_entry *e) {
  char small[512];
  size_t len = e->key_len + 1 + e->value_len;
  char *s = len <= sizeof small ? small : malloc(len);
  if (!s) return NULL;
  memcpy(s, e->key, e->key_len);
  s[e->key_len] = '_';
  if (e->value_len) memcpy(s + e->key_len + 1, e->value, e->value_len);
  const cfg_node *found = NULL;
  for (size_t w = 0; !found && w < level->nwildcards; w++)
    if (glob_match(level->wildcards[w]->pattern, s, len))
      found = level->wildcards[w];
  if (s != small) free(s);
  return found;
}

const cfg_node *config_match_path(const cfg_domain *d,
                                  const cfg_entry *entries, size_t n,
                                  cfg_match *m) {
  const cfg_node *level = &d->root;
  m->node = NULL;
  m->n = 0;
  m->shared = 0;
  for (size_t i = 0; i < n && i < CFG_MATCH_MAX; i++) {
    const cfg_entry *e = &entries[i];
    int how = CFG_BY_VALUE;
    const cfg_node *next = find_child(level, e, 1);
    if (!next && level->nwildcards) {
      next = find_wildcard(level, e);
      how = CFG_BY_WILDCARD;
    }
    if (!next) {
      next = find_child(level, e, 0);
      how = CFG_BY_KEY;
    }
    if (!next) break;
    m->path[i] = next;
    m->how[i] = (unsigned char)how;
    m->n = i + 1;
    /* envoy tracks a shared wildcard at any level, limit or not. */
    if (how == CFG_BY_WILDCARD && next->share_threshold) m->shared |= 1u << i;
    /* A limit applies only at the depth of the descriptor's last entry. */
    if (next->nlimits && i == n - 1) m->node = next;
    if (!next->nchildren) break;
    level = next;
  }
  return m->node;
}

const cfg_node *config_match(const cfg_domain *d, const cfg_entry *entries,
                             size_t n) {
  cfg_match m;
  return config_match_path(d, entries, n, &m);
}
