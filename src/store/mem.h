/*
 * mem.h — the in-memory store as the limiter layer sees it.
 *
 * The store keeps one algo_state per (limiter id, key) in a sharded hash
 * table and runs the algorithm under the shard's lock, so a decision and its
 * charge are atomic. limiter.c hashes keys (store_ref_init), locks shards and
 * asks for decisions; it never touches table memory itself.
 */
#ifndef SLUICE_STORE_MEM_H
#define SLUICE_STORE_MEM_H

#include <stddef.h>
#include <stdint.h>

#include "../algo/algo.h"
#include "sluice.h"

/* One key of one limiter, hashed and routed to its shard. */
typedef struct store_ref {
  const algo_policy *p;
  uint16_t id; /* the limiter's id in this store */
  const uint8_t *key;
  size_t len; /* <= SL_KEY_MAX */
  uint64_t h; /* keyed hash of (id, key) */
  unsigned shard;
  uint64_t inl[2]; /* a key of <= 16 bytes, zero-padded, as slots hold it */
  uint64_t lease;  /* concurrency: the lease an allowed charge records
                      (store_lease_id; 0 until the caller sets it) */
} store_ref;

/* Hashes (id, key) with the store's secret key and fills *r. */
void store_ref_init(sl_store *s, store_ref *r, const algo_policy *p,
                    uint16_t id, const void *key, size_t len);

/* Starts loading the table lines r will touch (a hint; no lock needed). */
void store_prefetch(sl_store *s, const store_ref *r);

void store_lock(sl_store *s, unsigned shard);
void store_unlock(sl_store *s, unsigned shard);

/* How to take back one charge (store_undo_locked). */
typedef struct store_undo {
  enum { UNDO_NONE, UNDO_RESTORE, UNDO_REMOVE, UNDO_LOG, UNDO_LEASE } kind;
  algo_state old; /* UNDO_RESTORE: the state before */
  int64_t cost;   /* UNDO_LOG: the cost logged */
  uint64_t lease; /* UNDO_LEASE: the lease recorded */
} store_undo;

/*
 * Under the lock of r->shard: decides a request of `cost` (0 <= cost <= B)
 * at now. With charge = 1 an allowed request is recorded (inserting the key,
 * growing or evicting as needed); with charge = 0 nothing is recorded.
 * When undo is not NULL it receives what store_undo_locked needs to take
 * the charge back. Returns 0 with *d filled, or SL_ENOMEM (nothing charged).
 */
int store_decide_locked(sl_store *s, const store_ref *r, int64_t cost,
                        int64_t now, int charge, sl_decision *d,
                        store_undo *undo);

/*
 * Under the same lock, takes back a charge recorded in *undo (if the key
 * has been evicted since, there is nothing left to take back). Never fails.
 */
void store_undo_locked(sl_store *s, const store_ref *r,
                       const store_undo *undo);

/* store_decide_locked with charge = 1 between lock and unlock. */
int store_take(sl_store *s, const store_ref *r, int64_t cost, int64_t now,
               sl_decision *d);

/* A forced charge (algo_ops.force) between lock and unlock: *level gets
   the signed remaining after it. Returns 0 or SL_ENOMEM (nothing charged). */
int store_force(sl_store *s, const store_ref *r, int64_t cost, int64_t now,
                int64_t *level);

/* store_force's cost is what brings r's level down to `target`, if it is
   above: one lookup where reading the level then charging would take two.
   *level gets the signed remaining after it. */
int store_force_to(sl_store *s, const store_ref *r, int64_t target,
                   int64_t now, int64_t *level);

/* A new lease id for this store: never 0, unique, unguessable (lease.c). */
uint64_t store_lease_id(sl_store *s);

/*
 * A lease operation (LSET_RELEASE, LSET_RENEW: algo.h) on r's lease
 * r->lease at now, under the shard's lock; a set left with no live lease
 * is dropped. *d (may be NULL) gets the key's figures after it, as a peek.
 * Returns 1 when the lease was live (and is released or renewed), 0 when
 * not (nothing changes).
 */
int store_lease_op(sl_store *s, const store_ref *r, int op, int64_t now,
                   sl_decision *d);

/* Drops r's state. Returns 1 if it existed, 0 if not. */
int store_remove(sl_store *s, const store_ref *r);

/*
 * Limiter ids: a store knows the policy behind every id, so expiry and
 * eviction can judge any entry. store_register gives *p (which must outlive
 * the registration) an id; store_unregister drops all of the id's keys and
 * frees the id.
 */
int store_register(sl_store *s, const algo_policy *p, uint16_t *id);
void store_unregister(sl_store *s, uint16_t id);
/* store_unregister for n ids at once: one walk over the store, not n. */
void store_unregister_many(sl_store *s, const uint16_t *ids, size_t n);

/* Allocates / frees n bytes of bookkeeping against the store's budget. */
void *store_alloc(sl_store *s, size_t n);
void store_free(sl_store *s, void *p, size_t n);

unsigned store_nshards(const sl_store *s);

#endif /* SLUICE_STORE_MEM_H */
