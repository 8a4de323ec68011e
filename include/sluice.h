/*
 * sluice.h — the whole public API of libsluice, an embeddable rate limiter.
 *
 * A rate limiter decides, request by request, whether a key (an API key, a
 * user, an IP) may proceed. libsluice offers six algorithms with exact,
 * integer-only semantics (see docs/semantics.md) over a sharded in-memory key
 * table with idle expiry and a hard memory cap.
 *
 * The model, in three objects:
 *   sl_policy   what to enforce: algorithm, limit per period, burst
 *               ("gcra:50/s:burst=100"); a plain value, parsed or filled in.
 *   sl_store    where per-key state lives: a thread-safe table shared by any
 *               number of limiters, bounded by max_memory bytes.
 *   sl_limiter  one policy bound to one store; its keys are its own (the same
 *               key bytes under two limiters are two independent states).
 *
 * Conventions, everywhere in this header:
 *   - Functions that can fail return int: 0 (SL_OK) or a negative SL_E* code;
 *     sl_strerror() and sl_err_name() describe a code. The library never
 *     aborts and never prints.
 *   - Time is int64_t nanoseconds since the Unix epoch, always passed in by
 *     the caller (`now_ns`); the library never reads a clock. Valid times are
 *     0 <= now_ns < SL_TIME_MAX_NS (about the year 2116).
 *   - Durations carry their unit in the name (reset_ns, retry_after_ns).
 *   - Handles are opaque, created by *_new and released by *_free. Results go
 *     into caller-owned structs. Allocation failure returns SL_ENOMEM and
 *     leaves every earlier state intact.
 */
#ifndef SLUICE_H
#define SLUICE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * SL_API marks what the library exports. libsluice is compiled with
 * -fvisibility=hidden, so every function not marked here (the store, the
 * algorithms, the internal helpers) stays inside the library and cannot clash
 * with an application's own names.
 */
#if defined(__GNUC__) && __GNUC__ >= 4
#define SL_API __attribute__((visibility("default")))
#else
#define SL_API
#endif

#define SL_VERSION_MAJOR 0
#define SL_VERSION_MINOR 1
#define SL_VERSION_PATCH 0
#define SL_VERSION_HEX \
  ((SL_VERSION_MAJOR << 16) | (SL_VERSION_MINOR << 8) | SL_VERSION_PATCH)

/* The version of the library actually linked: SL_VERSION_HEX and "0.1.0". */
SL_API unsigned sl_version(void);
SL_API const char *sl_version_string(void);

/* ---- errors ------------------------------------------------------------ */

/* Every error code, with its stable number and message. */
#define SL_ERRNO_MAP(XX)                                                     \
  XX(EINVAL, -1, "invalid argument")                                         \
  XX(ENOMEM, -2, "out of memory")                                            \
  XX(EPOLICY, -3, "invalid policy")                                          \
  XX(ECOST, -4, "cost exceeds what the policy can ever allow")               \
  XX(EKEY, -5, "key longer than 1024 bytes")                           \
  XX(ETIME, -6, "time out of range")                                         \
  XX(ELIMITERS, -7, "too many limiters on one store")                       \
  XX(EFULL, -8, "store full: no entry could be evicted cheaply enough")      \
  XX(ECANCELED, -9, "wait cancelled")

typedef enum sl_err {
  SL_OK = 0,
#define SL__ERR_ENUM(name, code, msg) SL_##name = (code),
  SL_ERRNO_MAP(SL__ERR_ENUM)
#undef SL__ERR_ENUM
} sl_err;

/* A human-readable message for an SL_E* code ("unknown error" otherwise). */
SL_API const char *sl_strerror(int err);
/* The code's name without prefix, e.g. "ECOST" ("UNKNOWN" otherwise). */
SL_API const char *sl_err_name(int err);

/* ---- limits of the API ------------------------------------------------- */

#define SL_KEY_MAX 1024               /* longest key, in bytes */
#define SL_LIMIT_MAX 4294967295u      /* largest LIMIT and burst */
#define SL_TIME_MAX_NS (INT64_C(1) << 62)
#define SL_PERIOD_MAX_NS (INT64_C(3650) * 86400 * 1000000000) /* 10 years */

/* ---- policies ------------------------------------------------------------ */

typedef enum sl_algo {
  SL_TOKEN_BUCKET = 0, /* capacity `burst`, refills continuously */
  SL_LEAKY_BUCKET,     /* a queue draining at limit/period: delays, a shaper */
  SL_FIXED_WINDOW,     /* count per epoch-aligned window */
  SL_SLIDING_LOG,      /* exact: log of allowed requests over the last period */
  SL_SLIDING_WINDOW,   /* weighted two-window counter (Cloudflare's) */
  SL_GCRA,             /* generic cell rate algorithm: one timestamp per key */
  SL_CONCURRENCY,      /* not a rate: at most LIMIT leases held at once */
  SL_ALGO_COUNT
} sl_algo;

/* The rate algorithms are those before SL_CONCURRENCY. */
#define SL_RATE_ALGO_COUNT SL_CONCURRENCY

/* The algorithm's name as spelled in policies ("token_bucket"), or NULL. */
SL_API const char *sl_algo_name(sl_algo algo);

/*
 * A policy: at most `limit` cost units per `period_ns` (a whole number of
 * milliseconds, 1 ms to SL_PERIOD_MAX_NS). `burst` is the
 * capacity of the bucket algorithms and gcra (0 means "same as limit");
 * window algorithms have no burst and require 0.
 *
 * SL_CONCURRENCY ("concurrency:N[:lease=DURATION]") counts requests in
 * flight, not a rate: at most `limit` = N (1..SL_CONCURRENCY_MAX) leases
 * held at once per key, each expiring `period_ns` (the lease's time to
 * live, 1 ms to SL_LEASE_MAX_NS; SL_LEASE_DEFAULT_NS when parsed without
 * lease=) after it was acquired or last renewed; burst must be 0. See
 * sl_acquire below and docs/semantics.md, "Concurrency".
 */
#define SL_CONCURRENCY_MAX 10000
#define SL_LEASE_DEFAULT_NS (INT64_C(30) * 1000000000)
#define SL_LEASE_MAX_NS (INT64_C(86400) * 1000000000) /* a day */
typedef struct sl_policy {
  sl_algo algo;
  uint32_t limit;
  uint32_t burst;
  int64_t period_ns;
} sl_policy;

/*
 * Parses "ALGORITHM:LIMIT/PERIOD[:burst=N]" (PERIOD: [N]ms|s|m|h|d), or
 * "concurrency:N[:lease=DURATION]" (DURATION: [N]ms|s|m|h|d), into *out.
 * Returns 0, or SL_EPOLICY with a message naming the offending part written
 * to err (NUL-terminated, truncated to err_len; err may be NULL). On success
 * out->burst is explicit (= limit when not given) for the bucket algorithms.
 */
SL_API int sl_policy_parse(const char *spec, sl_policy *out, char *err,
                           size_t err_len);

/*
 * Checks a policy filled in by hand: the ranges above plus the exactness
 * bounds (see docs/semantics.md). Same error reporting as sl_policy_parse.
 */
SL_API int sl_policy_validate(const sl_policy *policy, char *err,
                              size_t err_len);

/*
 * Writes the canonical spelling of a valid policy ("gcra:50/s:burst=100";
 * burst is omitted when equal to limit) into buf. Returns the length it
 * needs, excluding the NUL, like snprintf; negative SL_EINVAL when invalid.
 */
SL_API int sl_policy_format(const sl_policy *policy, char *buf, size_t len);

/* ---- decisions ----------------------------------------------------------- */

/*
 * The answer to one request. All durations are exact nanoseconds, rounded
 * up where the exact value is fractional.
 */
typedef struct sl_decision {
  int allowed;            /* 1 = go ahead, 0 = deny (HTTP 429) */
  int64_t limit;          /* burst for buckets and gcra, LIMIT for windows */
  int64_t remaining;      /* whole units still allowed now, after this one */
  int64_t reset_ns;       /* until the key is back to fresh, idle meanwhile */
  int64_t retry_after_ns; /* 0 if allowed; else the least wait after which
                             this same request would be allowed */
  int64_t delay_ns;       /* leaky_bucket: how long this allowed request
                             waits in the queue (0 for the others) */
  uint64_t lease;         /* concurrency, allowed with cost 1: the lease
                             it holds (never 0); 0 otherwise */
} sl_decision;

/* ---- stores -------------------------------------------------------------- */

/*
 * Allocator hook, Lua-style: called with (ud, NULL, 0, n) to allocate,
 * (ud, p, old, n) to resize and (ud, p, old, 0) to free (must return NULL).
 * Returning NULL for a non-zero size is an allocation failure.
 */
typedef void *(*sl_alloc_fn)(void *ud, void *ptr, size_t old_size,
                             size_t new_size);

typedef struct sl_store_options {
  size_t max_memory;     /* hard cap on all store memory, bytes;
                            0 = SL_STORE_DEFAULT_MEMORY */
  unsigned shards;       /* lock stripes, power of two; 0 = default (64) */
  size_t expected_keys;  /* pre-size for this many keys; 0 = grow as needed */
  sl_alloc_fn alloc;     /* NULL = malloc/realloc/free */
  void *alloc_ud;
  const uint8_t *hash_key; /* 16-byte SipHash key; NULL = random per store */
  int64_t expiry_grace_ns; /* drop a key only once it has been fresh this
                              long; 0 = 1 s (see sl_store_expire) */
} sl_store_options;

#define SL_STORE_DEFAULT_MEMORY ((size_t)128 << 20)

/* Fills *opts with the defaults (all zero/NULL). */
SL_API void sl_store_options_init(sl_store_options *opts);

typedef struct sl_store sl_store;

/*
 * Creates an empty store. opts may be NULL for defaults. Returns 0 and the
 * store in *out, or SL_EINVAL (max_memory too small to hold anything,
 * shards not a power of two) or SL_ENOMEM.
 */
SL_API int sl_store_new(const sl_store_options *opts, sl_store **out);

/* Frees the store and every key in it. Its limiters must be freed first. */
SL_API void sl_store_free(sl_store *store);

typedef struct sl_store_stats {
  uint64_t keys;        /* entries held now */
  uint64_t bytes;       /* memory held now, tables + long keys + logs */
  uint64_t max_memory;  /* the cap */
  uint64_t expirations; /* entries dropped because they were back to fresh */
  uint64_t evictions;   /* live entries dropped to stay under the cap */
  uint64_t evicted_units; /* what those evictions gave back: the units of
                             cost they held (each algorithm's `used`) */
  uint64_t limiters;    /* limiters bound to the store */
} sl_store_stats;

/* Snapshot of the counters (each shard read under its lock). */
SL_API void sl_store_stats_get(sl_store *store, sl_store_stats *out);

/*
 * One bounded step of active expiry: examines at most `max_slots` table
 * slots, round-robin over shards, and drops entries that have been back to
 * fresh for the grace period (expiry_grace_ns) at now_ns. Cheap to call
 * from a timer. Keys are also dropped lazily when touched, and a little of
 * this work runs on every insert. The grace keeps a request stamped
 * slightly earlier than now_ns (another thread's clock) exact: expiry must
 * never run ahead of requests by more than it.
 * Returns the number of entries dropped, or a negative SL_E* code.
 */
SL_API int64_t sl_store_expire(sl_store *store, int64_t now_ns,
                               size_t max_slots);

/* ---- limiters ------------------------------------------------------------- */

typedef struct sl_limiter sl_limiter;

/*
 * Binds a validated copy of *policy to store. At most 65535 limiters per
 * store. Returns 0 and *out, or SL_EPOLICY, SL_ELIMITERS or SL_ENOMEM.
 */
SL_API int sl_limiter_new(sl_store *store, const sl_policy *policy,
                          sl_limiter **out);

/* Drops the limiter's keys from its store and frees it. NULL is a no-op. */
SL_API void sl_limiter_free(sl_limiter *lim);

/* The limiter's policy (valid while the limiter lives). */
SL_API const sl_policy *sl_limiter_policy(const sl_limiter *lim);

/*
 * What a new key of this limiter may take when the store is at its memory
 * cap (docs/store.md, "The memory cap"). 0, the default: the room of the
 * entry whose eviction gives back least, whatever that is. N > 0: only the
 * room of an entry whose eviction gives back fewer than N units of cost (1:
 * nothing at all, an entry already fresh); when there is none, the request
 * fails with SL_EFULL and nothing is evicted — nginx's 503 when its zone is
 * full, instead of quota given away. Set it before the limiter is shared
 * between threads. Returns 0, or SL_EINVAL for a NULL limiter.
 */
SL_API int sl_limiter_set_evict_below(sl_limiter *lim, uint32_t units);

/*
 * Decides one request of `cost` units for `key` at now_ns, and when allowed
 * charges it. cost 0 is a peek: always allowed, changes nothing, reports the
 * current figures. Safe from any number of threads.
 * Returns 0 with *out filled, or: SL_ECOST (cost above burst/limit: no
 * request of that size can ever pass; not a deny), SL_EKEY (key_len >
 * SL_KEY_MAX), SL_ETIME, SL_EINVAL (negative cost, NULL arguments),
 * SL_ENOMEM (a new key or a log entry could not be stored even after
 * eviction), SL_EFULL (the store is at its cap and the policy's
 * evict_below (sl_limiter_set_evict_below) forbade every eviction that could make room). On error
 * nothing is charged.
 */
SL_API int sl_limiter_take(sl_limiter *lim, const void *key, size_t key_len,
                           int64_t cost, int64_t now_ns, sl_decision *out);

/*
 * A forced charge: charges `cost` (>= 0, above the burst/limit too) whether
 * or not it fits, so that the key can go below empty, into a debt that it pays
 * back (by refill, or as its window moves on) before it allows again; a
 * debt stops at what the state can count (docs/semantics.md, "Forced
 * charges"). *level receives the signed remaining after it, in whole units:
 * negative = owed; cost 0 reads it and changes nothing. This is how
 * approximate fleet mode (sluice serve --sync) carries what the fleet
 * admitted beyond the limit into each daemon's local limiter.
 * Returns 0, or the errors of sl_limiter_take.
 */
SL_API int sl_limiter_force(sl_limiter *lim, const void *key, size_t key_len,
                            int64_t cost, int64_t now_ns, int64_t *level);

/* One request of a batch. */
typedef struct sl_request {
  const void *key;
  size_t key_len;
  int64_t cost;
} sl_request;

/*
 * n independent sl_limiter_take calls at one instant, faster than a loop:
 * hashes and prefetches ahead. out[i] and err[i] (0 or SL_E*) per request;
 * err may be NULL when the caller checks nothing. Requests are decided in
 * order, so a key repeated within the batch sees its earlier charges.
 * Returns the number of requests that failed, or SL_EINVAL (n > INT_MAX).
 */
SL_API int sl_limiter_take_batch(sl_limiter *lim, const sl_request *reqs,
                                 size_t n, int64_t now_ns, sl_decision *out,
                                 int *err);

/*
 * Forgets one key's state (it becomes fresh). Returns 1 if the key had
 * state, 0 if not, or SL_EKEY / SL_EINVAL.
 */
SL_API int sl_limiter_reset(sl_limiter *lim, const void *key, size_t key_len);

/* ---- several limits on one request ---------------------------------------- */

/* One rule of a multi-rule request. */
typedef struct sl_check {
  sl_limiter *limiter;
  const void *key;
  size_t key_len;
  int64_t cost;
  int shadow; /* evaluated and reported, but never denies the request */
} sl_check;

/*
 * All-or-nothing over several rules (nginx limit_req's account/unlock): every
 * check is evaluated first under the locks of all shards involved; the
 * request is allowed iff every non-shadow check allows it, and only then is
 * each allowing check charged (shadow ones included). A denied request
 * charges nothing anywhere, and neither does a failed one: if a charge runs
 * out of memory, the charges made before it are taken back.
 * out[i] holds check i's own figures (after its charge; for a check that
 * would allow but was not charged because another denies, its current
 * figures); *allowed the overall answer (0 on any error). Checks on
 * the same limiter and key are one state, so they are merged: their costs
 * add up, and the merged check is shadow only if all its parts are. All
 * limiters of one call must share one store. At most SL_CHECKS_MAX checks.
 * Returns 0, or SL_EINVAL / SL_ECOST / SL_EKEY / SL_ETIME / SL_ENOMEM /
 * SL_EFULL with nothing charged.
 */
#define SL_CHECKS_MAX 64
SL_API int sl_take_all(const sl_check *checks, size_t n, int64_t now_ns,
                       sl_decision *out, int *allowed);

/* ---- load shedding by priority (shed.c; docs/shedding.md) ---------------- */

/*
 * A load shedder, as Stripe runs its two: requests carry a priority class
 * (0 = the most important; "critical, default, sheddable" are 0, 1, 2 in
 * the daemon's default), and a class is shed once the level of a signal
 * reaches that class's threshold, so the least important classes go first
 * and the most important last (or never). The signals:
 *
 *   worker utilisation  the protected service's own saturation, reported
 *                       by it (sl_shedder_report), per source, each report
 *                       expiring after its TTL; the sources combine by
 *                       their highest (SL_SHED_MAX) or mean (SL_SHED_MEAN)
 *   fleet usage         how much of a declared capacity is in use: units
 *                       charged per window (a weighted two-window count),
 *                       or units in flight (charged, then released); plus
 *                       what other daemons charged (sl_shedder_set_remote)
 *
 * Thresholds are in permille of capacity (1000 = 100%): class c is shed
 * while utilisation >= threshold, or when charging its cost would take
 * usage above threshold x capacity. A shedder is thread-safe; the check
 * reads a few atomics, a charge adds to one (no lock but when a window
 * ends or a report expires).
 */
#define SL_SHED_CLASSES_MAX 8
#define SL_SHED_NEVER UINT32_MAX /* a threshold: never shed */
#define SL_SHED_SOURCES_MAX 4096 /* sources a shedder may keep */
#define SL_SHED_SOURCE_MAX 64    /* bytes of a source's name */

enum { SL_SHED_MAX = 0, SL_SHED_MEAN = 1 };             /* combine */
enum { SL_SHED_NONE = 0, SL_SHED_UTILISATION, SL_SHED_USAGE }; /* signal */

typedef struct sl_shed_opts {
  uint32_t nclasses; /* 1 .. SL_SHED_CLASSES_MAX */
  /* per class, most important first; never increasing with the class */
  uint32_t threshold_pm[SL_SHED_CLASSES_MAX];
  uint64_t capacity; /* fleet usage's capacity; 0 = no fleet-usage signal */
  int64_t window_ns; /* its window (1 ms .. 1 day); 0 = units in flight */
  uint32_t max_sources; /* utilisation sources kept; 0 = 64 */
  int combine;          /* SL_SHED_MAX or SL_SHED_MEAN */
} sl_shed_opts;

typedef struct sl_shed_decision {
  int shed;              /* 1 = shed it (HTTP 503), 0 = let it through */
  int signal;            /* SL_SHED_*: the signal that shed it, or NONE */
  uint32_t level_pm;     /* that signal's level (usage after this cost) */
  uint32_t threshold_pm; /* the class's threshold */
} sl_shed_decision;

typedef struct sl_shed_stats {
  uint32_t utilisation_pm; /* combined over the fresh sources; 0: none */
  uint32_t sources;        /* fresh sources */
  uint64_t refused;        /* reports refused: every slot held by a fresh
                              source */
  uint64_t usage;          /* units in use now (local + remote) */
  uint32_t usage_pm;       /* of capacity (0 without one) */
  uint64_t shed[SL_SHED_CLASSES_MAX]; /* requests sl_shedder_take shed */
} sl_shed_stats;

typedef struct sl_shedder sl_shedder;

/* Checks opts: SL_EINVAL with a message naming the part in err. */
SL_API int sl_shed_opts_validate(const sl_shed_opts *opts, char *err,
                                 size_t err_len);
/* A new shedder (opts validated). 0, SL_EINVAL (err says why) or
   SL_ENOMEM. */
SL_API int sl_shedder_new(const sl_shed_opts *opts, sl_shedder **out,
                          char *err, size_t err_len);
SL_API void sl_shedder_free(sl_shedder *sh);
/*
 * Takes what `from` knows (its sources' reports, its usage counts) into
 * sh, as a reload replaces a shedder by one of new options.
 */
SL_API void sl_shedder_inherit(sl_shedder *sh, const sl_shedder *from);

/*
 * Source `source` (len bytes, at most SL_SHED_SOURCE_MAX; "" is fine)
 * reports its utilisation (permille; 1000 = saturated; at most 10000),
 * valid for ttl_ns from now_ns. 0, SL_EINVAL, or SL_EFULL when every
 * source slot holds a fresh report of another source (counted).
 */
SL_API int sl_shedder_report(sl_shedder *sh, const char *source, size_t len,
                             uint32_t utilisation_pm, int64_t ttl_ns,
                             int64_t now_ns);
/* Whether a request of class cls (past the last class: the last) and
   cost would be shed now; charges nothing, counts nothing. */
SL_API void sl_shedder_check(sl_shedder *sh, uint32_t cls, int64_t cost,
                             int64_t now_ns, sl_shed_decision *out);
/* Counts cost units into fleet usage (a request let through). */
SL_API void sl_shedder_charge(sl_shedder *sh, int64_t cost, int64_t now_ns);
/* sl_shedder_check, then sl_shedder_charge when it is not shed, or the
   shed counted in the class's stats. */
SL_API void sl_shedder_take(sl_shedder *sh, uint32_t cls, int64_t cost,
                            int64_t now_ns, sl_shed_decision *out);
/* In-flight mode: cost units charged earlier are done. */
SL_API void sl_shedder_release(sl_shedder *sh, int64_t cost);
/* The units other daemons use (fleet mode's sync sets it). */
SL_API void sl_shedder_set_remote(sl_shedder *sh, uint64_t units);
/* The local usage counts: the window's start, its count and the previous
   window's (in-flight mode: *cur is in flight). For a fleet sync. */
SL_API void sl_shedder_counts(const sl_shedder *sh, int64_t *win_start,
                              uint64_t *cur, uint64_t *prev);
SL_API void sl_shedder_stats(sl_shedder *sh, int64_t now_ns,
                             sl_shed_stats *out);
/*
 * A level as people write one: a decimal fraction ("0.93", "1") or a
 * percentage ("93%", "87.5%"), 0 to 10 (1000%), into permille (finer
 * digits are dropped). 0, or SL_EINVAL.
 */
SL_API int sl_shed_parse_level(const char *s, size_t len, uint32_t *pm);
/* ---- concurrency: leases ------------------------------------------------- */

/*
 * A limiter of policy SL_CONCURRENCY admits at most LIMIT requests in
 * flight per key. sl_limiter_take with cost 1 (or sl_acquire) acquires: when
 * fewer than LIMIT leases of the key are live at now_ns, a new one is
 * recorded, expiring at now_ns + the policy's lease, and its id is returned
 * in out->lease (allowed 1, remaining = slots still free); otherwise it is
 * denied (allowed 0) with retry_after_ns = until the earliest live lease
 * expires (a release may free a slot sooner). limit = LIMIT; reset_ns =
 * until the last live lease expires. Cost 0 peeks; a cost above 1 is
 * SL_ECOST (a lease is one slot). In sl_take_all a concurrency check takes
 * part all-or-nothing like any other: a request a rate rule denies holds no
 * lease; all the concurrency checks of one call share one lease id.
 *
 * Lease ids are 64-bit SipHash values of a per-store counter under a
 * per-store random key: unique within a store and not guessable by another
 * client. A lease is tied to its (limiter, key): release and renew name
 * both. Leases are kept in the store's memory (16 bytes each, counted
 * against max_memory); a key holding a live lease is never evicted (a new
 * key then gets SL_EFULL instead) and never expires.
 */
SL_API int sl_acquire(sl_limiter *lim, const void *key, size_t key_len,
                      int64_t now_ns, sl_decision *out);

/*
 * Releases lease `lease` of key at now_ns: its slot is free at once.
 * Returns 1 when it was live and is released, 0 when no such lease is live
 * (unknown, already released, or expired: harmless, nothing changes), or
 * SL_EINVAL (not a concurrency limiter, NULL limiter), SL_EKEY, SL_ETIME.
 * out (may be NULL) receives the key's figures after it, as a peek.
 */
SL_API int sl_release(sl_limiter *lim, const void *key, size_t key_len,
                      uint64_t lease, int64_t now_ns, sl_decision *out);

/*
 * Renews a live lease: it now expires the policy's lease after now_ns.
 * Returns 1, 0 when no such lease is live (an expired lease cannot be
 * renewed: its slot may be someone else's), or the errors of sl_release.
 * out as sl_release's (out->lease is the renewed lease when renewed).
 */
SL_API int sl_renew(sl_limiter *lim, const void *key, size_t key_len,
                    uint64_t lease, int64_t now_ns, sl_decision *out);
/* ---- waiting for a decision (Go's rate.Limiter.Wait) ---------------------- */

/*
 * Takes `cost` for key and sleeps until the request may go: a leaky_bucket's
 * delay (its slot in the queue is reserved at decision time; the sleep
 * serves it), or, for a denial, its retry_after, after which it asks again.
 * This one call reads clocks (clock_gettime: CLOCK_REALTIME for the
 * decisions' time, CLOCK_MONOTONIC for the sleeps) and blocks the calling
 * thread; every other function of the library takes the time from its
 * caller.
 *   deadline_ns  CLOCK_REALTIME nanoseconds by which the request must be
 *                able to go, or 0 for none. A wait that would end after it
 *                is not started: nothing is charged, *out is the denial
 *                (allowed 0, retry_after_ns when it could go), return 0.
 *   cancel_fd    a descriptor that becomes readable to cancel the wait
 *                (an eventfd, a pipe's read end, ...), or -1 for none: the
 *                call then returns SL_ECANCELED. Cancelled before the
 *                decision, nothing is charged; during a leaky_bucket's
 *                delay, the reserved slot stays charged (its place in the
 *                queue is not given back to the requests behind it).
 * Returns 0 with out->allowed 1 once the request may go, 0 with allowed 0
 * when the deadline cannot be met, SL_ECANCELED, or the errors of
 * sl_limiter_take (SL_ECOST for a cost that can never pass: no wait).
 */
SL_API int sl_limiter_wait(sl_limiter *lim, const void *key, size_t key_len,
                           int64_t cost, int64_t deadline_ns, int cancel_fd,
                           sl_decision *out);

/* ---- the client side: backoff, the server's headers, pacing --------------- */

/*
 * What a server said about its limits, from its response headers
 * (sl_rate_info_header): each figure -1 while no header gave it. Durations
 * are from the moment the headers were read (now_ns of the call).
 */
typedef struct sl_rate_info {
  int64_t limit;          /* the quota: RateLimit-Policy q, X-RateLimit-Limit */
  int64_t remaining;      /* RateLimit r, X-RateLimit-Remaining */
  int64_t reset_ns;       /* until the quota is restored: RateLimit t,
                             X-RateLimit-Reset (delta or epoch seconds) */
  int64_t window_ns;      /* the policy's window: RateLimit-Policy w */
  int64_t retry_after_ns; /* Retry-After (seconds or an HTTP-date) */
  char policy[64];        /* the RateLimit item's name ("" if none) */
} sl_rate_info;

/* Every figure unknown (-1), no policy name. */
SL_API void sl_rate_info_init(sl_rate_info *info);

/*
 * Reads one response header into *info. Names, in any case: Retry-After
 * (RFC 9110: delay-seconds or an HTTP-date, the three formats);
 * RateLimit and RateLimit-Policy in the current draft's Structured Fields
 * (draft-ietf-httpapi-ratelimit-headers-09: `"name";r=50;t=30`,
 * `"name";q=100;w=60`; of several items, the least remaining) and its
 * draft-07 dictionary (`limit=100, remaining=50, reset=30`);
 * RateLimit-Limit/-Remaining/-Reset (drafts up to 06); X-RateLimit-Limit/
 * -Remaining/-Reset (a reset of 10^9 or more is an epoch time, in seconds,
 * or milliseconds from 10^12). Where two headers give one figure, the more
 * cautious wins (less remaining, a later reset). now_ns: the time the
 * response was received (for dates and epoch times).
 * Returns 1 when the header was one of these and was used, 0 when it is
 * not one of them (ignored), SL_EINVAL when it is one but its value is
 * malformed (longer than 4096 bytes, a negative or overflowing number, bad
 * syntax): *info is then unchanged.
 */
SL_API int sl_rate_info_header(sl_rate_info *info, const char *name,
                               size_t name_len, const char *value,
                               size_t value_len, int64_t now_ns);

/* A uniform 64-bit random number, from the caller's source. */
typedef uint64_t (*sl_random_fn)(void *ud);

/*
 * Exponential backoff with full jitter (AWS's): a delay uniform in
 * [0, min(cap_ns, base_ns * 2^attempt)], attempt counting from 0, drawn
 * from random(ud) (NULL: libsodium's randombytes). Then never earlier than
 * the server asked: when info (may be NULL) has a Retry-After, or a reset
 * with nothing remaining, that wait comes first and the jitter is added
 * after it, so that clients told the same instant do not come back
 * together. Returns the delay in ns (base_ns, cap_ns < 0 count as 0).
 */
SL_API int64_t sl_backoff_delay(int64_t base_ns, int64_t cap_ns,
                                unsigned attempt, const sl_rate_info *info,
                                sl_random_fn random, void *ud);

/*
 * Pacing, to slow down before the 429: the interval to leave before the
 * next request so that the remaining quota lasts until the reset
 * (reset / remaining, rounded up); with nothing remaining, the time to the
 * reset (or the Retry-After, if later). 0 when the headers did not say
 * enough (no remaining or no reset).
 */
SL_API int64_t sl_pace_interval(const sl_rate_info *info);

#ifdef __cplusplus
}
#endif
#endif /* SLUICE_H */
