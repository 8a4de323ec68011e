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

/* One loaded config and the limiter of each of its limits. */
typedef struct gen {
  sl_config *cfg;
  sl_limiter **lims;  /* per cfg->limits[i]; NULL for unlimited/blocked */
  sl_limiter **local; /* fallible backend: the on_store_error: local
                         limiters (NULL where a limit has none) */
  uint32_t *series;   /* per cfg->limits[i] */
  uint64_t version;
  _Atomic int pins; /* decisions waiting for the backend */
} gen;

/* A limiter of the map that outlives generations, by (rule, policy). */
typedef struct lim_entry {
  char *id; /* rule "\x1f" policy */
  sl_limiter *lim;
  int used; /* by the gen being built */
} lim_entry;

/* An ad-hoc policy's limiter (never freed before the engine). */
typedef struct adhoc_entry {
  char canon[64];
  sl_policy policy;
  sl_limiter *lim;
  sl_limiter *local; /* fallible backend, --on-store-error local */
} adhoc_entry;

/* The engine's own metrics, in the order they are registered and shown. */
enum {
  M_BUILD,
  M_RULE_DECISIONS,
  M_RULE_NEAR_LIMIT,
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
  M_REJECTED,
  M_STORE_KEYS,
  M_STORE_BYTES,
  M_STORE_MAX_BYTES,
  M_STORE_EXPIRED,
  M_STORE_EVICTED,
  M_LIMITERS,
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
    const adhoc_entry *a;
  } adhoc_cache[ADHOC_CACHE]; /* by the policy as written (SL.THROTTLE) */
  const adhoc_entry *policy_cache[ADHOC_CACHE]; /* by sl_policy (CL.THROTTLE) */
  struct {
    const cfg_limit *limit;
    char value[64];
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

  pthread_mutex_t threads_lock;
  engine_thread *threads[ENG_MAX_THREADS];

  pthread_mutex_t adhoc_lock;
  adhoc_entry adhoc[ENG_MAX_ADHOC];
  _Atomic size_t nadhoc;

  metrics *metrics;
  int mid[M_COUNT]; /* the ids of the engine's metrics */
  char build_labels[64];
};

/* ---- engine.c ---- */

/* What a limit does when its store fails: its own setting, else the
   daemon's (l NULL: an ad-hoc policy's). */
int limit_mode(const engine *e, const cfg_limit *l);
/* on_store_error: local's policy for p under limit l (NULL: ad-hoc). */
sl_policy local_policy(const engine *e, const cfg_limit *l, const sl_policy *p);
/* Whether the backend's store can fail (on_store_error applies). */
int engine_fallible(const engine *e);

/* ---- adhoc.c ---- */

/* The ad-hoc policy q names (spec or value), made on first use; NULL
   with the rc in *rc and out's err and msg written. */
const adhoc_entry *adhoc_of(engine_thread *t, const eng_query *q, int *rc,
                            eng_result *out);
/* The ad-hoc policy whose canonical form is canon, or NULL (none made). */
const adhoc_entry *adhoc_find(engine *e, const char *canon, size_t len);
/* How many ad-hoc policies exist (entries 0..n of e->adhoc are valid). */
size_t adhoc_count(engine *e);

/* ---- decide.c ---- */

/* The store key of a descriptor: its entries, length-prefixed. -1 when
   longer than KEY_MAX. */
int descriptor_key(const eng_descriptor *d, uint8_t *buf, size_t *len);
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
