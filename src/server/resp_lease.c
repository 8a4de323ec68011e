/*
 * resp_lease.c — the RESP commands of concurrency leases:
 *
 *   SL.ACQUIRE key policy   [allowed, limit, in_flight, lease, retry_after_ms]
 *                           lease: the token (lease.h), nil when denied
 *   SL.RELEASE key lease    [released, limit, in_flight]   released 0: no
 *                           such live lease (unknown, released or expired;
 *                           nothing changes)
 *   SL.RENEW key lease      [renewed, limit, in_flight, ttl_ms]
 *
 * The lease's token names its ad-hoc policy, so release and renew need
 * only the key and the token. They decide through resp.c's resp_decide:
 * in fleet mode the reply waits for Redis in command order.
 */
#include <string.h>

#include "lease.h"
#include "resp_conn.h"

static void reply_acquire(resp_conn *c, const eng_result *r) {
  const sl_decision *d = &r->st[0].d;
  out_hdr(c, '*', 5);
  out_int(c, d->allowed);
  out_int(c, d->limit);
  out_int(c, d->limit - d->remaining); /* in flight, this one included */
  if (r->lease) {
    char tok[LEASE_TOKEN_MAX];
    out_bulk(c, tok, lease_token(tok, r->lease, r->st[0].policy_str));
  } else {
    out_null(c);
  }
  out_int(c, ns_to_ms_up(d->retry_after_ns));
}

static void reply_lease(resp_conn *c, const eng_result *r, int renew) {
  const sl_decision *d = &r->st[0].d;
  out_hdr(c, '*', renew ? 4 : 3);
  out_int(c, r->allowed);
  out_int(c, d->limit);
  out_int(c, d->limit - d->remaining);
  if (renew) out_int(c, r->allowed ? ns_to_ms_up(r->st[0].policy->period_ns) : 0);
}

static void reply_release(resp_conn *c, const eng_result *r) {
  reply_lease(c, r, 0);
}

static void reply_renew(resp_conn *c, const eng_result *r) {
  reply_lease(c, r, 1);
}

void cmd_sl_acquire(resp_conn *c, const resp_cmd *cmd) {
  static const char want[] = "concurrency:";
  if (cmd->len[2] < sizeof want - 1 ||
      memcmp(cmd->argv[2], want, sizeof want - 1)) {
    out_err(c, "ERR SL.ACQUIRE takes a concurrency policy "
               "(concurrency:N[:lease=DURATION]); SL.THROTTLE decides rates");
    return;
  }
  eng_query q = {.kind = ENG_QUERY_POLICY,
                 .key = cmd->argv[1],
                 .key_len = cmd->len[1],
                 .spec = cmd->argv[2],
                 .spec_len = cmd->len[2],
                 .cost = 1,
                 .now = clock_wall_ns()};
  resp_decide(c, &q, reply_acquire);
}

/* SL.RELEASE and SL.RENEW: the token names the lease and its policy. */
static void lease_cmd(resp_conn *c, const resp_cmd *cmd, int op) {
  uint64_t id;
  const char *pol;
  size_t plen;
  if (lease_token_parse(cmd->argv[2], cmd->len[2], &id, &pol, &plen) ||
      !pol) {
    out_err(c, "ERR invalid lease: give back the token SL.ACQUIRE returned");
    return;
  }
  eng_query q = {.kind = ENG_QUERY_POLICY,
                 .key = cmd->argv[1],
                 .key_len = cmd->len[1],
                 .spec = pol,
                 .spec_len = plen,
                 .now = clock_wall_ns(),
                 .lease_op = op,
                 .lease = id};
  resp_decide(c, &q, op == ENG_LEASE_RELEASE ? reply_release : reply_renew);
}

void cmd_sl_release(resp_conn *c, const resp_cmd *cmd) {
  lease_cmd(c, cmd, ENG_LEASE_RELEASE);
}

void cmd_sl_renew(resp_conn *c, const resp_cmd *cmd) {
  lease_cmd(c, cmd, ENG_LEASE_RENEW);
}
