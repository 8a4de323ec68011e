/*
 * concurrency.c — at most LIMIT requests in flight per key: leases.
 *
 * Not a rate but a count of what is held now (Stripe's concurrent-request
 * limiter): an acquire takes a slot and names it by a lease id; a release
 * gives the slot back; a lease not released expires W after it was taken
 * or last renewed, so a client that crashed holds its slot for at most W.
 * Allowed iff the leases live at t plus cost (1; 0 peeks) are at most
 * LIMIT.
 *
 * A key's one lease lives inline in its state (algo.h: {exp, id}); from
 * two on, in a lease set. The store owns the set (it allocates, grows and
 * frees it within its memory cap, and turns a state from one form to the
 * other) and makes the ids; this file only reads the state in decide()
 * and edits it in place in lset_commit(), lset_remove(), lset_op() and
 * their conc_ forms. Expired leases are dropped whenever the set is
 * written. The header's min_exp makes the usual decision O(1): while
 * t < min_exp every lease held is live.
 */
#include <string.h>

#include "algo.h"

static lset_entry *ents(const lset *set) { return (lset_entry *)(set + 1); }

size_t lset_bytes(uint32_t cap) {
  return sizeof(lset) + (size_t)cap * sizeof(lset_entry);
}

lset *lset_init(void *mem, uint32_t cap) {
  lset *set = mem;
  memset(set, 0, sizeof *set);
  set->cap = cap;
  return set;
}

uint32_t lset_live(const lset *set, int64_t t) {
  if (!set || !set->count || t >= set->max_exp) return 0;
  if (t < set->min_exp) return set->count;
  uint32_t live = 0;
  for (uint32_t i = 0; i < set->count; i++) live += t < ents(set)[i].exp;
  return live;
}

/* The earliest expiry among the leases live at t (t < max_exp). */
static int64_t first_exp(const lset *set, int64_t t) {
  if (t < set->min_exp) return set->min_exp;
  int64_t m = INT64_MAX;
  for (uint32_t i = 0; i < set->count; i++)
    if (t < ents(set)[i].exp) m = min64(m, ents(set)[i].exp);
  return m;
}

/* Recomputes min_exp and max_exp over the entries held. */
static void bounds(lset *set) {
  int64_t lo = INT64_MAX, hi = 0;
  for (uint32_t i = 0; i < set->count; i++) {
    lo = min64(lo, ents(set)[i].exp);
    hi = max64(hi, ents(set)[i].exp);
  }
  set->min_exp = set->count ? lo : 0;
  set->max_exp = hi;
}

/* Drops the leases expired at t (order is not kept). */
static void prune(lset *set, int64_t t) {
  if (!set->count || t < set->min_exp) return;
  uint32_t k = 0;
  for (uint32_t i = 0; i < set->count; i++)
    if (t < ents(set)[i].exp) ents(set)[k++] = ents(set)[i];
  set->count = k;
  bounds(set);
}

uint32_t lset_needed(const lset *set, int64_t t) {
  return lset_live(set, t) + 1;
}

void lset_move(lset *dst, const lset *src, int64_t t) {
  uint32_t k = 0;
  for (uint32_t i = 0; src && i < src->count; i++)
    if (t < ents(src)[i].exp) ents(dst)[k++] = ents(src)[i];
  dst->count = k;
  bounds(dst);
}

void lset_commit(const algo_policy *p, lset *set, int64_t t, uint64_t id) {
  prune(set, t);
  int64_t exp = t + p->W;
  ents(set)[set->count++] = (lset_entry){id, exp};
  set->min_exp = set->count == 1 ? exp : min64(set->min_exp, exp);
  set->max_exp = max64(set->max_exp, exp);
}

/* The index of lease id, or -1. */
static long find_id(const lset *set, uint64_t id) {
  for (uint32_t i = 0; i < set->count; i++)
    if (ents(set)[i].id == id) return (long)i;
  return -1;
}

void lset_remove(lset *set, uint64_t id) {
  long i = find_id(set, id);
  if (i < 0) return;
  ents(set)[i] = ents(set)[--set->count];
  bounds(set);
}

int lset_op(const algo_policy *p, lset *set, int op, uint64_t id, int64_t t) {
  long i = set && id ? find_id(set, id) : -1;
  if (i < 0 || ents(set)[i].exp <= t) return 0;
  if (op == LSET_RELEASE)
    ents(set)[i] = ents(set)[--set->count];
  else
    ents(set)[i].exp = max64(ents(set)[i].exp, t + p->W);
  if (t >= set->min_exp)
    prune(set, t); /* drops the expired, and recomputes the bounds */
  else
    bounds(set);
  return 1;
}

/* Whether st holds one lease inline. */
static int is_one(const algo_state *st) { return st && st->b; }

uint32_t conc_live(const algo_state *st, int64_t t) {
  if (is_one(st)) return t < st->a;
  return lset_live(lset_of(st), t);
}

void lset_from_one(lset *dst, const algo_state *st) {
  ents(dst)[0] = (lset_entry){(uint64_t)st->b, st->a};
  dst->count = 1;
  bounds(dst);
}

int lset_only(const lset *set, int64_t t, algo_state *one) {
  if (lset_live(set, t) != 1) return 0;
  for (uint32_t i = 0; i < set->count; i++)
    if (t < ents(set)[i].exp) {
      *one = lease_one(ents(set)[i].id, ents(set)[i].exp);
      return 1;
    }
  return 0;
}

int conc_op(const algo_policy *p, algo_state *st, int op, uint64_t id,
            int64_t t) {
  if (!is_one(st)) return lset_op(p, lset_of(st), op, id, t);
  if ((uint64_t)st->b != id || st->a <= t) return 0;
  if (op == LSET_RELEASE)
    *st = (algo_state){0, 0};
  else
    st->a = max64(st->a, t + p->W);
  return 1;
}

void conc_remove(algo_state *st, uint64_t id) {
  if (!is_one(st)) {
    lset *set = lset_of(st);
    if (set) lset_remove(set, id);
  } else if ((uint64_t)st->b == id)
    *st = (algo_state){0, 0};
}

/* Allowed iff the live leases and cost fit LIMIT; a deny waits for the
   earliest live lease to expire. */
static int conc_decide(const algo_policy *p, const algo_state *st, int64_t t,
                       int64_t cost, sl_decision *d, algo_state *next) {
  (void)next;
  const lset *set = lset_of(st);
  int one = is_one(st);
  int64_t live = conc_live(st, t);
  decision_init(d, p);
  d->limit = p->L;
  if (live) d->reset_ns = (one ? st->a : set->max_exp) - t;
  if (live + cost <= p->L) {
    d->allowed = 1;
    d->remaining = p->L - live - cost;
    if (cost > 0) d->reset_ns = p->W; /* the new lease is the last to go */
    return cost > 0;
  }
  d->remaining = max64(p->L - live, 0);
  d->retry_after_ns = (one ? st->a : first_exp(set, t)) - t;
  return 0;
}

static int64_t conc_fresh_at(const algo_policy *p, const algo_state *st) {
  (void)p;
  if (is_one(st)) return st->a;
  const lset *set = lset_of(st);
  return set ? set->max_exp : 0;
}

static int64_t conc_used(const algo_policy *p, const algo_state *st,
                         int64_t now) {
  (void)p;
  return conc_live(st, now);
}

/* A forced charge makes no lease (there would be no one to release it):
   it charges nothing and reports the slots free. */
static int conc_force(const algo_policy *p, const algo_state *st, int64_t t,
                      int64_t *cost, int64_t *level, algo_state *next) {
  (void)next;
  *cost = 0;
  *level = p->L - (int64_t)conc_live(st, t);
  return 0;
}

const algo_ops algo_concurrency = {SL_CONCURRENCY, "concurrency", conc_decide,
                                   conc_fresh_at, conc_used, conc_force};
