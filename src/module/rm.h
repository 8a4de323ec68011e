/*
 * rm.h — the part of the Redis module API that sluice's module uses,
 * declared here by hand.
 *
 * Redis hands a module its API as named functions: RedisModule_OnLoad gets
 * a context whose first word is a lookup function, GetApi, and every other
 * function is fetched through it by name ("RedisModule_OpenKey", ...) into
 * a pointer. That set of names and signatures is Redis's stable ABI, so
 * the module declares the few it calls (RM_FUNCS below, checked against
 * Redis 7.0's redismodule.h) instead of copying that header. Optional
 * functions (newer than 7.0) may stay NULL.
 *
 * Tests fill the same pointers with fakes (tests/unit/test_module.c), so
 * the commands run without a Redis, under the sanitizers.
 */
#ifndef SLUICE_MODULE_RM_H
#define SLUICE_MODULE_RM_H

#include <stddef.h>
#include <stdint.h>

typedef struct RedisModuleCtx RedisModuleCtx;
typedef struct RedisModuleKey RedisModuleKey;
typedef struct RedisModuleString RedisModuleString;
typedef struct RedisModuleServerInfoData RedisModuleServerInfoData;
typedef int (*RedisModuleCmdFunc)(RedisModuleCtx *ctx,
                                  RedisModuleString **argv, int argc);
/* A server event: its id and the version of the data it passes. */
typedef struct RedisModuleEvent {
  uint64_t id;
  uint64_t dataver;
} RedisModuleEvent;
typedef void (*RedisModuleEventCallback)(RedisModuleCtx *ctx,
                                         RedisModuleEvent e, uint64_t sub,
                                         void *data);

#define REDISMODULE_OK 0
#define REDISMODULE_ERR 1
#define REDISMODULE_APIVER_1 1
#define REDISMODULE_READ (1 << 0)
#define REDISMODULE_WRITE (1 << 1)
#define REDISMODULE_KEYTYPE_EMPTY 0
#define REDISMODULE_KEYTYPE_STRING 1
#define REDISMODULE_KEYTYPE_HASH 3
#define REDISMODULE_HASH_CFIELDS (1 << 2)
#define REDISMODULE_HASH_DELETE ((RedisModuleString *)(long)1)
#define REDISMODULE_CTX_FLAGS_SLAVE (1 << 3)
#define REDISMODULE_CTX_FLAGS_AOF (1 << 6)
#define REDISMODULE_EVENT_REPLICATION_ROLE_CHANGED 0
#define REDISMODULE_EVENT_REPLICA_CHANGE 6
#define REDISMODULE_EVENT_FORK_CHILD 13
#define REDISMODULE_SUBEVENT_FORK_CHILD_BORN 0
#define REDISMODULE_SUBEVENT_FORK_CHILD_DIED 1
#define REDISMODULE_EVENT_CONFIG 16
#define REDISMODULE_OPTION_NO_IMPLICIT_SIGNAL_MODIFIED (1 << 1)
#define REDISMODULE_NOTIFY_GENERIC (1 << 2)
#define REDISMODULE_NOTIFY_STRING (1 << 3)
#define REDISMODULE_NOTIFY_HASH (1 << 6)
#define REDISMODULE_ERRORMSG_WRONGTYPE \
  "WRONGTYPE Operation against a key holding the wrong kind of value"

/* (name, return type, parameters): every function the module calls. */
#define RM_FUNCS(X)                                                          \
  X(CreateCommand, int,                                                      \
    (RedisModuleCtx *, const char *, RedisModuleCmdFunc, const char *, int,  \
     int, int))                                                              \
  X(SetModuleAttribs, void, (RedisModuleCtx *, const char *, int, int))      \
  X(SetModuleOptions, void, (RedisModuleCtx *, int))                         \
  X(WrongArity, int, (RedisModuleCtx *))                                     \
  X(ReplyWithLongLong, int, (RedisModuleCtx *, long long))                   \
  X(ReplyWithError, int, (RedisModuleCtx *, const char *))                   \
  X(ReplyWithSimpleString, int, (RedisModuleCtx *, const char *))            \
  X(ReplyWithArray, int, (RedisModuleCtx *, long))                           \
  X(ReplyWithStringBuffer, int, (RedisModuleCtx *, const char *, size_t))    \
  X(StringPtrLen, const char *, (const RedisModuleString *, size_t *))       \
  X(CreateString, RedisModuleString *,                                       \
    (RedisModuleCtx *, const char *, size_t))                                \
  X(FreeString, void, (RedisModuleCtx *, RedisModuleString *))              \
  X(OpenKey, RedisModuleKey *, (RedisModuleCtx *, RedisModuleString *, int)) \
  X(CloseKey, void, (RedisModuleKey *))                                      \
  X(KeyType, int, (RedisModuleKey *))                                        \
  X(ValueLength, size_t, (RedisModuleKey *))                                 \
  X(StringSet, int, (RedisModuleKey *, RedisModuleString *))               \
  X(StringDMA, char *, (RedisModuleKey *, size_t *, int))                    \
  X(StringTruncate, int, (RedisModuleKey *, size_t))                         \
  X(SetAbsExpire, int, (RedisModuleKey *, long long))                        \
  X(DeleteKey, int, (RedisModuleKey *))                                      \
  X(SignalModifiedKey, int, (RedisModuleCtx *, RedisModuleString *))         \
  X(NotifyKeyspaceEvent, int,                                                \
    (RedisModuleCtx *, int, const char *, RedisModuleString *))              \
  X(HashGet, int, (RedisModuleKey *, int, ...))                              \
  X(HashSet, int, (RedisModuleKey *, int, ...))                              \
  X(Replicate, int, (RedisModuleCtx *, const char *, const char *, ...))     \
  X(ReplicateVerbatim, int, (RedisModuleCtx *))                              \
  X(GetContextFlags, int, (RedisModuleCtx *))                                \
  X(GetServerInfo, RedisModuleServerInfoData *,                              \
    (RedisModuleCtx *, const char *))                                        \
  X(FreeServerInfo, void, (RedisModuleCtx *, RedisModuleServerInfoData *))   \
  X(ServerInfoGetFieldSigned, long long,                                     \
    (RedisModuleServerInfoData *, const char *, int *))                      \
  X(SubscribeToServerEvent, int,                                             \
    (RedisModuleCtx *, RedisModuleEvent, RedisModuleEventCallback))          \
  X(Milliseconds, long long, (void))                                         \
  X(IsKeysPositionRequest, int, (RedisModuleCtx *))                          \
  X(KeyAtPos, void, (RedisModuleCtx *, int))                                 \
  X(Alloc, void *, (size_t))                                                 \
  X(Free, void, (void *))                                                    \
  X(Log, void, (RedisModuleCtx *, const char *, const char *, ...))

/* Newer than Redis 7.0 (7.2's): used when present. */
#define RM_FUNCS_OPTIONAL(X) X(Microseconds, long long, (void))

#define RM_DECLARE(name, ret, params) extern ret(*RedisModule_##name) params;
RM_FUNCS(RM_DECLARE)
RM_FUNCS_OPTIONAL(RM_DECLARE)
#undef RM_DECLARE

/*
 * Fetches every function of RM_FUNCS (and RM_FUNCS_OPTIONAL, NULL when
 * missing) through the lookup function in ctx's first word, then names the
 * module. Returns REDISMODULE_OK, or REDISMODULE_ERR when a required one
 * is missing (a Redis older than 7.0).
 */
int rm_init(RedisModuleCtx *ctx, const char *name, int version);

#endif /* SLUICE_MODULE_RM_H */
