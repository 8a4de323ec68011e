/*
 * state.h — one rate-limit state key inside Redis, read and written by the
 * module in exactly the layout exact fleet mode's script (decide.lua)
 * uses, so the module and the script can take turns on the same keys (a
 * node that gains or loses the module, a failover to a replica without
 * it): plain strings for five algorithms, a hash for sliding_log. Every
 * write gives the key a TTL equal to its time to fresh and is replicated
 * (and written to the AOF) as deterministic commands with an absolute
 * expiry (SET ... PXAT, HSET/HDEL + PEXPIREAT), since the command that
 * made it depends on the time.
 */
#ifndef SLUICE_MODULE_STATE_H
#define SLUICE_MODULE_STATE_H

#include "../algo/algo.h"
#include "rm.h"

/* One opened state key. */
typedef struct mkey {
  RedisModuleString *name;
  RedisModuleKey *k;
  int fresh;        /* no state: st is unused */
  int cell;         /* the state was read from redis-cell's layout */
  algo_state st;    /* sliding_log: st.a points at log */
  slog *log;        /* sliding_log: the live entries, loaded (Alloc'd) */
  int64_t head;     /* sliding_log: the hash's first index */
  uint32_t count;   /* sliding_log: entries the hash held when loaded */
} mkey;

/* What every write shares, made once at load: 0, or -1. */
int mkey_init(void);

/*
 * Opens `name` for reading and writing and loads its state for policy p.
 * Returns 0, or -1 when the key holds something else (another type, or a
 * value of the wrong size: WRONGTYPE for the caller), with nothing held.
 */
int mkey_open(RedisModuleCtx *ctx, mkey *m, RedisModuleString *name,
              const algo_policy *p);

/*
 * Writes a charge: for sliding_log, commits `cost` at t into the loaded
 * log; for the others stores *next. The key expires at its time to fresh
 * from `t` (on Redis's own clock, real_ms now). Replicated, signalled as
 * modified (WATCH, client-side caching: a key only opened is not) and
 * announced with the script's keyspace events.
 */
void mkey_save(RedisModuleCtx *ctx, mkey *m, const algo_policy *p,
               const algo_state *next, int64_t t, int64_t cost,
               long long real_ms);

/* The keyspace events ("set", "expire") of a string state written, as the
   script's SET key value PX ms fires them. */
void mkey_notify_set(RedisModuleCtx *ctx, RedisModuleString *name);

/* Closes the key and frees what mkey_open loaded. */
void mkey_close(mkey *m);

#endif /* SLUICE_MODULE_STATE_H */
