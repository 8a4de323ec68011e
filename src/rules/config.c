/*
 * config.c — loading envoyproxy/ratelimit YAML configs (with sluice's
 * extensions) into the descriptor tree of config.h, and matching requests.
 *
 * The format, as envoyproxy/ratelimit reads it:
 *
 *   domain: NAME
 *   descriptors:
 *     - key: KEY                  # required
 *       value: VALUE              # optional; "prefix*" matches by prefix
 *       rate_limit:               # optional
 *         unit: second|minute|hour|day|week|month|year
 *         requests_per_unit: N    # 0 blocks everything
 *         unlimited: true         # always allowed (no unit then)
 *         name: NAME              # for `replaces`
 *         replaces: [{name: NAME}]
 *       shadow_mode: true         # counted, never denies
 *       detailed_metric: true     # metrics per value of a key-only match
 *       descriptors: [...]        # nested
 *
 * sluice extensions inside a rate limit: `policy: "sliding_window:100/m"`
 * (the policy syntax), or `algorithm:` (default fixed_window, as envoy),
 * `period:` (any duration, e.g. 30s, instead of a unit) and `burst:`; on a
 * descriptor, `rate_limits: [ ... ]` for several limits at once (e.g. per
 * second and per day), and, beside shadow_mode and for its limits alike,
 * `on_store_error: allow|deny|local` with `local_fraction: 0.5` (or "50%",
 * local only); at the top, `hash_tag: KEY` (fleet mode's Redis Cluster
 * slot). Unknown keys are errors, as in envoy.
 *
 * libyaml's document API gives every node its position, so every error
 * says file:line:col.
 */
#include "config.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <yaml.h>

#define MAX_ERRORS 50
#define MAX_DEPTH 32
#define MAX_FILE_BYTES ((size_t)16 << 20)

const char config_default_yaml[] =
    "# sluice's embedded default: each value of `key` gets its own counter,\n"
    "# 100 per minute, sliding window.\n"
    "domain: default\n"
    "descriptors:\n"
    "  - key: key\n"
    "    rate_limit:\n"
    "      policy: \"sliding_window:100/m\"\n";

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
  if (!e || e->n >= MAX_ERRORS) return;
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

static void errorf(cfg_errors *e, const char *file, int line, int col,
                   const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  add_error(e, file, line, col, fmt, ap);
  va_end(ap);
}

/* ---- the loader ---- */

typedef struct loader {
  const char *file;
  yaml_document_t *doc;
  cfg_errors *errs;
  sl_config *cfg;
  const char *domain;
  int failed;
  size_t nerr; /* errors reported so far (even past MAX_ERRORS) */
} loader;

static void err_at(loader *L, const yaml_node_t *n, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  add_error(L->errs, L->file, n ? (int)n->start_mark.line + 1 : 0,
            n ? (int)n->start_mark.column + 1 : 0, fmt, ap);
  va_end(ap);
  L->failed = 1;
  L->nerr++;
}

static yaml_node_t *node(loader *L, int index) {
  return yaml_document_get_node(L->doc, index);
}

static const char *type_name(const yaml_node_t *n) {
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

/* The text of a scalar node, or NULL (with an error naming `what`). */
static const char *scalar(loader *L, const yaml_node_t *n, const char *what) {
  if (n->type != YAML_SCALAR_NODE) {
    err_at(L, n, "%s must be a scalar, not %s", what, type_name(n));
    return NULL;
  }
  const char *s = (const char *)n->data.scalar.value;
  if (strlen(s) != n->data.scalar.length) {
    err_at(L, n, "%s contains a NUL byte", what);
    return NULL;
  }
  return s;
}

static int parse_bool(loader *L, const yaml_node_t *n, const char *what,
                      int *out) {
  const char *s = scalar(L, n, what);
  if (!s) return -1;
  static const char *const yes[] = {"true", "yes", "on"};
  static const char *const no[] = {"false", "no", "off"};
  for (int i = 0; i < 3; i++) {
    if (!strcasecmp(s, yes[i])) return *out = 1, 0;
    if (!strcasecmp(s, no[i])) return *out = 0, 0;
  }
  err_at(L, n, "%s must be true or false, not '%s'", what, s);
  return -1;
}

static int parse_u32(loader *L, const yaml_node_t *n, const char *what,
                     uint32_t *out) {
  const char *s = scalar(L, n, what);
  if (!s) return -1;
  uint64_t v = 0;
  if (!*s) goto bad;
  for (const char *p = s; *p; p++) {
    if (*p < '0' || *p > '9') goto bad;
    v = v * 10 + (uint64_t)(*p - '0');
    if (v > UINT32_MAX) {
      err_at(L, n, "%s '%s' is too large (max 4294967295)", what, s);
      return -1;
    }
  }
  *out = (uint32_t)v;
  return 0;
bad:
  err_at(L, n, "%s must be a whole number, not '%s'", what, s);
  return -1;
}

/* ---- on_store_error and local_fraction ---- */

static const char *const store_error_names[] = {"default", "allow", "deny",
                                                "local"};

const char *cfg_store_error_name(int mode) {
  if (mode < 0 || mode > CFG_STORE_ERROR_LOCAL) return "unknown";
  return store_error_names[mode];
}

/* The mode the n bytes of s name (any case), or DEFAULT if none. */
static int store_error_mode(const char *s, size_t n) {
  for (int m = CFG_STORE_ERROR_ALLOW; m <= CFG_STORE_ERROR_LOCAL; m++)
    if (strlen(store_error_names[m]) == n &&
        !strncasecmp(s, store_error_names[m], n))
      return m;
  return CFG_STORE_ERROR_DEFAULT;
}

/*
 * Parses a local fraction: a decimal in (0, 1] ("0.5", ".5", "1") or a
 * percentage in (0, 100] ("50%", "12.5%"); no sign, exponent or spaces.
 * Returns NULL with *out set, or what is wrong, to follow the value's name.
 */
static const char *parse_fraction(const char *s, double *out) {
  size_t digits = 0, dots = 0, i = 0;
  for (; s[i] && s[i] != '%'; i++) {
    if (s[i] == '.')
      dots++;
    else if (s[i] >= '0' && s[i] <= '9')
      digits++;
    else
      break;
  }
  int pct = s[i] == '%';
  if (pct) i++;
  if (s[i] || !digits || dots > 1)
    return "must be a decimal such as 0.5 or a percentage such as 50%";
  /* By hand, not strtod: LC_NUMERIC may want a decimal comma. One division
     at the end keeps "0.3" the double nearest 0.3. */
  double digits_v = 0, scale = 1;
  int after_dot = 0;
  for (const char *p = s; *p && *p != '%'; p++) {
    if (*p == '.') {
      after_dot = 1;
      continue;
    }
    digits_v = digits_v * 10 + (*p - '0');
    if (after_dot) scale *= 10;
  }
  double v = digits_v / (pct ? scale * 100 : scale);
  if (!(v > 0 && v <= 1))
    return "must be more than 0 and at most 1 (100%)";
  *out = v;
  return NULL;
}

int cfg_parse_store_error(const char *s, int *mode, double *fraction,
                          char *err, size_t err_len) {
  if (!err_len) err = NULL;
  if (!s) s = "";
  const char *colon = strchr(s, ':');
  size_t n = colon ? (size_t)(colon - s) : strlen(s);
  int m = store_error_mode(s, n);
  double f = CFG_LOCAL_FRACTION_DEFAULT;
  if (!m) {
    if (err)
      snprintf(err, err_len, "must be allow, deny, local or local:FRACTION, "
                             "not '%s'", s);
    return SL_EINVAL;
  }
  if (colon && m != CFG_STORE_ERROR_LOCAL) {
    if (err)
      snprintf(err, err_len, "takes a fraction only with local (e.g. "
                             "local:0.3), not '%s'", s);
    return SL_EINVAL;
  }
  if (colon) {
    const char *why = parse_fraction(colon + 1, &f);
    if (why) {
      if (err)
        snprintf(err, err_len, "local's fraction %s, not '%s'", why,
                 colon + 1);
      return SL_EINVAL;
    }
  }
  *mode = m;
  *fraction = f;
  return 0;
}

/* Iterates over a mapping's pairs: key text and value node. */
#define FOR_PAIRS(L, map, k, v)                                              \
  for (yaml_node_pair_t *p_ = (map)->data.mapping.pairs.start;              \
       p_ < (map)->data.mapping.pairs.top; p_++)                            \
    for (yaml_node_t *kn_ = node(L, p_->key), *v = node(L, p_->value),      \
                     *once_ = kn_;                                          \
         once_; once_ = NULL)                                               \
      for (const char *k = scalar(L, kn_, "a key"); k; k = NULL)

/* Rejects a key twice in one mapping (YAML allows it; silently last wins
   would hide mistakes). */
static int dup_key(loader *L, const yaml_node_t *map, const yaml_node_pair_t *upto,
                   const char *k, const yaml_node_t *kn) {
  for (yaml_node_pair_t *q = map->data.mapping.pairs.start; q < upto; q++) {
    yaml_node_t *qk = node(L, q->key);
    if (qk->type == YAML_SCALAR_NODE &&
        !strcmp((const char *)qk->data.scalar.value, k)) {
      err_at(L, kn, "duplicate key '%s'", k);
      return 1;
    }
  }
  return 0;
}

/* ---- limits ---- */

static const struct {
  const char *name, *period;
} units[] = {
    {"SECOND", "s"},   {"MINUTE", "m"},    {"HOUR", "h"},     {"DAY", "d"},
    {"WEEK", "7d"},    {"MONTH", "30d"},   {"YEAR", "365d"},
};

static void limit_free(cfg_limit *l) {
  if (!l) return;
  free(l->name);
  free(l->rule);
  free(l->policy_str);
  for (size_t i = 0; i < l->nreplaces; i++) free(l->replaces[i]);
  free(l->replaces);
  free(l);
}

static int add_limit(loader *L, cfg_node *d, cfg_limit *l) {
  cfg_limit **grown = realloc(d->limits, (d->nlimits + 1) * sizeof *grown);
  cfg_limit **all =
      grown ? realloc(L->cfg->limits, (L->cfg->nlimits + 1) * sizeof *all)
            : NULL;
  if (grown) d->limits = grown;
  if (!all) {
    err_at(L, NULL, "out of memory");
    return -1;
  }
  L->cfg->limits = all;
  l->index = L->cfg->nlimits;
  d->limits[d->nlimits++] = l;
  L->cfg->limits[L->cfg->nlimits++] = l;
  return 0;
}

/* What a descriptor says about each of its own limits (not its
   children's, as envoy's shadow_mode). */
typedef struct limit_flags {
  int shadow, detailed, on_store_error;
  double local_fraction;
} limit_flags;

/*
 * Parses one rate limit mapping into a new limit of descriptor d (full key
 * `path`), with the descriptor's flags.
 */
static void parse_limit(loader *L, cfg_node *d, const yaml_node_t *map,
                        const char *path, const limit_flags *flags,
                        int index, int of) {
  if (map->type != YAML_MAPPING_NODE) {
    err_at(L, map, "a rate limit must be a mapping, not %s", type_name(map));
    return;
  }
  size_t errors_before = L->nerr; /* this limit's own errors are after it */
  const char *unit = NULL, *name = NULL, *policy = NULL, *algorithm = NULL,
             *period = NULL;
  const yaml_node_t *unit_n = NULL, *rpu_n = NULL, *policy_n = NULL,
                    *burst_n = NULL, *replaces_n = NULL, *period_n = NULL,
                    *algo_n = NULL;
  uint32_t rpu = 0, burst = 0;
  int unlimited = 0, have_rpu = 0, have_burst = 0;
  FOR_PAIRS(L, map, k, v) {
    if (dup_key(L, map, p_, k, kn_)) continue;
    if (!strcmp(k, "unit")) {
      unit = scalar(L, v, "unit");
      unit_n = v;
    } else if (!strcmp(k, "requests_per_unit")) {
      have_rpu = parse_u32(L, v, "requests_per_unit", &rpu) == 0;
      rpu_n = v;
    } else if (!strcmp(k, "unlimited")) {
      parse_bool(L, v, "unlimited", &unlimited);
    } else if (!strcmp(k, "name")) {
      name = scalar(L, v, "name");
    } else if (!strcmp(k, "replaces")) {
      replaces_n = v;
    } else if (!strcmp(k, "policy")) {
      policy = scalar(L, v, "policy");
      policy_n = v;
    } else if (!strcmp(k, "algorithm")) {
      algorithm = scalar(L, v, "algorithm");
      algo_n = v;
    } else if (!strcmp(k, "period")) {
      period = scalar(L, v, "period");
      period_n = v;
    } else if (!strcmp(k, "burst")) {
      have_burst = parse_u32(L, v, "burst", &burst) == 0;
      burst_n = v;
    } else {
      err_at(L, kn_, "unknown key '%s' in a rate limit (expected unit, "
                     "requests_per_unit, unlimited, name, replaces, policy, "
                     "algorithm, period or burst)", k);
    }
  }

  cfg_limit *l = calloc(1, sizeof *l);
  if (!l) {
    err_at(L, map, "out of memory");
    return;
  }
  l->pos = (cfg_pos){L->file, (int)map->start_mark.line + 1,
                     (int)map->start_mark.column + 1};
  l->shadow = flags->shadow;
  l->detailed_metric = flags->detailed;
  l->on_store_error = flags->on_store_error;
  l->local_fraction = flags->local_fraction;
  l->unlimited = unlimited;
  if (name) l->name = strdup(name);

  char rule[1100];
  if (of > 1 && name)
    snprintf(rule, sizeof rule, "%s#%s", path, name);
  else if (of > 1)
    snprintf(rule, sizeof rule, "%s#%d", path, index);
  else
    snprintf(rule, sizeof rule, "%s", path);
  l->rule = strdup(rule);

  if (replaces_n) {
    if (replaces_n->type != YAML_SEQUENCE_NODE) {
      err_at(L, replaces_n, "replaces must be a list of {name: ...}");
    } else {
      for (yaml_node_item_t *it = replaces_n->data.sequence.items.start;
           it < replaces_n->data.sequence.items.top; it++) {
        yaml_node_t *r = node(L, *it);
        const char *rname = NULL;
        if (r->type != YAML_MAPPING_NODE) {
          err_at(L, r, "a replaces entry must be a mapping {name: ...}");
          continue;
        }
        FOR_PAIRS(L, r, rk, rv) {
          if (dup_key(L, r, p_, rk, kn_)) continue;
          if (!strcmp(rk, "name"))
            rname = scalar(L, rv, "name");
          else
            err_at(L, kn_, "unknown key '%s' in replaces (expected name)", rk);
        }
        if (!rname || !*rname) {
          err_at(L, r, "should not have an empty replaces entry");
          continue;
        }
        if (name && !strcmp(rname, name)) {
          err_at(L, r, "replaces should not contain name of same descriptor");
          continue;
        }
        char **grown = realloc(l->replaces, (l->nreplaces + 1) * sizeof *grown);
        if (!grown) continue;
        l->replaces = grown;
        l->replaces[l->nreplaces++] = strdup(rname);
      }
    }
  }

  char spec[256] = "";
  const yaml_node_t *spec_at = map;
  if (unlimited) {
    if (unit || have_rpu || policy || algorithm || period || have_burst)
      err_at(L, map, "should not specify a rate limit (unit, "
                     "requests_per_unit, policy, ...) when unlimited");
    l->policy_str = strdup("unlimited");
  } else if (policy) {
    if (unit || have_rpu || algorithm || period || have_burst)
      err_at(L, policy_n, "policy replaces unit, requests_per_unit, "
                          "algorithm, period and burst: give one or the "
                          "other");
    snprintf(spec, sizeof spec, "%s", policy);
    spec_at = policy_n;
  } else {
    const char *per = NULL;
    if (unit) {
      for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
        if (!strcasecmp(unit, units[i].name)) {
          per = units[i].period;
          l->unit_name = units[i].name;
        }
      if (!per)
        err_at(L, unit_n, "invalid rate limit unit '%s' (expected second, "
                          "minute, hour, day, week, month or year)", unit);
    }
    if (period) {
      if (unit) err_at(L, period_n, "give either unit or period, not both");
      per = period;
      spec_at = period_n;
    }
    if (!unit && !period)
      err_at(L, map, "a rate limit needs a unit (or period) and "
                     "requests_per_unit, or a policy, or unlimited: true");
    else if (!rpu_n)
      err_at(L, map, "a rate limit needs requests_per_unit");
    if (have_rpu && rpu == 0) {
      /* Blocks everything; its window still tells clients when it resets. */
      l->blocked = 1;
      l->policy_str = strdup("blocked");
      char window[64];
      snprintf(window, sizeof window, "fixed_window:1/%s", per ? per : "s");
      if (per && sl_policy_parse(window, &l->policy, NULL, 0))
        err_at(L, spec_at, "invalid period '%s'", per);
    } else if (per && have_rpu) {
      if (have_burst)
        snprintf(spec, sizeof spec, "%s:%u/%s:burst=%u",
                 algorithm ? algorithm : "fixed_window", rpu, per, burst);
      else
        snprintf(spec, sizeof spec, "%s:%u/%s",
                 algorithm ? algorithm : "fixed_window", rpu, per);
      if (algorithm) spec_at = algo_n;
      if (have_burst && !algorithm) spec_at = burst_n;
    }
    l->requests_per_unit = rpu;
  }
  if (*spec) {
    char err[256];
    if (sl_policy_parse(spec, &l->policy, err, sizeof err)) {
      err_at(L, spec_at, "%s", err);
    } else {
      char canon[128];
      sl_policy_format(&l->policy, canon, sizeof canon);
      l->policy_str = strdup(canon);
    }
  }
  int failed_here = L->nerr > errors_before;
  if (!l->policy_str || !l->rule || failed_here) {
    if (!failed_here) err_at(L, map, "invalid rate limit");
    limit_free(l);
    return;
  }
  if (add_limit(L, d, l)) limit_free(l);
}

/* ---- descriptors ---- */

static void node_free(cfg_node *n) {
  for (size_t i = 0; i < n->nchildren; i++) {
    node_free(n->children[i]);
    free(n->children[i]);
  }
  free(n->children);
  free(n->wildcards);
  free(n->limits); /* the limits themselves are owned by sl_config.limits */
  free(n->key);
  free(n->value);
}

static int str_cmp_null(const char *a, const char *b) {
  if (!a || !b) return (a != NULL) - (b != NULL); /* NULL first */
  return strcmp(a, b);
}

static int child_cmp(const void *pa, const void *pb) {
  const cfg_node *a = *(cfg_node *const *)pa, *b = *(cfg_node *const *)pb;
  int c = strcmp(a->key, b->key);
  return c ? c : str_cmp_null(a->value, b->value);
}

static void parse_descriptors(loader *L, cfg_node *parent,
                              const yaml_node_t *seq, const char *path,
                              int depth);

static void parse_descriptor(loader *L, cfg_node *parent,
                             const yaml_node_t *map, const char *path,
                             int depth) {
  if (map->type != YAML_MAPPING_NODE) {
    err_at(L, map, "a descriptor must be a mapping, not %s", type_name(map));
    return;
  }
  const char *key = NULL, *value = NULL;
  const yaml_node_t *rl = NULL, *rls = NULL, *kids = NULL, *key_n = NULL,
                    *fraction_n = NULL;
  limit_flags flags = {0};
  int bad_mode = 0;
  FOR_PAIRS(L, map, k, v) {
    if (dup_key(L, map, p_, k, kn_)) continue;
    if (!strcmp(k, "key")) {
      key = scalar(L, v, "key");
      key_n = v;
    } else if (!strcmp(k, "value")) {
      value = scalar(L, v, "value");
    } else if (!strcmp(k, "rate_limit")) {
      rl = v;
    } else if (!strcmp(k, "rate_limits")) {
      rls = v;
    } else if (!strcmp(k, "descriptors")) {
      kids = v;
    } else if (!strcmp(k, "shadow_mode")) {
      parse_bool(L, v, "shadow_mode", &flags.shadow);
    } else if (!strcmp(k, "detailed_metric")) {
      parse_bool(L, v, "detailed_metric", &flags.detailed);
    } else if (!strcmp(k, "on_store_error")) {
      const char *mode = scalar(L, v, "on_store_error");
      flags.on_store_error = mode ? store_error_mode(mode, strlen(mode)) : 0;
      if (!flags.on_store_error) {
        bad_mode = 1;
        if (mode)
          err_at(L, v, "on_store_error must be allow, deny or local, not '%s'",
                 mode);
      }
    } else if (!strcmp(k, "local_fraction")) {
      const char *f = scalar(L, v, "local_fraction");
      const char *why = f ? parse_fraction(f, &flags.local_fraction) : NULL;
      if (why) err_at(L, v, "local_fraction %s, not '%s'", why, f);
      fraction_n = v;
    } else {
      err_at(L, kn_, "unknown key '%s' in a descriptor (expected key, value, "
                     "rate_limit, rate_limits, descriptors, shadow_mode, "
                     "detailed_metric, on_store_error or local_fraction)", k);
    }
  }
  /* Checked only when both are valid, so a bad mode is reported once. */
  if (flags.local_fraction > 0 && !bad_mode &&
      flags.on_store_error != CFG_STORE_ERROR_LOCAL) {
    if (flags.on_store_error)
      err_at(L, fraction_n, "local_fraction is only for on_store_error: "
                            "local, not %s",
             cfg_store_error_name(flags.on_store_error));
    else
      err_at(L, fraction_n, "local_fraction needs on_store_error: local");
  }
  if (!key || !*key) {
    err_at(L, key_n ? key_n : map, "descriptor has empty key");
    return;
  }
  if (value && !*value) value = NULL; /* as envoy: empty value = key only */
  cfg_node *d = calloc(1, sizeof *d);
  if (!d) return;
  d->key = strdup(key);
  d->value = value ? strdup(value) : NULL;
  d->wildcard = value && value[strlen(value) - 1] == '*';
  d->pos = (cfg_pos){L->file, (int)map->start_mark.line + 1,
                     (int)map->start_mark.column + 1};
  char sub[1024];
  if (value)
    snprintf(sub, sizeof sub, "%s%s_%s", path, key, value);
  else
    snprintf(sub, sizeof sub, "%s%s", path, key);

  /* Duplicate composite keys at one level are errors, as in envoy. */
  for (size_t i = 0; i < parent->nchildren; i++) {
    cfg_node *o = parent->children[i];
    if (!strcmp(o->key, key) && !str_cmp_null(o->value, d->value)) {
      err_at(L, map, "duplicate descriptor composite key '%s' (first at "
                     "line %d)", sub, o->pos.line);
      node_free(d);
      free(d);
      return;
    }
  }
  cfg_node **grown =
      realloc(parent->children, (parent->nchildren + 1) * sizeof *grown);
  if (!grown || !d->key || (value && !d->value)) {
    err_at(L, map, "out of memory");
    if (grown) parent->children = grown;
    node_free(d);
    free(d);
    return;
  }
  parent->children = grown;
  parent->children[parent->nchildren++] = d;

  if (rl && rls)
    err_at(L, rls, "give either rate_limit or rate_limits, not both");
  else if (rl)
    parse_limit(L, d, rl, sub, &flags, 0, 1);
  else if (rls) {
    if (rls->type != YAML_SEQUENCE_NODE) {
      err_at(L, rls, "rate_limits must be a list of rate limits");
    } else {
      int of = (int)(rls->data.sequence.items.top -
                     rls->data.sequence.items.start);
      int i = 0;
      for (yaml_node_item_t *it = rls->data.sequence.items.start;
           it < rls->data.sequence.items.top; it++, i++)
        parse_limit(L, d, node(L, *it), sub, &flags, i, of);
    }
  }
  if (kids) {
    strncat(sub, ".", sizeof sub - strlen(sub) - 1);
    parse_descriptors(L, d, kids, sub, depth + 1);
  }
}

static void parse_descriptors(loader *L, cfg_node *parent,
                              const yaml_node_t *seq, const char *path,
                              int depth) {
  if (seq->type == YAML_SCALAR_NODE && seq->data.scalar.length == 0) return;
  if (seq->type != YAML_SEQUENCE_NODE) {
    err_at(L, seq, "descriptors must be a list, not %s", type_name(seq));
    return;
  }
  if (depth > MAX_DEPTH) {
    err_at(L, seq, "descriptors nested deeper than %d levels", MAX_DEPTH);
    return;
  }
  for (yaml_node_item_t *it = seq->data.sequence.items.start;
       it < seq->data.sequence.items.top; it++)
    parse_descriptor(L, parent, node(L, *it), path, depth);
}

/*
 * Collects wildcard values in file order (envoy tries them in that order),
 * then sorts the children for lookup, recursively.
 */
static int index_node(cfg_node *n) {
  for (size_t i = 0; i < n->nchildren; i++) {
    cfg_node *c = n->children[i];
    if (c->wildcard) {
      cfg_node **grown =
          realloc(n->wildcards, (n->nwildcards + 1) * sizeof *grown);
      if (!grown) return -1;
      n->wildcards = grown;
      n->wildcards[n->nwildcards++] = c;
    }
    if (index_node(c)) return -1;
  }
  if (n->nchildren)
    qsort(n->children, n->nchildren, sizeof *n->children, child_cmp);
  return 0;
}

/* ---- domains and files ---- */

static void domain_free(cfg_domain *d) {
  if (!d) return;
  node_free(&d->root);
  free(d->name);
  free(d->hash_tag);
  free(d->file);
  free(d);
}

void config_free(sl_config *c) {
  if (!c) return;
  for (size_t i = 0; i < c->ndomains; i++) domain_free(c->domains[i]);
  free(c->domains);
  for (size_t i = 0; i < c->nlimits; i++) limit_free(c->limits[i]);
  free(c->limits);
  for (size_t i = 0; i < c->nfiles; i++) free(c->files[i]);
  free(c->files);
  free(c);
}

/* Parses one file's text into cfg as a domain. 0, or -1 (errors added). */
static int load_text(sl_config *cfg, const char *text, size_t len,
                     const char *file, cfg_errors *errs) {
  char **files = realloc(cfg->files, (cfg->nfiles + 1) * sizeof *files);
  if (!files) return -1;
  cfg->files = files;
  cfg->files[cfg->nfiles] = strdup(file);
  if (!cfg->files[cfg->nfiles]) return -1;
  file = cfg->files[cfg->nfiles++];

  yaml_parser_t parser;
  yaml_document_t doc;
  if (!yaml_parser_initialize(&parser)) return -1;
  yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
  if (!yaml_parser_load(&parser, &doc)) {
    /* libyaml: "did not find expected key while parsing a block mapping" */
    yaml_mark_t m = parser.problem_mark;
    errorf(errs, file, (int)m.line + 1, (int)m.column + 1, "%s%s%s",
           parser.problem ? parser.problem : "malformed YAML",
           parser.context ? " " : "", parser.context ? parser.context : "");
    yaml_parser_delete(&parser);
    return -1;
  }
  yaml_parser_delete(&parser);

  loader L = {.file = file, .doc = &doc, .errs = errs, .cfg = cfg};
  yaml_node_t *root = yaml_document_get_root_node(&doc);
  cfg_domain *d = NULL;
  if (!root) {
    err_at(&L, NULL, "empty config (expected domain: and descriptors:)");
    goto done;
  }
  if (root->type != YAML_MAPPING_NODE) {
    err_at(&L, root, "a config must be a mapping with domain: and "
                     "descriptors:, not %s", type_name(root));
    goto done;
  }
  d = calloc(1, sizeof *d);
  if (!d) goto done;
  d->root.key = strdup("");
  d->file = strdup(file);
  const yaml_node_t *descs = NULL, *domain_n = root;
  FOR_PAIRS(&L, root, k, v) {
    if (dup_key(&L, root, p_, k, kn_)) continue;
    if (!strcmp(k, "domain")) {
      const char *name = scalar(&L, v, "domain");
      domain_n = v;
      if (name && *name) d->name = strdup(name);
    } else if (!strcmp(k, "descriptors")) {
      descs = v;
    } else if (!strcmp(k, "hash_tag")) {
      /* The key's value is what goes between the braces of Redis keys; a
         brace in the key's name is a mistake (hash_tag: "{api_key}"). */
      const char *tag = scalar(&L, v, "hash_tag");
      if (tag && !*tag)
        err_at(&L, v, "hash_tag must name a descriptor key, not be empty");
      else if (tag && strpbrk(tag, "{}"))
        err_at(&L, v, "hash_tag must not contain '{' or '}', not '%s'", tag);
      else if (tag && !(d->hash_tag = strdup(tag)))
        err_at(&L, v, "out of memory");
    } else {
      err_at(&L, kn_, "unknown key '%s' at the top (expected domain, "
                      "descriptors or hash_tag)", k);
    }
  }
  if (!d->name) {
    err_at(&L, domain_n, "config file cannot have empty domain");
    goto done;
  }
  for (size_t i = 0; i < cfg->ndomains; i++)
    if (!strcmp(cfg->domains[i]->name, d->name)) {
      err_at(&L, domain_n, "duplicate domain '%s' (also in %s)", d->name,
             cfg->domains[i]->file);
      goto done;
    }
  char path[512];
  snprintf(path, sizeof path, "%s.", d->name);
  L.domain = d->name;
  if (descs) parse_descriptors(&L, &d->root, descs, path, 1);
  if (!L.failed) {
    cfg_domain **grown =
        realloc(cfg->domains, (cfg->ndomains + 1) * sizeof *grown);
    if (grown && index_node(&d->root) == 0) {
      cfg->domains = grown;
      cfg->domains[cfg->ndomains++] = d;
      d = NULL;
    } else {
      if (grown) cfg->domains = grown;
      err_at(&L, NULL, "out of memory");
    }
  }
done:
  domain_free(d);
  yaml_document_delete(&doc);
  return L.failed ? -1 : 0;
}

static sl_config *new_config(void) { return calloc(1, sizeof(sl_config)); }

static int domain_cmp(const void *pa, const void *pb) {
  return strcmp((*(cfg_domain *const *)pa)->name,
                (*(cfg_domain *const *)pb)->name);
}

/* Sorts the domains; frees and returns NULL when there were errors. */
static sl_config *finish(sl_config *c, cfg_errors *errs, int failed) {
  if (failed || (errs && errs->n)) {
    config_free(c);
    return NULL;
  }
  if (c->ndomains)
    qsort(c->domains, c->ndomains, sizeof *c->domains, domain_cmp);
  return c;
}

sl_config *config_load_string(const char *yaml, size_t len, const char *name,
                              cfg_errors *errs) {
  sl_config *c = new_config();
  if (!c) return NULL;
  int failed = load_text(c, yaml, len, name, errs);
  return finish(c, errs, failed);
}

/* Reads a whole file (at most MAX_FILE_BYTES). NULL with an error. */
static char *read_file(const char *path, size_t *len, cfg_errors *errs) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    errorf(errs, path, 0, 0, "%s", strerror(errno));
    return NULL;
  }
  char *buf = NULL;
  size_t n = 0, cap = 0;
  for (;;) {
    if (n == cap) {
      if (cap >= MAX_FILE_BYTES) {
        errorf(errs, path, 0, 0, "larger than %zu bytes", MAX_FILE_BYTES);
        free(buf);
        fclose(f);
        return NULL;
      }
      cap = cap ? cap * 2 : 4096;
      char *grown = realloc(buf, cap + 1);
      if (!grown) {
        free(buf);
        fclose(f);
        return NULL;
      }
      buf = grown;
    }
    size_t got = fread(buf + n, 1, cap - n, f);
    n += got;
    if (got == 0) break;
  }
  int bad = ferror(f);
  fclose(f);
  if (bad) {
    errorf(errs, path, 0, 0, "read error");
    free(buf);
    return NULL;
  }
  buf[n] = '\0';
  *len = n;
  return buf;
}

static int yaml_name(const char *n) {
  size_t l = strlen(n);
  return n[0] != '.' && ((l > 5 && !strcmp(n + l - 5, ".yaml")) ||
                         (l > 4 && !strcmp(n + l - 4, ".yml")));
}

static int name_cmp(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

sl_config *config_load(const char *path, cfg_errors *errs) {
  struct stat st;
  if (stat(path, &st) != 0) {
    errorf(errs, path, 0, 0, "%s", strerror(errno));
    return NULL;
  }
  sl_config *c = new_config();
  if (!c) return NULL;
  int failed = 0;
  if (!S_ISDIR(st.st_mode)) {
    size_t len;
    char *text = read_file(path, &len, errs);
    failed = !text || load_text(c, text, len, path, errs);
    free(text);
    return finish(c, errs, failed);
  }
  DIR *dir = opendir(path);
  if (!dir) {
    errorf(errs, path, 0, 0, "%s", strerror(errno));
    config_free(c);
    return NULL;
  }
  char **names = NULL;
  size_t n = 0;
  for (struct dirent *e; (e = readdir(dir));) {
    if (!yaml_name(e->d_name)) continue;
    char **grown = realloc(names, (n + 1) * sizeof *grown);
    if (!grown) break;
    names = grown;
    names[n] = malloc(strlen(path) + strlen(e->d_name) + 2);
    if (!names[n]) break;
    sprintf(names[n++], "%s/%s", path, e->d_name);
  }
  closedir(dir);
  if (n) qsort(names, n, sizeof *names, name_cmp);
  if (n == 0) {
    errorf(errs, path, 0, 0, "no *.yaml or *.yml files in this directory");
    failed = 1;
  }
  for (size_t i = 0; i < n; i++) {
    size_t len;
    char *text = read_file(names[i], &len, errs);
    failed |= !text || load_text(c, text, len, names[i], errs);
    free(text);
    free(names[i]);
  }
  free(names);
  return finish(c, errs, failed);
}

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

const cfg_node *config_match(const cfg_domain *d, const cfg_entry *entries,
                             size_t n) {
  const cfg_node *level = &d->root, *found = NULL;
  for (size_t i = 0; i < n; i++) {
    const cfg_entry *e = &entries[i];
    const cfg_node *next = find_child(level, e, 1);
    for (size_t w = 0; !next && w < level->nwildcards; w++) {
      const cfg_node *c = level->wildcards[w];
      size_t plen = strlen(c->value) - 1; /* without the '*' */
      if (!cmp_n(c->key, e->key, e->key_len) && e->value_len >= plen &&
          !memcmp(c->value, e->value, plen))
        next = c;
    }
    if (!next) next = find_child(level, e, 0);
    if (!next) break;
    /* A limit applies only at the depth of the descriptor's last entry. */
    if (next->nlimits && i == n - 1) found = next;
    if (!next->nchildren) break;
    level = next;
  }
  return found;
}
