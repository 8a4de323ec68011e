/*
 * http.h — what the HTTP front end's files share: http.c (the routes and
 * the decisions), http_request.c (reading a request: its query string, a
 * JSON body in Envoy's RLS shape, the $remote_addr / $http_... references,
 * the admin check) and http_render.c (writing an answer: status, the rate
 * limit headers, the JSON bodies, errors).
 */
#ifndef SLUICE_SERVER_HTTP_H
#define SLUICE_SERVER_HTTP_H

#include <jansson.h>

#include "server.h"

/* An answer's buffer, starting on the stack: a typical answer fits, so the
   hot path never allocates (base/strbuf.h). */
#define ANSWER_BUF(b) \
  char b##_mem[512];  \
  strbuf b;           \
  strbuf_init_with(&b, b##_mem, sizeof b##_mem)

/* ---- reading a request (http_request.c) ---- */

/* One query parameter, percent-decoded into the request's pool. */
typedef struct qparam {
  char *key, *value;
  size_t key_len, value_len;
} qparam;

#define MAX_PARAMS 40

/* Splits req's query into ps (MAX_PARAMS of them at most), percent-
   decoded; a name or value with a NUL byte or bytes that are not UTF-8 is
   refused (http_value_check). Returns their number, or -1 with why in err
   ("the value of 'domain' contains a NUL byte"). */
int http_parse_query(h2o_req_t *req, qparam *ps, char *err, size_t len);

/* The first parameter named key, or NULL. */
const qparam *http_find_param(const qparam *ps, int n, const char *key);

/* Whether s[0..n), a decoded value, is usable: 0, or -1 with "WHAT
   contains a NUL byte" or "WHAT is not valid UTF-8" in err. GET's query
   and POST's JSON values go through it alike. */
int http_value_check(const char *what, const char *s, size_t n, char *err,
                     size_t len);

/* The largest count (hits=, cost=, hits_addend) a request may carry. */
#define HTTP_COUNT_MAX 999999999999999999LL

/* A count: s[0..n) decimal digits, 0..HTTP_COUNT_MAX. 0 with *out, -1
   (not a decimal integer) or -2 (out of range). */
int http_parse_count(const char *s, size_t n, int64_t *out);

/* The 400 for a count http_parse_count refused (why: -1 or -2), naming
   the parameter: "cost=18446744073709551615 is out of range (0..N)".
   Returns -1. */
int http_count_error(h2o_req_t *req, const char *name, const char *value,
                     size_t n, int why);

/* Whether req may use the admin endpoints: with --admin-token, a matching
   bearer token (compared in constant time); without, a loopback peer.
   When not, *status is 401 (with WWW-Authenticate added) or 403. */
int http_admin_ok(h2o_req_t *req, server *srv, int *status);
/* The same check, answering nothing: 0 when req may, else 401 or 403. */
int http_admin_check(h2o_req_t *req, server *srv);

/*
 * Reads "domain=D&K1=V1&...[&hits=N]" into *er (one descriptor, in *d;
 * none when a value names a missing header). 0, or -1 after sending a 400.
 */
int http_query_request(h2o_req_t *req, server *srv, eng_request *er,
                       eng_descriptor *d);

/*
 * Reads a JSON body in Envoy's RLS shape ({"domain", "descriptors": [...],
 * "hits_addend"?}) into *er: its descriptors in ds, skipped[i] set for
 * those left out because a value named a missing header, *asked = how many
 * the body had. *root holds the strings *er points to (json_decref it after
 * use, also after a failure). 0, or -1 after sending a 400 or 413.
 */
int http_body_request(h2o_req_t *req, server *srv, json_t **root,
                      eng_request *er, eng_descriptor *ds, int *skipped,
                      size_t *asked);

/*
 * The wait mode's switch and cap: ?wait=1 (or true; 0/false: off),
 * ?max_wait=DURATION (a cap of the request's own, and wait on), or the
 * header Sluice-Wait: 1 | DURATION, for proxies that cannot change the
 * URL. *cap: --max-wait, lowered by the request's. 1 when the request
 * waits (never with --max-wait 0), 0 when not, -1 after sending a 400.
 */
int http_wait_cap(h2o_req_t *req, server *srv, int64_t *cap);

/* ---- writing an answer (http_render.c) ---- */

/* The client's address as text, per $remote_addr's rules
   (http_request.c): what the denial log shows. */
void http_client_addr(h2o_req_t *req, server *srv, char *buf, size_t len);

/* Adds a response header (the value is copied into the request's pool:
   h2o keeps the pointer). */
void http_add_header(h2o_req_t *req, const char *name, const char *value,
                     size_t len);

/* Sends b (freed here; out of memory: a 503) with status and content type,
   and a Content-Length, so the connection stays open whatever the status.
   Returns 0 (an h2o handler's "handled"). */
int http_send_body(h2o_req_t *req, int status, const char *ctype, strbuf *b);

/*
 * Wait mode's answers, rendered when the hold starts and sent when it
 * ends: the rules an answer names belong to the configuration of its
 * decision, which a reload may free while the answer is held. Between
 * http_keep_begin and http_keep_end, the next http_send_body sets the
 * status and headers as usual and keeps the body in the request's pool
 * in *k instead of sending; http_send_kept sends it.
 */
typedef struct http_kept {
  const char *body;
  size_t len;
} http_kept;
void http_keep_begin(http_kept *k);
void http_keep_end(void);
int http_send_kept(h2o_req_t *req, const http_kept *k);

/* Sends {"error": "message"} with status, and counts it. Returns 0. */
int http_send_error(h2o_req_t *req, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* A 405 with Allow: allow ("GET, POST"). Returns 0. */
int http_method_not_allowed(h2o_req_t *req, const char *allow);

/* The error answer for a failed decision or reset: rc's status
   (engine/errors.h), the engine's message. */
int http_engine_error(h2o_req_t *req, int rc, const char *msg);

/*
 * The answer to a decided check: 200 (or the deny status; 200 for a peek),
 * the rate limit headers, {"overall_code", "allowed", "statuses"}. n: the
 * descriptors decided; `skipped` (NULL: none) marks, among the `asked`
 * descriptors of the request, those left out because a value named a
 * missing header: their statuses stay in place, as {"code":"OK",
 * "skipped":true}. now: the decision's time (for X-RateLimit-Reset).
 */
int http_render_check(h2o_req_t *req, server *srv, const eng_result *res,
                      size_t n, int peek, const int *skipped, size_t asked,
                      int64_t now);

/* The answer to a decided /v1/throttle: status, headers, JSON. */
int http_render_throttle(h2o_req_t *req, server *srv, const eng_result *res,
                         int64_t now);

/* A reset's answer: {"reset":N}, or why it failed. */
int http_render_reset(h2o_req_t *req, int rc, const eng_reset *r);
/* A release's (renew 0) or renewal's answer: 200, whether the lease was
   live, and the limit's figures after it. */
int http_render_lease(h2o_req_t *req, const eng_result *res, int renew);

/* The answers h2o writes itself before a handler runs (a body over
   --max-body: 413; a broken chunked body: 400), on host's fallback path,
   made sluice's JSON {"error": "..."}. */
void http_register_errors(h2o_hostconf_t *host, server *srv);

/* ---- the page and what it reads (http_ui.c; --ui off: 404s) ---- */

/* GET /ui, /ui/, /ui/ui.js, /ui/ui.css: the page, embedded at build time. */
int http_ui(h2o_req_t *req, server *srv);
/* POST /v1/sim: a scenario (the body, sluice sim's language) run by the
   simulator's engine, answered as its JSON document (sim_json.c). */
int http_sim(h2o_req_t *req, server *srv);
/* GET /v1/sim/examples: the built-in scenarios, [{"name", "what",
   "text"}]. */
int http_sim_examples(h2o_req_t *req, server *srv);
/* GET /v1/stats: /metrics' figures as JSON (metrics_render_json). */
int http_stats(h2o_req_t *req, server *srv);

/* ---- envoyproxy/ratelimit's HTTP endpoints (http_rls.c; docs/envoy.md) */

/* POST /json: a RateLimitRequest in proto3 JSON, answered as the gRPC
   service answers it, in proto3 JSON: 200 OK, 429 OVER_LIMIT, 400 for a
   bad request ("Bad Request\n", why in a Sluice-Error header). */
int http_rls_json(h2o_req_t *req, server *srv);
/* GET /healthcheck: "OK", or a 500 once a stop has begun. */
int http_rls_health(h2o_req_t *req, server *srv);

/* ---- load shedding (http_shed.c; docs/shedding.md) ---- */

/* The X-Sluice-Priority header's value (*len bytes), or NULL. */
const char *http_priority(h2o_req_t *req, size_t *len);
/* The status a shed request gets (its domain's), or 0 when not shed. */
int http_shed_status(const eng_result *r);
/* A check answer's "shed" field (b is inside its JSON object) and the
   headers: X-Sluice-Shed, and Retry-After when shed. Nothing when the
   shedder let it through. */
void http_shed_add(h2o_req_t *req, strbuf *b, const eng_result *r);
/* POST /v1/utilisation (admin): a service's utilisation report, from the
   query (domain=, utilisation=, source=, ttl_ms=) or a JSON body. */
int http_utilisation(h2o_req_t *req, server *srv);
/* GET /v1/shedding?domain=D: the domain's shedder (engine_shed_json). */
int http_shedding(h2o_req_t *req, server *srv);

/* GET /v1/top?rule=R&n=N: the rule's heaviest keys (topkeys.c; 404
   without --top-keys). */
int http_top(h2o_req_t *req, server *srv);

#endif /* SLUICE_SERVER_HTTP_H */
