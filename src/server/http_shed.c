/*
 * http_shed.c — load shedding over HTTP (docs/shedding.md): a request's
 * priority class from the X-Sluice-Priority header, what a check answer
 * says of the shedder (the "shed" JSON field, X-Sluice-Shed and
 * Retry-After), the service's utilisation reports (POST /v1/utilisation,
 * an admin endpoint: a report decides whose requests are shed) and a
 * domain's shedder state (GET /v1/shedding).
 */
#include <stdio.h>
#include <string.h>

#include "../base/clock.h"
#include "http.h"

#define MAX_TTL_MS 86400000LL /* a report lives at most a day */

const char *http_priority(h2o_req_t *req, size_t *len) {
  ssize_t i = h2o_find_header_by_str(&req->headers,
                                     H2O_STRLIT("x-sluice-priority"), -1);
  if (i < 0) return NULL;
  *len = req->headers.entries[i].value.len;
  return req->headers.entries[i].value.base;
}

static const char *const signal_names[] = {"none", "utilisation",
                                           "fleet_usage"};

/* Appends permille as a decimal fraction ("0.93"). */
static void add_ratio(strbuf *b, uint32_t pm) {
  strbuf_addf(b, "%u.%03u", pm / 1000, pm % 1000);
}

int http_shed_status(const eng_result *r) {
  return r->shed.state == ENG_SHED_YES ? r->shed.status : 0;
}

void http_shed_add(h2o_req_t *req, strbuf *b, const eng_result *r) {
  const eng_shed *s = &r->shed;
  if (s->state == ENG_SHED_NO) return;
  const char *sig = signal_names[s->signal <= 2 ? s->signal : 0];
  strbuf_addf(b, ",\"shed\":{\"shadow\":%s,\"class\":\"%s\",\"signal\":\"%s\","
                 "\"level\":",
              s->state == ENG_SHED_SHADOW ? "true" : "false", s->cls, sig);
  add_ratio(b, s->level_pm);
  STRBUF_LIT(b, ",\"threshold\":");
  add_ratio(b, s->threshold_pm);
  if (s->state == ENG_SHED_YES)
    strbuf_addf(b, ",\"retry_after_ms\":%lld",
                (long long)ns_to_ms_up(s->retry_after_ns));
  STRBUF_LIT(b, "}");
  char v[160];
  int n = snprintf(v, sizeof v, "%s; class=%s; signal=%s",
                   s->state == ENG_SHED_SHADOW ? "shadow" : "shed", s->cls,
                   sig);
  if (n > 0)
    http_add_header(req, "x-sluice-shed", v,
                    (size_t)n < sizeof v ? (size_t)n : sizeof v - 1);
  if (s->state == ENG_SHED_YES) {
    int64_t secs = ns_to_s_up(s->retry_after_ns);
    char *ra = h2o_mem_alloc_pool(&req->pool, 20);
    h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_RETRY_AFTER, NULL,
                   ra, fmt_i64(ra, secs > 0 ? secs : 1));
  }
}

/* A report's fields, from the query or a JSON body. */
typedef struct report {
  const char *domain, *source, *value;
  size_t domain_len, source_len, value_len;
  int64_t ttl_ms;
} report;

/* The report in a JSON body ({"domain", "utilisation", "source"?,
   "ttl_ms"?}); 0, or -1 after a 400. root is the caller's to free. */
static int body_report(h2o_req_t *req, server *srv, json_t **root,
                       report *r, char *num, size_t num_len) {
  if (req->entity.len > srv->o.max_body)
    return http_send_error(req, 413, "body larger than %zu bytes",
                           srv->o.max_body), -1;
  json_error_t jerr;
  *root = json_loadb(req->entity.base, req->entity.len, JSON_REJECT_DUPLICATES,
                     &jerr);
  json_t *o = *root;
  if (!json_is_object(o))
    return http_send_error(req, 400, "the body must be a JSON object "
                                     "{\"domain\", \"utilisation\", "
                                     "\"source\"?, \"ttl_ms\"?}"), -1;
  json_t *d = json_object_get(o, "domain"), *u = json_object_get(o, "utilisation"),
         *s = json_object_get(o, "source"), *t = json_object_get(o, "ttl_ms");
  if (!json_is_string(d) || (s && !json_is_string(s)) ||
      (t && (!json_is_integer(t) || json_integer_value(t) <= 0 ||
             json_integer_value(t) > MAX_TTL_MS)) ||
      !(json_is_number(u) || json_is_string(u)))
    return http_send_error(req, 400, "\"domain\" (a string), \"utilisation\" "
                                     "(0.93 or \"93%%\"), \"source\"? (a "
                                     "string), \"ttl_ms\"? (1..%lld)",
                           MAX_TTL_MS), -1;
  r->domain = json_string_value(d);
  r->domain_len = json_string_length(d);
  if (s) {
    r->source = json_string_value(s);
    r->source_len = json_string_length(s);
  }
  if (t) r->ttl_ms = json_integer_value(t);
  if (json_is_string(u)) {
    r->value = json_string_value(u);
    r->value_len = json_string_length(u);
  } else { /* a JSON number: its shortest decimal */
    int n = snprintf(num, num_len, "%.4f", json_number_value(u));
    r->value = num;
    r->value_len = n > 0 && (size_t)n < num_len ? (size_t)n : 0;
  }
  return 0;
}

/* The report in the query (domain=, utilisation=, source=, ttl_ms=); 0,
   1 when the query names no domain, or -1 after a 400. */
static int query_report(h2o_req_t *req, report *r) {
  qparam ps[MAX_PARAMS];
  char err[200];
  int n = http_parse_query(req, ps, err, sizeof err);
  if (n < 0) return http_send_error(req, 400, "%s", err), -1;
  const qparam *d = http_find_param(ps, n, "domain"),
               *u = http_find_param(ps, n, "utilisation"),
               *s = http_find_param(ps, n, "source"),
               *t = http_find_param(ps, n, "ttl_ms");
  if (!d) return 1;
  if (!u)
    return http_send_error(req, 400, "missing utilisation= (0.93 or 93%%)"),
           -1;
  r->domain = d->value;
  r->domain_len = d->value_len;
  r->value = u->value;
  r->value_len = u->value_len;
  if (s) {
    r->source = s->value;
    r->source_len = s->value_len;
  }
  if (t) {
    int why = http_parse_count(t->value, t->value_len, &r->ttl_ms);
    if (why || r->ttl_ms <= 0 || r->ttl_ms > MAX_TTL_MS)
      return http_send_error(req, 400, "ttl_ms must be 1..%lld", MAX_TTL_MS),
             -1;
  }
  return 0;
}

int http_utilisation(h2o_req_t *req, server *srv) {
  report r = {"", "", "", 0, 0, 0, 0};
  json_t *root = NULL;
  char num[64];
  int got = query_report(req, &r);
  if (got == 1 && body_report(req, srv, &root, &r, num, sizeof num)) got = -1;
  if (got < 0) {
    json_decref(root);
    return 0;
  }
  uint32_t pm;
  char msg[ENG_MSG_MAX];
  int rc = 0;
  if (sl_shed_parse_level(r.value, r.value_len, &pm)) {
    http_send_error(req, 400, "utilisation must be a fraction such as 0.93 "
                              "or a percentage such as 93%% (0 to 1000%%), "
                              "not '%.*s'",
                    (int)(r.value_len < 40 ? r.value_len : 40), r.value);
  } else if ((rc = engine_shed_report(worker_of(req->conn->ctx)->et, r.domain,
                                      r.domain_len, r.source, r.source_len, pm,
                                      r.ttl_ms * 1000000, clock_wall_ns(), msg,
                                      sizeof msg))) {
    http_send_error(req, rc == SL_EFULL ? 429 : rc == SL_EINVAL ? 400 : 404,
                    "%s", msg);
  } else {
    ANSWER_BUF(b);
    STRBUF_LIT(&b, "{\"utilisation\":");
    add_ratio(&b, pm);
    STRBUF_LIT(&b, "}\n");
    http_send_body(req, 200, "application/json", &b);
  }
  json_decref(root);
  return 0;
}

int http_shedding(h2o_req_t *req, server *srv) {
  (void)srv;
  qparam ps[MAX_PARAMS];
  char err[200];
  int n = http_parse_query(req, ps, err, sizeof err);
  if (n < 0) return http_send_error(req, 400, "%s", err);
  const qparam *d = http_find_param(ps, n, "domain");
  if (!d) return http_send_error(req, 400, "missing domain= in the query");
  size_t len = 0;
  char msg[ENG_MSG_MAX];
  char *text = engine_shed_json(worker_of(req->conn->ctx)->et, d->value,
                                d->value_len, clock_wall_ns(), &len, msg,
                                sizeof msg);
  if (!text) return http_send_error(req, 404, "%s", msg);
  strbuf b = STRBUF_INIT; /* (the text's owner from now on) */
  b.p = text;
  b.len = len;
  b.cap = len + 1;
  return http_send_body(req, 200, "application/json", &b);
}
