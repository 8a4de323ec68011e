/*
 * grpc_conn.c — the gRPC front end's HTTP/2 (grpc_conn.h): connections on
 * a worker's event loop, each one libnghttp2 server session fed from and
 * drained to its h2o socket. nghttp2 does the protocol (framing, HPACK,
 * flow control, SETTINGS, PING, GOAWAY, stream states); this file moves
 * the bytes, keeps each stream's request until it is whole, holds the
 * bounds an outsider could push (docs/hardening.md), and writes the
 * answers grpc_server.c gives, as gRPC over HTTP/2 frames them
 * (grpc/doc/PROTOCOL-HTTP2.md): headers, one length-prefixed message,
 * trailers; or, for a failure, trailers only.
 *
 * Bounds: SETTINGS_MAX_CONCURRENT_STREAMS is --grpc-max-streams (nghttp2
 * refuses streams beyond it), SETTINGS_MAX_HEADER_LIST_SIZE is
 * --max-header-bytes (a stream over it is answered RESOURCE_EXHAUSTED),
 * the HPACK tables stay at 4 KiB, a request message is at most --max-body
 * bytes (its length prefix is read first), the request bytes held by one
 * connection at most GRPC_CONN_BUFFERED and by all of them together at
 * most --max-input-buffer (a budget of gRPC's own, RESP's size), the
 * frames queued to go out at most OUTQ_MAX before reading stops (what was
 * read is fed to nghttp2 IN_SLICE bytes at a time, the queue looked at
 * between two: h2o reads all the kernel holds at once, megabytes from a
 * client that sends fast, and each frame of it may queue one to go out),
 * and nghttp2's own limits stay on: queued PING/SETTINGS acknowledgements
 * and SETTINGS entries, and, in Debian 12's libnghttp2 1.52.0-1+deb12u1
 * and deb12u2 (backported fixes of CVE-2023-44487 and CVE-2024-28182;
 * upstream 1.57 and 1.61), resets per second and CONTINUATION frames.
 * Each socket's kernel buffers are LISTEN_SOCK_BUFFER each way (listen.h,
 * for every listener), not what Linux's autotuning would grow them to.
 * The connections count against --max-grpc-connections and
 * --max-connections (worker.c admits them); a connection from which
 * nothing is read for GRPC_IDLE_MS (no call, or a request that never
 * ends) is closed with a GOAWAY. A connection that ends well lingers
 * (conn_end): its side shut, the client's last bytes read and dropped
 * for a bounded time, so that its close sends no reset.
 *
 * A stream is freed only by nghttp2's stream-close callback or by its
 * connection's close; grpc_call_end is told first, so a decision still
 * waiting for Redis never touches a stream that is gone.
 */
#include <nghttp2/nghttp2.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "grpc_conn.h"
#include "grpc_msg.h"
#include "grpc_server.h"

#define OUT_CHUNK 65536 /* bytes taken from nghttp2 per socket write */
#define IN_SLICE 16384  /* bytes fed to nghttp2 between looks at its queue */

struct grpc_conn {
  h2o_linklist_t link; /* the worker's connections */
  grpc_worker *gw;
  h2o_socket_t *sock;
  nghttp2_session *ng;
  h2o_linklist_t streams;
  size_t nstreams;
  size_t buffered;   /* request bytes held by its streams */
  strbuf out;        /* the bytes being written */
  int writing;       /* a socket write is in flight */
  int in_recv;       /* inside nghttp2_session_mem_recv: no send now */
  int goaway;        /* stopping: GOAWAY sent, closing once idle */
  int paused;        /* reading stopped: too many frames wait to go out */
  int dead;          /* a protocol error: closing once the GOAWAY is out */
  int idle_fired;    /* the idle timer's GOAWAY went: next time, close */
  h2o_timeout_entry_t idle;
};

/* Frames nghttp2 may queue for a connection before it stops reading from
   it: a client that sends without reading (our RST_STREAMs, WINDOW_UPDATEs
   and answers pile up otherwise) is read again once they are written. */
#define OUTQ_MAX 256

static void conn_send(grpc_conn *c);

/* ---- streams ---- */

static grpc_stream *stream_of(grpc_conn *c, int32_t id) {
  return nghttp2_session_get_stream_user_data(c->ng, id);
}

/* s is over: grpc_server.c told, its bytes given back, freed. */
static void stream_free(grpc_stream *s) {
  grpc_conn *c = s->c;
  grpc_call_end(s);
  c->buffered -= s->body.len;
  atomic_fetch_sub(&c->gw->w->srv->grpc_buffered, (long)s->body.len);
  strbuf_free(&s->body);
  free(s->out);
  h2o_linklist_unlink(&s->link);
  c->nstreams--;
  free(s);
}

/* Answers s at once with a failure (its request need not be whole). */
static void refuse(grpc_stream *s, int status, const char *msg) {
  if (s->answered) return;
  grpc_respond(s, status, msg, NULL, 0);
}

/*
 * The request message as it arrives: its 5-byte prefix is read first, so
 * that a compressed or oversized message is refused before its bytes are
 * held; the bytes held by the connection are bounded too.
 */
static void take_data(grpc_stream *s, const uint8_t *data, size_t len) {
  grpc_conn *c = s->c;
  server *srv = s->w->srv;
  const srv_opts *o = &srv->o;
  if (s->answered) return; /* refused already: dropped */
  if (c->buffered + len > GRPC_CONN_BUFFERED) {
    refuse(s, RPC_RESOURCE_EXHAUSTED,
           "the connection holds too many request bytes");
    return;
  }
  if (atomic_fetch_add(&srv->grpc_buffered, (long)len) + (long)len >
      (long)o->max_input_buffer) {
    atomic_fetch_sub(&srv->grpc_buffered, (long)len);
    refuse(s, RPC_RESOURCE_EXHAUSTED,
           "the daemon holds too many gRPC request bytes "
           "(--max-input-buffer)");
    return;
  }
  strbuf_add(&s->body, data, len);
  if (s->body.oom) { /* (the bytes were dropped: not held) */
    atomic_fetch_sub(&srv->grpc_buffered, (long)len);
    refuse(s, RPC_RESOURCE_EXHAUSTED, "out of memory");
    return;
  }
  c->buffered += len;
  if (s->body.len < 5) return;
  const uint8_t *p = (const uint8_t *)s->body.p;
  uint32_t mlen = grpc_prefix_len(p);
  if (p[0] & 1)
    refuse(s, RPC_UNIMPLEMENTED,
           "compressed messages are not accepted (grpc-encoding identity "
           "only)");
  else if (mlen > o->max_body)
    refuse(s, RPC_RESOURCE_EXHAUSTED,
           "the request message is larger than --max-body");
  else if (s->body.len > 5 + (size_t)mlen)
    refuse(s, RPC_INTERNAL, "more than one request message in a unary call");
}

/* ---- nghttp2's callbacks ---- */

static int on_begin_headers(nghttp2_session *ng, const nghttp2_frame *f,
                            void *ud) {
  grpc_conn *c = ud;
  if (f->hd.type != NGHTTP2_HEADERS ||
      f->headers.cat != NGHTTP2_HCAT_REQUEST)
    return 0;
  grpc_stream *s = calloc(1, sizeof *s);
  if (!s) return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE; /* reset */
  s->c = c;
  s->w = c->gw->w;
  s->id = f->hd.stream_id;
  s->early_status = -1;
  s->http_status = 200;
  strbuf_init_with(&s->body, s->small, sizeof s->small);
  h2o_linklist_insert(&c->streams, &s->link);
  c->nstreams++;
  nghttp2_session_set_stream_user_data(ng, s->id, s);
  return 0;
}

static int on_header(nghttp2_session *ng, const nghttp2_frame *f,
                     const uint8_t *name, size_t nlen, const uint8_t *value,
                     size_t vlen, uint8_t flags, void *ud) {
  (void)flags;
  grpc_conn *c = ud;
  if (f->hd.type != NGHTTP2_HEADERS) return 0;
  grpc_stream *s = stream_of(c, f->hd.stream_id);
  (void)ng;
  if (!s || s->early_status >= 0) return 0;
  if (f->headers.cat != NGHTTP2_HCAT_REQUEST) return 0; /* trailers */
  s->header_bytes += nlen + vlen + 32;
  if (s->header_bytes > s->w->srv->o.max_header_bytes) {
    s->early_status = RPC_RESOURCE_EXHAUSTED;
    s->early_msg = "the request headers are larger than --max-header-bytes";
    return 0;
  }
  grpc_call_header(s, name, nlen, value, vlen);
  return 0;
}

static int on_data_chunk(nghttp2_session *ng, uint8_t flags, int32_t id,
                         const uint8_t *data, size_t len, void *ud) {
  (void)ng;
  (void)flags;
  grpc_stream *s = stream_of(ud, id);
  if (s) take_data(s, data, len);
  return 0;
}

static int on_frame_recv(nghttp2_session *ng, const nghttp2_frame *f,
                         void *ud) {
  (void)ng;
  grpc_conn *c = ud;
  if (f->hd.type != NGHTTP2_HEADERS && f->hd.type != NGHTTP2_DATA) return 0;
  grpc_stream *s = stream_of(c, f->hd.stream_id);
  if (!s) return 0;
  if (f->hd.type == NGHTTP2_HEADERS &&
      f->headers.cat == NGHTTP2_HCAT_REQUEST) {
    if (s->early_status < 0) grpc_call_check(s);
    if (s->early_status >= 0) refuse(s, s->early_status, s->early_msg);
  }
  if (f->hd.flags & NGHTTP2_FLAG_END_STREAM) {
    s->remote_closed = 1;
    if (!s->answered) grpc_call_begin(s);
  }
  return 0;
}

/* A response's last frame went out: the call is answered, and counted
   so (one whose answer never goes out, its stream reset by the client or
   its connection closed first, is not). A response sent whole before the
   request was: the rest of it is not wanted (RST_STREAM NO_ERROR, as
   gRPC's servers do). */
static int on_frame_send(nghttp2_session *ng, const nghttp2_frame *f,
                         void *ud) {
  if ((f->hd.type != NGHTTP2_HEADERS && f->hd.type != NGHTTP2_DATA) ||
      !(f->hd.flags & NGHTTP2_FLAG_END_STREAM))
    return 0;
  grpc_stream *s = stream_of(ud, f->hd.stream_id);
  if (!s) return 0;
  engine_count(s->w->et, EC_GRPC_REQUESTS, 1);
  if (s->status != RPC_OK) engine_count(s->w->et, EC_GRPC_ERRORS, 1);
  if (!s->remote_closed)
    nghttp2_submit_rst_stream(ng, NGHTTP2_FLAG_NONE, s->id, NGHTTP2_NO_ERROR);
  return 0;
}

static int on_stream_close(nghttp2_session *ng, int32_t id, uint32_t err,
                           void *ud) {
  (void)err;
  grpc_stream *s = stream_of(ud, id);
  if (!s) return 0;
  nghttp2_session_set_stream_user_data(ng, id, NULL);
  stream_free(s);
  return 0;
}

/* The response message, then its trailers (grpc-status 0: a message is
   only sent with OK). */
static ssize_t read_body(nghttp2_session *ng, int32_t id, uint8_t *buf,
                         size_t len, uint32_t *flags,
                         nghttp2_data_source *src, void *ud) {
  (void)ud;
  grpc_stream *s = src->ptr;
  /* The message's prefix (not compressed; its length, big-endian) comes
     first: out_off counts both. */
  uint8_t prefix[5] = {0, (uint8_t)(s->out_len >> 24),
                       (uint8_t)(s->out_len >> 16), (uint8_t)(s->out_len >> 8),
                       (uint8_t)s->out_len};
  size_t n = 0;
  while (n < len && s->out_off < 5) buf[n++] = prefix[s->out_off++];
  size_t more = 5 + s->out_len - s->out_off;
  if (more > len - n) more = len - n;
  if (more) memcpy(buf + n, s->out + (s->out_off - 5), more);
  s->out_off += more;
  n += more;
  if (s->out_off == 5 + s->out_len) {
    static const nghttp2_nv trailers[] = {
        {(uint8_t *)"grpc-status", (uint8_t *)"0", 11, 1,
         NGHTTP2_NV_FLAG_NO_COPY_NAME | NGHTTP2_NV_FLAG_NO_COPY_VALUE}};
    *flags |= NGHTTP2_DATA_FLAG_EOF | NGHTTP2_DATA_FLAG_NO_END_STREAM;
    if (nghttp2_submit_trailer(ng, id, trailers, 1))
      return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
  }
  return (ssize_t)n;
}

/* ---- answers ---- */

/* msg into out (cap bytes at least 1), percent-encoded as gRPC wants
   grpc-message: every byte outside printable ASCII, and '%'. */
static size_t percent_encode(const char *msg, char *out, size_t cap) {
  static const char hex[] = "0123456789ABCDEF";
  size_t n = 0;
  for (const unsigned char *p = (const unsigned char *)msg; *p; p++) {
    int plain = *p >= 0x20 && *p <= 0x7e && *p != '%';
    if (n + (plain ? 1 : 3) >= cap) break;
    if (plain) {
      out[n++] = (char)*p;
    } else {
      out[n++] = '%';
      out[n++] = hex[*p >> 4];
      out[n++] = hex[*p & 15];
    }
  }
  out[n] = '\0';
  return n;
}

#define NV(n, v, vl)                                                           \
  {(uint8_t *)(n), (uint8_t *)(v), sizeof(n) - 1, (vl),                        \
   NGHTTP2_NV_FLAG_NO_COPY_NAME}

void grpc_respond(grpc_stream *s, int status, const char *msg, uint8_t *body,
                  size_t len) {
  grpc_conn *c = s->c;
  s->answered = 1;
  s->status = status;
  char st[16], code[12], enc[768];
  snprintf(st, sizeof st, "%d", s->http_status);
  snprintf(code, sizeof code, "%d", status);
  nghttp2_nv nv[6] = {NV(":status", st, strlen(st)),
                      NV("content-type", "application/grpc", 16)};
  size_t n = 2;
  int rc;
  if (body) {
    free(s->out);
    s->out = body;
    s->out_len = len;
    s->out_off = 0;
    nghttp2_data_provider dp = {.source.ptr = s, .read_callback = read_body};
    rc = nghttp2_submit_response(c->ng, s->id, nv, n, &dp);
  } else {
    nv[n++] = (nghttp2_nv)NV("grpc-status", code, strlen(code));
    if (msg && *msg)
      nv[n++] = (nghttp2_nv)NV("grpc-message", enc,
                               percent_encode(msg, enc, sizeof enc));
    if (status == RPC_UNIMPLEMENTED && s->encoded)
      nv[n++] = (nghttp2_nv)NV("grpc-accept-encoding", "identity", 8);
    rc = nghttp2_submit_response(c->ng, s->id, nv, n, NULL);
  }
  if (rc) return; /* the stream is closing: nobody to answer (a body is
                     freed with s) */
  if (!c->in_recv) conn_send(c);
}

/* ---- the connection ---- */

static void on_read(h2o_socket_t *sock, const char *err);
static int conn_feed(grpc_conn *c);

/* Frees c, all but its socket (returned); c's streams are told first. */
static h2o_socket_t *conn_release(grpc_conn *c) {
  h2o_socket_t *sock = c->sock;
  while (!h2o_linklist_is_empty(&c->streams))
    stream_free(H2O_STRUCT_FROM_MEMBER(grpc_stream, link, c->streams.next));
  if (h2o_timeout_is_linked(&c->idle)) h2o_timeout_unlink(&c->idle);
  nghttp2_session_del(c->ng);
  h2o_linklist_unlink(&c->link);
  strbuf_free(&c->out);
  free(c);
  return sock;
}

/* A connection of w is gone: its socket closed, it is uncounted. */
static void conn_gone(worker *w, h2o_socket_t *sock) {
  if (sock) h2o_socket_close(sock);
  w->grpc_conns--;
  atomic_fetch_sub(&w->srv->connections, 1);
  atomic_fetch_sub(&w->srv->grpc_open, 1);
  engine_connections(w->et, LST_GRPC, -1);
}

/* Closes c at once: an error, a write that failed or never ends, a stop
   past its grace. */
static void conn_close(grpc_conn *c) {
  worker *w = c->gw->w;
  conn_gone(w, conn_release(c));
}

/*
 * The lingering close (nginx's lingering_close, for the same reason): a
 * socket closed while the client's bytes wait unread in it makes the
 * kernel send a reset, and a reset can destroy the GOAWAY and the answers
 * just written before the client reads them. So a connection that ends
 * well (its last frames written) shuts its sending side (a FIN after
 * them), then reads and drops what the client still sends until it
 * closes too, GRPC_LINGER_MS pass or GRPC_LINGER_BYTES came: then it is
 * closed. It counts as a connection meanwhile (its worker's stop waits
 * for it, within --shutdown-grace).
 */
typedef struct grpc_linger {
  h2o_linklist_t link; /* grpc_worker.lingering */
  worker *w;
  h2o_socket_t *sock;
  size_t bytes; /* read and dropped so far */
  h2o_timeout_entry_t timer;
} grpc_linger;

static void linger_close(grpc_linger *l) {
  if (h2o_timeout_is_linked(&l->timer)) h2o_timeout_unlink(&l->timer);
  h2o_linklist_unlink(&l->link);
  conn_gone(l->w, l->sock);
  free(l);
}

static void on_linger_read(h2o_socket_t *sock, const char *err) {
  grpc_linger *l = sock->data;
  if (!err) {
    l->bytes += sock->input->size;
    h2o_buffer_consume(&sock->input, sock->input->size);
  }
  if (err || l->bytes > GRPC_LINGER_BYTES) linger_close(l);
}

static void on_linger_timeout(h2o_timeout_entry_t *e) {
  linger_close(H2O_STRUCT_FROM_MEMBER(grpc_linger, timer, e));
}

/* Closes c, whose last frames are written, lingering (above). */
static void conn_end(grpc_conn *c) {
  grpc_worker *gw = c->gw;
  h2o_socket_t *sock = conn_release(c);
  grpc_linger *l = sock ? calloc(1, sizeof *l) : NULL;
  if (!l || shutdown(h2o_socket_get_fd(sock), SHUT_WR)) {
    free(l);
    conn_gone(gw->w, sock);
    return;
  }
  l->w = gw->w;
  l->sock = sock;
  l->timer.cb = on_linger_timeout;
  sock->data = l;
  h2o_linklist_insert(&gw->lingering, &l->link);
  h2o_timeout_link(gw->w->loop, &gw->linger_timeout, &l->timer);
  h2o_buffer_consume(&sock->input, sock->input->size);
  h2o_socket_read_start(sock, on_linger_read);
}

/* Closes c when neither side has anything more to say: nghttp2 wants
   neither to read nor to write (a GOAWAY ended it, or a protocol error),
   or, stopping, its last call is answered and written. 1: closed. */
static int conn_maybe_close(grpc_conn *c) {
  if (c->writing) return 0;
  int done = !nghttp2_session_want_read(c->ng) &&
             !nghttp2_session_want_write(c->ng);
  if (c->goaway && !c->nstreams && !nghttp2_session_want_write(c->ng))
    done = 1;
  if (done) conn_end(c);
  return done;
}

/* (Re)starts c's idle timer: nothing read and nothing written for
   GRPC_IDLE_MS closes it. */
static void idle_rearm(grpc_conn *c) {
  if (h2o_timeout_is_linked(&c->idle)) h2o_timeout_unlink(&c->idle);
  h2o_timeout_link(c->gw->w->loop, &c->gw->idle_timeout, &c->idle);
}

static void on_written(h2o_socket_t *sock, const char *err) {
  grpc_conn *c = sock->data;
  c->writing = 0;
  if (err) {
    conn_close(c);
    return;
  }
  if (c->out.cap > OUT_CHUNK * 2) strbuf_free(&c->out);
  idle_rearm(c);
  conn_send(c);
  if (c->dead && !c->writing) {
    conn_end(c);
    return;
  }
  if (c->paused && !c->dead &&
      nghttp2_session_get_outbound_queue_size(c->ng) <= OUTQ_MAX / 2) {
    c->paused = 0;
    if (conn_feed(c)) return; /* what was read before the pause first */
    if (c->dead) return;
    if (!c->paused) h2o_socket_read_start(c->sock, on_read);
  }
  conn_maybe_close(c);
}

/* Writes what nghttp2 has to send (up to OUT_CHUNK at a time; the rest
   once that is written). Never closes c. */
static void conn_send(grpc_conn *c) {
  if (c->writing) return;
  c->out.len = 0;
  while (c->out.len < OUT_CHUNK) {
    const uint8_t *data;
    ssize_t n = nghttp2_session_mem_send(c->ng, &data);
    if (n <= 0) break; /* (an error: want_write goes 0 and c closes) */
    strbuf_add(&c->out, data, (size_t)n);
  }
  if (!c->sock) { /* (grpc_conn_memory's: nowhere to write; more, when
                       the chunk filled up) */
    int more = c->out.len >= OUT_CHUNK;
    c->out.len = 0;
    if (more) conn_send(c);
    return;
  }
  if (!c->out.len || c->out.oom) return;
  h2o_iovec_t v = h2o_iovec_init(c->out.p, c->out.len);
  c->writing = 1;
  h2o_socket_write(c->sock, &v, 1, on_written);
}

/* Feeds bytes[0..len) to c's nghttp2 IN_SLICE bytes at a time, writing
   between slices, until all is taken or too many frames wait to go out
   behind a write in flight: then c->paused (the rest is fed when the
   queue has drained, on_written). *used: the bytes taken. 1: a protocol
   error (nghttp2 queued a GOAWAY where it could: conn_fail says it). */
static int feed(grpc_conn *c, const uint8_t *bytes, size_t len,
                size_t *used) {
  *used = 0;
  while (*used < len) {
    size_t n = len - *used < IN_SLICE ? len - *used : IN_SLICE;
    c->in_recv = 1;
    ssize_t r = nghttp2_session_mem_recv(c->ng, bytes + *used, n);
    c->in_recv = 0;
    if (r < 0) return 1;
    *used += (size_t)r;
    conn_send(c);
    if (c->writing &&
        nghttp2_session_get_outbound_queue_size(c->ng) > OUTQ_MAX) {
      c->paused = 1;
      return 0;
    }
  }
  return 0;
}

/* c broke the protocol: its GOAWAY written, it closes (at once when that
   is done already). 1: c was closed. */
static int conn_fail(grpc_conn *c) {
  c->dead = 1;
  conn_send(c);
  if (c->writing) return 0;
  conn_end(c);
  return 1;
}

/* Feeds what c's socket read to nghttp2 (feed); reading stops while c is
   paused, and for good at a protocol error. 1: c was closed. */
static int conn_feed(grpc_conn *c) {
  h2o_socket_t *sock = c->sock;
  size_t used;
  int bad = feed(c, (const uint8_t *)sock->input->bytes, sock->input->size,
                 &used);
  h2o_buffer_consume(&sock->input, bad ? sock->input->size : used);
  if (bad || c->paused) h2o_socket_read_stop(sock);
  return bad ? conn_fail(c) : 0;
}

static void on_read(h2o_socket_t *sock, const char *err) {
  grpc_conn *c = sock->data;
  if (err) {
    conn_close(c);
    return;
  }
  /* (idle: nothing read or written for GRPC_IDLE_MS; a write that never
     ends is no progress, however much the client sends meanwhile) */
  if (!c->writing) idle_rearm(c);
  if (conn_feed(c) || c->dead) return;
  conn_maybe_close(c);
}

static void on_idle(h2o_timeout_entry_t *e) {
  grpc_conn *c = H2O_STRUCT_FROM_MEMBER(grpc_conn, idle, e);
  /* A write stuck all this time (the client reads nothing), or a GOAWAY
     the last time: closed (at once; lingering). Else a GOAWAY, and one more period. */
  if (c->writing) {
    conn_close(c);
    return;
  }
  if (c->idle_fired) {
    conn_end(c);
    return;
  }
  c->idle_fired = 1;
  nghttp2_session_terminate_session(c->ng, NGHTTP2_NO_ERROR);
  conn_send(c);
  if (!conn_maybe_close(c)) idle_rearm(c);
}

static ssize_t no_send(nghttp2_session *ng, const uint8_t *d, size_t l,
                       int fl, void *ud) {
  (void)ng, (void)d, (void)l, (void)fl, (void)ud;
  return NGHTTP2_ERR_CALLBACK_FAILURE; /* (mem_send is used) */
}

/* c's nghttp2 session, with its options and first SETTINGS. 0, or -1. */
static int session_new(grpc_conn *c, const srv_opts *o) {
  nghttp2_session_callbacks *cb;
  nghttp2_option *opt;
  if (nghttp2_session_callbacks_new(&cb)) return -1;
  if (nghttp2_option_new(&opt)) {
    nghttp2_session_callbacks_del(cb);
    return -1;
  }
  nghttp2_session_callbacks_set_send_callback(cb, no_send);
  nghttp2_session_callbacks_set_on_begin_headers_callback(cb, on_begin_headers);
  nghttp2_session_callbacks_set_on_header_callback(cb, on_header);
  nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, on_data_chunk);
  nghttp2_session_callbacks_set_on_frame_recv_callback(cb, on_frame_recv);
  nghttp2_session_callbacks_set_on_frame_send_callback(cb, on_frame_send);
  nghttp2_session_callbacks_set_on_stream_close_callback(cb, on_stream_close);
  /* Our HPACK encoder's table stays at the default size whatever the
     client allows. */
  nghttp2_option_set_max_deflate_dynamic_table_size(opt, 4096);
  /* Closed streams are not kept for the priority tree: gRPC's clients
     send no priorities (and SETTINGS_NO_RFC7540_PRIORITIES says so). */
  nghttp2_option_set_no_closed_streams(opt, 1);
  int rc = nghttp2_session_server_new2(&c->ng, cb, c, opt);
  nghttp2_session_callbacks_del(cb);
  nghttp2_option_del(opt);
  if (rc) return -1;
  nghttp2_settings_entry iv[] = {
      {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, (uint32_t)o->grpc_max_streams},
      {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, (uint32_t)o->max_header_bytes},
      {NGHTTP2_SETTINGS_HEADER_TABLE_SIZE, 4096},
      {NGHTTP2_SETTINGS_NO_RFC7540_PRIORITIES, 1}};
  return nghttp2_submit_settings(c->ng, NGHTTP2_FLAG_NONE, iv,
                                 sizeof iv / sizeof iv[0])
             ? -1
             : 0;
}

void grpc_accept(worker *w, h2o_socket_t *sock) {
  grpc_conn *c = w->grpc ? calloc(1, sizeof *c) : NULL;
  if (!c || session_new(c, &w->srv->o)) {
    if (c && c->ng) nghttp2_session_del(c->ng);
    free(c);
    /* admit() counted it; nothing else will uncount it. */
    atomic_fetch_sub(&w->srv->connections, 1);
    atomic_fetch_sub(&w->srv->grpc_open, 1);
    h2o_socket_close(sock);
    return;
  }
  c->gw = w->grpc;
  c->sock = sock;
  c->out = (strbuf)STRBUF_INIT;
  h2o_linklist_init_anchor(&c->streams);
  c->idle.cb = on_idle;
  h2o_linklist_insert(&w->grpc->conns, &c->link);
  w->grpc_conns++;
  engine_connections(w->et, LST_GRPC, 1);
  sock->data = c;
  h2o_timeout_link(w->loop, &w->grpc->idle_timeout, &c->idle);
  conn_send(c); /* the server's preface: SETTINGS */
  h2o_socket_read_start(sock, on_read);
}

/* ---- a connection in memory (fuzz/grpc_h2_fuzz.c) ---- */

grpc_conn *grpc_conn_memory(worker *w) {
  grpc_conn *c = calloc(1, sizeof *c);
  if (!c || session_new(c, &w->srv->o)) {
    if (c && c->ng) nghttp2_session_del(c->ng);
    free(c);
    return NULL;
  }
  c->gw = w->grpc;
  c->out = (strbuf)STRBUF_INIT;
  h2o_linklist_init_anchor(&c->streams);
  h2o_linklist_insert(&w->grpc->conns, &c->link);
  /* counted as grpc_accept's are, so that its close uncounts it */
  w->grpc_conns++;
  atomic_fetch_add(&w->srv->connections, 1);
  atomic_fetch_add(&w->srv->grpc_open, 1);
  engine_connections(w->et, LST_GRPC, 1);
  conn_send(c);
  return c;
}

int grpc_conn_input(grpc_conn *c, const uint8_t *bytes, size_t len) {
  size_t used;
  if (feed(c, bytes, len, &used)) return conn_fail(c) ? -1 : 0;
  return conn_maybe_close(c) ? -1 : 0;
}

void grpc_conn_drop(grpc_conn *c) { conn_close(c); }

/* ---- the worker's ---- */

void grpc_shutdown(worker *w) {
  if (!w->grpc) return;
  h2o_linklist_t *n = w->grpc->conns.next;
  while (n != &w->grpc->conns) {
    grpc_conn *c = H2O_STRUCT_FROM_MEMBER(grpc_conn, link, n);
    n = n->next;
    c->goaway = 1;
    if (h2o_timeout_is_linked(&c->idle)) h2o_timeout_unlink(&c->idle);
    nghttp2_submit_goaway(c->ng, NGHTTP2_FLAG_NONE,
                          nghttp2_session_get_last_proc_stream_id(c->ng),
                          NGHTTP2_NO_ERROR, NULL, 0);
    conn_send(c);
    conn_maybe_close(c);
  }
}

void grpc_worker_start(worker *w) {
  grpc_worker *gw = calloc(1, sizeof *gw);
  if (gw && !(gw->arena = rls_arena_new())) {
    free(gw);
    gw = NULL;
  }
  if (!gw) {
    log_msg("error", "worker %u: no gRPC (out of memory)", w->index);
    return;
  }
  gw->w = w;
  h2o_linklist_init_anchor(&gw->conns);
  h2o_linklist_init_anchor(&gw->waiting);
  h2o_linklist_init_anchor(&gw->lingering);
  h2o_timeout_init(w->loop, &gw->idle_timeout, GRPC_IDLE_MS);
  h2o_timeout_init(w->loop, &gw->linger_timeout, GRPC_LINGER_MS);
  h2o_timeout_init(w->loop, &gw->tick_timeout, 10);
  w->grpc = gw;
}

void grpc_worker_dispose(worker *w) {
  grpc_worker *gw = w->grpc;
  if (!gw) return;
  while (!h2o_linklist_is_empty(&gw->conns))
    conn_close(H2O_STRUCT_FROM_MEMBER(grpc_conn, link, gw->conns.next));
  while (!h2o_linklist_is_empty(&gw->lingering))
    linger_close(
        H2O_STRUCT_FROM_MEMBER(grpc_linger, link, gw->lingering.next));
  if (h2o_timeout_is_linked(&gw->tick)) h2o_timeout_unlink(&gw->tick);
  h2o_timeout_dispose(w->loop, &gw->idle_timeout);
  h2o_timeout_dispose(w->loop, &gw->linger_timeout);
  h2o_timeout_dispose(w->loop, &gw->tick_timeout);
  rls_arena_free(gw->arena);
  free(gw);
  w->grpc = NULL;
}
