/*
 * client_internal.h — what a test of client.c looks at beyond its API: a
 * node's connection and state, what is queued on it, the retries waiting,
 * the timer, and the router (the nodes and the slot map). Not for the
 * daemon: its code uses client.h only.
 */
#ifndef SLUICE_FLEET_CLIENT_INTERNAL_H
#define SLUICE_FLEET_CLIENT_INTERNAL_H

#include "client.h"

enum { RC_NODE_DOWN, RC_NODE_CONNECTING, RC_NODE_UP };

/* Node n's connection state (RC_NODE_*), and its connection (NULL: none,
   never made or closed). */
int rc_client_node_state(const rc_client *c, int n);
rc_sock *rc_client_node_sock(const rc_client *c, int n);
/* How many commands are queued on node n and not yet written, and the
   bytes waiting in its write buffer (*bytes). */
int rc_client_node_queued(const rc_client *c, int n, size_t *bytes);
/* How many TRYAGAIN retries wait for their pause. */
int rc_client_retries(const rc_client *c);
/* When the timer is armed for (monotonic ns), 0 when it is not. */
int64_t rc_client_timer_at(const rc_client *c);
/* The client's router: its nodes, slot map and breaker. */
rt_router *rc_client_router(rc_client *c);

#endif /* SLUICE_FLEET_CLIENT_INTERNAL_H */
