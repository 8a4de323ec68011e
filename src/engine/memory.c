/*
 * memory.c — the memory backend, and the local decisions and resets the
 * other backends fall back on (engine_decide_local, engine_forget_local).
 */
#include "memory.h"

#include "internal.h"

int engine_decide_local(const eng_decision *q, sl_decision *dec, int *all) {
  if (q->n == 1 && !q->checks[0].c.shadow) {
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
  for (size_t i = 0; i < q->n; i++) checks[i] = q->checks[i].c;
  return sl_take_all(checks, q->n, q->now, dec, all);
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
