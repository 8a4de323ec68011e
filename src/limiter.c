/*
 * limiter.c — the public limiter API: one policy bound to one store.
 *
 * Checks arguments (so the store and the algorithms can trust them), hashes
 * keys, and orchestrates the batch and multi-rule calls: sl_take_all locks
 * every shard involved in ascending order (no deadlock between concurrent
 * callers), evaluates all checks without charging, and charges only when
 * every non-shadow check allows — nginx limit_req's account/unlock.
 */
#include <limits.h>
#include <string.h>

#include "limiter.h"
#include "algo/cell.h"
#include "store/mem.h"

struct sl_limiter {
  sl_store *store;
  algo_policy p;
  uint16_t id;
};

int sl_limiter_new(sl_store *store, const sl_policy *policy,
                   sl_limiter **out) {
  if (!store || !policy || !out) return SL_EINVAL;
  *out = NULL;
  algo_policy p;
  int rc = algo_policy_compile(policy, &p, NULL, 0);
  if (rc) return rc;
  sl_limiter *lim = store_alloc(store, sizeof *lim);
  if (!lim) return SL_ENOMEM;
  lim->store = store;
  lim->p = p;
  rc = store_register(store, &lim->p, &lim->id);
  if (rc) {
    store_free(store, lim, sizeof *lim);
    return rc;
  }
  *out = lim;
  return 0;
}

int limiter_cell_new(sl_store *store, sl_limiter **out) {
  if (!store || !out) return SL_EINVAL;
  *out = NULL;
  sl_limiter *lim = store_alloc(store, sizeof *lim);
  if (!lim) return SL_ENOMEM;
  lim->store = store;
  /* Any rate: each call brings its own (limiter_cell_take); the store
     reads only the ops of the registered policy (expiry, eviction). */
  algo_cell_policy(&(algo_cell){1, 1, 1}, &lim->p);
  int rc = store_register(store, &lim->p, &lim->id);
  if (rc) {
    store_free(store, lim, sizeof *lim);
    return rc;
  }
  *out = lim;
  return 0;
}

void sl_limiter_free(sl_limiter *lim) {
  if (!lim) return;
  store_unregister(lim->store, lim->id);
  store_free(lim->store, lim, sizeof *lim);
}

void limiter_free_many(sl_limiter **lims, size_t n) {
  uint16_t ids[256];
  sl_store *store = NULL;
  size_t k = 0;
  for (size_t i = 0; i < n; i++) {
    if (!lims[i]) continue;
    /* A batch is one store's: another store, or a full batch, sends it. */
    if (k && (lims[i]->store != store || k == sizeof ids / sizeof ids[0])) {
      store_unregister_many(store, ids, k);
      k = 0;
    }
    store = lims[i]->store;
    ids[k++] = lims[i]->id;
  }
  if (k) store_unregister_many(store, ids, k);
  for (size_t i = 0; i < n; i++)
    if (lims[i]) store_free(lims[i]->store, lims[i], sizeof *lims[i]);
}

const sl_policy *sl_limiter_policy(const sl_limiter *lim) {
  return lim ? &lim->p.pub : NULL;
}

int sl_limiter_set_evict_below(sl_limiter *lim, uint32_t units) {
  if (!lim) return SL_EINVAL;
  lim->p.evict_below = units; /* the store reads it through the registry */
  return 0;
}

/* The checks every request passes before the store sees it. */
static int check_request(const sl_limiter *lim, const void *key,
                         size_t key_len, int64_t cost, int64_t now) {
  if (!lim || (!key && key_len)) return SL_EINVAL;
  if (key_len > SL_KEY_MAX) return SL_EKEY;
  if (cost < 0) return SL_EINVAL;
  if (cost > lim->p.B) return SL_ECOST;
  if (now < 0 || now >= SL_TIME_MAX_NS) return SL_ETIME;
  return 0;
}

int sl_limiter_take(sl_limiter *lim, const void *key, size_t key_len,
                    int64_t cost, int64_t now_ns, sl_decision *out) {
  if (!out) return SL_EINVAL;
  int rc = check_request(lim, key, key_len, cost, now_ns);
  if (rc) return rc;
  store_ref r;
  store_ref_init(lim->store, &r, &lim->p, lim->id, key, key_len);
  if (lim->p.pub.algo == SL_CONCURRENCY && cost > 0)
    r.lease = store_lease_id(lim->store);
  return store_take(lim->store, &r, cost, now_ns, out);
}

int sl_acquire(sl_limiter *lim, const void *key, size_t key_len,
               int64_t now_ns, sl_decision *out) {
  if (lim && lim->p.pub.algo != SL_CONCURRENCY) return SL_EINVAL;
  return sl_limiter_take(lim, key, key_len, 1, now_ns, out);
}

/* sl_release and sl_renew: op on lease of key. */
static int lease_op(sl_limiter *lim, const void *key, size_t key_len,
                    uint64_t lease, int op, int64_t now_ns, sl_decision *out) {
  if (!lim || lim->p.pub.algo != SL_CONCURRENCY) return SL_EINVAL;
  int rc = check_request(lim, key, key_len, 0, now_ns);
  if (rc) return rc;
  store_ref r;
  store_ref_init(lim->store, &r, &lim->p, lim->id, key, key_len);
  r.lease = lease;
  return store_lease_op(lim->store, &r, op, now_ns, out);
}

int sl_release(sl_limiter *lim, const void *key, size_t key_len,
               uint64_t lease, int64_t now_ns, sl_decision *out) {
  return lease_op(lim, key, key_len, lease, LSET_RELEASE, now_ns, out);
}

int sl_renew(sl_limiter *lim, const void *key, size_t key_len, uint64_t lease,
             int64_t now_ns, sl_decision *out) {
  return lease_op(lim, key, key_len, lease, LSET_RENEW, now_ns, out);
}

int sl_limiter_force(sl_limiter *lim, const void *key, size_t key_len,
                     int64_t cost, int64_t now_ns, int64_t *level) {
  if (!level || !lim) return SL_EINVAL;
  /* Any cost: what does not fit is the debt (stopped by the algorithm). */
  int rc = check_request(lim, key, key_len, cost > lim->p.B ? 0 : cost, now_ns);
  if (rc) return rc;
  store_ref r;
  store_ref_init(lim->store, &r, &lim->p, lim->id, key, key_len);
  return store_force(lim->store, &r, cost, now_ns, level);
}

int limiter_cell_take(sl_limiter *lim, const algo_cell *rate, const void *key,
                      size_t key_len, int64_t qty, int64_t now_ns,
                      sl_decision *out) {
  if (!out || !rate) return SL_EINVAL;
  int rc = check_request(lim, key, key_len, 0, now_ns);
  if (rc) return rc;
  if (qty < 0) return SL_EINVAL;
  algo_policy p;
  algo_cell_policy(rate, &p);
  store_ref r;
  store_ref_init(lim->store, &r, &p, lim->id, key, key_len);
  return store_take(lim->store, &r, qty, now_ns, out);
}

void limiter_take_many(const limiter_req *r, size_t n, sl_decision *out,
                       int *rc) {
  store_ref refs[LIMITER_MANY_MAX];
  algo_policy cells[LIMITER_MANY_MAX];
  if (n > LIMITER_MANY_MAX) n = LIMITER_MANY_MAX;
  for (size_t i = 0; i < n; i++) {
    const limiter_req *q = &r[i];
    const algo_policy *p = q->lim ? &q->lim->p : NULL;
    rc[i] = check_request(q->lim, q->key, q->key_len, q->cell ? 0 : q->cost,
                          q->now_ns);
    if (!rc[i] && q->cost < 0) rc[i] = SL_EINVAL;
    if (rc[i]) continue;
    if (q->cell) {
      algo_cell_policy(q->cell, &cells[i]);
      p = &cells[i];
    }
    store_ref_init(q->lim->store, &refs[i], p, q->lim->id, q->key, q->key_len);
    if (p->pub.algo == SL_CONCURRENCY && q->cost > 0) /* as sl_limiter_take */
      refs[i].lease = store_lease_id(q->lim->store);
    store_prefetch(q->lim->store, &refs[i]);
  }
  for (size_t i = 0; i < n; i++)
    if (!rc[i])
      rc[i] = store_take(r[i].lim->store, &refs[i], r[i].cost, r[i].now_ns,
                         &out[i]);
}

void limiter_prefetch(const sl_limiter *lim, const void *key, size_t key_len) {
  if (!lim || (!key && key_len) || key_len > SL_KEY_MAX) return;
  store_ref r;
  store_ref_init(lim->store, &r, &lim->p, lim->id, key, key_len);
  store_prefetch(lim->store, &r);
}

int limiter_force_to(sl_limiter *lim, const void *key, size_t key_len,
                     int64_t target, int64_t now_ns, int64_t *level) {
  if (!level || !lim) return SL_EINVAL;
  int rc = check_request(lim, key, key_len, 0, now_ns);
  if (rc) return rc;
  store_ref r;
  store_ref_init(lim->store, &r, &lim->p, lim->id, key, key_len);
  return store_force_to(lim->store, &r, target, now_ns, level);
}

uint64_t limiter_lease_id(const sl_limiter *lim) {
  return store_lease_id(lim->store);
}

void limiter_ident(const sl_limiter *lim, const algo_policy **p,
                   uint16_t *id) {
  *p = &lim->p;
  *id = lim->id;
}

#define BATCH_AHEAD 16

int sl_limiter_take_batch(sl_limiter *lim, const sl_request *reqs, size_t n,
                          int64_t now_ns, sl_decision *out, int *err) {
  if (!lim || (n && (!reqs || !out)) || n > INT_MAX) return SL_EINVAL;
  int failed = 0;
  store_ref refs[BATCH_AHEAD];
  int rcs[BATCH_AHEAD];
  for (size_t base = 0; base < n; base += BATCH_AHEAD) {
    size_t m = n - base < BATCH_AHEAD ? n - base : BATCH_AHEAD;
    /* Hash the group and start its cache misses before deciding any. */
    for (size_t k = 0; k < m; k++) {
      const sl_request *q = &reqs[base + k];
      rcs[k] = check_request(lim, q->key, q->key_len, q->cost, now_ns);
      if (rcs[k]) continue;
      store_ref_init(lim->store, &refs[k], &lim->p, lim->id, q->key,
                     q->key_len);
      if (lim->p.pub.algo == SL_CONCURRENCY && q->cost > 0)
        refs[k].lease = store_lease_id(lim->store);
      store_prefetch(lim->store, &refs[k]);
    }
    for (size_t k = 0; k < m; k++) {
      int rc = rcs[k];
      if (!rc)
        rc = store_take(lim->store, &refs[k], reqs[base + k].cost, now_ns,
                        &out[base + k]);
      if (err) err[base + k] = rc;
      if (rc) failed++;
    }
  }
  return failed;
}

int sl_limiter_reset(sl_limiter *lim, const void *key, size_t key_len) {
  if (!lim || (!key && key_len)) return SL_EINVAL;
  if (key_len > SL_KEY_MAX) return SL_EKEY;
  store_ref r;
  store_ref_init(lim->store, &r, &lim->p, lim->id, key, key_len);
  return store_remove(lim->store, &r);
}

static int same_key(const sl_check *a, const sl_check *b) {
  return a->limiter == b->limiter && a->key_len == b->key_len &&
         (a->key_len == 0 || memcmp(a->key, b->key, a->key_len) == 0);
}

/*
 * A decision that would allow only after a delay above max_delay (> 0) is
 * a denial: the queue is longer than the caller will wait. It is then
 * decided as a denial is (nothing charged), and can be retried when the
 * queue has drained by the excess.
 */
static void too_long(sl_decision *d, int64_t cost, int64_t max_delay) {
  if (!d->allowed || cost == 0 || max_delay <= 0 || d->delay_ns <= max_delay)
    return;
  d->allowed = 0;
  d->retry_after_ns = d->delay_ns - max_delay;
  d->delay_ns = 0;
  d->remaining = 0;
}

int sl_take_all(const sl_check *checks, size_t n, int64_t now_ns,
                sl_decision *out, int *allowed) {
  return limiter_take_all_within(checks, NULL, NULL, n, now_ns, out, allowed);
}

int limiter_take_windows(const sl_check *checks, const limiter_window *win,
                         size_t n, int64_t now_ns, sl_decision *out,
                         int *allowed) {
  return limiter_take_all_within(checks, win, NULL, n, now_ns, out, allowed);
}

int limiter_take_all_within(const sl_check *checks, const limiter_window *win,
                            const int64_t *max_delay_ns, size_t n,
                            int64_t now_ns, sl_decision *out, int *allowed) {
  if (!allowed) return SL_EINVAL;
  *allowed = 0; /* until every check has passed and been charged */
  if (n > SL_CHECKS_MAX || (n && (!checks || !out))) return SL_EINVAL;
  if (n == 0) {
    *allowed = 1;
    return 0;
  }
  sl_store *store = checks[0].limiter ? checks[0].limiter->store : NULL;

  /* Merge repeated (limiter, key) pairs: one state, so one check whose cost
     is the sum, and which is shadow only if every part of it is. */
  size_t uniq[SL_CHECKS_MAX], map[SL_CHECKS_MAX], nu = 0;
  int64_t cost[SL_CHECKS_MAX], max_delay[SL_CHECKS_MAX];
  int shadow[SL_CHECKS_MAX];
  for (size_t i = 0; i < n; i++) {
    const sl_check *c = &checks[i];
    if (!c->limiter || c->limiter->store != store || (!c->key && c->key_len))
      return SL_EINVAL;
    if (c->cost < 0) return SL_EINVAL;
    size_t u = 0;
    while (u < nu && !same_key(&checks[uniq[u]], c)) u++;
    if (u == nu) {
      uniq[nu] = i;
      shadow[nu] = 1;
      max_delay[nu] = 0;
      cost[nu++] = 0;
    }
    shadow[u] &= c->shadow != 0;
    /* The tightest bound of the merged parts (0: none). */
    int64_t most = max_delay_ns ? max_delay_ns[i] : 0;
    if (most > 0 && (max_delay[u] == 0 || most < max_delay[u]))
      max_delay[u] = most;
    if (c->cost > c->limiter->p.B - cost[u]) return SL_ECOST;
    cost[u] += c->cost;
    map[i] = u;
  }
  store_ref refs[SL_CHECKS_MAX];
  algo_policy wp[SL_CHECKS_MAX]; /* the policies of checks in a window */
  unsigned shards[SL_CHECKS_MAX], ns = 0;
  uint64_t lease = 0; /* one for all the request's concurrency checks */
  for (size_t u = 0; u < nu; u++) {
    const sl_check *c = &checks[uniq[u]];
    int rc = check_request(c->limiter, c->key, c->key_len, cost[u], now_ns);
    if (rc) return rc;
    const algo_policy *p = &c->limiter->p;
    const limiter_window *w = win ? &win[uniq[u]] : NULL;
    if (w && w->end_ns) { /* its decisions in this window only */
      if (p->pub.algo != SL_FIXED_WINDOW || w->start_ns > now_ns ||
          w->end_ns <= now_ns || w->end_ns - w->start_ns > p->W)
        return SL_EINVAL;
      wp[u] = *p;
      wp[u].W = w->end_ns - w->start_ns;
      wp[u].phase = w->start_ns;
      p = &wp[u];
    }
    store_ref_init(store, &refs[u], p, c->limiter->id, c->key, c->key_len);
    if (p->pub.algo == SL_CONCURRENCY && cost[u] > 0) {
      if (!lease) lease = store_lease_id(store);
      refs[u].lease = lease;
    }
    /* Insertion sort into the distinct shards, ascending. */
    unsigned sh = refs[u].shard, k = ns;
    int dup = 0;
    for (unsigned j = 0; j < ns; j++) dup |= shards[j] == sh;
    if (dup) continue;
    while (k > 0 && shards[k - 1] > sh) {
      shards[k] = shards[k - 1];
      k--;
    }
    shards[k] = sh;
    ns++;
  }

  sl_decision dec[SL_CHECKS_MAX];
  store_undo undo[SL_CHECKS_MAX];
  int rc = 0, all = 1;
  for (unsigned j = 0; j < ns; j++) store_lock(store, shards[j]);
  for (size_t u = 0; u < nu && !rc; u++) {
    rc = store_decide_locked(store, &refs[u], cost[u], now_ns, 0, &dec[u],
                             NULL);
    if (!rc) too_long(&dec[u], cost[u], max_delay[u]);
    if (!rc && !dec[u].allowed && !shadow[u]) all = 0;
  }
  /* Charge; if one charge fails (memory), take back those made before it,
     so that a failed request, like a denied one, charges nothing. */
  if (!rc && all) {
    size_t u = 0;
    for (; u < nu; u++) {
      undo[u].kind = UNDO_NONE;
      if (dec[u].allowed && cost[u] > 0) {
        rc = store_decide_locked(store, &refs[u], cost[u], now_ns, 1, &dec[u],
                                 &undo[u]);
        if (rc) break;
      }
    }
    if (rc)
      while (u-- > 0) store_undo_locked(store, &refs[u], &undo[u]);
  } else if (!rc) {
    /* Denied: the checks that would have allowed were not charged; report
       their current figures (a peek), still saying they would allow. */
    for (size_t u = 0; u < nu && !rc; u++)
      if (dec[u].allowed && cost[u] > 0) {
        rc = store_decide_locked(store, &refs[u], 0, now_ns, 0, &dec[u], NULL);
        dec[u].allowed = 1;
      }
  }
  for (unsigned j = ns; j-- > 0;) store_unlock(store, shards[j]);
  if (rc) return rc;

  for (size_t i = 0; i < n; i++) out[i] = dec[map[i]];
  *allowed = all;
  return 0;
}
