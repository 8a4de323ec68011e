/*
 * server.h — what the daemon's parts share: options, the server, and the
 * per-thread worker (one h2o event loop serving both HTTP and RESP).
 */
#ifndef SLUICE_SERVER_H
#define SLUICE_SERVER_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define H2O_USE_EPOLL 1
#include <h2o.h>

#include "engine.h"

enum { HDR_IETF = 1, HDR_X = 2 };

typedef struct srv_opts {
  const char *http_addr; /* "HOST:PORT"; NULL or "" = no HTTP */
  const char *resp_addr; /* NULL or "" = no RESP */
  const char *config_path;
  unsigned threads;
  int deny_status;
  size_t max_memory;
  int header_style; /* HDR_IETF | HDR_X, 0 = none */
  const char *password;    /* RESP AUTH; NULL = none */
  const char *admin_token; /* HTTP admin endpoints; NULL = loopback only */
  long max_connections;
  size_t max_body;
  size_t max_header_bytes;
  size_t max_key;    /* longest key / value / descriptor, bytes */
  int trust_forwarded; /* take $remote_addr from X-Forwarded-For */
  int shutdown_grace_ms;
} srv_opts;

typedef struct server {
  srv_opts o;
  engine *eng;
  atomic_int stopping;
  atomic_long connections; /* open, both protocols */
  int http_port, resp_port; /* as bound (for port 0) */
  int remote;               /* exact fleet mode (--store redis... without
                               --sync): decisions in Redis */
} server;

typedef struct worker {
  h2o_context_t ctx; /* first: handlers find their worker from ctx */
  server *srv;
  pthread_t tid;
  unsigned index;
  h2o_evloop_t *loop;
  h2o_accept_ctx_t accept_ctx;
  engine_thread *et;
  h2o_socket_t *http_listener, *resp_listener;
  long http_conns, resp_conns;
  int http_fd;              /* the HTTP listening socket, for accept4() */
  h2o_linklist_t http_list; /* open HTTP connections (struct http_conn) */
  h2o_linklist_t resp_list; /* open RESP connections */
  struct resp_cmd *cmd;     /* scratch for the RESP parser */
  int remote;               /* fleet mode: decisions may wait for Redis */
  struct rc_client *rc;     /* fleet mode (either): this worker's
                               connections (exact mode's decisions, and
                               resets' DELs) */
} worker;

static inline worker *worker_of(h2o_context_t *ctx) {
  return (worker *)(void *)ctx;
}

/* Writes v in decimal at dst (at most 20 bytes, no terminator); returns
   the length. The hot replies' numbers, without printf's parsing. */
static inline size_t srv_fmt_i64(char *dst, int64_t v) {
  char tmp[20];
  uint64_t u = v < 0 ? 0 - (uint64_t)v : (uint64_t)v;
  size_t n = 0;
  do {
    tmp[n++] = (char)('0' + u % 10);
    u /= 10;
  } while (u);
  size_t len = 0;
  if (v < 0) dst[len++] = '-';
  while (n) dst[len++] = tmp[--n];
  return len;
}

/* ceil(ns / 1e6) for ns >= 0: the replies' durations in whole ms. */
static inline int64_t srv_ms_up(int64_t ns) {
  return ns / 1000000 + (ns % 1000000 != 0);
}

/* Wall-clock nanoseconds (the decisions' `now`). */
int64_t srv_now_ns(void);

/* Logs one line to stderr: "sluice: LEVEL: message". */
void srv_log(const char *level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Called by the HTTP handler when a request is complete: lets a stop tell
   idle connections from busy ones. */
void srv_note_request(h2o_req_t *req);

/* HTTP: registers the handlers on the host config. */
void http_register(h2o_globalconf_t *conf, server *srv);

/* RESP: accepts a connection on w's loop; closes the listener's socket. */
void resp_accept(worker *w, h2o_socket_t *sock);
/* Starts shutting RESP down on w: idle connections close at once, busy
   ones after their pending replies are written. */
void resp_shutdown(worker *w);
/* Per-worker setup and teardown. */
int resp_worker_init(worker *w);
void resp_worker_dispose(worker *w);

#endif /* SLUICE_SERVER_H */
