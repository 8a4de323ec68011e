/*
 * limit.c — one rate limit mapping of a descriptor, as envoyproxy/ratelimit
 * writes it and with sluice's extensions, into a cfg_limit with its policy:
 *
 *   unit: second|minute|hour|day|week|month|year   (any case)
 *   requests_per_unit: N      # 0 blocks everything
 *   unlimited: true           # always allowed (no unit then)
 *   name: NAME                # for `replaces`
 *   replaces: [{name: NAME}]
 *   policy: "gcra:50/s"       # sluice: the policy syntax, alone
 *   algorithm: token_bucket   # sluice: default fixed_window, as envoy
 *   period: 30s               # sluice: any duration instead of a unit
 *   burst: N                  # sluice: capacity of the bucket algorithms
 *   evict_below: N            # sluice: at the store's cap, a new key may
 *                             # only evict an entry that gives back < N
 *                             # units (sl_limiter_set_evict_below)
 *   split: {counters: N, by: KEY}   # sluice: N sub-counters (split.c)
 *   calendar: day|week|month|year   # sluice: requests_per_unit per calendar
 *   tz: Europe/Berlin         # day (week, ...) in this zone (default UTC):
 *                             # windows from local midnight (calendar.h)
 *   candidate: "gcra:100/m"   # sluice: a policy evaluated beside this one
 *                             # on the same key, never enforced (divergences
 *                             # counted: docs/semantics.md, "Candidates")
 *   max_wait: 5s              # sluice: the longest a request in wait mode
 *                             # is held for its leaky_bucket delay
 *
 * Whatever the way it is written, the limit ends as a policy string that
 * sl_policy_parse reads: the policy syntax is the one judge of algorithms,
 * periods and bursts, and its message is the error, at the key that
 * caused it.
 */
#include "rules.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "../base/duration.h"

/* A rate limit's keys, as read. */
typedef struct limit_keys {
  rules_text unit, name, policy, algorithm, period, candidate, calendar, tz,
      max_wait;
  rules_count rpu, burst, evict_below;
  int unlimited;
  const yaml_node_t *replaces, *split;
} limit_keys;

static const rules_key limit_key_table[] = {
    {"unit", rules_set_text, offsetof(limit_keys, unit)},
    {"requests_per_unit", rules_set_count, offsetof(limit_keys, rpu)},
    {"unlimited", rules_set_flag, offsetof(limit_keys, unlimited)},
    {"name", rules_set_text, offsetof(limit_keys, name)},
    {"replaces", rules_set_node, offsetof(limit_keys, replaces)},
    {"policy", rules_set_text, offsetof(limit_keys, policy)},
    {"algorithm", rules_set_text, offsetof(limit_keys, algorithm)},
    {"period", rules_set_text, offsetof(limit_keys, period)},
    {"burst", rules_set_count, offsetof(limit_keys, burst)},
    {"evict_below", rules_set_count, offsetof(limit_keys, evict_below)},
    {"split", rules_set_node, offsetof(limit_keys, split)},
    {"candidate", rules_set_text, offsetof(limit_keys, candidate)},
    {"calendar", rules_set_text, offsetof(limit_keys, calendar)},
    {"tz", rules_set_text, offsetof(limit_keys, tz)},
    {"max_wait", rules_set_text, offsetof(limit_keys, max_wait)},
    {NULL, NULL, 0},
};

static const rules_map limit_map = {"in a rate limit", limit_key_table};

/* A replaces entry: {name: NAME}. */
static const rules_key replaces_key_table[] = {
    {"name", rules_set_text, 0},
    {NULL, NULL, 0},
};

static const rules_map replaces_map = {"in replaces", replaces_key_table};

/* envoy's units, as periods of the policy syntax (whose own units are ms,
   s, m, h and d: base/duration.h). */
static const struct {
  const char *name, *period;
} units[] = {
    {"SECOND", "s"},   {"MINUTE", "m"},    {"HOUR", "h"},     {"DAY", "d"},
    {"WEEK", "7d"},    {"MONTH", "30d"},   {"YEAR", "365d"},
};

void rules_limit_free(cfg_limit *l) {
  if (!l) return;
  free(l->name);
  free(l->rule);
  free(l->policy_str);
  free(l->split_by);
  free(l->metadata);
  free(l->candidate_str);
  free(l->candidate_rule);
  cal_free(&l->cal);
  for (size_t i = 0; i < l->nreplaces; i++) free(l->replaces[i]);
  free(l->replaces);
  free(l);
}

/* Appends l to descriptor d and to every limit of the config: 0, or -1
   out of memory (l not added). */
static int add_limit(rules_loader *L, cfg_node *d, cfg_limit *l) {
  cfg_limit **grown = realloc(d->limits, (d->nlimits + 1) * sizeof *grown);
  cfg_limit **all =
      grown ? realloc(L->cfg->limits, (L->cfg->nlimits + 1) * sizeof *all)
            : NULL;
  if (grown) d->limits = grown;
  if (!all) {
    rules_err(L, NULL, "out of memory");
    return -1;
  }
  L->cfg->limits = all;
  l->index = L->cfg->nlimits;
  d->limits[d->nlimits++] = l;
  L->cfg->limits[L->cfg->nlimits++] = l;
  return 0;
}

/*
 * A new limit at `map` with the descriptor's flags, its name, and its rule
 * id: `path`, and when the descriptor has several limits, "#name" or
 * "#index" after it. NULL out of memory (reported).
 */
static cfg_limit *new_limit(rules_loader *L, const yaml_node_t *map,
                            const limit_flags *flags, const char *name,
                            const char *path, int index, int of) {
  cfg_limit *l = calloc(1, sizeof *l);
  if (!l) {
    rules_err(L, map, "out of memory");
    return NULL;
  }
  l->pos = (cfg_pos){L->file, (int)map->start_mark.line + 1,
                     (int)map->start_mark.column + 1};
  l->shadow = flags->shadow;
  l->detailed_metric = flags->detailed;
  l->on_store_error = flags->on_store_error;
  l->local_fraction = flags->local_fraction;
  l->quota_mode = flags->quota_mode;
  l->dynamic_metric = flags->dynamic_metric;
  if (flags->metadata) l->metadata = strdup(flags->metadata);
  if (name) l->name = strdup(name);

  char rule[1100];
  if (of > 1 && name)
    snprintf(rule, sizeof rule, "%s#%s", path, name);
  else if (of > 1)
    snprintf(rule, sizeof rule, "%s#%d", path, index);
  else
    snprintf(rule, sizeof rule, "%s", path);
  l->rule = strdup(rule);
  return l;
}

/* Reads the list `seq` of {name: ...} into l->replaces; a limit may not
   replace itself (its own `name`). */
static void parse_replaces(rules_loader *L, cfg_limit *l,
                           const yaml_node_t *seq, const char *name) {
  if (seq->type != YAML_SEQUENCE_NODE) {
    rules_err(L, seq, "replaces must be a list of {name: ...}");
    return;
  }
  for (yaml_node_item_t *it = seq->data.sequence.items.start;
       it < seq->data.sequence.items.top; it++) {
    yaml_node_t *r = rules_node(L, *it);
    if (r->type != YAML_MAPPING_NODE) {
      rules_err(L, r, "a replaces entry must be a mapping {name: ...}");
      continue;
    }
    rules_text rname = {0};
    rules_walk(L, r, &replaces_map, &rname);
    if (!rname.s || !*rname.s) {
      rules_err(L, r, "should not have an empty replaces entry");
      continue;
    }
    if (name && !strcmp(rname.s, name)) {
      rules_err(L, r, "replaces should not contain name of same descriptor");
      continue;
    }
    char **grown = realloc(l->replaces, (l->nreplaces + 1) * sizeof *grown);
    if (!grown) continue;
    l->replaces = grown;
    l->replaces[l->nreplaces++] = strdup(rname.s);
  }
}

/*
 * The envoy way: requests_per_unit per unit (or sluice's period), with an
 * optional algorithm and burst. Writes the policy string into spec (empty
 * when there is none to parse: an error, or requests_per_unit 0, which
 * blocks and sets l's policy itself) and returns the node its errors
 * belong at.
 */
static const yaml_node_t *unit_spec(rules_loader *L, cfg_limit *l,
                                    const limit_keys *k,
                                    const yaml_node_t *map, char *spec,
                                    size_t spec_len) {
  const yaml_node_t *spec_at = map;
  const char *per = NULL;
  if (k->unit.s) {
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
      if (!strcasecmp(k->unit.s, units[i].name)) {
        per = units[i].period;
        l->unit_name = units[i].name;
      }
    if (!per)
      rules_err(L, k->unit.at, "invalid rate limit unit '%s' (expected "
                               "second, minute, hour, day, week, month or "
                               "year)", k->unit.s);
  }
  if (k->period.s) {
    if (k->unit.s)
      rules_err(L, k->period.at, "give either unit or period, not both");
    per = k->period.s;
    spec_at = k->period.at;
  }
  if (!k->unit.s && !k->period.s)
    rules_err(L, map, "a rate limit needs a unit (or period) and "
                      "requests_per_unit, or a policy, or unlimited: true");
  else if (!k->rpu.at)
    rules_err(L, map, "a rate limit needs requests_per_unit");
  if (k->rpu.ok && k->rpu.v == 0) {
    /* Blocks everything; its window still tells clients when it resets. */
    l->blocked = 1;
    l->policy_str = strdup("blocked");
    char window[64];
    snprintf(window, sizeof window, "fixed_window:1/%s", per ? per : "s");
    if (per && sl_policy_parse(window, &l->policy, NULL, 0))
      rules_err(L, spec_at, "invalid period '%s'", per);
  } else if (per && k->rpu.ok) {
    const char *algo = k->algorithm.s ? k->algorithm.s : "fixed_window";
    if (k->burst.ok)
      snprintf(spec, spec_len, "%s:%u/%s:burst=%u", algo, k->rpu.v, per,
               k->burst.v);
    else
      snprintf(spec, spec_len, "%s:%u/%s", algo, k->rpu.v, per);
    if (k->algorithm.s) spec_at = k->algorithm.at;
    if (k->burst.ok && !k->algorithm.s) spec_at = k->burst.at;
  }
  l->requests_per_unit = k->rpu.v;
  return spec_at;
}

/*
 * A calendar limit (calendar: UNIT, requests_per_unit: N, tz: ZONE):
 * fixed_window:N over the unit's longest window (the state's lifetime;
 * the engine gives each decision its real window), into spec. Errors at
 * the keys it cannot go with.
 */
static void calendar_spec(rules_loader *L, cfg_limit *l, const limit_keys *k,
                          char *spec, size_t spec_len) {
  int unit = cal_unit_of(k->calendar.s);
  char err[256];
  if (!unit) {
    rules_err(L, k->calendar.at, "invalid calendar '%s' (expected day, week, "
                                 "month or year)", k->calendar.s);
    return;
  }
  if (k->unit.s || k->period.s || k->policy.s || k->burst.ok)
    rules_err(L, k->calendar.at, "calendar replaces unit, period, policy "
                                 "and burst: give one or the other");
  if (k->algorithm.s && strcmp(k->algorithm.s, "fixed_window"))
    rules_err(L, k->algorithm.at, "a calendar window counts as fixed_window "
                                  "does (algorithm: %s cannot be aligned)",
              k->algorithm.s);
  if (!k->rpu.ok) {
    rules_err(L, k->calendar.at, "calendar needs requests_per_unit");
    return;
  }
  if (k->rpu.v == 0) {
    rules_err(L, k->rpu.at, "requests_per_unit: 0 blocks everything: give "
                            "it without calendar");
    return;
  }
  if (cal_init(&l->cal, unit, k->tz.s, err, sizeof err)) {
    rules_err(L, k->tz.at ? k->tz.at : k->calendar.at, "%s", err);
    return;
  }
  static const char *const envoy_units[] = {"", "DAY", "WEEK", "MONTH",
                                            "YEAR"};
  l->unit_name = envoy_units[unit];
  l->requests_per_unit = k->rpu.v;
  snprintf(spec, spec_len, "fixed_window:%u/%lldh", k->rpu.v,
           (long long)(cal_max_ns(unit) / (INT64_C(3600) * 1000000000)));
}

/* Sets l's policy from its keys: unlimited, a policy, or the envoy way. */
static void limit_policy(rules_loader *L, cfg_limit *l, const limit_keys *k,
                         const yaml_node_t *map) {
  char spec[256] = "";
  const yaml_node_t *spec_at = map;
  if (k->unlimited) {
    if (k->unit.s || k->rpu.ok || k->policy.s || k->algorithm.s ||
        k->period.s || k->burst.ok || k->evict_below.ok)
      rules_err(L, map, "should not specify a rate limit (unit, "
                        "requests_per_unit, policy, ...) when unlimited");
    l->policy_str = strdup("unlimited");
  } else if (k->calendar.s) {
    calendar_spec(L, l, k, spec, sizeof spec);
    spec_at = k->calendar.at;
  } else if (k->policy.s) {
    if (k->unit.s || k->rpu.ok || k->algorithm.s || k->period.s ||
        k->burst.ok)
      rules_err(L, k->policy.at, "policy replaces unit, requests_per_unit, "
                                 "algorithm, period and burst: give one or "
                                 "the other");
    snprintf(spec, sizeof spec, "%s", k->policy.s);
    spec_at = k->policy.at;
  } else {
    spec_at = unit_spec(L, l, k, map, spec, sizeof spec);
  }
  if (k->tz.s && !k->calendar.s)
    rules_err(L, k->tz.at, "tz needs calendar: day, week, month or year");
  if (*spec) {
    char err[256];
    if (sl_policy_parse(spec, &l->policy, err, sizeof err)) {
      rules_err(L, spec_at, "%s", err);
    } else {
      char canon[256];
      int n = sl_policy_format(&l->policy, canon, sizeof canon);
      /* A calendar limit's name says so: its windows are not the period
         (a reload into another zone is another limiter). */
      if (l->cal.unit && n > 0)
        snprintf(canon + n, sizeof canon - (size_t)n, "@%s:%s",
                 cal_unit_name(l->cal.unit), l->cal.tz);
      l->policy_str = strdup(canon);
    }
  }
}

/* Reads k's candidate policy into l: its own policy syntax (not a
   unit), on a limit that decides per key (not split). */
static void limit_candidate(rules_loader *L, cfg_limit *l,
                            const limit_keys *k) {
  char err[256], canon[128], rule[1200];
  if (k->split) {
    rules_err(L, k->candidate.at, "a split limit cannot have a candidate");
    return;
  }
  if (sl_policy_parse(k->candidate.s, &l->candidate, err, sizeof err)) {
    rules_err(L, k->candidate.at, "candidate: %s", err);
    return;
  }
  sl_policy_format(&l->candidate, canon, sizeof canon);
  /* Its own name, so that its state never meets the enforced policy's,
     even where both policies are the same. */
  snprintf(rule, sizeof rule, "%s~candidate", l->rule ? l->rule : "");
  l->candidate_str = strdup(canon);
  l->candidate_rule = strdup(rule);
  if (!l->candidate_str || !l->candidate_rule)
    rules_err(L, k->candidate.at, "out of memory");
}

void rules_parse_limit(rules_loader *L, cfg_node *d, const yaml_node_t *map,
                       const char *path, const limit_flags *flags, int index,
                       int of) {
  if (map->type != YAML_MAPPING_NODE) {
    rules_err(L, map, "a rate limit must be a mapping, not %s",
              rules_type_name(map));
    return;
  }
  size_t errors_before = L->nerr; /* this limit's own errors are after it */
  limit_keys k = {0};
  rules_walk(L, map, &limit_map, &k);

  cfg_limit *l = new_limit(L, map, flags, k.name.s, path, index, of);
  if (!l) return;
  l->unlimited = k.unlimited;
  l->evict_below = k.evict_below.v;
  if (k.max_wait.s &&
      duration_parse(k.max_wait.s, strlen(k.max_wait.s), SL_PERIOD_MAX_NS,
                     &l->max_wait_ns))
    rules_err(L, k.max_wait.at, "max_wait '%.40s' is not a duration "
                                "(e.g. 500ms, 5s, 2m)", k.max_wait.s);
  if (k.replaces) parse_replaces(L, l, k.replaces, k.name.s);
  limit_policy(L, l, &k, map);
  if (k.split) rules_parse_split(L, l, k.split);
  if (k.split && l->policy_str) rules_check_split_policy(L, l, k.split);
  if (k.candidate.s) limit_candidate(L, l, &k);

  int failed_here = L->nerr > errors_before;
  if (!l->policy_str || !l->rule || failed_here) {
    if (!failed_here) rules_err(L, map, "invalid rate limit");
    rules_limit_free(l);
    return;
  }
  if (add_limit(L, d, l)) rules_limit_free(l);
}
