/*
 * internal.h — what the engine's own files share (engine.c: generations,
 * threads, limiters; decide.c; adhoc.c; reset.c; memory.c; the metrics'
 * ids). Nothing outside src/engine/ includes it: the daemon uses
 * engine.h, store backends backend.h.
 */
#ifndef SLUICE_ENGINE_INTERNAL_H
#define SLUICE_ENGINE_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>

#include "backend.h"
#include "engine.h"
#include "metrics.h"

#define ADHOC_CACHE 64
#define DETAIL_CACHE 256
#define KEY_MAX SL_KEY_MAX
#define OFFLINE UINT64_MAX
/* Slots for ad-hoc policies: the cap in use, and as many retired ones
   waiting for the workers to move past them. */
#define ADHOC_SLOTS (2 * ENG_MAX_ADHOC)

/* A split limit's sub-counters in a gen (split.c): each one's limiter at
   its share, and its name's policy part ("SHARE#SUB/NSUB"). */
typedef struct gen_split {
  sl_limiter *lims[CFG_SPLIT_MAX];
  char *names[CFG_SPLIT_MAX];
  uint32_t rotor; /* its rotor in each thread's row of gen.rotor */
} gen_split;

/* One loaded config and the limiter of each of its limits. */
typedef struct gen {
  sl_config *cfg;
  sl_limiter **lims;  /* per cfg->limits[i]; NULL for unlimited/blocked */
  sl_limiter **local; /* fallible backend: the on_store_error: local
                         limiters (NULL where a limit has none) */
  sl_limiter **cand;  /* per cfg->limits[i]: its candidate policy's
                         limiter, or NULL */
  uint32_t *series;   /* per cfg->limits[i] */
  gen_split **split;  /* per cfg->limits[i]: NULL unless split; NULL when
                         no limit is */
  uint32_t *rotor;    /* split rotation: ENG_MAX_THREADS rows (a thread's
                         by its slot) of rotor_stride counters */
  size_t rotor_stride;
  struct shed_dom **shed; /* per cfg->domains[i]: its shedder, or NULL
                             (shed.c); NULL when no domain sheds */
  uint64_t version;
  _Atomic int pins; /* decisions waiting for the backend */
} gen;

/* A limiter of the map that outlives generations, by (rule, policy). */
typedef struct lim_entry {
  char *id; /* rule "\x1f" policy */
  sl_limiter *lim;
  int used; /* by the gen being built */
} lim_entry;

/* An ad-hoc policy's limiter, in a slot of e->adhoc (adhoc.c says when a
   slot is reused). */
enum { ADHOC_FREE, ADHOC_LIVE, ADHOC_RETIRED };
typedef struct adhoc_entry {
  char canon[64];
  sl_policy policy;
  sl_limiter *lim;
  sl_limiter *local; /* fallible backend, --on-store-error local */
  _Atomic int state;   /* ADHOC_*: only LIVE entries are found */
  uint64_t retired_at; /* the adhoc epoch that retired it */
  _Atomic int pins;    /* decisions waiting for the backend */
} adhoc_entry;

/* The engine's own metrics, in the order they are registered and shown. */
enum {
  M_BUILD,
  M_RULE_DECISIONS,
  M_RULE_NEAR_LIMIT,
  M_RULE_CANDIDATE,
  M_CHECK_ALLOWED,
  M_CHECK_DENIED,
  M_ADHOC_ALLOWED,
  M_ADHOC_DENIED,
  M_LATENCY,
  /* the backend's come here */
  M_HTTP_REQUESTS,
  M_RESP_COMMANDS,
  M_HTTP_ERRORS,
  M_RESP_ERRORS,
  M_CONN_HTTP,
  M_CONN_RESP,
  M_CONN_GRPC,
  M_REJECTED_HTTP,
  M_REJECTED_RESP,
  M_REJECTED_GRPC,
  M_FD_PAUSES_HTTP,
  M_FD_PAUSES_RESP,
  M_FD_PAUSES_GRPC,
  M_GRPC_REQUESTS,
  M_GRPC_ERRORS,
  M_GRPC_UNKNOWN_DOMAIN,
  M_WAITING,
  M_WAITS_SERVED,
  M_WAITS_FULL,
  M_STORE_KEYS,
  M_STORE_BYTES,
  M_STORE_MAX_BYTES,
  M_STORE_EXPIRED,
  M_STORE_EVICTED,
  M_STORE_EVICTED_UNITS,
  M_LIMITERS,
  M_ADHOC_LIVE,
  M_STATE_OK,
  M_STATE_FAILED,
  M_STATE_KEYS,
  M_STATE_MS,
  M_RELOADS_OK,
  M_RELOADS_FAILED,
  M_RELOAD_TIME,
  M_COUNT
};

struct engine_thread {
  engine *e;
  gen *g;
  _Atomic uint64_t seen;
  unsigned slot;
  void *bt; /* the backend's state for this thread */
  struct {
    char spec[64];
    size_t len;
    adhoc_entry *a;
  } adhoc_cache[ADHOC_CACHE]; /* by the policy as written (SL.THROTTLE) */
  adhoc_entry *policy_cache[ADHOC_CACHE]; /* by sl_policy (CL.THROTTLE) */
  uint64_t adhoc_epoch;  /* the epoch the two caches belong to */
  _Atomic uint64_t aseen; /* published: the adhoc epoch it holds */
  struct {
    const cfg_limit *limit;
    uint64_t hash; /* of the series' name (config_metric_name) */
    size_t len;
    uint32_t series;
  } detail_cache[DETAIL_CACHE];
  metric_slots m;
} __attribute__((aligned(64)));

struct engine {
  engine_opts o;
  eng_backend *backend;
  sl_store *store;
  _Atomic(gen *) cur;
  uint64_t next_version;
  pthread_mutex_t reload_lock; /* reloads, the limiter map */
  lim_entry *lims;
  size_t nlims;
  /* CL.THROTTLE's, one state per key (algo/cell.h): made on first use
     (adhoc.c: engine_cell), NULL until then. */
  _Atomic(sl_limiter *) cell;

  pthread_mutex_t threads_lock;
  engine_thread *threads[ENG_MAX_THREADS];

  pthread_mutex_t adhoc_lock;
  adhoc_entry adhoc[ADHOC_SLOTS];
  _Atomic size_t nadhoc;         /* slots 0..nadhoc have been used */
  _Atomic size_t adhoc_live;     /* LIVE entries (at most ENG_MAX_ADHOC) */
  _Atomic uint64_t adhoc_epoch;  /* bumped by each retirement */
  _Atomic int adhoc_refused;     /* the cap refused a policy: scan soon */
  int64_t adhoc_scanned_at;      /* mono ns of the last key count */

  metrics *metrics;
  int mid[M_COUNT]; /* the ids of the engine's metrics */
  char build_labels[64];
};

/* ---- adhoc.c ---- */

/* The cell limiter (e->cell), made on first use under adhoc_lock; NULL
   when the store has no room for it (out of memory). */
sl_limiter *engine_cell(engine *e);

/* ---- engine.c ---- */

/* What a limit does when its store fails: its own setting, else the
   daemon's (l NULL: an ad-hoc policy's). */
int limit_mode(const engine *e, const cfg_limit *l);
/* on_store_error: local's policy for p under limit l (NULL: ad-hoc). */
sl_policy local_policy(const engine *e, const cfg_limit *l, const sl_policy *p);
/* Whether the backend's store can fail (on_store_error applies). */
int engine_fallible(const engine *e);
/* The limiter map's limiter for (rule, policy canon, evict_below), made
   when new, marked used by the gen being built; NULL out of memory. Under
   reload_lock. */
sl_limiter *map_limiter(engine *e, const char *rule, const char *canon,
                        const sl_policy *p, uint32_t evict_below);

/* ---- split.c ---- */

/* Makes g's sub-counters for cfg's split limits (g->split, g->rotor),
   under reload_lock: 0, or -1 out of memory (split_free cleans up). */
int split_build(engine *e, gen *g, const sl_config *cfg);
/* Frees what split_build made (not the limiters: the map owns them). */
void split_free(gen *g);
/* Sub-counter of n for a hash: uniform over 0..n-1. */
uint32_t split_index(uint64_t hash, uint32_t n);
/* The sub-counter of split limit l that decides descriptor d of req:
   by the hash of its split_by entry, or the thread's rotation. */
uint32_t split_pick(engine_thread *t, const cfg_limit *l,
                    const eng_request *req, const eng_descriptor *d);
/* The check of split limit l for d (key: its store key). */
eng_check split_check(engine_thread *t, const cfg_limit *l,
                      const eng_request *req, const eng_descriptor *d,
                      const void *key, size_t key_len, int64_t cost);
/* What a reset of split limit l's key forgets: l->split items at out,
   one per sub-counter. */
void split_forgets(const gen *g, const cfg_limit *l, eng_forget *out,
                   const void *key, size_t key_len);

/* ---- shed.c ---- */

/* Makes g's shedders for cfg's domains that shed, each taking what the
   same domain's shedder of `prev` (NULL: none) knows. Under reload_lock:
   0, or -1 out of memory (shed_free cleans up). */
int shed_build(gen *g, const sl_config *cfg, const gen *prev);
void shed_free(gen *g);
/* Appends the shedders' metric families (Prometheus text) to b; under
   reload_lock. */
struct strbuf;
void shed_render(engine *e, struct strbuf *b, int64_t now);
/*
 * The shedder's part of q's request req of domain dom: its class,
 * shed or not (out->shed; a shed answered in full: allowed 0, no
 * statuses), and the request without its class entries in *strip (which
 * may point at req itself, or at copy/ds filled). 0, or ENG_EDESCRIPTOR
 * (an unknown class) with out->msg.
 */
int shed_request(engine_thread *t, const cfg_domain *dom, const eng_query *q,
                 const eng_request *req, eng_result *out,
                 const eng_request **strip, eng_request *copy,
                 eng_descriptor *ds);

/* ---- adhoc.c ---- */

/* The ad-hoc policy q names (spec or value), made on first use; NULL
   with the rc in *rc and out's err and msg written. */
adhoc_entry *adhoc_of(engine_thread *t, const eng_query *q, int *rc,
                      eng_result *out);
/* The live ad-hoc policy whose canonical form is canon, or NULL. */
adhoc_entry *adhoc_find(engine *e, const char *canon, size_t len);
/* Slots 0..n of e->adhoc have been used (only LIVE ones count: adhoc_live). */
size_t adhoc_count(engine *e);
/* Whether entry a may be used (a LIVE one). */
int adhoc_live(const adhoc_entry *a);
/* policy p (canonical canon) as a live entry, made when new; NULL when the
   cap is reached or out of memory (*rc: ENG_EADHOC or SL_ENOMEM). */
adhoc_entry *adhoc_get(engine *e, const sl_policy *p, const char *canon,
                       int *rc);
/* The main thread's part, under reload_lock: retires the live policies
   that own no key (when the cap refused one, or half of it is in use;
   at most once a second), and frees those retired that no worker can
   hold any more. */
void adhoc_reclaim(engine *e);

/* ---- engine.c, for adhoc.c ---- */

/* Whether every online thread has moved past adhoc epoch `epoch`. */
int threads_past_epoch(engine *e, uint64_t epoch);

/* ---- observe.c ---- */

/* A deep copy of q in one allocation (free() it): what the observer reads
   of a decision that finishes after its caller's query is gone. NULL
   when out of memory. */
eng_query *query_copy(const eng_query *q);

/* ---- decide.c ---- */

/* The store key of a descriptor: its entries, length-prefixed, each value
   the one it counts under (m: a share_threshold entry counts under its
   wildcard's pattern; m NULL: the values as sent). -1 when longer than
   KEY_MAX. */
int descriptor_key(const eng_descriptor *d, const cfg_match *m, uint8_t *buf,
                   size_t *len);
/* The request's hash tag: the value of the domain's hash_tag entry, the
   first one sent with a value; "" without one. */
void request_tag(const cfg_domain *dom, const eng_request *req,
                 const char **tag, size_t *tag_len);
/* Checks the request's shape (a domain it names, 1..ENG_MAX_DESCRIPTORS
   descriptors of 1..ENG_MAX_ENTRIES entries); 0 or an ENG_E* code with
   msg written. */
int request_valid(const gen *g, const eng_request *req, const cfg_domain **dom,
                  char *msg, size_t msg_len);

#endif /* SLUICE_ENGINE_INTERNAL_H */
