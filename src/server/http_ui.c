/*
 * http_ui.c — the page at /ui/ and the two endpoints it reads (docs/ui.md):
 *
 *   GET  /ui/            the page: ui/index.html, ui/ui.js, ui/ui.css,
 *                        embedded in the binary at build time (.incbin), so
 *                        it works offline and cannot drift from the daemon
 *   POST /v1/sim         a scenario in `sluice sim`'s language (the body)
 *                        run by the simulator's engine (src/sim/), answered
 *                        as sim_json.c's document; ?seed=N for retry jitter
 *   GET  /v1/sim/examples  the built-in scenarios (sluice sim --example)
 *   GET  /v1/stats       /metrics' figures as JSON, for the live view,
 *                        with each rule's heaviest keys (named only for
 *                        whom GET /v1/top would answer)
 *
 * `--ui off` turns all three into 404s. The page is served with a strict
 * Content-Security-Policy (scripts and styles from this origin only, no
 * inline code, no other origin to connect to), nosniff, and no-store (as
 * every answer of the daemon), so that a new binary's page is never stale.
 *
 * A scenario is untrusted: its size (SIM_HTTP_MAX_BYTES) and its decisions
 * (SIM_HTTP_MAX_DECISIONS per policy, retries counted: the retry-storm
 * example needs 80000) are capped, so one request runs for at most about
 * half a second and answers at most 8 x 100000 events, ~17 MB (the
 * built-in examples: 16-250 KB in milliseconds); a bad one gets 400 with
 * the parser's "line N: message" and "line": N.
 */
#include <stdlib.h>
#include <string.h>

#include "../base/json.h"
#include "../base/num.h"
#include "../sim/sim.h"
#include "http.h"
#include "observe.h"

#define SIM_HTTP_MAX_BYTES ((size_t)64 << 10)
#define SIM_HTTP_MAX_DECISIONS UINT64_C(100000)
#define STATS_TOP_N 5 /* keys per rule and list in /v1/stats' "top" */

/* The page's files, embedded (their paths are relative to the build's
   working directory, the project's root, as the Makefile runs the
   compiler). Each ends with a NUL byte not counted in its length. */
#define EMBED(sym, file)                                                      \
  __asm__(".section .rodata\n.balign 16\n.globl " #sym "_begin\n"            \
          ".hidden " #sym "_begin\n" #sym "_begin:\n.incbin \"" file "\"\n"  \
          ".globl " #sym "_end\n.hidden " #sym "_end\n" #sym "_end:\n"       \
          ".byte 0\n.previous\n");                                           \
  extern const char sym##_begin[] __attribute__((visibility("hidden")));     \
  extern const char sym##_end[] __attribute__((visibility("hidden")))

EMBED(ui_html, "ui/index.html");
EMBED(ui_js, "ui/ui.js");
EMBED(ui_css, "ui/ui.css");

typedef struct ui_asset {
  const char *path, *ctype;
  const char *begin, *end;
} ui_asset;

static const ui_asset assets[] = {
    {"/ui/", "text/html; charset=utf-8", ui_html_begin, ui_html_end},
    {"/ui/ui.js", "text/javascript; charset=utf-8", ui_js_begin, ui_js_end},
    {"/ui/ui.css", "text/css; charset=utf-8", ui_css_begin, ui_css_end},
};

static const char csp[] =
    "default-src 'none'; script-src 'self'; style-src 'self'; "
    "connect-src 'self'; img-src 'self' data:; base-uri 'none'; "
    "form-action 'none'; frame-ancestors 'none'";

/* The headers every answer of this file carries (Cache-Control: no-store
   comes with http_send_body, as on every answer of the daemon: the page is
   small, local, and fetched anew with each binary). */
static void ui_headers(h2o_req_t *req) {
  http_add_header(req, "x-content-type-options", "nosniff", 7);
  http_add_header(req, "content-security-policy", csp, sizeof csp - 1);
  http_add_header(req, "referrer-policy", "no-referrer", 11);
}

/* The 404 of --ui off (0: on). */
static int ui_off(h2o_req_t *req, server *srv) {
  if (srv->o.ui) return 0;
  http_send_error(req, 404, "the page and its endpoints are off (--ui off)");
  return 1;
}

static size_t path_len(const h2o_req_t *req) {
  return req->query_at != SIZE_MAX ? req->query_at : req->path.len;
}

int http_ui(h2o_req_t *req, server *srv) {
  if (ui_off(req, srv)) return 0;
  size_t n = path_len(req);
  if (n == 3) { /* /ui: the page's own address ends with a slash */
    http_add_header(req, "location", "/ui/", 4);
    ui_headers(req);
    ANSWER_BUF(b);
    STRBUF_LIT(&b, "{\"location\":\"/ui/\"}\n");
    return http_send_body(req, 308, "application/json", &b);
  }
  for (size_t i = 0; i < sizeof assets / sizeof assets[0]; i++) {
    if (n != strlen(assets[i].path) || memcmp(req->path.base, assets[i].path, n))
      continue;
    strbuf b = STRBUF_INIT;
    strbuf_add(&b, assets[i].begin, (size_t)(assets[i].end - assets[i].begin));
    ui_headers(req);
    return http_send_body(req, 200, assets[i].ctype, &b);
  }
  return http_send_error(req, 404, "no such file of the page");
}

/* The line number of a parser message "line N: ...", or 0. */
static long error_line(const char *err) {
  int64_t v;
  char digits[16];
  if (strncmp(err, "line ", 5)) return 0;
  size_t n = strspn(err + 5, "0123456789");
  if (n == 0 || n >= sizeof digits || err[5 + n] != ':') return 0;
  memcpy(digits, err + 5, n);
  digits[n] = '\0';
  return parse_int(digits, 0, INT32_MAX, 0, &v) ? 0 : (long)v;
}

/* A 400 for a scenario the parser refused: {"error", "line"}. The
   parser's messages quote the input, which may not be UTF-8: such bytes
   become U+FFFD, so the answer is always valid JSON. */
static int sim_error(h2o_req_t *req, const char *err) {
  strbuf b = STRBUF_INIT, clean = STRBUF_INIT;
  engine_count(worker_of(req->conn->ctx)->et, EC_HTTP_ERRORS, 1);
  for (size_t i = 0, n = strlen(err); i < n;) {
    size_t k = utf8_len((const unsigned char *)err + i, n - i);
    if (k) strbuf_add(&clean, err + i, k);
    else STRBUF_LIT(&clean, "\xef\xbf\xbd");
    i += k ? k : 1;
  }
  strbuf_add(&clean, "", 1);
  STRBUF_LIT(&b, "{\"error\":");
  json_t *s = clean.oom ? NULL : json_string(clean.p);
  strbuf_free(&clean);
  char *quoted = s ? json_dumps(s, JSON_ENCODE_ANY) : NULL;
  if (quoted)
    strbuf_add(&b, quoted, strlen(quoted));
  else
    STRBUF_LIT(&b, "\"out of memory\"");
  free(quoted);
  json_decref(s);
  strbuf_addf(&b, ",\"line\":%ld}\n", error_line(err));
  ui_headers(req);
  return http_send_body(req, 400, "application/json", &b);
}

int http_sim(h2o_req_t *req, server *srv) {
  if (ui_off(req, srv)) return 0;
  qparam ps[MAX_PARAMS];
  char err[512];
  int np = http_parse_query(req, ps, err, sizeof err);
  if (np < 0) return http_send_error(req, 400, "%s", err);
  sim_options so = {.name = "page", .summary_only = 1, .seed = 1};
  const qparam *seed = http_find_param(ps, np, "seed");
  int64_t v;
  if (seed) {
    /* (a decoded value is NUL-terminated, and has no NUL of its own) */
    if (parse_int(seed->value, 0, INT64_MAX, 0, &v))
      return http_send_error(req, 400, "seed must be an integer from 0 to "
                             "%lld", (long long)INT64_MAX);
    so.seed = (uint64_t)v;
  }
  if (req->entity.len > SIM_HTTP_MAX_BYTES)
    return http_send_error(req, 413, "the scenario is larger than %zu bytes",
                           SIM_HTTP_MAX_BYTES);
  if (req->entity.len == 0)
    return http_send_error(req, 400, "the body must be a scenario, e.g. "
                           "'policy api gcra:10/s' then 'burst 20'");
  sim_scenario *sc;
  if (sim_parse(req->entity.base, req->entity.len, SIM_HTTP_MAX_DECISIONS, &sc,
                err, sizeof err))
    return sim_error(req, err);
  strbuf b = STRBUF_INIT;
  char *doc = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&doc, &len);
  so.json = f;
  int rc = f ? sim_run(sc, &so, f, err, sizeof err) : -1;
  sim_free(sc);
  if (f && fclose(f) != 0) rc = -1;
  if (rc) {
    free(doc);
    return http_send_error(req, 503, "the simulator could not run: %s",
                           f ? err : "out of memory");
  }
  b.p = doc; /* (the document's owner from now on) */
  b.len = len;
  b.cap = len + 1;
  ui_headers(req);
  return http_send_body(req, 200, "application/json", &b);
}

int http_sim_examples(h2o_req_t *req, server *srv) {
  if (ui_off(req, srv)) return 0;
  json_t *list = json_array();
  for (size_t i = 0; list && i < sim_nexamples; i++)
    json_array_append_new(list, json_pack("{s:s,s:s,s:s}", "name",
                                          sim_examples[i].name, "what",
                                          sim_examples[i].what, "text",
                                          sim_examples[i].text));
  char *text = list ? json_dumps(list, JSON_COMPACT) : NULL;
  json_decref(list);
  strbuf b = STRBUF_INIT; /* (the text's owner from now on) */
  b.p = text;
  b.len = text ? strlen(text) : 0;
  b.cap = b.len + 1;
  b.oom = text == NULL;
  ui_headers(req);
  return http_send_body(req, 200, "application/json", &b);
}

/* Appends "top" to the metrics' document in b (which ends "}\n"): the
   heaviest keys of each rule, named only for a request that GET /v1/top
   would answer (it names clients' keys), else known by their ids. */
static void stats_top(h2o_req_t *req, server *srv, strbuf *b) {
  if (b->oom || b->len < 2 || b->p[b->len - 2] != '}') return;
  b->len -= 2;
  STRBUF_LIT(b, ",\"top\":");
  topkeys *t = srv->obs->top;
  if (!t)
    STRBUF_LIT(b, "{\"enabled\":false}");
  else if (topkeys_stats_json(t, STATS_TOP_N, clock_wall_ns(),
                              http_admin_check(req, srv) == 0, b))
    b->oom = 1;
  STRBUF_LIT(b, "}\n");
}

int http_stats(h2o_req_t *req, server *srv) {
  if (ui_off(req, srv)) return 0;
  size_t len = 0;
  topkeys_sync(srv->obs->top); /* (its metrics as of now) */
  char *text = engine_metrics_json(srv->eng, &len);
  strbuf b = STRBUF_INIT; /* (the text's owner from now on) */
  b.p = text;
  b.len = len;
  b.cap = len + 1;
  b.oom = text == NULL;
  stats_top(req, srv, &b);
  ui_headers(req);
  return http_send_body(req, 200, "application/json", &b);
}
