/*
 * lease.c — the store's side of concurrency policies: lease ids, and the
 * lease sets (algo.h's lset) it allocates, grows and edits for them.
 *
 * A lease id must be unique within the store and unguessable by another
 * client (holding one must not let anyone release someone else's). It is
 * SipHash-2-4 of a 64-bit counter under a random key drawn when the store
 * is made: a pseudorandom permutation's output, so distinct counters never
 * collide, and nobody without the key can predict one. (libsodium's
 * randombytes_buf would do too, but it is a system call, ~2 us: a hundred
 * times the cost of a decision.)
 *
 * A key's one lease is held inline in its entry (algo.h); from two live
 * leases on, in a lease set, a block outside the table like a
 * sliding_log's log: it counts against the memory cap, grows by doubling
 * up to LIMIT entries, halves when mostly empty, and goes back to inline
 * when one lease is left live. A key holding a live lease is never
 * dropped: its state is not fresh before its last lease expires, and
 * evict.c will not take it.
 */
#include "table.h"

uint64_t store_lease_id(sl_store *s) {
  uint64_t n = atomic_fetch_add_explicit(&s->lease_next, 1,
                                         memory_order_relaxed);
  uint64_t id;
  for (;;) {
    crypto_shorthash((unsigned char *)&id, (const unsigned char *)&n, sizeof n,
                     s->lease_key);
    if (id) return id; /* 0 means "no lease": take the next counter */
    n = atomic_fetch_add_explicit(&s->lease_next, 1, memory_order_relaxed);
  }
}

/* The capacity a set holding `need` entries should have, from cap. */
static uint32_t new_cap(const algo_policy *p, uint32_t cap, uint32_t need) {
  uint64_t n = need > cap ? (uint64_t)cap * 2 : cap / 2;
  if (n < 4) n = 4;
  if (n > (uint64_t)p->L) n = (uint64_t)p->L;
  if (n < need) n = need;
  return (uint32_t)n;
}

/*
 * A shard keeps one small set (at most SPARE_CAP entries) when it is
 * given back: a key that goes between one lease and two (a request in
 * flight beside a long one, the usual acquire+release on a key already
 * held) then allocates nothing either way. It stays counted in the
 * budget: at most one block a shard.
 */
#define SPARE_CAP 4

/* Gives st's set (if any) back: st is about to hold its leases inline,
   or none. */
static void drop_set(sl_store *s, shard *sh, const algo_state *st) {
  lset *set = lset_of(st);
  if (!set) return;
  if (set->cap <= SPARE_CAP && !sh->lease_spare)
    sh->lease_spare = set;
  else
    store_budget_free(s, set, lset_bytes(set->cap));
}

void store_lease_spare_free(sl_store *s, shard *sh) {
  lset *spare = sh->lease_spare;
  if (spare) store_budget_free(s, spare, lset_bytes(spare->cap));
  sh->lease_spare = NULL;
}

int store_lease_charge(sl_store *s, shard *sh, const store_ref *r, long i,
                       int64_t now, int *inserted) {
  const algo_policy *p = r->p;
  algo_state one = lease_one(r->lease, now + p->W);
  *inserted = 0;
  uint32_t live = i >= 0 ? conc_live(&sh->slots[i].st, now) : 0;
  if (live == 0) { /* the new lease alone: inline, no block */
    if (i >= 0) {
      drop_set(s, sh, &sh->slots[i].st);
      sh->slots[i].st = one;
      return 0;
    }
    i = store_insert(s, sh, r, now, &one);
    if (i < 0) return (int)i;
    *inserted = 1;
    return 0;
  }
  lset *set = lset_of(&sh->slots[i].st);
  uint32_t need = live + 1, cap = set ? set->cap : 1; /* inline: room for 1 */
  int grow = need > cap;
  if (grow || (cap > 16 && need * 4 <= cap)) {
    uint32_t ncap = new_cap(p, cap, need);
    size_t bytes = lset_bytes(ncap);
    int err = SL_ENOMEM;
    size_t count = sh->count;
    void *mem = NULL;
    lset *spare = sh->lease_spare;
    if (grow && spare && ncap <= spare->cap) {
      mem = spare; /* (a cap above the policy's limit holds no more) */
      ncap = spare->cap;
      bytes = lset_bytes(ncap);
      sh->lease_spare = NULL;
    } else {
      mem = grow ? store_alloc_evicting(s, sh, r, now, bytes, &err)
                 : store_budget_alloc(s, bytes, NULL);
    }
    if (!mem && grow) return err;
    if (mem) {
      lset *nset = lset_init(mem, ncap);
      algo_state st = {(int64_t)(uintptr_t)nset, 0};
      if (sh->count != count) i = store_find(sh, r); /* eviction moved it? */
      if (i >= 0) {
        algo_state *old = &sh->slots[i].st;
        if (lset_of(old))
          lset_move(nset, lset_of(old), now);
        else if (conc_live(old, now))
          lset_from_one(nset, old);
        drop_set(s, sh, old);
        *old = st;
      } else {
        i = store_insert(s, sh, r, now, &st);
        if (i < 0) {
          store_budget_free(s, nset, bytes);
          return (int)i;
        }
        *inserted = 1;
      }
    }
  }
  lset_commit(p, lset_of(&sh->slots[i].st), now, r->lease);
  return 0;
}

int store_lease_op(sl_store *s, const store_ref *r, int op, int64_t now,
                   sl_decision *d) {
  const algo_policy *p = r->p;
  shard *sh = &s->shards[r->shard];
  store_lock(s, r->shard);
  long i = store_find(sh, r);
  algo_state *st = i >= 0 ? &sh->slots[i].st : NULL;
  int done = st && conc_op(p, st, op, r->lease, now);
  if (d) {
    p->ops->decide(p, st, now, 0, d, NULL);
    if (done && op == LSET_RENEW) d->lease = r->lease;
  }
  algo_state one;
  /* A set with no live lease left is fresh: it goes now, as expiry would
     drop it (a release of the last lease frees its memory at once). A
     set down to one live lease holds it inline again, its block freed:
     the next decision on the key reads one cache line fewer. */
  if (st && p->ops->fresh_at(p, st) <= now) {
    store_erase(s, sh, (size_t)i);
    sh->expirations++;
  } else if (done && lset_of(st) && lset_only(lset_of(st), now, &one)) {
    drop_set(s, sh, st);
    *st = one;
  }
  store_unlock(s, r->shard);
  return done;
}
