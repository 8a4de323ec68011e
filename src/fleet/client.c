/*
 * client.c — pipelined, non-blocking Redis connections on an h2o loop.
 *
 * hiredis does the protocol: redisFormatCommand* builds commands, its
 * reader (redisReader) parses replies. The sockets, the batching, the
 * deadlines and the breaker are ours, on the worker's event loop, so a
 * decision waiting for Redis never blocks the thread's other connections.
 *
 * One node (per worker) = one TCP connection, a FIFO of commands sent and
 * not yet answered, and a buffer of commands queued and not yet written.
 * A timerfd on the loop wakes the worker for the batch window and for the
 * earliest deadline (h2o 2.2's own timers count whole milliseconds).
 */
#include "client.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include "../base/clock.h"
#include "../base/log.h"
#include "script.h"
#include "slot.h"

#define MAX_NODES RC_MAX_NODES
#define MAX_REDIRECTS 5
/* TRYAGAIN: the first pause before trying again, doubled each time up to
   RETRY_DOUBLINGS times (1 ms .. 32 ms), while the deadline allows (with
   room for an answer: retry_margin). */
#define RETRY_MIN_NS 1000000
#define RETRY_DOUBLINGS 5
/* A MOVED, or a node that fails, reads the whole slot map again at most
   this often (refresh_map, relearn_map). */
#define MAP_REFRESH_NS 1000000000

typedef struct split_call split_call;

/*
 * A command, from its rc_send (or its internal making) to its reply.
 * Two clocks: `deadline` is when the request must be answered (rc_send's
 * time + the timeout, kept through every resend); `reply_by` is when the
 * node it was last queued on must have answered it (that queuing + the
 * timeout), or be taken for stalled and failed. For a command on its
 * first node they are the same. A resent one (`alone`: MOVED, ASK,
 * NOSCRIPT, TRYAGAIN, a split batch's part) keeps its own deadline, which
 * can come first: then the request alone is answered (failed) at it, and
 * the command stays in the node's FIFO, `answered`, until its reply comes
 * and is dropped (a pipeline cannot skip a reply).
 */
typedef struct pending {
  struct pending *next;
  char *cmd; /* kept for a resend (MOVED, ASK, NOSCRIPT, TRYAGAIN) */
  size_t len;
  int slot;
  int redirects;
  int asking;   /* sent after ASKING (an ASK's resend) */
  int tries;    /* TRYAGAINs so far */
  int internal; /* handshake / ASKING / SCRIPT LOAD: no callback */
  int alone;    /* resent: times out on its own (above) */
  int answered; /* its callback (or split) was told: the reply is dropped */
  /* A SCRIPT LOAD after NOSCRIPT: the command queued behind it that waits
     for the script (it cannot be answered before the load is). */
  struct pending *waiter;
  int load_refused; /* (the waiter) its SCRIPT LOAD failed: no other */
  int64_t deadline;
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
  pending *whole; /* the batch's callback and deadline */
  rc_split *sp;
  size_t left;  /* parts not answered yet */
  char err[96]; /* the first part's failure */
  redisReply *reply[];
};

typedef struct node {
  rc_client *c;
  rc_addr addr;
  struct sockaddr_storage sa;
  socklen_t salen;
  int resolved;
  h2o_socket_t *sock;
  enum { N_DOWN, N_CONNECTING, N_UP } state;
  int64_t down_until; /* breaker: no new connection before this */
  redisReader *reader;
  pending *head, *tail;        /* sent (or being sent), in order */
  pending *qhead, *qtail;      /* queued, not yet in a write */
  char *wbuf;                  /* bytes of the queued commands */
  size_t wlen, wcap;
  char *inflight;              /* the buffer h2o is writing */
  int64_t queued_at;           /* when the first queued command came */
  int64_t quiet_until;         /* no warning of a refused load before */
} node;

struct rc_client {
  h2o_loop_t *loop;
  rc_config cfg;
  node *nodes[MAX_NODES];
  int nnodes;
  uint8_t slot_node[16384];
  pending *retry; /* TRYAGAIN: waiting to be sent again (retry_at) */
  int refreshing;        /* a CLUSTER SLOTS is out (refresh_map) */
  int64_t refresh_after; /* and no other before this */
  int map_from;          /* the node last asked (relearn_map goes on after) */
  rc_shared_map *shared; /* the workers' newest map (rc_client_share) */
  uint64_t shared_seen;  /* ... the version this client has */
  h2o_socket_t *timer;
  int timer_fd;
  int64_t timer_at; /* armed for, 0 = disarmed */
  int freeing;
};

/* ---- configuration ---- */

static int parse_hostport(const char *s, size_t n, rc_addr *a, char *err,
                          size_t len) {
  const char *colon = NULL;
  for (size_t i = 0; i < n; i++)
    if (s[i] == ':') colon = s + i;
  if (!colon || colon == s || (size_t)(colon - s) >= sizeof a->host) {
    snprintf(err, len, "expected HOST:PORT, got '%.*s'", (int)n, s);
    return -1;
  }
  memcpy(a->host, s, (size_t)(colon - s));
  a->host[colon - s] = '\0';
  long port = 0;
  const char *p = colon + 1;
  if (p == s + n) port = -1;
  for (; p < s + n; p++) {
    if (*p < '0' || *p > '9' || port > 65535) {
      port = -1;
      break;
    }
    port = port * 10 + (*p - '0');
  }
  if (port <= 0 || port > 65535) {
    snprintf(err, len, "bad port in '%.*s'", (int)n, s);
    return -1;
  }
  a->port = (int)port;
  return 0;
}

int rc_config_parse(const char *url, rc_config *c, char *err, size_t len) {
  const char *rest;
  if (!strncmp(url, "redis://", 8)) {
    c->cluster = 0;
    rest = url + 8;
  } else if (!strncmp(url, "redis-cluster://", 16)) {
    c->cluster = 1;
    rest = url + 16;
  } else {
    snprintf(err, len,
             "'%s': expected memory, redis://HOST:PORT[/DB] or "
             "redis-cluster://HOST:PORT[,HOST:PORT...]",
             url);
    return -1;
  }
  c->password[0] = c->user[0] = '\0';
  c->db = 0;
  c->nseeds = 0;
  const char *at = strrchr(rest, '@');
  if (at) {
    const char *colon = memchr(rest, ':', (size_t)(at - rest));
    if (!colon) {
      snprintf(err, len, "credentials must be [USER]:PASSWORD@");
      return -1;
    }
    size_t ul = (size_t)(colon - rest), pl = (size_t)(at - colon - 1);
    if (ul >= sizeof c->user || pl >= sizeof c->password || pl == 0) {
      snprintf(err, len, "user or password empty or too long");
      return -1;
    }
    memcpy(c->user, rest, ul);
    c->user[ul] = '\0';
    memcpy(c->password, colon + 1, pl);
    c->password[pl] = '\0';
    rest = at + 1;
  }
  const char *slash = strchr(rest, '/');
  const char *end = slash ? slash : rest + strlen(rest);
  if (slash) {
    if (c->cluster) {
      snprintf(err, len, "a cluster has no database number");
      return -1;
    }
    char *e;
    long db = strtol(slash + 1, &e, 10);
    if (!slash[1] || *e || db < 0 || db > 1000000) {
      snprintf(err, len, "bad database number '%s'", slash + 1);
      return -1;
    }
    c->db = (int)db;
  }
  const char *p = rest;
  while (p < end) {
    const char *comma = memchr(p, ',', (size_t)(end - p));
    const char *e = comma ? comma : end;
    if (c->nseeds == RC_MAX_SEEDS) {
      snprintf(err, len, "more than %d nodes", RC_MAX_SEEDS);
      return -1;
    }
    if (parse_hostport(p, (size_t)(e - p), &c->seeds[c->nseeds++], err, len))
      return -1;
    if (!c->cluster && comma) {
      snprintf(err, len, "redis:// takes one node (redis-cluster:// many)");
      return -1;
    }
    p = comma ? comma + 1 : end;
  }
  if (c->nseeds == 0) {
    snprintf(err, len, "no HOST:PORT in '%s'", url);
    return -1;
  }
  return 0;
}

/* ---- discovery (blocking, at start) ---- */

redisContext *rc_connect_sync(const rc_config *c, const rc_addr *a,
                              char *err, size_t len) {
  struct timeval tv = {c->timeout_ms / 1000, (c->timeout_ms % 1000) * 1000};
  redisContext *r = redisConnectWithTimeout(a->host, a->port, tv);
  if (!r || r->err) {
    snprintf(err, len, "%s:%d: %s", a->host, a->port,
             r ? r->errstr : "out of memory");
    if (r) redisFree(r);
    return NULL;
  }
  redisSetTimeout(r, tv);
  redisReply *rep = NULL;
  if (c->password[0]) {
    rep = c->user[0] ? redisCommand(r, "AUTH %s %s", c->user, c->password)
                     : redisCommand(r, "AUTH %s", c->password);
  } else {
    rep = redisCommand(r, "PING");
  }
  if (rep && rep->type != REDIS_REPLY_ERROR && c->db && !c->cluster) {
    freeReplyObject(rep);
    rep = redisCommand(r, "SELECT %d", c->db);
  }
  if (rep && rep->type != REDIS_REPLY_ERROR) {
    size_t sl;
    const char *script = rs_script(&sl);
    freeReplyObject(rep);
    rep = redisCommand(r, "SCRIPT LOAD %b", script, sl);
  }
  if (!rep || rep->type == REDIS_REPLY_ERROR) {
    snprintf(err, len, "%s:%d: %s", a->host, a->port,
             rep ? rep->str : r->errstr);
    if (rep) freeReplyObject(rep);
    redisFree(r);
    return NULL;
  }
  freeReplyObject(rep);
  return r;
}

int rc_discover(const rc_config *c, rc_topology *t, char *err, size_t len) {
  memset(t->slot_node, 0xff, sizeof t->slot_node);
  t->nnodes = 0;
  for (int i = 0; i < c->nseeds; i++)
    rc_topology_node(t, c->seeds[i].host, c->seeds[i].port);
  for (int i = 0; i < c->nseeds; i++) {
    redisContext *r = rc_connect_sync(c, &c->seeds[i], err, len);
    if (!r) {
      if (!c->cluster) return -1;
      continue;
    }
    if (!c->cluster) {
      redisFree(r);
      memset(t->slot_node, 0, sizeof t->slot_node);
      return 0;
    }
    redisReply *rep = redisCommand(r, "CLUSTER SLOTS");
    if (!rep || rep->type != REDIS_REPLY_ARRAY) {
      snprintf(err, len, "CLUSTER SLOTS: %s",
               rep && rep->type == REDIS_REPLY_ERROR ? rep->str : r->errstr);
      if (rep) freeReplyObject(rep);
      redisFree(r);
      continue;
    }
    rc_topology_read(t, rep, c->seeds[i].host);
    freeReplyObject(rep);
    redisFree(r);
    /* Load the script on every master now (NOSCRIPT would do it later). */
    int ok = 1;
    for (int n = 0; n < t->nnodes; n++) {
      redisContext *m = rc_connect_sync(c, &t->nodes[n], err, len);
      if (!m) {
        ok = 0;
        continue;
      }
      redisFree(m);
    }
    return ok ? 0 : -1;
  }
  return -1;
}

/* ---- the timer ---- */

static void timer_arm(rc_client *c, int64_t at) {
  if (c->timer_at && c->timer_at <= at) return;
  c->timer_at = at;
  int64_t d = at - clock_mono_ns();
  if (d < 1000) d = 1000;
  struct itimerspec its = {{0, 0}, {d / 1000000000, d % 1000000000}};
  timerfd_settime(c->timer_fd, 0, &its, NULL);
}

/* ---- nodes ---- */

static node *node_new(rc_client *c, const rc_addr *a) {
  if (c->nnodes == MAX_NODES) return NULL;
  node *n = calloc(1, sizeof *n);
  if (!n) return NULL;
  n->c = c;
  n->addr = *a;
  n->state = N_DOWN;
  c->nodes[c->nnodes++] = n;
  return n;
}

static node *node_by_addr(rc_client *c, const char *host, int port) {
  for (int i = 0; i < c->nnodes; i++)
    if (c->nodes[i]->addr.port == port && !strcmp(c->nodes[i]->addr.host, host))
      return c->nodes[i];
  rc_addr a;
  if (strlen(host) >= sizeof a.host) return NULL;
  snprintf(a.host, sizeof a.host, "%s", host);
  a.port = port;
  return node_new(c, &a);
}

static void split_done(split_call *s);
static void relearn_map(rc_client *c, const node *failed);

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

/* Ends p: answers it (r, or NULL and err) unless it was answered already
   (r is then dropped), and frees it. */
static void finish(pending *p, redisReply *r, const char *err) {
  if (p->answered) {
    if (r) freeReplyObject(r);
  } else {
    answer(p, r, err);
  }
  free(p->cmd);
  free(p);
}

/* Every part answered: the batch's reply (a failed part fails only its
   own request: rc_batch_join). */
static void split_done(split_call *s) {
  redisReply *r = rc_batch_join(s->sp, s->reply);
  const char *why = s->err[0] ? s->err : "no request of the batch answered";
  finish(s->whole, r, r ? NULL : why);
  rc_split_free(s->sp);
  free(s);
}

/* Fails every command of n (sent and queued) and closes its connection;
   the breaker keeps it down for breaker_ms. In a cluster, n may be a
   master that died: the map is read again from another node
   (relearn_map). */
static void node_fail(node *n, const char *why) {
  if (n->sock) {
    h2o_socket_close(n->sock);
    n->sock = NULL;
  }
  if (n->reader) {
    redisReaderFree(n->reader);
    n->reader = NULL;
  }
  free(n->inflight);
  n->inflight = NULL;
  n->wlen = 0;
  n->state = N_DOWN;
  n->down_until = clock_mono_ns() + (int64_t)n->c->cfg.breaker_ms * 1000000;
  pending *lists[2] = {n->head, n->qhead};
  n->head = n->tail = n->qhead = n->qtail = NULL;
  if (!n->c->freeing)
    log_msg("warn", "redis %s:%d: %s; down for %d ms", n->addr.host,
            n->addr.port, why, n->c->cfg.breaker_ms);
  for (int l = 0; l < 2; l++)
    for (pending *p = lists[l], *next; p; p = next) {
      next = p->next;
      finish(p, NULL, why);
    }
  relearn_map(n->c, n);
}

/* Room for `more` bytes in n's write buffer: 0, or -1 (out of memory). */
static int wbuf_reserve(node *n, size_t more) {
  if (n->wlen + more <= n->wcap) return 0;
  size_t cap = n->wcap ? n->wcap : 4096;
  while (cap < n->wlen + more) cap *= 2;
  char *b = realloc(n->wbuf, cap);
  if (!b) return -1;
  n->wbuf = b;
  n->wcap = cap;
  return 0;
}

static int wbuf_add(node *n, const char *cmd, size_t len) {
  if (wbuf_reserve(n, len)) return -1;
  memcpy(n->wbuf + n->wlen, cmd, len);
  n->wlen += len;
  return 0;
}

/* Appends p to n's queue (its bytes to the write buffer); n has the
   timeout from now to answer it (p->reply_by). */
static int enqueue(node *n, pending *p) {
  if (wbuf_add(n, p->cmd, p->len)) return -1;
  int64_t now = clock_mono_ns();
  p->next = NULL;
  if (n->qtail)
    n->qtail->next = p;
  else
    n->qhead = p;
  n->qtail = p;
  if (!n->queued_at) n->queued_at = now;
  p->reply_by = now + (int64_t)n->c->cfg.timeout_ms * 1000000;
  timer_arm(n->c, p->deadline < p->reply_by ? p->deadline : p->reply_by);
  return 0;
}

static pending *internal_cmd(const char *cmd, size_t len, int64_t deadline) {
  pending *p = calloc(1, sizeof *p);
  if (!p) return NULL;
  p->cmd = malloc(len);
  if (!p->cmd) {
    free(p);
    return NULL;
  }
  memcpy(p->cmd, cmd, len);
  p->len = len;
  p->internal = 1;
  p->deadline = deadline;
  return p;
}

/* Queues an internal command of argv on n: it, or NULL (out of memory). */
static pending *enqueue_internal(node *n, int argc, const char **argv,
                                 const size_t *lens, int64_t deadline) {
  char *cmd;
  int len = redisFormatCommandArgv(&cmd, argc, argv, lens);
  if (len < 0) return NULL;
  pending *p = internal_cmd(cmd, (size_t)len, deadline);
  free(cmd);
  if (!p || enqueue(n, p)) {
    if (p) finish(p, NULL, NULL);
    return NULL;
  }
  return p;
}

static int node_down(const node *n) {
  return n->state == N_DOWN && clock_mono_ns() < n->down_until;
}

/* Queues ASKING and then p on n, both or neither: ASKING's flag lasts one
   command, and a lone one would flag whatever is queued on n next (a
   command for another slot, which the importing node would then serve).
   0, or -1 (out of memory). */
static int enqueue_asking(node *n, pending *p) {
  static const char asking[] = "*1\r\n$6\r\nASKING\r\n";
  size_t alen = sizeof asking - 1;
  pending *a = wbuf_reserve(n, alen + p->len)
                   ? NULL
                   : internal_cmd(asking, alen, p->deadline);
  if (!a) return -1;
  enqueue(n, a); /* (cannot fail now: the room is reserved) */
  enqueue(n, p);
  return 0;
}

/* Queues p, a resend, for node `to`, after ASKING when p->asking: a node
   importing a slot serves its keys only to a command so flagged, and the
   flag lasts one command (a resend, after NOSCRIPT say, needs it again).
   A node that is down fails p at once, like any command for it. From now
   on p times out on its own (pending's comment). 0: queued; -1: p was
   answered and freed. */
static int send_to(node *to, pending *p) {
  p->alone = 1;
  if (node_down(to)) {
    finish(p, NULL, "node down");
    return -1;
  }
  /* written (or connected) at the flush */
  if (p->asking ? enqueue_asking(to, p) : enqueue(to, p)) {
    finish(p, NULL, "out of memory");
    return -1;
  }
  return 0;
}

/* The node the slot map says serves slot (-1: the first). */
static node *slot_owner(rc_client *c, int slot) {
  int idx = slot >= 0 && slot < 16384 ? c->slot_node[slot] : 0;
  return c->nodes[idx < c->nnodes ? idx : 0];
}

/* ---- the slot map ---- */

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

void rc_client_share(rc_client *c, rc_shared_map *m) { c->shared = m; }

/* c's map as a topology: its nodes, in its order. */
static void map_of(const rc_client *c, rc_topology *t) {
  t->nnodes = c->nnodes;
  for (int i = 0; i < c->nnodes; i++) t->nodes[i] = c->nodes[i]->addr;
  memcpy(t->slot_node, c->slot_node, sizeof t->slot_node);
}

/* Takes map t's slots into c: each to c's node of the same address (added
   if new), except, with skip_down, to a node c has down. Slots t names no
   node for (or one c has no room for) stay as they were. */
static void take_map(rc_client *c, const rc_topology *t, int skip_down) {
  uint8_t to[RC_MAX_NODES];
  for (int i = 0; i < t->nnodes; i++) {
    node *n = node_by_addr(c, t->nodes[i].host, t->nodes[i].port);
    to[i] = 0xff;
    for (int k = 0; n && k < c->nnodes; k++)
      if (c->nodes[k] == n && !(skip_down && node_down(n))) to[i] = (uint8_t)k;
  }
  for (int s = 0; s < 16384; s++)
    if (t->slot_node[s] < t->nnodes && to[t->slot_node[s]] != 0xff)
      c->slot_node[s] = to[t->slot_node[s]];
}

/* Publishes c's map (just read) to the other clients. */
static void share_map(rc_client *c) {
  rc_shared_map *m = c->shared;
  if (!m) return;
  pthread_mutex_lock(&m->lock);
  map_of(c, &m->t);
  c->shared_seen = atomic_fetch_add(&m->version, 1) + 1;
  pthread_mutex_unlock(&m->lock);
}

/* Takes the map another client published since c last looked, if any:
   each slot to c's node of the same address (added if new), except to a
   node c has down: a map shared last is not always the newest (a node
   that had not heard of a promotion yet), and c knows better. */
static void adopt_map(rc_client *c) {
  rc_shared_map *m = c->shared;
  if (!m || atomic_load_explicit(&m->version, memory_order_acquire) ==
                c->shared_seen)
    return;
  rc_topology *t = malloc(sizeof *t);
  if (!t) return;
  pthread_mutex_lock(&m->lock);
  *t = m->t;
  c->shared_seen = atomic_load_explicit(&m->version, memory_order_relaxed);
  pthread_mutex_unlock(&m->lock);
  take_map(c, t, 1);
  free(t);
}

/* CLUSTER SLOTS's reply: the whole map, read into the client's (nodes it
   names for the first time added; the slots it names no master for kept
   as they were). ud: the node asked. */
static void map_read(void *ud, const redisReply *r, const char *err) {
  (void)err;
  node *from = ud;
  rc_client *c = from->c;
  c->refreshing = 0;
  rc_topology *t = r && !c->freeing ? malloc(sizeof *t) : NULL;
  if (!t) return;
  map_of(c, t);
  if (rc_topology_read(t, r, from->addr.host) > 0) {
    take_map(c, t, 0); /* as Redis says: a node down here included */
    share_map(c);
  }
  free(t);
}

/*
 * A MOVED says the slot map is out of date, and rarely for that slot
 * alone: a resharding moves many, a failover every slot of a master. So
 * besides the slot it names, the whole map is read again (CLUSTER SLOTS,
 * from the node the MOVED named, which knows the new configuration): the
 * other slots then need no MOVED of their own. One at a time, at most
 * once per MAP_REFRESH_NS per client.
 */
static void refresh_map(rc_client *c, node *from) {
  static const char slots[] = "*2\r\n$7\r\nCLUSTER\r\n$5\r\nSLOTS\r\n";
  int64_t now = clock_mono_ns();
  if (!c->cfg.cluster || c->refreshing || now < c->refresh_after ||
      node_down(from))
    return;
  pending *p = calloc(1, sizeof *p);
  char *cmd = malloc(sizeof slots - 1);
  if (!p || !cmd) {
    free(p);
    free(cmd);
    return;
  }
  memcpy(cmd, slots, sizeof slots - 1);
  p->cmd = cmd;
  p->len = sizeof slots - 1;
  p->slot = -1;
  p->redirects = MAX_REDIRECTS; /* (never followed anywhere) */
  p->cb = map_read;
  p->ud = from;
  p->deadline = now + (int64_t)c->cfg.timeout_ms * 1000000;
  if (enqueue(from, p)) {
    free(cmd);
    free(p);
    return;
  }
  c->refreshing = 1;
  c->refresh_after = now + MAP_REFRESH_NS;
  for (int i = 0; i < c->nnodes; i++)
    if (c->nodes[i] == from) c->map_from = i;
  /* Asked for from anywhere (a node failing in rc_flush's deadline check,
     or in flush_nodes after `from` was flushed): the timer writes it now,
     not the next event, which could be its own deadline failing `from`. */
  timer_arm(c, now);
}

/* Whether the slot map gives node n any slot. */
static int serves_slots(const rc_client *c, const node *n) {
  for (int i = 0; i < c->nnodes; i++)
    if (c->nodes[i] == n)
      return memchr(c->slot_node, i, sizeof c->slot_node) != NULL;
  return 0;
}

/* The node to read the map from instead of `failed`: the first after the
   one asked last that is up (connected), else the first that the breaker
   does not keep down (connected for it); NULL when there is none. Taken
   in turn, so that a node that cannot tell (a seed gone from the cluster,
   one that answers an error) does not stop the others being asked. */
static node *map_source(rc_client *c, const node *failed) {
  node *idle = NULL;
  for (int k = 1; k <= c->nnodes; k++) {
    node *n = c->nodes[(c->map_from + k) % c->nnodes];
    if (n == failed || node_down(n)) continue;
    if (n->state == N_UP) return n;
    if (!idle) idle = n;
  }
  return idle;
}

/*
 * A master that dies answers nothing, not even a MOVED, so its slots'
 * calls would fail (breaker, on_store_error) long after a replica has
 * taken them over (cluster-node-timeout and an election: seconds after
 * the death). So when a node that serves slots fails (node_fail: lost,
 * timed out, cannot connect), and for each call refused while it is
 * down (rc_send), the whole map is read again from another node
 * (map_source), as after a MOVED: one at a time, at most once per
 * MAP_REFRESH_NS. Until the failover, the map read still gives the dead
 * node its slots (rc_topology_read keeps a slot no master is named for
 * as it was, never "nobody"): the next refused call or failed probe asks
 * again, so the promotion is learned within about MAP_REFRESH_NS of it.
 */
static void relearn_map(rc_client *c, const node *failed) {
  if (!c->cfg.cluster || c->freeing || c->refreshing ||
      clock_mono_ns() < c->refresh_after || !serves_slots(c, failed))
    return;
  node *from = map_source(c, failed);
  if (from) refresh_map(c, from);
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
 * it was.
 */
static int split_batch(rc_client *c, pending *p) {
  rc_split *sp = rc_batch_split(p->cmd, p->len);
  if (!sp) return -1;
  split_call *s = calloc(1, sizeof *s + sp->n * sizeof *s->reply);
  pending **parts = calloc(sp->n, sizeof *parts);
  size_t made = 0;
  while (s && parts && made < sp->n &&
         (parts[made] = calloc(1, sizeof **parts)))
    made++;
  if (made < sp->n) {
    for (size_t i = 0; i < made; i++) free(parts[i]);
    free(parts);
    free(s);
    rc_split_free(sp);
    return -1;
  }
  s->whole = p;
  s->sp = sp;
  s->left = sp->n + 1; /* + 1: held until every part is sent */
  for (size_t i = 0; i < sp->n; i++) {
    pending *q = parts[i];
    q->cmd = sp->part[i].cmd;
    q->len = sp->part[i].len;
    sp->part[i].cmd = NULL;
    q->slot = p->slot;
    q->deadline = p->deadline;
    q->split = s;
    q->part = i;
    send_to(slot_owner(c, q->slot), q);
  }
  free(parts);
  if (--s->left == 0) split_done(s);
  return 0;
}

/* What a retry's deadline must leave after its pause, for the answer: the
   pause again, and at least a tenth of the timeout (5 ms of the default
   50), so that a retry is not sent to miss its deadline by a hair. */
static int64_t retry_margin(const rc_client *c, int64_t pause) {
  int64_t tenth = (int64_t)c->cfg.timeout_ms * 100000;
  return pause > tenth ? pause : tenth;
}

/*
 * TRYAGAIN for one request: its own keys are split between the source and
 * the target of a migrating slot (or, asked, the target has not all of
 * them yet), which only the migration's progress can change. As
 * redis-cli and the cluster clients do, p is sent again after a pause
 * (1 ms, doubled each time up to 32 ms), from the slot map again, while
 * the deadline leaves room for the pause and an answer (retry_margin);
 * after that it fails, alone. A retry whose answer is late all the same
 * fails alone at its deadline (check_deadlines), not its node.
 */
static void retry_later(rc_client *c, pending *p) {
  int64_t now = clock_mono_ns();
  int64_t pause = (int64_t)RETRY_MIN_NS
                  << (p->tries < RETRY_DOUBLINGS ? p->tries : RETRY_DOUBLINGS);
  if (now + pause + retry_margin(c, pause) > p->deadline) {
    finish(p, NULL, "TRYAGAIN until the deadline");
    return;
  }
  p->tries++;
  p->redirects = 0;
  p->asking = 0;
  p->retry_at = now + pause;
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
    if (p->deadline <= now) /* the loop was held up past it */
      finish(p, NULL, "TRYAGAIN until the deadline");
    else
      send_to(slot_owner(c, p->slot), p);
  }
  if (next) timer_arm(c, next);
}

static void node_write(node *n);

static void on_write(h2o_socket_t *sock, const char *err) {
  node *n = sock->data;
  free(n->inflight);
  n->inflight = NULL;
  if (err) {
    node_fail(n, "write failed");
    return;
  }
  if (n->wlen && !n->c->cfg.batch_us) node_write(n);
}

/* Moves the queued commands into the sent FIFO and writes their bytes. */
static void node_write(node *n) {
  if (n->state != N_UP || !n->wlen || n->inflight) return;
  if (n->tail)
    n->tail->next = n->qhead;
  else
    n->head = n->qhead;
  n->tail = n->qtail;
  n->qhead = n->qtail = NULL;
  n->inflight = n->wbuf;
  h2o_iovec_t iov = h2o_iovec_init(n->wbuf, n->wlen);
  n->wbuf = NULL;
  n->wlen = n->wcap = 0;
  n->queued_at = 0;
  h2o_socket_write(n->sock, &iov, 1, on_write);
}

/*
 * The SCRIPT LOAD that NOSCRIPT made (load) failed with r (out of memory,
 * an ACL, a script Redis will not compile): the command that waited for
 * it is answered with its NOSCRIPT when that comes (load_refused), not
 * loaded for again; the node and its other commands go on (a handshake's
 * failure would fail the node). Warns once per breaker interval.
 */
static void load_refused(node *n, pending *load, redisReply *r) {
  load->waiter->load_refused = 1;
  int64_t now = clock_mono_ns();
  if (now >= n->quiet_until) {
    log_msg("warn", "redis %s:%d: SCRIPT LOAD after NOSCRIPT: %.120s",
            n->addr.host, n->addr.port, r->str ? r->str : "error");
    n->quiet_until = now + (int64_t)n->c->cfg.breaker_ms * 1000000;
  }
  finish(load, r, NULL);
}

/* A reply for the oldest sent command. Cluster errors are followed here:
   MOVED (learn the slot's node, resend there), ASK (resend there once,
   after ASKING), NOSCRIPT (load the script, resend, after ASKING again if
   it was an ASK's), TRYAGAIN (split a batch, or try again after a
   pause). */
static void on_reply(node *n, redisReply *r) {
  pending *p = n->head;
  if (!p) {
    freeReplyObject(r);
    node_fail(n, "reply without a command");
    return;
  }
  n->head = p->next;
  if (!n->head) n->tail = NULL;
  rc_client *c = n->c;
  if (p->answered) { /* timed out alone: nobody waits for this reply */
    finish(p, r, NULL);
    return;
  }
  if (r->type == REDIS_REPLY_ERROR && !p->internal && r->str) {
    rc_redirect rd;
    if (p->redirects < MAX_REDIRECTS &&
        !rc_parse_redirect(r->str, r->len, &rd)) {
      /* "MOVED 3999 127.0.0.1:6381"; no host: the node's own */
      node *to = node_by_addr(c, rd.host[0] ? rd.host : n->addr.host, rd.port);
      if (to) {
        if (!rd.ask)
          for (int i = 0; i < c->nnodes; i++)
            if (c->nodes[i] == to) c->slot_node[rd.slot] = (uint8_t)i;
        freeReplyObject(r);
        p->redirects++;
        p->asking = rd.ask;
        p->load_refused = 0; /* another node: a load of its own */
        send_to(to, p);
        if (!rd.ask) refresh_map(c, to);
        return;
      }
    }
    if (!strncmp(r->str, "NOSCRIPT", 8) && p->redirects < MAX_REDIRECTS &&
        !p->load_refused) {
      /* A restarted or flushed node: load the script, then resend (p
         waits for the load: load_refused). */
      size_t sl;
      const char *src = rs_script(&sl);
      const char *argv[] = {"SCRIPT", "LOAD", src};
      size_t lens[] = {6, 4, sl};
      freeReplyObject(r);
      p->redirects++;
      pending *load = enqueue_internal(n, 3, argv, lens, p->deadline);
      if (!load)
        finish(p, NULL, "out of memory");
      else if (send_to(n, p) == 0)
        load->waiter = p; /* behind it on n: alive when its reply comes */
      return;
    }
    if (!strncmp(r->str, "TRYAGAIN", 8)) {
      freeReplyObject(r);
      if (split_batch(c, p)) retry_later(c, p);
      return;
    }
  }
  if (p->internal && r->type == REDIS_REPLY_ERROR && p->waiter) {
    load_refused(n, p, r);
    return;
  }
  if (p->internal && r->type == REDIS_REPLY_ERROR && r->str &&
      strncmp(r->str, "ASK", 3)) {
    /* AUTH or SELECT refused: the node is unusable as configured. */
    char why[160];
    snprintf(why, sizeof why, "handshake: %.120s", r->str);
    finish(p, r, NULL);
    node_fail(n, why);
    return;
  }
  finish(p, r, NULL);
}

static void on_read(h2o_socket_t *sock, const char *err) {
  node *n = sock->data;
  if (err) {
    node_fail(n, "connection lost");
    return;
  }
  if (redisReaderFeed(n->reader, sock->input->bytes, sock->input->size) !=
      REDIS_OK) {
    node_fail(n, "protocol error");
    return;
  }
  h2o_buffer_consume(&sock->input, sock->input->size);
  for (;;) {
    void *r = NULL;
    if (redisReaderGetReply(n->reader, &r) != REDIS_OK) {
      node_fail(n, "protocol error");
      return;
    }
    if (!r) break;
    on_reply(n, r);
    if (n->state != N_UP) return; /* failed while handling it */
  }
}

static void on_connect(h2o_socket_t *sock, const char *err) {
  node *n = sock->data;
  if (err) {
    node_fail(n, "connect failed");
    return;
  }
  int one = 1;
  setsockopt(h2o_socket_get_fd(sock), IPPROTO_TCP, TCP_NODELAY, &one,
             sizeof one);
  n->state = N_UP;
  h2o_socket_read_start(sock, on_read);
  node_write(n);
}

static int node_resolve(node *n) {
  if (n->resolved) return 0;
  struct addrinfo hints, *res = NULL;
  memset(&hints, 0, sizeof hints);
  hints.ai_socktype = SOCK_STREAM;
  char port[16];
  snprintf(port, sizeof port, "%d", n->addr.port);
  if (getaddrinfo(n->addr.host, port, &hints, &res) || !res) return -1;
  memcpy(&n->sa, res->ai_addr, res->ai_addrlen);
  n->salen = res->ai_addrlen;
  freeaddrinfo(res);
  n->resolved = 1;
  return 0;
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
  char *old = n->wbuf;
  size_t oldlen = n->wlen;
  n->wbuf = NULL;
  n->wlen = n->wcap = 0;
  int64_t deadline = clock_mono_ns() + (int64_t)c->cfg.timeout_ms * 1000000;
  int rc = 0;
  if (c->cfg.password[0]) {
    const char *argv[] = {"AUTH", c->cfg.user, c->cfg.password};
    size_t lens[] = {4, strlen(c->cfg.user), strlen(c->cfg.password)};
    rc |= !(c->cfg.user[0]
                ? enqueue_internal(n, 3, argv, lens, deadline)
                : enqueue_internal(n, 2,
                                   (const char *[]){"AUTH", c->cfg.password},
                                   (size_t[]){4, lens[2]}, deadline));
  }
  if (!c->cfg.cluster && c->cfg.db) {
    char db[16];
    snprintf(db, sizeof db, "%d", c->cfg.db);
    const char *argv[] = {"SELECT", db};
    size_t lens[] = {6, strlen(db)};
    rc |= !enqueue_internal(n, 2, argv, lens, deadline);
  }
  /* The script, so that a restarted Redis needs no NOSCRIPT round trip. */
  size_t sl;
  const char *src = rs_script(&sl);
  const char *load[] = {"SCRIPT", "LOAD", src};
  size_t load_lens[] = {6, 4, sl};
  rc |= !enqueue_internal(n, 3, load, load_lens, deadline);
  if (rc || (oldlen && wbuf_add(n, old, oldlen))) rc = -1;
  free(old);
  if (n->qtail)
    n->qtail->next = queued;
  else
    n->qhead = queued;
  while (queued && queued->next) queued = queued->next;
  if (queued) n->qtail = queued;
  if (rc) return -1;
  n->sock = h2o_socket_connect(c->loop, (struct sockaddr *)&n->sa, n->salen,
                               on_connect);
  if (!n->sock) return -1;
  n->sock->data = n;
  n->state = N_CONNECTING;
  return 0;
}

/* ---- the client ---- */

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
        if (!p->alone || p->answered) continue;
        if (p->deadline <= now)
          late = p;
        else
          next = earlier(next, p->deadline);
      }
    if (!late) return next;
    /* (its callback may queue more: the lists are walked again) */
    answer(late, NULL, "timeout");
  }
}

static void check_deadlines(rc_client *c, int64_t now) {
  int64_t next = 0;
  for (int i = 0; i < c->nnodes; i++) {
    int64_t at = node_deadlines(c->nodes[i], now);
    if (at < 0)
      node_fail(c->nodes[i], "timeout");
    else
      next = earlier(next, at);
  }
  if (next) timer_arm(c, next);
}

static void flush_nodes(rc_client *c, int64_t now, int force) {
  int64_t next = 0;
  for (int i = 0; i < c->nnodes; i++) {
    node *n = c->nodes[i];
    if (!n->wlen) continue;
    if (n->state == N_DOWN) {
      if (node_connect(n)) node_fail(n, "cannot connect");
      continue;
    }
    int64_t due = n->queued_at + (int64_t)c->cfg.batch_us * 1000;
    if (force || !c->cfg.batch_us || due <= now) {
      node_write(n);
    } else if (!next || due < next) {
      next = due;
    }
  }
  if (next) timer_arm(c, next);
}

static void on_timer(h2o_socket_t *sock, const char *err) {
  rc_client *c = sock->data;
  if (err) return;
  h2o_buffer_consume(&sock->input, sock->input->size);
  c->timer_at = 0;
  int64_t now = clock_mono_ns();
  check_deadlines(c, now);
  retry_due(c, now);
  flush_nodes(c, now, 0);
}

void rc_flush(rc_client *c) {
  int64_t now = clock_mono_ns();
  if (c->retry) retry_due(c, now);
  flush_nodes(c, now, 0);
  if (c->timer_at && c->timer_at <= now) {
    c->timer_at = 0;
    check_deadlines(c, now);
  }
}

rc_client *rc_client_new(h2o_loop_t *loop, const rc_config *cfg,
                         const rc_topology *t) {
  rc_client *c = calloc(1, sizeof *c);
  if (!c) return NULL;
  c->loop = loop;
  c->cfg = *cfg;
  for (int i = 0; i < t->nnodes; i++) node_new(c, &t->nodes[i]);
  memcpy(c->slot_node, t->slot_node, sizeof c->slot_node);
  c->timer_fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
  if (c->timer_fd < 0 || c->nnodes == 0) {
    if (c->timer_fd >= 0) close(c->timer_fd);
    rc_client_free(c);
    return NULL;
  }
  c->timer = h2o_evloop_socket_create(loop, c->timer_fd, 0);
  c->timer->data = c;
  h2o_socket_read_start(c->timer, on_timer);
  return c;
}

void rc_client_free(rc_client *c) {
  if (!c) return;
  c->freeing = 1;
  /* Every callback first (rc_send refuses from now on), then the nodes. */
  for (int i = 0; i < c->nnodes; i++) node_fail(c->nodes[i], "shutting down");
  while (c->retry) {
    pending *p = c->retry;
    c->retry = p->next;
    finish(p, NULL, "shutting down");
  }
  for (int i = 0; i < c->nnodes; i++) {
    free(c->nodes[i]->wbuf);
    free(c->nodes[i]);
  }
  if (c->timer) h2o_socket_close(c->timer); /* closes timer_fd */
  free(c);
}

int rc_send(rc_client *c, int slot, char *cmd, size_t len, rc_reply_fn cb,
            void *ud) {
  adopt_map(c); /* (one atomic load when there is nothing new) */
  node *n = slot_owner(c, slot);
  int64_t now = clock_mono_ns();
  if (c->freeing || (n->state == N_DOWN && now < n->down_until)) {
    relearn_map(c, n); /* its slots may have a new master by now */
    free(cmd);
    return -1;
  }
  pending *p = calloc(1, sizeof *p);
  if (!p) {
    free(cmd);
    return -1;
  }
  p->cmd = cmd;
  p->len = len;
  p->slot = slot;
  p->cb = cb;
  p->ud = ud;
  p->deadline = now + (int64_t)c->cfg.timeout_ms * 1000000;
  if (enqueue(n, p)) {
    free(p->cmd);
    free(p);
    return -1;
  }
  return 0;
}
