/*
 * server.h — what the daemon's parts share: the options the front ends
 * read, the server, and the per-thread worker (one h2o event loop serving
 * both HTTP and RESP), with the front ends' entry points.
 */
#ifndef SLUICE_SERVER_H
#define SLUICE_SERVER_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define H2O_USE_EPOLL 1
#include <h2o.h>

#include "../base/strbuf.h"
#include "../base/clock.h"
#include "../base/fmt.h"
#include "../base/log.h"
#include "../engine/engine.h"
#include "limit_headers.h"

/* The listeners, as an index: each has its own connection budget. */
enum { LST_HTTP, LST_RESP, LST_GRPC, LST_COUNT };

typedef struct srv_opts {
  const char *http_addr; /* "HOST:PORT"; NULL or "" = no HTTP */
  const char *resp_addr; /* NULL or "" = no RESP */
  const char *grpc_addr; /* NULL = no gRPC (grpc_server.h) */
  long grpc_max_streams; /* gRPC: concurrent streams per connection */
  const char *config_path;
  unsigned threads;
  int deny_status;
  const char *deny_message; /* a denial's "message" template; NULL: the
                               default, "": none (http_render.c) */
  int merge_domains; /* --merge-domains: files may share a domain */
  size_t max_memory;
  int header_style; /* HDR_IETF | HDR_X, 0 = none */
  const char *password;    /* RESP AUTH; NULL = none */
  const char *admin_token; /* HTTP admin endpoints; NULL = loopback only */
  long max_connections;      /* every listener together */
  long max_http_connections; /* 0: 80% of max_connections (all of it when
                                RESP is off) */
  long max_resp_connections; /* 0: likewise */
  long max_grpc_connections; /* 0: likewise */
  int http_timeout_ms;       /* a request must arrive whole within it; an
                                idle keep-alive connection closes after it */
  size_t max_body;
  size_t max_header_bytes;
  size_t max_key;    /* longest key / value / descriptor, bytes */
  int trust_forwarded; /* take $remote_addr from X-Forwarded-For */
  int shutdown_grace_ms;
  size_t max_command_bytes; /* RESP: one command, framing included */
  size_t max_input_buffer;  /* RESP: unparsed input, all connections */
  int resp_auth_timeout_ms; /* RESP: accept to AUTH (--password); 0 = none */
  int resp_idle_timeout_ms; /* RESP: no read or write; 0 = none */
  int ui; /* --ui on: the page at /ui/, POST /v1/sim, GET /v1/stats */
  int max_wait_ms;  /* wait mode: the longest hold; 0 = wait mode off */
  long max_waiting; /* wait mode: held answers, all workers (hold.h) */
} srv_opts;

typedef struct server {
  srv_opts o;
  engine *eng;
  atomic_int stopping;
  atomic_long connections; /* open, both protocols */
  atomic_long http_open;    /* open HTTP connections */
  atomic_long grpc_open;    /* open gRPC connections (RESP's: the rest) */
  atomic_long grpc_buffered; /* gRPC request bytes held, all connections
                                (at most --max-input-buffer) */
  long budget[LST_COUNT];   /* each listener's connections at most */
  /* Since the last log line (worker.c's listeners_log): connections
     refused over a budget, and accepting paused out of descriptors. */
  atomic_long refused[LST_COUNT], fd_pauses[LST_COUNT];
  int64_t listeners_logged_ns; /* the main thread's, for its log lines */
  int http_port, resp_port; /* as bound (for port 0) */
  char http_at[64], resp_at[64]; /* "ADDR:PORT" as bound; "" when off */
  int grpc_port;            /* as bound (worker.c) */
  char grpc_at[80];
  int fleet;                /* --store named Redis: fleet mode, exact or
                               approximate; every policy must be one the
                               Redis script decides exactly */
  int exact;                /* exact fleet mode (no --sync): every decision
                               is made in Redis */
  struct resp_shared *resp; /* RESP's process-wide budget and AUTH limiter
                               (resp_guard.h) */
  struct observe *obs;      /* the denial log and top keys (observe.h) */
  const char *no_calendar;  /* the mode that cannot decide calendar limits
                               (config_no_calendar), or NULL */
  atomic_long waiting;      /* wait mode: places taken, all workers */
} server;

typedef struct worker {
  h2o_context_t ctx; /* first: handlers find their worker from ctx */
  server *srv;
  pthread_t tid;
  unsigned index;
  h2o_evloop_t *loop;
  int loop_gone; /* the thread disposed of ctx and loop as it ended */
  h2o_accept_ctx_t accept_ctx;
  engine_thread *et;
  struct worker_listener {
    h2o_socket_t *sock;     /* NULL: off, or closed by a stop */
    int fd;                 /* for accept4() */
    int64_t resume_ns;      /* paused (out of descriptors) until then; 0 */
  } lst[LST_COUNT];
  long http_conns, resp_conns;
  h2o_linklist_t http_list; /* open HTTP connections (struct http_conn) */
  h2o_linklist_t resp_list; /* open RESP connections */
  struct resp_cmd *cmd;     /* scratch for the RESP parser */
  struct resp_batch *batch; /* a pipeline's throttle commands (resp_batch.c) */
  struct resp_worker *resp; /* RESP's timers (resp_guard.c) */
  int may_wait;             /* decisions may wait for Redis (exact mode,
                               with a Redis client) */
  struct hold_queue *hold;  /* wait mode's held answers (hold.c) */
  struct rc_client *rc;     /* fleet mode (either): this worker's
                               connections (exact mode's decisions, and
                               resets' DELs) */
  long grpc_conns;
  struct grpc_worker *grpc; /* gRPC's connections and timers (grpc_conn.c) */
  /* What runs at the end of a pass, inside the loop (zero timeouts): the
     fleet's batched calls, and a stop's first steps (worker.c). */
  h2o_timeout_entry_t flush_entry, drain_entry;
} worker;

static inline worker *worker_of(h2o_context_t *ctx) {
  return (worker *)(void *)ctx;
}

/* Called by the HTTP handler when a request is complete: lets a stop tell
   idle connections from busy ones. 1 when the request stands for a head
   with more headers than h2o takes (answer 431), else 0. */
int srv_note_request(h2o_req_t *req);

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
