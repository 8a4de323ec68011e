/*
 * router.c — Redis Cluster's routing decisions, shared by exact mode's
 * client and approximate mode's sync thread (router.h says what it keeps
 * and decides; the clients do the I/O).
 */
#include "router.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

void rt_init(rt_router *r, const rc_topology *t, int cluster, int breaker_ms,
             int timeout_ms) {
  memset(r, 0, sizeof *r);
  r->t = *t;
  r->cluster = cluster;
  r->breaker_ns = (int64_t)breaker_ms * 1000000;
  r->timeout_ns = (int64_t)timeout_ms * 1000000;
}

int rt_slot_node(const rt_router *r, int slot) {
  int n = slot >= 0 && slot < 16384 ? r->t.slot_node[slot] : 0;
  return n < r->t.nnodes ? n : 0;
}

void rt_set_slot(rt_router *r, int slot, int n) {
  r->t.slot_node[slot] = (uint8_t)n;
}

int rt_serves_slots(const rt_router *r, int n) {
  return n >= 0 && memchr(r->t.slot_node, n, sizeof r->t.slot_node) != NULL;
}

/* ---- node health ---- */

void rt_node_up(rt_router *r, int n) { r->up[n] = 1; }

void rt_node_closed(rt_router *r, int n) { r->up[n] = 0; }

void rt_node_failed(rt_router *r, int n, int64_t now) {
  r->up[n] = 0;
  r->down_until[n] = now + r->breaker_ns;
}

/* (A connected node is never down: it connects only once its breaker
   interval is over.) */
int rt_node_down(const rt_router *r, int n, int64_t now) {
  return !r->up[n] && now < r->down_until[n];
}

/* ---- a node's answer ---- */

static int starts(const char *s, size_t len, const char *prefix) {
  size_t n = strlen(prefix);
  return len >= n && !memcmp(s, prefix, n);
}

int rt_followable(const char *err, size_t len) {
  return err && (starts(err, len, "MOVED ") || starts(err, len, "ASK ") ||
                 starts(err, len, "NOSCRIPT") || starts(err, len, "TRYAGAIN"));
}

rt_action rt_on_reply(rt_router *r, rt_call *call, int n, const char *err,
                      size_t len) {
  rt_action a = {RT_ACCEPT, n, 0, 0, NULL};
  if (!err) return a;
  rc_redirect rd;
  if (call->redirects < RT_MAX_REDIRECTS && !rc_parse_redirect(err, len, &rd)) {
    /* "MOVED 3999 127.0.0.1:6381"; no host: the node's own */
    int to = rc_topology_node(&r->t, rd.host[0] ? rd.host : r->t.nodes[n].host,
                              rd.port);
    if (to >= 0) {
      if (!rd.ask) r->t.slot_node[rd.slot] = (uint8_t)to;
      call->redirects++;
      call->asking = rd.ask;
      call->load_refused = 0; /* another node: a load of its own */
      a.verb = RT_RESEND;
      a.node = to;
      a.map = !rd.ask;
      return a;
    }
  }
  if (starts(err, len, "NOSCRIPT") && call->redirects < RT_MAX_REDIRECTS &&
      !call->load_refused) {
    call->redirects++;
    a.verb = RT_LOAD;
    return a;
  }
  if (starts(err, len, "TRYAGAIN")) a.verb = RT_SPLIT;
  return a;
}

rt_action rt_retry(const rt_router *r, rt_call *call, int64_t now) {
  int64_t pause = RT_RETRY_MIN_NS << (call->tries < RT_RETRY_DOUBLINGS
                                          ? call->tries
                                          : RT_RETRY_DOUBLINGS);
  int64_t tenth = r->timeout_ns / 10;
  int64_t margin = pause > tenth ? pause : tenth;
  if (now + pause + margin > call->deadline)
    return (rt_action){RT_FAIL, -1, 0, 0, "TRYAGAIN until the deadline"};
  call->tries++;
  call->redirects = 0;
  call->asking = 0;
  return (rt_action){RT_RETRY, -1, 0, now + pause, NULL};
}

/* ---- the map: whom to ask, and when ---- */

/*
 * A MOVED says the slot map is out of date, and rarely for that slot
 * alone: a resharding moves many, a failover every slot of a master. So
 * besides the slot it names, the whole map is read again (CLUSTER SLOTS,
 * from the node the MOVED named, which knows the new configuration): the
 * other slots then need no MOVED of their own, and each client pays about
 * one MOVED per change of the cluster, not one per slot. One at a time, at
 * most once per RT_MAP_REFRESH_NS per client (each worker, the sync
 * thread). The same for a dead master's relearning (rt_relearn).
 */
int rt_map_due(const rt_router *r, int from, int64_t now) {
  return r->cluster && !r->refreshing && now >= r->refresh_after &&
         !rt_node_down(r, from, now);
}

void rt_map_begin(rt_router *r, int from, int64_t now) {
  r->refreshing = 1;
  r->refresh_after = now + RT_MAP_REFRESH_NS;
  r->map_from = from;
}

int rt_map_end(rt_router *r, int from, const redisReply *slots) {
  r->refreshing = 0;
  if (!slots) return -1;
  return rc_topology_read(&r->t, slots, r->t.nodes[from].host);
}

void rt_map_not_before(rt_router *r, int64_t t) { r->refresh_after = t; }

int rt_map_source(const rt_router *r, int failed, int64_t now) {
  int idle = -1;
  for (int k = 1; k <= r->t.nnodes; k++) {
    int n = (r->map_from + k) % r->t.nnodes;
    if (n == failed || rt_node_down(r, n, now)) continue;
    if (r->up[n]) return n;
    if (idle < 0) idle = n;
  }
  return idle;
}

/*
 * A master that dies answers nothing, not even a MOVED, so its slots'
 * calls would fail (exact mode: the breaker, on_store_error; approximate
 * mode: charges carried until they are dropped 10 s later) long after a
 * replica has taken them over (cluster-node-timeout and an election:
 * seconds after the death). So when a node that serves slots fails (lost,
 * timed out, cannot connect), and while it is down (exact mode: each call
 * refused for it, each failed probe; approximate mode: the end of each
 * pass), the whole map is read again from another node (rt_map_source),
 * as after a MOVED: one at a time, at most once per RT_MAP_REFRESH_NS.
 * Until the failover, the map read still gives the dead node its slots
 * (rc_topology_read keeps a slot no master is named for as it was, never
 * "nobody"): the next refused call, failed probe or pass asks again, so
 * the promotion is learned within about RT_MAP_REFRESH_NS of it.
 */
int rt_relearn(const rt_router *r, int failed, int64_t now) {
  if (!r->cluster || r->refreshing || now < r->refresh_after ||
      !rt_serves_slots(r, failed))
    return -1;
  return rt_map_source(r, failed, now);
}

int rt_relearn_any(const rt_router *r, int64_t now) {
  for (int n = 0; n < r->t.nnodes; n++)
    if (rt_node_down(r, n, now) && rt_serves_slots(r, n))
      return rt_relearn(r, n, now);
  return -1;
}

/* ---- the workers' shared map ---- */

struct rc_shared_map {
  pthread_mutex_t lock; /* t */
  _Atomic uint64_t version;
  rc_topology t;
};

rc_shared_map *rc_shared_map_new(void) {
  rc_shared_map *m = calloc(1, sizeof *m);
  if (m) pthread_mutex_init(&m->lock, NULL);
  return m;
}

void rc_shared_map_free(rc_shared_map *m) {
  if (!m) return;
  pthread_mutex_destroy(&m->lock);
  free(m);
}

void rt_share(rt_router *r, rc_shared_map *m) { r->shared = m; }

void rt_publish(rt_router *r) {
  rc_shared_map *m = r->shared;
  if (!m) return;
  pthread_mutex_lock(&m->lock);
  m->t = r->t;
  r->shared_seen = atomic_fetch_add(&m->version, 1) + 1;
  pthread_mutex_unlock(&m->lock);
}

/*
 * A map shared last is not always the newest (read from a node that had
 * not heard of a promotion yet), and a router knows better about the nodes
 * it has down: their slots stay where they are. Slots t names no node for
 * (or one r has no room for) stay as they were too.
 */
void rt_adopt(rt_router *r, int64_t now) {
  rc_shared_map *m = r->shared;
  if (!m || atomic_load_explicit(&m->version, memory_order_acquire) ==
                r->shared_seen)
    return;
  pthread_mutex_lock(&m->lock);
  const rc_topology *t = &m->t;
  uint8_t to[RC_MAX_NODES];
  for (int i = 0; i < t->nnodes; i++) {
    int k = rc_topology_node(&r->t, t->nodes[i].host, t->nodes[i].port);
    to[i] = k < 0 || rt_node_down(r, k, now) ? 0xff : (uint8_t)k;
  }
  for (int s = 0; s < 16384; s++)
    if (t->slot_node[s] < t->nnodes && to[t->slot_node[s]] != 0xff)
      r->t.slot_node[s] = to[t->slot_node[s]];
  r->shared_seen = atomic_load_explicit(&m->version, memory_order_relaxed);
  pthread_mutex_unlock(&m->lock);
}
