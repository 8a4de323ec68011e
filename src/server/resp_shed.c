/*
 * resp_shed.c — load shedding over the Redis protocol (docs/shedding.md):
 * SL.UTILISATION, the protected service's report of its utilisation (an
 * admin command: a report decides whose requests are shed), and the
 * words SL.CHECK's shed answer is made of.
 *
 *   SL.UTILISATION domain utilisation [SOURCE name] [TTL ms]
 *     -> the level recorded, as a fraction ("0.930")
 */
#include <stdio.h>
#include <string.h>

#include "../base/clock.h"
#include "resp_conn.h"
#include "server.h"

#define MAX_TTL_MS 86400000LL

void cmd_sl_utilisation(resp_conn *c, const resp_cmd *cmd) {
  const char *source = "";
  size_t slen = 0;
  int64_t ttl_ms = 0;
  for (int i = 3; i < cmd->argc; i += 2) {
    if (i + 1 >= cmd->argc) {
      out_err(c, "ERR syntax error (SL.UTILISATION domain utilisation "
                 "[SOURCE name] [TTL ms])");
      return;
    }
    if (resp_arg_is(cmd, i, "SOURCE")) {
      source = cmd->argv[i + 1];
      slen = cmd->len[i + 1];
    } else if (resp_arg_is(cmd, i, "TTL")) {
      ttl_ms = 0;
      size_t k = 0;
      for (; k < cmd->len[i + 1] && k < 10 && cmd->argv[i + 1][k] >= '0' &&
             cmd->argv[i + 1][k] <= '9';
           k++)
        ttl_ms = ttl_ms * 10 + (cmd->argv[i + 1][k] - '0');
      if (k != cmd->len[i + 1] || ttl_ms <= 0 || ttl_ms > MAX_TTL_MS) {
        out_err(c, "ERR TTL must be 1..%lld milliseconds", MAX_TTL_MS);
        return;
      }
    } else {
      out_err(c, "ERR syntax error (SL.UTILISATION domain utilisation "
                 "[SOURCE name] [TTL ms])");
      return;
    }
  }
  uint32_t pm;
  if (sl_shed_parse_level(cmd->argv[2], cmd->len[2], &pm)) {
    out_err(c, "ERR utilisation must be a fraction such as 0.93 or a "
               "percentage such as 93%% (0 to 1000%%)");
    return;
  }
  char msg[ENG_MSG_MAX];
  if (engine_shed_report(c->w->et, cmd->argv[1], cmd->len[1], source, slen, pm,
                         ttl_ms * 1000000, clock_wall_ns(), msg, sizeof msg)) {
    out_err(c, "ERR %s", msg);
    return;
  }
  char v[32];
  int n = snprintf(v, sizeof v, "%u.%03u", pm / 1000, pm % 1000);
  out_bulk(c, v, (size_t)n);
}

void reply_shed(resp_conn *c, const eng_result *r) {
  char rule[96];
  int n = snprintf(rule, sizeof rule, "shed:%s", r->shed.cls);
  out_hdr(c, '*', 6);
  out_int(c, 0);
  out_int(c, -1);
  out_int(c, -1);
  out_int(c, ns_to_ms_up(r->shed.retry_after_ns));
  out_int(c, 0);
  out_bulk(c, rule, n > 0 && (size_t)n < sizeof rule ? (size_t)n : 0);
}
