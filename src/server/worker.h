/*
 * worker.h — the daemon's worker threads, as the daemon's lifecycle
 * (daemon.c) drives them: each worker is one h2o event loop serving HTTP,
 * RESP and gRPC on listening sockets of its own (same ports: SO_REUSEPORT),
 * deciding through its engine thread and, in fleet mode, its own Redis
 * client. The worker struct itself, which the front ends read, is in
 * server.h.
 */
#ifndef SLUICE_SERVER_WORKER_H
#define SLUICE_SERVER_WORKER_H

#include "../fleet/client.h"
#include "server.h"

typedef struct worker_pool worker_pool;

/* What a fleet-mode worker connects to; redis NULL: memory mode. */
typedef struct worker_fleet {
  const rc_config *redis;
  const rc_topology *topo;
  rc_shared_map *map; /* cluster: the slot map the workers' clients share */
} worker_fleet;

/*
 * srv->o.threads workers (not started) for srv, answering HTTP with conf's
 * handlers; fleet (copied) says whom they talk to. NULL out of memory.
 */
worker_pool *workers_new(server *srv, h2o_globalconf_t *conf,
                         const worker_fleet *fleet);

/*
 * Opens every worker's listening sockets on srv->o's addresses; the first
 * worker's bind decides the port (port 0: the kernel's pick), recorded in
 * srv->http_port / resp_port and, as text, srv->http_at / resp_at. 0, or
 * -1 after logging why (the sockets opened so far are closed by
 * workers_free).
 */
int workers_listen(worker_pool *p);

/*
 * Starts the workers' threads (they inherit the caller's signal mask).
 * 0, or -1 when one could not start (those started run: workers_join).
 */
int workers_start(worker_pool *p);

/* Waits for the started workers to finish: each stops accepting once
   srv->stopping is set, and returns when its connections are done or the
   shutdown grace is over. */
void workers_join(worker_pool *p);

/* Frees the workers (joined, or never started), their loops and sockets. */
void workers_free(worker_pool *p);

#endif /* SLUICE_SERVER_WORKER_H */
