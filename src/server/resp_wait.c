/*
 * resp_wait.c — the wait mode over RESP: `SL.THROTTLE key policy [cost]
 * WAIT [max_wait]` and `SL.CHECK ... WAIT [max_wait]` hold their reply
 * for the leaky_bucket's delay, as HTTP's `wait=1` holds its answer
 * (hold.h; docs/server.md, "Wait mode").
 *
 * A waiting command's reply has a slot in the connection's queue, as one
 * waiting for Redis has (resp.c): the connection goes on reading, and the
 * replies of the commands behind it wait in their own slots, so replies
 * still leave in command order. The place in the hold is taken before the
 * decision (a full daemon refuses without charging) and given back when
 * the reply is sent, or at once when the decision is not held; a
 * connection that closes takes its held replies out of the hold.
 */
#include <stdio.h>
#include <stdlib.h>

#include "../base/duration.h"
#include "resp_conn.h"

int resp_wait_arg(const char *v, size_t len, int64_t *wait, char *err,
                  size_t n) {
  if (!v) {
    *wait = INT64_MAX;
    return 0;
  }
  if (duration_parse(v, len, SL_PERIOD_MAX_NS, wait) == 0) return 0;
  snprintf(err, n, "ERR WAIT's max_wait '%.*s' is not a duration (e.g. "
                   "500ms, 5s; a bare number is ms)",
           (int)(len < 40 ? len : 40), v);
  return -1;
}

int64_t resp_wait_cap(const resp_conn *c, int64_t wait) {
  int64_t most = (int64_t)c->w->srv->o.max_wait_ms * 1000000;
  return wait < most ? wait : most;
}

/* The hold's time has come: s's reply, in its turn. */
static void on_held(hold_entry *e) {
  resp_slot *s = H2O_STRUCT_FROM_MEMBER(resp_slot, hold, e);
  resp_conn *c = s->c; /* (a closing connection cancels its holds) */
  s->held = 0;
  s->cap = 0;
  slot_ready(c, s); /* (its reply was kept when the hold started) */
}

/* Decided s (rc 0): held for its delay (1), or 0 with its place in the
   hold given back (answer at once). */
static int hold_or_not(resp_slot *s, eng_result *r) {
  int64_t delay = hold_delay(r, s->cap);
  s->cap = 0;
  if (delay > 0) {
    s->hold.fire = on_held;
    if (hold_start(s->w, &s->hold, delay) == 0) {
      s->held = 1;
      /* The reply now: the rules it names may be freed by a reload
         before the hold ends. */
      size_t mark = s->c->out.len;
      s->reply(s->c, r);
      slot_keep(s->c, s, mark);
      return 1;
    }
    return 0; /* out of memory: at once (hold_start gave the place back) */
  }
  hold_unreserve(s->w);
  return 0;
}

/* The engine's answer for a slot that waited for Redis (fleet mode). */
static void wait_done(void *ud, int rc, eng_result *r) {
  resp_slot *s = ud;
  resp_conn *c = s->c;
  if (!c) { /* the connection closed while Redis decided */
    hold_unreserve(s->w);
    free(s);
    return;
  }
  if (!rc && hold_or_not(s, r)) return;
  if (rc) hold_unreserve(s->w);
  size_t mark = c->out.len;
  if (rc)
    out_err(c, "ERR %s", r->msg);
  else
    s->reply(c, r);
  slot_answered(c, s, mark);
}

void resp_wait_decide(resp_conn *c, eng_query *q, resp_reply_fn reply,
                      int64_t cap) {
  worker *w = c->w;
  if (hold_reserve(w)) {
    out_err(c, "ERR too many requests waiting (--max-waiting %ld); retry "
               "after 1000 ms", w->srv->o.max_waiting);
    return;
  }
  resp_slot *s = calloc(1, sizeof *s + sizeof(eng_result));
  if (!s) {
    hold_unreserve(w);
    out_err(c, "ERR out of memory");
    return;
  }
  s->c = c;
  s->w = w;
  s->cap = cap;
  s->reply = reply;
  eng_result *r = (eng_result *)(void *)(s + 1);
  q->max_delay_ns = cap;
  int rc = engine_decide(w->et, q, r, w->may_wait ? wait_done : NULL, s);
  if (rc == ENG_PENDING || (!rc && hold_or_not(s, r))) {
    slot_link(c, s); /* its place among the replies */
    return;
  }
  if (rc) {
    hold_unreserve(w);
    out_err(c, "ERR %s", r->msg);
  } else {
    reply(c, r);
  }
  free(s);
}

void resp_wait_cancel(resp_slot *s) {
  hold_cancel(s->w, &s->hold);
  free(s);
}
