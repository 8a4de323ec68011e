/*
 * grpc_conn.h — between the gRPC front end's two halves: grpc_conn.c
 * (HTTP/2 on libnghttp2 over a worker's sockets: connections, streams,
 * their bounds) and grpc_server.c (a stream's headers and message made a
 * call, decided, answered). One stream is one call.
 */
#ifndef SLUICE_SERVER_GRPC_CONN_H
#define SLUICE_SERVER_GRPC_CONN_H

#include "server.h"

/* The bounds of docs/hardening.md that have no option. */
#define GRPC_IDLE_MS 300000 /* a connection nothing is read from closes */
#define GRPC_CONN_BUFFERED (4u << 20) /* request bytes held, a connection */
#define GRPC_PATH_SHOWN 200         /* of an unknown method's path, bytes */
/* A connection closed gracefully reads and drops what its client still
   sends for at most this long, and this much, before its socket closes
   (grpc_conn.c's lingering close). The bytes count what was in flight
   when it began: up to a client's send buffer (tcp_wmem's maximum, 4 MiB
   by default) and our receive buffer. */
#define GRPC_LINGER_MS 2000
#define GRPC_LINGER_BYTES (8u << 20)

/* The length a message's 5-byte gRPC prefix p declares (big-endian, after
   the compressed flag). */
static inline uint32_t grpc_prefix_len(const uint8_t *p) {
  return (uint32_t)p[1] << 24 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 8 |
         p[4];
}

/* A worker's gRPC state. */
typedef struct grpc_worker {
  worker *w;
  h2o_linklist_t conns;   /* open connections (grpc_conn) */
  h2o_linklist_t waiting; /* streams whose decision waits, with a deadline */
  h2o_linklist_t lingering; /* sockets closing gracefully (grpc_linger) */
  h2o_timeout_t idle_timeout, tick_timeout, linger_timeout;
  h2o_timeout_entry_t tick; /* the deadlines' check, while any wait */
  struct rls_arena *arena;  /* decisions that never wait decode in it */
} grpc_worker;

typedef struct grpc_conn grpc_conn;

/* The methods served (GM_OTHER: answered UNIMPLEMENTED). */
enum { GM_NONE, GM_RLS, GM_HEALTH, GM_OTHER };

typedef struct grpc_stream {
  h2o_linklist_t link; /* its connection's streams */
  grpc_conn *c;
  worker *w;
  int32_t id;
  int method; /* GM_* from :path */
  char path[GRPC_PATH_SHOWN + 1]; /* GM_OTHER: the path, as much as shown */
  /* Decided from the headers, the call is answered at once (status >= 0):
     with http_status, and a static message. */
  int early_status, http_status;
  const char *early_msg;
  int is_post, is_grpc; /* :method POST; content-type application/grpc */
  int encoded;          /* grpc-encoding names a compression */
  size_t header_bytes;  /* as HPACK counts them (name, value, 32 each) */
  int64_t deadline_ns;  /* grpc-timeout, on clock_mono_ns(); 0: none */
  strbuf body;          /* the request's DATA so far (in `small` while
                           it fits: a typical request does) */
  char small[256];
  int remote_closed;    /* the client's END_STREAM came */
  int answered;         /* a response was submitted */
  int status;           /* ... with this gRPC status (counted when sent) */
  struct grpc_call *call;   /* a decision waiting for Redis, or NULL */
  h2o_linklist_t wait_link; /* in grpc_worker.waiting while it waits */
  uint8_t *out;             /* the response message (malloc'd) */
  size_t out_len, out_off;  /* out_off counts its 5-byte prefix too */
} grpc_stream;

/* ---- grpc_conn.c, for grpc_server.c ---- */

/*
 * Answers s: status (with msg percent-encoded into grpc-message; NULL for
 * none) and, when body is not NULL, the response message (len bytes,
 * malloc'd, now the stream's), as headers, one DATA frame and trailers; a
 * failure without a body is a trailers-only response. Sent from the loop
 * (now, or after the read being handled). Counted in the gRPC metrics
 * once its last frame is sent.
 */
void grpc_respond(grpc_stream *s, int status, const char *msg, uint8_t *body,
                  size_t len);

/* ---- grpc_conn.c, for fuzz/grpc_h2_fuzz.c ---- */

/* A connection of w (whose w->grpc is started) with no socket: what its
   client sends is given to grpc_conn_input, what it would send back is
   made and dropped. NULL out of memory. */
grpc_conn *grpc_conn_memory(worker *w);
/* Feeds len bytes a client sent to c, as a socket's read would, and sends
   what comes of them. -1: c ended (a protocol error, or nothing more to
   say either way) and is freed; else 0. */
int grpc_conn_input(grpc_conn *c, const uint8_t *bytes, size_t len);
/* Closes c (freed, uncounted). */
void grpc_conn_drop(grpc_conn *c);

/* ---- grpc_server.c, for grpc_conn.c ---- */

/* One request header of s (lowercase name, as nghttp2 checked it). */
void grpc_call_header(grpc_stream *s, const uint8_t *name, size_t nlen,
                      const uint8_t *value, size_t vlen);
/* s's request headers are all in: a status the call is refused with at
   once, if any, into s->early_status (and http_status, early_msg). */
void grpc_call_check(grpc_stream *s);
/* s's request is whole (its END_STREAM came) and not answered: decide it
   and answer, now or when its decision comes. */
void grpc_call_begin(grpc_stream *s);
/* s is going away (closed, reset by the client, its connection closed):
   a decision still waiting is dropped when it comes. */
void grpc_call_end(grpc_stream *s);

#endif /* SLUICE_SERVER_GRPC_CONN_H */
