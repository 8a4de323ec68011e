/*
 * adhoc.c — the ad-hoc policies clients name (SL.THROTTLE, CL.THROTTLE,
 * /v1/throttle): each distinct policy gets one limiter on first use. At
 * most ENG_MAX_ADHOC are in use at once: a bound on what a client can make
 * the daemon hold. Each worker thread caches the policies it has seen, by
 * the text as written and by value, so the hot path parses and formats
 * nothing.
 *
 * Reclaiming. A policy whose limiter owns no key in the store holds
 * nothing a client would miss, so the main thread (adhoc_reclaim, from
 * engine_maintain) retires such policies when the cap has refused one, or
 * half of it is in use: a retired entry is no longer found, so its next use
 * makes a new one. It is freed, and its slot reused, only once no worker
 * can still hold it: workers read entries without a lock and keep pointers
 * in their caches, so a retirement bumps the adhoc epoch, each worker
 * publishes the epoch it holds at its quiesce point (and empties its caches
 * when it changed), and the entry goes once every online worker has moved
 * past it and no decision waiting for the backend pins it. A decision that
 * was already running when its policy was retired (one event-loop pass at
 * most) charges the old limiter, whose keys go with it: one pass's charges
 * of a policy that had no key left.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../base/clock.h"
#include "../base/hash.h"
#include "../limiter.h"
#include "../store/walk.h"
#include "internal.h"

#define RECLAIM_EVERY_NS INT64_C(1000000000)
#define FREES_PER_CALL 64 /* freed with one walk over the store */

size_t adhoc_count(engine *e) {
  return atomic_load_explicit(&e->nadhoc, memory_order_acquire);
}

int adhoc_live(const adhoc_entry *a) {
  return atomic_load_explicit(&a->state, memory_order_acquire) == ADHOC_LIVE;
}

adhoc_entry *adhoc_find(engine *e, const char *canon, size_t len) {
  size_t n = adhoc_count(e);
  for (size_t i = 0; i < n; i++)
    if (adhoc_live(&e->adhoc[i]) && strlen(e->adhoc[i].canon) == len &&
        !memcmp(e->adhoc[i].canon, canon, len))
      return &e->adhoc[i];
  return NULL;
}

/* A free slot under adhoc_lock (a FREE one, else a new one), or NULL. */
static adhoc_entry *free_slot(engine *e) {
  size_t n = atomic_load_explicit(&e->nadhoc, memory_order_relaxed);
  for (size_t i = 0; i < n; i++)
    if (atomic_load_explicit(&e->adhoc[i].state, memory_order_relaxed) ==
        ADHOC_FREE)
      return &e->adhoc[i];
  return n < ADHOC_SLOTS ? &e->adhoc[n] : NULL;
}

adhoc_entry *adhoc_get(engine *e, const sl_policy *p, const char *canon,
                       int *rc) {
  adhoc_entry *found = adhoc_find(e, canon, strlen(canon));
  if (found) return found;
  pthread_mutex_lock(&e->adhoc_lock);
  found = adhoc_find(e, canon, strlen(canon));
  adhoc_entry *a = found ? NULL : free_slot(e);
  *rc = ENG_EADHOC;
  if (!found && (!a || atomic_load(&e->adhoc_live) >= ENG_MAX_ADHOC)) {
    atomic_store(&e->adhoc_refused, 1); /* the main thread reclaims */
    a = NULL;
  }
  if (a) {
    snprintf(a->canon, sizeof a->canon, "%s", canon);
    a->policy = *p;
    a->local = NULL;
    atomic_store_explicit(&a->pins, 0, memory_order_relaxed);
    int r = sl_limiter_new(e->store, p, &a->lim);
    if (r == 0 && engine_fallible(e) &&
        limit_mode(e, NULL) == CFG_STORE_ERROR_LOCAL) {
      sl_policy lp = local_policy(e, NULL, p);
      if ((r = sl_limiter_new(e->store, &lp, &a->local)))
        sl_limiter_free(a->lim);
    }
    if (r == 0) {
      atomic_store_explicit(&a->state, ADHOC_LIVE, memory_order_release);
      if (a == &e->adhoc[atomic_load(&e->nadhoc)])
        atomic_store_explicit(&e->nadhoc, (size_t)(a - e->adhoc) + 1,
                              memory_order_release);
      atomic_fetch_add(&e->adhoc_live, 1);
      found = a;
    } else {
      *rc = r == SL_ENOMEM ? SL_ENOMEM : ENG_EADHOC;
    }
  }
  pthread_mutex_unlock(&e->adhoc_lock);
  return found;
}

sl_limiter *engine_cell(engine *e) {
  sl_limiter *lim = atomic_load_explicit(&e->cell, memory_order_acquire);
  if (lim) return lim;
  pthread_mutex_lock(&e->adhoc_lock);
  lim = atomic_load_explicit(&e->cell, memory_order_relaxed);
  if (!lim && limiter_cell_new(e->store, &lim) == 0)
    atomic_store_explicit(&e->cell, lim, memory_order_release);
  pthread_mutex_unlock(&e->adhoc_lock);
  return lim;
}

/* ---- reclaiming (the main thread) ---- */

/* Counts each limiter id's keys (one shard locked at a time). */
static void count_key(void *ud, const store_entry *en) {
  ((uint32_t *)ud)[en->id]++;
}

/* Whether lim (NULL: none) owns no key by the count. */
static int keyless(const sl_limiter *lim, const uint32_t *count) {
  if (!lim) return 1;
  const algo_policy *p;
  uint16_t id;
  limiter_ident(lim, &p, &id);
  return count[id] == 0;
}

/* Retires the live entries that own no key. */
static void retire_keyless(engine *e) {
  uint32_t *count = calloc(65536, sizeof *count);
  if (!count) return;
  for (unsigned n = 0; n < store_nshards(e->store); n++)
    store_walk_shard(e->store, n, count_key, count);
  pthread_mutex_lock(&e->adhoc_lock);
  uint64_t epoch = atomic_load(&e->adhoc_epoch) + 1;
  int retired = 0;
  for (size_t i = 0; i < adhoc_count(e); i++) {
    adhoc_entry *a = &e->adhoc[i];
    if (!adhoc_live(a) || atomic_load(&a->pins) || !keyless(a->lim, count) ||
        !keyless(a->local, count))
      continue;
    a->retired_at = epoch;
    atomic_store(&a->state, ADHOC_RETIRED);
    atomic_fetch_sub(&e->adhoc_live, 1);
    retired = 1;
  }
  /* seq_cst, paired with engine_thread_quiesce: a worker that loads the
     new epoch finds none of these any more. */
  if (retired) atomic_store(&e->adhoc_epoch, epoch);
  atomic_store(&e->adhoc_refused, 0);
  pthread_mutex_unlock(&e->adhoc_lock);
  free(count);
}

/*
 * Frees the retired entries no worker can hold any more (a few a call).
 * Their limiters go together: freeing one walks the whole store for its
 * keys, so one walk for all of them, not one each (with a full store of
 * millions of keys, a walk takes milliseconds).
 */
static void free_retired(engine *e) {
  adhoc_entry *done[FREES_PER_CALL];
  sl_limiter *lims[2 * FREES_PER_CALL];
  size_t n = 0;
  for (size_t i = 0; i < adhoc_count(e) && n < FREES_PER_CALL; i++) {
    adhoc_entry *a = &e->adhoc[i];
    if (atomic_load(&a->state) != ADHOC_RETIRED || atomic_load(&a->pins) ||
        !threads_past_epoch(e, a->retired_at))
      continue;
    eng_backend *b = e->backend;
    if (b->ops->forget) {
      b->ops->forget(b, a->lim);
      if (a->local) b->ops->forget(b, a->local);
    }
    lims[2 * n] = a->lim;
    lims[2 * n + 1] = a->local;
    done[n++] = a;
  }
  limiter_free_many(lims, 2 * n);
  for (size_t k = 0; k < n; k++) {
    done[k]->lim = done[k]->local = NULL;
    pthread_mutex_lock(&e->adhoc_lock);
    atomic_store(&done[k]->state, ADHOC_FREE);
    pthread_mutex_unlock(&e->adhoc_lock);
  }
}

void adhoc_reclaim(engine *e) {
  free_retired(e);
  int64_t now = clock_mono_ns();
  if ((atomic_load(&e->adhoc_refused) ||
       atomic_load(&e->adhoc_live) * 2 > ENG_MAX_ADHOC) &&
      now - e->adhoc_scanned_at >= RECLAIM_EVERY_NS) {
    e->adhoc_scanned_at = now;
    retire_keyless(e);
  }
}

/* A policy refused (rc SL_EPOLICY or ENG_EADHOC): out->err says why,
   out->msg says so to the client. NULL, for the caller to return. */
static adhoc_entry *refuse(eng_result *out, int *rc, int code,
                                 const char *why) {
  *rc = code;
  snprintf(out->err, sizeof out->err, "%s", why);
  if (code == SL_EPOLICY)
    snprintf(out->msg, sizeof out->msg, "invalid policy%s%s",
             why[0] ? ": " : "", why);
  else
    snprintf(out->msg, sizeof out->msg, "%s", why);
  return NULL;
}

/* Policy p, checked by the backend, as an entry: NULL (refused) when the
   backend cannot decide it or there is no room for it. */
static adhoc_entry *adhoc_checked(engine *e, const sl_policy *p, int *rc,
                                  eng_result *out) {
  eng_backend *b = e->backend;
  char why[160] = "";
  char canon[64];
  if (sl_policy_format(p, canon, sizeof canon) < 0 ||
      (b->ops->policy_ok && b->ops->policy_ok(b, p, why, sizeof why)))
    return refuse(out, rc, SL_EPOLICY, why);
  int code;
  adhoc_entry *a = adhoc_get(e, p, canon, &code);
  if (!a && code == SL_ENOMEM)
    return refuse(out, rc, SL_ENOMEM,
                  "the store is full (--max-memory): no room for a new "
                  "ad-hoc policy");
  if (!a) {
    snprintf(why, sizeof why, "too many distinct ad-hoc policies (max %d)",
             ENG_MAX_ADHOC);
    return refuse(out, rc, ENG_EADHOC, why);
  }
  return a;
}

/* The policy spelled spec, by the thread's cache of the text as written
   (no parsing on the hot path). */
static adhoc_entry *by_spec(engine_thread *t, const char *spec,
                                  size_t spec_len, int *rc, eng_result *out) {
  size_t slot = (size_t)(fnv1a(FNV1A_INIT, spec, spec_len) % ADHOC_CACHE);
  if (t->adhoc_cache[slot].a && t->adhoc_cache[slot].len == spec_len &&
      !memcmp(t->adhoc_cache[slot].spec, spec, spec_len))
    return t->adhoc_cache[slot].a;
  char buf[256], why[160];
  if (spec_len >= sizeof buf)
    return refuse(out, rc, SL_EPOLICY, "policy is too long");
  memcpy(buf, spec, spec_len);
  buf[spec_len] = '\0';
  sl_policy p;
  if (sl_policy_parse(buf, &p, why, sizeof why))
    return refuse(out, rc, SL_EPOLICY, why);
  adhoc_entry *a = adhoc_checked(t->e, &p, rc, out);
  if (a && spec_len < sizeof t->adhoc_cache[slot].spec) {
    memcpy(t->adhoc_cache[slot].spec, spec, spec_len);
    t->adhoc_cache[slot].len = spec_len;
    t->adhoc_cache[slot].a = a;
  }
  return a;
}

/* Policy p, by the thread's cache of the policy's fields (no formatting,
   no search on the hot path). */
static adhoc_entry *by_value(engine_thread *t, const sl_policy *p, int *rc,
                             eng_result *out) {
  uint64_t h = ((uint64_t)p->algo * 0x9e3779b97f4a7c15u) ^
               ((uint64_t)p->limit << 32 | p->burst) ^
               (uint64_t)p->period_ns * 0xff51afd7ed558ccdu;
  size_t slot = (size_t)((h ^ h >> 29) % ADHOC_CACHE);
  adhoc_entry *a = t->policy_cache[slot];
  if (a && a->policy.algo == p->algo && a->policy.limit == p->limit &&
      a->policy.burst == p->burst && a->policy.period_ns == p->period_ns)
    return a;
  a = adhoc_checked(t->e, p, rc, out);
  if (a) t->policy_cache[slot] = a;
  return a;
}

adhoc_entry *adhoc_of(engine_thread *t, const eng_query *q, int *rc,
                      eng_result *out) {
  return q->spec ? by_spec(t, q->spec, q->spec_len, rc, out)
                 : by_value(t, q->policy, rc, out);
}
