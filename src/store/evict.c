/*
 * evict.c — what the store drops when its memory cap binds, and why that
 * gives away as little as possible.
 *
 * Evicting a live entry resets its key to fresh: its owner may be admitted
 * again for whatever the entry held against the quota. So the price of an
 * entry is what a reset would give back at now, in units of cost, as its
 * algorithm reports it (algo_ops.used: a window's count, the live log, a
 * bucket's debt); an entry already fresh costs nothing. Among the
 * EVICT_WINDOW slots from the new key's home, the cheapest entry goes;
 * among equal prices, the one closest to fresh (for keys of one policy,
 * the one touched longest ago). A key at its limit is therefore the last
 * to go, not the first: a flood of keys that each used a little cannot
 * push out a key that used much.
 *
 * Each eviction adds its price to the shard's evicted_units: the most its
 * owner could be admitted beyond the limit because of it (the metric
 * sluice_store_evicted_units_total).
 *
 * A concurrency key holding a live lease is never evicted (its holder is
 * still in flight: dropping the lease would admit one request too many).
 *
 * A policy may bound the price it lets its new keys pay (evict_below):
 * when every candidate is at the bound or above it, nothing is evicted and
 * the request fails with SL_EFULL — refused rather than paid for with
 * another key's quota.
 */
#include "table.h"

/* An entry's price: what evicting it gives back, then when it would be
   fresh anyway (the earlier, the less its history is worth). */
typedef struct price {
  int64_t units, fresh_at;
  int pinned; /* a concurrency key holding a live lease: never evicted */
} price;

static price price_of(sl_store *s, const shard *sh, size_t i, int64_t now) {
  const algo_policy *p = reg_get(s, CTRL_ID(sh->ctrl[i]));
  const algo_state *st = &sh->slots[i].st;
  price pr = {0, p->ops->fresh_at(p, st), 0};
  if (pr.fresh_at > now) pr.units = p->ops->used(p, st, now);
  /* Evicting a live lease would admit one more request in flight than
     the limit while its holder still runs: that is never a price to pay. */
  pr.pinned = p->pub.algo == SL_CONCURRENCY && pr.units > 0;
  return pr;
}

static int cheaper(price a, price b) {
  return a.units < b.units || (a.units == b.units && a.fresh_at < b.fresh_at);
}

/* Whether r's policy lets its keys take the room of an entry of price pr. */
static int affordable(const store_ref *r, price pr) {
  uint32_t below = r->p->evict_below;
  if (pr.pinned) return 0;
  return below == 0 || pr.units < (int64_t)below;
}

/*
 * Finds the cheapest entry r may evict among the EVICT_WINDOW slots from
 * r's home (FOR_BYTES: only entries owning bytes, 4 windows far, since
 * dropping any other gives nothing back). FOR_SLOT with an empty window
 * looks on to the first entry after it. Returns its slot, or SIZE_MAX with
 * *priced telling whether any candidate was seen (and refused by the
 * bound).
 */
static size_t cheapest(sl_store *s, const shard *sh, const store_ref *r,
                       int64_t now, int mode, price *best_pr, int *priced) {
  size_t cap = sh->cap, i = home_of(r->h, cap), best = SIZE_MAX;
  size_t window = mode == FOR_BYTES ? 4 * EVICT_WINDOW : EVICT_WINDOW;
  *priced = 0;
  for (size_t k = 0; k < cap && (k < window || (mode == FOR_SLOT && !*priced));
       k++, i = next_i(i, cap)) {
    if (!sh->ctrl[i] || is_own(sh, i, r)) continue;
    if (mode == FOR_BYTES && !store_payload_bytes(s, sh, i)) continue;
    price pr = price_of(s, sh, i, now);
    *priced = 1;
    if (affordable(r, pr) && (best == SIZE_MAX || cheaper(pr, *best_pr))) {
      *best_pr = pr;
      best = i;
    }
  }
  return best;
}

int store_evict(sl_store *s, shard *sh, const store_ref *r, int64_t now,
                int mode) {
  price pr = {0, 0, 0};
  int priced;
  size_t best = cheapest(s, sh, r, now, mode, &pr, &priced);
  if (best == SIZE_MAX) return priced ? SL_EFULL : SL_ENOMEM;
  store_erase(s, sh, best);
  if (pr.fresh_at <= now - s->grace) {
    sh->expirations++;
  } else {
    sh->evictions++;
    sh->evicted_units += (uint64_t)pr.units;
  }
  return 0;
}

/*
 * The bytes store_evict(FOR_BYTES) could give back from r's window: *all
 * of every entry owning some, *allowed of those r's policy may evict.
 */
static void reclaimable(sl_store *s, const shard *sh, const store_ref *r,
                        int64_t now, size_t *all, size_t *allowed) {
  size_t cap = sh->cap, i = home_of(r->h, cap);
  *all = *allowed = 0;
  for (size_t k = 0; k < cap && k < 4 * EVICT_WINDOW;
       k++, i = next_i(i, cap)) {
    if (!sh->ctrl[i] || is_own(sh, i, r)) continue;
    size_t b = store_payload_bytes(s, sh, i);
    if (!b) continue;
    *all += b;
    /* Pricing costs a call per entry: only a bound, or a lease set (which
       may be pinned), needs it here. */
    int lease = reg_get(s, CTRL_ID(sh->ctrl[i]))->pub.algo == SL_CONCURRENCY;
    if ((!r->p->evict_below && !lease) ||
        affordable(r, price_of(s, sh, i, now)))
      *allowed += b;
  }
}

void *store_alloc_evicting(sl_store *s, shard *sh, const store_ref *r,
                           int64_t now, size_t n, int *err) {
  *err = SL_ENOMEM;
  for (int tries = 0;; tries++) {
    int why = 0;
    void *p = store_budget_alloc(s, n, &why);
    if (p || why == ALLOC_FAILED) return p;
    if (tries == 0) {
      /* Evict only when that can make room: dropping keys and failing
         anyway would give their quota away for nothing. */
      size_t used = atomic_load_explicit(&s->bytes, memory_order_relaxed);
      size_t free_now = used < s->key_cap ? s->key_cap - used : 0;
      size_t all, allowed;
      reclaimable(s, sh, r, now, &all, &allowed);
      if (free_now + allowed < n + ALLOC_OVERHEAD) {
        if (free_now + all >= n + ALLOC_OVERHEAD) *err = SL_EFULL;
        return NULL;
      }
    }
    if (tries == 64) return NULL;
    int rc = store_evict(s, sh, r, now, FOR_BYTES);
    if (rc) {
      *err = rc;
      return NULL;
    }
  }
}
