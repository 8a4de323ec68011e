/*
 * http_render.c — the HTTP front end's answers: the status and its reason,
 * the rate limit headers (the IETF draft's RateLimit-Policy and RateLimit,
 * X-RateLimit-Limit/Remaining/Used/Reset, Retry-After on a denial;
 * X-RateLimit-Unchecked when a limit failed open), the JSON
 * bodies of /v1/check (Envoy's RateLimitResponse, with sluice's figures),
 * /v1/throttle (a denial's with a human-readable "message") and the
 * resets, and {"error": "..."} answers. Every answer
 * carries a Content-Length (h2o 2.2 closes the connection after a non-200
 * chunked one).
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "../base/json.h"
#include "http.h"
#include "lease.h"

/* ---- responses ---- */

static const char *reason(int status) {
  switch (status) {
  case 200: return "OK";
  case 400: return "Bad Request";
  case 401: return "Unauthorized";
  case 403: return "Forbidden";
  case 404: return "Not Found";
  case 405: return "Method Not Allowed";
  case 413: return "Payload Too Large";
  case 429: return "Too Many Requests";
  case 431: return "Request Header Fields Too Large";
  case 503: return "Service Unavailable";
  default: return "Denied";
  }
}

/* Adds a response header; h2o keeps the value's pointer, so the value is
   copied into the request's pool. */
void http_add_header(h2o_req_t *req, const char *name, const char *value,
                       size_t len) {
  h2o_iovec_t v = h2o_strdup(&req->pool, value, len);
  h2o_add_header_by_str(&req->pool, &req->res.headers, name, strlen(name), 0,
                        NULL, v.base, v.len);
}

/* Where http_send_body keeps an answer instead of sending it (wait mode,
   http_keep_begin); NULL: it sends. A worker renders one answer at a
   time on its own thread, so one per thread is enough. */
static _Thread_local http_kept *keep_to;

void http_keep_begin(http_kept *k) {
  k->body = NULL;
  k->len = 0;
  keep_to = k;
}

void http_keep_end(void) { keep_to = NULL; }

int http_send_kept(h2o_req_t *req, const http_kept *k) {
  h2o_send_inline(req, k->body ? k->body : "", k->len);
  return 0;
}

/* Sends body (freed here) with status and content type (or keeps it:
   http_keep_begin). */
int http_send_body(h2o_req_t *req, int status, const char *ctype,
                     strbuf *b) {
  if (b->oom) {
    strbuf_free(b); /* (a stack buffer is empty again: the text fits) */
    status = 503;
    STRBUF_LIT(b, "{\"error\":\"out of memory\"}");
  }
  req->res.status = status;
  req->res.reason = reason(status);
  /* A known length keeps the connection alive for any status (h2o 2.2
     closes after a non-200 chunked response): a proxy asking for every
     request, 429s included, keeps its connection. */
  req->res.content_length = b->len;
  h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CONTENT_TYPE, NULL,
                 ctype, strlen(ctype));
  h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CACHE_CONTROL, NULL,
                 H2O_STRLIT("no-store"));
  if (keep_to) { /* the status and headers are set; the body waits */
    char *body = b->len ? h2o_mem_alloc_pool(&req->pool, b->len) : NULL;
    if (body) memcpy(body, b->p, b->len);
    keep_to->body = body;
    keep_to->len = b->len;
    keep_to = NULL;
  } else {
    h2o_send_inline(req, b->p ? b->p : "", b->len);
  }
  strbuf_free(b);
  return 0;
}

int http_send_error(h2o_req_t *req, int status, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  worker *w = worker_of(req->conn->ctx);
  engine_count(w->et, EC_HTTP_ERRORS, 1);
  ANSWER_BUF(b);
  STRBUF_LIT(&b, "{\"error\":");
  json_put_str(&b, msg, strlen(msg));
  STRBUF_LIT(&b, "}\n");
  return http_send_body(req, status, "application/json", &b);
}

int http_method_not_allowed(h2o_req_t *req, const char *allow) {
  http_add_header(req, "allow", allow, strlen(allow));
  return http_send_error(req, 405, "method %.*s not allowed here (allow: %s)",
                    (int)(req->method.len < 16 ? req->method.len : 16),
                    req->method.base, allow);
}

/* ---- the rate limit headers (limit_headers.c) ---- */

/* limit_headers' callback: the header on the answer (h2o keeps the value's
   pointer: http_add_header copies it into the request's pool). */
static void add_header_cb(void *ud, const char *name, const char *value,
                          size_t len) {
  http_add_header(ud, name, value, len);
}

static void add_limit_headers(h2o_req_t *req, server *srv, const eng_result *r,
                              int64_t now) {
  limit_headers(r, srv->o.header_style, now, add_header_cb, req);
}

/* ---- decisions ---- */

static void status_json(strbuf *b, const eng_status *s) {
  int ok = s->d.allowed || s->shadow;
  strbuf_addf(b, "{\"code\":\"%s\"", ok ? "OK" : "OVER_LIMIT");
  if (s->unlimited) {
    STRBUF_LIT(b, ",\"unlimited\":true,\"limit_remaining\":4294967295");
  } else if (s->unchecked) { /* failed open: its limit, nothing counted */
    if (s->limit && s->limit->unit_name)
      strbuf_addf(b,
             ",\"current_limit\":{\"requests_per_unit\":%u,\"unit\":\"%s\"}",
             s->limit->requests_per_unit, s->limit->unit_name);
    strbuf_addf(b, ",\"limit\":%lld,\"unchecked\":\"store_error\"",
                (long long)s->d.limit);
  } else {
    if (s->limit && s->limit->unit_name)
      strbuf_addf(b,
             ",\"current_limit\":{\"requests_per_unit\":%u,\"unit\":\"%s\"}",
             s->limit->requests_per_unit, s->limit->unit_name);
    strbuf_addf(b,
           ",\"limit\":%lld,\"limit_remaining\":%lld,"
           "\"duration_until_reset\":\"%llds\",\"reset_ms\":%lld",
           (long long)s->d.limit, (long long)s->d.remaining,
           (long long)ns_to_s_up(s->d.reset_ns),
           (long long)ns_to_ms_up(s->d.reset_ns));
    if (!s->d.allowed)
      strbuf_addf(b, ",\"retry_after_ms\":%lld",
             s->d.retry_after_ns < 0
                 ? -1LL
                 : (long long)ns_to_ms_up(s->d.retry_after_ns));
    if (s->d.delay_ns)
      strbuf_addf(b, ",\"delay_ms\":%lld", (long long)ns_to_ms_up(s->d.delay_ns));
  }
  STRBUF_LIT(b, ",\"policy\":");
  json_put_str(b, s->policy_str, strlen(s->policy_str));
  if (s->limit) {
    STRBUF_LIT(b, ",\"rule\":");
    json_put_str(b, s->limit->rule, strlen(s->limit->rule));
    if (s->limit->name) {
      STRBUF_LIT(b, ",\"name\":");
      json_put_str(b, s->limit->name, strlen(s->limit->name));
    }
  }
  if (s->shadow) strbuf_addf(b, ",\"shadow\":true");
  if (s->quota) STRBUF_LIT(b, ",\"quota_mode\":true");
  if (s->limit && s->limit->metadata) { /* JSON already (rules/metadata.c) */
    STRBUF_LIT(b, ",\"metadata\":");
    strbuf_add(b, s->limit->metadata, strlen(s->limit->metadata));
  }
  STRBUF_LIT(b, "}");
}

/* ---- the denial's message ---- */

#define DENY_MESSAGE "{limit} requests per {window}. Retry after " \
                     "{retry_after} seconds."
#define DENY_MESSAGE_BLOCKED "{rule} allows no requests."

/* A period in words: "minute", "30 seconds", "2 hours". */
static void add_window(strbuf *b, const eng_status *s) {
  if (s->limit && s->limit->unit_name) { /* envoy's unit, as written */
    for (const char *u = s->limit->unit_name; *u; u++) {
      char ch = (char)(*u - 'A' + 'a');
      strbuf_add(b, &ch, 1);
    }
    return;
  }
  static const struct {
    int64_t s;
    const char *one;
  } units[] = {{86400, "day"}, {3600, "hour"}, {60, "minute"}, {1, "second"}};
  int64_t ns = s->policy ? s->policy->period_ns : 1000000000;
  int64_t sec = ns / 1000000000;
  if (ns % 1000000000 || sec == 0) {
    strbuf_add_i64(b, ns_to_ms_up(ns));
    STRBUF_LIT(b, " milliseconds");
    return;
  }
  for (size_t i = 0; i < sizeof units / sizeof *units; i++)
    if (sec % units[i].s == 0) {
      if (sec != units[i].s) {
        strbuf_add_i64(b, sec / units[i].s);
        STRBUF_LIT(b, " ");
      }
      strbuf_addf(b, "%s%s", units[i].one, sec != units[i].s ? "s" : "");
      return;
    }
}

/*
 * The human-readable message of a denial by status s: --deny-message's
 * template (or the default, "{limit} requests per {window}. Retry after
 * {retry_after} seconds."; a blocked rule's: "{rule} allows no
 * requests.") with {limit}, {window}, {retry_after} (whole seconds, up;
 * "never" for a blocked rule), {rule} and {policy} filled in.
 */
static void add_deny_message(strbuf *out, const server *srv,
                             const eng_status *s) {
  const char *t = srv->o.deny_message;
  int never = s->d.retry_after_ns < 0;
  int conc = s->policy && s->policy->algo == SL_CONCURRENCY;
  if (!t)
    t = never  ? DENY_MESSAGE_BLOCKED
        : conc ? "{limit} requests in flight at most. Retry after "
                 "{retry_after} seconds."
               : DENY_MESSAGE;
  ANSWER_BUF(m);
  while (*t) {
    const char *open = strchr(t, '{');
    const char *close = open ? strchr(open, '}') : NULL;
    if (!close) {
      strbuf_add(&m, t, strlen(t));
      break;
    }
    strbuf_add(&m, t, (size_t)(open - t));
    size_t n = (size_t)(close - open - 1);
    const char *name = open + 1;
    if (n == 5 && !memcmp(name, "limit", 5)) {
      strbuf_add_i64(&m, s->limit && s->limit->blocked ? 0
                         : s->policy                   ? s->policy->limit
                                                       : s->d.limit);
    } else if (n == 6 && !memcmp(name, "window", 6)) {
      add_window(&m, s);
    } else if (n == 11 && !memcmp(name, "retry_after", 11)) {
      if (never)
        STRBUF_LIT(&m, "never");
      else
        strbuf_add_i64(&m, ns_to_s_up(s->d.retry_after_ns));
    } else if (n == 4 && !memcmp(name, "rule", 4)) {
      const char *r = limit_status_name(s);
      strbuf_add(&m, r, strlen(r));
    } else if (n == 6 && !memcmp(name, "policy", 6)) {
      strbuf_add(&m, s->policy_str, strlen(s->policy_str));
    } else { /* not a placeholder: as written */
      strbuf_add(&m, open, n + 2);
    }
    t = close + 1;
  }
  STRBUF_LIT(out, ",\"message\":");
  json_put_str(out, m.p ? m.p : "", m.len);
  strbuf_free(&m);
}

/* A denial's message field, unless --deny-message '' turned it off. */
static void maybe_message(strbuf *b, const server *srv, const eng_result *r,
                          int peek) {
  if (r->allowed || peek || r->worst < 0) return;
  if (srv->o.deny_message && !*srv->o.deny_message) return;
  add_deny_message(b, srv, &r->st[r->worst]);
}

/* A lease taken: "lease" (and "in_flight") in the JSON, and the
   Sluice-Lease header (what a proxy passes on to the application). */
static void add_lease(h2o_req_t *req, strbuf *b, const eng_result *res,
                      const char *policy) {
  if (!res->lease) return;
  char *tok = h2o_mem_alloc_pool(&req->pool, LEASE_TOKEN_MAX);
  size_t n = lease_token(tok, res->lease, policy);
  STRBUF_LIT(b, ",\"lease\":");
  json_put_str(b, tok, n);
  http_add_header(req, "sluice-lease", tok, n);
}

int http_engine_error(h2o_req_t *req, int rc, const char *msg) {
  return http_send_error(req, eng_error_of(rc)->http_status, "%s", msg);
}

/* Sends the answer to a decided check (status, headers, body). */
int http_render_check(h2o_req_t *req, server *srv, const eng_result *res,
                        size_t n, int peek, const int *skipped, size_t asked,
                        int64_t now) {
  ANSWER_BUF(b);
  strbuf_addf(&b, "{\"overall_code\":\"%s\",\"allowed\":%s",
         res->allowed ? "OK" : "OVER_LIMIT", res->allowed ? "true" : "false");
  maybe_message(&b, srv, res, peek);
  http_shed_add(req, &b, res);
  add_lease(req, &b, res, NULL);
  for (size_t i = 0; i < res->n; i++)
    if (res->st[i].unchecked && !res->st[i].shadow) {
      STRBUF_LIT(&b, ",\"unchecked\":true");
      break;
    }
  STRBUF_LIT(&b, ",\"statuses\":[");
  if (!skipped) asked = n;
  for (size_t i = 0, used = 0; i < asked; i++) {
    if (i) STRBUF_LIT(&b, ",");
    if (skipped && skipped[i]) {
      STRBUF_LIT(&b, "{\"code\":\"OK\",\"skipped\":true}");
      continue;
    }
    int k = used < ENG_MAX_DESCRIPTORS ? res->by_descriptor[used] : -1;
    used++;
    if (k < 0)
      STRBUF_LIT(&b, "{\"code\":\"OK\"}");
    else
      status_json(&b, &res->st[k]);
  }
  STRBUF_LIT(&b, "]}\n");
  add_limit_headers(req, srv, res, now);
  int status = res->allowed || peek ? 200
               : http_shed_status(res) ? http_shed_status(res)
                                       : srv->o.deny_status;
  return http_send_body(req, status, "application/json", &b);
}

int http_render_throttle(h2o_req_t *req, server *srv, const eng_result *res,
                           int64_t now) {
  const sl_decision *d = &res->st[0].d;
  ANSWER_BUF(b);
  if (d->allowed)
    STRBUF_LIT(&b, "{\"allowed\":true,\"limit\":");
  else
    STRBUF_LIT(&b, "{\"allowed\":false,\"limit\":");
  strbuf_add_i64(&b, d->limit);
  STRBUF_LIT(&b, ",\"remaining\":");
  strbuf_add_i64(&b, d->remaining);
  STRBUF_LIT(&b, ",\"reset_ms\":");
  strbuf_add_i64(&b, ns_to_ms_up(d->reset_ns));
  STRBUF_LIT(&b, ",\"retry_after_ms\":");
  strbuf_add_i64(&b, ns_to_ms_up(d->retry_after_ns));
  STRBUF_LIT(&b, ",\"delay_ms\":");
  strbuf_add_i64(&b, ns_to_ms_up(d->delay_ns));
  STRBUF_LIT(&b, ",\"policy\":");
  json_put_str(&b, res->st[0].policy_str, strlen(res->st[0].policy_str));
  if (res->st[0].policy && res->st[0].policy->algo == SL_CONCURRENCY) {
    STRBUF_LIT(&b, ",\"in_flight\":");
    strbuf_add_i64(&b, d->limit - d->remaining);
  }
  add_lease(req, &b, res, res->st[0].policy_str);
  maybe_message(&b, srv, res, 0);
  STRBUF_LIT(&b, "}\n");
  add_limit_headers(req, srv, res, now);
  return http_send_body(req, d->allowed ? 200 : srv->o.deny_status,
                   "application/json", &b);
}

int http_render_lease(h2o_req_t *req, const eng_result *res, int renew) {
  ANSWER_BUF(b);
  strbuf_addf(&b, "{\"%s\":%s", renew ? "renewed" : "released",
              res->allowed ? "true" : "false");
  if (!res->allowed)
    STRBUF_LIT(&b, ",\"reason\":\"no such live lease (unknown, already "
                   "released, or expired)\"");
  if (res->worst >= 0) {
    const sl_decision *d = &res->st[res->worst].d;
    strbuf_addf(&b, ",\"limit\":%lld,\"in_flight\":%lld",
                (long long)d->limit, (long long)(d->limit - d->remaining));
    if (renew && res->allowed)
      strbuf_addf(&b, ",\"ttl_ms\":%lld",
                  (long long)ns_to_ms_up(res->st[res->worst].policy->period_ns));
  }
  STRBUF_LIT(&b, "}\n");
  return http_send_body(req, 200, "application/json", &b);
}

/* A reset's answer: {"reset":N}, or why it failed. */
int http_render_reset(h2o_req_t *req, int rc, const eng_reset *r) {
  if (rc) return http_engine_error(req, rc, r->msg);
  ANSWER_BUF(b);
  STRBUF_LIT(&b, "{\"reset\":");
  strbuf_add_i64(&b, r->dropped);
  STRBUF_LIT(&b, "}\n");
  return http_send_body(req, 200, "application/json", &b);
}

/* ---- h2o's own errors, in sluice's JSON ---- */

/*
 * h2o answers some requests itself, before any handler runs: a body over
 * --max-body (413, h2o's max_request_entity_size: a declared length at
 * once, a chunked body once it passes the limit), a broken chunked
 * encoding or Content-Length (400), an unknown Expect (417). Those answers
 * go through the host's fallback path, where this filter rewrites their
 * plain-text body into {"error": "..."} (413's message naming the limit,
 * as http_body_request's does), so a client sees one error format.
 */
typedef struct error_filter {
  h2o_filter_t super;
  size_t max_body;
} error_filter;

typedef struct error_ostream {
  h2o_ostream_t super;
  size_t max_body;
} error_ostream;

/* h2o_send_inline sends its text in one call: replaced by the JSON before
   the headers (and Content-Length) are written by the next ostream. */
static void error_send(h2o_ostream_t *self, h2o_req_t *req, h2o_iovec_t *bufs,
                       size_t n, h2o_send_state_t state) {
  const error_ostream *eo = (const error_ostream *)self;
  char msg[256];
  size_t len = 0;
  if (req->res.status == 413) {
    len = (size_t)snprintf(msg, sizeof msg, "body larger than %zu bytes",
                           eo->max_body);
  } else {
    for (size_t i = 0; i < n && len < sizeof msg; i++) {
      size_t k = bufs[i].len < sizeof msg - len ? bufs[i].len
                                                : sizeof msg - len;
      memcpy(msg + len, bufs[i].base, k);
      len += k;
    }
  }
  ANSWER_BUF(b);
  STRBUF_LIT(&b, "{\"error\":");
  json_put_str(&b, msg, len);
  STRBUF_LIT(&b, "}\n");
  h2o_iovec_t body = h2o_strdup(&req->pool, b.p, b.len);
  strbuf_free(&b);
  req->res.content_length = body.len;
  h2o_set_header(&req->pool, &req->res.headers, H2O_TOKEN_CONTENT_TYPE,
                 H2O_STRLIT("application/json"), 1);
  h2o_ostream_send_next(self, req, &body, 1, state);
}

static void on_setup_error(h2o_filter_t *self, h2o_req_t *req,
                           h2o_ostream_t **slot) {
  if (req->res.status >= 400) {
    error_ostream *eo = (error_ostream *)h2o_add_ostream(
        req, sizeof *eo, slot);
    eo->super.do_send = error_send;
    eo->max_body = ((error_filter *)self)->max_body;
    slot = &eo->super.next;
    worker *w = worker_of(req->conn->ctx);
    engine_count(w->et, EC_HTTP_REQUESTS, 1);
    engine_count(w->et, EC_HTTP_ERRORS, 1);
  }
  h2o_setup_next_ostream(req, slot);
}

void http_register_errors(h2o_hostconf_t *host, server *srv) {
  error_filter *f = (error_filter *)h2o_create_filter(&host->fallback_path,
                                                       sizeof *f);
  f->super.on_setup_ostream = on_setup_error;
  f->max_body = srv->o.max_body;
}
