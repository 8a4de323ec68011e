/*
 * http.c — the HTTP front end (h2o): one decision per request.
 *
 *   GET  /v1/check?domain=D&K1=V1&K2=V2[&hits=N]   config rules, one
 *        descriptor (query order = entry order)
 *   POST /v1/check   {"domain", "descriptors": [{"entries": [{"key",
 *        "value"}], "hits_addend"?}], "hits_addend"?}  (Envoy's RLS shape)
 *   GET  /v1/throttle?key=K&policy=SPEC[&cost=N]   ad-hoc policy
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
 * A value in /v1/check may refer to the request itself, for forward-auth
 * proxies that cannot put the client's address or header into the URL
 * (Traefik): "$remote_addr" (X-Forwarded-For's first address when it may be
 * trusted, else X-Real-IP, else the peer), "$http_x_api_key" (the X-Api-Key
 * header; a descriptor naming a missing header is skipped, as Envoy skips a
 * request_headers action), "$$..." for a literal "$...".
 */
#include <arpa/inet.h>
#include <ctype.h>
#include <jansson.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server.h"

typedef struct sluice_handler {
  h2o_handler_t super;
  server *srv;
} sluice_handler;

/* ---- answers ---- */

/* An answer's buffer, starting on the stack: a typical answer fits, so the
   hot path never allocates (base/strbuf.h). */
#define ANSWER_BUF(b) \
  char b##_mem[512];  \
  strbuf b;           \
  strbuf_init_with(&b, b##_mem, sizeof b##_mem)

/* Length of the valid UTF-8 sequence at s (0 if invalid). */
static size_t utf8_len(const unsigned char *s, size_t n) {
  if (s[0] < 0x80) return 1;
  size_t k = s[0] >= 0xf0 ? 4 : s[0] >= 0xe0 ? 3 : s[0] >= 0xc2 ? 2 : 0;
  if (!k || k > n || s[0] > 0xf4) return 0;
  for (size_t i = 1; i < k; i++)
    if ((s[i] & 0xc0) != 0x80) return 0;
  if (k == 3 && ((s[0] == 0xe0 && s[1] < 0xa0) || (s[0] == 0xed && s[1] >= 0xa0)))
    return 0;
  if (k == 4 && ((s[0] == 0xf0 && s[1] < 0x90) || (s[0] == 0xf4 && s[1] >= 0x90)))
    return 0;
  return k;
}

/* A JSON string: escapes, and U+FFFD for bytes that are not UTF-8. */
static void add_json_str(strbuf *b, const char *s, size_t n) {
  STRBUF_LIT(b, "\"");
  const unsigned char *u = (const unsigned char *)s;
  for (size_t i = 0; i < n;) {
    unsigned char ch = u[i];
    if (ch == '"' || ch == '\\') {
      char e[2] = {'\\', (char)ch};
      strbuf_add(b, e, 2);
      i++;
    } else if (ch < 0x20) {
      strbuf_addf(b, "\\u%04x", ch);
      i++;
    } else {
      size_t k = utf8_len(u + i, n - i);
      if (k) {
        strbuf_add(b, s + i, k);
        i += k;
      } else {
        STRBUF_LIT(b, "\\ufffd");
        i++;
      }
    }
  }
  STRBUF_LIT(b, "\"");
}

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
static void add_header(h2o_req_t *req, const char *name, const char *value,
                       size_t len) {
  h2o_iovec_t v = h2o_strdup(&req->pool, value, len);
  h2o_add_header_by_str(&req->pool, &req->res.headers, name, strlen(name), 0,
                        NULL, v.base, v.len);
}

/* Adds a header whose value is the integer v. */
static void add_int_header(h2o_req_t *req, const char *name, int64_t v) {
  char *p = h2o_mem_alloc_pool(&req->pool, 20);
  h2o_add_header_by_str(&req->pool, &req->res.headers, name, strlen(name), 0,
                        NULL, p, fmt_i64(p, v));
}

/* Sends body (freed here) with status and content type. */
static int send_body(h2o_req_t *req, int status, const char *ctype,
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
  h2o_send_inline(req, b->p ? b->p : "", b->len);
  strbuf_free(b);
  return 0;
}

static int send_error(h2o_req_t *req, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int send_error(h2o_req_t *req, int status, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  worker *w = worker_of(req->conn->ctx);
  engine_count(w->et, EC_HTTP_ERRORS, 1);
  ANSWER_BUF(b);
  STRBUF_LIT(&b, "{\"error\":");
  add_json_str(&b, msg, strlen(msg));
  STRBUF_LIT(&b, "}\n");
  return send_body(req, status, "application/json", &b);
}

static int method_not_allowed(h2o_req_t *req, const char *allow) {
  add_header(req, "allow", allow, strlen(allow));
  return send_error(req, 405, "method %.*s not allowed here (allow: %s)",
                    (int)(req->method.len < 16 ? req->method.len : 16),
                    req->method.base, allow);
}

/* ---- the rate limit headers ---- */

/* A policy's window in seconds for RateLimit-Policy's w: the period for
   windows; for buckets the time a full burst takes to refill. */
static int64_t window_s(const sl_policy *p) {
  int bucket = p->algo == SL_TOKEN_BUCKET || p->algo == SL_LEAKY_BUCKET ||
               p->algo == SL_GCRA;
  __int128 ns = bucket ? (__int128)p->period_ns * (p->burst ? p->burst
                                                            : p->limit) /
                             p->limit
                       : p->period_ns;
  int64_t s = (int64_t)(ns / 1000000000 + (ns % 1000000000 != 0));
  return s > 0 ? s : 1;
}

/* A Structured Field String: printable ASCII, '"' and '\' escaped. */
static void sf_str(strbuf *b, const char *s) {
  STRBUF_LIT(b, "\"");
  for (; *s; s++) {
    char ch = (*s >= 0x20 && *s < 0x7f) ? *s : '_';
    if (ch == '"' || ch == '\\') STRBUF_LIT(b, "\\");
    strbuf_add(b, &ch, 1);
  }
  STRBUF_LIT(b, "\"");
}

/* The name a status is reported under. */
static const char *status_name(const eng_status *s) {
  if (!s->limit) return s->policy_str;
  return s->limit->name ? s->limit->name : s->limit->rule;
}


static void add_limit_headers(h2o_req_t *req, server *srv, const eng_result *r,
                              int64_t now) {
  int style = srv->o.header_style; /* the rate limit fields only: a
                                      denial's Retry-After is plain HTTP */
  if (r->worst < 0) return;
  const eng_status *worst = &r->st[r->worst];
  if (worst->unlimited) return;
  if (style & HDR_IETF) {
    ANSWER_BUF(pol);
    ANSWER_BUF(cur);
    /* Enforced rules first, the most restrictive leading; one item each. */
    const eng_status *order[ENG_MAX_STATUSES];
    size_t n = 0;
    order[n++] = worst;
    for (int pass = 0; pass < 2; pass++)
      for (size_t i = 0; i < r->n; i++) {
        const eng_status *s = &r->st[i];
        if (s == worst || s->unlimited || s->shadow != pass) continue;
        int dup = 0;
        for (size_t k = 0; k < n; k++)
          dup |= !strcmp(status_name(order[k]), status_name(s));
        if (!dup) order[n++] = s;
      }
    for (size_t k = 0; k < n; k++) {
      const eng_status *s = order[k];
      if (pol.len) STRBUF_LIT(&pol, ", ");
      if (cur.len) STRBUF_LIT(&cur, ", ");
      sf_str(&pol, status_name(s));
      STRBUF_LIT(&pol, ";q=");
      strbuf_add_i64(&pol, s->d.limit);
      if (s->policy && !(s->limit && s->limit->blocked)) {
        STRBUF_LIT(&pol, ";w=");
        strbuf_add_i64(&pol, window_s(s->policy));
      }
      sf_str(&cur, status_name(s));
      STRBUF_LIT(&cur, ";r=");
      strbuf_add_i64(&cur, s->d.remaining);
      STRBUF_LIT(&cur, ";t=");
      strbuf_add_i64(&cur, ns_to_s_up(s->d.reset_ns));
    }
    if (!pol.oom && !cur.oom) {
      add_header(req, "ratelimit-policy", pol.p, pol.len);
      add_header(req, "ratelimit", cur.p, cur.len);
    }
    strbuf_free(&pol);
    strbuf_free(&cur);
  }
  if (style & HDR_X) {
    add_int_header(req, "x-ratelimit-limit", worst->d.limit);
    add_int_header(req, "x-ratelimit-remaining", worst->d.remaining);
    add_int_header(req, "x-ratelimit-reset", ns_to_s_up(now + worst->d.reset_ns));
  }
  if (!r->allowed && worst->d.retry_after_ns >= 0) {
    int64_t s = ns_to_s_up(worst->d.retry_after_ns);
    char *v = h2o_mem_alloc_pool(&req->pool, 20);
    h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_RETRY_AFTER, NULL,
                   v, fmt_i64(v, s > 0 ? s : 1));
  }
}

/* ---- query strings ---- */

typedef struct qparam {
  char *key, *value;
  size_t key_len, value_len;
} qparam;

#define MAX_PARAMS 40

static int hexval(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

/* Percent-decodes s[0..n) into pool memory ('+' is a space). -1 if bad. */
static int decode(h2o_mem_pool_t *pool, const char *s, size_t n, char **out,
                  size_t *out_len) {
  char *d = h2o_mem_alloc_pool(pool, n + 1);
  size_t k = 0;
  for (size_t i = 0; i < n; i++) {
    if (s[i] == '%') {
      int hi, lo;
      if (i + 2 >= n || (hi = hexval(s[i + 1])) < 0 ||
          (lo = hexval(s[i + 2])) < 0)
        return -1;
      d[k++] = (char)(hi << 4 | lo);
      i += 2;
    } else {
      d[k++] = s[i] == '+' ? ' ' : s[i];
    }
  }
  d[k] = '\0';
  *out = d;
  *out_len = k;
  return 0;
}

/* Splits the query into params. Returns their number, or -1 (bad
   encoding), -2 (too many). */
static int parse_query(h2o_req_t *req, qparam *ps) {
  if (req->query_at == SIZE_MAX) return 0;
  const char *q = req->path.base + req->query_at + 1;
  const char *end = req->path.base + req->path.len;
  int n = 0;
  while (q < end) {
    const char *amp = memchr(q, '&', (size_t)(end - q));
    if (!amp) amp = end;
    if (amp > q) {
      if (n == MAX_PARAMS) return -2;
      const char *eq = memchr(q, '=', (size_t)(amp - q));
      const char *ke = eq ? eq : amp;
      if (decode(&req->pool, q, (size_t)(ke - q), &ps[n].key, &ps[n].key_len) ||
          decode(&req->pool, eq ? eq + 1 : amp, eq ? (size_t)(amp - eq - 1) : 0,
                 &ps[n].value, &ps[n].value_len))
        return -1;
      n++;
    }
    q = amp + 1;
  }
  return n;
}

static const qparam *find_param(const qparam *ps, int n, const char *key) {
  for (int i = 0; i < n; i++)
    if (!strcmp(ps[i].key, key)) return &ps[i];
  return NULL;
}

static int parse_count(const char *s, int64_t *out) {
  if (!*s || strlen(s) > 18) return -1;
  int64_t v = 0;
  for (; *s; s++) {
    if (*s < '0' || *s > '9') return -1;
    v = v * 10 + (*s - '0');
  }
  *out = v;
  return 0;
}

/* ---- request facts ---- */

static int is_loopback(const struct sockaddr *sa) {
  if (sa->sa_family == AF_INET)
    return (ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr) >> 24) ==
           127;
  if (sa->sa_family == AF_INET6) {
    const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;
    return IN6_IS_ADDR_LOOPBACK(a) ||
           (IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127);
  }
  return 0;
}

static socklen_t peer(h2o_req_t *req, struct sockaddr_storage *ss) {
  return req->conn->callbacks->get_peername(req->conn, (struct sockaddr *)ss);
}

/* The value of header `name` (lower case), or NULL. */
static const h2o_iovec_t *header(h2o_req_t *req, const char *name,
                                 size_t len) {
  ssize_t i = h2o_find_header_by_str(&req->headers, name, len, -1);
  return i < 0 ? NULL : &req->headers.entries[i].value;
}

/* The client's address as text, per $remote_addr's rules. */
static void remote_addr(h2o_req_t *req, server *srv, char *buf, size_t len) {
  struct sockaddr_storage ss;
  socklen_t sl = peer(req, &ss);
  int trust = srv->o.trust_forwarded ||
              (sl > 0 && is_loopback((struct sockaddr *)&ss));
  const h2o_iovec_t *v = trust ? header(req, H2O_STRLIT("x-forwarded-for"))
                               : NULL;
  if (!v && trust) v = header(req, H2O_STRLIT("x-real-ip"));
  if (v) {
    size_t n = 0;
    while (n < v->len && v->base[n] != ',') n++;
    size_t a = 0;
    while (a < n && v->base[a] == ' ') a++;
    while (n > a && v->base[n - 1] == ' ') n--;
    snprintf(buf, len, "%.*s", (int)(n - a), v->base + a);
    return;
  }
  buf[0] = '\0';
  if (sl <= 0) return;
  if (ss.ss_family == AF_INET)
    inet_ntop(AF_INET, &((struct sockaddr_in *)&ss)->sin_addr, buf,
              (socklen_t)len);
  else if (ss.ss_family == AF_INET6)
    inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&ss)->sin6_addr, buf,
              (socklen_t)len);
}

/*
 * Resolves a value reference in place. Returns 1 when the value is usable,
 * 0 when it names a missing header (the descriptor is skipped).
 */
static int resolve(h2o_req_t *req, server *srv, char **v, size_t *len) {
  if (*len == 0 || (*v)[0] != '$') return 1;
  if (*len >= 2 && (*v)[1] == '$') { /* "$$x" is the literal "$x" */
    (*v)++;
    (*len)--;
    return 1;
  }
  if (!strcmp(*v, "$remote_addr")) {
    char *buf = h2o_mem_alloc_pool(&req->pool, 64);
    remote_addr(req, srv, buf, 64);
    *v = buf;
    *len = strlen(buf);
    return 1;
  }
  if (*len > 6 && !strncmp(*v, "$http_", 6)) {
    char name[128];
    size_t n = *len - 6;
    if (n >= sizeof name) return 0;
    for (size_t i = 0; i < n; i++) {
      char ch = (*v)[6 + i];
      name[i] = ch == '_' ? '-' : (char)tolower((unsigned char)ch);
    }
    const h2o_iovec_t *h = header(req, name, n);
    if (!h) return 0;
    *v = h->base;
    *len = h->len;
    return 1;
  }
  return 1; /* any other "$..." is taken literally */
}

/* Whether the admin endpoints may be used by this request. */
static int admin_ok(h2o_req_t *req, server *srv, int *status) {
  const char *tok = srv->o.admin_token;
  if (tok) {
    const h2o_iovec_t *a = header(req, H2O_STRLIT("authorization"));
    size_t tl = strlen(tok);
    unsigned diff = 1;
    if (a && a->len == 7 + tl && !strncasecmp(a->base, "Bearer ", 7)) {
      diff = 0;
      for (size_t i = 0; i < tl; i++) diff |= (unsigned)(a->base[7 + i] ^ tok[i]);
    }
    if (diff) {
      add_header(req, "www-authenticate", H2O_STRLIT("Bearer realm=\"sluice\""));
      *status = 401;
      return 0;
    }
    return 1;
  }
  struct sockaddr_storage ss;
  if (peer(req, &ss) > 0 && is_loopback((struct sockaddr *)&ss)) return 1;
  *status = 403;
  return 0;
}

/* ---- decisions ---- */

static void status_json(strbuf *b, const eng_status *s) {
  int ok = s->d.allowed || s->shadow;
  strbuf_addf(b, "{\"code\":\"%s\"", ok ? "OK" : "OVER_LIMIT");
  if (s->unlimited) {
    STRBUF_LIT(b, ",\"unlimited\":true,\"limit_remaining\":4294967295");
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
  add_json_str(b, s->policy_str, strlen(s->policy_str));
  if (s->limit) {
    STRBUF_LIT(b, ",\"rule\":");
    add_json_str(b, s->limit->rule, strlen(s->limit->rule));
    if (s->limit->name) {
      STRBUF_LIT(b, ",\"name\":");
      add_json_str(b, s->limit->name, strlen(s->limit->name));
    }
  }
  if (s->shadow) strbuf_addf(b, ",\"shadow\":true");
  STRBUF_LIT(b, "}");
}

static int engine_error(h2o_req_t *req, int rc, const eng_request *er) {
  switch (rc) {
  case ENG_EDOMAIN:
    return send_error(req, 404, "unknown domain '%.*s'",
                      (int)(er->domain_len < 200 ? er->domain_len : 200),
                      er->domain);
  case ENG_EDESCRIPTOR:
    return send_error(req, 400, "descriptors: 1 to %d, each 1 to %d entries "
                                "of at most %d bytes in all",
                      ENG_MAX_DESCRIPTORS, ENG_MAX_ENTRIES, SL_KEY_MAX);
  case SL_ECOST:
    return send_error(req, 400, "hits exceed what a matching rule can ever "
                                "allow");
  case SL_ENOMEM:
    return send_error(req, 503, "the store is out of memory");
  default:
    return send_error(req, 400, "%s", sl_strerror(rc));
  }
}

/* Sends the answer to a decided check (status, headers, body). */
static int render_check(h2o_req_t *req, server *srv, const eng_result *res,
                        size_t n, int peek, const int *skipped, size_t asked,
                        int64_t now) {
  ANSWER_BUF(b);
  strbuf_addf(&b, "{\"overall_code\":\"%s\",\"allowed\":%s,\"statuses\":[",
         res->allowed ? "OK" : "OVER_LIMIT", res->allowed ? "true" : "false");
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
  return send_body(req, res->allowed || peek ? 200 : srv->o.deny_status,
                   "application/json", &b);
}

static int render_throttle(h2o_req_t *req, server *srv, const eng_result *r,
                           int64_t now);

/*
 * Fleet mode: a request waiting for Redis. The hook, in the request's pool,
 * learns when h2o disposes of the request (the client went away) before
 * the answer came: the answer is then dropped.
 */
enum { W_CHECK, W_THROTTLE };
typedef struct http_wait {
  h2o_req_t *req; /* NULL once the request is gone */
  struct http_wait **hook;
  server *srv;
  int kind, peek, has_skipped;
  size_t n, asked;
  int skipped[ENG_MAX_DESCRIPTORS];
  int64_t now;
  eng_result r;
} http_wait;

static void hook_dispose(void *p) {
  http_wait **hook = p;
  if (*hook) (*hook)->req = NULL;
}

static http_wait *wait_new(h2o_req_t *req, server *srv, int kind,
                           int64_t now) {
  if (!worker_of(req->conn->ctx)->may_wait) return NULL;
  http_wait *wt = malloc(sizeof *wt);
  if (!wt) return NULL;
  wt->req = req;
  wt->hook = NULL;
  wt->srv = srv;
  wt->kind = kind;
  wt->peek = wt->has_skipped = 0;
  wt->n = wt->asked = 0;
  wt->now = now;
  return wt;
}

/* The call went pending: hook the request's end. */
static int wait_pending(http_wait *wt) {
  wt->hook = h2o_mem_alloc_shared(&wt->req->pool, sizeof *wt->hook,
                                  hook_dispose);
  *wt->hook = wt;
  return 0;
}

static void wait_done(void *ud, int rc, eng_result *res) {
  http_wait *wt = ud;
  if (wt->req) {
    *wt->hook = NULL;
    if (rc)
      send_error(wt->req, 500, "%s", sl_strerror(rc));
    else if (wt->kind == W_CHECK)
      render_check(wt->req, wt->srv, res, wt->n, wt->peek,
                   wt->has_skipped ? wt->skipped : NULL, wt->asked, wt->now);
    else
      render_throttle(wt->req, wt->srv, res, wt->now);
  }
  free(wt);
}

/*
 * Decides req's descriptors and sends the answer (status, headers, body).
 * `skipped` (NULL: none) marks, among the `asked` descriptors of the
 * request, those left out because a value named a missing header: their
 * statuses stay in place, as "OK" with "skipped": true.
 */
static int answer_check(h2o_req_t *req, server *srv, const eng_request *er,
                        int peek, const int *skipped, size_t asked) {
  worker *w = worker_of(req->conn->ctx);
  eng_request r = *er;
  if (peek) {
    r.hits = 0;
    for (size_t i = 0; i < r.n; i++) r.descriptors[i].hits = -1;
  }
  int64_t now = clock_wall_ns();
  eng_result stack_res, *res = &stack_res;
  http_wait *wt = r.n ? wait_new(req, srv, W_CHECK, now) : NULL;
  if (wt) {
    res = &wt->r;
    wt->peek = peek;
    wt->n = r.n;
    wt->asked = asked;
    wt->has_skipped = skipped != NULL;
    if (skipped)
      memcpy(wt->skipped, skipped,
             (asked < ENG_MAX_DESCRIPTORS ? asked : ENG_MAX_DESCRIPTORS) *
                 sizeof *skipped);
  }
  int rc = r.n ? engine_check_async(w->et, &r, now, res, wait_done, wt) : 0;
  if (rc == ENG_PENDING) return wait_pending(wt);
  if (!r.n) { /* every descriptor was skipped: nothing applies */
    if (!config_domain(engine_config(srv->eng), r.domain, r.domain_len))
      rc = ENG_EDOMAIN;
    res->allowed = 1;
    res->n = 0;
    res->worst = -1;
  }
  int sent = rc ? engine_error(req, rc, &r)
                : render_check(req, srv, res, r.n, peek, skipped, asked, now);
  free(wt);
  return sent;
}

/*
 * Reads "domain=D&K1=V1&...[&hits=N]" into *er (one descriptor, in *d; none
 * when a value names a missing header). 0, or -1 after sending a 400.
 */
static int query_request(h2o_req_t *req, server *srv, eng_request *er,
                         eng_descriptor *d) {
  qparam ps[MAX_PARAMS];
  int n = parse_query(req, ps);
  if (n == -1)
    return send_error(req, 400, "malformed percent-encoding in the query"), -1;
  if (n == -2)
    return send_error(req, 400, "too many query parameters (max %d)",
                      MAX_PARAMS), -1;
  const qparam *dom = find_param(ps, n, "domain");
  if (!dom || !dom->value_len)
    return send_error(req, 400, "missing domain= in the query"), -1;
  d->n = 0;
  d->hits = -1;
  int64_t hits = 1;
  int skip = 0;
  for (int i = 0; i < n; i++) {
    if (&ps[i] == dom) continue;
    if (!strcmp(ps[i].key, "hits")) {
      if (parse_count(ps[i].value, &hits))
        return send_error(req, 400, "hits must be an integer >= 0"), -1;
      continue;
    }
    if (!ps[i].key_len)
      return send_error(req, 400, "an empty descriptor key in the query"), -1;
    if (d->n == ENG_MAX_ENTRIES)
      return send_error(req, 400, "at most %d descriptor entries",
                        ENG_MAX_ENTRIES), -1;
    char *v = ps[i].value;
    size_t vl = ps[i].value_len;
    if (!resolve(req, srv, &v, &vl)) skip = 1;
    if (ps[i].key_len > srv->o.max_key || vl > srv->o.max_key)
      return send_error(req, 400, "a key or value is longer than %zu bytes",
                        srv->o.max_key), -1;
    d->entries[d->n++] = (cfg_entry){ps[i].key, ps[i].key_len, v, vl};
  }
  if (!d->n)
    return send_error(req, 400, "no descriptor entries (KEY=VALUE) in the "
                                "query"), -1;
  *er = (eng_request){dom->value, dom->value_len, d, skip ? 0 : 1, hits};
  return 0;
}

static int get_check(h2o_req_t *req, server *srv, int peek) {
  eng_descriptor d;
  eng_request er;
  if (query_request(req, srv, &er, &d)) return 0;
  int skipped = er.n == 0;
  return answer_check(req, srv, &er, peek, &skipped, 1);
}

/* The string field `name` of a JSON object, or NULL; -1 in *bad if it is
   there but not a string. */
static const char *json_str(json_t *o, const char *name, size_t *len,
                            int *bad) {
  json_t *v = json_object_get(o, name);
  if (!v) return NULL;
  if (!json_is_string(v)) {
    *bad = 1;
    return NULL;
  }
  *len = json_string_length(v);
  return json_string_value(v);
}

/* hits_addend: a number, or protobuf's wrapper {"value": n}. */
static int json_hits(json_t *o, int64_t *out) {
  json_t *v = json_object_get(o, "hits_addend");
  if (!v) v = json_object_get(o, "hitsAddend");
  if (!v) return 0;
  if (json_is_object(v)) v = json_object_get(v, "value");
  if (json_is_string(v)) { /* protobuf JSON writes 64-bit numbers as strings */
    int64_t x;
    if (parse_count(json_string_value(v), &x)) return -1;
    *out = x;
    return 1;
  }
  if (!json_is_integer(v) || json_integer_value(v) < 0) return -1;
  *out = json_integer_value(v);
  return 1;
}

/*
 * Reads a JSON body in Envoy's RLS shape ({"domain", "descriptors": [...],
 * "hits_addend"?}) into *er: its descriptors in ds, skipped[i] set for
 * those left out because a value named a missing header, *asked = how
 * many the body had. *root holds the strings *er points to (json_decref it
 * after use, also after a failure). 0, or -1 after sending a 400 or 413.
 */
static int body_request(h2o_req_t *req, server *srv, json_t **root,
                        eng_request *er, eng_descriptor *ds, int *skipped,
                        size_t *asked) {
  *root = NULL;
  if (req->entity.len > srv->o.max_body)
    return send_error(req, 413, "body larger than %zu bytes",
                      srv->o.max_body), -1;
  json_error_t jerr;
  *root = json_loadb(req->entity.base, req->entity.len,
                     JSON_REJECT_DUPLICATES, &jerr);
  if (!*root)
    return send_error(req, 400, "malformed JSON at line %d column %d: %s",
                      jerr.line, jerr.column, jerr.text), -1;
  int bad = 0;
  size_t dlen = 0;
  size_t nd = 0;
  int64_t hits = 1;
  json_t *o = *root;
  const char *domain = json_is_object(o) ? json_str(o, "domain", &dlen, &bad)
                                         : NULL;
  json_t *descs = json_is_object(o) ? json_object_get(o, "descriptors") : NULL;
  if (!json_is_object(o))
    return send_error(req, 400, "the body must be a JSON object"), -1;
  if (!domain || !dlen || bad)
    return send_error(req, 400, "\"domain\" must be a non-empty string"), -1;
  int h = json_hits(o, &hits);
  if (h < 0)
    return send_error(req, 400, "\"hits_addend\" must be an integer >= 0"),
           -1;
  if (h == 1 && hits == 0) hits = 1; /* Envoy: 0 means the default, 1 */
  if (!json_is_array(descs) || json_array_size(descs) == 0 ||
      json_array_size(descs) > ENG_MAX_DESCRIPTORS)
    return send_error(req, 400, "\"descriptors\" must be an array of 1 to %d "
                                "descriptors", ENG_MAX_DESCRIPTORS), -1;
  for (size_t i = 0; i < json_array_size(descs); i++) {
    json_t *d = json_array_get(descs, i);
    json_t *entries = json_is_object(d) ? json_object_get(d, "entries") : NULL;
    skipped[i] = 0;
    if (!json_is_array(entries) || json_array_size(entries) == 0 ||
        json_array_size(entries) > ENG_MAX_ENTRIES)
      return send_error(req, 400, "descriptor %zu: \"entries\" must be an "
                                  "array of 1 to %d {key, value}", i,
                        ENG_MAX_ENTRIES), -1;
    eng_descriptor *e = &ds[nd];
    e->n = 0;
    e->hits = -1;
    int64_t dh;
    int got = json_hits(d, &dh);
    if (got < 0)
      return send_error(req, 400, "descriptor %zu: bad \"hits_addend\"", i),
             -1;
    if (got) e->hits = dh; /* per descriptor: 0 is a real 0 (a peek) */
    int skip = 0;
    for (size_t k = 0; k < json_array_size(entries); k++) {
      json_t *en = json_array_get(entries, k);
      size_t kl = 0, vl = 0;
      const char *key = json_is_object(en) ? json_str(en, "key", &kl, &bad) : NULL;
      const char *val = json_is_object(en) ? json_str(en, "value", &vl, &bad) : NULL;
      if (!key || !kl || bad)
        return send_error(req, 400, "descriptor %zu entry %zu: \"key\" must "
                                    "be a non-empty string", i, k), -1;
      if (!val) {
        val = "";
        vl = 0;
      }
      char *v = (char *)val;
      if (!resolve(req, srv, &v, &vl)) skip = 1;
      if (kl > srv->o.max_key || vl > srv->o.max_key)
        return send_error(req, 400, "a key or value is longer than %zu bytes",
                          srv->o.max_key), -1;
      e->entries[e->n++] = (cfg_entry){key, kl, v, vl};
    }
    if (!skip)
      nd++;
    else
      skipped[i] = 1;
  }
  *er = (eng_request){domain, dlen, ds, nd, hits};
  *asked = json_array_size(descs);
  return 0;
}

static int post_check(h2o_req_t *req, server *srv, int peek) {
  json_t *root;
  eng_request er;
  eng_descriptor ds[ENG_MAX_DESCRIPTORS];
  int skipped[ENG_MAX_DESCRIPTORS];
  size_t asked;
  int rc = 0;
  if (body_request(req, srv, &root, &er, ds, skipped, &asked) == 0)
    rc = answer_check(req, srv, &er, peek, skipped, asked);
  json_decref(root);
  return rc;
}

static int get_throttle(h2o_req_t *req, server *srv, int peek) {
  worker *w = worker_of(req->conn->ctx);
  qparam ps[MAX_PARAMS];
  int n = parse_query(req, ps);
  if (n < 0) return send_error(req, 400, "malformed query");
  const qparam *key = find_param(ps, n, "key"), *pol = find_param(ps, n, "policy"),
               *cost_p = find_param(ps, n, "cost");
  if (!key || !pol)
    return send_error(req, 400, "key= and policy= are required");
  int64_t cost = 1;
  if (cost_p && parse_count(cost_p->value, &cost))
    return send_error(req, 400, "cost must be an integer >= 0");
  if (peek) cost = 0;
  if (key->value_len > srv->o.max_key)
    return send_error(req, 400, "key longer than %zu bytes", srv->o.max_key);
  char err[256];
  int64_t now = clock_wall_ns();
  eng_result stack_res, *res = &stack_res;
  http_wait *wt = wait_new(req, srv, W_THROTTLE, now);
  if (wt) res = &wt->r;
  int rc = engine_throttle_async(w->et, key->value, key->value_len,
                                 pol->value, pol->value_len, cost, now, res,
                                 err, sizeof err, wait_done, wt);
  if (rc == ENG_PENDING) return wait_pending(wt);
  free(rc ? wt : NULL);
  if (rc == SL_EPOLICY || rc == ENG_EADHOC)
    return send_error(req, 400, "policy: %s", err);
  if (rc == SL_ECOST)
    return send_error(req, 400, "cost %lld can never be allowed by %s",
                      (long long)cost, pol->value);
  if (rc == SL_ENOMEM) return send_error(req, 503, "the store is out of memory");
  if (rc) return send_error(req, 400, "%s", sl_strerror(rc));
  int sent = render_throttle(req, srv, res, now);
  free(wt);
  return sent;
}

static int render_throttle(h2o_req_t *req, server *srv, const eng_result *res,
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
  add_json_str(&b, res->st[0].policy_str, strlen(res->st[0].policy_str));
  STRBUF_LIT(&b, "}\n");
  add_limit_headers(req, srv, res, now);
  return send_body(req, d->allowed ? 200 : srv->o.deny_status,
                   "application/json", &b);
}

/* A reset's answer: {"reset":N}, or why it failed. */
static int render_reset(h2o_req_t *req, const eng_request *er, int rc,
                        const eng_reset *r) {
  switch (rc) {
  case 0: {
    ANSWER_BUF(b);
    STRBUF_LIT(&b, "{\"reset\":");
    strbuf_add_i64(&b, r->dropped);
    STRBUF_LIT(&b, "}\n");
    return send_body(req, 200, "application/json", &b);
  }
  case ENG_ESTORE:
    if (!r->failed) /* deleted, but the other daemons were not told */
      return send_error(req, 503,
                        "reset failed: the other daemons were not "
                        "told (%s); this daemon's state and Redis's "
                        "were dropped",
                        r->err);
    return send_error(req, 503, "reset failed: Redis did not confirm %d of "
                                "its %d deletions (%s)", r->failed, r->keys,
                      r->err);
  case SL_EPOLICY:
    return send_error(req, 400, "policy: %s", r->err);
  case SL_EKEY:
    return send_error(req, 400, "key longer than %d bytes", SL_KEY_MAX);
  case ENG_EREMOTE:
    return send_error(req, 503, "this worker has no Redis client: nothing "
                                "was reset");
  default:
    return engine_error(req, rc, er);
  }
}

/* A reset waiting for Redis (fleet mode, either): dropped with its request
   if the client goes away first (the hook, as http_wait's). */
typedef struct reset_wait {
  h2o_req_t *req; /* NULL once the request is gone */
  struct reset_wait **hook;
  eng_reset r;
} reset_wait;

static void reset_hook_dispose(void *p) {
  reset_wait **hook = p;
  if (*hook) (*hook)->req = NULL;
}

static void reset_done(void *ud, int rc, eng_reset *r) {
  reset_wait *rw = ud;
  if (rw->req) {
    *rw->hook = NULL;
    render_reset(rw->req, NULL, rc, r);
  }
  free(rw);
}

/* ?key=K[&policy=SPEC]: an ad-hoc key under that policy, or under every
   policy this daemon has used; ?domain=D&K1=V1...: a config descriptor
   under every rule it matches; no query and a JSON body (/v1/check's):
   its descriptors, as one request (a domain's hash_tag comes from any of
   them, as in a decision). */
static int admin_reset(h2o_req_t *req, server *srv) {
  worker *w = worker_of(req->conn->ctx);
  qparam ps[MAX_PARAMS];
  int n = parse_query(req, ps);
  if (n < 0) return send_error(req, 400, "malformed query");
  eng_descriptor ds[ENG_MAX_DESCRIPTORS];
  eng_request er;
  json_t *root = NULL;
  const qparam *key = NULL, *pol = NULL;
  if (n == 0 && req->entity.len) {
    int skipped[ENG_MAX_DESCRIPTORS];
    size_t asked;
    if (body_request(req, srv, &root, &er, ds, skipped, &asked)) {
      json_decref(root);
      return 0;
    }
  } else if (find_param(ps, n, "domain")) {
    if (query_request(req, srv, &er, &ds[0])) return 0;
  } else {
    key = find_param(ps, n, "key");
    pol = find_param(ps, n, "policy");
    if (!key || !key->value_len)
      return send_error(req, 400, "key= or domain= (with descriptor "
                                  "entries) is required");
  }
  reset_wait *rw = malloc(sizeof *rw);
  if (!rw) {
    json_decref(root);
    return send_error(req, 503, "out of memory");
  }
  rw->req = req;
  rw->hook = NULL;
  int rc = key ? engine_reset_key_async(w->et, key->value, key->value_len,
                                        pol ? pol->value : NULL,
                                        pol ? pol->value_len : 0, &rw->r,
                                        reset_done, rw)
               : engine_reset_descriptor_async(w->et, &er, &rw->r,
                                               reset_done, rw);
  if (rc == ENG_PENDING) {
    /* (the engine copied what it needs from er: the body can go) */
    json_decref(root);
    rw->hook = h2o_mem_alloc_shared(&req->pool, sizeof *rw->hook,
                                    reset_hook_dispose);
    *rw->hook = rw;
    return 0;
  }
  int sent = render_reset(req, key ? NULL : &er, rc, &rw->r);
  json_decref(root);
  free(rw);
  return sent;
}

/* ---- the dispatcher ---- */

static int path_is(h2o_req_t *req, const char *p) {
  size_t n = req->query_at != SIZE_MAX ? req->query_at : req->path.len;
  return n == strlen(p) && !memcmp(req->path.base, p, n);
}

static int method_is(h2o_req_t *req, const char *m) {
  return h2o_memis(req->method.base, req->method.len, m, strlen(m));
}

static size_t header_bytes(h2o_req_t *req) {
  size_t n = req->path.len + req->method.len + 16;
  for (size_t i = 0; i < req->headers.size; i++)
    n += req->headers.entries[i].name->len + req->headers.entries[i].value.len + 4;
  return n;
}

static int on_req(h2o_handler_t *self, h2o_req_t *req) {
  server *srv = ((sluice_handler *)self)->srv;
  worker *w = worker_of(req->conn->ctx);
  srv_note_request(req);
  engine_count(w->et, EC_HTTP_REQUESTS, 1);
  if (header_bytes(req) > srv->o.max_header_bytes)
    return send_error(req, 431, "request line and headers exceed %zu bytes",
                      srv->o.max_header_bytes);
  int get = method_is(req, "GET") || method_is(req, "HEAD");
  int post = method_is(req, "POST");

  if (path_is(req, "/v1/throttle")) {
    if (!get) return method_not_allowed(req, "GET");
    return get_throttle(req, srv, 0);
  }
  if (path_is(req, "/v1/check")) {
    if (get) return get_check(req, srv, 0);
    if (post) return post_check(req, srv, 0);
    return method_not_allowed(req, "GET, POST");
  }
  if (path_is(req, "/metrics")) {
    if (!get) return method_not_allowed(req, "GET");
    size_t len = 0;
    char *text = engine_metrics(srv->eng, &len);
    strbuf b = {text, len, len + 1, text == NULL, 0};
    return send_body(req, 200, "text/plain; version=0.0.4; charset=utf-8", &b);
  }
  if (path_is(req, "/healthz") || path_is(req, "/readyz")) {
    if (!get) return method_not_allowed(req, "GET");
    int ready = !atomic_load(&srv->stopping);
    ANSWER_BUF(b);
    if (path_is(req, "/healthz") || ready)
      STRBUF_LIT(&b, "{\"status\":\"ok\"}\n");
    else
      STRBUF_LIT(&b, "{\"status\":\"stopping\"}\n");
    return send_body(req, path_is(req, "/healthz") || ready ? 200 : 503,
                     "application/json", &b);
  }
  if (path_is(req, "/admin/reset") || path_is(req, "/admin/inspect")) {
    int status;
    if (!admin_ok(req, srv, &status))
      return send_error(req, status, status == 401
                                         ? "a valid bearer token is required"
                                         : "admin endpoints answer loopback "
                                           "clients only (no --admin-token)");
    if (path_is(req, "/admin/reset")) {
      if (!post) return method_not_allowed(req, "POST");
      return admin_reset(req, srv);
    }
    if (!get && !post) return method_not_allowed(req, "GET, POST");
    qparam ps[MAX_PARAMS];
    int n = parse_query(req, ps);
    if (n >= 0 && find_param(ps, n, "policy")) return get_throttle(req, srv, 1);
    return post ? post_check(req, srv, 1) : get_check(req, srv, 1);
  }
  return send_error(req, 404, "no such endpoint: %.*s",
                    (int)(req->path.len < 200 ? req->path.len : 200),
                    req->path.base);
}

void http_register(h2o_globalconf_t *conf, server *srv) {
  h2o_hostconf_t *host =
      h2o_config_register_host(conf, h2o_iovec_init(H2O_STRLIT("default")), 65535);
  h2o_pathconf_t *path = h2o_config_register_path(host, "/", 0);
  sluice_handler *h = (sluice_handler *)h2o_create_handler(path, sizeof *h);
  h->super.on_req = on_req;
  h->srv = srv;
}
