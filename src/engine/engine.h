/*
 * engine.h — the daemon's decision engine: config rules -> limiters ->
 * decisions, shared by the HTTP and RESP front ends.
 *
 * The engine owns the store, the current config generation and the
 * limiters. Worker threads each hold an engine_thread: it pins one config
 * generation between two calls of engine_thread_quiesce (once per event loop
 * iteration), so a reload swaps configs without any lock or shared write on
 * the request path, and frees the old generation only once every thread
 * has moved past it. Limiters survive a reload when their rule and policy
 * are unchanged, so a reload does not reset anybody's quota.
 */
#ifndef SLUICE_ENGINE_H
#define SLUICE_ENGINE_H

#include <stddef.h>
#include <stdint.h>

#include <hiredis/hiredis.h>

#include "../rules/config.h"
#include "sluice.h"

#define ENG_MAX_DESCRIPTORS 16 /* per request */
#define ENG_MAX_ENTRIES 16     /* per descriptor */
#define ENG_MAX_STATUSES 64    /* limits matched by one request */
#define ENG_MAX_THREADS 256
#define ENG_MAX_ADHOC 1024     /* distinct ad-hoc policies */

/* Engine errors, beyond the library's SL_E* codes. */
enum {
  ENG_EDOMAIN = -100,     /* unknown domain */
  ENG_EDESCRIPTOR = -101, /* empty, too many or too long descriptors */
  ENG_EADHOC = -102,      /* too many distinct ad-hoc policies */
  ENG_EREMOTE = -103,     /* needs Redis, which this call cannot reach
                             (no remote, or a caller that cannot wait) */
  ENG_ESTORE = -104,      /* Redis failed (a reset: eng_reset says how) */
};

/* The *_async calls' "the answer comes later" (positive: not an error). */
#define ENG_PENDING 1

typedef struct engine engine;
typedef struct engine_thread engine_thread;

typedef struct engine_opts {
  size_t max_memory; /* store cap; 0 = library default */
  /* Fleet mode: decisions by the Redis script (src/fleet/script.h) through
     each thread's remote (engine_thread_set_remote). */
  int remote;
  int cluster;           /* keys route by slot: group a request's keys */
  int on_store_error;    /* for limits that set none; DEFAULT = allow */
  double local_fraction; /* for local without a fraction; 0 = 0.5 */
  int breaker_ms;        /* deny's Retry-After while Redis is out */
  /* Requests per script call (--batch-max): a thread's requests of one
     event-loop pass (one slot) share calls of up to this many; 0 or 1 =
     a call each. */
  int batch_max;
  /* Approximate mode (--sync): decisions stay local (remote = 0); every
     local charge is recorded for engine_sync_take. */
  int sync;
  int db; /* fleet mode: the Redis database (SELECT; resets' channel) */
} engine_opts;

/* Takes ownership of cfg. NULL on failure (message in err). */
engine *engine_new(const engine_opts *opts, sl_config *cfg, char *err,
                   size_t err_len);
/* Every engine_thread must be freed first. */
void engine_free(engine *e);

/*
 * Makes cfg (owned from now on, also when the call fails) the current
 * config. Waits until every
 * online thread has passed a quiesce point, then frees the old generation
 * and the limiters no rule uses any more. Call from one thread at a time.
 * 0, or -1 (out of memory: the old config stays).
 */
int engine_reload(engine *e, sl_config *cfg);
/* Counts a failed reload attempt (an invalid new config). */
void engine_note_reload_failure(engine *e);

/* The current config (valid until the next engine_reload on this thread). */
const sl_config *engine_config(engine *e);
sl_store *engine_store(engine *e);

engine_thread *engine_thread_new(engine *e);
void engine_thread_free(engine_thread *t);
/* A quiescent point: the thread drops the config it held and picks up the
   current one. Call at least every 100 ms while online. */
void engine_thread_quiesce(engine_thread *t);
/* The thread holds no config until its next quiesce (e.g. while blocked). */
void engine_thread_offline(engine_thread *t);

/*
 * Fleet mode's I/O, provided by the daemon per thread. send queues cmd
 * (malloc'd; owned by the callee from then on) for the Redis node serving
 * `slot` (-1: any) and returns 0, after which cb runs exactly once, later,
 * on this thread (r = the reply, or NULL with err); or returns -1 at once
 * when the store is known to be down (cb never runs).
 */
typedef void (*eng_reply_fn)(void *ud, const redisReply *r, const char *err);
typedef int (*eng_send_fn)(void *io, int slot, char *cmd, size_t len,
                           eng_reply_fn cb, void *ud);
void engine_thread_set_remote(engine_thread *t, eng_send_fn send, void *io);
/* Fleet mode: sends the requests this thread queued for batched script
   calls (engine_opts.batch_max). Call after each event-loop pass, before
   the remote writes its pipeline. */
void engine_thread_flush(engine_thread *t);

/* ---- requests ---- */

typedef struct eng_descriptor {
  cfg_entry entries[ENG_MAX_ENTRIES];
  size_t n;
  int64_t hits; /* this descriptor's cost; < 0 = the request's */
} eng_descriptor;

typedef struct eng_request {
  const char *domain;
  size_t domain_len;
  eng_descriptor *descriptors;
  size_t n;
  int64_t hits; /* default cost of each descriptor (0 is a peek) */
} eng_request;

/* The outcome of one limit. */
typedef struct eng_status {
  const cfg_limit *limit; /* NULL for an ad-hoc policy */
  const char *policy_str; /* canonical policy (or "unlimited"/"blocked") */
  const sl_policy *policy; /* the rule's or ad-hoc policy, parsed */
  sl_decision d;          /* retry_after_ns < 0: never (a blocked rule) */
  int descriptor;         /* index in the request */
  int shadow;             /* shadow rule: d says what it would have done */
  int unlimited;
} eng_status;

typedef struct eng_result {
  int allowed;
  eng_status st[ENG_MAX_STATUSES];
  size_t n;
  int worst;                            /* most restrictive st[], or -1 */
  int by_descriptor[ENG_MAX_DESCRIPTORS]; /* most restrictive per
                                             descriptor, or -1 (no limit) */
} eng_result;

/*
 * Decides a config-driven request: every descriptor is matched, every
 * matched limit checked, and the request charged only if all non-shadow
 * limits allow it. Returns 0, ENG_EDOMAIN, ENG_EDESCRIPTOR, or an SL_E*
 * code (SL_ECOST: a cost above a rule's capacity).
 */
int engine_check(engine_thread *t, const eng_request *req, int64_t now,
                 eng_result *out);

/*
 * The same, for a caller that can wait: with the state in Redis (fleet
 * mode) the answer needs a round trip. Returns ENG_PENDING when the answer
 * will come through done(ud, rc, out) later on this thread (out must stay
 * valid until then; done runs exactly once); anything else is the answer
 * now, as engine_check's, and done never runs. A failed Redis is answered
 * per limit by on_store_error (allow, deny, or a local limiter).
 */
typedef void (*eng_done_fn)(void *ud, int rc, eng_result *out);
int engine_check_async(engine_thread *t, const eng_request *req, int64_t now,
                       eng_result *out, eng_done_fn done, void *ud);

/*
 * Decides an ad-hoc request: `key` under the policy spelled `spec`
 * (parsed once, then cached). Returns 0, SL_EPOLICY (message in err),
 * ENG_EADHOC, or SL_E*.
 */
int engine_throttle(engine_thread *t, const char *key, size_t key_len,
                    const char *spec, size_t spec_len, int64_t cost,
                    int64_t now, eng_result *out, char *err, size_t err_len);

/* The same with a policy value (CL.THROTTLE builds its own). */
int engine_throttle_policy(engine_thread *t, const char *key, size_t key_len,
                           const sl_policy *p, int64_t cost, int64_t now,
                           eng_result *out);

/* Both for a caller that can wait (see engine_check_async). */
int engine_throttle_async(engine_thread *t, const char *key, size_t key_len,
                          const char *spec, size_t spec_len, int64_t cost,
                          int64_t now, eng_result *out, char *err,
                          size_t err_len, eng_done_fn done, void *ud);
int engine_throttle_policy_async(engine_thread *t, const char *key,
                                 size_t key_len, const sl_policy *p,
                                 int64_t cost, int64_t now, eng_result *out,
                                 eng_done_fn done, void *ud);

/* ---- resets (SL.RESET, POST /admin/reset) ---- */

/* What a reset did. */
typedef struct eng_reset {
  int dropped;   /* (limit, key) states dropped: in memory mode the store's;
                    in fleet mode those that had a Redis key (DEL said 1) or
                    state on this daemon (a local or on_store_error: local
                    limiter, or approximate mode's charges not yet pushed) */
  int keys;      /* fleet mode: Redis keys it deleted (DELs sent or not) */
  int failed;    /* ... of which Redis did not confirm the deletion (an
                    error, a timeout, or down: not sent) */
  int unpublished; /* approximate mode: the PUBLISH that tells the other
                      daemons (engine_sync_reset) was not confirmed */
  char err[160]; /* why (the first failure), or a policy's error */
} eng_reset;

typedef void (*eng_reset_fn)(void *ud, int rc, eng_reset *out);

/*
 * Forgets `key` under ad-hoc policies (SL.THROTTLE, CL.THROTTLE,
 * /v1/throttle): the policy spelled `spec` (spec_len bytes), or with
 * spec_len 0 every ad-hoc policy this daemon has used since it started
 * (in fleet mode, another daemon's policies are not known here: name the
 * policy).
 *
 * In fleet mode (exact or approximate) the key's Redis key under each
 * policy is deleted (one DEL per key, on the thread's remote, as decisions
 * are sent), and this daemon's own state for it is dropped at once: its
 * on_store_error local limiter; in approximate mode its local limiter and
 * the charges not yet pushed by the sync.
 *
 * Returns 0: done, out filled; ENG_PENDING: done(ud, rc, out) runs later on
 * this thread, exactly once (out must stay valid until then), with rc 0 or
 * ENG_ESTORE; ENG_ESTORE now (Redis known down: no DEL was sent; out says
 * so); SL_EPOLICY (message in out->err), SL_EKEY, SL_ENOMEM; ENG_EREMOTE in
 * fleet mode when the thread has no remote or done is NULL.
 */
int engine_reset_key_async(engine_thread *t, const char *key, size_t key_len,
                           const char *spec, size_t spec_len, eng_reset *out,
                           eng_reset_fn done, void *ud);

/*
 * Forgets the state of each of req's descriptors under every limit they
 * match in the thread's config. In fleet mode as engine_reset_key_async
 * (in exact mode, a domain's hash_tag is taken from req as a decision
 * takes it: the reset must carry the hash_tag entry the decisions
 * carried). Returns as engine_reset_key_async, or ENG_EDOMAIN /
 * ENG_EDESCRIPTOR.
 */
int engine_reset_descriptor_async(engine_thread *t, const eng_request *req,
                                  eng_reset *out, eng_reset_fn done, void *ud);

/* Memory mode's short forms: the number of states dropped, or an error
   (ENG_EREMOTE in fleet mode). */
int engine_reset_key(engine *e, const char *key, size_t key_len);
int engine_reset_descriptor(engine_thread *t, const eng_request *req);

/* ---- approximate mode ---- */

/*
 * The local charges of every thread since the last call, merged per
 * (limiter, key), as a list (owned by the caller until engine_sync_apply).
 */
typedef struct eng_delta eng_delta;
eng_delta *engine_sync_take(engine *e);
const char *engine_delta_key(const eng_delta *d, size_t *len); /* in Redis */
const sl_policy *engine_delta_policy(const eng_delta *d);
int64_t engine_delta_cost(const eng_delta *d);
eng_delta *engine_delta_next(const eng_delta *d);
/*
 * After the sync: level[i] is the fleet's signed level for the list's i-th
 * key (what it has left, negative = owed).
 * A key whose local limiter is above it, less what this daemon has charged
 * since the round began, is charged the difference by force
 * (sl_limiter_force): the fleet's debt becomes this daemon's. A key
 * Redis did not run (ENG_LEVEL_UNSENT; level NULL: all) is pushed again
 * with the next rounds (engine_sync_take), for up to 10 s; one Redis may
 * or may not have run (ENG_LEVEL_UNKNOWN) is not (at most once). Frees
 * the round.
 */
#define ENG_LEVEL_UNKNOWN INT64_MIN
#define ENG_LEVEL_UNSENT (INT64_MIN + 1)
void engine_sync_apply(engine *e, eng_delta *list, const int64_t *level,
                       int64_t now);

/* What the sync thread did, for /metrics (sluice_sync_*). */
enum {
  ENG_SYNC_ROUNDS,      /* rounds with charges to push */
  ENG_SYNC_CALLS,       /* script calls sent */
  ENG_SYNC_ERRORS,      /* calls that failed (timeout, connection, error) */
  ENG_SYNC_RETRIED,     /* cost Redis did not take, pushed again next round */
  ENG_SYNC_UNCONFIRMED, /* cost sent without a reply (maybe taken) */
  ENG_SYNC_LOST,        /* cost never pushed: 10 s of failures, or memory */
  ENG_SYNC_RESETS,      /* other daemons' resets applied here */
  ENG_SYNC_COUNT
};
void engine_sync_count(engine *e, int what, uint64_t n);

/*
 * Approximate mode's resets reach every daemon: the one that gets a reset
 * publishes the Redis keys it deleted (PUBLISH on engine_reset_channel's
 * channel, after the UNLINKs); each daemon's sync thread subscribes and
 * hands what it reads to engine_sync_reset, which drops this daemon's own
 * state and unpushed charges for each key named (its own messages are
 * skipped: it dropped them when it got the reset). Returns how many
 * (limit, key) states it dropped, or -1: not a reset message of sluice's.
 */
void engine_reset_channel(const engine *e, char *dst, size_t len);
int engine_sync_reset(engine *e, const void *msg, size_t len);
/* Whether the sync thread is subscribed now (sluice_sync_resets_subscribed). */
void engine_sync_subscribed(engine *e, int on);

/* ---- metrics ---- */

/* Counters the front ends add to (per thread, no locks). */
typedef enum eng_counter {
  EC_HTTP_REQUESTS,
  EC_HTTP_ERRORS,
  EC_RESP_COMMANDS,
  EC_RESP_ERRORS,
  EC_ADHOC_ALLOWED,
  EC_ADHOC_DENIED,
  EC_CHECK_ALLOWED,
  EC_CHECK_DENIED,
  EC_CONNECTIONS_OPENED,
  EC_CONNECTIONS_REJECTED,
  EC_STORE_CALLS,     /* fleet mode: scripts sent to Redis */
  EC_STORE_ERRORS,    /* ... that failed (timeout, connection, error) */
  EC_STORE_REFUSED,   /* requests not sent: the breaker was open */
  EC_STORE_FALLBACKS, /* requests answered by on_store_error */
  EC_COUNT
} eng_counter;

void engine_count(engine_thread *t, eng_counter c, uint64_t n);
/* Gauge of open connections, by protocol (0 http, 1 resp). */
void engine_connections(engine_thread *t, int protocol, int delta);

/*
 * Renders every metric in the Prometheus text format into a malloc'd
 * string (*len bytes). NULL when out of memory.
 */
char *engine_metrics(engine *e, size_t *len);

#endif /* SLUICE_ENGINE_H */
