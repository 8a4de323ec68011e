/*
 * grpc_server.h — the gRPC front end (--grpc): envoy's rate limit service
 * (envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit) and the
 * standard health check (grpc.health.v1.Health/Check), served by the
 * workers like HTTP and RESP: each worker accepts gRPC connections on a
 * listening socket of its own (worker.c), speaks HTTP/2 on its event loop
 * through libnghttp2 (grpc_conn.c), and decides each call on its own
 * engine thread (grpc_server.c), waiting for Redis with a callback in
 * exact fleet mode as HTTP does. No thread of its own, no hand-over.
 * grpc_msg.c holds the messages.
 */
#ifndef SLUICE_SERVER_GRPC_SERVER_H
#define SLUICE_SERVER_GRPC_SERVER_H

#include "server.h"

/* On w's thread, before its listeners open: w's gRPC state (its
   connections, timers). Out of memory, w->grpc stays NULL and gRPC
   connections to w are closed as they come. */
void grpc_worker_start(worker *w);

/* An admitted connection on the gRPC listener (worker.c counted it in
   srv->connections and srv->grpc_open): served until it closes. */
void grpc_accept(worker *w, h2o_socket_t *sock);

/* Stopping: every connection gets a GOAWAY; the calls already begun are
   answered, then each connection closes. */
void grpc_shutdown(worker *w);

/* Closes what is still open (past the grace) and frees w's gRPC state; a
   decision still waiting for Redis is dropped when it comes. */
void grpc_worker_dispose(worker *w);

#endif /* SLUICE_SERVER_GRPC_SERVER_H */
