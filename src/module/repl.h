/*
 * repl.h — whether a write the module makes has anywhere to go: an AOF, a
 * replica, or the replication backlog a replica may resume from.
 *
 * Every write the module makes is replicated as the deterministic command
 * that redoes it (SET key value PXAT ms), never as the command called,
 * because the decision depends on the time. RedisModule_Replicate builds
 * that command even when Redis then finds nothing to feed (no AOF, no
 * replica, no backlog: a Redis kept only for rate limits, whose state
 * lives minutes) and drops it; looking the command up by name and building
 * its arguments were about 2,550 of the 8,900 instructions of a call.
 * Where nothing can take the write, the module skips that work and only
 * counts the change (RedisModule_ReplicateVerbatim, which Redis also drops
 * then, but whose count of changes drives RDB save points).
 *
 * What can take a write is known from Redis's own events, conservatively:
 * any fork (a replica's full sync forks, and its stream starts at the
 * fork; an AOF turned on feeds only once its rewrite has forked), a
 * replica coming or going, a change of role, a change of configuration
 * (CONFIG SET appendonly); each one reads the state again (INFO's
 * replication section, the AOF's flag) once the fork is over. A Redis
 * without the configuration event (before 7.0) has the AOF's flag read at
 * every write instead, about 140 instructions.
 */
#ifndef SLUICE_MODULE_REPL_H
#define SLUICE_MODULE_REPL_H

#include "rm.h"

/* Reads the replication state and subscribes to the events that change
   it; at load. REDISMODULE_OK or REDISMODULE_ERR. */
int mrep_init(RedisModuleCtx *ctx);

/* 1 when a write now may be fed to an AOF, a replica or the backlog. */
int mrep_feeds(RedisModuleCtx *ctx);

/* Counts a change that had nowhere to go (Redis's dirty count); returns
   REDISMODULE_OK. */
int mrep_skip(RedisModuleCtx *ctx);

/* A write's replication: the command when something can take it, else
   only the count. */
#define MREP(ctx, ...)                                   \
  (mrep_feeds(ctx) ? RedisModule_Replicate(ctx, __VA_ARGS__) \
                   : mrep_skip(ctx))

#endif /* SLUICE_MODULE_REPL_H */
