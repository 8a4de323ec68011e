/*
 * split.c — a hot limit split into sub-counters: a rate limit's `split`
 * mapping, checked against its policy and its domain, and the share of
 * the limit and burst each sub-counter gets.
 *
 *   rate_limit:
 *     unit: second
 *     requests_per_unit: 3000
 *     split:
 *       counters: 3        # 1..64 sub-counters (1: not split)
 *       by: client         # a descriptor key: its value picks one, always
 *                          # the same for the same value (consistent)
 *       # rotate: true     # or: requests take them in turn
 *
 * A limit keyed by one shared value (a tier every customer shares, a
 * global per-endpoint limit) keeps its state at one place: in a Redis
 * Cluster, on one master. Split N ways, each request is decided by one
 * sub-counter, which fleet mode places on its own slot (src/fleet/keys.c),
 * so that N sub-counters land on N masters. Each sub-counter holds a share
 * of the limit and of the burst; the shares add up to the limit and the
 * burst exactly (docs/fleet.md, "Hot keys": what that costs in accuracy).
 */
#include "rules.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* split's keys, as read. */
typedef struct split_keys {
  rules_count counters;
  rules_text by;
  int rotate;
} split_keys;

static const rules_key split_key_table[] = {
    {"counters", rules_set_count, offsetof(split_keys, counters)},
    {"by", rules_set_text, offsetof(split_keys, by)},
    {"rotate", rules_set_flag, offsetof(split_keys, rotate)},
    {NULL, NULL, 0},
};

static const rules_map split_map = {"in split", split_key_table};

uint32_t cfg_split_part(uint32_t total, uint32_t n, uint32_t i) {
  if (n < 2) return total;
  /* The remainder goes one unit each to the first sub-counters: shares
     differ by at most one and add up to total. */
  return total / n + (i < total % n ? 1 : 0);
}

void cfg_split_share(const sl_policy *p, uint32_t n, uint32_t i,
                     sl_policy *out) {
  *out = *p;
  if (n < 2) return;
  /* Every algorithm keeps its period: a window's count, a bucket's or
     GCRA's rate (limit per period) and a bucket's capacity or GCRA's
     tolerance (burst) are each divided, so the shares' rates and bursts
     add up to the limit's. */
  out->limit = cfg_split_part(p->limit, n, i);
  if (p->burst) out->burst = cfg_split_part(p->burst, n, i);
}

void rules_parse_split(rules_loader *L, cfg_limit *l, const yaml_node_t *v) {
  if (v->type != YAML_MAPPING_NODE) {
    rules_err(L, v, "split must be a mapping {counters: N, by: KEY} or "
                    "{counters: N, rotate: true}, not %s",
              rules_type_name(v));
    return;
  }
  split_keys k = {0};
  rules_walk(L, v, &split_map, &k);
  if (!k.counters.at) {
    rules_err(L, v, "split needs counters: N (1 to %d sub-counters)",
              CFG_SPLIT_MAX);
    return;
  }
  if (!k.counters.ok) return; /* reported */
  if (k.counters.v < 1 || k.counters.v > CFG_SPLIT_MAX) {
    rules_err(L, k.counters.at, "split's counters must be 1 to %d, not %u",
              CFG_SPLIT_MAX, k.counters.v);
    return;
  }
  if (k.by.at && k.rotate) {
    rules_err(L, k.by.at, "split takes by: KEY or rotate: true, not both");
    return;
  }
  if (!k.by.at && !k.rotate) {
    rules_err(L, v, "split needs by: KEY (the descriptor key whose value "
                    "picks the sub-counter) or rotate: true");
    return;
  }
  if (k.by.at && (!k.by.s || !*k.by.s)) {
    if (k.by.s) rules_err(L, k.by.at, "split's by must name a descriptor key");
    return;
  }
  if (k.counters.v == 1) return; /* one counter: nothing to split */
  l->split = k.counters.v;
  l->split_at = (cfg_pos){L->file, (int)v->start_mark.line + 1,
                          (int)v->start_mark.column + 1};
  if (k.by.s && !(l->split_by = strdup(k.by.s)))
    rules_err(L, v, "out of memory");
}

void rules_check_split_policy(rules_loader *L, const cfg_limit *l,
                              const yaml_node_t *at) {
  if (!l->split) return;
  if (l->unlimited || l->blocked) {
    rules_err(L, at, "split needs a limit to divide, not %s",
              l->unlimited ? "unlimited: true" : "requests_per_unit: 0");
    return;
  }
  if (l->policy.algo == SL_CONCURRENCY) {
    rules_err(L, at, "split divides a rate, not a concurrency limit");
    return;
  }
  /* Every sub-counter must be able to admit a request of cost 1. */
  uint32_t least = l->policy.burst && l->policy.burst < l->policy.limit
                       ? l->policy.burst
                       : l->policy.limit;
  if (least < l->split)
    rules_err(L, at, "split into %u counters needs a limit%s of at least %u "
                     "(each sub-counter's share is at least 1), not %u",
              l->split, l->policy.burst ? " and burst" : "", l->split, least);
}

/* Whether some descriptor under n has key `key`. */
static int tree_has_key(const cfg_node *n, const char *key) {
  for (size_t i = 0; i < n->nchildren; i++)
    if (!strcmp(n->children[i]->key, key) ||
        tree_has_key(n->children[i], key))
      return 1;
  return 0;
}

void rules_check_split_by(rules_loader *L, const cfg_domain *d,
                          size_t first) {
  for (size_t i = first; i < L->cfg->nlimits; i++) {
    const cfg_limit *l = L->cfg->limits[i];
    if (!l->split_by || tree_has_key(&d->root, l->split_by)) continue;
    rules_errorf(L->errs, l->split_at.file, l->split_at.line, l->split_at.col,
                 "split by '%s': no descriptor of domain '%s' has that key "
                 "(by names the request entry whose value picks the "
                 "sub-counter)",
                 l->split_by, d->name);
    L->failed = 1;
    L->nerr++;
  }
}
