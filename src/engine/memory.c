/*
 * memory.c — the memory backend, and the local decisions and resets the
 * other backends fall back on (engine_decide_local, engine_forget_local).
 */
#include "memory.h"

#include "internal.h"
#include "../limiter.h"

/* q's calendar windows (win[i] per check), or NULL when it has none. */
static const limiter_window *windows_of(const eng_decision *q,
                                        limiter_window *win) {
  int any = 0;
  for (size_t i = 0; i < q->n; i++) {
    win[i] = (limiter_window){q->checks[i].win_start, q->checks[i].win_end};
    any |= q->checks[i].win_end != 0;
  }
  return any ? win : NULL;
}

/*
 * envoyproxy/ratelimit's charging, after the decision said no (rc 0 and
 * !*all) or found a cost above a capacity (rc SL_ECOST): every check is
 * charged its cost all the same (sl_limiter_force: the counter goes past
 * the limit, as envoy's INCRBY does), and the figures are read again; a
 * check whose cost was more than it had left is denied. Returns 0 with
 * *all 0, or the error of a charge or a read.
 */
static int charge_denied(const eng_decision *q, sl_decision *dec, int rc,
                         int *all) {
  for (size_t i = 0; i < q->n; i++) {
    const sl_check *c = &q->checks[i].c;
    int denied = rc == 0 && !dec[i].allowed;
    int64_t before = 0, after;
    int e = sl_limiter_force(c->limiter, c->key, c->key_len, 0, q->now,
                             &before);
    if (!e && c->cost > 0)
      e = sl_limiter_force(c->limiter, c->key, c->key_len, c->cost, q->now,
                           &after);
    if (e) return e;
    if (denied) { /* the decision's figures (its retry_after): none left */
      dec[i].remaining = 0;
      continue;
    }
    e = sl_limiter_take(c->limiter, c->key, c->key_len, 0, q->now, &dec[i]);
    if (e) return e;
    if (rc == SL_ECOST && before < c->cost) { /* above what it had left */
      dec[i].allowed = 0;
      dec[i].remaining = 0;
      if (dec[i].retry_after_ns <= 0) dec[i].retry_after_ns = dec[i].reset_ns;
    } else {
      dec[i].allowed = 1;
    }
  }
  *all = 0;
  return 0;
}

/* A lease's release or renewal under every check's limiter. */
static int lease_local(const eng_decision *q, sl_decision *dec, int *all) {
  *all = 1;
  for (size_t i = 0; i < q->n; i++) {
    const sl_check *c = &q->checks[i].c;
    int rc = q->lease_op == ENG_LEASE_RELEASE
                 ? sl_release(c->limiter, c->key, c->key_len, q->lease, q->now,
                              &dec[i])
                 : sl_renew(c->limiter, c->key, c->key_len, q->lease, q->now,
                            &dec[i]);
    if (rc < 0) return rc;
    dec[i].allowed = rc;
    *all &= rc;
  }
  return 0;
}

int engine_decide_local(const eng_decision *q, sl_decision *dec, int *all) {
  if (q->lease_op) return lease_local(q, dec, all);
  if (q->n == 1 && q->checks[0].cell) { /* CL.THROTTLE's, alone */
    const sl_check *c = &q->checks[0].c;
    int rc = limiter_cell_take(c->limiter, q->checks[0].cell, c->key,
                               c->key_len, c->cost, q->now, &dec[0]);
    *all = rc == 0 && dec[0].allowed;
    return rc;
  }
  if (q->charge_all) {
    sl_check checks[ENG_MAX_STATUSES];
    for (size_t i = 0; i < q->n; i++) checks[i] = q->checks[i].c;
    int rc = sl_take_all(checks, q->n, q->now, dec, all);
    if (rc == SL_ECOST || (rc == 0 && !*all))
      rc = charge_denied(q, dec, rc, all);
    return rc;
  }
  limiter_window win[ENG_MAX_STATUSES];
  const limiter_window *w = windows_of(q, win);
  if (q->n == 1 && !q->checks[0].c.shadow && !w &&
      !q->checks[0].max_delay_ns) {
    /* One check (an ad-hoc policy, a request one rule matches): the
       library's single take decides it as sl_take_all would, with less
       to do. */
    const sl_check *c = &q->checks[0].c;
    int rc = sl_limiter_take(c->limiter, c->key, c->key_len, c->cost, q->now,
                             &dec[0]);
    *all = rc == 0 && dec[0].allowed;
    return rc;
  }
  sl_check checks[ENG_MAX_STATUSES];
  int64_t most[ENG_MAX_STATUSES];
  for (size_t i = 0; i < q->n; i++) {
    checks[i] = q->checks[i].c;
    most[i] = q->checks[i].max_delay_ns;
  }
  return limiter_take_all_within(checks, w, most, q->n, q->now, dec, all);
}

int engine_forget_local(const eng_forgets *f) {
  int dropped = 0;
  for (size_t i = 0; i < f->n; i++) {
    const eng_forget *x = &f->items[i];
    int had = 0;
    if (x->lim) had |= sl_limiter_reset(x->lim, x->key, x->key_len) == 1;
    if (x->local) had |= sl_limiter_reset(x->local, x->key, x->key_len) == 1;
    dropped += had;
  }
  return dropped;
}

static int memory_decide(eng_backend *b, void *bt, const eng_decision *q,
                         sl_decision *dec, int *all, eng_decided_fn done,
                         void *ud) {
  (void)b, (void)bt, (void)done, (void)ud;
  return engine_decide_local(q, dec, all);
}

static int memory_reset(eng_backend *b, void *bt, const eng_forgets *f,
                        eng_reset *out, eng_reset_fn done, void *ud) {
  (void)b, (void)bt, (void)done, (void)ud;
  out->dropped += engine_forget_local(f);
  return 0;
}

static const eng_backend_ops memory_ops = {
    .name = "memory",
    .decide = memory_decide,
    .reset = memory_reset,
};

static eng_backend memory = {&memory_ops};

eng_backend *memory_backend(void) { return &memory; }
