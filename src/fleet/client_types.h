/*
 * client_types.h — the private types of the Redis client (client.c): a
 * command from its sending to its reply, a node's connection and FIFOs,
 * the client. Shared only with client_peek.c, which shows tests their
 * state (client_internal.h); the daemon sees client.h.
 */
#ifndef SLUICE_FLEET_CLIENT_TYPES_H
#define SLUICE_FLEET_CLIENT_TYPES_H

#include <netdb.h>

#include "../base/strbuf.h"
#include "client.h"
#include "router.h"

typedef struct split_call split_call;

/*
 * A command, from its rc_send (or its internal making) to its reply.
 * Two clocks: `rt.deadline` is when the request must be answered (its
 * arrival, rc_send_since's since_ns, + the timeout, kept through every
 * resend); `reply_by` is when the node it was last queued on must have
 * answered it (that queuing + the timeout), or be taken for stalled and
 * failed. The deadline comes first (the request waited for the end of
 * its loop pass, a batch window, a resend): then the request alone is
 * answered (failed) at it, and the command stays in the node's FIFO,
 * `answered`, until its reply comes and is dropped (a pipeline cannot
 * skip a reply); the node fails only at reply_by. A resent command
 * (MOVED, ASK, NOSCRIPT, TRYAGAIN, a split batch's part, a connection
 * lost) does not fail its new node before reply_by either.
 */
typedef struct pending {
  struct pending *next;
  char *cmd; /* malloc'd; kept for a resend (MOVED, ASK, NOSCRIPT, ...) */
  size_t len;
  rt_call rt;   /* its routing: slot, redirects, ASKING, deadline */
  int internal; /* handshake / ASKING / SCRIPT LOAD: no callback */
  int probe;    /* the handshake's SL.VERSION (the module's build) */
  int again;    /* times sent again after its connection was lost (once;
                   twice when the second loss was a fresh connection's:
                   conn_lost) */
  int answered; /* its callback (or split) was told: the reply is dropped */
  /* A SCRIPT LOAD after NOSCRIPT: the command queued behind it that waits
     for the script (it cannot be answered before the load is). */
  struct pending *waiter;
  int64_t reply_by;
  int64_t retry_at; /* in the client's retry list: when to send again */
  rc_reply_fn cb;
  void *ud;
  split_call *split; /* a part of a split batch (its reply goes there) */
  size_t part;
} pending;

/* A batch that got TRYAGAIN, sent again as one call per request: the
   parts' replies, joined into the batch's reply once all are in. */
struct split_call {
  rc_client *c;
  pending *whole; /* the batch's callback and deadline */
  rc_split *sp;
  size_t left;  /* parts not answered yet */
  char err[96]; /* the first part's failure */
  redisReply *reply[];
};

typedef struct node {
  rc_client *c;
  int idx; /* in the router's nodes */
  struct sockaddr_storage sa;
  socklen_t salen;
  int resolved;
  rc_sock *sock;
  int state;                   /* RC_NODE_* */
  int worked;                  /* this connection has had a reply */
  int prev_worked;             /* the connection before it had one, and
                                  this one may be lost once (conn_lost) */
  int native;                  /* the module is loaded: SL.DECIDE, not
                                  EVALSHA (asked at each connect) */
  redisReader *reader;
  pending *head, *tail;        /* sent (or being sent), in order */
  pending *qhead, *qtail;      /* queued, not yet in a write */
  strbuf w;                    /* bytes of the queued commands */
  char *inflight;              /* the buffer the loop is writing */
  size_t inflight_cap;
  int64_t queued_at;           /* when the first queued command came */
  int64_t quiet_until;         /* no warning of a refused load before */
  int64_t lost_quiet_until;    /* no word of a lost connection before */
} node;

struct rc_client {
  rc_loop loop;
  rc_alloc alloc;
  rc_config cfg;
  rt_router rt;
  node nodes[RC_MAX_NODES]; /* one per router node, same index */
  pending *retry; /* TRYAGAIN: waiting to be sent again (retry_at) */
  rc_timer *timer;
  int64_t timer_at; /* armed for, 0 = disarmed */
  int freeing;
};

#endif /* SLUICE_FLEET_CLIENT_TYPES_H */
