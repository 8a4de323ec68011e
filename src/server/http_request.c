/*
 * http_request.c — reading an HTTP request into a decision's terms: the
 * query string (percent-decoded, at most MAX_PARAMS parameters), a JSON
 * body in Envoy's RLS shape (RateLimitRequest: domain, descriptors with
 * entries, hits_addend as a number, a string or protobuf's {"value": n}),
 * and the values that refer to the request itself:
 *   $remote_addr     X-Forwarded-For's first address (else X-Real-IP) when
 *                    the peer is on loopback or --trust-forwarded is set,
 *                    else the peer's address;
 *   $http_x_api_key  the X-Api-Key header; a descriptor naming a missing
 *                    header is skipped, as Envoy skips a request_headers
 *                    action;
 *   $$...            the literal $...
 * Also who may use the admin endpoints. A malformed request is answered
 * here, with a 400 (or 413) saying what is wrong.
 */
#include <arpa/inet.h>
#include <ctype.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "http.h"

#include "../base/duration.h"
#include "../base/json.h"

/* ---- query strings ---- */

static int hexval(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

/*
 * Why a decoded name or value cannot be used, or NULL: a NUL byte (a C
 * string would end there, so "api%00" would be read as "api"), or bytes
 * that are not UTF-8. The same rule holds for JSON bodies (jansson refuses
 * both there), so GET and POST take the same values.
 */
static const char *value_problem(const char *s, size_t n) {
  const unsigned char *u = (const unsigned char *)s;
  for (size_t i = 0, k; i < n; i += k) {
    if (!u[i]) return "contains a NUL byte";
    if (!(k = utf8_len(u + i, n - i))) return "is not valid UTF-8";
  }
  return NULL;
}

int http_value_check(const char *what, const char *s, size_t n, char *err,
                     size_t len) {
  const char *why = value_problem(s, n);
  if (!why) return 0;
  snprintf(err, len, "%s %s", what, why);
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

/* Splits the query into params, each name and value checked
   (value_problem). Returns their number, or -1 with why in err. */
int http_parse_query(h2o_req_t *req, qparam *ps, char *err, size_t len) {
  if (req->query_at == SIZE_MAX) return 0;
  const char *q = req->path.base + req->query_at + 1;
  const char *end = req->path.base + req->path.len;
  int n = 0;
  while (q < end) {
    const char *amp = memchr(q, '&', (size_t)(end - q));
    if (!amp) amp = end;
    if (amp > q) {
      if (n == MAX_PARAMS) {
        snprintf(err, len, "too many query parameters (max %d)", MAX_PARAMS);
        return -1;
      }
      const char *eq = memchr(q, '=', (size_t)(amp - q));
      const char *ke = eq ? eq : amp;
      qparam *p = &ps[n];
      if (decode(&req->pool, q, (size_t)(ke - q), &p->key, &p->key_len) ||
          decode(&req->pool, eq ? eq + 1 : amp, eq ? (size_t)(amp - eq - 1) : 0,
                 &p->value, &p->value_len)) {
        snprintf(err, len, "malformed percent-encoding in the query");
        return -1;
      }
      char what[80];
      if (http_value_check("a query parameter's name", p->key, p->key_len,
                           err, len))
        return -1;
      snprintf(what, sizeof what, "the value of '%.*s'",
               (int)(p->key_len < 40 ? p->key_len : 40), p->key);
      if (http_value_check(what, p->value, p->value_len, err, len)) return -1;
      n++;
    }
    q = amp + 1;
  }
  return n;
}

const qparam *http_find_param(const qparam *ps, int n, const char *key) {
  for (int i = 0; i < n; i++)
    if (!strcmp(ps[i].key, key)) return &ps[i];
  return NULL;
}

int http_parse_count(const char *s, size_t n, int64_t *out) {
  if (!n) return -1;
  int64_t v = 0;
  int over = 0;
  for (size_t i = 0; i < n; i++) {
    if (s[i] < '0' || s[i] > '9') return -1;
    if (v > (HTTP_COUNT_MAX - (s[i] - '0')) / 10)
      over = 1; /* (keep reading: "99...9x" is not a number at all) */
    else
      v = v * 10 + (s[i] - '0');
  }
  if (over) return -2;
  *out = v;
  return 0;
}

int http_count_error(h2o_req_t *req, const char *name, const char *value,
                     size_t n, int why) {
  if (why == -2)
    return http_send_error(req, 400, "%s=%.*s is out of range (0..%lld)",
                           name, (int)(n < 40 ? n : 40), value,
                           (long long)HTTP_COUNT_MAX), -1;
  return http_send_error(req, 400, "%s must be an integer in 0..%lld", name,
                         (long long)HTTP_COUNT_MAX), -1;
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

/* A connection's peer as text, and whether it is a loopback address. */
typedef struct peer_text {
  const h2o_conn_t *conn; /* the connection it was made for */
  uint64_t id;            /* and its id (a freed connection's memory is
                             reused; its id is not) */
  int ok, loop;           /* ok: getpeername gave an address */
  char text[INET6_ADDRSTRLEN];
} peer_text;

/* req's connection's peer, formatted once per connection: the worker
   keeps the last connection's (a connection's requests come in a row,
   so a flood of denials logged costs no inet_ntop per line). */
static const peer_text *peer_of(h2o_req_t *req) {
  static _Thread_local peer_text last;
  if (last.conn == req->conn && last.id == req->conn->id) return &last;
  struct sockaddr_storage ss;
  socklen_t sl = peer(req, &ss);
  last.conn = req->conn;
  last.id = req->conn->id;
  last.ok = sl > 0;
  last.loop = last.ok && is_loopback((struct sockaddr *)&ss);
  last.text[0] = '\0';
  if (!last.ok) return &last;
  if (ss.ss_family == AF_INET)
    inet_ntop(AF_INET, &((struct sockaddr_in *)&ss)->sin_addr, last.text,
              sizeof last.text);
  else if (ss.ss_family == AF_INET6)
    inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&ss)->sin6_addr, last.text,
              sizeof last.text);
  return &last;
}

/* The client's address as text, per $remote_addr's rules. */
static void remote_addr(h2o_req_t *req, server *srv, char *buf, size_t len) {
  const peer_text *pt = peer_of(req);
  int trust = srv->o.trust_forwarded || pt->loop;
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
  size_t n = strlen(pt->text); /* (no snprintf: this runs per line) */
  if (n >= len) n = len - 1;
  memcpy(buf, pt->text, n);
  buf[n] = '\0';
}

void http_client_addr(h2o_req_t *req, server *srv, char *buf, size_t len) {
  remote_addr(req, srv, buf, len);
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
int http_admin_check(h2o_req_t *req, server *srv) {
  const char *tok = srv->o.admin_token;
  if (tok) {
    const h2o_iovec_t *a = header(req, H2O_STRLIT("authorization"));
    size_t tl = strlen(tok);
    unsigned diff = 1;
    if (a && a->len == 7 + tl && !strncasecmp(a->base, "Bearer ", 7)) {
      diff = 0;
      for (size_t i = 0; i < tl; i++) diff |= (unsigned)(a->base[7 + i] ^ tok[i]);
    }
    return diff ? 401 : 0;
  }
  struct sockaddr_storage ss;
  if (peer(req, &ss) > 0 && is_loopback((struct sockaddr *)&ss)) return 0;
  return 403;
}

int http_admin_ok(h2o_req_t *req, server *srv, int *status) {
  *status = http_admin_check(req, srv);
  if (*status == 401)
    http_add_header(req, "www-authenticate", H2O_STRLIT("Bearer realm=\"sluice\""));
  return *status == 0;
}

/*
 * Reads "domain=D&K1=V1&...[&hits=N]" into *er (one descriptor, in *d; none
 * when a value names a missing header). 0, or -1 after sending a 400.
 */
int http_query_request(h2o_req_t *req, server *srv, eng_request *er,
                         eng_descriptor *d) {
  qparam ps[MAX_PARAMS];
  char err[200];
  int n = http_parse_query(req, ps, err, sizeof err);
  if (n < 0) return http_send_error(req, 400, "%s", err), -1;
  const qparam *dom = http_find_param(ps, n, "domain");
  if (!dom || !dom->value_len)
    return http_send_error(req, 400, "missing domain= in the query"), -1;
  d->n = 0;
  d->hits = -1;
  int64_t hits = 1;
  int skip = 0;
  for (int i = 0; i < n; i++) {
    if (&ps[i] == dom) continue;
    if (!strcmp(ps[i].key, "wait") || !strcmp(ps[i].key, "max_wait"))
      continue; /* the wait mode's (http_wait_cap) */
    if (!strcmp(ps[i].key, "hits")) {
      int why = http_parse_count(ps[i].value, ps[i].value_len, &hits);
      if (why) return http_count_error(req, "hits", ps[i].value,
                                       ps[i].value_len, why);
      continue;
    }
    if (!ps[i].key_len)
      return http_send_error(req, 400, "an empty descriptor key in the query"), -1;
    if (d->n == ENG_MAX_ENTRIES)
      return http_send_error(req, 400, "at most %d descriptor entries",
                        ENG_MAX_ENTRIES), -1;
    char *v = ps[i].value;
    size_t vl = ps[i].value_len;
    if (!resolve(req, srv, &v, &vl)) skip = 1;
    if (ps[i].key_len > srv->o.max_key || vl > srv->o.max_key)
      return http_send_error(req, 400, "a key or value is longer than %zu bytes",
                        srv->o.max_key), -1;
    d->entries[d->n++] = (cfg_entry){ps[i].key, ps[i].key_len, v, vl};
  }
  if (!d->n)
    return http_send_error(req, 400, "no descriptor entries (KEY=VALUE) in the "
                                "query"), -1;
  *er = (eng_request){dom->value, dom->value_len, d, skip ? 0 : 1, hits};
  return 0;
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

/* hits_addend: a number, a string of digits (protobuf's JSON for 64-bit
   numbers) or protobuf's wrapper {"value": n}. 1 with *out, 0 when
   absent, or http_parse_count's -1 (not a count) or -2 (out of range). */
static int json_hits(json_t *o, int64_t *out) {
  json_t *v = json_object_get(o, "hits_addend");
  if (!v) v = json_object_get(o, "hitsAddend");
  if (!v) return 0;
  if (json_is_object(v)) v = json_object_get(v, "value");
  if (json_is_string(v)) {
    int why = http_parse_count(json_string_value(v), json_string_length(v),
                               out);
    return why ? why : 1;
  }
  if (!json_is_integer(v)) return -1;
  json_int_t x = json_integer_value(v);
  if (x < 0 || x > HTTP_COUNT_MAX) return -2;
  *out = x;
  return 1;
}

/* The 400 for a hits_addend json_hits refused (why: -1 or -2). */
static int hits_error(h2o_req_t *req, const char *where, int why) {
  return http_send_error(req, 400, "%s\"hits_addend\" %s (0..%lld)", where,
                         why == -2 ? "is out of range"
                                   : "must be an integer",
                         (long long)HTTP_COUNT_MAX), -1;
}

/* The 400 for a body jansson could not parse: a number too large and
   bytes that are not UTF-8 said as the query's are. */
static int json_error(h2o_req_t *req, const json_error_t *e) {
  switch (json_error_code(e)) {
  case json_error_numeric_overflow:
    return http_send_error(req, 400, "a number at line %d column %d is out "
                           "of range", e->line, e->column), -1;
  case json_error_invalid_utf8:
    return http_send_error(req, 400, "the body is not valid UTF-8 (at line "
                           "%d column %d)", e->line, e->column), -1;
  default:
    return http_send_error(req, 400, "malformed JSON at line %d column %d: "
                           "%s", e->line, e->column, e->text), -1;
  }
}

/*
 * Reads a JSON body in Envoy's RLS shape ({"domain", "descriptors": [...],
 * "hits_addend"?}) into *er: its descriptors in ds, skipped[i] set for
 * those left out because a value named a missing header, *asked = how
 * many the body had. *root holds the strings *er points to (json_decref it
 * after use, also after a failure). 0, or -1 after sending a 400 or 413.
 */
int http_body_request(h2o_req_t *req, server *srv, json_t **root,
                        eng_request *er, eng_descriptor *ds, int *skipped,
                        size_t *asked) {
  *root = NULL;
  if (req->entity.len > srv->o.max_body)
    return http_send_error(req, 413, "body larger than %zu bytes",
                      srv->o.max_body), -1;
  json_error_t jerr;
  /* NULs are let through jansson to be refused below as the query's are,
     naming the value. */
  *root = json_loadb(req->entity.base, req->entity.len,
                     JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &jerr);
  if (!*root) return json_error(req, &jerr);
  char err[200];
  int bad = 0;
  size_t dlen = 0;
  size_t nd = 0;
  int64_t hits = 1;
  json_t *o = *root;
  const char *domain = json_is_object(o) ? json_str(o, "domain", &dlen, &bad)
                                         : NULL;
  json_t *descs = json_is_object(o) ? json_object_get(o, "descriptors") : NULL;
  if (!json_is_object(o))
    return http_send_error(req, 400, "the body must be a JSON object"), -1;
  if (!domain || !dlen || bad)
    return http_send_error(req, 400, "\"domain\" must be a non-empty string"), -1;
  if (http_value_check("the value of 'domain'", domain, dlen, err, sizeof err))
    return http_send_error(req, 400, "%s", err), -1;
  int h = json_hits(o, &hits);
  if (h < 0) return hits_error(req, "", h);
  if (h == 1 && hits == 0) hits = 1; /* Envoy: 0 means the default, 1 */
  if (!json_is_array(descs) || json_array_size(descs) == 0 ||
      json_array_size(descs) > ENG_MAX_DESCRIPTORS)
    return http_send_error(req, 400, "\"descriptors\" must be an array of 1 to %d "
                                "descriptors", ENG_MAX_DESCRIPTORS), -1;
  for (size_t i = 0; i < json_array_size(descs); i++) {
    json_t *d = json_array_get(descs, i);
    json_t *entries = json_is_object(d) ? json_object_get(d, "entries") : NULL;
    skipped[i] = 0;
    if (!json_is_array(entries) || json_array_size(entries) == 0 ||
        json_array_size(entries) > ENG_MAX_ENTRIES)
      return http_send_error(req, 400, "descriptor %zu: \"entries\" must be an "
                                  "array of 1 to %d {key, value}", i,
                        ENG_MAX_ENTRIES), -1;
    eng_descriptor *e = &ds[nd];
    e->n = 0;
    e->hits = -1;
    int64_t dh;
    int got = json_hits(d, &dh);
    if (got < 0) {
      char where[40];
      snprintf(where, sizeof where, "descriptor %zu: ", i);
      return hits_error(req, where, got);
    }
    if (got) e->hits = dh; /* per descriptor: 0 is a real 0 (a peek) */
    int skip = 0;
    for (size_t k = 0; k < json_array_size(entries); k++) {
      json_t *en = json_array_get(entries, k);
      size_t kl = 0, vl = 0;
      const char *key = json_is_object(en) ? json_str(en, "key", &kl, &bad) : NULL;
      const char *val = json_is_object(en) ? json_str(en, "value", &vl, &bad) : NULL;
      if (!key || !kl || bad)
        return http_send_error(req, 400, "descriptor %zu entry %zu: \"key\" must "
                                    "be a non-empty string", i, k), -1;
      if (!val) {
        val = "";
        vl = 0;
      }
      char what[80];
      snprintf(what, sizeof what, "the value of '%.*s'", (int)(kl < 40 ? kl : 40),
               key);
      if (http_value_check("a descriptor key", key, kl, err, sizeof err) ||
          http_value_check(what, val, vl, err, sizeof err))
        return http_send_error(req, 400, "%s", err), -1;
      char *v = (char *)val;
      if (!resolve(req, srv, &v, &vl)) skip = 1;
      if (kl > srv->o.max_key || vl > srv->o.max_key)
        return http_send_error(req, 400, "a key or value is longer than %zu bytes",
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

/* A wait switch's value: 1 for "1"/"true", 0 for "0"/"false", -1 else. */
static int wait_flag(const char *v, size_t n) {
  if ((n == 1 && v[0] == '1') || (n == 4 && !strncasecmp(v, "true", 4)))
    return 1;
  if ((n == 1 && v[0] == '0') || (n == 5 && !strncasecmp(v, "false", 5)))
    return 0;
  return -1;
}

/* A cap written as a duration (max_wait=, Sluice-Wait): lowers *cap. 0,
   or -1 after sending the 400. */
static int wait_limit(h2o_req_t *req, const char *what, const char *v,
                      size_t n, int64_t *cap) {
  int64_t ns;
  if (duration_parse(v, n, SL_PERIOD_MAX_NS, &ns))
    return http_send_error(req, 400, "%s '%.*s' is not a duration (e.g. "
                                     "500ms, 5s; a bare number is ms)",
                           what, (int)(n < 40 ? n : 40), v),
           -1;
  if (ns < *cap) *cap = ns;
  return 0;
}

int http_wait_cap(h2o_req_t *req, server *srv, int64_t *cap) {
  *cap = (int64_t)srv->o.max_wait_ms * 1000000;
  int on = 0;
  ssize_t h = h2o_find_header_by_str(&req->headers, H2O_STRLIT("sluice-wait"),
                                     -1);
  if (h >= 0) {
    const h2o_iovec_t *v = &req->headers.entries[h].value;
    int f = wait_flag(v->base, v->len);
    if (f < 0 && wait_limit(req, "Sluice-Wait", v->base, v->len, cap))
      return -1;
    on = f != 0;
  }
  size_t q = req->query_at;
  if (q != SIZE_MAX && memmem(req->path.base + q, req->path.len - q, "wait",
                              4)) {
    qparam ps[MAX_PARAMS];
    char err[200];
    int n = http_parse_query(req, ps, err, sizeof err);
    if (n < 0) return http_send_error(req, 400, "%s", err), -1;
    const qparam *w = http_find_param(ps, n, "wait"),
                 *m = http_find_param(ps, n, "max_wait");
    if (w) {
      int f = wait_flag(w->value, w->value_len);
      if (f < 0)
        return http_send_error(req, 400, "wait=%.*s: expected 1, true, 0 or "
                                         "false",
                               (int)(w->value_len < 40 ? w->value_len : 40),
                               w->value),
               -1;
      on = f;
    }
    if (m) {
      if (wait_limit(req, "max_wait", m->value, m->value_len, cap)) return -1;
      if (!w) on = 1;
    }
  }
  return on && srv->o.max_wait_ms > 0;
}
