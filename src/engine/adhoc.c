/*
 * adhoc.c — the ad-hoc policies clients name (SL.THROTTLE, CL.THROTTLE,
 * /v1/throttle): each distinct policy gets one limiter on first use, kept
 * until the engine goes (at most ENG_MAX_ADHOC of them: a bound on what a
 * client can make the daemon hold). Each worker thread caches the policies
 * it has seen, by the text as written and by value, so the hot path parses
 * and formats nothing.
 */
#include <stdio.h>
#include <string.h>

#include "../base/hash.h"
#include "internal.h"

size_t adhoc_count(engine *e) {
  return atomic_load_explicit(&e->nadhoc, memory_order_acquire);
}

const adhoc_entry *adhoc_find(engine *e, const char *canon, size_t len) {
  size_t n = adhoc_count(e);
  for (size_t i = 0; i < n; i++)
    if (strlen(e->adhoc[i].canon) == len &&
        !memcmp(e->adhoc[i].canon, canon, len))
      return &e->adhoc[i];
  return NULL;
}

/* The limiter of policy p (canonical `canon`), created on first use; NULL
   when there are ENG_MAX_ADHOC already (or out of memory). */
static const adhoc_entry *adhoc_get(engine *e, const sl_policy *p,
                                    const char *canon) {
  const adhoc_entry *found = adhoc_find(e, canon, strlen(canon));
  if (found) return found;
  pthread_mutex_lock(&e->adhoc_lock);
  size_t n = atomic_load_explicit(&e->nadhoc, memory_order_relaxed);
  for (size_t i = 0; i < n && !found; i++)
    if (!strcmp(e->adhoc[i].canon, canon)) found = &e->adhoc[i];
  if (!found && n < ENG_MAX_ADHOC) {
    adhoc_entry *a = &e->adhoc[n];
    snprintf(a->canon, sizeof a->canon, "%s", canon);
    a->policy = *p;
    a->local = NULL;
    int rc = sl_limiter_new(e->store, p, &a->lim);
    if (rc == 0 && engine_fallible(e) &&
        limit_mode(e, NULL) == CFG_STORE_ERROR_LOCAL) {
      sl_policy lp = local_policy(e, NULL, p);
      if ((rc = sl_limiter_new(e->store, &lp, &a->local)))
        sl_limiter_free(a->lim);
    }
    if (rc == 0) {
      atomic_store_explicit(&e->nadhoc, n + 1, memory_order_release);
      found = a;
    }
  }
  pthread_mutex_unlock(&e->adhoc_lock);
  return found;
}

/* A policy refused (rc SL_EPOLICY or ENG_EADHOC): out->err says why,
   out->msg says so to the client. NULL, for the caller to return. */
static const adhoc_entry *refuse(eng_result *out, int *rc, int code,
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
static const adhoc_entry *adhoc_checked(engine *e, const sl_policy *p, int *rc,
                                        eng_result *out) {
  eng_backend *b = e->backend;
  char why[160] = "";
  char canon[64];
  if (sl_policy_format(p, canon, sizeof canon) < 0 ||
      (b->ops->policy_ok && b->ops->policy_ok(b, p, why, sizeof why)))
    return refuse(out, rc, SL_EPOLICY, why);
  const adhoc_entry *a = adhoc_get(e, p, canon);
  if (!a) {
    snprintf(why, sizeof why, "too many distinct ad-hoc policies (max %d)",
             ENG_MAX_ADHOC);
    return refuse(out, rc, ENG_EADHOC, why);
  }
  return a;
}

/* The policy spelled spec, by the thread's cache of the text as written
   (no parsing on the hot path). */
static const adhoc_entry *by_spec(engine_thread *t, const char *spec,
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
  const adhoc_entry *a = adhoc_checked(t->e, &p, rc, out);
  if (a && spec_len < sizeof t->adhoc_cache[slot].spec) {
    memcpy(t->adhoc_cache[slot].spec, spec, spec_len);
    t->adhoc_cache[slot].len = spec_len;
    t->adhoc_cache[slot].a = a;
  }
  return a;
}

/* Policy p, by the thread's cache of the policy's fields (no formatting,
   no search on the hot path). */
static const adhoc_entry *by_value(engine_thread *t, const sl_policy *p,
                                   int *rc, eng_result *out) {
  uint64_t h = ((uint64_t)p->algo * 0x9e3779b97f4a7c15u) ^
               ((uint64_t)p->limit << 32 | p->burst) ^
               (uint64_t)p->period_ns * 0xff51afd7ed558ccdu;
  size_t slot = (size_t)((h ^ h >> 29) % ADHOC_CACHE);
  const adhoc_entry *a = t->policy_cache[slot];
  if (a && a->policy.algo == p->algo && a->policy.limit == p->limit &&
      a->policy.burst == p->burst && a->policy.period_ns == p->period_ns)
    return a;
  a = adhoc_checked(t->e, p, rc, out);
  if (a) t->policy_cache[slot] = a;
  return a;
}

const adhoc_entry *adhoc_of(engine_thread *t, const eng_query *q, int *rc,
                            eng_result *out) {
  return q->spec ? by_spec(t, q->spec, q->spec_len, rc, out)
                 : by_value(t, q->policy, rc, out);
}
