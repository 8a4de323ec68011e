/*
 * fake_redis.c — the module API of src/module/rm.h over an in-memory key
 * table, for tests/unit/test_module.c and fuzz/module_fuzz.c (see
 * fake_redis.h). Each function follows what Redis 7.0's module.c does for
 * the cases the module can reach (empty keys, keys of another type, write
 * access), so a command that misuses the API misbehaves here as it would
 * in Redis, where it is recorded instead of crashing the server.
 */
#include "fake_redis.h"

#include "../../src/base/hash.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct RedisModuleString {
  size_t len;
  char *p;
  int argv; /* made by the fake for a command's arguments: not counted */
};

struct RedisModuleKey {
  RedisModuleCtx *ctx;
  char *name;
  size_t nlen;
  int mode;
};

typedef struct field {
  char *f, *v;
  size_t flen, vlen;
} field;

typedef struct fkey {
  char *name;
  size_t nlen;
  int type;
  char *v; /* string */
  size_t vlen;
  field *fields; /* hash */
  size_t nf;
  long long expire; /* ms, -1: none */
  int written;
} fkey;

static fkey *keys[4096];
static size_t nkeys;
static long long now_ms;
static long live_strings;
static int violations;
static char first_violation[200];
static fake_cmd cmds[16];
static int ncmds;
static const char *hidden;
static int module_options; /* RedisModule_SetModuleOptions's */

int RedisModule_OnLoad(RedisModuleCtx *ctx, RedisModuleString **argv,
                       int argc);

static void violation(const char *fmt, ...) {
  if (!violations++) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(first_violation, sizeof first_violation, fmt, ap);
    va_end(ap);
  }
}

static void *xmalloc(size_t n) {
  void *p = malloc(n ? n : 1);
  if (!p) abort();
  return p;
}

static char *dup_bytes(const void *p, size_t n) {
  char *d = xmalloc(n + 1);
  if (n) memcpy(d, p, n);
  d[n] = '\0';
  return d;
}

/* ---- the key table ---- */

static fkey **find_slot(const char *name, size_t len) {
  for (size_t i = 0; i < nkeys; i++)
    if (keys[i]->nlen == len && !memcmp(keys[i]->name, name, len))
      return &keys[i];
  return NULL;
}

static void free_key(fkey *k) {
  for (size_t i = 0; i < k->nf; i++) {
    free(k->fields[i].f);
    free(k->fields[i].v);
  }
  free(k->fields);
  free(k->v);
  free(k->name);
  free(k);
}

static void del_key(const char *name, size_t len) {
  fkey **s = find_slot(name, len);
  if (!s) return;
  free_key(*s);
  *s = keys[--nkeys];
}

/* The live key (an expired one is deleted, as Redis's lookup does). */
static fkey *lookup(const char *name, size_t len) {
  fkey **s = find_slot(name, len);
  if (s && (*s)->expire >= 0 && (*s)->expire <= now_ms) {
    del_key(name, len);
    return NULL;
  }
  return s ? *s : NULL;
}

static fkey *add_key(const char *name, size_t len, int type) {
  if (nkeys == sizeof keys / sizeof keys[0]) abort();
  fkey *k = calloc(1, sizeof *k);
  if (!k) abort();
  k->name = dup_bytes(name, len);
  k->nlen = len;
  k->type = type;
  k->expire = -1;
  keys[nkeys++] = k;
  return k;
}

void fake_reset(void) {
  while (nkeys) del_key(keys[0]->name, keys[0]->nlen);
}

void fake_set_ms(long long ms) { now_ms = ms; }

void fake_put_string(const char *key, const void *v, size_t len,
                     long long expire_ms) {
  del_key(key, strlen(key));
  fkey *k = add_key(key, strlen(key), FK_STRING);
  k->v = dup_bytes(v, len);
  k->vlen = len;
  k->expire = expire_ms;
}

static field *hash_find(fkey *k, const char *f, size_t len) {
  for (size_t i = 0; i < k->nf; i++)
    if (k->fields[i].flen == len && !memcmp(k->fields[i].f, f, len))
      return &k->fields[i];
  return NULL;
}

static void hash_set(fkey *k, const char *f, size_t flen, const char *v,
                     size_t vlen) {
  field *x = hash_find(k, f, flen);
  if (!x) {
    k->fields = realloc(k->fields, (k->nf + 1) * sizeof *k->fields);
    if (!k->fields) abort();
    x = &k->fields[k->nf++];
    x->f = dup_bytes(f, flen);
    x->flen = flen;
  } else {
    free(x->v);
  }
  x->v = dup_bytes(v, vlen);
  x->vlen = vlen;
}

void fake_put_hash_field(const char *key, const char *f, const void *v,
                         size_t len) {
  fkey *k = lookup(key, strlen(key));
  if (k && k->type != FK_HASH) {
    del_key(key, strlen(key));
    k = NULL;
  }
  if (!k) k = add_key(key, strlen(key), FK_HASH);
  hash_set(k, f, strlen(f), v, len);
}

void fake_put_other(const char *key) {
  del_key(key, strlen(key));
  add_key(key, strlen(key), FK_OTHER);
}

int fake_type(const char *key) {
  fkey *k = lookup(key, strlen(key));
  return k ? k->type : FK_NONE;
}

const char *fake_get_string(const char *key, size_t *len) {
  fkey *k = lookup(key, strlen(key));
  if (!k || k->type != FK_STRING) return NULL;
  *len = k->vlen;
  return k->v;
}

long long fake_expire(const char *key) {
  fkey *k = lookup(key, strlen(key));
  return k ? k->expire : -2;
}

size_t fake_hash_len(const char *key) {
  fkey *k = lookup(key, strlen(key));
  return k && k->type == FK_HASH ? k->nf : 0;
}

size_t fake_nkeys(void) { return nkeys; }

const char *fake_key_at(size_t i, int *type, long long *expire,
                        int *written) {
  *type = keys[i]->type;
  *expire = keys[i]->expire;
  *written = keys[i]->written;
  return keys[i]->name;
}

long fake_live_strings(void) { return live_strings; }

int fake_violations(const char **first) {
  if (first) *first = first_violation;
  return violations;
}

const fake_cmd *fake_commands(int *n) {
  *n = ncmds;
  return cmds;
}

/* ---- strings ---- */

static RedisModuleString *new_string(const char *p, size_t len, int argv) {
  RedisModuleString *s = xmalloc(sizeof *s);
  s->len = len;
  s->p = dup_bytes(p, len);
  s->argv = argv;
  if (!argv) live_strings++;
  return s;
}

static void free_string(RedisModuleString *s) {
  if (!s) return;
  if (!s->argv) live_strings--;
  free(s->p);
  free(s);
}

static const char *fk_StringPtrLen(const RedisModuleString *s, size_t *len) {
  if (len) *len = s->len;
  return s->p;
}

static RedisModuleString *fk_CreateString(RedisModuleCtx *ctx, const char *p,
                                          size_t len) {
  (void)ctx;
  return new_string(p, len, 0);
}

static void fk_FreeString(RedisModuleCtx *ctx, RedisModuleString *s) {
  (void)ctx;
  if (s && s->argv) violation("FreeString of a command argument");
  free_string(s);
}

/* ---- replies ---- */

static void add_reply(RedisModuleCtx *ctx, int kind, long long n,
                      const char *s, size_t len) {
  if (fake_reply_ok(ctx)) violation("a reply after the command's reply");
  if (ctx->nreplies == (int)(sizeof ctx->replies / sizeof ctx->replies[0])) {
    violation("too many reply calls");
    return;
  }
  fake_reply *r = &ctx->replies[ctx->nreplies++];
  r->kind = kind;
  r->n = n;
  r->s = s ? dup_bytes(s, len) : NULL;
}

static int fk_ReplyWithLongLong(RedisModuleCtx *ctx, long long v) {
  add_reply(ctx, 'i', v, NULL, 0);
  return REDISMODULE_OK;
}

static int fk_ReplyWithError(RedisModuleCtx *ctx, const char *err) {
  /* Redis 7.0 (addReplyErrorFormat) turns line breaks into spaces. */
  char *e = dup_bytes(err, strlen(err));
  for (char *c = e; (c = strpbrk(c, "\r\n"));) *c = ' ';
  add_reply(ctx, 'e', 0, e, strlen(e));
  free(e);
  return REDISMODULE_OK;
}

static int fk_ReplyWithSimpleString(RedisModuleCtx *ctx, const char *s) {
  add_reply(ctx, '+', 0, s, strlen(s));
  return REDISMODULE_OK;
}

static int fk_ReplyWithArray(RedisModuleCtx *ctx, long len) {
  if (len < 0) violation("an array of %ld", len);
  add_reply(ctx, '*', len, NULL, 0);
  return REDISMODULE_OK;
}

static int fk_ReplyWithStringBuffer(RedisModuleCtx *ctx, const char *buf,
                                    size_t len) {
  add_reply(ctx, '$', (long long)len, buf, len);
  return REDISMODULE_OK;
}

static int fk_WrongArity(RedisModuleCtx *ctx) {
  char msg[120];
  snprintf(msg, sizeof msg, "ERR wrong number of arguments for '%s' command",
           ctx->cmd);
  return fk_ReplyWithError(ctx, msg);
}

/* Replies r[*at..] that form one reply; -1 when it is incomplete. */
static int one_reply(const RedisModuleCtx *ctx, int *at) {
  if (*at >= ctx->nreplies) return -1;
  const fake_reply *r = &ctx->replies[(*at)++];
  if (r->kind != '*') return 0;
  for (long long i = 0; i < r->n; i++)
    if (one_reply(ctx, at)) return -1;
  return 0;
}

int fake_reply_ok(const RedisModuleCtx *ctx) {
  int at = 0;
  return one_reply(ctx, &at) == 0 && at == ctx->nreplies;
}

const char *fake_reply_text(const RedisModuleCtx *ctx) {
  static char buf[8192];
  size_t at = 0;
  buf[0] = '\0';
  for (int i = 0; i < ctx->nreplies && at < sizeof buf - 64; i++) {
    const fake_reply *r = &ctx->replies[i];
    if (r->kind == '*') continue;
    if (at) buf[at++] = ' ';
    if (r->kind == 'i')
      at += (size_t)snprintf(buf + at, sizeof buf - at, "%lld", r->n);
    else
      at += (size_t)snprintf(buf + at, sizeof buf - at, "%.*s",
                             (int)(r->kind == '$' ? r->n : 4000), r->s);
  }
  buf[at < sizeof buf ? at : sizeof buf - 1] = '\0';
  return buf;
}

/* ---- what a command wrote and signalled ---- */

enum { WROTE, SIGNALLED };

/* Notes that the command of ctx wrote key name, or signalled it. */
static void mark(RedisModuleCtx *ctx, const char *name, size_t len, int what) {
  uint64_t h = fnv1a(FNV1A_INIT, name, len);
  int i = 0;
  while (i < ctx->nmarks && ctx->marks[i].h != h) i++;
  if (i == (int)(sizeof ctx->marks / sizeof ctx->marks[0])) return;
  if (i == ctx->nmarks) ctx->marks[ctx->nmarks++].h = h;
  if (what == WROTE)
    ctx->marks[i].wrote = 1;
  else
    ctx->marks[i].signalled = 1;
}

/* After a command: Redis tells WATCH and client-side caching of exactly
   the keys that changed. */
static void check_marks(const RedisModuleCtx *ctx) {
  for (int i = 0; i < ctx->nmarks; i++)
    if (ctx->marks[i].wrote != ctx->marks[i].signalled)
      violation("%s: a key %s", ctx->cmd,
                ctx->marks[i].wrote ? "written and not signalled as modified"
                                    : "signalled as modified, not written");
}

int fake_signalled(const RedisModuleCtx *ctx) {
  int n = 0;
  for (int i = 0; i < ctx->nmarks; i++) n += ctx->marks[i].signalled;
  return n;
}

static int fk_SignalModifiedKey(RedisModuleCtx *ctx, RedisModuleString *name) {
  mark(ctx, name->p, name->len, SIGNALLED);
  return REDISMODULE_OK;
}

/* Recorded as "event key;" (types as Redis 7.0's notify.c would file
   them: the module's events are the script's commands'). */
static int fk_NotifyKeyspaceEvent(RedisModuleCtx *ctx, int type,
                                  const char *event, RedisModuleString *key) {
  static const struct {
    const char *event;
    int type;
  } known[] = {{"set", REDISMODULE_NOTIFY_STRING},
               {"expire", REDISMODULE_NOTIFY_GENERIC},
               {"del", REDISMODULE_NOTIFY_GENERIC},
               {"hset", REDISMODULE_NOTIFY_HASH},
               {"hdel", REDISMODULE_NOTIFY_HASH}};
  size_t i = 0;
  while (i < sizeof known / sizeof known[0] && strcmp(known[i].event, event))
    i++;
  if (i == sizeof known / sizeof known[0] || known[i].type != type)
    violation("keyspace event %s of type %d", event, type);
  size_t room = sizeof ctx->events - ctx->events_len;
  int n = snprintf(ctx->events + ctx->events_len, room, "%s %.*s;", event,
                   (int)key->len, key->p);
  if (n > 0 && (size_t)n < room) ctx->events_len += (size_t)n;
  return REDISMODULE_OK;
}

static void fk_SetModuleOptions(RedisModuleCtx *ctx, int options) {
  (void)ctx;
  module_options = options;
}

/* ---- keys ---- */

/* Key k (h's) written through the API: for fake_key_at, and for the
   command's check that it was signalled. */
static void wrote(RedisModuleKey *h, fkey *k) {
  k->written = 1;
  mark(h->ctx, h->name, h->nlen, WROTE);
}

static RedisModuleKey *fk_OpenKey(RedisModuleCtx *ctx, RedisModuleString *name,
                                  int mode) {
  fkey *k = lookup(name->p, name->len);
  /* Redis: a key opened only for reading that does not exist is NULL. */
  if (!k && !(mode & REDISMODULE_WRITE)) return NULL;
  RedisModuleKey *h = xmalloc(sizeof *h);
  h->ctx = ctx;
  h->name = dup_bytes(name->p, name->len);
  h->nlen = name->len;
  h->mode = mode;
  return h;
}

static void fk_CloseKey(RedisModuleKey *h) {
  if (!h) return;
  /* Redis 7.0's moduleCloseKey: a key opened for writing is signalled as
     modified, whatever was done with it, unless the module opted out. */
  if ((h->mode & REDISMODULE_WRITE) &&
      !(module_options & REDISMODULE_OPTION_NO_IMPLICIT_SIGNAL_MODIFIED))
    mark(h->ctx, h->name, h->nlen, SIGNALLED);
  free(h->name);
  free(h);
}

static fkey *key_of(RedisModuleKey *h) {
  return h ? lookup(h->name, h->nlen) : NULL;
}

static int fk_KeyType(RedisModuleKey *h) {
  static const int type[] = {REDISMODULE_KEYTYPE_EMPTY,
                             REDISMODULE_KEYTYPE_STRING,
                             REDISMODULE_KEYTYPE_HASH, 2 /* LIST */};
  fkey *k = key_of(h);
  return k ? type[k->type] : REDISMODULE_KEYTYPE_EMPTY;
}

static size_t fk_ValueLength(RedisModuleKey *h) {
  fkey *k = key_of(h);
  if (!k) return 0;
  return k->type == FK_STRING ? k->vlen : k->type == FK_HASH ? k->nf : 1;
}

static char *fk_StringDMA(RedisModuleKey *h, size_t *len, int mode) {
  static char empty[1];
  fkey *k = key_of(h);
  if (!k) {
    *len = 0;
    return empty;
  }
  if (k->type != FK_STRING) return NULL;
  if ((mode & REDISMODULE_WRITE) && !(h->mode & REDISMODULE_WRITE))
    violation("StringDMA for writing on a key opened for reading");
  if (mode & REDISMODULE_WRITE) wrote(h, k);
  *len = k->vlen;
  return k->v;
}

/* Redis 7.0's RM_StringTruncate: the string value resized to len bytes
   (zero-filled when it grows; a missing key made, unless len is 0). */
static int fk_StringTruncate(RedisModuleKey *h, size_t len) {
  if (!(h->mode & REDISMODULE_WRITE)) return REDISMODULE_ERR;
  fkey *k = key_of(h);
  if (k && k->type != FK_STRING) return REDISMODULE_ERR;
  if (len > 512 * 1024 * 1024) return REDISMODULE_ERR;
  if (!k && len == 0) return REDISMODULE_OK;
  if (!k) k = add_key(h->name, h->nlen, FK_STRING);
  char *v = xmalloc(len + 1);
  memset(v, 0, len + 1);
  if (k->v) memcpy(v, k->v, k->vlen < len ? k->vlen : len);
  free(k->v);
  k->v = v;
  k->vlen = len;
  wrote(h, k);
  return REDISMODULE_OK;
}

/* Redis 7.0's RM_StringSet: the old key (value and expiry) deleted, then
   the string stored as a new one with no expiry. */
static int fk_StringSet(RedisModuleKey *h, RedisModuleString *str) {
  if (!(h->mode & REDISMODULE_WRITE)) return REDISMODULE_ERR;
  del_key(h->name, h->nlen);
  fkey *k = add_key(h->name, h->nlen, FK_STRING);
  k->v = xmalloc(str->len + 1);
  memcpy(k->v, str->p, str->len);
  k->v[str->len] = '\0';
  k->vlen = str->len;
  wrote(h, k);
  return REDISMODULE_OK;
}

static int fk_SetAbsExpire(RedisModuleKey *h, long long at) {
  fkey *k = key_of(h);
  if (!(h->mode & REDISMODULE_WRITE) || !k || at < 0) return REDISMODULE_ERR;
  k->expire = at;
  mark(h->ctx, h->name, h->nlen, WROTE);
  return REDISMODULE_OK;
}

static int fk_DeleteKey(RedisModuleKey *h) {
  if (!(h->mode & REDISMODULE_WRITE)) return REDISMODULE_ERR;
  if (key_of(h)) mark(h->ctx, h->name, h->nlen, WROTE);
  del_key(h->name, h->nlen);
  return REDISMODULE_OK;
}

static int fk_HashGet(RedisModuleKey *h, int flags, ...) {
  fkey *k = key_of(h);
  if (k && k->type != FK_HASH) return REDISMODULE_ERR;
  if (flags) violation("HashGet flags %d (the fake knows 0 only)", flags);
  va_list ap;
  va_start(ap, flags);
  RedisModuleString *f;
  while ((f = va_arg(ap, RedisModuleString *))) {
    RedisModuleString **out = va_arg(ap, RedisModuleString **);
    field *x = k ? hash_find(k, f->p, f->len) : NULL;
    *out = x ? new_string(x->v, x->vlen, 0) : NULL;
  }
  va_end(ap);
  return REDISMODULE_OK;
}

static int fk_HashSet(RedisModuleKey *h, int flags, ...) {
  fkey *k = key_of(h);
  if (!(h->mode & REDISMODULE_WRITE) || (k && k->type != FK_HASH)) return 0;
  if (flags) violation("HashSet flags %d (the fake knows 0 only)", flags);
  if (!k) k = add_key(h->name, h->nlen, FK_HASH);
  wrote(h, k);
  int n = 0;
  va_list ap;
  va_start(ap, flags);
  RedisModuleString *f;
  while ((f = va_arg(ap, RedisModuleString *))) {
    RedisModuleString *v = va_arg(ap, RedisModuleString *);
    if (v == REDISMODULE_HASH_DELETE) {
      field *x = hash_find(k, f->p, f->len);
      if (x) {
        free(x->f);
        free(x->v);
        *x = k->fields[--k->nf];
        n++;
      }
    } else {
      hash_set(k, f->p, f->len, v->p, v->len);
      n++;
    }
  }
  va_end(ap);
  if (k->nf == 0) del_key(h->name, h->nlen); /* Redis drops empty hashes */
  return n;
}

/* ---- replication ---- */

static void repl_word(RedisModuleCtx *ctx, const char *p, size_t n) {
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)p[i];
    char buf[8];
    int w = c > ' ' && c < 127 && c != '\\'
                ? snprintf(buf, sizeof buf, "%c", c)
                : snprintf(buf, sizeof buf, "\\x%02x", c);
    if (ctx->repl_len + (size_t)w + 2 >= sizeof ctx->repl) return;
    memcpy(ctx->repl + ctx->repl_len, buf, (size_t)w);
    ctx->repl_len += (size_t)w;
  }
  ctx->repl[ctx->repl_len] = '\0';
}

static void repl_sep(RedisModuleCtx *ctx, char c) {
  if (ctx->repl_len + 2 >= sizeof ctx->repl) return;
  ctx->repl[ctx->repl_len++] = c;
  ctx->repl[ctx->repl_len] = '\0';
}

static int fk_Replicate(RedisModuleCtx *ctx, const char *cmd, const char *fmt,
                        ...) {
  va_list ap;
  va_start(ap, fmt);
  repl_word(ctx, cmd, strlen(cmd));
  for (const char *f = fmt; *f; f++) {
    repl_sep(ctx, ' ');
    if (*f == 'c') {
      const char *s = va_arg(ap, const char *);
      repl_word(ctx, s, strlen(s));
    } else if (*f == 's') {
      RedisModuleString *s = va_arg(ap, RedisModuleString *);
      repl_word(ctx, s->p, s->len);
    } else if (*f == 'b') {
      const char *s = va_arg(ap, const char *);
      size_t n = va_arg(ap, size_t);
      repl_word(ctx, s, n);
    } else if (*f == 'l') {
      char num[24];
      int n = snprintf(num, sizeof num, "%lld", va_arg(ap, long long));
      repl_word(ctx, num, (size_t)n);
    } else {
      violation("Replicate format '%c' unknown to the fake", *f);
      va_end(ap);
      return REDISMODULE_ERR;
    }
  }
  va_end(ap);
  repl_sep(ctx, ';');
  ctx->nrepl++;
  return REDISMODULE_OK;
}

/* What the fake's Redis has for writes to go to, as INFO and the context
   flags tell it (fake_set_feeds), and the one event handler the module
   subscribed (fake_fire). */
static struct {
  long long replicas, backlog;
  int flags;
} server = {1, 1, 0};
static RedisModuleEventCallback handler;
static long verbatim;

static int fk_ReplicateVerbatim(RedisModuleCtx *ctx) {
  (void)ctx;
  verbatim++;
  return REDISMODULE_OK;
}

static int fk_GetContextFlags(RedisModuleCtx *ctx) {
  (void)ctx;
  return server.flags;
}

/* A section of INFO: only "replication" exists here. */
struct RedisModuleServerInfoData {
  long long replicas, backlog;
};

static RedisModuleServerInfoData *fk_GetServerInfo(RedisModuleCtx *ctx,
                                                   const char *section) {
  (void)ctx;
  if (strcmp(section, "replication")) {
    violation("GetServerInfo of section %s unknown to the fake", section);
    return NULL;
  }
  RedisModuleServerInfoData *d = xmalloc(sizeof *d);
  d->replicas = server.replicas;
  d->backlog = server.backlog;
  return d;
}

static void fk_FreeServerInfo(RedisModuleCtx *ctx,
                              RedisModuleServerInfoData *d) {
  (void)ctx;
  free(d);
}

static long long fk_ServerInfoGetFieldSigned(RedisModuleServerInfoData *d,
                                             const char *name, int *err) {
  *err = 0;
  if (!strcmp(name, "connected_slaves")) return d->replicas;
  if (!strcmp(name, "repl_backlog_active")) return d->backlog;
  *err = 1;
  return 0;
}

/* An event this Redis does not have (fake_refuse_event), or 0. */
static uint64_t refused;

void fake_refuse_event(uint64_t id) { refused = id; }

static int fk_SubscribeToServerEvent(RedisModuleCtx *ctx, RedisModuleEvent e,
                                     RedisModuleEventCallback cb) {
  (void)ctx;
  if (refused && e.id == refused) return REDISMODULE_ERR;
  if (handler && handler != cb) violation("two event handlers");
  handler = cb;
  return REDISMODULE_OK;
}

void fake_set_feeds(long long replicas, long long backlog, int flags) {
  server.replicas = replicas;
  server.backlog = backlog;
  server.flags = flags;
}

void fake_fire(uint64_t id, uint64_t sub) {
  RedisModuleCtx ctx;
  fake_ctx_init(&ctx, "event");
  if (handler) handler(&ctx, (RedisModuleEvent){id, 1}, sub, NULL);
}

long fake_verbatim(void) { return verbatim; }

/* ---- the rest ---- */

static int fk_CreateCommand(RedisModuleCtx *ctx, const char *name,
                            RedisModuleCmdFunc fn, const char *flags,
                            int first, int last, int step) {
  (void)ctx;
  for (int i = 0; i < ncmds; i++)
    if (!strcmp(cmds[i].name, name)) return REDISMODULE_ERR;
  if (ncmds == (int)(sizeof cmds / sizeof cmds[0]) ||
      strlen(name) >= sizeof cmds[0].name ||
      strlen(flags) >= sizeof cmds[0].flags)
    return REDISMODULE_ERR;
  fake_cmd *c = &cmds[ncmds++];
  snprintf(c->name, sizeof c->name, "%s", name);
  snprintf(c->flags, sizeof c->flags, "%s", flags);
  c->fn = fn;
  c->first = first;
  c->last = last;
  c->step = step;
  return REDISMODULE_OK;
}

static void fk_SetModuleAttribs(RedisModuleCtx *ctx, const char *name, int ver,
                                int apiver) {
  (void)ctx, (void)name, (void)ver, (void)apiver;
}

static long long fk_Milliseconds(void) { return now_ms; }

static int fk_IsKeysPositionRequest(RedisModuleCtx *ctx) {
  return ctx->keys_request;
}

static void fk_KeyAtPos(RedisModuleCtx *ctx, int pos) {
  if (!ctx->keys_request) violation("KeyAtPos outside a getkeys call");
  if (ctx->nkeypos < (int)(sizeof ctx->keypos / sizeof ctx->keypos[0]))
    ctx->keypos[ctx->nkeypos++] = pos;
}

static void *fk_Alloc(size_t n) { return xmalloc(n); }
static void fk_Free(void *p) { free(p); }

static void fk_Log(RedisModuleCtx *ctx, const char *level, const char *fmt,
                   ...) {
  (void)ctx, (void)level, (void)fmt;
}

/* Every fake has exactly the type rm.h declares (a compile-time check). */
#define FK_CHECK(fn, ret, params) \
  static ret(*const check_##fn) params __attribute__((unused)) = fk_##fn;
RM_FUNCS(FK_CHECK)
#undef FK_CHECK

/* GetApi: every function of RM_FUNCS by its Redis name (not `hidden`). */
static int fake_getapi(const char *name, void *out) {
  static const struct {
    const char *name;
    void *fn;
  } api[] = {
#define FK_ENTRY(fn, ret, params) {"RedisModule_" #fn, (void *)fk_##fn},
      RM_FUNCS(FK_ENTRY)
#undef FK_ENTRY
  };
  for (size_t i = 0; i < sizeof api / sizeof api[0]; i++)
    if (!strcmp(api[i].name, name)) {
      if (hidden && !strcmp(hidden, name + strlen("RedisModule_")))
        return REDISMODULE_ERR;
      *(void **)out = api[i].fn;
      return REDISMODULE_OK;
    }
  return REDISMODULE_ERR;
}

void fake_ctx_init(RedisModuleCtx *ctx, const char *cmd) {
  memset(ctx, 0, sizeof *ctx);
  ctx->getapi = fake_getapi;
  ctx->cmd = cmd;
}

void fake_ctx_clear(RedisModuleCtx *ctx) {
  for (int i = 0; i < ctx->nreplies; i++) free(ctx->replies[i].s);
  const char *cmd = ctx->cmd;
  fake_ctx_init(ctx, cmd);
}

int fake_init(long long ms, const char *const *args, int n,
              const char *hide) {
  fake_reset();
  now_ms = ms;
  ncmds = 0;
  violations = 0;
  first_violation[0] = '\0';
  hidden = hide;
  module_options = 0;
  handler = NULL;
  verbatim = 0;
  fake_set_feeds(1, 1, 0);
  RedisModuleString *argv[8];
  if (n > 8) n = 8;
  for (int i = 0; i < n; i++) argv[i] = new_string(args[i], strlen(args[i]), 1);
  RedisModuleCtx ctx;
  fake_ctx_init(&ctx, "module");
  long before = live_strings;
  int rc = RedisModule_OnLoad(&ctx, argv, n);
  for (int i = 0; i < n; i++) free_string(argv[i]);
  hidden = NULL;
  /* What OnLoad made, the module keeps for good: not a command's leak. */
  live_strings = before;
  return rc;
}

/* Runs command `name` on args[0..n) (their lengths in lens). */
static int call(RedisModuleCtx *ctx, const char *name, int n,
                const char *const *args, const size_t *lens, int getkeys) {
  const fake_cmd *c = NULL;
  for (int i = 0; i < ncmds; i++)
    if (!strcmp(cmds[i].name, name)) c = &cmds[i];
  if (!c) return -100;
  RedisModuleString **a = xmalloc(sizeof *a * (size_t)(n + 1));
  a[0] = new_string(name, strlen(name), 1);
  for (int i = 0; i < n; i++) a[i + 1] = new_string(args[i], lens[i], 1);
  fake_ctx_clear(ctx);
  ctx->cmd = c->name;
  ctx->keys_request = getkeys;
  int rc = c->fn(ctx, a, n + 1);
  check_marks(ctx);
  for (int i = 0; i <= n; i++) free_string(a[i]);
  free(a);
  return rc;
}

int fake_call_bin(RedisModuleCtx *ctx, const char *name, int n,
                  const char *const *args, const size_t *lens) {
  return call(ctx, name, n, args, lens, 0);
}

int fake_getkeys(RedisModuleCtx *ctx, const char *name, int n,
                 const char *const *args) {
  size_t lens[64];
  if (n > 64) return -100;
  for (int i = 0; i < n; i++) lens[i] = strlen(args[i]);
  return call(ctx, name, n, args, lens, 1);
}

int fake_call(RedisModuleCtx *ctx, const char *name, int n,
              const char *const *args) {
  size_t lens[64];
  if (n > 64) return -100;
  for (int i = 0; i < n; i++) lens[i] = strlen(args[i]);
  return call(ctx, name, n, args, lens, 0);
}
