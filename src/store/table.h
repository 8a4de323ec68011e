/*
 * table.h — the in-memory store's layout, shared by the files that work on
 * its tables: mem.c (lookup, insert, growth, expiry, the public API) and
 * evict.c (what to drop when the memory cap binds). Nothing outside
 * src/store/ includes it; the limiter layer sees only mem.h.
 *
 * A shard is an open-addressing table with linear probing over two arrays:
 * 32-byte slots (16 key bytes inline + the 16-byte algo_state) and one
 * 32-bit control word per slot: probe distance + 1 (0 = empty, saturating
 * at 255), key length (0xff = long key) and the limiter id. Every function
 * here that takes a shard expects its lock held.
 */
#ifndef SLUICE_STORE_TABLE_H
#define SLUICE_STORE_TABLE_H

#include <pthread.h>
#include <sodium.h>
#include <stdatomic.h>
#include <string.h>

#include "mem.h"

#define KEY_INLINE 16
#define LEN_LONG 0xffu
#define DIST_SAT 255u
#define MIN_CAP 32
#define EVICT_WINDOW 16
#define SWEEP_ON_INSERT 2
#define ALLOC_OVERHEAD 16 /* what malloc keeps per block, roughly */
#define MIN_SHARD_BYTES 8192
#define LIMITER_ROOM ((size_t)256 << 10) /* the most kept for limiters */
#define DEFAULT_SHARDS 64
#define REG_CHUNK 256

typedef struct slot {
  union {
    uint8_t bytes[KEY_INLINE];
    struct {
      uint8_t *ptr; /* [uint16_t len][len bytes] */
      uint64_t h;
    } big;
  } key;
  algo_state st;
} slot;

_Static_assert(sizeof(slot) == 32, "a slot is half a cache line");

typedef struct shard {
  atomic_int lock;
  size_t cap, count, cursor;
  size_t min_cap; /* its size at creation (expected_keys): never smaller */
  slot *slots;
  uint32_t *ctrl;
  uint64_t expirations, evictions;
  uint64_t evicted_units; /* what its evictions gave back (algo used) */
  void *lease_spare; /* a freed lease set of the least size, still
                        counted, for the next one (lease.c); NULL */
  /* Copies of slots/ctrl/cap for lock-free prefetch hints. */
  _Atomic uintptr_t hint_slots, hint_ctrl;
  atomic_size_t hint_cap;
} __attribute__((aligned(64))) shard;

typedef _Atomic(const algo_policy *) reg_entry;

struct sl_store {
  sl_alloc_fn alloc;
  void *alloc_ud;
  size_t max_memory;
  size_t key_cap; /* what keys may take: the cap less the limiters' room */
  atomic_size_t bytes;
  atomic_size_t table_bytes; /* of bytes: the tables */
  size_t table_cap;          /* the most tables may hold: 7/8 of the cap */
  int64_t grace;             /* expiry trails freshness by this (ns) */
  unsigned nshards;
  uint8_t hkey[crypto_shorthash_KEYBYTES];
  uint8_t lease_key[crypto_shorthash_KEYBYTES]; /* lease ids: random always */
  atomic_uint_fast64_t lease_next;              /* ... of this counter */
  shard *shards;
  void *shards_raw; /* the allocation shards is aligned within */
  atomic_uint sweep_next;
  pthread_mutex_t reg_lock;
  unsigned nlimiters;
  unsigned reg_hint; /* where the search for a free id starts */
  _Atomic(reg_entry *) reg[65536 / REG_CHUNK];
};

/* ---- slots and control words ---- */

static inline size_t home_of(uint64_t h, size_t cap) {
  return (size_t)(((unsigned __int128)h * cap) >> 64);
}

static inline size_t next_i(size_t i, size_t cap) {
  return i + 1 == cap ? 0 : i + 1;
}

static inline uint32_t len_byte(size_t len) {
  return len <= KEY_INLINE ? (uint32_t)len : LEN_LONG;
}

static inline uint32_t ctrl_make(size_t dist, uint32_t lenb, uint16_t id) {
  uint32_t d = dist + 1 < DIST_SAT ? (uint32_t)dist + 1 : DIST_SAT;
  return d | lenb << 8 | (uint32_t)id << 16;
}

#define CTRL_DIST(c) ((c) & 0xffu)
#define CTRL_LEN(c) ((c) >> 8 & 0xffu)
#define CTRL_ID(c) ((uint16_t)((c) >> 16))

/* Whether slot sl (key length byte lenb) holds r's key bytes. */
static inline int key_eq(const slot *sl, uint32_t lenb, const store_ref *r) {
  if (lenb != LEN_LONG) { /* two words: inline keys are zero-padded */
    uint64_t w[2];
    memcpy(w, sl->key.bytes, sizeof w);
    return ((w[0] ^ r->inl[0]) | (w[1] ^ r->inl[1])) == 0;
  }
  const uint8_t *b = sl->key.big.ptr;
  uint16_t len;
  memcpy(&len, b, sizeof len);
  return sl->key.big.h == r->h && len == r->len &&
         memcmp(b + sizeof len, r->key, r->len) == 0;
}

/* Whether slot i of sh is r's own entry. */
static inline int is_own(const shard *sh, size_t i, const store_ref *r) {
  uint32_t c = sh->ctrl[i], lenb = len_byte(r->len);
  return CTRL_ID(c) == r->id && CTRL_LEN(c) == lenb &&
         key_eq(&sh->slots[i], lenb, r);
}

/* The policy registered under id (the store knows every entry's). */
static inline const algo_policy *reg_get(sl_store *s, uint16_t id) {
  reg_entry *chunk =
      atomic_load_explicit(&s->reg[id / REG_CHUNK], memory_order_acquire);
  return atomic_load_explicit(&chunk[id % REG_CHUNK], memory_order_acquire);
}

/* ---- mem.c's helpers for evict.c ---- */

/* Why an allocation failed: the cap, or the allocator itself. */
enum { OVER_BUDGET = 1, ALLOC_FAILED = 2 };

/*
 * Reserves and allocates n bytes against the budget. NULL when over budget
 * or out of memory, with the reason in *why (may be NULL).
 */
void *store_budget_alloc(sl_store *s, size_t n, int *why);

/* What dropping slot i gives back to the budget (a long key, a log). */
size_t store_payload_bytes(sl_store *s, const shard *sh, size_t i);

/* Removes slot i (freeing what it owns), shifting the rest of its probe
   run back: a later entry may move into i. */
void store_erase(sl_store *s, shard *sh, size_t i);

/* The slot holding r in sh, or -1 (mem.c). */
long store_find(const shard *sh, const store_ref *r);
/* Inserts r with state *st: its slot, or SL_ENOMEM / SL_EFULL (mem.c). */
long store_insert(sl_store *s, shard *sh, const store_ref *r, int64_t now,
                  const algo_state *st);
/* Frees n bytes reserved by store_budget_alloc (mem.c). */
void store_budget_free(sl_store *s, void *p, size_t n);

/* ---- lease.c: concurrency's lease sets ---- */

/*
 * Records r's allowed acquire (lease r->lease) in slot i (-1: a new key),
 * growing its lease set first when it is full (doubling, up to LIMIT) or
 * shrinking one mostly empty. *inserted says whether the key was new.
 * Returns 0, or SL_ENOMEM / SL_EFULL with nothing recorded.
 */
/* Gives sh's spare lease set back to the budget (the store's end). */
void store_lease_spare_free(sl_store *s, shard *sh);
int store_lease_charge(sl_store *s, shard *sh, const store_ref *r, long i,
                       int64_t now, int *inserted);

/* ---- evict.c: room at the cap ---- */

enum { FOR_SLOT = 0, FOR_BYTES = 1 };

/*
 * Drops one entry near r's home to make room for r (never r's own entry):
 * the one whose eviction gives back least, see evict.c. mode FOR_SLOT: any
 * entry; FOR_BYTES: only one that owns bytes outside the table. Returns 0,
 * SL_EFULL when every candidate would give back at least r's policy's
 * evict_below (nothing dropped), or SL_ENOMEM when there is no candidate.
 */
int store_evict(sl_store *s, shard *sh, const store_ref *r, int64_t now,
                int mode);

/*
 * Allocates n bytes for r's entry. When the cap is what stands in the way
 * and evicting entries of the shard that own bytes (those r's policy may
 * evict) can make room, evicts them, cheapest first; otherwise evicts
 * nothing. NULL when there is no room, with *err SL_EFULL when only
 * entries evict_below forbids could have made it, else SL_ENOMEM.
 */
void *store_alloc_evicting(sl_store *s, shard *sh, const store_ref *r,
                           int64_t now, size_t n, int *err);

#endif /* SLUICE_STORE_TABLE_H */
