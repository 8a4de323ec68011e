/*
 * resp_top.c — SL.TOP: a rule's heaviest keys over the Redis protocol,
 * from the top keys' tables (topkeys.c); an admin command (its answer
 * names clients' keys).
 *
 *   SL.TOP rule [n] [DECISIONS|DENIALS]
 *
 * answers, as RedisBloom's TOPK.LIST key WITHCOUNT does, a flat array of
 * key, count, key, count... heaviest first (n of them, default 10, at
 * most --top-keys), by decisions unless DENIALS is asked; the count is
 * an upper bound, off by at most N / --top-keys (docs/operations.md).
 * Also the client's address of a RESP decision, for the denial log.
 */
#include <netdb.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "observe.h"
#include "resp_conn.h"

void cmd_sl_top(resp_conn *c, const resp_cmd *cmd) {
  topkeys *t = c->w->srv->obs->top;
  if (!t) {
    out_err(c, "ERR top keys are off (--top-keys 0)");
    return;
  }
  long long n = 10;
  int denials = 0, argc = cmd->argc;
  if (argc >= 3 && (resp_arg_is(cmd, argc - 1, "DENIALS") ||
                    resp_arg_is(cmd, argc - 1, "DECISIONS"))) {
    denials = resp_arg_is(cmd, argc - 1, "DENIALS");
    argc--;
  }
  if (argc > 3) {
    out_err(c, "ERR syntax error (SL.TOP rule [n] [DECISIONS|DENIALS])");
    return;
  }
  if (argc == 3) {
    char num[24], *end;
    size_t len = cmd->len[2] < sizeof num - 1 ? cmd->len[2] : sizeof num - 1;
    memcpy(num, cmd->argv[2], len);
    num[len] = '\0';
    n = strtoll(num, &end, 10);
    if (end == num || *end || cmd->len[2] >= sizeof num - 1 || n < 1) {
      out_err(c, "ERR n must be an integer >= 1");
      return;
    }
  }
  if (cmd->len[1] == 0 || cmd->len[1] > 1024) {
    out_err(c, "ERR the rule must be 1 to 1024 bytes");
    return;
  }
  char rule[1025];
  memcpy(rule, cmd->argv[1], cmd->len[1]);
  rule[cmd->len[1]] = '\0';
  size_t k = topkeys_k(t);
  top_answer *a = malloc(sizeof *a);
  if (!a || topkeys_query(t, rule, (size_t)n < k ? (size_t)n : k,
                          clock_wall_ns(), a)) {
    free(a);
    out_err(c, "ERR out of memory");
    return;
  }
  const topk_item *v = denials ? a->by_denials : a->by_decisions;
  size_t nv = denials ? a->n_den : a->n_dec;
  out_hdr(c, '*', (int64_t)(2 * nv));
  for (size_t i = 0; i < nv; i++) {
    out_cstr(c, v[i].text);
    out_int(c, (long long)v[i].count);
  }
  free(a);
}

void resp_client(void *ud, char *buf, size_t len) {
  resp_conn *c = ud;
  if (!len) return;
  if (c->peer_len < 0) { /* once per connection */
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof ss);
    char host[NI_MAXHOST];
    socklen_t sl = h2o_socket_getpeername(c->sock, (struct sockaddr *)&ss);
    size_t n = sl ? h2o_socket_getnumerichost((struct sockaddr *)&ss, sl, host)
                  : SIZE_MAX;
    if (n == SIZE_MAX || n >= sizeof c->peer) n = 0;
    memcpy(c->peer, host, n);
    c->peer[n] = '\0';
    c->peer_len = (int)n;
  }
  size_t n = (size_t)c->peer_len < len ? (size_t)c->peer_len : len - 1;
  memcpy(buf, c->peer, n);
  buf[n] = '\0';
}
