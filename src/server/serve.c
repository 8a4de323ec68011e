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
#include <getopt.h>
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

#include "../base/num.h"
#include "../fleet/client.h"
#include "../fleet/script.h"
#include "../fleet/fleet.h"
#include "../fleet/sync.h"
#include "daemon.h"
#include "redis_h2o.h"
#include "server.h"

#define EXPIRE_EVERY_MS 100
#define EXPIRE_SLOTS 8192
#define WATCH_EVERY_MS 1000

/* --batch-max's default: requests per script call (make bench-fleet). */
#define BATCH_MAX_DEFAULT 64

static void serve_usage(FILE *f) {
  fprintf(f,
          "usage: sluice serve [OPTIONS]\n"
          "\n"
          "The rate limit daemon: decisions over HTTP and the Redis protocol,\n"
          "from envoyproxy/ratelimit-style YAML rules (or ad-hoc policies).\n"
          "\n"
          "options:\n"
          "  --http ADDR:PORT       HTTP listener (default 127.0.0.1:8080;\n"
          "                         'off' to disable)\n"
          "  --resp ADDR:PORT       Redis-protocol listener (default\n"
          "                         127.0.0.1:6390; 'off' to disable)\n"
          "  -c, --config PATH      YAML file, or directory of *.yaml (one\n"
          "                         domain each); default: the embedded\n"
          "                         domain 'default', key at\n"
          "                         sliding_window:100/m\n"
          "  -t, --threads N        worker threads (default: cores)\n"
          "  --deny-status CODE     HTTP status of a denial (default 429; 403\n"
          "                         for nginx auth_request)\n"
          "  -m, --max-memory BYTES store cap (K/M/G; default 128M)\n"
          "  --headers STYLE        ietf, x, both (default) or none\n"
          "  --password PASS        require AUTH on RESP (or $SLUICE_PASSWORD)\n"
          "  --admin-token TOKEN    bearer token for /admin/* (or\n"
          "                         $SLUICE_ADMIN_TOKEN); without one, only\n"
          "                         loopback clients may use them\n"
          "  --max-connections N    open connections at most (default 10000)\n"
          "  --max-body BYTES       POST body limit (default 64K)\n"
          "  --max-header-bytes N   request line + headers limit (default 8K)\n"
          "  --max-key BYTES        longest key or descriptor value (default\n"
          "                         %d)\n"
          "  --trust-forwarded      take $remote_addr from X-Forwarded-For from\n"
          "                         any peer (default: loopback peers only)\n"
          "  --shutdown-grace MS    time in-flight requests get on SIGTERM\n"
          "                         (default 5000)\n"
          "\n"
          "fleet mode (one limit across many daemons; docs/fleet.md):\n"
          "  --store URL            memory (default), redis://[[USER]:PASS@]\n"
          "                         HOST:PORT[/DB], or redis-cluster://HOST:PORT\n"
          "                         [,HOST:PORT...]; the password may also come\n"
          "                         from $SLUICE_REDIS_PASSWORD\n"
          "  --redis-timeout MS     every Redis call, connects too (default 50)\n"
          "  --batch-window US      wait up to this long to pipeline more\n"
          "                         decisions together (default 0: send at the\n"
          "                         end of each event-loop pass)\n"
          "  --batch-max N          requests decided by one script call: a\n"
          "                         thread's requests of one event-loop pass\n"
          "                         share calls of up to N (1..255, default\n"
          "                         %d; 1 = a call each)\n"
          "  --breaker-interval MS  a failed Redis is left alone this long\n"
          "                         before a probe (default 1000)\n"
          "  --on-store-error MODE  allow (default), deny, or local[:FRACTION]\n"
          "                         (an in-memory limiter at FRACTION of the\n"
          "                         limit, default 0.5), for rules that set no\n"
          "                         on_store_error of their own\n"
          "  --sync MS              approximate mode: decide locally, and every\n"
          "                         MS push local charges to Redis and pull the\n"
          "                         fleet's level, debt included: over the\n"
          "                         limit, every daemon owes the excess\n"
          "                         (docs/fleet.md; default: exact mode)\n"
          "  --clock-skew MS        tests: run this daemon's clock MS off (exact\n"
          "                         mode decides on Redis's clock regardless)\n"
          "  -h, --help             this help\n"
          "\n"
          "Signals: SIGHUP reloads the config (a changed config file reloads\n"
          "too; an invalid one is reported and the old one kept); SIGTERM and\n"
          "SIGINT stop gracefully. See docs/server.md.\n",
          SL_KEY_MAX, BATCH_MAX_DEFAULT);
}

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
                       fleet_reply_fn cb, void *ud) {
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
    rc_loop io = redis_h2o_loop(w->loop);
    w->rc = rc_client_new(&io, b->rcfg, b->topo, NULL);
    if (w->rc && b->map) rc_client_share(w->rc, b->map);
    if (w->rc) {
      fleet_thread_set_transport(w->et, remote_send, w->rc);
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
  sl_config *c = load(path, srv->remote);
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

static int parse_size_opt(const char *name, const char *v, int64_t min,
                          int64_t max, int suffix, int64_t *out) {
  if (parse_int(v, min, max, suffix, out)) {
    fprintf(stderr, "sluice serve: --%s '%s' is not a number in %lld..%lld\n",
            name, v, (long long)min, (long long)max);
    return -1;
  }
  return 0;
}

int serve_main(int argc, char **argv) {
  static const struct option opts[] = {
      {"http", required_argument, NULL, 1},
      {"resp", required_argument, NULL, 2},
      {"config", required_argument, NULL, 'c'},
      {"threads", required_argument, NULL, 't'},
      {"deny-status", required_argument, NULL, 3},
      {"max-memory", required_argument, NULL, 'm'},
      {"headers", required_argument, NULL, 4},
      {"password", required_argument, NULL, 5},
      {"admin-token", required_argument, NULL, 6},
      {"max-connections", required_argument, NULL, 7},
      {"max-body", required_argument, NULL, 8},
      {"max-header-bytes", required_argument, NULL, 9},
      {"trust-forwarded", no_argument, NULL, 10},
      {"shutdown-grace", required_argument, NULL, 11},
      {"max-key", required_argument, NULL, 12},
      {"store", required_argument, NULL, 13},
      {"redis-timeout", required_argument, NULL, 14},
      {"batch-window", required_argument, NULL, 15},
      {"breaker-interval", required_argument, NULL, 16},
      {"on-store-error", required_argument, NULL, 17},
      {"clock-skew", required_argument, NULL, 18},
      {"sync", required_argument, NULL, 19},
      {"batch-max", required_argument, NULL, 20},
      {"help", no_argument, NULL, 'h'},
      {NULL, 0, NULL, 0}};
  server srv;
  memset(&srv, 0, sizeof srv);
  srv_opts *o = &srv.o;
  o->http_addr = "127.0.0.1:8080";
  o->resp_addr = "127.0.0.1:6390";
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  o->threads = cores > 0 ? (unsigned)cores : 1;
  o->deny_status = 429;
  o->max_memory = (size_t)128 << 20;
  o->header_style = HDR_IETF | HDR_X;
  o->password = getenv("SLUICE_PASSWORD");
  o->admin_token = getenv("SLUICE_ADMIN_TOKEN");
  o->max_connections = 10000;
  o->max_body = 64 << 10;
  o->max_header_bytes = 8 << 10;
  o->max_key = SL_KEY_MAX;
  o->shutdown_grace_ms = 5000;
  rc_config rcfg;
  memset(&rcfg, 0, sizeof rcfg);
  rcfg.timeout_ms = 50;
  rcfg.breaker_ms = 1000;
  int remote = 0, store_error = CFG_STORE_ERROR_ALLOW, sync_ms = 0;
  int batch_max = BATCH_MAX_DEFAULT;
  double local_fraction = CFG_LOCAL_FRACTION_DEFAULT;
  int c;
  int64_t v;
  optind = 1;
  while ((c = getopt_long(argc, argv, "c:t:m:h", opts, NULL)) != -1) {
    switch (c) {
    case 1:
      o->http_addr = strcmp(optarg, "off") ? optarg : NULL;
      break;
    case 2:
      o->resp_addr = strcmp(optarg, "off") ? optarg : NULL;
      break;
    case 'c':
      o->config_path = optarg;
      break;
    case 't':
      if (parse_size_opt("threads", optarg, 1, ENG_MAX_THREADS - 8, 0, &v))
        return 2;
      o->threads = (unsigned)v;
      break;
    case 3:
      if (parse_size_opt("deny-status", optarg, 400, 599, 0, &v)) return 2;
      o->deny_status = (int)v;
      break;
    case 'm':
      if (parse_size_opt("max-memory", optarg, 1 << 20, INT64_MAX, 1, &v))
        return 2;
      o->max_memory = (size_t)v;
      break;
    case 4:
      if (!strcmp(optarg, "ietf"))
        o->header_style = HDR_IETF;
      else if (!strcmp(optarg, "x"))
        o->header_style = HDR_X;
      else if (!strcmp(optarg, "both"))
        o->header_style = HDR_IETF | HDR_X;
      else if (!strcmp(optarg, "none"))
        o->header_style = 0;
      else {
        fprintf(stderr, "sluice serve: --headers '%s': expected ietf, x, "
                        "both or none\n", optarg);
        return 2;
      }
      break;
    case 5:
      o->password = optarg;
      break;
    case 6:
      o->admin_token = optarg;
      break;
    case 7:
      if (parse_size_opt("max-connections", optarg, 1, 1000000, 0, &v))
        return 2;
      o->max_connections = (long)v;
      break;
    case 8:
      if (parse_size_opt("max-body", optarg, 64, 1 << 20, 1, &v)) return 2;
      o->max_body = (size_t)v;
      break;
    case 9:
      if (parse_size_opt("max-header-bytes", optarg, 256, 256 << 10, 1, &v))
        return 2;
      o->max_header_bytes = (size_t)v;
      break;
    case 10:
      o->trust_forwarded = 1;
      break;
    case 11:
      if (parse_size_opt("shutdown-grace", optarg, 0, 600000, 0, &v))
        return 2;
      o->shutdown_grace_ms = (int)v;
      break;
    case 12:
      if (parse_size_opt("max-key", optarg, 1, SL_KEY_MAX, 1, &v)) return 2;
      o->max_key = (size_t)v;
      break;
    case 13:
      if (strcmp(optarg, "memory")) {
        char err[256];
        if (rc_config_parse(optarg, &rcfg, err, sizeof err)) {
          fprintf(stderr, "sluice serve: --store %s\n", err);
          return 2;
        }
        remote = 1;
      } else {
        remote = 0;
      }
      break;
    case 14:
      if (parse_size_opt("redis-timeout", optarg, 1, 60000, 0, &v)) return 2;
      rcfg.timeout_ms = (int)v;
      break;
    case 15:
      if (parse_size_opt("batch-window", optarg, 0, 100000, 0, &v)) return 2;
      rcfg.batch_us = (int)v;
      break;
    case 16:
      if (parse_size_opt("breaker-interval", optarg, 10, 600000, 0, &v))
        return 2;
      rcfg.breaker_ms = (int)v;
      break;
    case 17: {
      char err[256];
      if (cfg_parse_store_error(optarg, &store_error, &local_fraction, err,
                                sizeof err)) {
        fprintf(stderr, "sluice serve: --on-store-error %s\n", err);
        return 2;
      }
      break;
    }
    case 18: {
      char *end;
      errno = 0;
      long long ms = strtoll(optarg, &end, 10);
      if (end == optarg || *end || errno || ms < -86400000 || ms > 86400000) {
        fprintf(stderr, "sluice serve: --clock-skew '%s' is not a number of "
                        "ms within a day\n", optarg);
        return 2;
      }
      clock_set_skew_ns((int64_t)ms * 1000000);
      break;
    }
    case 19:
      if (parse_size_opt("sync", optarg, 1, 600000, 0, &v)) return 2;
      sync_ms = (int)v;
      break;
    case 20:
      if (parse_size_opt("batch-max", optarg, 1, RS_BATCH_MAX, 0, &v))
        return 2;
      batch_max = (int)v;
      break;
    case 'h':
      serve_usage(stdout);
      return 0;
    default:
      serve_usage(stderr);
      return 2;
    }
  }
  if (optind != argc) {
    fprintf(stderr, "sluice serve: unexpected argument '%s'\n", argv[optind]);
    return 2;
  }
  if (!o->http_addr && !o->resp_addr) {
    fprintf(stderr, "sluice serve: both listeners are off\n");
    return 2;
  }
  if (o->password && !*o->password) o->password = NULL;
  if (o->admin_token && !*o->admin_token) o->admin_token = NULL;

  if (remote && !rcfg.password[0] && getenv("SLUICE_REDIS_PASSWORD"))
    snprintf(rcfg.password, sizeof rcfg.password, "%s",
             getenv("SLUICE_REDIS_PASSWORD"));
  if (sync_ms && !remote) {
    fprintf(stderr, "sluice serve: --sync needs --store redis://... or "
                    "redis-cluster://...\n");
    return 2;
  }
  srv.remote = remote && !sync_ms; /* approximate mode decides locally */

  signal(SIGPIPE, SIG_IGN);
  sl_config *cfg = load(o->config_path, remote);
  /* (approximate mode syncs through the same script: same policy range) */
  if (!cfg) return 1;
  char err[256];
  /* Where per-key state lives: this daemon's memory, or Redis, exactly
     (each decision a script) or approximately (local, synced). */
  fleet_opts fo = {.cluster = rcfg.cluster,
                   .breaker_ms = rcfg.breaker_ms,
                   .batch_max = batch_max,
                   .db = rcfg.db};
  eng_backend *backend = !remote   ? NULL
                         : sync_ms ? fleet_approx_new(&fo)
                                   : fleet_exact_new(&fo);
  if (remote && !backend) {
    log_msg("error", "out of memory");
    config_free(cfg);
    return 1;
  }
  engine_opts eo = {.max_memory = o->max_memory,
                    .on_store_error = store_error,
                    .local_fraction = local_fraction,
                    .backend = backend};
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
    sync = rs_sync_start(fleet_approx_of(backend), &rcfg, &topo, sync_ms);
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
