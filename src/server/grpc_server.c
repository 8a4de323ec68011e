/*
 * grpc_server.c — the gRPC front end's calls (grpc_server.h): a stream's
 * request headers checked as gRPC's servers check them
 * (grpc/doc/PROTOCOL-HTTP2.md; the answers grpc-go gives), its message
 * decoded (grpc_msg.c), decided on the worker's engine thread through
 * engine_decide exactly as HTTP's /v1/check is, and answered through
 * grpc_conn.c.
 *
 * In exact fleet mode a decision waits for Redis: the call's working set
 * (grpc_call) is kept until the engine's callback, on this same thread,
 * answers it. A call whose stream goes away first (the client reset it,
 * its connection closed) is cut loose (call->s NULL) and freed when the
 * decision comes; one whose grpc-timeout passes first is answered
 * DEADLINE_EXCEEDED then and cut loose too. A call whose grpc-timeout has
 * passed when its message is complete gets DEADLINE_EXCEEDED undecided.
 * Elsewhere decisions never wait and the working set lives on the stack.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grpc_conn.h"
#include "grpc_msg.h"
#include "grpc_server.h"

/* A decision's working set, for one call while it is decided. */
typedef struct grpc_call {
  grpc_stream *s; /* NULL once the stream is gone */
  rls_req rq;
  eng_result res;
  int64_t now;
} grpc_call;

static const struct {
  const char *path;
  int method;
} methods[] = {
    {"/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit", GM_RLS},
    {"/grpc.health.v1.Health/Check", GM_HEALTH},
};

/* ---- the request's headers ---- */

/* grpc-timeout ("1-8 digits, then H M S m u n") in nanoseconds; -1 when
   it is not one (ignored, as gRPC's C core ignores a bad one). */
static int64_t parse_timeout(const uint8_t *v, size_t n) {
  static const struct {
    char unit;
    int64_t ns;
  } units[] = {{'H', 3600000000000}, {'M', 60000000000}, {'S', 1000000000},
               {'m', 1000000},       {'u', 1000},        {'n', 1}};
  if (n < 2 || n > 9) return -1;
  int64_t x = 0;
  for (size_t i = 0; i + 1 < n; i++) {
    if (v[i] < '0' || v[i] > '9') return -1;
    x = x * 10 + (v[i] - '0');
  }
  for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
    if (v[n - 1] == units[i].unit)
      return x > INT64_MAX / units[i].ns ? INT64_MAX : x * units[i].ns;
  return -1;
}

static int is(const uint8_t *name, size_t nlen, const char *want) {
  return nlen == strlen(want) && !memcmp(name, want, nlen);
}

void grpc_call_header(grpc_stream *s, const uint8_t *name, size_t nlen,
                      const uint8_t *value, size_t vlen) {
  if (is(name, nlen, ":path")) {
    s->method = GM_OTHER;
    for (size_t i = 0; i < sizeof methods / sizeof methods[0]; i++)
      if (vlen == strlen(methods[i].path) &&
          !memcmp(value, methods[i].path, vlen))
        s->method = methods[i].method;
    size_t shown = vlen < GRPC_PATH_SHOWN ? vlen : GRPC_PATH_SHOWN;
    memcpy(s->path, value, shown);
    s->path[shown] = '\0';
  } else if (is(name, nlen, ":method")) {
    s->is_post = vlen == 4 && !memcmp(value, "POST", 4);
  } else if (is(name, nlen, "content-type")) {
    /* "application/grpc", alone or followed by "+proto" or ";...": the
       messages are protobuf ("+json" and the like are not served) */
    s->is_grpc = vlen >= 16 && !memcmp(value, "application/grpc", 16) &&
                 (vlen == 16 || value[16] == ';' ||
                  (vlen >= 22 && !memcmp(value + 16, "+proto", 6) &&
                   (vlen == 22 || value[22] == ';')));
  } else if (is(name, nlen, "grpc-timeout")) {
    int64_t t = parse_timeout(value, vlen);
    if (t >= 0)
      s->deadline_ns = t > INT64_MAX / 2 ? 0 : clock_mono_ns() + t;
  } else if (is(name, nlen, "grpc-encoding")) {
    s->encoded = !(vlen == 8 && !memcmp(value, "identity", 8));
  }
}

void grpc_call_check(grpc_stream *s) {
  if (!s->is_post) { /* (grpc-go's answers) */
    s->http_status = 405;
    s->early_status = RPC_INTERNAL;
    s->early_msg = "the request's :method is not POST";
  } else if (!s->is_grpc) {
    s->http_status = 415;
    s->early_status = RPC_INVALID_ARGUMENT;
    s->early_msg = "the request's content-type is not application/grpc";
  } else if (s->encoded) {
    s->early_status = RPC_UNIMPLEMENTED;
    s->early_msg = "compressed messages are not accepted (grpc-encoding "
                   "identity only)";
  }
}

/* ---- deadlines ---- */

static void on_tick(h2o_timeout_entry_t *e);

/* The worker's deadline check runs every few ms while a call waits. */
static void tick_arm(grpc_worker *gw) {
  if (h2o_linklist_is_empty(&gw->waiting) || h2o_timeout_is_linked(&gw->tick))
    return;
  gw->tick.cb = on_tick;
  h2o_timeout_link(gw->w->loop, &gw->tick_timeout, &gw->tick);
}

/* c's stream no longer waits for it: the decision, when it comes, only
   frees c. */
static void cut_loose(grpc_call *c) {
  grpc_stream *s = c->s;
  if (h2o_linklist_is_linked(&s->wait_link))
    h2o_linklist_unlink(&s->wait_link);
  s->call = NULL;
  c->s = NULL;
}

static void on_tick(h2o_timeout_entry_t *e) {
  grpc_worker *gw = H2O_STRUCT_FROM_MEMBER(grpc_worker, tick, e);
  int64_t now = clock_mono_ns();
  h2o_linklist_t *n = gw->waiting.next;
  while (n != &gw->waiting) {
    grpc_stream *s = H2O_STRUCT_FROM_MEMBER(grpc_stream, wait_link, n);
    n = n->next;
    if (s->deadline_ns > now) continue;
    cut_loose(s->call);
    grpc_respond(s, RPC_DEADLINE_EXCEEDED, "deadline exceeded", NULL, 0);
  }
  tick_arm(gw);
}

void grpc_call_end(grpc_stream *s) {
  if (s->call) cut_loose(s->call);
}

/* ---- deciding ---- */

/* The decision of c is in (rc as engine_decide's): its answer. */
static void decided(grpc_call *c, int rc) {
  grpc_stream *s = c->s;
  worker *w = s->w;
  if (rc && rc != ENG_EDOMAIN) {
    grpc_respond(s, rls_status_of(rc), c->res.msg, NULL, 0);
    return;
  }
  if (rc == ENG_EDOMAIN) engine_count(w->et, EC_GRPC_UNKNOWN_DOMAIN, 1);
  size_t len = 0;
  uint8_t *body =
      rls_encode(&c->rq, rc, &c->res, w->srv->o.header_style, c->now, &len);
  if (!body)
    grpc_respond(s, RPC_RESOURCE_EXHAUSTED, "out of memory", NULL, 0);
  else
    grpc_respond(s, RPC_OK, NULL, body, len);
}

/* Exact mode: a decision that waited is in, on the worker's thread. */
static void engine_done(void *ud, int rc, eng_result *res) {
  (void)res; /* c->res */
  grpc_call *c = ud;
  grpc_stream *s = c->s;
  if (s) {
    if (h2o_linklist_is_linked(&s->wait_link))
      h2o_linklist_unlink(&s->wait_link);
    s->call = NULL;
    decided(c, rc);
  }
  rls_free(&c->rq);
  free(c);
}

/* Decides c (its request decoded) on the worker's engine thread; answers
   now, or, when the decision waits (c on the heap), from engine_done.
   1: it waits (c is engine_done's), 0: answered. */
static int decide(grpc_call *c, int may_wait) {
  grpc_stream *s = c->s;
  worker *w = s->w;
  c->now = clock_wall_ns();
  int rc = rls_decide(&c->rq, w->srv->eng, w->et, c->now, &c->res,
                      may_wait ? engine_done : NULL, c);
  if (rc == ENG_PENDING) {
    s->call = c;
    if (s->deadline_ns) {
      h2o_linklist_insert(&w->grpc->waiting, &s->wait_link);
      tick_arm(w->grpc);
    }
    return 1;
  }
  decided(c, rc);
  return 0;
}

/* The request's message (after its 5-byte prefix), or NULL with *len 0
   when none came. */
static const uint8_t *message(const grpc_stream *s, size_t *len) {
  *len = s->body.len >= 5 ? s->body.len - 5 : 0;
  return s->body.len >= 5 ? (const uint8_t *)s->body.p + 5 : NULL;
}

static void on_rls(grpc_stream *s) {
  worker *w = s->w;
  /* A call whose grpc-timeout passed before its message was in: its
     client has given up on it, so it is neither decided nor charged (as
     when the deadline passes while the decision waits). */
  if (s->deadline_ns && clock_mono_ns() >= s->deadline_ns) {
    grpc_respond(s, RPC_DEADLINE_EXCEEDED, "deadline exceeded", NULL, 0);
    return;
  }
  size_t len;
  const uint8_t *m = message(s, &len);
  if (!m) {
    grpc_respond(s, RPC_INVALID_ARGUMENT, "no request message", NULL, 0);
    return;
  }
  grpc_call local, *c = &local;
  if (w->may_wait && !(c = malloc(sizeof *c))) {
    grpc_respond(s, RPC_RESOURCE_EXHAUSTED, "out of memory", NULL, 0);
    return;
  }
  c->s = s;
  char err[256];
  /* A decision that cannot wait is over before the next call is decoded:
     the worker's arena serves them all. */
  int st = rls_decode_in(&c->rq, w->may_wait ? NULL : w->grpc->arena, m, len,
                         w->srv->o.max_key, err, sizeof err);
  if (st != RPC_OK) {
    grpc_respond(s, st, err, NULL, 0);
  } else if (decide(c, w->may_wait)) {
    return; /* engine_done's now */
  }
  rls_free(&c->rq);
  if (c != &local) free(c);
}

static void on_health(grpc_stream *s) {
  size_t len;
  const uint8_t *m = message(s, &len);
  uint8_t *body = NULL;
  size_t blen = 0;
  int st = m ? health_answer(m, len, atomic_load(&s->w->srv->stopping), &body,
                             &blen)
             : RPC_INVALID_ARGUMENT;
  grpc_respond(s, st,
               st == RPC_NOT_FOUND ? "unknown service"
               : !m                ? "no request message"
                                   : NULL,
               body, blen);
}

static void on_other(grpc_stream *s) {
  char msg[GRPC_PATH_SHOWN + 32];
  snprintf(msg, sizeof msg, "unknown method %s", s->path);
  grpc_respond(s, RPC_UNIMPLEMENTED, msg, NULL, 0);
}

/* Whether the request's bytes are one whole message, prefix and all (or
   none): a stream the client ended inside a message must not be decided
   on what came (a protobuf cut at a field boundary parses). */
static int whole(const grpc_stream *s) {
  if (s->body.len == 0) return 1;
  if (s->body.len < 5) return 0;
  return s->body.len - 5 == grpc_prefix_len((const uint8_t *)s->body.p);
}

void grpc_call_begin(grpc_stream *s) {
  static void (*const on[])(grpc_stream *) = {
      [GM_NONE] = on_other, [GM_RLS] = on_rls, [GM_HEALTH] = on_health,
      [GM_OTHER] = on_other};
  if ((s->method == GM_RLS || s->method == GM_HEALTH) && !whole(s)) {
    /* (grpc-go's answer to a message cut short) */
    grpc_respond(s, RPC_INTERNAL, "incomplete message", NULL, 0);
    return;
  }
  on[s->method](s);
}
