/*
 * shedding.c — a domain's `shedding:` block (docs/shedding.md): the
 * priority classes and their thresholds, fleet usage's capacity, and what
 * a shed request is answered:
 *
 *   shedding:
 *     classes:                  # most important first; default: these
 *       - {name: critical, threshold: never}
 *       - {name: default, threshold: 90%}
 *       - {name: sheddable, threshold: 70%}
 *     class_key: priority       # the descriptor entry naming a class
 *     default_class: default    # a request that names none
 *     capacity: 1000/s          # fleet usage: requests per period
 *     utilisation_ttl: 10s      # a report's life when it names none
 *     max_sources: 64           # utilisation reporters kept at once
 *     combine: max              # their reports: max or mean
 *     status: 503
 *     retry_after: 1s
 *     shadow: false             # show what it would shed, shed nothing
 *
 * The thresholds must not rise from one class to the next less important
 * one: the least important class is shed first (sl_shed_opts_validate).
 */
#include "rules.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../base/duration.h"

#define DEFAULT_TTL_NS (10LL * 1000000000)

/* The block's keys, as read. */
typedef struct shed_keys {
  cfg_shedding *sh;
  const yaml_node_t *classes;
  rules_text class_key, default_class, capacity, ttl, combine, retry_after;
  rules_count max_sources, status;
  int shadow;
} shed_keys;

/* One class's keys. */
typedef struct class_keys {
  rules_text name, threshold;
} class_keys;

static const rules_key class_key_table[] = {
    {"name", rules_set_text, offsetof(class_keys, name)},
    {"threshold", rules_set_text, offsetof(class_keys, threshold)},
    {NULL, NULL, 0},
};
static const rules_map class_map = {"in a shedding class", class_key_table};

static const rules_key shed_key_table[] = {
    {"classes", rules_set_node, offsetof(shed_keys, classes)},
    {"class_key", rules_set_text, offsetof(shed_keys, class_key)},
    {"default_class", rules_set_text, offsetof(shed_keys, default_class)},
    {"capacity", rules_set_text, offsetof(shed_keys, capacity)},
    {"utilisation_ttl", rules_set_text, offsetof(shed_keys, ttl)},
    {"max_sources", rules_set_count, offsetof(shed_keys, max_sources)},
    {"combine", rules_set_text, offsetof(shed_keys, combine)},
    {"status", rules_set_count, offsetof(shed_keys, status)},
    {"retry_after", rules_set_text, offsetof(shed_keys, retry_after)},
    {"shadow", rules_set_flag, offsetof(shed_keys, shadow)},
    {NULL, NULL, 0},
};
static const rules_map shed_map = {"in shedding", shed_key_table};

/* The default classes when the block names none. */
static const struct {
  const char *name;
  uint32_t pm;
} default_classes[] = {
    {"critical", SL_SHED_NEVER}, {"default", 900}, {"sheddable", 700}};

int config_shed_class(const cfg_shedding *sh, const char *s, size_t n) {
  for (uint32_t c = 0; c < sh->opts.nclasses; c++)
    if (strlen(sh->classes[c]) == n && !memcmp(sh->classes[c], s, n))
      return (int)c;
  uint32_t v = 0;
  size_t i = 0;
  for (; i < n && i < 3 && s[i] >= '0' && s[i] <= '9'; i++)
    v = v * 10 + (uint32_t)(s[i] - '0');
  return n && i == n && v < sh->opts.nclasses ? (int)v : -1;
}

/* "N" + a unit (ms, s, m, h, d) into ns: 0, or -1. */
static int parse_span(const char *s, int64_t *ns) {
  int64_t v = 0;
  size_t i = 0;
  for (; s[i] >= '0' && s[i] <= '9' && v < 1000000000; i++)
    v = v * 10 + (s[i] - '0');
  int64_t unit = duration_unit_ns(s + i, strlen(s + i));
  if (!i || !unit || v <= 0 || v > INT64_MAX / unit) return -1;
  *ns = v * unit;
  return 0;
}

/* A duration key's value into *ns (unchanged when absent); an error at it
   when it is not one of 1 ms .. 1 day. */
static void span_of(rules_loader *L, const rules_text *t, const char *what,
                    int64_t *ns) {
  if (!t->s) return;
  if (parse_span(t->s, ns) || *ns > 86400000000000LL)
    rules_err(L, t->at, "%s must be a duration such as 10s or 500ms (at most "
                        "1d), not '%s'", what, t->s);
}

/* capacity: "N/PERIOD" (N requests per PERIOD; a bare unit is 1 of it). */
static void capacity_of(rules_loader *L, const rules_text *t,
                        sl_shed_opts *o) {
  if (!t->s) return;
  const char *slash = strchr(t->s, '/');
  uint64_t n = 0;
  const char *p = t->s;
  for (; p < (slash ? slash : t->s) && *p >= '0' && *p <= '9' && n < (1ULL << 40); p++)
    n = n * 10 + (uint64_t)(*p - '0');
  int64_t period = 0;
  const char *per = slash ? slash + 1 : "";
  int ok = slash && p == slash && n > 0 && n < (1ULL << 40);
  if (ok && parse_span(per, &period)) /* a bare unit: 1 of it */
    period = duration_unit_ns(per, strlen(per));
  if (!ok || period <= 0 || period > 86400000000000LL) {
    rules_err(L, t->at, "capacity must be requests per period such as "
                        "1000/s or 50000/m, not '%s'", t->s);
    return;
  }
  o->capacity = n;
  o->window_ns = period;
}

/* The classes list into sh (names and thresholds). */
static void classes_of(rules_loader *L, const yaml_node_t *seq,
                       cfg_shedding *sh) {
  if (seq->type != YAML_SEQUENCE_NODE) {
    rules_err(L, seq, "classes must be a list of {name, threshold}, not %s",
              rules_type_name(seq));
    return;
  }
  size_t n = (size_t)(seq->data.sequence.items.top -
                      seq->data.sequence.items.start);
  if (n < 1 || n > SL_SHED_CLASSES_MAX) {
    rules_err(L, seq, "classes: 1 to %d, not %zu", SL_SHED_CLASSES_MAX, n);
    return;
  }
  for (size_t i = 0; i < n; i++) {
    const yaml_node_t *m = rules_node(L, seq->data.sequence.items.start[i]);
    class_keys k = {0};
    if (m->type != YAML_MAPPING_NODE) {
      rules_err(L, m, "a class must be a mapping {name, threshold}");
      return;
    }
    rules_walk(L, m, &class_map, &k);
    if (!k.name.s || !*k.name.s) {
      rules_err(L, m, "class %zu needs a name", i);
      return;
    }
    for (size_t j = 0; j < i; j++)
      if (!strcmp(sh->classes[j], k.name.s))
        rules_err(L, k.name.at, "class '%s' is named twice", k.name.s);
    uint32_t pm = SL_SHED_NEVER;
    if (k.threshold.s && strcmp(k.threshold.s, "never") &&
        sl_shed_parse_level(k.threshold.s, strlen(k.threshold.s), &pm))
      rules_err(L, k.threshold.at, "threshold must be a percentage such as "
                                   "90%%, a fraction such as 0.9, or never, "
                                   "not '%s'", k.threshold.s);
    sh->classes[i] = strdup(k.name.s);
    sh->opts.threshold_pm[i] = pm;
    sh->opts.nclasses = (uint32_t)i + 1;
  }
}

void rules_shedding_free(cfg_shedding *sh) {
  if (!sh) return;
  for (size_t i = 0; i < SL_SHED_CLASSES_MAX; i++) free(sh->classes[i]);
  free(sh->class_key);
  free(sh);
}

/* The scalar fields of the block, once the classes are known. */
static void settle(rules_loader *L, const shed_keys *k, cfg_shedding *sh) {
  const char *dc = k->default_class.s;
  if (dc) {
    int c = config_shed_class(sh, dc, strlen(dc));
    if (c < 0)
      rules_err(L, k->default_class.at, "default_class '%s' is no class", dc);
    sh->default_class = c < 0 ? 0 : (uint32_t)c;
  } else {
    int c = config_shed_class(sh, "default", 7);
    sh->default_class = c >= 0 ? (uint32_t)c : sh->opts.nclasses - 1;
  }
  if (k->combine.s && !strcmp(k->combine.s, "mean"))
    sh->opts.combine = SL_SHED_MEAN;
  else if (k->combine.s && strcmp(k->combine.s, "max"))
    rules_err(L, k->combine.at, "combine must be max or mean, not '%s'",
              k->combine.s);
  if (k->max_sources.ok) sh->opts.max_sources = k->max_sources.v;
  if (k->status.ok && (k->status.v < 400 || k->status.v > 599))
    rules_err(L, k->status.at, "status must be 400 to 599, not %u",
              k->status.v);
  else if (k->status.ok)
    sh->status = (int)k->status.v;
  span_of(L, &k->ttl, "utilisation_ttl", &sh->ttl_ns);
  span_of(L, &k->retry_after, "retry_after", &sh->retry_after_ns);
  capacity_of(L, &k->capacity, &sh->opts);
  char err[160];
  if (!L->failed && sl_shed_opts_validate(&sh->opts, err, sizeof err))
    rules_err(L, k->classes, "%s", err);
}

void rules_parse_shedding(rules_loader *L, const yaml_node_t *v,
                          const rules_key *key, void *conf) {
  (void)key;
  cfg_domain *d = *(cfg_domain **)conf; /* domain_keys starts with it */
  if (v->type != YAML_MAPPING_NODE) {
    rules_err(L, v, "shedding must be a mapping, not %s", rules_type_name(v));
    return;
  }
  cfg_shedding *sh = calloc(1, sizeof *sh);
  if (!sh) {
    rules_err(L, v, "out of memory");
    return;
  }
  d->shedding = sh;
  sh->pos = (cfg_pos){L->file, (int)v->start_mark.line + 1,
                      (int)v->start_mark.column + 1};
  sh->status = 503;
  sh->ttl_ns = DEFAULT_TTL_NS;
  sh->retry_after_ns = 1000000000;
  shed_keys k = {.sh = sh};
  rules_walk(L, v, &shed_map, &k);
  sh->shadow = k.shadow;
  if (k.classes) {
    classes_of(L, k.classes, sh);
  } else {
    for (size_t i = 0; i < 3; i++) {
      sh->classes[i] = strdup(default_classes[i].name);
      sh->opts.threshold_pm[i] = default_classes[i].pm;
    }
    sh->opts.nclasses = 3;
  }
  for (size_t i = 0; i < sh->opts.nclasses; i++)
    if (!sh->classes[i]) rules_err(L, v, "out of memory");
  sh->class_key = strdup(k.class_key.s ? k.class_key.s : "priority");
  if (!sh->class_key) rules_err(L, v, "out of memory");
  if (!L->failed && sh->opts.nclasses) settle(L, &k, sh);
}
