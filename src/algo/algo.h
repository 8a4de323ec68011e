/*
 * algo.h — the interface shared by the six algorithms.
 *
 * An algorithm is a pure function: (policy, state, now, cost) -> decision and
 * next state. It never reads a clock, never allocates and never does I/O, so
 * the very same code decides in the library, the daemon and the simulator.
 * Everything is integer arithmetic; 128-bit intermediates keep it exact.
 *
 * Every per-key state fits in 16 bytes (algo_state), which is what the store
 * keeps per key. sliding_log is the one algorithm whose state grows with the
 * traffic (up to LIMIT entries): its 16 bytes point at a log block that the
 * store allocates and that this layer only reads and fills (sliding_log.c).
 *
 * Units for the bucket algorithms (token_bucket, leaky_bucket, gcra): with
 * g = gcd(LIMIT, PERIOD_ns), one nanosecond is Lg = LIMIT/g "ticks" and one
 * unit of cost is Wg = PERIOD_ns/g ticks, so the emission interval
 * T = PERIOD/LIMIT is exactly Wg/Lg ns and every quantity is an integer.
 */
#ifndef SLUICE_ALGO_H
#define SLUICE_ALGO_H

#include <stdint.h>

#include "sluice.h"

__extension__ typedef __int128 i128;

/* Per-key state, its meaning private to each algorithm. Zero means nothing. */
typedef struct algo_state {
  int64_t a;
  int64_t b;
} algo_state;

/* A validated policy with the constants its algorithm needs. */
typedef struct algo_policy {
  sl_policy pub;              /* as given (burst made explicit) */
  const struct algo_ops *ops; /* its algorithm */
  int64_t L;                  /* LIMIT */
  int64_t B;                  /* largest cost: burst (buckets) or LIMIT */
  int64_t W;                  /* PERIOD, ns */
  int64_t phase;              /* fixed_window: its windows start at
                                 phase + k*W (0: epoch-aligned; a calendar
                                 window: limiter_take_windows) */
  int64_t Lg, Wg;             /* ticks per ns, ticks per unit of cost */
  i128 cap;                   /* B * Wg: a full bucket, in ticks */
  uint32_t evict_below;       /* the store's, not the algorithm's: what a
                                 new key may evict (0 = anything;
                                 sl_limiter_set_evict_below) */
} algo_policy;

typedef struct algo_ops {
  sl_algo algo;
  const char *name;
  /*
   * The decision for a request of `cost` (0 <= cost <= p->B) at time t
   * against `st` (NULL = the key is fresh). Fills *d. When the state must
   * change (an allowed request with cost > 0) writes it to *next and returns
   * 1; returns 0 when nothing changes (a deny or a peek). For sliding_log,
   * 1 means "call slog_commit"; *next is untouched.
   */
  int (*decide)(const algo_policy *p, const algo_state *st, int64_t t,
                int64_t cost, sl_decision *d, algo_state *next);
  /*
   * The earliest time at which `st` is indistinguishable from a fresh key
   * (full quota); the store drops the key from then on.
   */
  int64_t (*fresh_at)(const algo_policy *p, const algo_state *st);
  /*
   * What resetting `st` to fresh would give back at `now`: the units of
   * cost it holds against the key's quota (a window's count or estimate,
   * the live log, a bucket's debt), rounded up; 0 once fresh, never
   * negative. Pure, like decide; the store evicts the entries that give
   * back least first (docs/store.md, "The memory cap").
   */
  int64_t (*used)(const algo_policy *p, const algo_state *st, int64_t now);
  /*
   * A forced charge (approximate mode's sync: sl_limiter_force): charges
   * *cost at t whether or not it fits, so that the state can fall below
   * empty: a debt, paid back (by refill, or by the window moving on) before
   * the key allows again. The debt stops at what the state can hold
   * (algo_fill_max for the buckets, a count of UINT32_MAX for the windows);
   * *cost becomes what was charged. *level receives the signed remaining
   * after it, in whole units (floor; negative = owed). Returns 1 when the
   * state changes (into *next; sliding_log: call slog_commit with *cost).
   */
  int (*force)(const algo_policy *p, const algo_state *st, int64_t t,
               int64_t *cost, int64_t *level, algo_state *next);
} algo_ops;

extern const algo_ops algo_token_bucket, algo_leaky_bucket, algo_fixed_window,
    algo_sliding_log, algo_sliding_window, algo_gcra, algo_concurrency;

/* The ops of one algorithm, or NULL. */
const algo_ops *algo_ops_of(sl_algo algo);

/*
 * Writes a policy error message into err (when err is not NULL) and
 * returns SL_EPOLICY: the one way policy parsing and validation fail.
 */
int algo_policy_error(char *err, size_t err_len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/*
 * Validates `pub` and derives the constants into *out. Returns 0 or
 * SL_EPOLICY with a message in err (err may be NULL).
 */
int algo_policy_compile(const sl_policy *pub, algo_policy *out, char *err,
                        size_t err_len);

/* ---- integer helpers shared by the algorithm files ---- */

/*
 * a / b and ceil(a / b) for a >= 0, b > 0, when the quotient fits int64 (the
 * bounds checked in algo_policy_compile make sure of it). Most operands fit
 * 64 bits, where division is several times cheaper than 128-bit division.
 */
static inline int64_t div_floor(i128 a, int64_t b) {
  if ((unsigned __int128)a >> 64 == 0) return (int64_t)((uint64_t)a / (uint64_t)b);
  return (int64_t)(a / b);
}
static inline int64_t div_ceil(i128 a, int64_t b) {
  int64_t q = div_floor(a, b);
  return q + ((i128)q * b != a);
}

/* floor(a / b) for any sign of a, b > 0 (a signed level). */
static inline int64_t div_floor_signed(i128 a, int64_t b) {
  return a >= 0 ? div_floor(a, b) : -div_ceil(-a, b);
}

/*
 * The most a bucket can be filled, in ticks: its debt (gcra's, leaky's) or
 * cap - tokens (token_bucket's) after forced charges. A full bucket at
 * least, and beyond that whatever keeps every figure of decide.lua below
 * 2^53 (where doubles are exact): cap + 2*Lg + fill_max <= 2^53. The same
 * limit here and in the script, so that both carry the same debt.
 */
static inline i128 algo_fill_max(const algo_policy *p) {
  i128 room = ((i128)1 << 53) - 2 * (i128)p->Lg - p->cap;
  return room > p->cap ? room : p->cap;
}

static inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

/* A peek's or a deny's decision skeleton: nothing is charged. */
static inline void decision_init(sl_decision *d, const algo_policy *p) {
  d->allowed = 0;
  d->limit = p->B;
  d->remaining = 0;
  d->reset_ns = 0;
  d->retry_after_ns = 0;
  d->delay_ns = 0;
  d->lease = 0;
}

/*
 * A time-of-arrival in ticks, stored exactly in an algo_state as its ceiling
 * in whole ns (a) and the distance back down to the exact value (b, < Lg):
 * tat = a*Lg - b. gcra and leaky_bucket keep one such timestamp.
 */
static inline i128 tat_load(const algo_policy *p, const algo_state *st) {
  return (i128)st->a * p->Lg - st->b;
}
static inline void tat_store(const algo_policy *p, i128 ticks,
                             algo_state *st) {
  int64_t ns = div_ceil(ticks, p->Lg);
  st->a = ns;
  st->b = (int64_t)((i128)ns * p->Lg - ticks);
}

/* The forced charge of gcra and leaky_bucket (one TAT: gcra.c). */
int algo_tat_force(const algo_policy *p, const algo_state *st, int64_t t,
                   int64_t *cost, int64_t *level, algo_state *next);
/* What gcra's and leaky_bucket's TAT holds at t: its debt (gcra.c). */
int64_t algo_tat_used(const algo_policy *p, const algo_state *st, int64_t t);

/* ---- sliding_log's growing state (sliding_log.c) ---- */

/*
 * The log block a sliding_log key points at (algo_state.a holds the pointer,
 * .b is unused). A ring of (time, cost) pairs, oldest
 * first, one entry per distinct instant, never more than LIMIT entries.
 */
typedef struct slog {
  uint32_t cap, head, count, pad;
  int64_t sum; /* of all costs held */
  /* then int64_t t[cap]; uint32_t c[cap]; */
} slog;

/* Bytes of a block for cap entries. */
size_t slog_bytes(uint32_t cap);
/* Formats `mem` (slog_bytes(cap)) as an empty log. */
slog *slog_init(void *mem, uint32_t cap);
/* The log in a sliding_log state, or NULL when there is none yet. */
static inline slog *slog_of(const algo_state *st) {
  return st ? (slog *)(uintptr_t)st->a : NULL;
}
/* Entries the log needs to commit one more instant at t (after pruning). */
uint32_t slog_needed(const algo_policy *p, const slog *log, int64_t t);
/* Copies src's entries still live at t into the empty block dst, which
   must hold slog_needed() entries. */
void slog_move(const algo_policy *p, slog *dst, const slog *src, int64_t t);
/* Records an allowed request; the log must have room (slog_needed). */
void slog_commit(const algo_policy *p, slog *log, int64_t t, int64_t cost);
/* Takes back the cost the last slog_commit added (its newest entry). */
void slog_uncommit(slog *log, int64_t cost);

/* ---- concurrency's leases (concurrency.c) ---- */

/*
 * A concurrency key's state is one of three forms:
 *   {0, 0}            no lease;
 *   {exp, id}, id!=0  one lease, inline in the key's entry (lease ids are
 *                     never 0): the usual key costs no block and no second
 *                     cache miss;
 *   {set, 0}          a pointer to a lease set: from two live leases on.
 * The lease set is owned by the store like a sliding_log's log: an
 * unordered array of (id, expiry), never more than LIMIT live ones. A
 * lease is live at t while t < its expiry. min_exp and max_exp bound the
 * expiries held, so that the common decision (nothing has expired yet)
 * reads the header only.
 */
typedef struct lset {
  uint32_t cap, count;
  int64_t min_exp, max_exp; /* over the entries held (0, 0 when none) */
  /* then lset_entry e[cap] */
} lset;

typedef struct lset_entry {
  uint64_t id;
  int64_t exp;
} lset_entry;

/* What a lease operation does (lset_op). */
enum { LSET_RELEASE = 1, LSET_RENEW = 2 };

/* Bytes of a set for cap entries. */
size_t lset_bytes(uint32_t cap);
/* Formats `mem` (lset_bytes(cap)) as an empty set. */
lset *lset_init(void *mem, uint32_t cap);
/* The set in a concurrency state, or NULL when it has none (no lease, or
   one inline). */
static inline lset *lset_of(const algo_state *st) {
  return st && !st->b ? (lset *)(uintptr_t)st->a : NULL;
}
/* The state holding lease id alone, expiring at exp. */
static inline algo_state lease_one(uint64_t id, int64_t exp) {
  return (algo_state){exp, (int64_t)id};
}
/* The leases of state st (NULL: none) live at t. */
uint32_t conc_live(const algo_state *st, int64_t t);
/* Fills the empty set dst (room for 1) with st's inline lease. */
void lset_from_one(lset *dst, const algo_state *st);
/* When exactly one lease of set is live at t: 1, with *one its inline
   state; else 0. */
int lset_only(const lset *set, int64_t t, algo_state *one);
/* lset_op on a state of either form (an inline release leaves {0, 0}). */
int conc_op(const algo_policy *p, algo_state *st, int op, uint64_t id,
            int64_t t);
/* lset_remove on a state of either form. */
void conc_remove(algo_state *st, uint64_t id);
/* The leases live at t. */
uint32_t lset_live(const lset *set, int64_t t);
/* Entries the set needs to hold one more lease at t (after pruning). */
uint32_t lset_needed(const lset *set, int64_t t);
/* Copies src's leases live at t into the empty set dst (room for them). */
void lset_move(lset *dst, const lset *src, int64_t t);
/* Records lease id at t, expiring at t + W; the set must have room
   (lset_needed). Expired leases are dropped first. */
void lset_commit(const algo_policy *p, lset *set, int64_t t, uint64_t id);
/* Removes lease id (whether live or not): the undo of lset_commit. */
void lset_remove(lset *set, uint64_t id);
/* LSET_RELEASE: drops live lease id; LSET_RENEW: sets its expiry to
   t + W. 1 when id was live at t, else 0 (nothing changes). */
int lset_op(const algo_policy *p, lset *set, int op, uint64_t id, int64_t t);

#endif /* SLUICE_ALGO_H */
