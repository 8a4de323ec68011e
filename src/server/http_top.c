/*
 * http_top.c — GET /v1/top: who is being limited, from the top keys'
 * tables (topkeys.c). An admin endpoint (bearer token, or loopback only):
 * its answer names clients' keys.
 *
 *   GET /v1/top                  the rules seen in the window, each with
 *                                its decisions, denials and heaviest
 *                                key's share
 *   GET /v1/top?rule=R[&n=N]     rule R's N heaviest keys (default 10),
 *                                by decisions and by denials
 */
#include <stdlib.h>
#include <string.h>

#include "http.h"
#include "observe.h"

int http_top(h2o_req_t *req, server *srv) {
  topkeys *t = srv->obs->top;
  if (!t) return http_send_error(req, 404, "top keys are off (--top-keys 0)");
  qparam ps[MAX_PARAMS];
  char err[200];
  int np = http_parse_query(req, ps, err, sizeof err);
  if (np < 0) return http_send_error(req, 400, "%s", err);
  const qparam *rule = http_find_param(ps, np, "rule");
  const qparam *n_p = http_find_param(ps, np, "n");
  int64_t n = 10;
  if (n_p) {
    int why = http_parse_count(n_p->value, n_p->value_len, &n);
    if (why) return http_count_error(req, "n", n_p->value, n_p->value_len,
                                     why);
    if (n < 1) return http_send_error(req, 400, "n must be at least 1");
  }
  if (rule && (!rule->value_len || rule->value_len > 1024))
    return http_send_error(req, 400, "rule= must name a rule (1 to 1024 "
                                     "bytes)");
  char name[1025];
  if (rule) {
    memcpy(name, rule->value, rule->value_len);
    name[rule->value_len] = '\0';
  }
  size_t k = topkeys_k(t);
  strbuf b = STRBUF_INIT;
  topkeys_json(t, rule ? name : NULL, (size_t)n < k ? (size_t)n : k,
               clock_wall_ns(), &b);
  return http_send_body(req, 200, "application/json", &b);
}
