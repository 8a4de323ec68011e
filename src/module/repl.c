/*
 * repl.c — whether the module's writes have anywhere to go (repl.h),
 * kept from Redis's server events.
 *
 * Redis (7.0, server.c's shouldPropagate) feeds a write to the AOF when
 * one is on, and to replication when this node is a master with replicas
 * or with a backlog (made when the first replica syncs, kept
 * repl-backlog-ttl after the last leaves). The backlog is not visible to
 * a module except through INFO, so the state here is read from INFO and
 * held as "something may take writes" from the moment anything could
 * have changed it: a replica syncs only through a fork (its stream starts
 * at the fork, and the fork's event comes before the next command) or
 * from a backlog that is there already. It is read again when the fork
 * ends, when a replica comes or goes, when the role changes and when the
 * configuration does (an AOF turned on or off), and can only be wrong
 * towards replicating a write nobody takes.
 */
#include <string.h>

#include "repl.h"

static int feeds = 1;    /* until the first reading: replicate */
static int aof_live = 1; /* no configuration event: read the AOF per write */

/* INFO's replication section and the AOF's flag, read now: a replica's
   role, replicas, a backlog or an AOF (being turned on included) mean
   writes may be taken. */
static void read_state(RedisModuleCtx *ctx) {
  int flags = RedisModule_GetContextFlags(ctx);
  int here = (flags & REDISMODULE_CTX_FLAGS_SLAVE) ||
             (!aof_live && (flags & REDISMODULE_CTX_FLAGS_AOF));
  RedisModuleServerInfoData *info =
      RedisModule_GetServerInfo(ctx, "replication");
  if (!info) {
    feeds = 1;
    return;
  }
  int e1 = 0, e2 = 0;
  long long replicas =
      RedisModule_ServerInfoGetFieldSigned(info, "connected_slaves", &e1);
  long long backlog =
      RedisModule_ServerInfoGetFieldSigned(info, "repl_backlog_active", &e2);
  RedisModule_FreeServerInfo(ctx, info);
  feeds = here || e1 || e2 || replicas != 0 || backlog != 0;
}

/* A fork's birth (a replica's sync among them) makes writes count until
   its end; everything else, and a fork's end, reads the state again. */
static void on_event(RedisModuleCtx *ctx, RedisModuleEvent e, uint64_t sub,
                     void *data) {
  (void)data;
  if (e.id == REDISMODULE_EVENT_FORK_CHILD &&
      sub == REDISMODULE_SUBEVENT_FORK_CHILD_BORN)
    feeds = 1;
  else
    read_state(ctx);
}

int mrep_init(RedisModuleCtx *ctx) {
  static const RedisModuleEvent events[] = {
      {REDISMODULE_EVENT_REPLICATION_ROLE_CHANGED, 1},
      {REDISMODULE_EVENT_REPLICA_CHANGE, 1},
      {REDISMODULE_EVENT_FORK_CHILD, 1},
  };
  for (size_t i = 0; i < sizeof events / sizeof events[0]; i++)
    if (RedisModule_SubscribeToServerEvent(ctx, events[i], on_event) !=
        REDISMODULE_OK)
      return REDISMODULE_ERR;
  /* Redis fires it after CONFIG SET has applied every value, before the
     next command: an AOF turned on or off is read there. */
  RedisModuleEvent config = {REDISMODULE_EVENT_CONFIG, 1};
  aof_live = RedisModule_SubscribeToServerEvent(ctx, config, on_event) !=
             REDISMODULE_OK;
  read_state(ctx);
  return REDISMODULE_OK;
}

int mrep_feeds(RedisModuleCtx *ctx) {
  return feeds || (aof_live && (RedisModule_GetContextFlags(ctx) &
                                REDISMODULE_CTX_FLAGS_AOF) != 0);
}

int mrep_skip(RedisModuleCtx *ctx) { return RedisModule_ReplicateVerbatim(ctx); }
