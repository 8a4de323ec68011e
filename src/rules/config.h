/*
 * config.h — the daemon's rules: envoyproxy/ratelimit YAML configs, loaded
 * into a tree of descriptors, and matched against requests.
 *
 * A config is a set of domains; a domain is a tree of descriptor nodes
 * (key, optional value) carrying zero or more limits. A request names a
 * domain and one or more descriptors, each an ordered list of (key, value)
 * entries; each descriptor is matched level by level against the tree the
 * way envoyproxy/ratelimit does it (key_value first, then a "prefix*"
 * wildcard value, then the key alone; a limit applies only at the depth of
 * the descriptor's last entry).
 *
 * Files are YAML (libyaml). Every error carries file:line:col.
 *
 * The code, by concern: load.c (files, directories, the top of a domain),
 * descriptor.c and limit.c (a descriptor's and a rate limit's keys, each
 * from a key table), store_error.c (on_store_error, local_fraction and the
 * daemon's --on-store-error), match.c (domains and descriptors found),
 * walk.c (the YAML walk: errors, scalars, the key tables' walk).
 *
 * Fleet mode (state in Redis) reads two things from here: what a limit does
 * when its store fails (on_store_error, local_fraction) and which
 * descriptor key becomes the Redis Cluster hash tag of a domain's keys
 * (hash_tag).
 */
#ifndef SLUICE_CONFIG_H
#define SLUICE_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#include "calendar.h"
#include "sluice.h"

/* Where something is in a config file (line and column start at 1). */
typedef struct cfg_pos {
  const char *file;
  int line, col;
} cfg_pos;

/*
 * What a limit does when its store (Redis) cannot answer. DEFAULT: the
 * config does not say; the daemon's --on-store-error decides.
 */
typedef enum cfg_store_error {
  CFG_STORE_ERROR_DEFAULT = 0,
  CFG_STORE_ERROR_ALLOW, /* allow the request (headers say so) */
  CFG_STORE_ERROR_DENY,  /* deny it as if over the limit */
  CFG_STORE_ERROR_LOCAL  /* an in-memory limiter per daemon, at a fraction */
} cfg_store_error;

/* The daemon's local fraction when --on-store-error gives none. */
#define CFG_LOCAL_FRACTION_DEFAULT 0.5

/* The most sub-counters a split limit may have (split.c). */
#define CFG_SPLIT_MAX 64

/* One limit on a descriptor (a descriptor may carry several). */
typedef struct cfg_limit {
  char *name;      /* rate_limit.name, or NULL */
  char *rule;      /* metric/rule id: "domain.key_value.key" (+"#i"/name) */
  char *policy_str; /* canonical policy, or "unlimited" / "blocked" */
  sl_policy policy; /* unless unlimited; blocked: its window (period_ns) */
  int unlimited;    /* always allowed, nothing counted */
  int blocked;      /* requests_per_unit: 0 — always denied */
  int shadow;       /* shadow_mode: evaluated and counted, never denies */
  /* rate_limit.candidate: a policy evaluated beside `policy` on the same
     key, with its own state, never enforced (an algorithm cutover):
     candidate_str its canonical form, NULL when there is none;
     candidate_rule the name its limiter and store keys go by. */
  char *candidate_str;
  sl_policy candidate;
  char *candidate_rule;
  /* rate_limit.calendar (and tz): a fixed window aligned on the
     calendar's days, weeks, months or years in a time zone (calendar.h);
     cal.unit CAL_NONE: epoch-aligned windows, as envoy's units. */
  cfg_calendar cal;
  int detailed_metric;
  int on_store_error;    /* a cfg_store_error, from the descriptor */
  double local_fraction; /* (0, 1] with LOCAL; 0: not set, the daemon's */
  char **replaces; /* names of limits this one replaces */
  size_t nreplaces;
  const char *unit_name; /* envoy unit ("MINUTE") when given by unit */
  uint32_t requests_per_unit;
  uint32_t evict_below; /* sl_limiter_set_evict_below's; 0: no bound */
  int64_t max_wait_ns;  /* max_wait: a wait mode's cap; 0: the daemon's */
  uint32_t split;  /* sub-counters (2..CFG_SPLIT_MAX); 0: not split */
  char *split_by;  /* descriptor key whose value picks the sub-counter;
                      NULL: rotation */
  cfg_pos split_at;
  /* envoyproxy/ratelimit's descriptor flags, as they reach the limit: */
  int quota_mode;     /* over its limit, denies only when every quota limit
                         of the request is over its limit */
  int dynamic_metric; /* its metric name depends on the request's values
                         (detailed_metric, or value_to_metric on its path):
                         config_metric_name */
  char *metadata;     /* the descriptor's metadata, as a JSON object, or
                         NULL */
  cfg_pos pos;
  size_t index; /* position in sl_config.limits */
} cfg_limit;

typedef struct cfg_node {
  char *key;
  char *value; /* NULL: key only (each value its own counter) */
  /* A '*' anywhere in key or value makes the node a wildcard: its pattern
     is the composite "key_value" (or "key") that envoy matches against a
     request entry's "key_value", each '*' standing for any run of bytes. */
  char *pattern; /* NULL: no wildcard */
  int wildcard;  /* pattern != NULL */
  int share_threshold; /* every value its pattern matches: one counter */
  int value_to_metric; /* the request's value in the metric name */
  int value_to_metric_path; /* value_to_metric here or on an ancestor */
  cfg_limit **limits;
  size_t nlimits;
  struct cfg_node **children; /* sorted: exact by (key, value), then key-only */
  size_t nchildren;
  struct cfg_node **wildcards; /* children with wildcard values, in order */
  size_t nwildcards;
  cfg_pos pos;
} cfg_node;

/*
 * A domain's `shedding:` block (shedding.c; docs/shedding.md): its
 * classes, most important first, with their thresholds, and the library
 * shedder's options they make.
 */
typedef struct cfg_shedding {
  sl_shed_opts opts; /* classes' thresholds, capacity, window, sources */
  char *classes[SL_SHED_CLASSES_MAX]; /* their names */
  char *class_key;        /* the descriptor entry that names a class */
  uint32_t default_class; /* of a request that names none */
  int64_t ttl_ns;         /* a report's life when it names none */
  int status;             /* HTTP status of a shed request */
  int64_t retry_after_ns; /* what a shed request is told to wait */
  int shadow;             /* count and show what it would shed, never shed */
  cfg_pos pos;
} cfg_shedding;

/* The class s (n bytes) names: a class's name, or its number (0 is the
   first). -1 when it names none. */
int config_shed_class(const cfg_shedding *sh, const char *s, size_t n);

typedef struct cfg_domain {
  char *name;
  cfg_shedding *shedding; /* NULL: the domain sheds nothing */
  char *hash_tag; /* descriptor key whose value tags every state key of a
                     request (Redis Cluster: one slot), or NULL */
  cfg_node root; /* key/value unused */
  char *file;
} cfg_domain;

typedef struct sl_config {
  cfg_domain **domains; /* sorted by name */
  size_t ndomains;
  cfg_limit **limits; /* every limit, in load order */
  size_t nlimits;
  char **files; /* the files it was loaded from */
  size_t nfiles;
} sl_config;

/* A list of errors, each "file:line:col: message". */
typedef struct cfg_errors {
  char **msgs;
  size_t n;
} cfg_errors;

void cfg_errors_free(cfg_errors *e);

/*
 * Loads PATH: a YAML file, or a directory whose *.yaml / *.yml files (in
 * name order) each define one domain. Returns the config, or NULL with the
 * reasons in *errs (at most 50).
 */
sl_config *config_load(const char *path, cfg_errors *errs);

/* Loads one YAML document from memory; `name` stands for its file name. */
sl_config *config_load_string(const char *yaml, size_t len, const char *name,
                              cfg_errors *errs);

/* config_load's options (a bit set). CFG_LOAD_MERGE_DOMAINS: files that
   name the same domain add their descriptors to it (envoyproxy/ratelimit's
   MERGE_DOMAIN_CONFIG=true) instead of being refused; a composite key
   given twice across them is still an error. */
#define CFG_LOAD_MERGE_DOMAINS 1u

/* config_load with options (config_load is config_load_opts(path, 0)). */
sl_config *config_load_opts(const char *path, unsigned opts,
                            cfg_errors *errs);

/* Whether the environment asks for merged domains as envoyproxy/ratelimit
   reads it: MERGE_DOMAIN_CONFIG set to true (any case), 1, yes or on. */
int config_env_merge_domains(void);

/* The embedded default: domain "default", descriptor "key" at
   sliding_window:100/m, each value its own counter. */
extern const char config_default_yaml[];

void config_free(sl_config *c);

/* "default", "allow", "deny" or "local" ("unknown" for anything else). */
const char *cfg_store_error_name(int mode);

/*
 * Parses the daemon-wide --on-store-error value: "allow", "deny", "local",
 * or "local:F" with F a decimal in (0, 1] ("0.3") or a percentage in
 * (0, 100] ("30%"). On success sets *mode (never DEFAULT) and *fraction:
 * F, or CFG_LOCAL_FRACTION_DEFAULT when none is given (also for allow and
 * deny: limits that say `on_store_error: local` without local_fraction use
 * it), and returns 0. Otherwise returns SL_EINVAL with a message in err
 * that reads after the option's name ("must be allow, deny, ..."),
 * leaving *mode and *fraction alone.
 */
int cfg_parse_store_error(const char *s, int *mode, double *fraction,
                          char *err, size_t err_len);

const cfg_domain *config_domain(const sl_config *c, const char *name,
                                size_t len);

/* A split limit's shares (split.c): part i of total split n ways (the
   remainder one unit each to the first parts: they differ by at most one
   and add up to total; n < 2: total), and sub-counter i's policy: p's
   algorithm and period with that part of its limit and of its burst. */
uint32_t cfg_split_part(uint32_t total, uint32_t n, uint32_t i);
void cfg_split_share(const sl_policy *p, uint32_t n, uint32_t i,
                     sl_policy *out);

/* One (key, value) entry of a request descriptor. */
typedef struct cfg_entry {
  const char *key;
  size_t key_len;
  const char *value;
  size_t value_len;
} cfg_entry;

/*
 * Matches a descriptor against a domain. Returns the node whose limits
 * apply (it has nlimits > 0), or NULL when no limit applies.
 */
const cfg_node *config_match(const cfg_domain *d, const cfg_entry *entries,
                             size_t n);

/* ---- what a match says beyond its node (envoy.c) ---- */

#define CFG_MATCH_MAX 32 /* entries a match records (deeper ones: none) */

/* How an entry found its node. */
enum { CFG_BY_VALUE = 1, CFG_BY_WILDCARD, CFG_BY_KEY };

/* The path a descriptor took through a domain's tree. */
typedef struct cfg_match {
  const cfg_node *node; /* whose limits apply, or NULL (config_match's) */
  const cfg_node *path[CFG_MATCH_MAX]; /* the node entry i matched */
  unsigned char how[CFG_MATCH_MAX];    /* CFG_BY_* */
  size_t n;                            /* entries matched */
  uint32_t shared; /* bit i: entry i matched a share_threshold wildcard,
                      so its counter is the pattern's, not the value's */
} cfg_match;

/* config_match, recording the path in *m. */
const cfg_node *config_match_path(const cfg_domain *d,
                                  const cfg_entry *entries, size_t n,
                                  cfg_match *m);

/*
 * The value entry i of a descriptor counts under: the entry's own value,
 * or, when it matched a share_threshold wildcard, the pattern's value part
 * (envoy: the pattern less the entry's "key_"). Sets *len.
 */
const char *config_count_value(const cfg_match *m, const cfg_entry *e,
                               size_t i, size_t *len);

/*
 * The metric name of limit l for a descriptor that matched it (m): what
 * envoyproxy/ratelimit names the stats of such a request. detailed_metric:
 * the domain and every entry's "key_value" ("d.k1_v1.k2_v2"), a
 * share_threshold entry's value its pattern; value_to_metric: the rule id
 * with the request's value at each level that asks for it. l's rule id
 * suffix ("#name", several limits on one descriptor) follows. Writes at
 * most len bytes (NUL included) to buf and returns the name's length, or
 * 0 when l's name is its rule id (no dynamic part) or does not fit.
 */
size_t config_metric_name(const cfg_domain *d, const cfg_match *m,
                          const cfg_entry *entries, size_t n,
                          const cfg_limit *l, char *buf, size_t len);

#endif /* SLUICE_CONFIG_H */
