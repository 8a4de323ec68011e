/*
 * sim_json.c — a run of the simulator as one JSON document, what the
 * daemon's POST /v1/sim answers and the page at /ui/ draws:
 *
 *   {"description": "...", "keys": ["client", ...],
 *    "fleet": null | {"nodes", "lb", "store", "sync_ms", "on_store_error"},
 *    "policies": [{"name", "spec", "algorithm", "limit", "burst",
 *                  "period_ms", "level": "tokens|queue|count|estimate"}],
 *    "store": [[t_ms, "down"|"up"], ...],
 *    "events": [[t_ms, policy, key, node, result, level, wait_ms, via], ...],
 *    "summary": [{"policy", "allowed", "denied", "delayed",
 *                 "max_in_window", "limit", "period_ms", "max_delay_ms",
 *                 "line": "summary policy=... (as sluice sim prints it)"}]}
 *
 * An event is one decision, in the order they were made: result 0 allowed,
 * 1 allowed after a delay (leaky bucket), 2 denied; level is the decided
 * state after it, in the policy's terms (sim_level_of); wait_ms the delay,
 * or the Retry-After of a denial; via how it was reached (VIA_*). Times
 * are milliseconds as decimals (exact: nanoseconds would not fit a
 * JavaScript number). Events are numbers only, so a run of many thousand
 * decisions stays a compact document; strings come from the scenario and
 * are escaped here byte by byte (bytes above 0x7f as \u00XX), so any
 * input, valid UTF-8 or not, gives valid JSON.
 */
#include <string.h>

#include "../base/json.h"
#include "sim_impl.h"

/* ns as milliseconds: an integer, or a decimal fraction without trailing
   zeros (ns >= 0). */
static void put_ms(FILE *f, int64_t ns) {
  long long whole = (long long)(ns / NS_MS), frac = (long long)(ns % NS_MS);
  if (frac == 0) {
    fprintf(f, "%lld", whole);
    return;
  }
  char b[8];
  snprintf(b, sizeof b, "%06lld", frac);
  size_t n = strlen(b);
  while (n && b[n - 1] == '0') b[--n] = '\0';
  fprintf(f, "%lld.%s", whole, b);
}

static void put_fleet(FILE *f, const sim_fleet *fl) {
  static const char *const lb[] = {"round-robin", "sticky"};
  static const char *const mode[] = {"local", "exact", "sync"};
  static const char *const onerr[] = {"allow", "deny", "local"};
  if (!fl->nodes) {
    fputs("null", f);
    return;
  }
  fprintf(f, "{\"nodes\":%d,\"lb\":\"%s\",\"store\":\"%s\",\"sync_ms\":",
          fl->nodes, lb[fl->lb], mode[fl->mode]);
  put_ms(f, fl->sync_ns);
  fprintf(f, ",\"on_store_error\":\"%s\",\"text\":", onerr[fl->on_error]);
  json_bytes_file(f, fl->text);
  fputc('}', f);
}

void sim_json_head(const run_state *rs) {
  const sim_scenario *sc = rs->sc;
  FILE *f = rs->opts->json;
  fputs("{\"description\":", f);
  json_bytes_file(f, sc->description);
  fputs(",\"keys\":[", f);
  for (size_t k = 0; k < sc->nkeys; k++) {
    if (k) fputc(',', f);
    json_bytes_file(f, sc->keys[k]);
  }
  fputs("],\"fleet\":", f);
  put_fleet(f, &sc->fleet);
  fputs(",\"policies\":[", f);
  for (int p = 0; p < sc->npol; p++) {
    const sl_policy *pol = &sc->pol[p].pol;
    fprintf(f, "%s{\"name\":", p ? "," : "");
    json_bytes_file(f, sc->pol[p].name);
    fputs(",\"spec\":", f);
    json_bytes_file(f, sc->pol[p].spec);
    fprintf(f, ",\"algorithm\":\"%s\",\"limit\":%u,\"burst\":%u,"
               "\"capacity\":%lld,\"period_ms\":",
            sl_algo_name(pol->algo), pol->limit, pol->burst,
            (long long)sc->pol[p].capacity);
    put_ms(f, pol->period_ns);
    fprintf(f, ",\"level\":\"%s\"}", sim_level_name(pol->algo));
  }
  fputs("],\"store\":[", f);
  int first = 1;
  for (size_t i = 0; i < sc->ncmd; i++) {
    if (sc->cmd[i].kind != CMD_STORE) continue;
    fputs(first ? "[" : ",[", f);
    first = 0;
    put_ms(f, sc->cmd[i].t0);
    fprintf(f, ",\"%s\"]", sc->cmd[i].cost ? "down" : "up");
  }
  fputs("],\"events\":[", f);
}

void sim_json_event(run_state *rs, int p, int64_t t, uint32_t key,
                    const sl_decision *d) {
  FILE *f = rs->opts->json;
  int result = !d->allowed ? 2 : d->delay_ns > 0 ? 1 : 0;
  fputs(rs->any ? ",[" : "[", f);
  put_ms(f, t);
  fprintf(f, ",%d,%u,%d,%d,%lld,", p, key, rs->node, result,
          (long long)sim_level_of(&rs->sc->pol[p].pol, d));
  put_ms(f, d->allowed ? d->delay_ns : d->retry_after_ns);
  fprintf(f, ",%d]", rs->via);
}

void sim_json_tail(const run_state *rs) {
  const sim_scenario *sc = rs->sc;
  FILE *f = rs->opts->json;
  fputs("],\"summary\":[", f);
  for (int p = 0; p < sc->npol; p++) {
    const sl_policy *pol = &sc->pol[p].pol;
    char line[256];
    snprintf(line, sizeof line,
             "summary policy=%s allowed=%llu denied=%llu max_in_window=%lld",
             sc->pol[p].name, (unsigned long long)rs->allowed[p],
             (unsigned long long)rs->denied[p], (long long)rs->win[p].worst);
    fprintf(f, "%s{\"policy\":", p ? "," : "");
    json_bytes_file(f, sc->pol[p].name);
    fprintf(f, ",\"allowed\":%llu,\"denied\":%llu,\"delayed\":%llu,"
               "\"max_in_window\":%lld,\"limit\":%u,\"period_ms\":",
            (unsigned long long)rs->allowed[p],
            (unsigned long long)rs->denied[p],
            (unsigned long long)rs->delayed[p], (long long)rs->win[p].worst,
            pol->limit);
    put_ms(f, pol->period_ns);
    fputs(",\"max_delay_ms\":", f);
    put_ms(f, rs->max_delay[p]);
    fputs(",\"line\":", f);
    json_bytes_file(f, line);
    fputc('}', f);
  }
  fputs("]}\n", f);
}
