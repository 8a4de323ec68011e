/*
 * options.h — `sluice serve`'s command line: what it sets, and the one
 * function that reads it.
 *
 * Every option is a row of one table (options.c, after nginx's
 * ngx_command_t): its name, letter, the field it sets, its kind and bounds,
 * its default and its help line. getopt's long options, the checks with
 * their error messages and the --help text are all generated from it, so an
 * option cannot be accepted without being documented, or documented with a
 * default it does not have.
 */
#ifndef SLUICE_SERVER_OPTIONS_H
#define SLUICE_SERVER_OPTIONS_H

#include <stdint.h>
#include <stdio.h>

#include "../fleet/client.h"
#include "observe.h"
#include "server.h"

/* --batch-max's default: requests per script call (make bench-fleet). */
#define BATCH_MAX_DEFAULT 64

/* Everything the command line sets. */
typedef struct serve_args {
  srv_opts o;           /* what the front ends read (server.h) */
  rc_config redis;      /* --store's Redis, with its timeouts and breaker */
  int fleet;            /* --store named Redis: fleet mode, exact (every
                           decision in Redis) or approximate (--sync) */
  int charging;         /* --charging: ENG_CHARGE_* (engine.h) */
  int on_store_error;   /* CFG_STORE_ERROR_*, for rules that set none */
  double local_fraction;
  int sync_ms;          /* --sync: approximate mode's interval; 0 = exact */
  int batch_max;        /* requests decided by one script call */
  int64_t clock_skew_ms;
  const char *ready_file; /* --ready-file: where to say we listen; NULL */
  /* The config watcher and the state file (docs/server.md). */
  int watch;              /* --watch on: reload a config file that changed */
  int watch_ms;           /* --watch-interval: how often to look */
  int settle_ms;          /* --watch-settle: unchanged this long first */
  const char *state_file; /* --state-file: memory mode's keys; NULL */
  int state_ms;           /* --state-interval: how often to save it */
  observe_opts obs;       /* the denial log and top keys (observe.h) */
} serve_args;

/*
 * Fills *a from argv (argv[0] is "serve"): the defaults first (with
 * $SLUICE_PASSWORD, $SLUICE_ADMIN_TOKEN and $SLUICE_REDIS_PASSWORD), then
 * every option in order. Returns -1 when the daemon should run; otherwise
 * the exit status: 0 after --help (on stdout), 2 after a message on stderr
 * ("sluice serve: --threads '0' is not a number in 1..248").
 */
int serve_args_parse(serve_args *a, int argc, char **argv);

/* Writes the --help text, generated from the table, to f. */
void serve_usage(FILE *f);

#endif /* SLUICE_SERVER_OPTIONS_H */
