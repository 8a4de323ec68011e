/*
 * client.c — pipelined, non-blocking Redis connections on a worker's event
 * loop (loop.h's adapter: h2o's in the daemon).
 *
 * hiredis does the protocol: redisFormatCommand* builds commands, its
 * reader (redisReader) parses replies. The router (router.h) keeps the
 * nodes, the slot map and the breaker, and says what to do with each
 * answer. The sockets, the batching and the deadlines are ours, on the
 * worker's event loop, so a decision waiting for Redis never blocks the
 * thread's other connections.
 *
 * One node (per worker) = one TCP connection, a FIFO of commands sent and
 * not yet answered, and a buffer of commands queued and not yet written.
 * The loop's timer wakes the worker for the batch window, the earliest
 * deadline and the next TRYAGAIN retry.
 */
#include "client.h"

#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../base/clock.h"
#include "../base/log.h"
#include "../base/strbuf.h"
#include "client_internal.h"
#include "script.h"

#include "client_types.h"

/* ---- memory ---- */

/* Lua-style through a (NULL fn: the C library's). */
static void *mem_with(const rc_alloc *a, void *p, size_t old, size_t n) {
  if (a->fn) return a->fn(a->ud, p, old, n);
  if (n) return realloc(p, n);
  free(p);
  return NULL;
}

/* n zeroed bytes of c's memory, or NULL. */
static void *zalloc(rc_client *c, size_t n) {
  void *p = mem_with(&c->alloc, NULL, 0, n);
  if (p) memset(p, 0, n);
  return p;
}

/* Gives p (size bytes, NULL: nothing) back to c's memory. */
static void release(rc_client *c, void *p, size_t size) {
  if (p) mem_with(&c->alloc, p, size, 0);
}

/* ---- the timer ---- */

/* Has the timer fire at `at` (monotonic ns), unless it is set for no
   later already; at least a microsecond from now. */
static void timer_arm(rc_client *c, int64_t at) {
  if (c->timer_at && c->timer_at <= at) return;
  c->timer_at = at;
  int64_t d = at - clock_mono_ns();
  c->loop.timer_arm(c->timer, d < 1000 ? 1000 : d);
}

/*
 * When a request is given up on: its deadline less the answer's slack,
 * RC_ANSWER_SLACK_NS or a tenth of the timeout, whichever is less. The
 * timeout bounds the whole decision, from the request's arrival to its
 * answer leaving: giving up takes a wake-up of the loop (a timerfd's:
 * tens of microseconds on an idle machine, longer when the timer expires
 * in the middle of a busy pass), the fallback's decision and the answer's
 * write. Redis has the timeout less the slack to answer.
 */
static int64_t give_up_at(const rc_client *c, const pending *p) {
  int64_t slack = (int64_t)c->cfg.timeout_ms * 100000;
  if (slack > RC_ANSWER_SLACK_NS) slack = RC_ANSWER_SLACK_NS;
  return p->rt.deadline - slack;
}

/* ---- commands ---- */

static void split_done(split_call *s);
static void relearn_map(rc_client *c, int failed);

/* Node n's address (the router's). */
static const rc_addr *addr_of(const node *n) {
  return rt_addr(&n->c->rt, n->idx);
}

/* Tells p's request its answer, once (p->answered): its callback gets r,
   or NULL and err; r is freed here. A part of a split batch gives its
   reply (NULL: it failed) to the split instead. p itself stays. */
static void answer(pending *p, redisReply *r, const char *err) {
  split_call *s = p->split;
  p->answered = 1;
  p->split = NULL;
  if (s) {
    s->reply[p->part] = r;
    if (!r && !s->err[0])
      snprintf(s->err, sizeof s->err, "%s", err ? err : "failed");
    if (--s->left == 0) split_done(s);
    return;
  }
  if (!p->internal && p->cb) p->cb(p->ud, r, err);
  if (r) freeReplyObject(r);
}

/* Frees p, unanswered. */
static void drop(rc_client *c, pending *p) {
  free(p->cmd);
  release(c, p, sizeof *p);
}

/* Ends p: answers it (r, or NULL and err) unless it was answered already
   (r is then dropped), and frees it. */
static void finish(rc_client *c, pending *p, redisReply *r, const char *err) {
  if (p->answered) {
    if (r) freeReplyObject(r);
  } else {
    answer(p, r, err);
  }
  drop(c, p);
}

/* Every part answered: the batch's reply (a failed part fails only its
   own request: rc_batch_join). */
static void split_done(split_call *s) {
  rc_client *c = s->c;
  redisReply *r = rc_batch_join(s->sp, s->reply);
  const char *why = s->err[0] ? s->err : "no request of the batch answered";
  rc_split *sp = s->sp;
  finish(c, s->whole, r, r ? NULL : why);
  release(c, s, sizeof *s + sp->n * sizeof *s->reply);
  rc_split_free(sp);
}

/* Closes n's connection (none after): its socket, reader and the buffer
   being written; its commands are the caller's to deal with. */
static void node_close(node *n) {
  rc_client *c = n->c;
  if (n->sock) {
    c->loop.close(n->sock);
    n->sock = NULL;
  }
  if (n->reader) {
    redisReaderFree(n->reader);
    n->reader = NULL;
  }
  release(c, n->inflight, n->inflight_cap);
  n->inflight = NULL;
  n->state = RC_NODE_DOWN;
  n->prev_worked = n->worked;
  n->worked = 0;
}

/* Fails every command of n (sent and queued) and closes its connection;
   the router's breaker keeps it down for breaker_ms. In a cluster, n may
   be a master that died: the map is read again from another node
   (relearn_map). */
static void node_fail(node *n, const char *why) {
  rc_client *c = n->c;
  node_close(n);
  n->prev_worked = 0; /* (the probe after the breaker gets no grace) */
  n->w.len = 0;
  rt_node_failed(&c->rt, n->idx, clock_mono_ns());
  pending *lists[2] = {n->head, n->qhead};
  n->head = n->tail = n->qhead = n->qtail = NULL;
  if (!c->freeing)
    log_msg("warn", "redis %s:%d: %s; down for %d ms", addr_of(n)->host,
            addr_of(n)->port, why, c->cfg.breaker_ms);
  for (int l = 0; l < 2; l++)
    for (pending *p = lists[l], *next; p; p = next) {
      next = p->next;
      finish(c, p, NULL, why);
    }
  relearn_map(c, n->idx);
}

/* Appends cmd to n's write buffer: 0, or -1 (out of memory: nothing
   appended). */
static int wbuf_add(node *n, const char *cmd, size_t len) {
  if (strbuf_reserve(&n->w, len)) return -1;
  strbuf_add(&n->w, cmd, len);
  return 0;
}

/* p's bytes into n's write buffer: the script's EVALSHA as the module's
   SL.DECIDE where n's connection is up and found the module (rs_native;
   p->cmd stays EVALSHA for a resend elsewhere). Not while n connects:
   what is queued then goes to whatever node answers next (a promoted
   replica without the module, say). 0, or -1 (out of memory). */
static int wbuf_put(node *n, const pending *p) {
  char hdr[RS_NATIVE_HDR];
  size_t hl, at = n->native && n->state == RC_NODE_UP
                      ? rs_native(p->cmd, p->len, hdr, &hl)
                      : (size_t)-1;
  if (at == (size_t)-1) return wbuf_add(n, p->cmd, p->len);
  if (strbuf_reserve(&n->w, hl + p->len - at)) return -1;
  strbuf_add(&n->w, hdr, hl);
  strbuf_add(&n->w, p->cmd + at, p->len - at);
  return 0;
}

/* Appends p to n's queue (its bytes to the write buffer); n has the
   timeout from now to answer it (p->reply_by). */
static int enqueue(node *n, pending *p) {
  if (wbuf_put(n, p)) return -1;
  int64_t now = clock_mono_ns();
  p->next = NULL;
  if (n->qtail)
    n->qtail->next = p;
  else
    n->qhead = p;
  n->qtail = p;
  if (!n->queued_at) n->queued_at = now;
  if (n->c->loop.wake) n->c->loop.wake(n->c->loop.wake_ud);
  p->reply_by = now + (int64_t)n->c->cfg.timeout_ms * 1000000;
  int64_t at = give_up_at(n->c, p);
  timer_arm(n->c, at < p->reply_by ? at : p->reply_by);
  return 0;
}

/* A command of c's making, not yet queued: its bytes copied (cmd, len), or
   NULL (out of memory). internal: no callback (handshake, ASKING, SCRIPT
   LOAD). */
static pending *command(rc_client *c, const char *cmd, size_t len,
                        int64_t deadline, int internal) {
  pending *p = zalloc(c, sizeof *p);
  if (!p) return NULL;
  p->cmd = malloc(len);
  if (!p->cmd) {
    release(c, p, sizeof *p);
    return NULL;
  }
  memcpy(p->cmd, cmd, len);
  p->len = len;
  p->internal = internal;
  p->rt.slot = -1;
  p->rt.deadline = deadline;
  return p;
}

/* Queues an internal command of argv on n: it, or NULL (out of memory). */
static pending *enqueue_internal(node *n, int argc, const char **argv,
                                 const size_t *lens, int64_t deadline) {
  char *cmd;
  int len = redisFormatCommandArgv(&cmd, argc, argv, lens);
  if (len < 0) return NULL;
  pending *p = command(n->c, cmd, (size_t)len, deadline, 1);
  free(cmd);
  if (!p || enqueue(n, p)) {
    if (p) finish(n->c, p, NULL, NULL);
    return NULL;
  }
  return p;
}

/* Queues ASKING and then p on n, both or neither: ASKING's flag lasts one
   command, and a lone one would flag whatever is queued on n next (a
   command for another slot, which the importing node would then serve).
   0, or -1 (out of memory). */
static int enqueue_asking(node *n, pending *p) {
  static const char asking[] = "*1\r\n$6\r\nASKING\r\n";
  size_t alen = sizeof asking - 1;
  pending *a = strbuf_reserve(&n->w, alen + p->len)
                   ? NULL
                   : command(n->c, asking, alen, p->rt.deadline, 1);
  if (!a) return -1;
  enqueue(n, a); /* (cannot fail now: the room is reserved) */
  enqueue(n, p);
  return 0;
}

/* Queues p, a resend, for node `to`, after ASKING when p->rt.asking: a
   node importing a slot serves its keys only to a command so flagged, and
   the flag lasts one command (a resend, after NOSCRIPT say, needs it
   again). A node that is down fails p at once, like any command for it.
   From now on p times out on its own (pending's comment). 0: queued; -1:
   p was answered and freed. */
static int send_to(rc_client *c, int to, pending *p) {
  node *n = &c->nodes[to];
  if (rt_node_down(&c->rt, to, clock_mono_ns())) {
    finish(c, p, NULL, "node down");
    return -1;
  }
  /* written (or connected) at the flush */
  if (p->rt.asking ? enqueue_asking(n, p) : enqueue(n, p)) {
    finish(c, p, NULL, "out of memory");
    return -1;
  }
  return 0;
}

/* ---- the slot map ---- */

/* CLUSTER SLOTS's reply: the whole map, read into the router's (nodes it
   names for the first time added; the slots it names no master for kept
   as they were), and shared with the other workers. ud: the node asked. */
static void map_read(void *ud, const redisReply *r, const char *err) {
  (void)err;
  node *from = ud;
  rc_client *c = from->c;
  if (rt_map_end(&c->rt, from->idx, c->freeing ? NULL : r) > 0)
    rt_publish(&c->rt);
}

/* Asks node `from` for the whole map (CLUSTER SLOTS), if the router says
   so now (rt_map_due: a MOVED's, or a dead master's relearning). */
static void refresh_map(rc_client *c, int from) {
  static const char slots[] = "*2\r\n$7\r\nCLUSTER\r\n$5\r\nSLOTS\r\n";
  int64_t now = clock_mono_ns();
  if (!rt_map_due(&c->rt, from, now)) return;
  pending *p = command(c, slots, sizeof slots - 1,
                       now + (int64_t)c->cfg.timeout_ms * 1000000, 0);
  if (!p) return;
  p->rt.redirects = RT_MAX_REDIRECTS; /* (never followed anywhere) */
  p->cb = map_read;
  p->ud = &c->nodes[from];
  if (enqueue(&c->nodes[from], p)) {
    drop(c, p);
    return;
  }
  rt_map_begin(&c->rt, from, now);
  /* Asked for from anywhere (a node failing in rc_flush's deadline check,
     or in flush_nodes after `from` was flushed): the timer writes it now,
     not the next event, which could be its own deadline failing `from`. */
  timer_arm(c, now);
}

/* Node `failed` failed, or a call for it was refused (down): another node
   is asked for the map if the router says so (rt_relearn: a master that
   died). */
static void relearn_map(rc_client *c, int failed) {
  if (c->freeing) return;
  int from = rt_relearn(&c->rt, failed, clock_mono_ns());
  if (from >= 0) refresh_map(c, from);
}

/* ---- TRYAGAIN ---- */

/*
 * A batch (requests on several keys of one slot) that a node refused with
 * TRYAGAIN, because the slot is being migrated and some of the keys are
 * here and some not (or, asked, not all imported yet), is sent again as
 * one call per request, each routed on its own: one whose keys are still
 * on the source is served there, one whose keys are gone follows its ASK.
 * Trying the batch again would get TRYAGAIN until the migration ends.
 * Returns -1 when p is not such a batch (or out of memory): p is left as
 * it was. split_send sends the parts of split sp (taken; NULL: -1) in
 * p's stead, each marked `again` when asked (node_lost's dry parts).
 */
static int split_send(rc_client *c, pending *p, rc_split *sp, int again) {
  if (!sp) return -1;
  split_call *s = zalloc(c, sizeof *s + sp->n * sizeof *s->reply);
  pending **parts = zalloc(c, sp->n * sizeof *parts);
  size_t made = 0;
  while (s && parts && made < sp->n &&
         (parts[made] = zalloc(c, sizeof **parts)))
    made++;
  if (made < sp->n) {
    for (size_t i = 0; i < made; i++) release(c, parts[i], sizeof **parts);
    release(c, parts, sp->n * sizeof *parts);
    release(c, s, sizeof *s + sp->n * sizeof *s->reply);
    rc_split_free(sp);
    return -1;
  }
  s->c = c;
  s->whole = p;
  s->sp = sp;
  s->left = sp->n + 1; /* + 1: held until every part is sent */
  for (size_t i = 0; i < sp->n; i++) {
    pending *q = parts[i];
    q->cmd = sp->part[i].cmd;
    q->len = sp->part[i].len;
    sp->part[i].cmd = NULL;
    q->rt.slot = p->rt.slot;
    q->rt.deadline = p->rt.deadline;
    q->split = s;
    q->part = i;
    q->again = again;
    send_to(c, rt_slot_node(&c->rt, q->rt.slot), q);
  }
  release(c, parts, sp->n * sizeof *parts);
  if (--s->left == 0) split_done(s);
  return 0;
}

static int split_batch(rc_client *c, pending *p) {
  return split_send(c, p, rc_batch_split(p->cmd, p->len), 0);
}

/* TRYAGAIN for one request (router.h's rt_retry): p goes on the client's
   retry list, to be sent again from the slot map after a pause, or fails
   at once, alone, when its deadline leaves no room for that. A retry
   whose answer is late all the same fails alone at its deadline
   (check_deadlines), not its node. */
static void retry_later(rc_client *c, pending *p) {
  rt_action a = rt_retry(&c->rt, &p->rt, clock_mono_ns());
  if (a.verb == RT_FAIL) {
    finish(c, p, NULL, a.why);
    return;
  }
  p->retry_at = a.at;
  p->next = c->retry;
  c->retry = p;
  timer_arm(c, p->retry_at);
}

/* Sends again the retries that are due; arms the timer for the next. */
static void retry_due(rc_client *c, int64_t now) {
  pending *due = NULL, **pp = &c->retry;
  int64_t next = 0;
  while (*pp) {
    pending *p = *pp;
    if (p->retry_at <= now) {
      *pp = p->next;
      p->next = due;
      due = p;
    } else {
      if (!next || p->retry_at < next) next = p->retry_at;
      pp = &p->next;
    }
  }
  while (due) {
    pending *p = due;
    due = p->next;
    if (p->rt.deadline <= now) /* the loop was held up past it */
      finish(c, p, NULL, "TRYAGAIN until the deadline");
    else
      send_to(c, rt_slot_node(&c->rt, p->rt.slot), p);
  }
  if (next) timer_arm(c, next);
}

/* ---- a node's replies ---- */

static void node_write(node *n);
static void conn_lost(node *n, const char *why);

/* n's write is done: its buffer goes back, and what was queued meanwhile
   is written at once (no batch window) or at the window's end (the flush
   arms the timer for it). */
static void on_write(void *ud, const char *err) {
  node *n = ud;
  release(n->c, n->inflight, n->inflight_cap);
  n->inflight = NULL;
  if (err) {
    conn_lost(n, "write failed");
    return;
  }
  if (n->w.len && !n->c->cfg.batch_us)
    node_write(n);
  else if (n->w.len && n->c->loop.wake)
    n->c->loop.wake(n->c->loop.wake_ud);
}

/* Moves the queued commands into the sent FIFO and writes their bytes. */
static void node_write(node *n) {
  if (n->state != RC_NODE_UP || !n->w.len || n->inflight) return;
  if (n->tail)
    n->tail->next = n->qhead;
  else
    n->head = n->qhead;
  n->tail = n->qtail;
  n->qhead = n->qtail = NULL;
  size_t len = n->w.len;
  n->inflight = strbuf_take(&n->w, &n->inflight_cap);
  n->queued_at = 0;
  n->c->loop.write(n->sock, n->inflight, len, on_write);
}

/*
 * The SCRIPT LOAD that NOSCRIPT made (load) failed with r (out of memory,
 * an ACL, a script Redis will not compile): the command that waited for
 * it is answered with its NOSCRIPT when that comes (rt.load_refused), not
 * loaded for again; the node and its other commands go on (a handshake's
 * failure would fail the node). Warns once per breaker interval.
 */
static void load_refused(node *n, pending *load, redisReply *r) {
  load->waiter->rt.load_refused = 1;
  int64_t now = clock_mono_ns();
  if (now >= n->quiet_until) {
    log_msg("warn", "redis %s:%d: SCRIPT LOAD after NOSCRIPT: %.120s",
            addr_of(n)->host, addr_of(n)->port, r->str ? r->str : "error");
    n->quiet_until = now + (int64_t)n->c->cfg.breaker_ms * 1000000;
  }
  finish(n->c, load, r, NULL);
}

/* The reply to an internal command: a refused SCRIPT LOAD fails only the
   command that waited for it; a refused AUTH or SELECT makes the node
   unusable as configured. */
static void internal_reply(node *n, pending *p, redisReply *r) {
  if (p->probe) { /* an error (an ACL, say): the script, as without it */
    int v = rs_native_probe(r);
    if (v < 0)
      log_msg("warn", "redis %s:%d: its sluice module was built from "
              "another decide.lua than this daemon's (SL.VERSION): using "
              "the script there until the two match", addr_of(n)->host,
              addr_of(n)->port);
    n->native = v > 0;
    finish(n->c, p, r, NULL);
    return;
  }
  if (r->type == REDIS_REPLY_ERROR && p->waiter) {
    load_refused(n, p, r);
    return;
  }
  if (r->type == REDIS_REPLY_ERROR && r->str && strncmp(r->str, "ASK", 3)) {
    char why[160];
    snprintf(why, sizeof why, "handshake: %.120s", r->str);
    finish(n->c, p, r, NULL);
    node_fail(n, why);
    return;
  }
  finish(n->c, p, r, NULL);
}

/* NOSCRIPT on node n: the script is loaded there, then p sent again behind
   the load (after ASKING again when it was an ASK's). */
static void load_and_resend(node *n, pending *p) {
  size_t sl;
  const char *src = rs_script(&sl);
  const char *argv[] = {"SCRIPT", "LOAD", src};
  size_t lens[] = {6, 4, sl};
  pending *load = enqueue_internal(n, 3, argv, lens, p->rt.deadline);
  if (!load)
    finish(n->c, p, NULL, "out of memory");
  else if (send_to(n->c, n->idx, p) == 0)
    load->waiter = p; /* behind it on n: alive when its reply comes */
}

/* A reply for n's oldest sent command. What a node answers instead of
   running it (MOVED, ASK, NOSCRIPT, TRYAGAIN) is followed as the router
   says (rt_on_reply). */
static void on_reply(node *n, redisReply *r) {
  pending *p = n->head;
  rc_client *c = n->c;
  if (!p) {
    freeReplyObject(r);
    node_fail(n, "reply without a command");
    return;
  }
  n->head = p->next;
  if (!n->head) n->tail = NULL;
  n->worked = 1;
  if (p->answered) { /* timed out alone: nobody waits for this reply */
    finish(c, p, r, NULL);
    return;
  }
  if (p->internal) {
    internal_reply(n, p, r);
    return;
  }
  /* The module's packed reply, read as the script's (the only string a
     command of ours is answered with). */
  if (r->type == REDIS_REPLY_STRING && !(r = rs_unpack(r))) {
    finish(c, p, NULL, "out of memory");
    return;
  }
  const char *err = r->type == REDIS_REPLY_ERROR ? r->str : NULL;
  rt_action a = rt_on_reply(&c->rt, &p->rt, n->idx, err, err ? r->len : 0);
  switch (a.verb) {
  case RT_RESEND:
    freeReplyObject(r);
    send_to(c, a.node, p);
    if (a.map) refresh_map(c, a.node);
    return;
  case RT_LOAD:
    freeReplyObject(r);
    load_and_resend(n, p);
    return;
  case RT_SPLIT:
    freeReplyObject(r);
    if (split_batch(c, p)) retry_later(c, p);
    return;
  default:
    finish(c, p, r, NULL);
  }
}

/* Bytes from n (all fed to its reader, each reply handled in order), or
   the connection lost. */
static void on_read(void *ud, const char *err, const char *bytes,
                    size_t len) {
  node *n = ud;
  if (err) {
    conn_lost(n, "connection lost");
    return;
  }
  if (redisReaderFeed(n->reader, bytes, len) != REDIS_OK) {
    node_fail(n, "protocol error");
    return;
  }
  for (;;) {
    void *r = NULL;
    if (redisReaderGetReply(n->reader, &r) != REDIS_OK) {
      node_fail(n, "protocol error");
      return;
    }
    if (!r) break;
    on_reply(n, r);
    if (n->state != RC_NODE_UP) return; /* failed while handling it */
  }
}

/* ---- connections ---- */

/* The loop's word on n's connect: up (the handshake and what was queued
   are written), or failed (its commands with it). */
static void on_connect(void *ud, const char *err) {
  node *n = ud;
  if (err) {
    node_fail(n, "connect failed");
    return;
  }
  n->state = RC_NODE_UP;
  rt_node_up(&n->c->rt, n->idx);
  n->c->loop.read_start(n->sock, on_read);
  node_write(n);
}

/* Resolves n's address once (getaddrinfo: a name may need DNS): 0, or
   -1 when it does not resolve. */
static int node_resolve(node *n) {
  if (n->resolved) return 0;
  struct addrinfo hints, *res = NULL;
  memset(&hints, 0, sizeof hints);
  hints.ai_socktype = SOCK_STREAM;
  char port[16];
  snprintf(port, sizeof port, "%d", addr_of(n)->port);
  if (getaddrinfo(addr_of(n)->host, port, &hints, &res) || !res) return -1;
  memcpy(&n->sa, res->ai_addr, res->ai_addrlen);
  n->salen = res->ai_addrlen;
  freeaddrinfo(res);
  n->resolved = 1;
  return 0;
}

/* Queues the handshake on n (AUTH, SELECT, the script, so that a
   restarted Redis needs no NOSCRIPT round trip): 0, or -1 (out of
   memory). */
static int handshake(node *n, int64_t deadline) {
  const rc_config *cfg = &n->c->cfg;
  int rc = 0;
  if (cfg->password[0]) {
    const char *argv[] = {"AUTH", cfg->user, cfg->password};
    size_t lens[] = {4, strlen(cfg->user), strlen(cfg->password)};
    const char *pw[] = {"AUTH", cfg->password};
    size_t pw_lens[] = {4, lens[2]};
    rc |= !(cfg->user[0] ? enqueue_internal(n, 3, argv, lens, deadline)
                         : enqueue_internal(n, 2, pw, pw_lens, deadline));
  }
  if (!cfg->cluster && cfg->db) {
    char db[16];
    snprintf(db, sizeof db, "%d", cfg->db);
    const char *argv[] = {"SELECT", db};
    size_t lens[] = {6, strlen(db)};
    rc |= !enqueue_internal(n, 2, argv, lens, deadline);
  }
  size_t sl;
  const char *src = rs_script(&sl);
  const char *load[] = {"SCRIPT", "LOAD", src};
  size_t load_lens[] = {6, 4, sl};
  rc |= !enqueue_internal(n, 3, load, load_lens, deadline);
  /* The module (sluice-redis.so), asked again at every connect: a
     failover or a restart may bring a node with or without it, or with
     another build of it (rs_native_probe). */
  const char *info[] = {"SL.VERSION"};
  size_t info_lens[] = {10};
  pending *probe = enqueue_internal(n, 1, info, info_lens, deadline);
  if (probe) probe->probe = 1;
  n->native = 0;
  return rc || !probe ? -1 : 0;
}

/* Starts a connection: the handshake goes first in the queue. */
static int node_connect(node *n) {
  rc_client *c = n->c;
  if (node_resolve(n)) return -1;
  n->reader = redisReaderCreate();
  if (!n->reader) return -1;
  /* Commands queued before the connect must follow the handshake. */
  pending *queued = n->qhead;
  n->qhead = n->qtail = NULL;
  strbuf old = n->w;
  size_t oldcap;
  char *oldbytes = strbuf_take(&n->w, &oldcap);
  int rc = handshake(n, clock_mono_ns() + (int64_t)c->cfg.timeout_ms * 1000000);
  if (rc || (old.len && wbuf_add(n, oldbytes, old.len))) rc = -1;
  release(c, oldbytes, oldcap);
  if (n->qtail)
    n->qtail->next = queued;
  else
    n->qhead = queued;
  while (queued && queued->next) queued = queued->next;
  if (queued) n->qtail = queued;
  if (rc) return -1;
  n->sock = c->loop.connect(c->loop.loop, (struct sockaddr *)&n->sa, n->salen,
                            on_connect, n);
  if (!n->sock) return -1;
  n->state = RC_NODE_CONNECTING;
  return 0;
}

/*
 * n's connection had worked (it had answered) and Redis closed it: an
 * idle timeout (`timeout` in redis.conf), CLIENT KILL, a restart, a
 * proxy. That is no failure of the node: the breaker stays shut, and
 * each call on the connection is sent again, once, on a new one (made at
 * once when there is something to send, else by the next call), where
 * a failure is a failure. The calls not written yet go as they are. A
 * call written and not answered may have run (Redis kills a client after
 * running its command and before its reply when a CLIENT KILL comes in
 * the same pass of its loop, and a crash can fall anywhere): a decision
 * that charges goes again as checks that charge nothing (rc_batch_dry),
 * so that it is decided on Redis's state and charged at most once; a
 * call that charges nothing (a dry check, CLUSTER SLOTS, a reset's
 * UNLINK or PUBLISH, which are safe to repeat) goes again as it is. A
 * call sent `most` times already fails: once, or twice when this is the
 * fresh connection that conn_lost lets be lost (its calls were sent again
 * at most once, so a call goes on at most three connections). Says so
 * (info) at most once per breaker interval when calls were in flight; an
 * idle connection closed is routine (Redis's `timeout`) and goes unsaid.
 */
static void node_lost(node *n, const char *why, int most) {
  rc_client *c = n->c;
  pending *sent = n->head;
  n->head = n->tail = NULL;
  node_close(n);
  rt_node_closed(&c->rt, n->idx);
  int again = 0;
  for (pending *p = sent, *next; p; p = next) {
    next = p->next;
    if (p->internal || p->answered || p->again >= most) {
      finish(c, p, NULL, why); /* (the new connection has its handshake) */
      continue;
    }
    p->again++;
    again++;
    rc_split *sp = rc_batch_dry(p->cmd, p->len);
    if (!sp)
      send_to(c, n->idx, p);
    else if (split_send(c, p, sp, p->again))
      finish(c, p, NULL, "out of memory");
  }
  int64_t now = clock_mono_ns();
  if (again && now >= n->lost_quiet_until) {
    log_msg("info", "redis %s:%d: %s with %d call%s in flight; sent again "
            "on a new connection", addr_of(n)->host, addr_of(n)->port, why,
            again, again == 1 ? "" : "s");
    n->lost_quiet_until = now + (int64_t)c->cfg.breaker_ms * 1000000;
  }
  if (n->w.len && n->state == RC_NODE_DOWN && node_connect(n))
    node_fail(n, "cannot connect");
}

/*
 * n's connection is gone (read or write; it was established: conn_lost
 * is only called after on_connect). Lost (node_lost) when it had worked
 * (it had answered), and also when it never answered but the connection
 * before it had: a CLIENT KILL repeated quickly can land on the
 * reconnection before its handshake's reply, and a healthy Redis must not
 * look dead. That grace is one connection long (node_close clears
 * prev_worked): a second connection in a row closed before any reply is
 * a failure of the node (the breaker opens), as is a fresh connection
 * whose node had no working one before it (node_fail clears prev_worked),
 * so a server that closes every connection at once (maxclients, a proxy
 * without its backend, protected mode) still opens the breaker at the
 * first or second. A server that says why before it closes (maxclients'
 * "-ERR max number of clients reached") fails the node on that reply
 * (internal_reply), before its close comes here.
 */
static void conn_lost(node *n, const char *why) {
  if (n->c->freeing)
    node_fail(n, why);
  else if (n->worked)
    node_lost(n, why, 1);
  else if (n->prev_worked)
    node_lost(n, why, 2);
  else
    node_fail(n, why);
}

/* ---- deadlines and flushes ---- */

/* The earlier of two instants, 0 being none. */
static int64_t earlier(int64_t a, int64_t b) {
  return !a || (b && b < a) ? b : a;
}


/*
 * Node n's commands at `now` (sent and queued): a command its node has
 * not answered within the timeout of its queuing (reply_by) means a
 * stalled or lost node: returns -1 (the caller fails it, and with it
 * every command on it). Else each resent request past its own deadline
 * is answered (failed) alone, its command left in place; returns when to
 * look again (0: nothing waits).
 */
static int64_t node_deadlines(node *n, int64_t now) {
  for (;;) {
    pending *late = NULL;
    int64_t next = 0;
    pending *lists[2] = {n->head, n->qhead};
    for (int l = 0; l < 2 && !late; l++)
      for (pending *p = lists[l]; p && !late; p = p->next) {
        if (p->reply_by <= now) return -1;
        next = earlier(next, p->reply_by);
        if (p->internal || p->answered) continue;
        if (give_up_at(n->c, p) <= now)
          late = p;
        else
          next = earlier(next, give_up_at(n->c, p));
      }
    if (!late) return next;
    /* (its callback may queue more: the lists are walked again) */
    answer(late, NULL, "timeout");
  }
}

/* Every node's deadlines at now (node_deadlines): a stalled node fails;
   the timer is set for the next one. */
static void check_deadlines(rc_client *c, int64_t now) {
  int64_t next = 0;
  for (int i = 0; i < rt_nodes(&c->rt); i++) {
    int64_t at = node_deadlines(&c->nodes[i], now);
    if (at < 0)
      node_fail(&c->nodes[i], "timeout");
    else
      next = earlier(next, at);
  }
  if (next) timer_arm(c, next);
}

/* Writes each node's queue whose batch window is over (connecting a node
   that is not connected); the timer is set for the next window's end. */
static void flush_nodes(rc_client *c, int64_t now) {
  int64_t next = 0;
  for (int i = 0; i < rt_nodes(&c->rt); i++) {
    node *n = &c->nodes[i];
    if (!n->w.len) continue;
    if (n->state == RC_NODE_DOWN) {
      if (node_connect(n)) node_fail(n, "cannot connect");
      continue;
    }
    int64_t due = n->queued_at + (int64_t)c->cfg.batch_us * 1000;
    if (!c->cfg.batch_us || due <= now) {
      node_write(n);
    } else if (!next || due < next) {
      next = due;
    }
  }
  if (next) timer_arm(c, next);
}

/* The timer: deadlines, TRYAGAIN retries, batch windows. */
static void on_timer(void *ud) {
  rc_client *c = ud;
  c->timer_at = 0;
  int64_t now = clock_mono_ns();
  check_deadlines(c, now);
  retry_due(c, now);
  flush_nodes(c, now);
}

void rc_flush(rc_client *c) {
  int64_t now = clock_mono_ns();
  if (c->retry) retry_due(c, now);
  flush_nodes(c, now);
  if (c->timer_at && c->timer_at <= now) {
    c->timer_at = 0;
    check_deadlines(c, now);
  }
}

/* ---- the client ---- */

rc_client *rc_client_new(const rc_loop *loop, const rc_config *cfg,
                         const rc_topology *t, const rc_alloc *alloc) {
  static const rc_alloc libc = {NULL, NULL};
  if (!alloc) alloc = &libc;
  rc_client *c = mem_with(alloc, NULL, 0, sizeof *c);
  if (!c) return NULL;
  memset(c, 0, sizeof *c);
  c->loop = *loop;
  c->alloc = *alloc;
  c->cfg = *cfg;
  rt_init(&c->rt, t, cfg->cluster, cfg->breaker_ms, cfg->timeout_ms);
  for (int i = 0; i < RC_MAX_NODES; i++) {
    c->nodes[i].c = c;
    c->nodes[i].idx = i;
    /* (a pipeline's worth at once: a write takes the buffer away, and the
       next starts from empty) */
    strbuf_init_alloc(&c->nodes[i].w, alloc->fn, alloc->ud, 4096);
  }
  if (t->nnodes == 0 ||
      !(c->timer = c->loop.timer_new(c->loop.loop, on_timer, c))) {
    rc_client_free(c);
    return NULL;
  }
  return c;
}

void rc_client_free(rc_client *c) {
  if (!c) return;
  c->freeing = 1;
  /* Every callback first (rc_send refuses from now on), then the nodes. */
  for (int i = 0; i < rt_nodes(&c->rt); i++)
    node_fail(&c->nodes[i], "shutting down");
  while (c->retry) {
    pending *p = c->retry;
    c->retry = p->next;
    finish(c, p, NULL, "shutting down");
  }
  for (int i = 0; i < RC_MAX_NODES; i++)
    strbuf_free(&c->nodes[i].w);
  if (c->timer) c->loop.timer_free(c->timer);
  release(c, c, sizeof *c);
}

int rc_send(rc_client *c, int slot, char *cmd, size_t len, rc_reply_fn cb,
            void *ud) {
  return rc_send_since(c, slot, cmd, len, 0, cb, ud);
}

int rc_send_since(rc_client *c, int slot, char *cmd, size_t len,
                  int64_t since_ns, rc_reply_fn cb, void *ud) {
  int64_t now = clock_mono_ns();
  rt_adopt(&c->rt, now); /* (one atomic load when there is nothing new) */
  int nd = rt_slot_node(&c->rt, slot);
  if (c->freeing || rt_node_down(&c->rt, nd, now)) {
    relearn_map(c, nd); /* its slots may have a new master by now */
    free(cmd);
    return -1;
  }
  pending *p = zalloc(c, sizeof *p);
  if (!p) {
    free(cmd);
    return -1;
  }
  p->cmd = cmd;
  p->len = len;
  p->rt.slot = slot;
  p->cb = cb;
  p->ud = ud;
  if (!since_ns || since_ns > now) since_ns = now;
  p->rt.deadline = since_ns + (int64_t)c->cfg.timeout_ms * 1000000;
  if (enqueue(&c->nodes[nd], p)) {
    drop(c, p);
    return -1;
  }
  return 0;
}

void rc_client_share(rc_client *c, rc_shared_map *m) { rt_share(&c->rt, m); }
