/*
 * client_peek.c — what tests of the Redis client look at beyond its API
 * (client_internal.h): a node's state and queue, the retries, the timer
 * and the router.
 */
#include "client_internal.h"
#include "client_types.h"


int rc_client_node_state(const rc_client *c, int n) {
  return c->nodes[n].state;
}

rc_sock *rc_client_node_sock(const rc_client *c, int n) {
  return c->nodes[n].sock;
}

int rc_client_node_queued(const rc_client *c, int n, size_t *bytes) {
  int k = 0;
  for (const pending *p = c->nodes[n].qhead; p; p = p->next) k++;
  *bytes = c->nodes[n].w.len;
  return k;
}

int rc_client_retries(const rc_client *c) {
  int k = 0;
  for (const pending *p = c->retry; p; p = p->next) k++;
  return k;
}

int64_t rc_client_timer_at(const rc_client *c) { return c->timer_at; }

rt_router *rc_client_router(rc_client *c) { return &c->rt; }
