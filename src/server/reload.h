/*
 * reload.h — the daemon's config: loaded at start, reloaded on SIGHUP or
 * when one of its files changes on disk, each time checked as a whole
 * before it replaces the running one.
 */
#ifndef SLUICE_SERVER_RELOAD_H
#define SLUICE_SERVER_RELOAD_H

#include <stddef.h>
#include <sys/stat.h>

#include "server.h"

/* The files a config came from, as they were when last looked at. */
typedef struct config_watch {
  char **paths;
  struct stat *st;   /* as loaded */
  struct stat *seen; /* as last looked at, while a change settles */
  int64_t seen_at;   /* when seen last changed (ns) */
  int pending;       /* a change is settling */
  size_t n;
} config_watch;

/*
 * Loads the config at path (NULL: the embedded default), logging every
 * error. In fleet mode (either) every rule's policy must also be one the
 * Redis script decides exactly; each that is not is logged. merge (or
 * MERGE_DOMAIN_CONFIG=true in the environment): files may share a domain
 * (CFG_LOAD_MERGE_DOMAINS). no_calendar (NULL: none) names a mode that
 * cannot decide calendar limits: each one is then an error. The config,
 * or NULL.
 */
sl_config *config_load_logged(const char *path, int fleet, int merge,
                              const char *no_calendar);

/* The mode calendar limits cannot be decided in (for config_load_logged's
   no_calendar: "approximate fleet mode (--sync)", "--charging envoy"), or
   NULL where they can. */
const char *config_no_calendar(int fleet, int sync_ms, int charging);

/* Logs "WHAT: N domains, M rules". */
void config_log(const char *what, const sl_config *c);

/*
 * Loads srv's config again; when it is good, the engine switches to it
 * (srv->eng), else the running one stays and the failure is logged and
 * counted. Then *wt watches what is on disk now, so a broken file is not
 * retried every second.
 */
void config_reload(server *srv, config_watch *wt);

/* Watches path (a directory's listing changes its mtime) and every file
   cfg (NULL: none) came from. */
void config_watch_set(config_watch *wt, const char *path, const sl_config *cfg);

/*
 * Whether to reload now: a watched file changed (or appeared, or went)
 * since it was loaded, and has stayed as it is for settle_ns since (now:
 * the caller's clock, in ns). A file being written in parts keeps
 * changing, so it is not loaded before it is whole.
 */
int config_watch_settled(config_watch *wt, int64_t now, int64_t settle_ns);

void config_watch_free(config_watch *wt);

#endif /* SLUICE_SERVER_RELOAD_H */
