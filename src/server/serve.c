/*
 * serve.c — `sluice serve`: the daemon's process.
 *
 * Threads. N workers, each with its own h2o event loop serving HTTP and the
 * Redis protocol on listening sockets of its own (SO_REUSEPORT: the kernel
 * spreads connections), all deciding through one shared engine and store.
 * The main thread owns signals and time: it reloads the config on SIGHUP or
 * when a config file changes, runs the store's active expiry a bounded step
 * at a time, and on SIGTERM/SIGINT lets the workers stop accepting, finish
 * what is in flight (up to --shutdown-grace), and exit 0.
 *
 * Logs: one line per lifecycle event or error on stderr:
 *   2026-11-21T12:00:00.123Z info: listening on http://127.0.0.1:8080
 */
#include <errno.h>
#include <netdb.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../fleet/client.h"
#include "../fleet/script.h"
#include "../fleet/sync.h"
#include "daemon.h"
#include "options.h"
#include "server.h"

#define EXPIRE_EVERY_MS 100
#define EXPIRE_SLOTS 8192
#define WATCH_EVERY_MS 1000

/* ---- listeners ---- */

/* Splits "HOST:PORT" / "[V6]:PORT" / ":PORT" into host and port. */
static int split_addr(const char *addr, char *host, size_t hlen, char *port,
                      size_t plen) {
  const char *colon;
  if (addr[0] == '[') {
    const char *end = strchr(addr, ']');
    if (!end || end[1] != ':') return -1;
    snprintf(host, hlen, "%.*s", (int)(end - addr - 1), addr + 1);
    colon = end + 1;
  } else {
    colon = strrchr(addr, ':');
    if (!colon) return -1;
    snprintf(host, hlen, "%.*s", (int)(colon - addr), addr);
  }
  snprintf(port, plen, "%s", colon + 1);
  if (!*port) return -1;
  if (!*host) snprintf(host, hlen, "127.0.0.1");
  return 0;
}

/*
 * A listening socket on addr (port `port_override` if > 0). fd or -1.
 * SO_REUSEPORT lets the workers share a port; `probe` first binds once
 * without it, so a port another process holds is an error ("address in
 * use"), not silently shared with it.
 */
static int listen_on(const char *addr, int port_override, int *bound_port,
                     int probe) {
  char host[256], port[16];
  if (split_addr(addr, host, sizeof host, port, sizeof port)) {
    log_msg("error", "address '%s' is not HOST:PORT", addr);
    return -1;
  }
  if (port_override > 0) snprintf(port, sizeof port, "%d", port_override);
  struct addrinfo hints = {0}, *res;
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  int rc = getaddrinfo(strcmp(host, "*") ? host : NULL, port, &hints, &res);
  if (rc) {
    log_msg("error", "address '%s': %s", addr, gai_strerror(rc));
    return -1;
  }
  int fd = -1;
  for (struct addrinfo *ai = res; ai && fd < 0; ai = ai->ai_next) {
    fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK,
                0);
    if (fd < 0) continue;
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (probe) {
      int p = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, 0);
      if (p >= 0) {
        setsockopt(p, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        int busy = bind(p, ai->ai_addr, ai->ai_addrlen) != 0 &&
                   errno == EADDRINUSE;
        close(p);
        if (busy && port_override <= 0 && strcmp(port, "0")) {
          log_msg("error", "cannot listen on %s: address in use", addr);
          close(fd);
          fd = -1;
          continue;
        }
      }
    }
    setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one);
    if (bind(fd, ai->ai_addr, ai->ai_addrlen) || listen(fd, SOMAXCONN)) {
      log_msg("error", "cannot listen on %s: %s", addr, strerror(errno));
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(res);
  if (fd >= 0) {
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    getsockname(fd, (struct sockaddr *)&ss, &sl);
    *bound_port = ntohs(ss.ss_family == AF_INET6
                            ? ((struct sockaddr_in6 *)&ss)->sin6_port
                            : ((struct sockaddr_in *)&ss)->sin_port);
  }
  return fd;
}

/* ---- workers ---- */

typedef struct worker_boot {
  worker w;
  int http_fd, resp_fd;
  const rc_config *rcfg; /* fleet mode (either), else NULL */
  const rc_topology *topo;
  rc_shared_map *map; /* the slot map the workers' clients share */
} worker_boot;

/* The engine's remote, on this worker's Redis client. */
static int remote_send(void *io, int slot, char *cmd, size_t len,
                       eng_reply_fn cb, void *ud) {
  return rc_send(io, slot, cmd, len, cb, ud);
}

static h2o_globalconf_t h2o_conf;

/* An open HTTP connection: its socket and fd, so that a stop can close
   the idle ones (h2o 2.2's shutdown request closes only HTTP/2 ones). */
typedef struct http_conn {
  h2o_linklist_t link;
  worker *w;
  h2o_socket_t *sock;
  int fd;
  size_t read_at_request; /* sock->bytes_read when a request was last
                             complete (its handler ran) */
} http_conn;

static void on_http_close(void *data) {
  http_conn *hc = data;
  worker *w = hc->w;
  h2o_linklist_unlink(&hc->link);
  free(hc);
  w->http_conns--;
  atomic_fetch_sub(&w->srv->connections, 1);
  engine_connections(w->et, 0, -1);
}

void srv_note_request(h2o_req_t *req) {
  h2o_socket_t *sock = req->conn->callbacks->get_socket
                           ? req->conn->callbacks->get_socket(req->conn)
                           : NULL;
  if (sock && sock->on_close.cb == on_http_close)
    ((http_conn *)sock->on_close.data)->read_at_request = sock->bytes_read;
}

/*
 * Stopping: an HTTP connection is idle when nothing has been read since its
 * last complete request (handlers answer at once) and no answer is being
 * written; its read side is shut, so h2o sees the end of the stream and
 * closes it cleanly. A request still arriving, or an answer still being
 * written, goes on until done.
 */
static void close_idle_http(worker *w) {
  for (h2o_linklist_t *n = w->http_list.next; n != &w->http_list; n = n->next) {
    http_conn *hc = H2O_STRUCT_FROM_MEMBER(http_conn, link, n);
    if (!hc->sock->_cb.write && hc->sock->bytes_read == hc->read_at_request)
      shutdown(hc->fd, SHUT_RD);
  }
}

/* Admits one more connection under --max-connections. */
static int admit(worker *w, h2o_socket_t *sock) {
  long open = atomic_fetch_add(&w->srv->connections, 1);
  if (open >= w->srv->o.max_connections) {
    atomic_fetch_sub(&w->srv->connections, 1);
    engine_count(w->et, EC_CONNECTIONS_REJECTED, 1);
    h2o_socket_close(sock);
    return 0;
  }
  return 1;
}

static void on_accept_http(h2o_socket_t *listener, const char *err) {
  worker *w = listener->data;
  if (err) return;
  for (int i = 0; i < 16; i++) {
    /* accept4 ourselves (not h2o_evloop_socket_accept): we keep the fd. */
    int fd = accept4(w->http_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) return;
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    h2o_socket_t *sock = h2o_evloop_socket_create(w->loop, fd, 0);
    if (!admit(w, sock)) continue;
    http_conn *hc = malloc(sizeof *hc);
    if (!hc) {
      atomic_fetch_sub(&w->srv->connections, 1);
      h2o_socket_close(sock);
      continue;
    }
    *hc = (http_conn){.w = w, .sock = sock, .fd = fd};
    h2o_linklist_insert(&w->http_list, &hc->link);
    w->http_conns++;
    engine_connections(w->et, 0, 1);
    sock->on_close.cb = on_http_close;
    sock->on_close.data = hc;
    h2o_accept(&w->accept_ctx, sock);
  }
}

static void on_accept_resp(h2o_socket_t *listener, const char *err) {
  worker *w = listener->data;
  if (err) return;
  for (int i = 0; i < 16; i++) {
    h2o_socket_t *sock = h2o_evloop_socket_accept(listener);
    if (!sock) return;
    if (admit(w, sock)) resp_accept(w, sock);
  }
}

/* Drops the timer entries h2o still has queued (its context keeps a
   periodic one of its own), so the context can be disposed of once every
   connection is gone. */
static void unlink_timers(h2o_context_t *ctx) {
  h2o_timeout_t *ts[] = {&ctx->zero_timeout, &ctx->one_sec_timeout,
                         &ctx->hundred_ms_timeout, &ctx->handshake_timeout,
                         &ctx->http1.req_timeout, &ctx->http2.idle_timeout,
                         &ctx->http2.graceful_shutdown_timeout,
                         &ctx->proxy.io_timeout};
  for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++)
    while (!h2o_linklist_is_empty(&ts[i]->_entries))
      h2o_timeout_unlink(H2O_STRUCT_FROM_MEMBER(
          h2o_timeout_entry_t, _link, ts[i]->_entries.next));
}

static h2o_socket_t *listener_socket(worker *w, int fd, h2o_socket_cb cb) {
  if (fd < 0) return NULL;
  h2o_socket_t *sock =
      h2o_evloop_socket_create(w->loop, fd, H2O_SOCKET_FLAG_DONT_READ);
  sock->data = w;
  h2o_socket_read_start(sock, cb);
  return sock;
}

static void *worker_main(void *arg) {
  worker_boot *b = arg;
  worker *w = &b->w;
  server *srv = w->srv;
  w->loop = h2o_evloop_create();
  h2o_context_init(&w->ctx, w->loop, &h2o_conf);
  w->accept_ctx.ctx = &w->ctx;
  w->accept_ctx.hosts = h2o_conf.hosts;
  h2o_linklist_init_anchor(&w->http_list);
  w->http_fd = b->http_fd;
  w->http_listener = listener_socket(w, b->http_fd, on_accept_http);
  w->resp_listener = listener_socket(w, b->resp_fd, on_accept_resp);

  if (b->rcfg) {
    /* Exact mode decides through it; approximate mode only resets (its
       DELs): decisions there never wait, and the client connects on its
       first command. */
    w->rc = rc_client_new(w->loop, b->rcfg, b->topo);
    if (w->rc && b->map) rc_client_share(w->rc, b->map);
    if (w->rc) {
      engine_thread_set_remote(w->et, remote_send, w->rc);
      w->remote = srv->remote;
    } else {
      log_msg("error", "worker %u: no Redis client (out of memory): %s",
              w->index,
              srv->remote ? "answering per on_store_error" : "its resets fail");
    }
  }

  int draining = 0;
  int64_t deadline = 0;
  for (;;) {
    engine_thread_quiesce(w->et);
    h2o_evloop_run(w->loop, 100);
    if (w->rc) { /* this pass's decisions: batched calls, one pipeline */
      engine_thread_flush(w->et);
      rc_flush(w->rc);
    }
    if (atomic_load(&srv->stopping) && !draining) {
      /* Stop accepting; let in-flight work finish. */
      if (w->http_listener) h2o_socket_close(w->http_listener);
      if (w->resp_listener) h2o_socket_close(w->resp_listener);
      w->http_listener = w->resp_listener = NULL;
      h2o_context_request_shutdown(&w->ctx);
      close_idle_http(w);
      resp_shutdown(w);
      draining = 1;
      deadline = clock_wall_ns() + (int64_t)srv->o.shutdown_grace_ms * 1000000;
    }
    if (draining && ((w->http_conns == 0 && w->resp_conns == 0) ||
                     clock_wall_ns() > deadline))
      break;
    if (draining) close_idle_http(w); /* those that were busy a moment ago */
  }
  /* Requests still waiting for Redis are answered per on_store_error. */
  rc_client_free(w->rc);
  w->rc = NULL;
  resp_worker_dispose(w);
  /* HTTP connections still open past the grace close with the loop. */
  engine_thread_offline(w->et);
  return NULL;
}

/* ---- config ---- */

typedef struct watch {
  char **paths;
  struct stat *st;
  size_t n;
} watch;

static void watch_free(watch *wt) {
  for (size_t i = 0; i < wt->n; i++) free(wt->paths[i]);
  free(wt->paths);
  free(wt->st);
  wt->paths = NULL;
  wt->st = NULL;
  wt->n = 0;
}

/* Watches the config path (a directory's listing changes its mtime) and
   every file the config came from. */
static void watch_set(watch *wt, const char *path, const sl_config *cfg) {
  watch_free(wt);
  size_t n = 1 + (cfg ? cfg->nfiles : 0);
  wt->paths = calloc(n, sizeof *wt->paths);
  wt->st = calloc(n, sizeof *wt->st);
  if (!wt->paths || !wt->st) return;
  wt->paths[wt->n++] = strdup(path);
  for (size_t i = 0; cfg && i < cfg->nfiles; i++)
    wt->paths[wt->n++] = strdup(cfg->files[i]);
  for (size_t i = 0; i < wt->n; i++)
    if (!wt->paths[i] || stat(wt->paths[i], &wt->st[i]))
      memset(&wt->st[i], 0, sizeof wt->st[i]);
}

static int watch_changed(const watch *wt) {
  for (size_t i = 0; i < wt->n; i++) {
    struct stat st;
    if (stat(wt->paths[i], &st)) memset(&st, 0, sizeof st);
    if (st.st_ino != wt->st[i].st_ino || st.st_size != wt->st[i].st_size ||
        st.st_mtim.tv_sec != wt->st[i].st_mtim.tv_sec ||
        st.st_mtim.tv_nsec != wt->st[i].st_mtim.tv_nsec)
      return 1;
  }
  return 0;
}

static void log_config(const char *what, const sl_config *c) {
  log_msg("info", "%s: %zu domain%s, %zu rule%s", what, c->ndomains,
          c->ndomains == 1 ? "" : "s", c->nlimits, c->nlimits == 1 ? "" : "s");
}

/* Fleet mode: every rule's policy must be one the Redis script decides
   exactly. Logs each that is not; returns how many. */
static int check_remote_policies(const sl_config *c) {
  int bad = 0;
  for (size_t i = 0; i < c->nlimits; i++) {
    const cfg_limit *l = c->limits[i];
    char err[256];
    if (l->unlimited || l->blocked || !rs_policy_check(&l->policy, err, sizeof err))
      continue;
    log_msg("error", "%s:%d:%d: %s: %s", l->pos.file, l->pos.line,
            l->pos.col, l->rule, err);
    bad++;
  }
  return bad;
}

static sl_config *load(const char *path, int remote) {
  cfg_errors errs = {0};
  sl_config *c =
      path ? config_load(path, &errs)
           : config_load_string(config_default_yaml,
                                strlen(config_default_yaml), "<default>", &errs);
  for (size_t i = 0; i < errs.n; i++) log_msg("error", "%s", errs.msgs[i]);
  cfg_errors_free(&errs);
  if (c && remote && check_remote_policies(c)) {
    config_free(c);
    return NULL;
  }
  return c;
}

static void reload(server *srv, watch *wt) {
  const char *path = srv->o.config_path;
  sl_config *c = load(path, srv->fleet);
  if (!c) {
    engine_note_reload_failure(srv->eng);
    log_msg("error", "config reload failed: keeping the running config");
  } else if (engine_reload(srv->eng, c)) {
    log_msg("error", "config reload failed: out of memory; keeping the "
                     "running config");
  } else {
    log_config("config reloaded", engine_config(srv->eng));
  }
  /* Watch what is there now, so a broken file is not retried every second. */
  if (path) watch_set(wt, path, c ? engine_config(srv->eng) : NULL);
}

/* ---- the command ---- */

int serve_main(int argc, char **argv) {
  static serve_args args;
  int status = serve_args_parse(&args, argc, argv);
  if (status >= 0) return status;
  server srv;
  memset(&srv, 0, sizeof srv);
  srv.o = args.o;
  srv_opts *o = &srv.o;
  rc_config rcfg = args.redis;
  int remote = args.fleet, store_error = args.on_store_error;
  int sync_ms = args.sync_ms, batch_max = args.batch_max;
  double local_fraction = args.local_fraction;
  if (args.clock_skew_ms) clock_set_skew_ns(args.clock_skew_ms * 1000000);
  srv.remote = remote && !sync_ms; /* approximate mode decides locally */
  srv.fleet = remote;

  signal(SIGPIPE, SIG_IGN);
  sl_config *cfg = load(o->config_path, remote);
  /* (approximate mode syncs through the same script: same policy range) */
  if (!cfg) return 1;
  char err[256];
  engine_opts eo = {.max_memory = o->max_memory,
                    .remote = srv.remote,
                    .cluster = rcfg.cluster,
                    .on_store_error = store_error,
                    .local_fraction = local_fraction,
                    .breaker_ms = rcfg.breaker_ms,
                    .batch_max = batch_max,
                    .sync = sync_ms > 0,
                    .db = rcfg.db};
  srv.eng = engine_new(&eo, cfg, err, sizeof err);
  if (!srv.eng) {
    log_msg("error", "%s", err);
    return 1;
  }
  log_config(o->config_path ? o->config_path : "embedded default config",
             engine_config(srv.eng));

  /* Fleet mode: find the nodes (and the slot map) before the workers. */
  static rc_topology topo;
  rc_shared_map *map = remote && rcfg.cluster ? rc_shared_map_new() : NULL;
  if (remote) {
    if (rc_discover(&rcfg, &topo, err, sizeof err))
      log_msg("warn", "redis: %s; starting anyway (answering per "
                      "on_store_error until it answers)", err);
    else
      log_msg("info", "redis: %d node%s, script %s loaded, timeout %d ms, "
                      "breaker %d ms, batch window %d us, up to %d "
                      "requests per call", topo.nnodes,
              topo.nnodes == 1 ? "" : "s", rs_script_sha(), rcfg.timeout_ms,
              rcfg.breaker_ms, rcfg.batch_us, batch_max);
  }

  /* Every worker gets its own listening sockets (same ports). */
  worker_boot *boots = calloc(o->threads, sizeof *boots);
  if (!boots) return 1;
  int ok = 1;
  for (unsigned i = 0; i < o->threads && ok; i++) {
    worker_boot *b = &boots[i];
    b->http_fd = b->resp_fd = -1;
    b->rcfg = remote ? &rcfg : NULL;
    b->topo = &topo;
    b->map = map;
    if (o->http_addr)
      ok &= (b->http_fd = listen_on(o->http_addr, srv.http_port,
                                    &srv.http_port, i == 0)) >= 0;
    if (ok && o->resp_addr)
      ok &= (b->resp_fd = listen_on(o->resp_addr, srv.resp_port,
                                    &srv.resp_port, i == 0)) >= 0;
  }
  h2o_config_init(&h2o_conf);
  /* sluice answers 413 in JSON up to 1 MiB (the largest --max-body); h2o
     refuses anything larger itself, without reading it. */
  h2o_conf.max_request_entity_size = (size_t)1 << 20;
  h2o_conf.server_name = h2o_iovec_init(H2O_STRLIT("sluice"));
  http_register(&h2o_conf, &srv);

  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGTERM);
  sigaddset(&sigs, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &sigs, NULL); /* workers inherit the mask */

  unsigned started = 0;
  for (unsigned i = 0; i < o->threads && ok; i++) {
    worker *w = &boots[i].w;
    w->srv = &srv;
    w->index = i;
    w->et = engine_thread_new(srv.eng);
    if (!w->et || resp_worker_init(w) ||
        pthread_create(&w->tid, NULL, worker_main, &boots[i]))
      ok = 0;
    else
      started++;
  }
  if (ok) {
    if (o->http_addr)
      log_msg("info", "listening on http://%s (port %d)", o->http_addr,
              srv.http_port);
    if (o->resp_addr)
      log_msg("info", "listening on redis://%s (port %d)", o->resp_addr,
              srv.resp_port);
    log_msg("info", "%u worker threads, store cap %zu bytes%s", o->threads,
            o->max_memory, o->password ? ", RESP AUTH required" : "");
  }

  rs_sync *sync = NULL;
  if (ok && sync_ms) {
    sync = rs_sync_start(srv.eng, &rcfg, &topo, sync_ms);
    if (sync)
      log_msg("info", "approximate mode: local decisions, synced with "
                      "redis every %d ms", sync_ms);
    else
      ok = 0;
  }

  watch wt = {0};
  if (o->config_path) watch_set(&wt, o->config_path, engine_config(srv.eng));
  int64_t last_watch = clock_wall_ns();
  while (ok) {
    struct timespec tick = {0, EXPIRE_EVERY_MS * 1000000};
    int sig = sigtimedwait(&sigs, NULL, &tick);
    if (sig == SIGINT || sig == SIGTERM) {
      log_msg("info", "%s: stopping (in-flight requests get up to %d ms)",
              sig == SIGINT ? "SIGINT" : "SIGTERM", o->shutdown_grace_ms);
      break;
    }
    if (sig == SIGHUP) {
      log_msg("info", "SIGHUP: reloading the config");
      if (o->config_path) reload(&srv, &wt);
      else log_msg("info", "no --config: nothing to reload");
    }
    int64_t now = clock_wall_ns();
    sl_store_expire(engine_store(srv.eng), now, EXPIRE_SLOTS);
    if (o->config_path && now - last_watch >= WATCH_EVERY_MS * 1000000LL) {
      last_watch = now;
      if (watch_changed(&wt)) {
        log_msg("info", "config changed on disk: reloading");
        reload(&srv, &wt);
      }
    }
  }
  atomic_store(&srv.stopping, 1);
  for (unsigned i = 0; i < started; i++) pthread_join(boots[i].w.tid, NULL);
  rs_sync_stop(sync); /* pushes the last interval's charges */
  for (unsigned i = 0; i < o->threads; i++) {
    worker_boot *b = &boots[i];
    if (b->w.loop) {
      unlink_timers(&b->w.ctx);
      h2o_context_dispose(&b->w.ctx);
      h2o_evloop_destroy(b->w.loop);
    } else {
      if (b->http_fd >= 0) close(b->http_fd);
      if (b->resp_fd >= 0) close(b->resp_fd);
    }
    resp_worker_dispose(&b->w);
    engine_thread_free(b->w.et);
  }
  h2o_config_dispose(&h2o_conf);
  watch_free(&wt);
  engine_free(srv.eng);
  free(boots);
  rc_shared_map_free(map); /* (after the workers' clients) */
  log_msg("info", ok ? "stopped" : "could not start");
  return ok ? 0 : 1;
}
