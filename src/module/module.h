/*
 * module.h — what the module's files share: the clock, the decision of one
 * request over several state keys (the heart of SL.DECIDE, also used by
 * SL.THROTTLE and CL.THROTTLE), and the command functions (registered by
 * module.c's RedisModule_OnLoad, called directly by the tests).
 */
#ifndef SLUICE_MODULE_MODULE_H
#define SLUICE_MODULE_MODULE_H

#include "../algo/algo.h"
#include "../algo/cell.h"
#include "rm.h"

/* One check of a request: its state key, policy, cost and shadow flag;
   or (cell) CL.THROTTLE's rate, alone in its request. */
typedef struct mcheck {
  RedisModuleString *key;
  algo_policy p;
  int64_t cost;
  int shadow;
  int cell;       /* decide.lua's algorithm "7": rate, not p */
  algo_cell rate;
} mcheck;

/* What a request does (decide.lua's modes). */
enum { MD_DECIDE, MD_DRY, MD_FORCE };

/*
 * Decides one request of checks c[0..n) (distinct keys, n <= SL_CHECKS_MAX)
 * at `now` ns as sl_take_all does: all-or-nothing (MD_DECIDE: charged only
 * when every non-shadow check allows; an allowing check that was not
 * charged reports a peek's figures), MD_DRY (nothing charged) or MD_FORCE
 * (every check charged whatever it holds; out[i].remaining is the signed
 * level after it). *all: the request's answer. Keys expire real-time
 * (real_ms: Redis's clock now). Returns 0, or -1 when a key holds
 * something else (nothing written then).
 */
int md_request(RedisModuleCtx *ctx, const mcheck *c, size_t n, int mode,
               int64_t now, long long real_ms, sl_decision *out, int *all);

/*
 * redis-cell's decision for quantity qty at rate on key `name`, whose
 * value is its TAT in ns as decimal text (redis-cell's own layout):
 * written when an allowed request charges, expiring once the TAT has
 * passed (real_ms: Redis's clock now). CL.THROTTLE's and SL.DECIDE's
 * algorithm "7". 0, or -1 when the key holds anything else (nothing
 * replied: WRONGTYPE for the caller).
 */
int md_cell(RedisModuleCtx *ctx, RedisModuleString *name,
            const algo_cell *rate, int64_t qty, int64_t now, long long real_ms,
            sl_decision *d);

/* The command's time: *now, in ns, for its decisions (Redis's clock, or
   the test clock) and *real_ms, Redis's clock in ms, for its keys'
   expiry; from one reading of the clock. */
void md_clock(int64_t *now, long long *real_ms);
/* The test clock: ns >= 0 replaces Redis's clock, -1 restores it. */
void md_set_clock(int64_t ns);

/* The commands (module.c, decide.c). */
int md_cmd_decide(RedisModuleCtx *ctx, RedisModuleString **argv, int argc);
int md_cmd_throttle(RedisModuleCtx *ctx, RedisModuleString **argv, int argc);
int md_cmd_cell(RedisModuleCtx *ctx, RedisModuleString **argv, int argc);
int md_cmd_reset(RedisModuleCtx *ctx, RedisModuleString **argv, int argc);
int md_cmd_clock(RedisModuleCtx *ctx, RedisModuleString **argv, int argc);
int md_cmd_version(RedisModuleCtx *ctx, RedisModuleString **argv, int argc);

#endif /* SLUICE_MODULE_MODULE_H */
