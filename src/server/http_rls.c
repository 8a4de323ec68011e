/*
 * http_rls.c — envoyproxy/ratelimit's HTTP endpoints, for drop-in use:
 *
 *   POST /json      a RateLimitRequest in proto3's JSON mapping, answered
 *                   with the RateLimitResponse in the same mapping: 200
 *                   when OK, 429 when OVER_LIMIT, 500 when UNKNOWN (its
 *                   server_impl.go's NewJsonHandler, status for status);
 *   GET /healthcheck  "OK", or 500 once a stop has begun.
 *
 * The request goes the gRPC service's way: JSON to the protobuf message
 * (pb_json.c), its bytes through grpc_msg.c's rls_decode, the engine's
 * decision, and the very response rls_encode packs (rls_response_with)
 * written as JSON. So /json and
 * ShouldRateLimit answer alike, field for field. A bad request gets
 * envoy's own answer (400, "Bad Request\n" in text/plain), and what was
 * wrong and where in a Sluice-Error header, which envoy's clients ignore.
 */
#include <stdlib.h>
#include <string.h>

#include <envoy/service/ratelimit/v3/rls.pb-c.h> /* build/gen */
#include "grpc_msg.h"
#include "http.h"
#include "pb_json.h"

#define REQ_DESC envoy__service__ratelimit__v3__rate_limit_request__descriptor

/* One /json request while it is decided (exact mode: Redis answers on
   the worker's loop later, and the client may be gone by then). */
typedef struct rls_job {
  h2o_req_t *req; /* NULL once the client is gone */
  struct rls_job **hook;
  server *srv;
  rls_req rq;
  eng_result res;
  int64_t now;
} rls_job;

/* envoy's plain answer ("Bad Request\n"), with why (NULL: none) in a
   Sluice-Error header, its control bytes made spaces. Returns 0. */
static int plain(h2o_req_t *req, int status, const char *text,
                 const char *why) {
  if (why && *why) {
    size_t n = strlen(why);
    char *v = h2o_mem_alloc_pool(&req->pool, n + 1);
    for (size_t i = 0; i <= n; i++)
      v[i] = i < n && ((unsigned char)why[i] < 0x20 || why[i] == 0x7f)
                 ? ' '
                 : why[i];
    http_add_header(req, "sluice-error", v, n);
  }
  ANSWER_BUF(b);
  strbuf_addf(&b, "%s\n", text);
  return http_send_body(req, status, "text/plain; charset=utf-8", &b);
}

/* rls_response_with's rls_response_fn for /json: the response in proto3's
   JSON mapping, and the HTTP status by its overall code. */
typedef struct json_out {
  json_t *o;
  int status;
} json_out;

static int to_json(void *ud, const void *msg) {
  json_out *j = ud;
  const Envoy__Service__Ratelimit__V3__RateLimitResponse *m = msg;
  j->status = m->overall_code == 2 ? 429 : m->overall_code == 1 ? 200 : 500;
  j->o = pbj_encode((const ProtobufCMessage *)m);
  return j->o ? 0 : -1;
}

/* The decided response, the message rls_encode would pack written as
   JSON; the status by its overall code. */
static int answer(rls_job *j, int rc) {
  h2o_req_t *req = j->req;
  if (rc && rc != ENG_EDOMAIN) {
    int st = rls_status_of(rc);
    return st == RPC_INVALID_ARGUMENT ? plain(req, 400, "Bad Request", j->res.msg)
           : st == RPC_UNAVAILABLE
               ? plain(req, 503, "Service Unavailable", j->res.msg)
               : plain(req, 500, "Internal Server Error", j->res.msg);
  }
  json_out out = {NULL, 500};
  rls_response_with(&j->rq, rc, &j->res, j->srv->o.header_style, j->now,
                    to_json, &out);
  strbuf b = STRBUF_INIT;
  size_t need = out.o ? json_dumpb(out.o, NULL, 0,
                                   JSON_COMPACT | JSON_PRESERVE_ORDER)
                      : 0;
  if (!out.o || !need || strbuf_reserve(&b, need)) {
    json_decref(out.o);
    strbuf_free(&b);
    return plain(req, 500, "Internal Server Error", "out of memory");
  }
  b.len = json_dumpb(out.o, b.p, need, JSON_COMPACT | JSON_PRESERVE_ORDER);
  json_decref(out.o);
  int sent = http_send_body(req, out.status, "application/json", &b);
  strbuf_free(&b);
  return sent;
}

static void job_free(rls_job *j) {
  rls_free(&j->rq);
  free(j);
}

/* The request's pool is going (the client left, or the answer is sent). */
static void hook_dispose(void *p) {
  rls_job **hook = p;
  if (*hook) (*hook)->req = NULL;
}

/* Exact mode: the decision that waited for Redis is in. */
static void decided(void *ud, int rc, eng_result *res) {
  (void)res; /* j->res */
  rls_job *j = ud;
  if (j->req) {
    *j->hook = NULL;
    answer(j, rc);
  }
  job_free(j);
}

/* Decides j's request as the gRPC service does (rls_decide): answered
   now, or from decided once Redis answers. */
static int decide(rls_job *j) {
  worker *w = worker_of(j->req->conn->ctx);
  j->now = clock_wall_ns();
  int rc = rls_decide(&j->rq, j->srv->eng, w->et, j->now, &j->res,
                      w->may_wait ? decided : NULL, j);
  if (rc == ENG_PENDING) {
    j->hook = h2o_mem_alloc_shared(&j->req->pool, sizeof *j->hook,
                                   hook_dispose);
    *j->hook = j;
    return 0;
  }
  answer(j, rc);
  job_free(j);
  return 0;
}

int http_rls_json(h2o_req_t *req, server *srv) {
  json_error_t jerr;
  json_t *root = json_loadb(req->entity.base, req->entity.len,
                            JSON_REJECT_DUPLICATES, &jerr);
  if (!root) {
    char why[200];
    snprintf(why, sizeof why, "not JSON: %s (line %d, column %d)", jerr.text,
             jerr.line, jerr.column);
    return plain(req, 400, "Bad Request", req->entity.len ? why : "no body");
  }
  char err[256];
  ProtobufCMessage *m = pbj_decode(&REQ_DESC, root, err, sizeof err);
  json_decref(root);
  if (!m) return plain(req, 400, "Bad Request", err);
  size_t len = protobuf_c_message_get_packed_size(m);
  uint8_t *bytes = malloc(len ? len : 1);
  if (bytes) protobuf_c_message_pack(m, bytes);
  protobuf_c_message_free_unpacked(m, NULL);
  rls_job *j = bytes ? malloc(sizeof *j) : NULL;
  if (!j) {
    free(bytes);
    return plain(req, 500, "Internal Server Error", "out of memory");
  }
  j->req = req;
  j->hook = NULL;
  j->srv = srv;
  int st = rls_decode(&j->rq, bytes, len, srv->o.max_key, err, sizeof err);
  free(bytes);
  if (st != RPC_OK) {
    plain(req, 400, "Bad Request", err);
    job_free(j);
    return 0;
  }
  return decide(j);
}

int http_rls_health(h2o_req_t *req, server *srv) {
  ANSWER_BUF(b);
  if (atomic_load(&srv->stopping)) { /* envoy's: 500, no body */
    http_add_header(req, "sluice-error", "stopping", 8);
    return http_send_body(req, 500, "text/plain; charset=utf-8", &b);
  }
  STRBUF_LIT(&b, "OK");
  return http_send_body(req, 200, "text/plain; charset=utf-8", &b);
}
