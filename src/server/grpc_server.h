/*
 * grpc_server.h — the gRPC front end (--grpc): envoy's rate limit service
 * (envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit) and the
 * standard health check (grpc.health.v1.Health/Check), on gRPC's C core.
 * grpc_server.c is the transport (the completion queue's threads, the
 * calls, their bounds and the stop); grpc_msg.c the messages.
 */
#ifndef SLUICE_SERVER_GRPC_SERVER_H
#define SLUICE_SERVER_GRPC_SERVER_H

#include "server.h"

typedef struct grpc_front grpc_front;

/*
 * Serves gRPC on srv->o.grpc_addr (port 0: the kernel's pick, recorded in
 * srv->grpc_port and srv->grpc_at). Decisions are made on the front's own
 * threads, except in exact fleet mode, where they may wait for Redis: they
 * are handed to `workers` (each worker's grpc_rx; n of them), decided on
 * their event loops as HTTP's are, and answered from there. Call after
 * the workers have started, with the signals blocked (the front's threads
 * inherit the mask). NULL after logging why not.
 */
grpc_front *grpc_front_start(server *srv, worker **workers, unsigned n);

/*
 * Stops: no new calls; those in flight get --shutdown-grace to finish and
 * are then cancelled; once every call is done, the threads end and
 * everything is freed. The workers must still be running (an exact-mode
 * decision in flight is answered from one). NULL is a no-op.
 */
void grpc_front_stop(grpc_front *g);

/* A worker's receiver of exact-mode decisions (h2o's multithread queue):
   decides each on the worker's engine thread, and answers when done. */
void grpc_worker_receive(h2o_multithread_receiver_t *rx,
                         h2o_linklist_t *messages);

#endif /* SLUICE_SERVER_GRPC_SERVER_H */
