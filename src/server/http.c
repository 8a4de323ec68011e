/*
 * http.c — the HTTP front end (h2o): one decision per request.
 *
 *   GET  /v1/check?domain=D&K1=V1&K2=V2[&hits=N]   config rules, one
 *        descriptor (query order = entry order)
 *   POST /v1/check   {"domain", "descriptors": [{"entries": [{"key",
 *        "value"}], "hits_addend"?}], "hits_addend"?}  (Envoy's RLS shape)
 *   GET  /v1/throttle?key=K&policy=SPEC[&cost=N]   ad-hoc policy
 *   POST /v1/acquire  (a /v1/throttle or /v1/check that takes a lease),
 *        POST /v1/release, /v1/renew ?lease=T&key=K or &domain=D&K1=V1
 *        (concurrency leases; lease.h has the token)
 *   GET  /metrics (Prometheus), /healthz, /readyz
 *   POST /admin/reset?key=K[&policy=SPEC] (ad-hoc), ?domain=D&K1=V1 (a
 *        config descriptor) or a /v1/check JSON body (its descriptors),
 *        GET /admin/inspect?... (a /v1/check or /v1/throttle that charges
 *        nothing); bearer token, or loopback only
 *
 * Decisions answer 200 or the deny status (--deny-status, 429) with a JSON
 * body, and carry the IETF draft headers (RateLimit-Policy, RateLimit) and
 * X-RateLimit-Limit/Remaining/Reset; a denial adds Retry-After. Errors are
 * JSON {"error": "..."} with 400, 404, 405, 413, 431 or 503 (also a reset
 * that Redis did not carry out, in fleet mode).
 *
 * A value in /v1/check may refer to the request itself ($remote_addr,
 * $http_x_api_key), for forward-auth proxies that cannot put the client's
 * address or a header into the URL (Traefik): http_request.c reads the
 * request, http_render.c writes the answer; this file holds the routes
 * (one table: path, methods, admin or not, handler) and the decisions,
 * which in exact fleet mode may wait for Redis.
 */
#include <stdlib.h>
#include <string.h>

#include "hold.h"
#include "http.h"
#include "lease.h"
#include "observe.h"

typedef struct sluice_handler {
  h2o_handler_t super;
  server *srv;
} sluice_handler;

/*
 * A decision whose answer comes later: in fleet mode, one waiting for
 * Redis; in wait mode, one held for its leaky_bucket delay (hold.h), or
 * both in turn. The hook, in the request's pool, learns when h2o disposes
 * of the request (the client went away) before the answer came: a held
 * answer is then dropped from the hold, one waiting for Redis when Redis
 * answers.
 */
enum { W_CHECK, W_THROTTLE, W_RESET, W_RELEASE, W_RENEW };
typedef struct http_wait {
  h2o_req_t *req; /* NULL once the request is gone */
  struct http_wait **hook;
  server *srv;
  worker *w;
  int kind, peek, has_skipped;
  int waiting; /* wait mode: a place in the hold is reserved */
  int held;    /* in the hold now */
  hold_entry hold;
  http_kept kept; /* held: the answer, rendered when the hold started */
  int64_t cap; /* wait mode: the longest hold */
  size_t n, asked;
  int skipped[ENG_MAX_DESCRIPTORS];
  int64_t now;
  union {
    eng_result r;    /* W_CHECK, W_THROTTLE */
    eng_reset reset; /* W_RESET */
  } u;
} http_wait;

static void hook_dispose(void *p) {
  http_wait **hook = p;
  http_wait *wt = *hook;
  if (!wt) return;
  if (wt->held) { /* nobody to answer: out of the hold */
    hold_cancel(wt->w, &wt->hold);
    free(wt);
    return;
  }
  wt->req = NULL;
}

/* A wait for req (NULL: out of memory). */
static http_wait *wait_alloc(h2o_req_t *req, server *srv, int kind,
                             int64_t now) {
  http_wait *wt = malloc(sizeof *wt);
  if (!wt) return NULL;
  wt->req = req;
  wt->hook = NULL;
  wt->srv = srv;
  wt->w = worker_of(req->conn->ctx);
  wt->kind = kind;
  wt->peek = wt->has_skipped = 0;
  wt->waiting = wt->held = 0;
  wt->cap = 0;
  wt->n = wt->asked = 0;
  wt->now = now;
  return wt;
}

/* A decision's wait, when this worker's decisions may wait for Redis or
   the request waits for its delay (else NULL: the answer comes at once,
   into the caller's result). */
static http_wait *wait_new(h2o_req_t *req, server *srv, int kind,
                           int64_t now, int64_t cap) {
  if (!worker_of(req->conn->ctx)->may_wait && !cap) return NULL;
  http_wait *wt = wait_alloc(req, srv, kind, now);
  if (wt) wt->cap = cap;
  return wt;
}

/* The call went pending: hook the request's end. */
static int wait_pending(http_wait *wt) {
  if (!wt->hook) {
    wt->hook = h2o_mem_alloc_shared(&wt->req->pool, sizeof *wt->hook,
                                    hook_dispose);
    *wt->hook = wt;
  }
  return 0;
}

/* Sends wt's decided answer (rc: the decision's failure, or 0). */
static int render(http_wait *wt, int rc) {
  eng_result *res = &wt->u.r;
  if (rc) return http_engine_error(wt->req, rc, res->msg);
  if (wt->kind == W_RELEASE || wt->kind == W_RENEW)
    return http_render_lease(wt->req, res, wt->kind == W_RENEW);
  if (wt->kind == W_CHECK)
    return http_render_check(wt->req, wt->srv, res, wt->n, wt->peek,
                             wt->has_skipped ? wt->skipped : NULL, wt->asked,
                             wt->now);
  return http_render_throttle(wt->req, wt->srv, res, wt->now);
}

/* The held answer's time has come. */
static void on_held(hold_entry *e) {
  http_wait *wt = H2O_STRUCT_FROM_MEMBER(http_wait, hold, e);
  wt->held = 0;
  *wt->hook = NULL;
  http_send_kept(wt->req, &wt->kept);
  free(wt);
}

/*
 * The wait mode's step between a decision and its answer: an allowed
 * decision with a delay is held for it (1: held, the answer comes from
 * on_held). A delay above the cap becomes a denial (hold_delay).
 */
static int maybe_hold(http_wait *wt) {
  int64_t delay = hold_delay(&wt->u.r, wt->cap);
  if (delay > 0 && wt->req) {
    wt->hold.fire = on_held;
    if (!hold_start(wt->w, &wt->hold, delay)) {
      wt->waiting = 0; /* (its place is the hold's now) */
      wt->held = 1;
      wait_pending(wt);
      /* Rendered now: the rules it names may be freed by a reload
         before the hold ends. */
      http_keep_begin(&wt->kept);
      render(wt, 0);
      http_keep_end();
      return 1;
    }
    wt->waiting = 0; /* out of memory: answered at once, place given back */
  }
  return 0;
}

/* Answers a decided wt (rc: its failure, or 0), at once or after its
   delay; frees it unless held. Returns 0. */
static int deliver(http_wait *wt, int rc) {
  if (!rc && wt->waiting && maybe_hold(wt)) return 0;
  if (wt->waiting) hold_unreserve(wt->w);
  if (wt->req) {
    if (wt->hook) *wt->hook = NULL;
    render(wt, rc);
  }
  free(wt);
  return 0;
}

static void wait_done(void *ud, int rc, eng_result *res) {
  (void)res; /* (wt->u.r) */
  deliver(ud, rc);
}

/* Wait mode: a place in the hold for wt, before its decision. 0, or -1
   after answering 503 (the daemon holds --max-waiting answers already). */
static int wait_reserve(http_wait *wt) {
  if (!wt->cap) return 0;
  if (hold_reserve(wt->w)) {
    http_add_header(wt->req, "retry-after", "1", 1);
    http_send_error(wt->req, 503, "too many requests waiting (--max-waiting "
                                  "%ld)", wt->srv->o.max_waiting);
    free(wt);
    return -1;
  }
  wt->waiting = 1;
  return 0;
}

/* eng_client_fn: the request's client, per $remote_addr's rules (asked
   only for a line of the denial log). */
static void http_client(void *ud, char *buf, size_t len) {
  h2o_req_t *req = ud;
  http_client_addr(req, worker_of(req->conn->ctx)->srv, buf, len);
}

/*
 * Decides req's descriptors and sends the answer (status, headers, body).
 * `skipped` (NULL: none) marks, among the `asked` descriptors of the
 * request, those left out because a value named a missing header: their
 * statuses stay in place, as "OK" with "skipped": true.
 */
static int answer_check(h2o_req_t *req, server *srv, const eng_request *er,
                        int peek, const int *skipped, size_t asked,
                        const char *prio, size_t prio_len) {
  worker *w = worker_of(req->conn->ctx);
  eng_request r = *er;
  int64_t cap = 0;
  if (peek) {
    r.hits = 0;
    for (size_t i = 0; i < r.n; i++) r.descriptors[i].hits = -1;
  } else {
    int on = http_wait_cap(req, srv, &cap);
    if (on < 0) return 0;
    if (!on) cap = 0;
  }
  int64_t now = clock_wall_ns();
  eng_result stack_res, *res = &stack_res;
  http_wait *wt = r.n ? wait_new(req, srv, W_CHECK, now, cap) : NULL;
  if (wt && wait_reserve(wt)) return 0;
  if (wt) {
    res = &wt->u.r;
    wt->peek = peek;
    wt->n = r.n;
    wt->asked = asked;
    wt->has_skipped = skipped != NULL;
    if (skipped)
      memcpy(wt->skipped, skipped,
             (asked < ENG_MAX_DESCRIPTORS ? asked : ENG_MAX_DESCRIPTORS) *
                 sizeof *skipped);
  }
  if (!prio) prio = http_priority(req, &prio_len);
  eng_query q = {.kind = ENG_QUERY_RULES, .req = &r, .now = now,
                 .priority = prio, .priority_len = prio_len,
                 .client = http_client, .client_ud = req,
                 .max_delay_ns = wt ? wt->cap : 0};
  int rc =
      r.n ? engine_decide(w->et, &q, res, wt ? wait_done : NULL, wt) : 0;
  if (rc == ENG_PENDING) return wait_pending(wt);
  if (wt) return deliver(wt, rc);
  if (!r.n) { /* every descriptor was skipped: nothing applies */
    engine_result_init(res, 1);
    if (!config_domain(engine_config(srv->eng), r.domain, r.domain_len)) {
      rc = ENG_EDOMAIN;
      snprintf(res->msg, sizeof res->msg, "unknown domain '%.*s'",
               (int)(r.domain_len < 200 ? r.domain_len : 200), r.domain);
    }
  }
  int sent = rc ? http_engine_error(req, rc, res->msg)
                : http_render_check(req, srv, res, r.n, peek, skipped, asked, now);
  free(wt);
  return sent;
}

static int get_check(h2o_req_t *req, server *srv, int peek) {
  eng_descriptor d;
  eng_request er;
  if (http_query_request(req, srv, &er, &d)) return 0;
  int skipped = er.n == 0;
  return answer_check(req, srv, &er, peek, &skipped, 1, NULL, 0);
}

static int post_check(h2o_req_t *req, server *srv, int peek) {
  json_t *root;
  eng_request er;
  eng_descriptor ds[ENG_MAX_DESCRIPTORS];
  int skipped[ENG_MAX_DESCRIPTORS];
  size_t asked;
  int rc = 0;
  if (http_body_request(req, srv, &root, &er, ds, skipped, &asked) == 0) {
    /* The body's "priority" (a load shedding class) before the header. */
    json_t *p = json_object_get(root, "priority");
    rc = answer_check(req, srv, &er, peek, skipped, asked,
                      json_is_string(p) ? json_string_value(p) : NULL,
                      json_is_string(p) ? json_string_length(p) : 0);
  }
  json_decref(root);
  return rc;
}

static int get_throttle(h2o_req_t *req, server *srv, int peek) {
  worker *w = worker_of(req->conn->ctx);
  qparam ps[MAX_PARAMS];
  char err[200];
  int n = http_parse_query(req, ps, err, sizeof err);
  if (n < 0) return http_send_error(req, 400, "%s", err);
  const qparam *key = http_find_param(ps, n, "key"), *pol = http_find_param(ps, n, "policy"),
               *cost_p = http_find_param(ps, n, "cost");
  if (!key || !pol)
    return http_send_error(req, 400, "key= and policy= are required");
  int64_t cost = 1;
  int why = cost_p ? http_parse_count(cost_p->value, cost_p->value_len, &cost)
                   : 0;
  if (why) {
    http_count_error(req, "cost", cost_p->value, cost_p->value_len, why);
    return 0;
  }
  if (peek) cost = 0;
  if (key->value_len > srv->o.max_key)
    return http_send_error(req, 400, "key longer than %zu bytes", srv->o.max_key);
  int64_t cap = 0;
  if (!peek) {
    int on = http_wait_cap(req, srv, &cap);
    if (on < 0) return 0;
    if (!on) cap = 0;
  }
  int64_t now = clock_wall_ns();
  eng_result stack_res, *res = &stack_res;
  http_wait *wt = wait_new(req, srv, W_THROTTLE, now, cap);
  if (wt && wait_reserve(wt)) return 0;
  if (wt) res = &wt->u.r;
  eng_query q = {.kind = ENG_QUERY_POLICY,
                 .key = key->value,
                 .key_len = key->value_len,
                 .spec = pol->value,
                 .spec_len = pol->value_len,
                 .cost = cost,
                 .now = now,
                 .client = http_client,
                 .client_ud = req,
                 .max_delay_ns = cap};
  int rc = engine_decide(w->et, &q, res, wt ? wait_done : NULL, wt);
  if (rc == ENG_PENDING) return wait_pending(wt);
  if (wt) return deliver(wt, rc);
  int sent = rc ? http_engine_error(req, rc, res->msg)
                : http_render_throttle(req, srv, res, now);
  free(wt);
  return sent;
}

/*
 * The query of a release or renewal (the lease in *q, found or not): the
 * lease is lease= or the Sluice-Lease header; what it was taken under is
 * key= (its token names the ad-hoc policy, or policy= does), domain=D&
 * K1=V1 (lease= is not an entry there) or a /v1/check JSON body (*root).
 * 0, or -1 after sending a 400.
 */
static int lease_query(h2o_req_t *req, server *srv, eng_query *q,
                       eng_request *er, eng_descriptor *ds, json_t **root) {
  qparam ps[MAX_PARAMS];
  char err[200];
  int n = http_parse_query(req, ps, err, sizeof err);
  if (n < 0) return http_send_error(req, 400, "%s", err), -1;
  const qparam *lp = http_find_param(ps, n, "lease");
  const char *tok = lp ? lp->value : NULL;
  size_t tok_len = lp ? lp->value_len : 0;
  ssize_t hi = lp ? -1
                  : h2o_find_header_by_str(&req->headers, "sluice-lease", 12, -1);
  if (hi >= 0) {
    tok = req->headers.entries[hi].value.base;
    tok_len = req->headers.entries[hi].value.len;
  }
  const char *pol = NULL;
  size_t plen = 0;
  if (!tok || lease_token_parse(tok, tok_len, &q->lease, &pol, &plen))
    return http_send_error(req, 400, "lease= (or a Sluice-Lease header) must "
                                     "be the token the acquire returned"),
           -1;
  const qparam *key = http_find_param(ps, n, "key"),
               *pp = http_find_param(ps, n, "policy");
  if (key) {
    if (pp) pol = pp->value, plen = pp->value_len;
    if (!pol)
      return http_send_error(req, 400, "policy= is required: the lease "
                                       "names none"),
             -1;
    q->kind = ENG_QUERY_POLICY;
    q->key = key->value;
    q->key_len = key->value_len;
    q->spec = pol;
    q->spec_len = plen;
    return 0;
  }
  q->kind = ENG_QUERY_RULES;
  q->req = er;
  if (http_find_param(ps, n, "domain")) {
    if (http_query_request(req, srv, er, &ds[0])) return -1;
    size_t k = 0; /* lease= said which lease, not which descriptor */
    for (size_t i = 0; i < ds[0].n; i++)
      if (!(ds[0].entries[i].key_len == 5 &&
            !memcmp(ds[0].entries[i].key, "lease", 5)))
        ds[0].entries[k++] = ds[0].entries[i];
    ds[0].n = k;
    return 0;
  }
  int skipped[ENG_MAX_DESCRIPTORS];
  size_t asked;
  if (req->entity.len)
    return http_body_request(req, srv, root, er, ds, skipped, &asked) ? -1 : 0;
  return http_send_error(req, 400, "key= or domain= (with descriptor "
                                   "entries), or a JSON body, is required"),
         -1;
}

/* POST /v1/release, /v1/renew: 200 with released (renewed) true, or false
   when no such lease is live (unknown, released, expired: harmless). */
static int lease_route(h2o_req_t *req, server *srv, int renew) {
  worker *w = worker_of(req->conn->ctx);
  eng_descriptor ds[ENG_MAX_DESCRIPTORS];
  eng_request er;
  json_t *root = NULL;
  int64_t now = clock_wall_ns();
  eng_query q = {.now = now,
                 .lease_op = renew ? ENG_LEASE_RENEW : ENG_LEASE_RELEASE};
  if (lease_query(req, srv, &q, &er, ds, &root)) {
    json_decref(root);
    return 0;
  }
  eng_result stack_res, *res = &stack_res;
  http_wait *wt = wait_new(req, srv, renew ? W_RENEW : W_RELEASE, now, 0);
  if (wt) res = &wt->u.r;
  int rc = engine_decide(w->et, &q, res, wt ? wait_done : NULL, wt);
  json_decref(root); /* (the engine copied what it needs) */
  if (rc == ENG_PENDING) return wait_pending(wt);
  int sent = rc ? http_engine_error(req, rc, res->msg)
                : http_render_lease(req, res, renew);
  free(wt);
  return sent;
}

/* A reset's answer, when it waited for Redis (fleet mode, either). */
static void reset_done(void *ud, int rc, eng_reset *r) {
  http_wait *wt = ud;
  if (wt->req) {
    *wt->hook = NULL;
    http_render_reset(wt->req, rc, r);
  }
  free(wt);
}

/* ?key=K[&policy=SPEC]: an ad-hoc key under that policy, or under every
   policy this daemon has used; ?domain=D&K1=V1...: a config descriptor
   under every rule it matches; no query and a JSON body (/v1/check's):
   its descriptors, as one request (a domain's hash_tag comes from any of
   them, as in a decision). */
static int admin_reset(h2o_req_t *req, server *srv) {
  worker *w = worker_of(req->conn->ctx);
  qparam ps[MAX_PARAMS];
  char err[200];
  int n = http_parse_query(req, ps, err, sizeof err);
  if (n < 0) return http_send_error(req, 400, "%s", err);
  eng_descriptor ds[ENG_MAX_DESCRIPTORS];
  eng_request er;
  json_t *root = NULL;
  const qparam *key = NULL, *pol = NULL;
  if (n == 0 && req->entity.len) {
    int skipped[ENG_MAX_DESCRIPTORS];
    size_t asked;
    if (http_body_request(req, srv, &root, &er, ds, skipped, &asked)) {
      json_decref(root);
      return 0;
    }
  } else if (http_find_param(ps, n, "domain")) {
    if (http_query_request(req, srv, &er, &ds[0])) return 0;
  } else {
    key = http_find_param(ps, n, "key");
    pol = http_find_param(ps, n, "policy");
    if (!key || !key->value_len)
      return http_send_error(req, 400, "key= or domain= (with descriptor "
                                  "entries) is required");
  }
  http_wait *wt = wait_alloc(req, srv, W_RESET, 0);
  if (!wt) {
    json_decref(root);
    return http_send_error(req, 503, "out of memory");
  }
  eng_query q = {.kind = key ? ENG_QUERY_POLICY : ENG_QUERY_RULES,
                 .req = &er,
                 .key = key ? key->value : NULL,
                 .key_len = key ? key->value_len : 0,
                 .spec = pol ? pol->value : NULL,
                 .spec_len = pol ? pol->value_len : 0};
  int rc = engine_reset(w->et, &q, &wt->u.reset, reset_done, wt);
  /* (the engine copied what it needs from er: the body can go) */
  json_decref(root);
  if (rc == ENG_PENDING) return wait_pending(wt);
  int sent = http_render_reset(req, rc, &wt->u.reset);
  free(wt);
  return sent;
}

/* ---- the routes ---- */

static int method_is(h2o_req_t *req, const char *m) {
  return h2o_memis(req->method.base, req->method.len, m, strlen(m));
}

static int route_check(h2o_req_t *req, server *srv) {
  return method_is(req, "POST") ? post_check(req, srv, 0)
                                : get_check(req, srv, 0);
}

static int route_throttle(h2o_req_t *req, server *srv) {
  return get_throttle(req, srv, 0);
}

/* POST /v1/acquire: /v1/throttle (key=, policy=: one lease) or
   /v1/check (domain= or a JSON body) by another name. */
static int route_acquire(h2o_req_t *req, server *srv) {
  qparam ps[MAX_PARAMS];
  char err[200];
  int n = http_parse_query(req, ps, err, sizeof err);
  if (n < 0) return http_send_error(req, 400, "%s", err);
  if (http_find_param(ps, n, "policy")) return get_throttle(req, srv, 0);
  return http_find_param(ps, n, "domain") ? get_check(req, srv, 0)
                                          : post_check(req, srv, 0);
}

static int route_release(h2o_req_t *req, server *srv) {
  return lease_route(req, srv, 0);
}

static int route_renew(h2o_req_t *req, server *srv) {
  return lease_route(req, srv, 1);
}

static int route_metrics(h2o_req_t *req, server *srv) {
  size_t len = 0;
  topkeys_sync(srv->obs->top); /* (its metrics as of now) */
  char *text = engine_metrics(srv->eng, &len);
  strbuf b = STRBUF_INIT; /* (the text's owner from now on) */
  b.p = text;
  b.len = len;
  b.cap = len + 1;
  b.oom = text == NULL;
  if (srv->obs->top) topkeys_prometheus(srv->obs->top, clock_wall_ns(), &b);
  return http_send_body(req, 200, "text/plain; version=0.0.4; charset=utf-8",
                        &b);
}

static int route_healthz(h2o_req_t *req, server *srv) {
  (void)srv;
  ANSWER_BUF(b);
  STRBUF_LIT(&b, "{\"status\":\"ok\"}\n");
  return http_send_body(req, 200, "application/json", &b);
}

/* Ready until a stop begins: then 503, so a balancer stops sending. */
static int route_readyz(h2o_req_t *req, server *srv) {
  if (!atomic_load(&srv->stopping)) return route_healthz(req, srv);
  ANSWER_BUF(b);
  STRBUF_LIT(&b, "{\"status\":\"stopping\"}\n");
  return http_send_body(req, 503, "application/json", &b);
}

/* /admin/inspect: /v1/throttle (with policy=) or /v1/check, charging
   nothing. */
static int route_inspect(h2o_req_t *req, server *srv) {
  qparam ps[MAX_PARAMS];
  char err[200];
  int n = http_parse_query(req, ps, err, sizeof err);
  if (n < 0) return http_send_error(req, 400, "%s", err);
  if (http_find_param(ps, n, "policy"))
    return get_throttle(req, srv, 1);
  return method_is(req, "POST") ? post_check(req, srv, 1)
                                : get_check(req, srv, 1);
}

enum { M_GET = 1, M_POST = 2 }; /* M_GET: HEAD too */

/*
 * The endpoints: path (the query aside), the methods it takes, whether it
 * is an admin endpoint (bearer token, or loopback only: checked before the
 * method), and its handler. Anything else is a 404.
 */
typedef struct http_route {
  const char *path;
  int methods;
  int admin;
  int (*handler)(h2o_req_t *req, server *srv);
} http_route;

static const http_route routes[] = {
    {"/v1/check", M_GET | M_POST, 0, route_check},
    {"/v1/throttle", M_GET, 0, route_throttle},
    {"/v1/acquire", M_POST, 0, route_acquire},
    {"/v1/release", M_POST, 0, route_release},
    {"/v1/renew", M_POST, 0, route_renew},
    {"/metrics", M_GET, 0, route_metrics},
    {"/healthz", M_GET, 0, route_healthz},
    {"/readyz", M_GET, 0, route_readyz},
    {"/admin/reset", M_POST, 1, admin_reset},
    {"/admin/inspect", M_GET | M_POST, 1, route_inspect},
    {"/v1/top", M_GET, 1, http_top},
    /* The page and what it reads (http_ui.c). */
    {"/v1/sim", M_POST, 0, http_sim},
    {"/v1/sim/examples", M_GET, 0, http_sim_examples},
    {"/v1/stats", M_GET, 0, http_stats},
    {"/v1/utilisation", M_POST, 1, http_utilisation},
    {"/v1/shedding", M_GET, 0, http_shedding},
    {"/ui", M_GET, 0, http_ui},
    {"/ui/", M_GET, 0, http_ui},
    {"/ui/ui.js", M_GET, 0, http_ui},
    {"/ui/ui.css", M_GET, 0, http_ui},
    /* envoyproxy/ratelimit's (http_rls.c): any method, as its mux. */
    {"/json", M_GET | M_POST, 0, http_rls_json},
    {"/healthcheck", M_GET, 0, http_rls_health},
};

/* The route for req's path, or NULL. */
static const http_route *route_of(h2o_req_t *req) {
  size_t n = req->query_at != SIZE_MAX ? req->query_at : req->path.len;
  for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++)
    if (n == strlen(routes[i].path) && !memcmp(req->path.base, routes[i].path, n))
      return &routes[i];
  return NULL;
}

static size_t header_bytes(h2o_req_t *req) {
  size_t n = req->path.len + req->method.len + 16;
  for (size_t i = 0; i < req->headers.size; i++)
    n += req->headers.entries[i].name->len + req->headers.entries[i].value.len + 4;
  return n;
}

/* Every request: its size, its route, the admin check, the method. */
static int on_req(h2o_handler_t *self, h2o_req_t *req) {
  server *srv = ((sluice_handler *)self)->srv;
  worker *w = worker_of(req->conn->ctx);
  int too_many = srv_note_request(req);
  engine_count(w->et, EC_HTTP_REQUESTS, 1);
  if (too_many)
    return http_send_error(req, 431, "more than %d request headers",
                           H2O_MAX_HEADERS);
  if (header_bytes(req) > srv->o.max_header_bytes)
    return http_send_error(req, 431, "request line and headers exceed %zu bytes",
                           srv->o.max_header_bytes);
  const http_route *r = route_of(req);
  if (!r)
    return http_send_error(req, 404, "no such endpoint: %.*s",
                           (int)(req->path.len < 200 ? req->path.len : 200),
                           req->path.base);
  int status;
  if (r->admin && !http_admin_ok(req, srv, &status))
    return http_send_error(req, status,
                           status == 401 ? "a valid bearer token is required"
                                         : "admin endpoints answer loopback "
                                           "clients only (no --admin-token)");
  int m = method_is(req, "GET") || method_is(req, "HEAD") ? M_GET
          : method_is(req, "POST")                        ? M_POST
                                                          : 0;
  if (!(r->methods & m))
    return http_method_not_allowed(req, r->methods == M_GET    ? "GET"
                                        : r->methods == M_POST ? "POST"
                                                               : "GET, POST");
  return r->handler(req, srv);
}

void http_register(h2o_globalconf_t *conf, server *srv) {
  h2o_hostconf_t *host =
      h2o_config_register_host(conf, h2o_iovec_init(H2O_STRLIT("default")), 65535);
  h2o_pathconf_t *path = h2o_config_register_path(host, "/", 0);
  sluice_handler *h = (sluice_handler *)h2o_create_handler(path, sizeof *h);
  h->super.on_req = on_req;
  h->srv = srv;
  http_register_errors(host, srv);
}
