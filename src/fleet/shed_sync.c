/*
 * shed_sync.c — fleet usage through Redis: each domain's window counter
 * is the key "sluice:shed:{DOMAIN}:INDEX" (INDEX the window's number
 * since the epoch; the braces keep a domain's windows in one cluster
 * slot), which every daemon INCRBYs with what it charged since its last
 * round and which expires three windows after its last write. A round is
 * one pipeline per domain: INCRBY the previous window (what was charged
 * there after the last round) and the current one (their answers are the
 * fleet's totals), PEXPIRE both. It connects at the first domain that
 * needs it, so a daemon whose config sheds nothing never does.
 *
 * It runs on the main thread, on a blocking connection with --store's
 * timeout; a failed round leaves each daemon with its own usage and the
 * others' as last seen, which docs/shedding.md calls the fallback.
 */
#include "shed_sync.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../base/clock.h"
#include "../base/log.h"

#define RETRY_NS 1000000000LL

struct fleet_shed_sync {
  rc_config cfg;
  redisContext *rc;
  int64_t retry_at; /* mono ns: no connection attempt before */
  int logged;       /* the failure was logged (once until it works) */
};

fleet_shed_sync *fleet_shed_sync_new(const rc_config *c) {
  fleet_shed_sync *s = calloc(1, sizeof *s);
  if (s) s->cfg = *c;
  return s;
}

void fleet_shed_sync_free(fleet_shed_sync *s) {
  if (!s) return;
  if (s->rc) redisFree(s->rc);
  free(s);
}

/* An integer reply's value (a bulk of digits too, GET's), or 0. */
static uint64_t reply_u64(const redisReply *r) {
  if (!r) return 0;
  if (r->type == REDIS_REPLY_INTEGER) return r->integer > 0 ? (uint64_t)r->integer : 0;
  if (r->type == REDIS_REPLY_STRING) return strtoull(r->str, NULL, 10);
  return 0;
}

/* Connects when there is no connection (at most once a second). 0, or
   -1. */
static int connect_once(fleet_shed_sync *s) {
  if (s->rc) return 0;
  int64_t mono = clock_mono_ns();
  if (mono < s->retry_at) return -1;
  char err[256];
  s->rc = rc_connect_sync(&s->cfg, &s->cfg.seeds[0], err, sizeof err);
  if (s->rc) return 0;
  s->retry_at = mono + RETRY_NS;
  if (!s->logged)
    log_msg("warn", "load shedding: fleet usage stays local: %s", err);
  s->logged = 1;
  return -1;
}

/* engine_shed_sync's store function: one domain's exchange. */
static int exchange(void *ud, const char *domain, int64_t index,
                    int64_t window_ns, uint64_t push_prev, uint64_t push,
                    uint64_t *fleet_prev, uint64_t *fleet) {
  fleet_shed_sync *s = ud;
  if (connect_once(s)) return -1;
  char cur[512], prev[512];
  snprintf(cur, sizeof cur, "sluice:shed:{%s}:%lld", domain, (long long)index);
  snprintf(prev, sizeof prev, "sluice:shed:{%s}:%lld", domain,
           (long long)index - 1);
  long long ttl_ms = window_ns / 1000000 * 3;
  redisAppendCommand(s->rc, "INCRBY %s %llu", prev,
                     (unsigned long long)push_prev);
  redisAppendCommand(s->rc, "INCRBY %s %llu", cur, (unsigned long long)push);
  redisAppendCommand(s->rc, "PEXPIRE %s %lld", prev, ttl_ms);
  redisAppendCommand(s->rc, "PEXPIRE %s %lld", cur, ttl_ms);
  int ok = 1;
  for (int i = 0; i < 4; i++) {
    redisReply *r = NULL;
    if (redisGetReply(s->rc, (void **)&r) != REDIS_OK) return -1;
    ok &= r && r->type != REDIS_REPLY_ERROR;
    if (i == 0) *fleet_prev = reply_u64(r);
    if (i == 1) *fleet = reply_u64(r);
    freeReplyObject(r);
  }
  return ok ? 0 : -1;
}

int fleet_shed_sync_round(fleet_shed_sync *s, engine *e, int64_t now) {
  int n = engine_shed_sync(e, now, exchange, s);
  if (n < 0 && s->rc) { /* a broken connection is made anew later */
    if (!s->logged)
      log_msg("warn", "load shedding: fleet usage sync failed: %s",
              s->rc->errstr[0] ? s->rc->errstr : "an error reply");
    s->logged = 1;
    redisFree(s->rc);
    s->rc = NULL;
    s->retry_at = clock_mono_ns() + RETRY_NS;
  } else if (n > 0) {
    s->logged = 0;
  }
  return n;
}
