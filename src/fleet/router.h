/*
 * router.h — Redis Cluster routing as both of fleet mode's clients drive
 * it: exact mode's async client (client.c, one per worker, on its event
 * loop) and approximate mode's sync thread (sync.c, blocking). One router
 * per client; no sockets, no clock (the time is an argument), no locks
 * (except the workers' shared map, below), and no allocation.
 *
 * What it keeps: the nodes and the slot map (slot.h's rc_topology), each
 * node's health (connected, or down for the breaker interval), and the
 * state of the map's refreshes. What it decides:
 *   - where a call goes (rt_slot_node);
 *   - what to do with a node's answer (rt_on_reply): accept it, send the
 *     call again to node N (after ASKING: an ASK's), load the script and
 *     send it again (NOSCRIPT), split a batch (TRYAGAIN), or, for a single
 *     request, try again after a pause or fail (rt_retry);
 *   - whom to ask for the whole map, and when (rt_map_due, rt_relearn):
 *     after a MOVED, the node it named; after a node that serves slots
 *     fails, or while its calls are refused or its probes fail, another
 *     node chosen in turn (rt_map_source); one at a time, at most once per
 *     RT_MAP_REFRESH_NS.
 * The clients do the I/O those decisions ask for, each in its own shape:
 * client.c queues on per-node pipelines with a deadline per command,
 * sync.c makes one blocking call at a time within its round's budget.
 */
#ifndef SLUICE_FLEET_ROUTER_H
#define SLUICE_FLEET_ROUTER_H

#include <stddef.h>
#include <stdint.h>

#include <hiredis/hiredis.h>

#include "slot.h"

/* The most redirects (MOVED, ASK) and script loads (NOSCRIPT) one call
   follows, all kinds together. */
#define RT_MAX_REDIRECTS 5
/* A MOVED, or a node that fails, has the whole map read again at most this
   often. */
#define RT_MAP_REFRESH_NS INT64_C(1000000000)
/* TRYAGAIN for a single request: the first pause before it is sent again,
   doubled each time up to RT_RETRY_DOUBLINGS times (1 ms .. 32 ms). */
#define RT_RETRY_MIN_NS INT64_C(1000000)
#define RT_RETRY_DOUBLINGS 5

typedef struct rc_shared_map rc_shared_map;

typedef struct rt_router {
  rc_topology t;          /* the nodes (indices never change), the map */
  int cluster;            /* 0: one node, every call to it */
  int64_t breaker_ns;     /* a failed node is left alone this long */
  int64_t timeout_ns;     /* a call's time to be answered (rt_retry) */
  int64_t down_until[RC_MAX_NODES]; /* the breaker: no connect before */
  uint8_t up[RC_MAX_NODES];         /* connected (a map source first) */
  int refreshing;         /* a CLUSTER SLOTS is out (rt_map_begin) */
  int64_t refresh_after;  /* and none is asked for before this */
  int map_from;           /* the node asked last (rt_map_source's turn) */
  rc_shared_map *shared;  /* the workers' newest map (rt_share), or NULL */
  uint64_t shared_seen;   /* ... the version this router has */
} rt_router;

/* A router on map t (copied), for a cluster or one node; no node
   connected, none down. */
void rt_init(rt_router *r, const rc_topology *t, int cluster, int breaker_ms,
             int timeout_ms);

static inline int rt_nodes(const rt_router *r) { return r->t.nnodes; }
static inline const rc_addr *rt_addr(const rt_router *r, int n) {
  return &r->t.nodes[n];
}

/* The node that serves slot (-1, or a slot no node is known for: node 0). */
int rt_slot_node(const rt_router *r, int slot);
/* Makes node n serve slot (tests; the map is otherwise Redis's). */
void rt_set_slot(rt_router *r, int slot, int n);
/* Whether the map gives node n any slot. */
int rt_serves_slots(const rt_router *r, int n);

/* ---- node health ---- */

/* Node n is connected: the first choice to read a map from. */
void rt_node_up(rt_router *r, int n);
/* Node n's connection is gone without a failure (closed while idle): not
   connected, and not down either (it may be connected again at once). */
void rt_node_closed(rt_router *r, int n);
/* Node n failed (lost, timed out, could not connect, refused the
   handshake): down for the breaker interval from now. Its calls are
   refused meanwhile; after it, the next call connects (the probe). */
void rt_node_failed(rt_router *r, int n, int64_t now);
/* Whether the breaker keeps node n down at now. */
int rt_node_down(const rt_router *r, int n, int64_t now);

/* ---- a node's answer ---- */

/* A call's routing state, kept by the client through its resends. */
typedef struct rt_call {
  int slot;         /* -1: no slot (node 0) */
  int redirects;    /* MOVED, ASK and NOSCRIPT followed so far */
  int asking;       /* its next sending goes after ASKING (an ASK's) */
  int load_refused; /* the SCRIPT LOAD its NOSCRIPT asked for was
                       refused: a NOSCRIPT now is its answer */
  int tries;        /* TRYAGAINs tried again after a pause */
  int64_t deadline; /* when its request must be answered (rt_retry) */
} rt_call;

typedef enum rt_verb {
  RT_ACCEPT, /* the reply is the call's answer (an error reply too) */
  RT_RESEND, /* send the call to .node (after ASKING when call->asking) */
  RT_LOAD,   /* SCRIPT LOAD on .node, then RT_RESEND there */
  RT_SPLIT,  /* TRYAGAIN: a batch is sent again as one call per request,
                each routed on its own (rc_batch_split); a call that is no
                batch asks rt_retry */
  RT_RETRY,  /* send the call again at .at, to its slot's node */
  RT_FAIL,   /* answer the call failed: .why */
} rt_verb;

typedef struct rt_action {
  rt_verb verb;
  int node;        /* RT_RESEND, RT_LOAD */
  int map;         /* RT_RESEND after a MOVED: the map is out of date;
                      ask .node for it (rt_map_due says whether now) */
  int64_t at;      /* RT_RETRY */
  const char *why; /* RT_FAIL */
} rt_action;

/*
 * What to do with node n's answer to a call: err is the text of an error
 * reply (len bytes), NULL for any other reply (accepted).
 *   MOVED slot host:port — the slot lives there now: the map learns it
 *     (the node added if new; no host: n's), the call goes there, and the
 *     map is read again (.map), since a MOVED rarely concerns its slot
 *     alone (a resharding moves many, a failover every slot of a master).
 *   ASK slot host:port — the slot is being migrated and the call's keys
 *     are not on n: the call goes there once, after ASKING (call->asking).
 *   NOSCRIPT — n restarted, was flushed, or never loaded the script: load
 *     it, then send the call again, after ASKING again when it was an
 *     ASK's (the flag lasts one command; without it the importing node
 *     would answer MOVED back to the source). Not once the load that a
 *     NOSCRIPT asked for was refused (call->load_refused).
 *   TRYAGAIN — a slot in mid-migration with the call's keys on both sides
 *     (or, asked, not all imported yet): RT_SPLIT.
 * Redirects and loads together, at most RT_MAX_REDIRECTS a call (then the
 * error is the answer), and a redirect to a node the map has no room for
 * is accepted as the answer too. Updates call (redirects, asking) and the
 * map (a MOVED).
 */
rt_action rt_on_reply(rt_router *r, rt_call *call, int n, const char *err,
                      size_t len);

/* Whether an error reply is one rt_on_reply follows (MOVED, ASK, NOSCRIPT,
   TRYAGAIN): a client that reads a pipeline first holds such replies. */
int rt_followable(const char *err, size_t len);

/*
 * TRYAGAIN for a single request (no batch to split): its own keys are
 * split between the source and the target of a migrating slot, which only
 * the migration's progress can change. As redis-cli and the cluster
 * clients do, it is sent again after a pause (1 ms, doubled each time up
 * to 32 ms), from the slot map again, while its deadline leaves room for
 * the pause and an answer (the pause again, and at least a tenth of the
 * timeout: 5 ms of the default 50; a retry is not sent to miss its
 * deadline by a hair): RT_RETRY at now + the pause (call updated: a try
 * more, no redirect, no ASKING). After that RT_FAIL, alone.
 */
rt_action rt_retry(const rt_router *r, rt_call *call, int64_t now);

/* ---- the map: whom to ask, and when ---- */

/*
 * Whether to ask node `from` for the whole map (CLUSTER SLOTS) now: in a
 * cluster, with none asked already and unanswered, none in the last
 * RT_MAP_REFRESH_NS, and `from` not down. When the caller asks, it says so
 * (rt_map_begin: the router counts it from now, and takes `from`'s turn as
 * a map source) and gives the answer to rt_map_end.
 */
int rt_map_due(const rt_router *r, int from, int64_t now);
void rt_map_begin(rt_router *r, int from, int64_t now);
/* The answer to rt_map_begin's CLUSTER SLOTS from node `from` (NULL: none,
   the call failed): read into the map (nodes it names for the first time
   added; the slots it names no master for keep theirs, never "nobody").
   Returns how many slots it set (> 0: the map was read; 0 or -1 not). */
int rt_map_end(rt_router *r, int from, const redisReply *slots);
/* No map is asked for before t (tests that look at something else). */
void rt_map_not_before(rt_router *r, int64_t t);

/* The node to read the map from instead of `failed` (-1: none): the first
   after the one asked last that is connected, else the first that the
   breaker does not keep down (to be connected for it); -1 when there is
   none. Taken in turn, so that a node that cannot tell (a seed gone from
   the cluster, one that answers an error) does not stop the others being
   asked. */
int rt_map_source(const rt_router *r, int failed, int64_t now);

/*
 * A master that dies answers nothing, not even a MOVED: whom to ask for
 * the map because node `failed` failed, or is down (-1: nobody, not now).
 * rt_relearn_any: because any node that serves slots is down.
 * Then the caller asks as rt_map_due says (rt_relearn's comment in
 * router.c says why and how often).
 */
int rt_relearn(const rt_router *r, int failed, int64_t now);
int rt_relearn_any(const rt_router *r, int64_t now);

/* ---- the workers' shared map ---- */

/*
 * The workers' clients share the newest slot map any of them has read
 * (after a MOVED or a dead master): the one that reads it publishes it,
 * and the others take it with their next call, so that a worker with no
 * call for the slots that moved (idle then) does not meet the old map
 * with its first one. Nodes are matched by address (each router numbers
 * its own). Thread-safe; NULL when out of memory.
 */
rc_shared_map *rc_shared_map_new(void);
void rc_shared_map_free(rc_shared_map *m);
/* Makes r publish to and take from m (which outlives r). */
void rt_share(rt_router *r, rc_shared_map *m);
/* Publishes r's map (just read) to the others. */
void rt_publish(rt_router *r);
/* Takes the map another router published since r last looked, if any
   (one atomic load when there is nothing new): each slot to r's node of
   the same address (added if new), except to a node r has down at now. */
void rt_adopt(rt_router *r, int64_t now);

#endif /* SLUICE_FLEET_ROUTER_H */
