/*
 * sync.c — approximate mode's sync thread.
 *
 * Every interval: the approximate backend hands over what each (limiter,
 * key) charged locally since the last round (approx_take); each is charged to the
 * key's state in Redis by force, by the exact-mode script ("f" mode: the
 * state goes below empty when the fleet admitted more than the limit, a
 * debt). The script's reply is the fleet's signed level, and a local
 * limiter above it is charged the difference by force (approx_apply):
 * after each round every daemon owes what the fleet owes, and pays it back
 * before it allows again.
 *
 * The bound this gives: between two rounds each daemon decides alone, so
 * the fleet can let through, beyond the limit, what the other daemons
 * admit in one interval: (N - 1) x (burst + the refill of one interval)
 * for N daemons. Because that excess is then owed by every daemon, it
 * does not accumulate: over any span the fleet admits at most one
 * limiter's allowance plus that bound (docs/fleet.md has the figures).
 *
 * Keys go RS_BATCH_MAX to a script call (one node, one slot), pipelined
 * up to SYNC_WINDOW calls per node ahead of their replies. It uses
 * hiredis's blocking API on its own connections: this thread does nothing
 * else, and a dead Redis only delays the next round (each read waits at
 * most the longest of --redis-timeout, the interval and 1 s). Local
 * decisions never wait for it. The charges of a
 * call Redis did not run (no connection, MOVED, NOSCRIPT, ...) are pushed
 * again with every round for up to 10 s (approx_apply;
 * sluice_sync_retried_cost_total), then counted lost
 * (sluice_sync_lost_cost_total). Those of a call sent without a reply are
 * not: Redis may have run it, or may run it yet (a hung server that
 * resumes); they are counted in sluice_sync_unconfirmed_cost_total.
 *
 * In a cluster whose slots move, what a node answers instead of running a
 * call is followed within the round, once the pipeline is read, so that a
 * migration neither delays nor loses charges, as the router decides
 * (router.h): MOVED (the slot's node, learned for later rounds too, new
 * nodes included, and the whole map read again), ASK (to the named node,
 * after ASKING), NOSCRIPT (the script loaded, after ASKING again for an
 * ASK's call) and TRYAGAIN (a batch whose keys are partly migrated: one
 * call per key, each followed on its own). Only what still fails goes
 * again with the next rounds. A master that dies answers nothing, not even
 * MOVED: while a node that serves slots is down (its call or its connect
 * failed), another node is asked for the whole map at the end of each
 * pass, at most once a second (relearn_map), and the charges carried
 * meanwhile go to the replica that took its slots over, from the round
 * after the one that learns it.
 *
 * A round's time is its interval: rounds start every interval (one that
 * ran long is followed at once), and the follow-up calls, one at a time,
 * start only within the interval since the round's start. Those it has no
 * time for were not run: their charges go with the next round (carried,
 * as any unsent call's), which sends them straight to a slot's new node
 * (the MOVED is learned all the same). Without the bound, a migration's
 * follow-ups (a call per key after TRYAGAIN) could hold a round for many
 * intervals, and every daemon would go on deciding alone meanwhile.
 *
 * After each round, the thread reads the resets other daemons published
 * (read_resets: a subscription of its own) and drops this daemon's state
 * for their keys (approx_reset_message).
 */
#include "sync.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "../base/clock.h"
#include "../base/log.h"
#include "router.h"
#include "script.h"
#include "slot.h"
#include "sync_internal.h"

/* The shortest wait for a reply (rs_sync_start). */
#define SYNC_TIMEOUT_MIN_MS 1000

/* The resets' subscription is sent a PING this often (ms); one left
   unanswered for the timeout is a connection that died without a word
   (no FIN, no reset: a host gone, a partition). */
#define SYNC_SUB_PING_MS 1000

struct rs_sync {
  approx *a;
  rc_config cfg;
  rt_router rt; /* the nodes, the slot map, the breaker */
  rs_transport io;
  int interval_ms;
  redisContext *ctx[RC_MAX_NODES]; /* (the router's node up while set) */
  int64_t until; /* (ms) the round's follow-up calls start before this */
  redisContext *sub;     /* subscribed to the resets' channel (or NULL) */
  int64_t sub_after;     /* (ms) no new subscription before this */
  int64_t sub_pinged;    /* (ms) the last PING on it */
  int64_t sub_ping_at;   /* (ms) ... when still unanswered, else 0 */
  pthread_t tid;
  pthread_mutex_t lock;
  pthread_cond_t cond;
  int stop;
};

/* The monotonic clock in ms, the unit of the sync's intervals. */
static int64_t mono_ms(void) { return clock_mono_ns() / 1000000; }

/* Whether an idle connection was closed by its peer (a Redis restarted
   since the last round): between rounds Redis has nothing to say, so
   anything to read is its EOF or reset. A round written to it could not
   tell "not run" from "run, then the reply lost", and would not push its
   charges again. */
static int peer_closed(const redisContext *c) {
  struct pollfd p = {.fd = c->fd, .events = POLLIN};
  if (poll(&p, 1, 0) <= 0) return 0;
  char b;
  ssize_t r = recv(c->fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
  return r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
}

/* Drops node n's connection if Redis closed it while it sat idle (only
   while nothing is appended or pending on it: then a reply would look the
   same); node_ctx reconnects at once, Redis may be back already. */
static void drop_if_closed(rs_sync *s, int n) {
  if (s->ctx[n] && peer_closed(s->ctx[n])) {
    redisFree(s->ctx[n]);
    s->ctx[n] = NULL;
    rt_node_closed(&s->rt, n);
  }
}

/* Node n's connection, made now if there is none and the breaker lets it
   be; a failed connect leaves n down for the breaker interval. */
static redisContext *node_ctx(rs_sync *s, int n) {
  if (s->ctx[n]) return s->ctx[n];
  if (rt_node_down(&s->rt, n, clock_mono_ns())) return NULL;
  char err[256];
  redisContext *c =
      s->io.connect(s->io.ud, &s->cfg, rt_addr(&s->rt, n), err, sizeof err);
  if (!c) {
    log_msg("warn", "sync: redis %s; retrying in %d ms", err,
            s->cfg.breaker_ms);
    rt_node_failed(&s->rt, n, clock_mono_ns());
    return NULL;
  }
  s->ctx[n] = c;
  rt_node_up(&s->rt, n);
  return c;
}

/* Node n failed: its connection dropped, the node down for the breaker
   interval. */
static void node_drop(rs_sync *s, int n) {
  if (s->ctx[n]) redisFree(s->ctx[n]);
  s->ctx[n] = NULL;
  rt_node_failed(&s->rt, n, clock_mono_ns());
}

/* Appends a command of hiredis's format to c through the transport
   (REDIS_ERR: out of memory, or the transport's failure). */
static int append_fmt(rs_sync *s, redisContext *c, const char *fmt, ...) {
  va_list ap;
  char *cmd;
  va_start(ap, fmt);
  int len = redisvFormatCommand(&cmd, fmt, ap);
  va_end(ap);
  if (len < 0) return REDIS_ERR;
  int rc = s->io.append(s->io.ud, c, cmd, (size_t)len);
  free(cmd);
  return rc;
}

/* The address of node n, for the log. */
static const rc_addr *addr(const rs_sync *s, int n) {
  return rt_addr(&s->rt, n);
}

/* A key of a pass: where it goes, sorted by (node, slot). */
typedef struct sync_key {
  size_t i; /* index in the round */
  int node, slot;
} sync_key;

static int by_node_slot(const void *a, const void *b) {
  const sync_key *x = a, *y = b;
  if (x->node != y->node) return x->node < y->node ? -1 : 1;
  if (x->slot != y->slot) return x->slot < y->slot ? -1 : 1;
  return x->i < y->i ? -1 : x->i > y->i;
}

/* Whether an error reply says the command was not run at all (a redirect,
   a missing script, a node not ready): its charges can go again. An error
   raised inside the script (Redis 7 says "script:") may come after some
   keys were written: not that. */
static int refused_unrun(const char *err) {
  static const char *const code[] = {"MOVED ",   "ASK ",        "TRYAGAIN",
                                     "NOSCRIPT", "CLUSTERDOWN", "LOADING",
                                     "MASTERDOWN", "READONLY",  "BUSY",
                                     "NOAUTH"};
  if (strstr(err, "script:")) return 0;
  for (size_t i = 0; i < sizeof code / sizeof *code; i++)
    if (!strncmp(err, code[i], strlen(code[i]))) return 1;
  return 0;
}

/* A batch of a pass: keys ks[first .. first+n) of one node and slot. */
typedef struct sync_batch {
  size_t first, n;
  int sent;
  char *cmd; /* kept for a resend (follow) */
  size_t len;
} sync_batch;

/* What follow() or a split handles: a node's answer instead of running
   the call. */
static int followable(const redisReply *r) {
  return r->type == REDIS_REPLY_ERROR && rt_followable(r->str, r->len);
}

/*
 * Sends cmd to node nd, after SCRIPT LOAD (load) and ASKING (asking), and
 * waits for its reply (owned). NULL when it failed, with *failed saying
 * how: APPROX_LEVEL_UNSENT (no connection: never written) or
 * APPROX_LEVEL_UNKNOWN (written, no reply: Redis may run it; the connection
 * is dropped). One command at a time: this runs once every pipelined
 * reply of the pass is in, so nothing else is pending on any connection.
 */
static redisReply *call_node(rs_sync *s, int nd, int load, int asking,
                             const char *cmd, size_t len, int64_t *failed) {
  drop_if_closed(s, nd); /* nothing pending on any connection now */
  redisContext *c = node_ctx(s, nd);
  *failed = APPROX_LEVEL_UNSENT;
  if (!c) return NULL;
  size_t sl;
  const char *src = rs_script(&sl);
  if ((load && append_fmt(s, c, "SCRIPT LOAD %b", src, sl) != REDIS_OK) ||
      (asking && append_fmt(s, c, "ASKING") != REDIS_OK) ||
      s->io.append(s->io.ud, c, cmd, len) != REDIS_OK) {
    /* Out of memory: nothing was written (hiredis writes at the read),
       and the context is unusable; what was appended goes with it. */
    node_drop(s, nd);
    return NULL;
  }
  approx_count(s->a, APPROX_CALLS, 1);
  redisReply *r = NULL;
  for (int i = 0; i <= load + asking; i++) {
    if (r) freeReplyObject(r);
    r = NULL;
    if (s->io.get_reply(s->io.ud, c, (void **)&r) != REDIS_OK || !r) {
      log_msg("warn", "sync: redis %s:%d: %s", addr(s, nd)->host,
              addr(s, nd)->port, c->errstr);
      node_drop(s, nd);
      *failed = APPROX_LEVEL_UNKNOWN;
      return NULL;
    }
  }
  return r;
}

/* Whether the round's time is up (rs_sync.until): no follow-up call is
   started after it. */
static int out_of_time(const rs_sync *s) { return mono_ms() >= s->until; }

/*
 * Reads the whole map from node nd (CLUSTER SLOTS) when the router says
 * it is due (a MOVED named nd; or nd is the map source for a dead
 * master): the next rounds then send each key straight to its node. Like
 * call_node, one command with nothing else pending; a failure only drops
 * the connection.
 */
static void refresh_map(rs_sync *s, int nd) {
  int64_t now = clock_mono_ns();
  if (!rt_map_due(&s->rt, nd, now)) return;
  rt_map_begin(&s->rt, nd, now);
  drop_if_closed(s, nd);
  redisContext *c = node_ctx(s, nd);
  redisReply *r = NULL;
  if (c && (append_fmt(s, c, "CLUSTER SLOTS") != REDIS_OK ||
            s->io.get_reply(s->io.ud, c, (void **)&r) != REDIS_OK || !r)) {
    log_msg("warn", "sync: redis %s:%d: CLUSTER SLOTS: %s", addr(s, nd)->host,
            addr(s, nd)->port, c->errstr);
    node_drop(s, nd);
    r = NULL;
  }
  rt_map_end(&s->rt, nd, r);
  freeReplyObject(r);
}

/* At the end of each pass (nothing pending on any connection: refresh_map
   is one blocking call): while a node that serves slots is down, the map
   is read from another node as the router says (rt_relearn: a master that
   died), and the round after the one that learns the promotion sends the
   carried charges to the new master. */
static void relearn_map(rs_sync *s) {
  int from = rt_relearn_any(&s->rt, clock_mono_ns());
  if (from >= 0) refresh_map(s, from);
}

/*
 * Follows r, what node nd answered cmd instead of running it, as the
 * router says (rt_on_reply): MOVED (the slot's node learned, the call sent
 * there, the whole map read again), ASK (sent there, after ASKING),
 * NOSCRIPT (the script loaded and the call sent again, after ASKING again
 * when it was an ASK's). None once the round's time is up (a MOVED is
 * still learned, for the next round). Takes r (NULL: returned as it is);
 * returns the last reply (owned; *tryagain set when it is a TRYAGAIN, for
 * the caller to split), or NULL when a call failed or was not made
 * (*failed: call_node's; APPROX_LEVEL_UNSENT when out of time).
 */
static redisReply *follow(rs_sync *s, int nd, const char *cmd, size_t len,
                          redisReply *r, int64_t *failed, int *tryagain) {
  rt_call call = {0};
  while (r && r->type == REDIS_REPLY_ERROR) {
    rt_action a = rt_on_reply(&s->rt, &call, nd, r->str, r->len);
    if (a.verb == RT_SPLIT && tryagain) *tryagain = 1;
    if (a.verb != RT_RESEND && a.verb != RT_LOAD) break;
    freeReplyObject(r);
    if (out_of_time(s)) { /* not run: carried to the next round */
      *failed = APPROX_LEVEL_UNSENT;
      return NULL;
    }
    if (a.map) refresh_map(s, a.node);
    nd = a.node;
    r = call_node(s, nd, a.verb == RT_LOAD, call.asking, cmd, len, failed);
  }
  return r;
}

/*
 * The outcome of a call for keys ks[first .. first+n): r (freed here) or,
 * NULL, the call failed as `failed` says. Each key's level is the fleet's
 * after its charge; or APPROX_LEVEL_UNSENT when Redis did not run the call
 * (never written; an error reply that says so: refused_unrun); or
 * APPROX_LEVEL_UNKNOWN when it may have (written without a reply, another
 * error, a malformed reply). All but the unwritten count as a failed call.
 */
static void settle(rs_sync *s, size_t first, size_t n, const sync_key *ks,
                   rs_call *call, int64_t *level, redisReply *r,
                   int64_t failed) {
  int bad = !r || r->type == REDIS_REPLY_ERROR;
  int64_t bad_level = APPROX_LEVEL_UNKNOWN;
  if (!r)
    bad_level = failed;
  else if (bad && refused_unrun(r->str))
    bad_level = APPROX_LEVEL_UNSENT;
  for (size_t x = 0; x < n && !bad; x++) {
    size_t i = ks[first + x].i;
    sl_decision dec;
    int allowed;
    int64_t rnow;
    if (rs_parse(&call[i], r, &dec, &allowed, &rnow))
      bad = 1;
    else
      level[i] = dec.remaining;
  }
  if (bad) {
    if (r || failed != APPROX_LEVEL_UNSENT)
      approx_count(s->a, APPROX_ERRORS, 1);
    for (size_t x = 0; x < n; x++) level[ks[first + x].i] = bad_level;
  }
  if (r) freeReplyObject(r);
}

/*
 * TRYAGAIN for batch b (its keys partly migrated, or, asked, not all on
 * the target yet): each key's call on its own (rc_batch_split: a request
 * is one key here), from the slot map, followed on its own, while the
 * round has time (the rest: unsent, carried); the key's rs_call then
 * reads a reply of its own. 0, or -1 when b cannot be split (left to
 * settle()).
 */
static int split_batch(rs_sync *s, const sync_batch *b, const sync_key *ks,
                       rs_call *call, int64_t *level) {
  rc_split *sp = rc_batch_split(b->cmd, b->len);
  if (!sp || sp->n != b->n) {
    rc_split_free(sp);
    return -1;
  }
  for (size_t x = 0; x < sp->n; x++) {
    size_t i = ks[b->first + x].i;
    rs_call_alone(&call[i]);
    int nd = rt_slot_node(&s->rt, ks[b->first + x].slot);
    int64_t failed = APPROX_LEVEL_UNSENT;
    redisReply *r = NULL;
    if (!out_of_time(s)) {
      r = call_node(s, nd, 0, 0, sp->part[x].cmd, sp->part[x].len, &failed);
      r = follow(s, nd, sp->part[x].cmd, sp->part[x].len, r, &failed, NULL);
    }
    settle(s, b->first + x, 1, ks, call, level, r, failed);
  }
  rc_split_free(sp);
  return 0;
}

/* The most calls a pass has written to one node and not read the reply
   of: each reply read makes room for the next call. A round of 100,000
   keys written as one pipeline held megabytes in both directions, and its
   write could wait on Redis past the timeout: every call of it then
   counted as sent without a reply, charges Redis had likely taken or
   would take. With a window, a failure leaves at most the window's calls
   unconfirmed; those not yet written are pushed again. */
#define SYNC_WINDOW 8

/* A pass: the round's keys by node and slot, their batches, and per node
   the next batch whose reply is to be read and how many are in flight. */
typedef struct sync_pass {
  sync_key *ks;
  rs_call *call;
  sync_batch *bs;
  redisReply **held; /* replies to follow once all are in (may be NULL) */
  int64_t *level;
  size_t nb;
  size_t next[RC_MAX_NODES];
  int inflight[RC_MAX_NODES];
  size_t written[RC_MAX_NODES]; /* its batches below this one are written */
} sync_pass;

/* Reads the reply of node nd's oldest call in flight: its keys' levels,
   or held to be followed. When the read fails, the node is dropped and
   each of its calls in flight may have run (APPROX_LEVEL_UNKNOWN). */
static void read_one(rs_sync *s, sync_pass *ps, int nd) {
  size_t k = ps->next[nd];
  while (k < ps->nb && !(ps->bs[k].sent && ps->ks[ps->bs[k].first].node == nd))
    k++;
  if (k >= ps->nb) { /* nothing written to nd after all */
    ps->inflight[nd] = 0;
    return;
  }
  sync_batch *b = &ps->bs[k];
  ps->next[nd] = k + 1;
  ps->inflight[nd]--;
  approx_count(s->a, APPROX_CALLS, 1);
  redisReply *r = NULL;
  ps->written[nd] = ps->nb; /* hiredis writes all it holds, then reads */
  if (s->io.get_reply(s->io.ud, s->ctx[nd], (void **)&r) != REDIS_OK || !r) {
    log_msg("warn", "sync: redis %s:%d: %s", addr(s, nd)->host,
            addr(s, nd)->port, s->ctx[nd]->errstr);
    node_drop(s, nd);
    approx_count(s->a, APPROX_ERRORS, 1);
    /* This call and the node's others in flight (all its sent calls from
       this one on) were written, or partly: Redis may run them. */
    for (size_t k2 = k; k2 < ps->nb; k2++) {
      sync_batch *b2 = &ps->bs[k2];
      if (!b2->sent || ps->ks[b2->first].node != nd) continue;
      for (size_t x = 0; x < b2->n; x++)
        ps->level[ps->ks[b2->first + x].i] = APPROX_LEVEL_UNKNOWN;
    }
    ps->next[nd] = ps->nb;
    ps->inflight[nd] = 0;
    return;
  }
  if (ps->held && followable(r))
    ps->held[k] = r;
  else
    settle(s, b->first, b->n, ps->ks, ps->call, ps->level, r,
           APPROX_LEVEL_UNKNOWN);
}

/* An append to node nd's connection failed (out of memory): the context
   is unusable and is dropped. Its batches appended since its last read
   were not written (hiredis writes at a read): unsent, pushed again; those
   written and not read may have run (APPROX_LEVEL_UNKNOWN). Its later batches
   find the node down and stay unsent too. */
static void append_failed(rs_sync *s, sync_pass *ps, int nd) {
  log_msg("warn", "sync: redis %s:%d: %s", addr(s, nd)->host,
          addr(s, nd)->port, s->ctx[nd]->errstr);
  node_drop(s, nd);
  for (size_t k = ps->next[nd]; k < ps->nb; k++) {
    sync_batch *b = &ps->bs[k];
    if (!b->sent || ps->ks[b->first].node != nd) continue;
    if (k >= ps->written[nd]) {
      b->sent = 0;
      continue;
    }
    for (size_t x = 0; x < b->n; x++)
      ps->level[ps->ks[b->first + x].i] = APPROX_LEVEL_UNKNOWN;
  }
  ps->next[nd] = ps->nb;
  ps->inflight[nd] = 0;
}

/*
 * One pass: charges cost[i] (> 0) to key i by force and fills
 * level[i]: the fleet's signed level after it; APPROX_LEVEL_UNSENT when Redis
 * did not run the call (not sent: no connection, out of memory, out of
 * time; or refused unrun: MOVED, NOSCRIPT, ... that following them,
 * below, did not get past); APPROX_LEVEL_UNKNOWN when it may have (sent, no
 * reply). Keys of one node (one slot in a cluster) go RS_BATCH_MAX to a
 * call, pipelined up to SYNC_WINDOW calls ahead of their replies. The
 * pass has the interval from its start for its follow-up calls
 * (rs_sync.until).
 */
static void pass(rs_sync *s, approx_delta **d, size_t n, const int64_t *cost,
                 int64_t *level) {
  s->until = mono_ms() + s->interval_ms;
  /* On the heap: a round can hold every key of an interval (100k+). */
  sync_pass ps = {0};
  sync_key *ks = ps.ks = malloc(n * sizeof *ks);
  rs_call *call = ps.call = malloc(n * sizeof *call);
  sync_batch *bs = ps.bs = malloc(n * sizeof *bs);
  ps.held = calloc(n ? n : 1, sizeof *ps.held);
  ps.level = level;
  size_t nk = 0, nb = 0;
  for (size_t i = 0; i < n; i++) level[i] = APPROX_LEVEL_UNSENT;
  if (!ks || !call || !bs) {
    free(ks), free(call), free(bs), free(ps.held);
    return;
  }
  /* Before anything is appended: a connection dropped later in the pass
     would take its unwritten batches with it. */
  for (int nd = 0; nd < rt_nodes(&s->rt); nd++) drop_if_closed(s, nd);
  for (size_t i = 0; i < n; i++) {
    if (cost[i] <= 0) continue;
    size_t klen;
    const char *key = approx_delta_key(d[i], &klen);
    int slot = s->cfg.cluster ? (int)rc_key_slot(key, klen) : 0;
    int nd = rt_slot_node(&s->rt, slot);
    ks[nk++] = (sync_key){i, nd, slot};
  }
  if (s->cfg.cluster) /* else one node, slot 0: in order already */
    qsort(ks, nk, sizeof *ks, by_node_slot);
  for (size_t k = 0; k < nk;) {
    size_t m = 1;
    while (k + m < nk && m < RS_BATCH_MAX && ks[k + m].node == ks[k].node &&
           ks[k + m].slot == ks[k].slot)
      m++;
    sync_batch *b = &bs[nb++];
    ps.nb = nb;
    *b = (sync_batch){k, m, 0, NULL, 0};
    k += m;
    int nd = ks[b->first].node;
    redisContext *c = node_ctx(s, nd);
    if (!c) continue;
    rs_request req[RS_BATCH_MAX];
    char *words[RS_BATCH_MAX];
    size_t ok = 0;
    for (size_t x = 0; x < m; x++) {
      size_t i = ks[b->first + x].i;
      rs_check chk = {.policy = approx_delta_policy(d[i]), .cost = cost[i]};
      chk.key = approx_delta_key(d[i], &chk.key_len);
      req[ok].call = &call[i];
      if (rs_prepare_force(&chk, 1, &call[i], &words[ok], &req[ok].keys_len,
                           &req[ok].len))
        break;
      req[ok].words = words[ok];
      ok++;
    }
    char *cmd = NULL;
    size_t len = 0;
    if (ok == m && !rs_format_batch(req, m, RS_FORCE, -1, &cmd, &len)) {
      if (s->io.append(s->io.ud, c, cmd, len) == REDIS_OK) {
        b->sent = 1;
        if (++ps.inflight[nd] >= SYNC_WINDOW) read_one(s, &ps, nd);
      } else {
        b->sent = 1; /* for append_failed: unsent with the others */
        append_failed(s, &ps, nd);
      }
    }
    b->cmd = cmd;
    b->len = len;
    for (size_t x = 0; x < ok; x++) free(words[x]);
  }
  for (int nd = 0; nd < RC_MAX_NODES; nd++)
    while (ps.inflight[nd] > 0) read_one(s, &ps, nd);
  /* The replies to follow (a slot on the move), once every pipelined
     reply is in. */
  for (size_t k = 0; ps.held && k < nb; k++) {
    sync_batch *b = &bs[k];
    if (!ps.held[k]) continue;
    int64_t failed = APPROX_LEVEL_UNKNOWN;
    int tryagain = 0;
    redisReply *r = follow(s, ks[b->first].node, b->cmd, b->len, ps.held[k],
                           &failed, &tryagain);
    if (tryagain && !split_batch(s, b, ks, call, level))
      freeReplyObject(r);
    else
      settle(s, b->first, b->n, ks, call, level, r, failed);
  }
  relearn_map(s); /* a master that died: its slots' new one */
  free(ps.held);
  for (size_t k = 0; k < nb; k++) free(bs[k].cmd);
  free(ks);
  free(call);
  free(bs);
}

static void round_(rs_sync *s) {
  approx_delta *list = approx_take(s->a);
  size_t n = 0;
  for (approx_delta *d = list; d; d = approx_delta_next(d)) n++;
  if (!n) return;
  approx_count(s->a, APPROX_ROUNDS, 1);
  approx_delta **d = malloc(n * sizeof *d);
  int64_t *cost = malloc(n * sizeof *cost), *level = malloc(n * sizeof *level);
  if (!d || !cost || !level) {
    free(d), free(cost), free(level);
    approx_apply(s->a, list, NULL, 0);
    return;
  }
  size_t i = 0;
  for (approx_delta *x = list; x; x = approx_delta_next(x), i++) {
    d[i] = x;
    cost[i] = approx_delta_cost(x);
  }
  pass(s, d, n, cost, level);
  approx_apply(s->a, list, level, clock_wall_ns());
  free(d);
  free(cost);
  free(level);
}

/*
 * Other daemons' resets: a connection of its own, subscribed to the
 * resets' channel (approx_reset_channel) on the first node that accepts
 * and that the rounds have not found down (in a cluster a PUBLISH reaches
 * the subscribers of every node), read
 * after each round without waiting: a reset published by any daemon
 * drops this daemon's state for its keys within about an interval
 * (approx_reset_message). Pub/sub keeps nothing for a subscriber that was
 * not there: while the subscription is down (tried again every breaker
 * interval) this daemon misses the resets, and its state for their keys
 * refills as its algorithm refills it. A connection that died without a
 * word is found by a PING every SYNC_SUB_PING_MS, unanswered for the
 * timeout.
 */
static void subscribe(rs_sync *s) {
  int64_t now = mono_ms();
  if (s->sub || now < s->sub_after) return;
  s->sub_after = now + s->cfg.breaker_ms;
  char ch[64], err[256] = "every node is down (breaker)";
  approx_reset_channel(s->a, ch, sizeof ch);
  for (int n = 0; n < rt_nodes(&s->rt); n++) {
    if (rt_node_down(&s->rt, n, clock_mono_ns()))
      continue; /* known down: no connect wait */
    redisContext *c =
        s->io.connect(s->io.ud, &s->cfg, rt_addr(&s->rt, n), err, sizeof err);
    if (!c) continue;
    redisReply *r = NULL;
    if (append_fmt(s, c, "SUBSCRIBE %s", ch) != REDIS_OK ||
        s->io.get_reply(s->io.ud, c, (void **)&r) != REDIS_OK)
      r = NULL;
    int ok = r && r->type == REDIS_REPLY_ARRAY && r->elements == 3;
    if (!ok)
      snprintf(err, sizeof err, "%s:%d: SUBSCRIBE: %s", addr(s, n)->host,
               addr(s, n)->port,
               r && r->type == REDIS_REPLY_ERROR ? r->str : c->errstr);
    freeReplyObject(r);
    if (ok) {
      s->sub = c;
      s->sub_pinged = now;
      s->sub_ping_at = 0;
      approx_subscribed(s->a, 1);
      return;
    }
    redisFree(c);
  }
  log_msg("warn", "sync: resets: cannot subscribe (%s); retrying in %d ms", err,
          s->cfg.breaker_ms);
}

/* Whether r is a message on the channel (its payload: a reset), or the
   answer to a PING (subscribed, RESP2: ["pong", ""]). */
static int is_kind(const redisReply *r, const char *kind, size_t elements) {
  return r->type == REDIS_REPLY_ARRAY && r->elements == elements &&
         r->element[0]->type == REDIS_REPLY_STRING &&
         !strcmp(r->element[0]->str, kind) &&
         r->element[elements - 1]->type == REDIS_REPLY_STRING;
}

static void read_resets(rs_sync *s) {
  subscribe(s);
  const char *why = NULL;
  for (int msgs = 0; s->sub && msgs < SYNC_SUB_MAX_MSGS;) {
    void *x = NULL;
    if (redisGetReplyFromReader(s->sub, &x) != REDIS_OK) goto lost;
    if (!x) { /* nothing buffered: read what has come, if anything */
      struct pollfd p = {.fd = s->sub->fd, .events = POLLIN};
      if (poll(&p, 1, 0) <= 0) break;
      if (redisBufferRead(s->sub) != REDIS_OK) goto lost;
      continue;
    }
    redisReply *r = x;
    if (is_kind(r, "message", 3)) {
      approx_reset_message(s->a, r->element[2]->str, r->element[2]->len);
      msgs++;
    } else if (is_kind(r, "pong", 2)) {
      s->sub_ping_at = 0;
    }
    freeReplyObject(r);
  }
  if (!s->sub) return;
  int64_t now = mono_ms();
  if (s->sub_ping_at && now - s->sub_ping_at > s->cfg.timeout_ms) {
    why = "no answer to PING";
    goto lost;
  }
  if (!s->sub_ping_at && now - s->sub_pinged >= SYNC_SUB_PING_MS) {
    int done = 0;
    if (append_fmt(s, s->sub, "PING") != REDIS_OK) goto lost;
    while (!done)
      if (redisBufferWrite(s->sub, &done) != REDIS_OK) goto lost;
    s->sub_pinged = s->sub_ping_at = now;
  }
  return;
lost:
  log_msg("warn", "sync: resets: subscription lost (%s); resubscribing",
          why ? why : s->sub->errstr);
  redisFree(s->sub);
  s->sub = NULL;
  approx_subscribed(s->a, 0);
  s->sub_after = 0; /* at once (the next round): Redis may be back already */
}

/* Rounds start every interval: the wait is what the last round left of
   its interval (none when it ran past it). Measured on the monotonic
   clock, the wait given to the condition's (realtime) clock from now: a
   step of the wall clock moves no round. */
static void *sync_main(void *arg) {
  rs_sync *s = arg;
  int64_t took_ms = 0;
  pthread_mutex_lock(&s->lock);
  while (!s->stop) {
    int64_t wait_ms = s->interval_ms - took_ms;
    if (wait_ms > 0) {
      struct timespec until;
      clock_gettime(CLOCK_REALTIME, &until);
      int64_t ns = until.tv_nsec + wait_ms * 1000000;
      until.tv_sec += ns / 1000000000;
      until.tv_nsec = ns % 1000000000;
      pthread_cond_timedwait(&s->cond, &s->lock, &until);
    }
    pthread_mutex_unlock(&s->lock);
    int64_t start = mono_ms();
    round_(s);
    read_resets(s); /* after the round: a level it brought from before
                       a reset is never applied over it */
    took_ms = mono_ms() - start;
    pthread_mutex_lock(&s->lock);
  }
  pthread_mutex_unlock(&s->lock);
  return NULL;
}

/* The transport of the daemon: hiredis's blocking API. */
static redisContext *hiredis_connect(void *ud, const rc_config *c,
                                     const rc_addr *a, char *err, size_t len) {
  (void)ud;
  return rc_connect_sync(c, a, err, len);
}

static int hiredis_append(void *ud, redisContext *c, const char *cmd,
                          size_t len) {
  (void)ud;
  return redisAppendFormattedCommand(c, cmd, len);
}

static int hiredis_get_reply(void *ud, redisContext *c, void **reply) {
  (void)ud;
  return redisGetReply(c, reply);
}

static const rs_transport hiredis_io = {NULL, hiredis_connect, hiredis_append,
                                        hiredis_get_reply};

rs_sync *rs_sync_new(approx *a, const rc_config *c, const rc_topology *t,
                     int interval_ms, const rs_transport *io) {
  rs_sync *s = calloc(1, sizeof *s);
  if (!s) return NULL;
  s->a = a;
  s->cfg = *c;
  s->io = *io;
  s->interval_ms = interval_ms;
  rt_init(&s->rt, t, c->cluster, c->breaker_ms, c->timeout_ms);
  if (t->nnodes == 0) /* discovery failed: the first seed, for now */
    rc_topology_node(&s->rt.t, c->seeds[0].host, c->seeds[0].port);
  pthread_mutex_init(&s->lock, NULL);
  pthread_cond_init(&s->cond, NULL);
  return s;
}

void rs_sync_free(rs_sync *s) {
  if (!s) return;
  for (int n = 0; n < RC_MAX_NODES; n++)
    if (s->ctx[n]) redisFree(s->ctx[n]);
  if (s->sub) redisFree(s->sub);
  pthread_mutex_destroy(&s->lock);
  pthread_cond_destroy(&s->cond);
  free(s);
}

rs_sync *rs_sync_start(approx *a, const rc_config *c, const rc_topology *t,
                       int interval_ms) {
  /* No request waits on the sync, and a call given up on leaves its
     charges unconfirmed (Redis may still run it): its reads wait as long
     as the interval, --redis-timeout, or SYNC_TIMEOUT_MIN_MS, whichever
     is longest, so that a Redis that stalls for a moment (a fork, a slow
     command of another client, a busy core) loses nothing. */
  rc_config cfg = *c;
  if (cfg.timeout_ms < interval_ms) cfg.timeout_ms = interval_ms;
  if (cfg.timeout_ms < SYNC_TIMEOUT_MIN_MS)
    cfg.timeout_ms = SYNC_TIMEOUT_MIN_MS;
  rs_sync *s = rs_sync_new(a, &cfg, t, interval_ms, &hiredis_io);
  if (s && pthread_create(&s->tid, NULL, sync_main, s)) {
    rs_sync_free(s);
    return NULL;
  }
  if (s) pthread_setname_np(s->tid, "sluice-sync");
  return s;
}

void rs_sync_stop(rs_sync *s) {
  if (!s) return;
  pthread_mutex_lock(&s->lock);
  s->stop = 1;
  pthread_cond_signal(&s->cond);
  pthread_mutex_unlock(&s->lock);
  pthread_join(s->tid, NULL);
  round_(s); /* what the last interval charged */
  rs_sync_free(s);
}

/* ---- what tests drive (sync_internal.h) ---- */

void rs_sync_pass(rs_sync *s, approx_delta **d, size_t n, const int64_t *cost,
                  int64_t *level) {
  pass(s, d, n, cost, level);
}

void rs_sync_read_resets(rs_sync *s) { read_resets(s); }

redisContext *rs_sync_connect(rs_sync *s, int n) { return node_ctx(s, n); }

rt_router *rs_sync_router(rs_sync *s) { return &s->rt; }

int rs_sync_subscribed(const rs_sync *s) { return s->sub != NULL; }

int rs_sync_ping_waits(const rs_sync *s) { return s->sub_ping_at != 0; }
