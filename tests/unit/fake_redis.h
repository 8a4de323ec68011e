/*
 * fake_redis.h — a stand-in for Redis behind the module API of
 * src/module/rm.h, so that the module's command functions run in a plain
 * process (tests/unit/test_module.c under ASan/UBSan, fuzz/module_fuzz.c
 * under libFuzzer) instead of inside a redis-server.
 *
 * It fills the module's RedisModule_* pointers with functions that act on
 * a small in-memory key table (strings, hashes, and keys of "another
 * type"), with Redis's rules where the module relies on them: an expired
 * key reads as empty, a write to a string makes it a string, HashSet with
 * REDISMODULE_HASH_DELETE removes a field. It records what a command
 * answered (every reply call, checked for shape: exactly one complete
 * reply) and what it replicated (each RedisModule_Replicate rendered as
 * its words), and counts the strings it hands out, so a test can see a
 * command free everything it created. Misuse a real Redis would crash on
 * or reject (a reply after the reply, an unknown Replicate format, a
 * DMA write to a non-string) is recorded as a violation instead, and so
 * is a key written and not signalled as modified, or the reverse.
 */
#ifndef SLUICE_TESTS_FAKE_REDIS_H
#define SLUICE_TESTS_FAKE_REDIS_H

#include <stddef.h>
#include <stdint.h>

#include "../../src/module/rm.h"

/* What a key holds. FK_OTHER stands for a list, set, ...: no API reads it. */
enum { FK_NONE, FK_STRING, FK_HASH, FK_OTHER };

/* One reply call. */
typedef struct fake_reply {
  int kind; /* 'i' integer, 'e' error, '+' simple, '*' array, '$' bulk */
  long long n;
  char *s; /* error, simple or bulk text (bulk: n bytes) */
} fake_reply;

/* The calling context: the command's name (for WrongArity), the replies,
   the replicated commands and the keys a getkeys call reported. */
struct RedisModuleCtx {
  int (*getapi)(const char *name, void *out); /* first word, as Redis's */
  const char *cmd;
  int keys_request;
  int keypos[64];
  int nkeypos;
  fake_reply replies[512];
  int nreplies;
  char repl[4096]; /* replicated commands: words joined by ' ', ';' after
                      each, binary bytes as \xNN */
  size_t repl_len;
  int nrepl;
  char events[1024]; /* keyspace events: "event key;" each */
  size_t events_len;
  /* The keys the command wrote and those signalled as modified (by the
     module, or by Redis at CloseKey unless the module opted out), by a
     hash of the name: after the command the fake checks they are the
     same keys, since a WATCH aborts on a signal alone. */
  struct {
    uint64_t h;
    int wrote, signalled;
  } marks[64];
  int nmarks;
};

/* A registered command. */
typedef struct fake_cmd {
  char name[32];
  RedisModuleCmdFunc fn;
  char flags[64];
  int first, last, step;
} fake_cmd;

/* Empties the key table and the registered commands and starts the
   clock at `now_ms`; then loads the module as Redis would (its
   RedisModule_OnLoad, with args[0..n) as load arguments, the API fetched
   through the fake's GetApi). Returns OnLoad's answer. `hide` names one
   API function to withhold (a Redis without it), or NULL. */
int fake_init(long long now_ms, const char *const *args, int n,
              const char *hide);
/* Frees every key (the end of a test or a fuzz input). */
void fake_reset(void);
/* Redis's clock as the fake tells it (RedisModule_Milliseconds). */
void fake_set_ms(long long ms);

/* A context whose first word is the fake's GetApi (for OnLoad). */
void fake_ctx_init(RedisModuleCtx *ctx, const char *cmd);
/* Frees what the replies hold, ready for another command. */
void fake_ctx_clear(RedisModuleCtx *ctx);

/* The commands RedisModule_OnLoad registered, and how many. */
const fake_cmd *fake_commands(int *n);

/* Calls command `name` (as registered) with the NUL-terminated words
   args[0..n) after its name; the context then holds the reply and what
   was replicated. Returns the command function's return value, -100
   when no such command. */
int fake_call(RedisModuleCtx *ctx, const char *name, int n,
              const char *const *args);
/* The same with counted arguments (binary words). */
int fake_call_bin(RedisModuleCtx *ctx, const char *name, int n,
                  const char *const *args, const size_t *lens);
/* The same as Redis's COMMAND GETKEYS asks a getkeys-api command: the
   positions reported are in ctx->keypos[0..nkeypos). */
int fake_getkeys(RedisModuleCtx *ctx, const char *name, int n,
                 const char *const *args);

/* The reply rendered as redis-cli prints it, words joined by one space
   (an error as its text); "" when there was no reply. */
const char *fake_reply_text(const RedisModuleCtx *ctx);
/* 1 when the replies form exactly one complete reply. */
int fake_reply_ok(const RedisModuleCtx *ctx);

/* What the fake's Redis has for writes to go to (INFO's connected_slaves
   and repl_backlog_active, and GetContextFlags' answer): by default one
   replica, so that every write is replicated (fake_init restores it).
   The module reads it at its load and at each event fired. */
void fake_set_feeds(long long replicas, long long backlog, int flags);
/* Fires server event id (subevent sub) at the module's handler. */
void fake_fire(uint64_t id, uint64_t sub);

/* Makes the module's subscription to event id fail, as on a Redis that
   does not have it (0: none fails), from the next load on. */
void fake_refuse_event(uint64_t id);
/* The keys the last command signalled as modified. */
int fake_signalled(const RedisModuleCtx *ctx);
/* Calls of RedisModule_ReplicateVerbatim since the module's load. */
long fake_verbatim(void);

/* Keys: put a string (binary) or a key of another type, read them. */
void fake_put_string(const char *key, const void *v, size_t len,
                     long long expire_ms);
void fake_put_hash_field(const char *key, const char *field, const void *v,
                         size_t len);
void fake_put_other(const char *key);
int fake_type(const char *key);
/* A string's value and length; NULL when the key holds no string. */
const char *fake_get_string(const char *key, size_t *len);
/* A key's absolute expiry in ms, -1 for none, -2 when there is no key. */
long long fake_expire(const char *key);
/* Fields a hash holds; 0 when none. */
size_t fake_hash_len(const char *key);
/* Keys in the table. */
size_t fake_nkeys(void);
/* The name of key i (0 <= i < fake_nkeys()), its type, its expiry (-1:
   none; an expired key is not dropped here) and whether the module wrote
   it (set by every write through the API). */
const char *fake_key_at(size_t i, int *type, long long *expire,
                        int *written);

/* Strings handed out and not freed (argv excluded). */
long fake_live_strings(void);
/* Misuses seen since fake_init (a message for the first), 0 when none. */
int fake_violations(const char **first);

#endif /* SLUICE_TESTS_FAKE_REDIS_H */
