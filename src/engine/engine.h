/*
 * engine.h — the daemon's decision engine: requests -> rules -> a store
 * backend -> decisions, shared by every front end (HTTP, RESP).
 *
 * The engine owns the current config generation, the limiters of its rules
 * and of the ad-hoc policies clients name, the local store, the metrics,
 * and one store backend: where per-key state lives (engine/backend.h) —
 * this daemon's memory (the default), or fleet mode's Redis, exactly or
 * approximately (src/fleet/). Front ends ask through two entry points,
 * engine_decide and engine_reset, with a tagged query (the configured
 * rules, or an ad-hoc policy), and answer failures from one vocabulary
 * (engine/errors.h).
 *
 * Worker threads each hold an engine_thread: it pins one config generation
 * between two calls of engine_thread_quiesce (once per event loop
 * iteration), so a reload swaps configs without any lock or shared write on
 * the request path, and frees the old generation only once every thread
 * has moved past it. Limiters survive a reload when their rule and policy
 * are unchanged, so a reload does not reset anybody's quota.
 * docs/architecture.md has the lock order and a request's whole path.
 */
#ifndef SLUICE_ENGINE_H
#define SLUICE_ENGINE_H

#include <stddef.h>
#include <stdint.h>

#include "../rules/config.h"
#include "errors.h"
#include "sluice.h"

#define ENG_MAX_DESCRIPTORS 16 /* per request */
#define ENG_MAX_ENTRIES 16     /* per descriptor */
#define ENG_MAX_STATUSES 64    /* limits matched by one request */
#define ENG_MAX_THREADS 256
#define ENG_MAX_ADHOC 1024 /* distinct ad-hoc policies in use */

typedef struct engine engine;
typedef struct engine_thread engine_thread;
typedef struct eng_backend eng_backend; /* engine/backend.h */
struct eng_query;
struct eng_result;

/*
 * Who sees every decision once it is final (the daemon's denial log and
 * top keys, server/observe.c): called on the deciding thread, whose slot
 * (0..ENG_MAX_THREADS-1, one per live engine_thread) lets the observer
 * keep per-thread state. q is the query as asked (for a decision that
 * waited for its store, a copy the engine made); both stay valid only
 * during the call.
 */
typedef void (*eng_observe_fn)(void *ud, unsigned slot,
                               const struct eng_query *q,
                               const struct eng_result *out);
/* Writes the client's address as text into buf (len bytes, NUL-terminated;
   "" when unknown): asked by the observer only when it shows it. */
typedef void (*eng_client_fn)(void *ud, char *buf, size_t len);
#define ENG_CLIENT_MAX 128 /* an address's text, NUL included, at most */

typedef struct engine_opts {
  size_t max_memory; /* the local store's cap; 0 = library default */
  /* What a limit does when its store fails, for limits that set none
     (fallible backends only: fleet mode's exact one). */
  int on_store_error;    /* cfg_store_error; DEFAULT = allow */
  double local_fraction; /* for local without a fraction; 0 = 0.5 */
  /* Where per-key state lives: NULL = this daemon's memory. The engine
     owns it from engine_new on (also when engine_new fails). */
  eng_backend *backend;
  /* Who pays for the configured rules (--charging): ENG_CHARGE_ALLOWED
     (sluice's: a denied request costs nothing anywhere) or ENG_CHARGE_ALL
     (envoyproxy/ratelimit's: every matched limit is charged, denied or
     not, and a cost above a limit's capacity is a denial). CHARGE_ALL
     needs the memory backend (engine_new refuses it otherwise). */
  int charging;
  eng_observe_fn observe; /* NULL: nobody */
  void *observe_ud;
} engine_opts;

enum { ENG_CHARGE_ALLOWED = 0, ENG_CHARGE_ALL = 1 };

/* Takes ownership of cfg (and opts->backend). NULL on failure (message in
   err). */
engine *engine_new(const engine_opts *opts, sl_config *cfg, char *err,
                   size_t err_len);
/* Every engine_thread must be freed first. */
void engine_free(engine *e);

/*
 * Makes cfg (owned from now on, also when the call fails) the current
 * config. Waits until every online thread has passed a quiesce point, then
 * frees the old generation and the limiters no rule uses any more. Call
 * from one thread at a time. 0, or -1 (out of memory: the old config
 * stays).
 */
int engine_reload(engine *e, sl_config *cfg);
/*
 * The main thread's housekeeping, every 100 ms or so (any thread that is
 * not a worker): frees the ad-hoc policies that own no key any more when
 * their table fills (adhoc.c). Takes the reload lock.
 */
void engine_maintain(engine *e);

/* ---- the state file (memory mode; state.c) ---- */

typedef struct eng_state_stats {
  uint64_t keys, bytes;     /* keys written / in the file, and its size */
  uint64_t restored, fresh; /* load: keys restored; skipped as fresh */
  uint64_t unmatched;       /* load: keys whose rule or policy is gone */
  uint64_t failed;          /* load: keys the store had no room for */
  int64_t ns;               /* save: how long it took */
  int64_t longest_lock_ns;  /* save: the longest one shard was locked */
} eng_state_stats;

/*
 * Saves every live key of the memory store to path, atomically (a
 * temporary file beside it, fsync'd, renamed over it): the limiters by
 * name (a rule's identity and policy; an ad-hoc policy). Decisions go on
 * meanwhile (one shard is locked at a time, and only to copy it); reloads
 * wait. 0, or -1 with err written (path is then as it was).
 */
int engine_state_save(engine *e, const char *path, int64_t now,
                      eng_state_stats *st, char *err, size_t err_len);

/*
 * Loads what engine_state_save wrote into the store, before any decision:
 * keys back to fresh at now, and those of rules or policies that are gone,
 * are skipped. 0; 1 when there is no such file; or -1 with err saying
 * what is wrong and where ("state file P: offset 1234: truncated: ..."),
 * having restored nothing.
 */
int engine_state_load(engine *e, const char *path, int64_t now,
                      eng_state_stats *st, char *err, size_t err_len);

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
/* At the end of an event-loop pass, inside it (the daemon's worker runs it
   when the backend's transport wakes it): the backend sends what the
   thread's requests of the pass queued (fleet mode's batched calls). */
void engine_thread_flush(engine_thread *t);

/* ---- requests ---- */

typedef struct eng_descriptor {
  cfg_entry entries[ENG_MAX_ENTRIES];
  size_t n;
  int64_t hits; /* this descriptor's cost; < 0 = the request's */
} eng_descriptor;

/* envoy's limit override of one descriptor (RateLimitDescriptor.limit):
   when set, the descriptor is limited by `policy` alone (a fixed window,
   as envoyproxy/ratelimit counts; limit 0 blocks), whatever the domain's
   rules say, under a counter of its own keyed by the domain and the
   descriptor. The domain must still be known. */
typedef struct eng_override {
  int set;
  sl_policy policy;
} eng_override;

typedef struct eng_request {
  const char *domain;
  size_t domain_len;
  eng_descriptor *descriptors;
  size_t n;
  int64_t hits; /* default cost of each descriptor (0 is a peek) */
} eng_request;

/* What to decide or reset: the configured rules for a request, or a key
   under an ad-hoc policy. */
typedef enum eng_query_kind {
  ENG_QUERY_RULES, /* req's descriptors against the config's rules */
  ENG_QUERY_POLICY, /* key under the policy spelled spec, or the value
                       policy */
  ENG_QUERY_CELL    /* CL.THROTTLE: key at the rate `cell`, one state per
                       key whatever the rate (algo/cell.h); a backend
                       other than memory decides `policy` instead, one
                       state per key and rate (docs/server.md) */
} eng_query_kind;

struct algo_cell;

typedef struct eng_query {
  eng_query_kind kind;
  const eng_request *req; /* RULES */
  /* RULES: one per descriptor of req, or NULL for none (gRPC's requests
     carry them: envoy's descriptor limit). */
  const eng_override *overrides;
  const char *key;        /* POLICY: the key */
  size_t key_len;
  /* POLICY: the policy as the client wrote it (spec_len bytes), or NULL
     with `policy` set. A reset with neither names every ad-hoc policy
     this daemon has used; spec "" is an error ("policy is empty"). */
  const char *spec;
  size_t spec_len;
  const sl_policy *policy;
  const struct algo_cell *cell; /* CELL: this call's rate */
  int64_t cost; /* POLICY, CELL: the request's cost (0 is a peek; CELL:
                   any size, one that never fits is limited) */
  int64_t now;  /* the decision's time (ns since the epoch) */
  /* RULES: the priority class the front end read (a JSON field, a
     header, a RESP argument), or NULL: then the domain's class_key entry
     says, or its default class (shed.c). */
  const char *priority;
  size_t priority_len;
  /* ENG_LEASE_RELEASE / ENG_LEASE_RENEW: not a decision but an operation
     on `lease` under every concurrency limit q names (the ad-hoc policy,
     which must be one; or the rules the descriptors match, the others
     left out); 0: decide. */
  int lease_op;
  uint64_t lease;
  eng_client_fn client; /* the client's address, for the observer (the
                           denial log); NULL: unknown */
  void *client_ud;
  /* Wait mode (the front end will hold the answer for a leaky_bucket's
     delay): > 0, the longest it holds; a rule's max_wait lowers it. A
     delay above it is a denial that charges nothing (sl_check's
     max_delay_ns). 0: not waiting, no bound. */
  int64_t max_delay_ns;
} eng_query;

enum { ENG_LEASE_RELEASE = 1, ENG_LEASE_RENEW = 2 };

/* The outcome of one limit. */
typedef struct eng_status {
  const cfg_limit *limit;  /* NULL for an ad-hoc policy */
  const char *policy_str;  /* canonical policy (or "unlimited"/"blocked") */
  const sl_policy *policy; /* the rule's or ad-hoc policy, parsed */
  sl_decision d;           /* retry_after_ns < 0: never (a blocked rule) */
  int descriptor;          /* index in the request */
  int shadow;              /* shadow rule: d says what it would have done */
  int quota;               /* quota_mode: denies only with the other quota
                              limits of the request */
  int unchecked; /* its store failed and on_store_error allowed it: the
                    limit was not checked (d.remaining means nothing; a
                    backend says so with d.remaining < 0) */
  int unlimited;
  /* The rule's candidate policy (rate_limit.candidate), decided beside it
     on the same key and never enforced: `candidate` says it has one,
     candidate_denied that it would have denied this request (the denial
     log marks such would-be denials), with its figures in cand_d. */
  int candidate;
  int candidate_denied;
  sl_decision cand_d;
  int64_t window_ns; /* a calendar limit: this decision's window's length
                        (RateLimit-Policy's w), else 0 */
} eng_status;

/* What the domain's load shedder said of a request (shed.c). */
enum { ENG_SHED_NO = 0, ENG_SHED_YES, ENG_SHED_SHADOW };
typedef struct eng_shed {
  int state;          /* ENG_SHED_*: YES denied it; SHADOW would have */
  const char *cls;    /* the request's class (the config's name) */
  int signal;         /* SL_SHED_UTILISATION or SL_SHED_USAGE */
  uint32_t level_pm;  /* that signal's level, permille */
  uint32_t threshold_pm;
  int status;         /* YES: the HTTP status to answer */
  int64_t retry_after_ns;
} eng_shed;

typedef struct eng_result {
  int allowed;
  eng_shed shed; /* state YES: allowed 0, no statuses */
  eng_status st[ENG_MAX_STATUSES];
  size_t n;
  int worst;                              /* most restrictive st[], or -1 */
  int by_descriptor[ENG_MAX_DESCRIPTORS]; /* most restrictive per
                                             descriptor, or -1 (no limit) */
  uint64_t lease; /* allowed with a concurrency limit: the lease it holds
                     (one for all of them; renewed: the lease); else 0 */
  char err[160];         /* a refused policy (SL_EPOLICY, ENG_EADHOC): why */
  char msg[ENG_MSG_MAX]; /* on failure: what went wrong, for the client */
} eng_result;

/*
 * Decides q (or, with q->lease_op, releases or renews q->lease: allowed
 * = the lease was live under every concurrency limit; st[] their figures
 * after it). RULES: every descriptor is matched, every matched limit
 * checked, and the request charged only if all non-shadow limits allow it;
 * POLICY: the key under the policy (parsed once, then cached; at most
 * ENG_MAX_ADHOC distinct ones).
 *
 * Returns 0 with *out filled; or ENG_PENDING when the backend must wait
 * for its store (fleet mode's exact decisions): then done(ud, rc, out)
 * runs exactly once, later, on this thread (out must stay valid until
 * then); or a failure — SL_E* / ENG_E* (errors.h) with out->msg saying
 * what went wrong. A caller that cannot wait passes done NULL: the
 * decision is then made at once on this daemon's own store. A failed
 * store is answered per limit by on_store_error (allow, deny, or a local
 * limiter).
 */
typedef void (*eng_done_fn)(void *ud, int rc, eng_result *out);
/* A result with no statuses, allowed or not, every field a front end reads
   set (nothing shed, no lease, no message): what engine_decide starts
   from, and the answer of a request none of whose descriptors applies. */
void engine_result_init(eng_result *out, int allowed);
int engine_decide(engine_thread *t, const eng_query *q, eng_result *out,
                  eng_done_fn done, void *ud);

/* One decision of engine_decide_batch. */
typedef struct eng_batch_item {
  const eng_query *q; /* POLICY (a spec) or CELL */
  sl_decision d;      /* rc 0: the decision (engine_decide's st[0].d) */
  int rc;             /* 0, or not decided: engine_decide it alone, for
                         its error (nothing was charged) */
} eng_batch_item;

#define ENG_BATCH_MAX 16

/*
 * A pipeline's ad-hoc decisions (SL.THROTTLE, CL.THROTTLE): it[0..n) (n <=
 * ENG_BATCH_MAX) decided in order, as n engine_decide calls would decide
 * them, with every key's state prefetched before the first is decided
 * (limiter_take_many); the observer (engine_opts) sees each decision as
 * engine_decide would show it, in order. Memory backend only: 0; -1
 * (nothing decided) otherwise, and the decisions go one by one through
 * engine_decide. A concurrency policy's (a lease) is left to
 * engine_decide too (its rc set).
 */
int engine_decide_batch(engine_thread *t, eng_batch_item *it, size_t n);

/* ---- resets (SL.RESET, POST /admin/reset) ---- */

/* What a reset did. */
typedef struct eng_reset {
  int dropped;     /* (limit, key) states dropped: in memory mode the store's;
                      in fleet mode those that had a Redis key (DEL said 1) or
                      state on this daemon (a local or on_store_error: local
                      limiter, or approximate mode's charges not yet pushed) */
  int keys;        /* fleet mode: Redis keys it deleted (DELs sent or not) */
  int failed;      /* ... of which Redis did not confirm the deletion (an
                      error, a timeout, or down: not sent) */
  int unpublished; /* approximate mode: the PUBLISH that tells the other
                      daemons was not confirmed */
  char err[160];   /* why (the first failure), or a policy's error */
  char msg[ENG_MSG_MAX]; /* on failure: what went wrong, for the client */
} eng_reset;

typedef void (*eng_reset_fn)(void *ud, int rc, eng_reset *out);

/*
 * Forgets what q names: POLICY: key under the ad-hoc policy q names (or
 * under every one this daemon has used: in fleet mode another daemon's
 * policies are not known here, so name the policy); RULES: each of req's
 * descriptors under every limit it matches in the thread's config (in
 * exact mode with a domain's hash_tag taken from req as a decision takes
 * it: the reset must carry the hash_tag entry the decisions carried).
 *
 * In fleet mode (exact or approximate) each state's Redis key is deleted
 * (one DEL per key, sent as decisions are), and this daemon's own state
 * for it is dropped at once: its on_store_error local limiter; in
 * approximate mode its local limiter and the charges not yet pushed, and
 * the other daemons are told (PUBLISH).
 *
 * Returns 0 (out filled), ENG_PENDING (done(ud, rc, out) runs later on
 * this thread, exactly once, with rc 0 or ENG_ESTORE; out must stay valid
 * until then), or a failure with out->msg: ENG_ESTORE now (Redis known
 * down: no DEL was sent), SL_EPOLICY, SL_EKEY, SL_ENOMEM, ENG_EDOMAIN,
 * ENG_EDESCRIPTOR; ENG_EREMOTE in fleet mode when the thread has no Redis
 * client or done is NULL.
 */
int engine_reset(engine_thread *t, const eng_query *q, eng_reset *out,
                 eng_reset_fn done, void *ud);

/* ---- load shedding (shed.c; docs/shedding.md) ---- */

/*
 * Source `source` (slen bytes; "" for one reporter) of the service behind
 * domain reports its utilisation (permille), valid for ttl_ns (0: the
 * domain's utilisation_ttl). 0, or ENG_EDOMAIN (no such domain, or it has
 * no shedding) / SL_EINVAL / SL_EFULL (every source slot fresh) with msg.
 */
int engine_shed_report(engine_thread *t, const char *domain, size_t len,
                       const char *source, size_t slen, uint32_t pm,
                       int64_t ttl_ns, int64_t now, char *msg, size_t msg_len);
/*
 * The shedder of domain as JSON (GET /v1/shedding): its classes and
 * thresholds, the signals' levels, which classes it sheds now. A malloc'd
 * string, or NULL with ENG_EDOMAIN's message in msg (or out of memory).
 */
char *engine_shed_json(engine_thread *t, const char *domain, size_t len,
                       int64_t now, size_t *out_len, char *msg,
                       size_t msg_len);

/*
 * Fleet usage shared through a store (fleet mode): fn pushes what this
 * daemon charged to window `index` (push, and push_prev to the window
 * before it) and answers the fleet's totals of both. 0, or -1 (the store
 * failed: usage stays local until the next round).
 */
typedef int (*eng_shed_sync_fn)(void *ud, const char *domain, int64_t index,
                                int64_t window_ns, uint64_t push_prev,
                                uint64_t push, uint64_t *fleet_prev,
                                uint64_t *fleet);
/* One round over every domain with a capacity (the main thread, every
   100 ms or so); takes the reload lock. Returns the domains synced, or
   -1 when fn failed for one. */
int engine_shed_sync(engine *e, int64_t now, eng_shed_sync_fn fn, void *ud);

/* ---- metrics ---- */

/* Counters the front ends add to (per thread, no locks). */
typedef enum eng_counter {
  EC_HTTP_REQUESTS,
  EC_HTTP_ERRORS,
  EC_RESP_COMMANDS,
  EC_RESP_ERRORS,
  EC_REJECTED_HTTP, /* a connection refused over a budget, by listener */
  EC_REJECTED_RESP,
  EC_FD_PAUSES_HTTP, /* accepting paused: out of file descriptors */
  EC_FD_PAUSES_RESP,
  EC_REJECTED_GRPC, /* (the gRPC listener's, likewise) */
  EC_FD_PAUSES_GRPC,
  EC_GRPC_REQUESTS, /* gRPC calls answered, by the front end */
  EC_GRPC_ERRORS,   /* ... with a status other than OK */
  EC_GRPC_UNKNOWN_DOMAIN, /* ShouldRateLimit for a domain no rule names */
  EC_WAITS_SERVED, /* wait mode: an answer released after its delay */
  EC_WAITS_FULL,   /* wait mode: refused, --max-waiting reached */
  EC_FRONT_COUNT
} eng_counter;

void engine_count(engine_thread *t, eng_counter c, uint64_t n);
/* Gauge of open connections, by protocol (0 http, 1 resp, 2 grpc: the
   listener's index, server.h's LST_*). */
void engine_connections(engine_thread *t, int protocol, int delta);
/* Gauge of answers held by the wait mode. */
void engine_waiting(engine_thread *t, int delta);

/*
 * Renders every metric in the Prometheus text format into a malloc'd
 * string (*len bytes). NULL when out of memory.
 */
char *engine_metrics(engine *e, size_t *len);
/* The same, as JSON (metrics.h: metrics_render_json): GET /v1/stats. */
char *engine_metrics_json(engine *e, size_t *len);

#endif /* SLUICE_ENGINE_H */
