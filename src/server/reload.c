/*
 * reload.c — the daemon's config (reload.h): loading it with its errors
 * logged, checking it against what fleet mode can decide, reloading it
 * into the engine (which keeps the counters of unchanged rules), and
 * noticing, by stat(), that one of its files changed.
 */
#include <stdlib.h>
#include <string.h>

#include "../fleet/script.h"
#include "reload.h"

void config_watch_free(config_watch *wt) {
  for (size_t i = 0; i < wt->n; i++) free(wt->paths[i]);
  free(wt->paths);
  free(wt->st);
  free(wt->seen);
  wt->paths = NULL;
  wt->st = wt->seen = NULL;
  wt->n = 0;
  wt->pending = 0;
}

void config_watch_set(config_watch *wt, const char *path, const sl_config *cfg) {
  config_watch_free(wt);
  size_t n = 1 + (cfg ? cfg->nfiles : 0);
  wt->paths = calloc(n, sizeof *wt->paths);
  wt->st = calloc(n, sizeof *wt->st);
  wt->seen = calloc(n, sizeof *wt->seen);
  if (!wt->paths || !wt->st || !wt->seen) return;
  wt->paths[wt->n++] = strdup(path);
  for (size_t i = 0; cfg && i < cfg->nfiles; i++)
    wt->paths[wt->n++] = strdup(cfg->files[i]);
  for (size_t i = 0; i < wt->n; i++)
    if (!wt->paths[i] || stat(wt->paths[i], &wt->st[i]))
      memset(&wt->st[i], 0, sizeof wt->st[i]);
}

/* Whether two stat()s of a file differ in what a rewrite changes. */
static int stat_differs(const struct stat *a, const struct stat *b) {
  return a->st_ino != b->st_ino || a->st_size != b->st_size ||
         a->st_mtim.tv_sec != b->st_mtim.tv_sec ||
         a->st_mtim.tv_nsec != b->st_mtim.tv_nsec;
}

int config_watch_settled(config_watch *wt, int64_t now, int64_t settle_ns) {
  int changed = 0, moving = !wt->pending;
  for (size_t i = 0; wt->seen && i < wt->n; i++) {
    struct stat st;
    if (stat(wt->paths[i], &st)) memset(&st, 0, sizeof st);
    changed |= stat_differs(&st, &wt->st[i]);
    moving |= stat_differs(&st, &wt->seen[i]);
    wt->seen[i] = st;
  }
  if (!changed) {
    wt->pending = 0;
    return 0;
  }
  if (moving) { /* (or first seen): the settle interval starts again */
    wt->pending = 1;
    wt->seen_at = now;
  }
  return now - wt->seen_at >= settle_ns;
}

void config_log(const char *what, const sl_config *c) {
  log_msg("info", "%s: %zu domain%s, %zu rule%s", what, c->ndomains,
          c->ndomains == 1 ? "" : "s", c->nlimits, c->nlimits == 1 ? "" : "s");
}

/* Fleet mode: every rule's policy must be one the Redis script decides
   exactly (approximate mode syncs through the same script). Logs each
   that is not; returns how many. */
static int check_fleet_policies(const sl_config *c) {
  int bad = 0;
  for (size_t i = 0; i < c->nlimits; i++) {
    const cfg_limit *l = c->limits[i];
    char err[256];
    if (l->candidate_str && rs_policy_check(&l->candidate, err, sizeof err)) {
      log_msg("error", "%s:%d:%d: %s: candidate: %s", l->pos.file,
              l->pos.line, l->pos.col, l->rule, err);
      bad++;
    }
    if (l->unlimited || l->blocked || !rs_policy_check(&l->policy, err, sizeof err))
      continue;
    log_msg("error", "%s:%d:%d: %s: %s", l->pos.file, l->pos.line,
            l->pos.col, l->rule, err);
    bad++;
  }
  return bad;
}

/* Calendar limits count in windows only the memory and exact backends
   place (the approximate mode's sync and envoy's forced charges count on
   epoch-aligned windows): where `why` names such a mode, logs each
   calendar limit as an error; returns how many. */
static int check_calendar(const sl_config *c, const char *why) {
  int bad = 0;
  for (size_t i = 0; why && i < c->nlimits; i++) {
    const cfg_limit *l = c->limits[i];
    if (l->cal.unit == CAL_NONE) continue;
    log_msg("error", "%s:%d:%d: %s: calendar windows are not supported with %s",
            l->pos.file, l->pos.line, l->pos.col, l->rule, why);
    bad++;
  }
  return bad;
}

const char *config_no_calendar(int fleet, int sync_ms, int charging) {
  if (fleet && sync_ms) return "approximate fleet mode (--sync)";
  if (charging == ENG_CHARGE_ALL) return "--charging envoy";
  return NULL;
}

sl_config *config_load_logged(const char *path, int fleet, int merge,
                              const char *no_calendar) {
  cfg_errors errs = {0};
  unsigned opts =
      merge || config_env_merge_domains() ? CFG_LOAD_MERGE_DOMAINS : 0;
  sl_config *c =
      path ? config_load_opts(path, opts, &errs)
           : config_load_string(config_default_yaml,
                                strlen(config_default_yaml), "<default>", &errs);
  for (size_t i = 0; i < errs.n; i++) log_msg("error", "%s", errs.msgs[i]);
  cfg_errors_free(&errs);
  if (c && ((fleet && check_fleet_policies(c)) |
            check_calendar(c, no_calendar))) {
    config_free(c);
    return NULL;
  }
  return c;
}

void config_reload(server *srv, config_watch *wt) {
  const char *path = srv->o.config_path;
  sl_config *c = config_load_logged(path, srv->fleet, srv->o.merge_domains,
                                    srv->no_calendar);
  if (!c) {
    engine_note_reload_failure(srv->eng);
    log_msg("error", "config reload failed: keeping the running config");
  } else if (engine_reload(srv->eng, c)) {
    log_msg("error", "config reload failed: out of memory; keeping the "
                     "running config");
  } else {
    config_log("config reloaded", engine_config(srv->eng));
  }
  /* Watch what is there now, so a broken file is not retried every second. */
  if (path) config_watch_set(wt, path, c ? engine_config(srv->eng) : NULL);
}
