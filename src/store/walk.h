/*
 * walk.h — the one hook mem.c gives the store's whole-table readers
 * (snapshot.c: the state file, and the count of keys per limiter): a walk
 * over one shard's entries under its lock. Kept apart from mem.h, which is
 * the store as the limiters see it; nothing on the request path uses it.
 * (Restoring a saved state needs no hook of its own: snapshot.c inserts a
 * key with a charge and sets its state through store_undo_locked.)
 */
#ifndef SLUICE_STORE_WALK_H
#define SLUICE_STORE_WALK_H

#include "mem.h"

/* One entry as a walk sees it: valid only during the callback. */
typedef struct store_entry {
  uint16_t id;             /* its limiter's id */
  const algo_policy *p;    /* that limiter's policy */
  const uint8_t *key;
  size_t len;
  const algo_state *st;    /* sliding_log: st->a points at its slog */
} store_entry;

typedef void (*store_walk_fn)(void *ud, const store_entry *e);

/*
 * Takes shard n's lock, calls fn for every entry of it, and unlocks. fn
 * must only copy what it needs: every decision on that shard waits.
 */
void store_walk_shard(sl_store *s, unsigned n, store_walk_fn fn, void *ud);

#endif /* SLUICE_STORE_WALK_H */
