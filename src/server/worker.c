/*
 * worker.c — the daemon's worker threads (worker.h).
 *
 * A worker is one thread with its own h2o event loop, serving HTTP, RESP
 * and gRPC on listening sockets of its own (the same ports as every other worker's:
 * SO_REUSEPORT lets the kernel spread the connections), and deciding
 * through its own engine thread. It admits connections under
 * --max-connections, tracks its HTTP connections so that a stop can tell
 * idle ones from busy ones (h2o 2.2's shutdown request closes only
 * HTTP/2's), and in fleet mode owns a Redis client on its loop: exact
 * mode's decisions and either mode's resets go through it, and each pass
 * of the loop ends by sending what the pass decided as one pipeline.
 *
 * A stop (srv->stopping) closes the listeners, answers what is in flight,
 * and gives it up to --shutdown-grace; then the thread returns.
 */
#include <errno.h>
#include <netinet/tcp.h>
#include <semaphore.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "../fleet/fleet.h"
#include "grpc_server.h"
#include "hold.h"
#include "listen.h"
#include "redis_h2o.h"
#include "worker.h"

/* A worker, the listening sockets it starts with, and its pool. */
typedef struct worker_boot {
  worker w;
  int fd[LST_COUNT]; /* the listening sockets, -1: off */
  struct worker_pool *pool;
} worker_boot;

struct worker_pool {
  server *srv;
  h2o_globalconf_t *conf;
  worker_fleet fleet;
  unsigned n, started;
  worker_boot *boots;
  sem_t up; /* a started worker posts it once its loop can take messages */
};

/* The engine's remote, on this worker's (io's) Redis client; refused
   once the client is gone (a stop's last steps). */
static int remote_send(void *io, int slot, char *cmd, size_t len,
                       int64_t since_ns, fleet_reply_fn cb, void *ud) {
  worker *w = io;
  if (!w->rc) {
    free(cmd);
    return -1;
  }
  return rc_send_since(w->rc, slot, cmd, len, since_ns, cb, ud);
}

/* An open HTTP connection: its socket and fd, so that a stop can close
   the idle ones (h2o 2.2's shutdown request closes only HTTP/2 ones). */
typedef struct http_conn {
  h2o_linklist_t link;
  worker *w;
  h2o_socket_t *sock;
  int fd;
  size_t read_at_request; /* sock->bytes_read when a request was last
                             complete (its handler ran) */
  h2o_socket_cb h2o_read; /* h2o's read callback, while heads_guard runs */
  size_t scanned;         /* bytes of the first head counted so far */
  unsigned lines;         /* its lines begun, the request line included */
  int too_many_headers;   /* the head had more than h2o takes */
} http_conn;

static void on_http_close(void *data) {
  http_conn *hc = data;
  worker *w = hc->w;
  h2o_linklist_unlink(&hc->link);
  free(hc);
  w->http_conns--;
  atomic_fetch_sub(&w->srv->connections, 1);
  atomic_fetch_sub(&w->srv->http_open, 1);
  engine_connections(w->et, 0, -1);
}

int srv_note_request(h2o_req_t *req) {
  h2o_socket_t *sock = req->conn->callbacks->get_socket
                           ? req->conn->callbacks->get_socket(req->conn)
                           : NULL;
  if (!sock || sock->on_close.cb != on_http_close) return 0;
  http_conn *hc = sock->on_close.data;
  hc->read_at_request = sock->bytes_read;
  return hc->too_many_headers;
}

/*
 * More request headers than h2o takes (H2O_MAX_HEADERS, fixed when
 * Debian's h2o 2.2 was built) make its parser write a plain-text 400 to
 * the socket before any handler or filter runs, where every other bad
 * request gets sluice's JSON. So, for a connection's first request, the
 * head is counted as it arrives, before h2o parses it, the way
 * picohttpparser counts (leading empty lines skipped; every line begun
 * after the request line is a header, a folded one too; it fails as soon
 * as line 101 begins). A head with too many is replaced in the input by a
 * bodiless request that closes the connection, flagged for on_req, which
 * answers 431 as for --max-header-bytes. Once the head is complete, h2o's
 * own callback is put back: later requests on the connection (h2o
 * restarts its reader for each) get h2o's 400, which docs/hardening.md
 * says.
 */
static const char closing_request[] = "GET / HTTP/1.1\r\nConnection: close\r\n\r\n";

/* Counts the head in sock's input from hc->scanned on. 1: it has more
   lines than h2o takes; -1: it is complete within them; 0: not yet. */
static int count_head(http_conn *hc, const h2o_buffer_t *in) {
  for (; hc->scanned < in->size; hc->scanned++) {
    char c = in->bytes[hc->scanned];
    int at_line = hc->scanned == 0 || in->bytes[hc->scanned - 1] == '\n';
    if (!at_line) continue;
    if (c == '\r' || c == '\n') {
      if (hc->lines) return -1; /* the empty line that ends the head */
      continue;                 /* a leading one, skipped */
    }
    if (++hc->lines > H2O_MAX_HEADERS + 1) return 1;
  }
  return 0;
}

static void heads_guard(h2o_socket_t *sock, const char *err) {
  http_conn *hc = sock->on_close.data;
  h2o_socket_cb h2o_read = hc->h2o_read;
  int v = err ? -1 : count_head(hc, sock->input);
  if (v) sock->_cb.read = h2o_read; /* decided: h2o's alone from here */
  if (v == 1) {
    hc->too_many_headers = 1;
    h2o_buffer_consume(&sock->input, sock->input->size);
    h2o_iovec_t room = h2o_buffer_reserve(&sock->input, sizeof closing_request);
    if (room.base) {
      memcpy(room.base, closing_request, sizeof closing_request - 1);
      sock->input->size += sizeof closing_request - 1;
    }
  }
  h2o_read(sock, err);
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

/*
 * Connection budgets. --max-connections bounds the listeners together;
 * each listener also has a budget of its own, by default 80% of the total
 * (all of it when the others are off), so that idle connections on one
 * protocol (10,000 RESP sockets that never send a byte) always leave the
 * others a fifth of the total. A connection over either is closed at
 * once, counted per listener, and logged (listeners_log). RESP's count is
 * the total less HTTP's and gRPC's: resp.c keeps the total, this file
 * HTTP's, grpc_conn.c gRPC's.
 */
static int admit(worker *w, int l) {
  static const int rejected[LST_COUNT] = {EC_REJECTED_HTTP, EC_REJECTED_RESP,
                                          EC_REJECTED_GRPC};
  server *srv = w->srv;
  atomic_long *own = l == LST_HTTP   ? &srv->http_open
                     : l == LST_GRPC ? &srv->grpc_open
                                     : NULL;
  long open = atomic_fetch_add(&srv->connections, 1);
  long mine = own ? atomic_fetch_add(own, 1)
                  : open - atomic_load(&srv->http_open) -
                        atomic_load(&srv->grpc_open);
  if (open < srv->o.max_connections && mine < srv->budget[l]) return 1;
  atomic_fetch_sub(&srv->connections, 1);
  if (own) atomic_fetch_sub(own, 1);
  atomic_fetch_add(&srv->refused[l], 1);
  engine_count(w->et, rejected[l], 1);
  return 0;
}

/* An admitted HTTP connection: tracked (for a stop), then h2o's. */
static void http_accepted(worker *w, h2o_socket_t *sock, int fd) {
  http_conn *hc = malloc(sizeof *hc);
  if (!hc) {
    atomic_fetch_sub(&w->srv->connections, 1);
    atomic_fetch_sub(&w->srv->http_open, 1);
    h2o_socket_close(sock);
    return;
  }
  *hc = (http_conn){.w = w, .sock = sock, .fd = fd};
  h2o_linklist_insert(&w->http_list, &hc->link);
  w->http_conns++;
  engine_connections(w->et, 0, 1);
  sock->on_close.cb = on_http_close;
  sock->on_close.data = hc;
  h2o_accept(&w->accept_ctx, sock);
  if (sock->_cb.read) { /* reading its first request: count the head */
    hc->h2o_read = sock->_cb.read;
    sock->_cb.read = heads_guard;
  }
}

/*
 * Out of file descriptors (or kernel memory) the connection stays in the
 * listen queue and the listener stays readable: accepting again at once
 * would spin the loop at full CPU. As nginx does (ngx_event_accept.c
 * disables accept events for accept_mutex_delay), the listener stops
 * being read for ACCEPT_PAUSE_MS; worker_main resumes it. Connections
 * that close meanwhile free descriptors, and the queued ones are
 * accepted then. Counted, and logged once per interval (listeners_log).
 */
#define ACCEPT_PAUSE_MS 100

static void pause_accepting(worker *w, int l) {
  struct worker_listener *wl = &w->lst[l];
  h2o_socket_read_stop(wl->sock);
  wl->resume_ns = clock_mono_ns() + (int64_t)ACCEPT_PAUSE_MS * 1000000;
  static const int paused[LST_COUNT] = {EC_FD_PAUSES_HTTP, EC_FD_PAUSES_RESP,
                                        EC_FD_PAUSES_GRPC};
  atomic_fetch_add(&w->srv->fd_pauses[l], 1);
  engine_count(w->et, paused[l], 1);
}

static void on_accept(h2o_socket_t *listener, const char *err);

/* Listeners whose pause is over read again (each pass of the loop). */
static void resume_accepting(worker *w) {
  int64_t now = 0;
  for (int l = 0; l < LST_COUNT; l++) {
    struct worker_listener *wl = &w->lst[l];
    if (!wl->resume_ns || !wl->sock) continue;
    if (!now) now = clock_mono_ns();
    if (now < wl->resume_ns) continue;
    wl->resume_ns = 0;
    h2o_socket_read_start(wl->sock, on_accept);
  }
}

/* Accepts what the listener has queued (16 at a time, so that one
   listener cannot hold the loop), each under the budgets. */
static void on_accept(h2o_socket_t *listener, const char *err) {
  worker *w = listener->data;
  int l = 0;
  while (l < LST_COUNT - 1 && listener != w->lst[l].sock) l++;
  if (err) return;
  for (int i = 0; i < 16; i++) {
    /* accept4 ourselves (not h2o_evloop_socket_accept): we keep the fd,
       and errno says why an accept failed. */
    int fd = accept4(w->lst[l].fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS ||
          errno == ENOMEM)
        pause_accepting(w, l);
      return;
    }
    if (!admit(w, l)) {
      close(fd);
      continue;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    h2o_socket_t *sock = h2o_evloop_socket_create(
        w->loop, fd, H2O_SOCKET_FLAG_IS_ACCEPTED_CONNECTION);
    if (l == LST_HTTP)
      http_accepted(w, sock, fd);
    else if (l == LST_GRPC)
      grpc_accept(w, sock);
    else
      resp_accept(w, sock);
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

/* Disposes of w's context and loop (unlink_timers first), once. */
static void loop_dispose(worker *w) {
  unlink_timers(&w->ctx);
  h2o_context_dispose(&w->ctx);
  h2o_evloop_destroy(w->loop);
  w->loop_gone = 1;
}

/* w's listener l on fd (-1: off). */
static void listener_open(worker *w, int l, int fd) {
  w->lst[l] = (struct worker_listener){.fd = fd};
  if (fd < 0) return;
  w->lst[l].sock =
      h2o_evloop_socket_create(w->loop, fd, H2O_SOCKET_FLAG_DONT_READ);
  w->lst[l].sock->data = w;
  h2o_socket_read_start(w->lst[l].sock, on_accept);
}

/*
 * The end of a pass: this pass's decisions go to Redis as batched calls in
 * one pipeline (engine_thread_flush, rc_flush). It runs as an entry of the
 * context's zero timeout, linked when something is queued, so inside the
 * loop's pass, never between two: h2o's evloop frees a closed socket at
 * the start of its next pass, even one whose write, done at once, still
 * waits in its pending list there. A socket written and closed between
 * two passes (a Redis connection that timed out in rc_flush; a client's,
 * answered by a fallback) was freed while listed, and a socket made later
 * in the same memory turned the list into a loop that never ended.
 */
static void on_flush(h2o_timeout_entry_t *e) {
  worker *w = H2O_STRUCT_FROM_MEMBER(worker, flush_entry, e);
  engine_thread_flush(w->et);
  if (w->rc) rc_flush(w->rc);
}

static void flush_soon(void *ud) {
  worker *w = ud;
  if (!h2o_timeout_is_linked(&w->flush_entry))
    h2o_timeout_link(w->loop, &w->ctx.zero_timeout, &w->flush_entry);
}

/* Fleet mode: this worker's Redis client, on its loop (rc_client_new;
   fleet_detach frees it). Exact mode decides through it; approximate mode
   only resets (its DELs): decisions there never wait, and the client
   connects on its first command. */
static void fleet_attach(worker *w, const worker_fleet *f) {
  if (!f->redis) return;
  rc_loop io = redis_h2o_loop(w->loop);
  io.wake = flush_soon;
  io.wake_ud = w;
  w->rc = rc_client_new(&io, f->redis, f->topo, NULL);
  if (w->rc && f->map) rc_client_share(w->rc, f->map);
  if (w->rc) {
    fleet_thread_set_transport(w->et, remote_send, flush_soon, w);
    w->may_wait = w->srv->exact;
  } else {
    log_msg("error", "worker %u: no Redis client (out of memory): %s",
            w->index,
            w->srv->exact ? "answering per on_store_error" : "its resets fail");
  }
}

/* Requests still waiting for Redis are answered per on_store_error. */
static void fleet_detach(worker *w) {
  rc_client_free(w->rc);
  w->rc = NULL;
}

/* Stopping: no more accepting; in-flight work goes on. It runs inside
   the loop (the drain entry), as on_flush does, for the same reason: it
   answers held requests and writes GOAWAYs, then closes connections. */
static void start_draining(h2o_timeout_entry_t *e) {
  worker *w = H2O_STRUCT_FROM_MEMBER(worker, drain_entry, e);
  for (int l = 0; l < LST_COUNT; l++) {
    if (w->lst[l].sock) h2o_socket_close(w->lst[l].sock);
    w->lst[l].sock = NULL;
  }
  h2o_context_request_shutdown(&w->ctx);
  hold_release_all(w); /* answer what waits rather than hold the stop */
  close_idle_http(w);
  resp_shutdown(w);
  grpc_shutdown(w); /* GOAWAY: the calls in flight finish */
}

/* The thread: the loop, one pass at a time, until stopped and drained (or
   the grace is over). */
static void *worker_main(void *arg) {
  worker_boot *b = arg;
  worker_pool *p = b->pool;
  worker *w = &b->w;
  server *srv = w->srv;
  /* The loop is made here: a socket's buffers come from the recycler of
     the thread that made it (h2o's thread-local
     h2o_socket_buffer_prototype). workers_start waits for `up` before it
     goes on. */
  w->loop = h2o_evloop_create();
  sem_post(&p->up);
  h2o_context_init(&w->ctx, w->loop, p->conf);
  w->accept_ctx.ctx = &w->ctx;
  w->accept_ctx.hosts = p->conf->hosts;
  h2o_linklist_init_anchor(&w->http_list);
  grpc_worker_start(w);
  for (int l = 0; l < LST_COUNT; l++) listener_open(w, l, b->fd[l]);
  w->flush_entry = (h2o_timeout_entry_t){.cb = on_flush};
  w->drain_entry = (h2o_timeout_entry_t){.cb = start_draining};
  fleet_attach(w, &p->fleet);

  int draining = 0;
  int64_t deadline = 0;
  for (;;) {
    engine_thread_quiesce(w->et);
    h2o_evloop_run(w->loop, 100);
    resume_accepting(w);
    if (atomic_load(&srv->stopping) && !draining) {
      /* (in the next pass, which does not wait for it) */
      h2o_timeout_link(w->loop, &w->ctx.zero_timeout, &w->drain_entry);
      draining = 1;
      deadline = clock_mono_ns() + (int64_t)srv->o.shutdown_grace_ms * 1000000;
    }
    if (draining && !h2o_timeout_is_linked(&w->drain_entry) &&
        ((w->http_conns == 0 && w->resp_conns == 0 && w->grpc_conns == 0) ||
         clock_mono_ns() > deadline))
      break;
    if (draining) close_idle_http(w); /* those that were busy a moment ago */
  }
  /* gRPC connections still open past the grace close first; their
     decisions still waiting for Redis end with the client (fleet_detach
     answers them to nobody). */
  grpc_worker_dispose(w);
  fleet_detach(w);
  hold_worker_dispose(w);
  resp_worker_dispose(w);
  /* HTTP connections still open past the grace close with the loop. The
     context and the loop go here, on the thread that made them: their
     sockets' buffers hold this thread's (thread-local)
     h2o_socket_buffer_prototype, which lives in the thread's stack area,
     and glibc unmaps an exited thread's stack once it keeps too many
     (disposing of them on the main thread then read unmapped memory). */
  engine_thread_offline(w->et);
  loop_dispose(w);
  return NULL;
}

/* ---- the pool ---- */

worker_pool *workers_new(server *srv, h2o_globalconf_t *conf,
                         const worker_fleet *fleet) {
  worker_pool *p = calloc(1, sizeof *p);
  if (!p) return NULL;
  p->n = srv->o.threads;
  p->boots = calloc(p->n, sizeof *p->boots);
  if (!p->boots) {
    free(p);
    return NULL;
  }
  p->srv = srv;
  p->conf = conf;
  p->fleet = *fleet;
  sem_init(&p->up, 0, 0);
  for (unsigned i = 0; i < p->n; i++) {
    worker_boot *b = &p->boots[i];
    for (int l = 0; l < LST_COUNT; l++) b->fd[l] = -1;
    b->pool = p;
    b->w.srv = srv;
    b->w.index = i;
  }
  return p;
}

int workers_listen(worker_pool *p) {
  server *srv = p->srv;
  const char *addr[LST_COUNT] = {srv->o.http_addr, srv->o.resp_addr,
                                 srv->o.grpc_addr};
  int *port[LST_COUNT] = {&srv->http_port, &srv->resp_port, &srv->grpc_port};
  char *at[LST_COUNT] = {srv->http_at, srv->resp_at, srv->grpc_at};
  const size_t at_len[LST_COUNT] = {sizeof srv->http_at, sizeof srv->resp_at,
                                    sizeof srv->grpc_at};
  for (int l = 0; l < LST_COUNT; l++) {
    if (!addr[l]) continue;
    for (unsigned i = 0; i < p->n; i++)
      if ((p->boots[i].fd[l] =
               listen_on(addr[l], *port[l], port[l], i == 0)) < 0)
        return -1;
    listen_name(p->boots[0].fd[l], at[l], at_len[l]);
  }
  return 0;
}

int workers_start(worker_pool *p) {
  for (unsigned i = 0; i < p->n; i++) {
    worker *w = &p->boots[i].w;
    w->et = engine_thread_new(p->srv->eng);
    if (!w->et || resp_worker_init(w) ||
        pthread_create(&w->tid, NULL, worker_main, &p->boots[i]))
      return -1;
    /* Named so that `top -H` and `ps -L` tell the threads apart (the
       kernel keeps 15 bytes of a name). */
    char name[24]; /* (cut to 15 bytes by the kernel: up to sluice-w9999999) */
    snprintf(name, sizeof name, "sluice-w%u", i);
    name[15] = '\0';
    pthread_setname_np(w->tid, name);
    p->started++;
    sem_wait(&p->up); /* its loop takes messages from now on */
  }
  return 0;
}

void workers_join(worker_pool *p) {
  for (unsigned i = 0; i < p->started; i++)
    pthread_join(p->boots[i].w.tid, NULL);
}

void workers_free(worker_pool *p) {
  if (!p) return;
  for (unsigned i = 0; i < p->n; i++) {
    worker_boot *b = &p->boots[i];
    if (b->w.loop) {
      if (!b->w.loop_gone) /* (a thread that did not end: not joined) */
        loop_dispose(&b->w);
    } else {
      for (int l = 0; l < LST_COUNT; l++)
        if (b->fd[l] >= 0) close(b->fd[l]);
    }
    resp_worker_dispose(&b->w);
    engine_thread_free(b->w.et);
  }
  free(p->boots);
  sem_destroy(&p->up);
  free(p);
}
