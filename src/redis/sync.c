/*
 * sync.c — approximate mode's sync thread.
 *
 * Every interval: the engine hands over what each (limiter, key) charged
 * locally since the last round (engine_sync_take); each is charged to the
 * key's state in Redis by the exact-mode script (so the fleet's state is
 * the same as exact mode's, only late); the script's reply says what the
 * fleet has left, and a local limiter that has more left is charged the
 * difference (engine_sync_apply). A charge the fleet's state cannot take in
 * full is charged as far as it goes (a second call for what remains).
 *
 * The bound this gives: between two rounds each daemon decides alone, so
 * the fleet can let through, beyond the limit, what the other daemons
 * admit in one interval: (N - 1) x (burst + the refill of one interval)
 * per interval, for N daemons. Under sustained overload on every daemon it
 * accumulates (the excess is not carried as a debt in Redis; each local
 * limiter refills on its own): docs/fleet.md has the measured figures.
 *
 * It uses hiredis's blocking API on its own connections: this thread does
 * nothing else, and a dead Redis only delays the next round (each call has
 * the --redis-timeout). Local decisions never wait for it.
 */
#include "sync.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../server/server.h"
#include "script.h"
#include "slot.h"

struct rs_sync {
  engine *e;
  rc_config cfg;
  rc_topology topo;
  int interval_ms;
  redisContext *ctx[64];
  int64_t down_until[64];
  pthread_t tid;
  pthread_mutex_t lock;
  pthread_cond_t cond;
  int stop;
};

static int64_t mono_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static redisContext *node_ctx(rs_sync *s, int n) {
  if (s->ctx[n]) return s->ctx[n];
  if (mono_ms() < s->down_until[n]) return NULL;
  char err[256];
  redisContext *c = rc_connect_sync(&s->cfg, &s->topo.nodes[n], err, sizeof err);
  if (!c) {
    srv_log("warn", "sync: redis %s; retrying in %d ms", err, s->cfg.breaker_ms);
    s->down_until[n] = mono_ms() + s->cfg.breaker_ms;
    return NULL;
  }
  s->ctx[n] = c;
  return c;
}

static void node_drop(rs_sync *s, int n) {
  if (s->ctx[n]) redisFree(s->ctx[n]);
  s->ctx[n] = NULL;
  s->down_until[n] = mono_ms() + s->cfg.breaker_ms;
}

/*
 * One pipelined pass: charges cost[i] (> 0) to key i, fills remaining[i]
 * (what the fleet has left after it; -1 when unknown) and, for a charge
 * denied in full, left[i] (what the key could still take; 0 otherwise).
 */
static void pass(rs_sync *s, eng_delta **d, size_t n, const int64_t *cost,
                 int64_t *remaining, int64_t *left) {
  /* On the heap: a round can hold every key of an interval (100k+). */
  int *node = malloc(n * sizeof *node), *sent = malloc(n * sizeof *sent);
  rs_call *call = malloc(n * sizeof *call);
  if (!node || !sent || !call) {
    for (size_t i = 0; i < n; i++) remaining[i] = -1, left[i] = 0;
    free(node), free(sent), free(call);
    return;
  }
  for (size_t i = 0; i < n; i++) {
    sent[i] = 0;
    left[i] = 0;
    if (cost[i] <= 0) continue;
    size_t klen;
    const char *key = engine_delta_key(d[i], &klen);
    int slot = s->cfg.cluster ? (int)rc_key_slot(key, klen) : 0;
    int nd = s->topo.slot_node[slot] < s->topo.nnodes ? s->topo.slot_node[slot] : 0;
    redisContext *c = node_ctx(s, nd);
    if (!c) continue;
    rs_check chk = {engine_delta_policy(d[i]), key, klen, cost[i], 0};
    char *cmd;
    size_t len;
    if (rs_format(&chk, 1, 0, -1, &call[i], &cmd, &len)) continue;
    if (redisAppendFormattedCommand(c, cmd, len) == REDIS_OK) {
      node[i] = nd;
      sent[i] = 1;
    }
    free(cmd);
  }
  for (size_t i = 0; i < n; i++) {
    if (!sent[i] || !s->ctx[node[i]]) {
      if (cost[i] > 0) remaining[i] = -1;
      continue;
    }
    redisReply *r = NULL;
    if (redisGetReply(s->ctx[node[i]], (void **)&r) != REDIS_OK || !r) {
      srv_log("warn", "sync: redis %s:%d: %s", s->topo.nodes[node[i]].host,
              s->topo.nodes[node[i]].port, s->ctx[node[i]]->errstr);
      node_drop(s, node[i]);
      remaining[i] = -1;
      continue;
    }
    sl_decision dec;
    int allowed;
    int64_t rnow;
    if (r->type == REDIS_REPLY_ERROR || rs_parse(&call[i], r, &dec, &allowed, &rnow)) {
      if (r->type == REDIS_REPLY_ERROR && !strncmp(r->str, "MOVED ", 6)) {
        /* The slot moved: learn where; this key waits for the next round. */
        char host[256];
        int slot, port;
        if (sscanf(r->str, "MOVED %d %255[^:]:%d", &slot, host, &port) == 3 &&
            slot >= 0 && slot < 16384) {
          int k = 0;
          while (k < s->topo.nnodes && (s->topo.nodes[k].port != port ||
                                        strcmp(s->topo.nodes[k].host, host)))
            k++;
          if (k == s->topo.nnodes && k < 64) {
            snprintf(s->topo.nodes[k].host, sizeof s->topo.nodes[k].host, "%s", host);
            s->topo.nodes[k].port = port;
            s->topo.nnodes++;
          }
          if (k < s->topo.nnodes) s->topo.slot_node[slot] = (uint8_t)k;
        }
      }
      remaining[i] = -1;
    } else {
      remaining[i] = dec.remaining;
      if (!dec.allowed) left[i] = dec.remaining;
    }
    freeReplyObject(r);
  }
  free(node);
  free(sent);
  free(call);
}

static void round_(rs_sync *s) {
  eng_delta *list = engine_sync_take(s->e);
  size_t n = 0;
  for (eng_delta *d = list; d; d = engine_delta_next(d)) n++;
  if (!n) return;
  eng_delta **d = malloc(n * sizeof *d);
  int64_t *cost = malloc(n * sizeof *cost), *rem = malloc(n * sizeof *rem),
          *left = malloc(n * sizeof *left);
  if (!d || !cost || !rem || !left) {
    free(d), free(cost), free(rem), free(left);
    engine_sync_apply(s->e, list, NULL, 0);
    return;
  }
  size_t i = 0;
  for (eng_delta *x = list; x; x = engine_delta_next(x), i++) {
    const sl_policy *p = engine_delta_policy(x);
    int64_t B = p->burst ? p->burst : p->limit;
    d[i] = x;
    cost[i] = engine_delta_cost(x) < B ? engine_delta_cost(x) : B;
  }
  pass(s, d, n, cost, rem, left);
  /* Charges that did not fit whole: as much as still fits. */
  int again = 0;
  for (i = 0; i < n; i++) {
    cost[i] = left[i];
    again |= left[i] > 0;
  }
  if (again) {
    int64_t *rem2 = malloc(n * sizeof *rem2), *left2 = malloc(n * sizeof *left2);
    if (rem2 && left2) {
      for (i = 0; i < n; i++) rem2[i] = rem[i];
      pass(s, d, n, cost, rem2, left2);
      for (i = 0; i < n; i++)
        if (cost[i] > 0) rem[i] = rem2[i];
    }
    free(rem2);
    free(left2);
  }
  engine_sync_apply(s->e, list, rem, srv_now_ns());
  free(d);
  free(cost);
  free(rem);
  free(left);
}

static void *sync_main(void *arg) {
  rs_sync *s = arg;
  pthread_mutex_lock(&s->lock);
  while (!s->stop) {
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    int64_t ns = until.tv_nsec + (int64_t)s->interval_ms * 1000000;
    until.tv_sec += ns / 1000000000;
    until.tv_nsec = ns % 1000000000;
    pthread_cond_timedwait(&s->cond, &s->lock, &until);
    pthread_mutex_unlock(&s->lock);
    round_(s);
    pthread_mutex_lock(&s->lock);
  }
  pthread_mutex_unlock(&s->lock);
  return NULL;
}

rs_sync *rs_sync_start(engine *e, const rc_config *c, const rc_topology *t,
                       int interval_ms) {
  rs_sync *s = calloc(1, sizeof *s);
  if (!s) return NULL;
  s->e = e;
  s->cfg = *c;
  s->topo = *t;
  if (s->topo.nnodes == 0) {
    s->topo.nodes[0] = c->seeds[0];
    s->topo.nnodes = 1;
  }
  s->interval_ms = interval_ms;
  pthread_mutex_init(&s->lock, NULL);
  pthread_cond_init(&s->cond, NULL);
  if (pthread_create(&s->tid, NULL, sync_main, s)) {
    free(s);
    return NULL;
  }
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
  for (int n = 0; n < 64; n++)
    if (s->ctx[n]) redisFree(s->ctx[n]);
  pthread_mutex_destroy(&s->lock);
  pthread_cond_destroy(&s->cond);
  free(s);
}
