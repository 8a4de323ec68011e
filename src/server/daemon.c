/*
 * daemon.c — `sluice serve`: the daemon's process, in three steps.
 *
 *   daemon_start  the config and the engine; in fleet mode, Redis's nodes
 *                 and slot map; the listening sockets; h2o; the workers
 *                 (worker.c); approximate mode's sync thread; and, with
 *                 --ready-file, the bound addresses written for whoever
 *                 waits for the daemon;
 *   daemon_run    the main thread's loop: signals (SIGHUP reloads,
 *                 SIGUSR1 opens the denial log again, SIGTERM/SIGINT
 *                 stop), the store's active expiry a
 *                 bounded step every 100 ms, and a config file that changed
 *                 on disk (reload.c);
 *   daemon_stop   the workers stop accepting and finish what is in flight
 *                 (up to --shutdown-grace), the sync thread pushes its last
 *                 charges, and everything is freed.
 *
 * Workers block the signals (they inherit the main thread's mask), so the
 * main thread alone takes them, synchronously (sigtimedwait).
 *
 * Logs: one line per lifecycle event or error on stderr:
 *   2026-11-21T12:00:00.123Z info: listening on http://127.0.0.1:8080 (port 8080)
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../fleet/fleet.h"
#include "../fleet/script.h"
#include "../fleet/shed_sync.h"
#include "../fleet/sync.h"
#include "../engine/backend.h"
#include "daemon.h"
#include "listen.h"
#include "observe.h"
#include "options.h"
#include "reload.h"
#include "statefile.h"
#include "worker.h"

#define EXPIRE_EVERY_MS 100
#define EXPIRE_SLOTS 8192

/* Everything the daemon holds between its start and its stop. */
typedef struct daemon_state {
  serve_args args;
  server srv;
  rc_topology topo;   /* fleet mode: the nodes (and slot map) found at start */
  rc_shared_map *map; /* a cluster's slot map, shared by the workers */
  h2o_globalconf_t h2o;
  int h2o_up;         /* h2o is configured (h2o_config_dispose it) */
  worker_pool *workers;
  sigset_t sigs;      /* the signals the main thread waits for */
  eng_backend *backend; /* where per-key state lives (the engine's) */
  rs_sync *sync;      /* approximate mode's sync thread */
  fleet_shed_sync *shed; /* fleet mode: load shedding's usage, shared */
  config_watch watch;
  int ready_written;  /* --ready-file is there (remove it at the stop) */
  observe obs;        /* the denial log and top keys */
} daemon_state;

/* ---- start ---- */

/* The config, and the engine deciding on it. 0, or -1 after logging why. */
static int start_engine(daemon_state *d) {
  const serve_args *a = &d->args;
  server *srv = &d->srv;
  /* Who is being limited: the denial log and top keys see every final
     decision through the engine's observer. */
  if (observe_start(&d->obs, &a->obs)) return -1;
  srv->obs = &d->obs;
  srv->no_calendar = config_no_calendar(a->fleet, a->sync_ms, a->charging);
  sl_config *cfg = config_load_logged(srv->o.config_path, srv->fleet,
                                      srv->o.merge_domains, srv->no_calendar);
  if (!cfg) return -1;
  char err[256];
  /* Where per-key state lives: this daemon's memory, or Redis, exactly
     (each decision a script) or approximately (local, synced). */
  fleet_opts fo = {.cluster = a->redis.cluster,
                   .breaker_ms = a->redis.breaker_ms,
                   .batch_max = a->batch_max,
                   .db = a->redis.db};
  d->backend = !srv->fleet ? NULL
               : srv->exact ? fleet_exact_new(&fo)
                            : fleet_approx_new(&fo);
  if (srv->fleet && !d->backend) {
    log_msg("error", "out of memory");
    config_free(cfg);
    return -1;
  }
  engine_opts eo = {.max_memory = srv->o.max_memory,
                    .on_store_error = a->on_store_error,
                    .local_fraction = a->local_fraction,
                    .backend = d->backend,
                    .charging = a->charging,
                    .observe = observe_wanted(&d->obs) ? observe_decision
                                                       : NULL,
                    .observe_ud = &d->obs};
  srv->eng = engine_new(&eo, cfg, err, sizeof err);
  if (!srv->eng) {
    log_msg("error", "%s", err);
    return -1;
  }
  if (observe_metrics(&d->obs, engine_metrics_registry(srv->eng))) {
    log_msg("error", "too many metrics");
    return -1;
  }
  config_log(srv->o.config_path ? srv->o.config_path
                                : "embedded default config",
             engine_config(srv->eng));
  return 0;
}

/* Fleet mode: finds Redis's nodes (and a cluster's slot map) before the
   workers connect. A Redis that does not answer yet is no reason not to
   start: rules answer per on_store_error until it does. */
static void start_fleet(daemon_state *d) {
  const serve_args *a = &d->args;
  if (!a->fleet) return;
  if (a->redis.cluster) d->map = rc_shared_map_new();
  char err[256];
  if (rc_discover(&a->redis, &d->topo, err, sizeof err))
    log_msg("warn", "redis: %s; starting anyway (answering per "
                    "on_store_error until it answers)", err);
  else
    log_msg("info", "redis: %d node%s, script %s loaded, timeout %d ms, "
                    "breaker %d ms, batch window %d us, up to %d "
                    "requests per call", d->topo.nnodes,
            d->topo.nnodes == 1 ? "" : "s", rs_script_sha(),
            a->redis.timeout_ms, a->redis.breaker_ms, a->redis.batch_us,
            a->batch_max);
}

/* h2o's configuration: the HTTP handlers every worker's context uses. */
static void start_h2o(daemon_state *d) {
  h2o_config_init(&d->h2o);
  /* h2o refuses a body over --max-body itself: a declared Content-Length
     at once, before reading any of it; a chunked one as soon as it has
     that much (http_errors.c answers in sluice's JSON). So a connection
     holds at most --max-body of body, and 1,000 connections sending large
     bodies hold 1,000 x 64 KiB by default, not 1,000 x 1 MiB. */
  d->h2o.max_request_entity_size = d->srv.o.max_body;
  d->h2o.http1.req_timeout = (uint64_t)d->srv.o.http_timeout_ms;
  d->h2o.server_name = h2o_iovec_init(H2O_STRLIT("sluice"));
  http_register(&d->h2o, &d->srv);
  d->h2o_up = 1;
}

/*
 * --ready-file: {"pid": N, "http": "ADDR:PORT", "resp": "ADDR:PORT"}, and
 * "grpc": "ADDR:PORT" when gRPC is on (a file without it is the file of
 * before gRPC, byte for byte), a
 * listener that is off as null, written to a temporary file beside it and
 * renamed over it, so a reader sees all of it or nothing. 0, or -1 after
 * logging why.
 */
static int write_ready_file(daemon_state *d) {
  const char *path = d->args.ready_file;
  const server *srv = &d->srv;
  char http[80] = "null", resp[80] = "null", grpc[104] = "", tmp[4096];
  if (srv->o.http_addr) snprintf(http, sizeof http, "\"%s\"", srv->http_at);
  if (srv->o.resp_addr) snprintf(resp, sizeof resp, "\"%s\"", srv->resp_at);
  if (srv->o.grpc_addr)
    snprintf(grpc, sizeof grpc, ", \"grpc\": \"%s\"", srv->grpc_at);
  if (snprintf(tmp, sizeof tmp, "%s.%d.tmp", path, (int)getpid()) >=
      (int)sizeof tmp) {
    log_msg("error", "--ready-file %s: the path is too long", path);
    return -1;
  }
  FILE *f = fopen(tmp, "w");
  int bad = !f;
  if (f) {
    fprintf(f, "{\"pid\": %d, \"http\": %s, \"resp\": %s%s}\n",
            (int)getpid(), http, resp, grpc);
    bad = ferror(f);
    bad |= fclose(f) != 0;
  }
  if (bad || rename(tmp, path)) {
    log_msg("error", "cannot write --ready-file %s: %s", path,
            strerror(errno));
    unlink(tmp);
    return -1;
  }
  d->ready_written = 1;
  return 0;
}

/*
 * Starts the daemon (d->args filled): see the top. 0 when it is serving;
 * -1 after logging why not (daemon_stop then frees what was started).
 */
static int daemon_start(daemon_state *d) {
  const serve_args *a = &d->args;
  server *srv = &d->srv;
  srv->o = a->o;
  srv->fleet = a->fleet;
  srv->exact = a->fleet && !a->sync_ms; /* approximate mode decides locally */
  if (a->clock_skew_ms) clock_set_skew_ns(a->clock_skew_ms * 1000000);
  signal(SIGPIPE, SIG_IGN);
  /* The signals the main thread waits for are blocked before any thread
     starts (the denial log's writer starts with the engine), so that
     every thread inherits the mask: a thread that left them open would
     take one whenever the main thread is not waiting, and their default
     action ends the process. */
  sigemptyset(&d->sigs);
  sigaddset(&d->sigs, SIGINT);
  sigaddset(&d->sigs, SIGTERM);
  sigaddset(&d->sigs, SIGHUP);
  sigaddset(&d->sigs, SIGUSR1);
  pthread_sigmask(SIG_BLOCK, &d->sigs, NULL);
  if (start_engine(d)) return -1;
  if (a->state_file) statefile_load(srv->eng, a->state_file);
  start_fleet(d);

  listen_budgets(srv);
  /* Every worker gets its own listening sockets (same ports). */
  worker_fleet wf = {a->fleet ? &a->redis : NULL, &d->topo, d->map};
  d->workers = workers_new(srv, &d->h2o, &wf);
  if (!d->workers) return -1;
  int ok = workers_listen(d->workers) == 0;
  start_h2o(d);

  if (!ok || workers_start(d->workers)) return -1;
  if (srv->o.http_addr)
    log_msg("info", "listening on http://%s (port %d)", srv->o.http_addr,
            srv->http_port);
  if (srv->o.resp_addr)
    log_msg("info", "listening on redis://%s (port %d)", srv->o.resp_addr,
            srv->resp_port);
  if (srv->o.grpc_addr)
    log_msg("info", "listening on grpc://%s (port %d)", srv->o.grpc_addr,
            srv->grpc_port);
  log_msg("info", "%u worker threads, store cap %zu bytes%s", srv->o.threads,
          srv->o.max_memory, srv->o.password ? ", RESP AUTH required" : "");

  if (a->sync_ms) {
    d->sync = rs_sync_start(fleet_approx_of(d->backend), &a->redis, &d->topo,
                            a->sync_ms);
    if (!d->sync) return -1;
    log_msg("info", "approximate mode: local decisions, synced with redis "
                    "every %d ms", a->sync_ms);
  }
  /* Fleet usage of the shedders: one Redis (a cluster's daemons shed on
     their own usage: docs/shedding.md). */
  if (srv->fleet && !a->redis.cluster &&
      !(d->shed = fleet_shed_sync_new(&a->redis)))
    return -1;
  if (a->ready_file && write_ready_file(d)) return -1;
  return 0;
}

/* ---- run ---- */

/*
 * The main thread's loop, until SIGTERM or SIGINT: a reload on SIGHUP or
 * when a config file changed (looked at every second), and a bounded step
 * of the store's active expiry every EXPIRE_EVERY_MS.
 */
static void daemon_run(daemon_state *d) {
  server *srv = &d->srv;
  const char *path = srv->o.config_path;
  if (path) config_watch_set(&d->watch, path, engine_config(srv->eng));
  const serve_args *a = &d->args;
  /* Intervals on the monotonic clock: a step of the wall clock must not
     hold a save or a reload back, nor fire one early. */
  int64_t last_watch = clock_mono_ns(), last_state = last_watch;
  for (;;) {
    struct timespec tick = {0, EXPIRE_EVERY_MS * 1000000};
    int sig = sigtimedwait(&d->sigs, NULL, &tick);
    if (sig == SIGINT || sig == SIGTERM) {
      log_msg("info", "%s: stopping (in-flight requests get up to %d ms)",
              sig == SIGINT ? "SIGINT" : "SIGTERM", srv->o.shutdown_grace_ms);
      return;
    }
    if (sig == SIGUSR1) /* logrotate moved the denial log */
      observe_reopen(&d->obs);
    if (sig == SIGHUP) {
      log_msg("info", "SIGHUP: reloading the config");
      if (path)
        config_reload(srv, &d->watch);
      else
        log_msg("info", "no --config: nothing to reload");
    }
    int64_t mono = clock_mono_ns();
    listen_log(srv, mono);
    sl_store_expire(engine_store(srv->eng), clock_wall_ns(), EXPIRE_SLOTS);
    engine_maintain(srv->eng);
    if (d->shed) fleet_shed_sync_round(d->shed, srv->eng, clock_wall_ns());
    if (a->state_file && mono - last_state >= a->state_ms * 1000000LL) {
      last_state = mono;
      statefile_save(srv->eng, a->state_file, 0);
    }
    if (path && a->watch && mono - last_watch >= a->watch_ms * 1000000LL) {
      last_watch = mono;
      if (config_watch_settled(&d->watch, mono, a->settle_ms * 1000000LL)) {
        log_msg("info", "config changed on disk: reloading");
        config_reload(srv, &d->watch);
      }
    }
  }
}

/* ---- stop ---- */

/*
 * Stops what daemon_start started (all of it, or as far as it got: ok 0)
 * and frees it; the workers drain first. Returns the exit status: 0 after
 * a clean stop, 1 when the daemon could not start.
 */
static int daemon_stop(daemon_state *d, int ok) {
  server *srv = &d->srv;
  if (!srv->eng) { /* nothing started (the config did not load) */
    observe_stop(&d->obs);
    return 1;
  }
  atomic_store(&srv->stopping, 1);
  if (d->workers) workers_join(d->workers);
  observe_stop(&d->obs); /* the queued lines written */
  if (ok && d->args.state_file) statefile_save(srv->eng, d->args.state_file, 1);
  rs_sync_stop(d->sync); /* pushes the last interval's charges */
  fleet_shed_sync_free(d->shed);
  workers_free(d->workers);
  if (d->h2o_up) h2o_config_dispose(&d->h2o);
  config_watch_free(&d->watch);
  engine_free(srv->eng);
  rc_shared_map_free(d->map); /* (after the workers' clients) */
  if (d->ready_written) unlink(d->args.ready_file);
  log_msg("info", ok ? "stopped" : "could not start");
  return ok ? 0 : 1;
}

int serve_main(int argc, char **argv) {
  static daemon_state d; /* large (the slot map); one per process */
  memset(&d, 0, sizeof d);
  int status = serve_args_parse(&d.args, argc, argv);
  if (status >= 0) return status;
  int ok = daemon_start(&d) == 0;
  if (ok) daemon_run(&d);
  return daemon_stop(&d, ok);
}
