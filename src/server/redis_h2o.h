/*
 * redis_h2o.h — exact mode's Redis client (src/fleet/client.h) on a
 * worker's h2o event loop: loop.h's adapter for h2o, as hiredis has one
 * per event library. The server is the only layer that knows h2o.
 */
#ifndef SLUICE_SERVER_REDIS_H2O_H
#define SLUICE_SERVER_REDIS_H2O_H

#define H2O_USE_EPOLL 1
#include <h2o.h>

#include "../fleet/loop.h"

/* The adapter for loop (which outlives every client made with it). */
rc_loop redis_h2o_loop(h2o_loop_t *loop);

#endif /* SLUICE_SERVER_REDIS_H2O_H */
