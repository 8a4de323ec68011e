/*
 * cell.h — redis-cell's CL.THROTTLE, decision for decision: one state per
 * key (a theoretical arrival time, TAT, in nanoseconds since the epoch),
 * and the rate given with each call, so a key's limits can change on the
 * fly and the new ones apply to the stored TAT (brandur/redis-cell,
 * redis-cell-impl/src/lib.rs: rate_limit).
 *
 * The rate of one call: emission interval ei = period_ns / count as
 * redis-cell computes it (a double division, truncated to whole ns), delay
 * variation tolerance dvt = ei * (max_burst + 1), limit max_burst + 1. A
 * request of quantity q at now, against tat (none: now):
 *   new_tat = max(tat, now) + ei*q;  allowed iff new_tat - dvt <= now;
 *   allowed: TAT = new_tat, reset = new_tat - now;
 *   limited: reset = tat - now, retry = new_tat - dvt - now (none when
 *            ei*q > dvt: it never fits);
 *   remaining = trunc(us(dvt - reset) / us(ei)) when dvt - reset > -ei.
 * The same code decides in the daemon's store (algo_cell_ops) and in the
 * Redis module (src/module), so the two cannot drift.
 */
#ifndef SLUICE_ALGO_CELL_H
#define SLUICE_ALGO_CELL_H

#include <stddef.h>
#include <stdint.h>

#include "algo.h"

/* The rate of one CL.THROTTLE call. */
typedef struct algo_cell {
  int64_t ei;    /* emission interval, ns (> 0) */
  int64_t dvt;   /* delay variation tolerance, ns: ei * limit */
  int64_t limit; /* max_burst + 1 */
} algo_cell;

/*
 * The rate of max_burst, count per period_s seconds, with the bounds
 * sluice keeps (count 1..SL_LIMIT_MAX, period 1..SL_PERIOD_MAX_NS in
 * seconds, max_burst 0..SL_LIMIT_MAX-1, dvt within the buckets' refill
 * horizon). 0; 1 when the emission interval truncates to 0 ns (redis-cell:
 * "Zero rates are not supported"); -1 when out of those bounds.
 */
int algo_cell_rate(int64_t max_burst, int64_t count, int64_t period_s,
                   algo_cell *out);

/*
 * CL.THROTTLE's arguments, checked once for every front end (the daemon's
 * RESP port and the Redis module), in redis-cell's words: its module
 * replies every error as "Cell error: " and its error's text, and every
 * error it makes itself is a generic one, whose text is "Store error: "
 * and the message (brandur/redis-cell src/redis/mod.rs and src/error.rs,
 * since v0.2.5). ALGO_CELL_USAGE is its reply to a wrong number of
 * arguments.
 */
#define ALGO_CELL_ERR "Cell error: Store error: "
#define ALGO_CELL_USAGE                                                        \
  ALGO_CELL_ERR "Usage: cl.throttle <key> <max_burst> <count per period> "     \
                "<period> [<quantity>]"

/* A number as redis-cell reads one (Rust's i64 parse): an optional sign,
   then digits only (no spaces, nothing after), within 64 bits. 0, or -1. */
int algo_cell_i64(const char *s, size_t n, long long *out);

/*
 * CL.THROTTLE's words argv[0..argc) (the command's name first, then key
 * max_burst count period [quantity]; argv[i] of len[i] bytes, not
 * terminated): 0 with *rate and num[] = max_burst, count, period and
 * quantity (1 when not given); or -1 with the
 * error reply's text (no leading '-') in err, checked in redis-cell's
 * order: the arity, each number in turn ("Couldn't parse as integer: x"),
 * then a zero rate ("Zero rates are not supported": a count or period of
 * 0, or an emission interval that truncates to 0 ns). Where redis-cell has
 * no message (a negative value, which it decides as nonsense; values past
 * sluice's bounds), sluice names the argument in the same form.
 */
int algo_cell_args(int argc, const char *const *argv, const size_t *len,
                   algo_cell *rate, int64_t num[4], char *err,
                   size_t err_len);

/*
 * redis-cell's decision for quantity qty (>= 0, any size) at now against
 * tat (< 0: no state; a TAT in the past counts as none). Fills *d
 * (retry_after_ns -1 when allowed, or when it never fits; delay_ns 0) and
 * returns 1 with *next_tat when the state changes (an allowed qty > 0).
 */
int algo_cell_decide(const algo_cell *c, int64_t tat, int64_t now, int64_t qty,
                     sl_decision *d, int64_t *next_tat);

/*
 * The store's view of a cell key: state a = TAT (ns), b = the emission
 * interval of the call that wrote it (what eviction's `used` divides by).
 * A call's rate travels in its algo_policy (algo_cell_policy): W = ei,
 * cap = dvt, B = limit; the registered policy's fields are never read.
 */
extern const algo_ops algo_cell_ops;
void algo_cell_policy(const algo_cell *c, algo_policy *out);

#endif /* SLUICE_ALGO_CELL_H */
