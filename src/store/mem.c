/*
 * mem.c — the in-memory store: a sharded hash table of per-key states with
 * idle expiry and a hard memory cap.
 *
 * Layout (table.h). Each shard is an open-addressing table with linear
 * probing over two arrays: 32-byte slots (16 key bytes inline + the 16-byte
 * algo_state) and one 32-bit control word per slot: probe distance + 1
 * (0 = empty, saturating at 255), key length (0xff = long key) and the
 * limiter id. A lookup scans control words from the key's home and
 * compares key bytes only where distance, length and id all match; a key
 * longer than 16 bytes lives in its own block ({ptr, hash} in the slot). So a key of up to 16
 * bytes costs 36 bytes of table; the table grows by 1/8 at a load of 7/8,
 * which keeps the load between 0.78 and 0.875: 41 to 46 bytes per key.
 * Deletion shifts the rest of the cluster back (no tombstones); the stored
 * distance gives each slot's home without rehashing.
 *
 * Hashing. SipHash-2-4 (libsodium) under a random 128-bit key per store:
 * nobody outside can aim keys at one probe run (hash flooding). The low bits
 * of the hash pick the shard, the high bits the home slot.
 *
 * Expiry, the Redis way. A key whose state is back to fresh carries no
 * information, so it is dropped: lazily when touched, by a bounded sweep
 * (sl_store_expire, plus two slots examined on every insert), and first of
 * all when room is needed.
 *
 * The memory cap. Every byte the store allocates (tables, long keys, logs,
 * its own structs, plus a per-allocation overhead estimate) is reserved
 * against one atomic budget before it is allocated, so the total never
 * exceeds max_memory, even during a table's growth (old and new tables both
 * count). Tables together may take at most 7/8 of the cap: the rest stays
 * for what grows per key (logs, long keys) and for limiters, and a table
 * left mostly empty (after a flood has expired) shrinks back. What keys
 * allocate may not take the top 32nd of the cap (at most LIMITER_ROOM):
 * that room is the limiters', so a key flood that fills the store never
 * keeps a new rule or ad-hoc policy out. When a table
 * cannot grow, inserting evicts the entry among the 16 slots from the new
 * key's home whose reset gives back least quota (evict.c). Evicting for
 * bytes (a log, a long key) happens only when it can free enough; an
 * allocator failure evicts nothing.
 *
 * Expiry trails freshness by a grace period (1 s by default): a state is
 * dropped only once it has been fresh for that long, so a request stamped a
 * little earlier than another thread's `now` (clock skew between threads)
 * is never decided on a state that was dropped too soon.
 */
#include "table.h"
#include "walk.h"

#include <sched.h>
#include <stdlib.h>

/* ---- allocation against the budget ---- */

static void *default_alloc(void *ud, void *ptr, size_t old_size,
                           size_t new_size) {
  (void)ud;
  (void)old_size;
  if (new_size == 0) {
    free(ptr);
    return NULL;
  }
  return realloc(ptr, new_size);
}

static void *s_alloc(sl_store *s, size_t n) {
  return s->alloc(s->alloc_ud, NULL, 0, n);
}

static void s_free(sl_store *s, void *p, size_t n) {
  if (p) s->alloc(s->alloc_ud, p, n, 0);
}

/* Claims n bytes of the budget, up to limit (the cap, or keys' part of
   it): 0, or -1 when that would pass it. */
static int reserve(sl_store *s, size_t n, size_t limit) {
  size_t cur = atomic_load_explicit(&s->bytes, memory_order_relaxed);
  do {
    if (n > limit || cur > limit - n) return -1;
  } while (!atomic_compare_exchange_weak_explicit(
      &s->bytes, &cur, cur + n, memory_order_relaxed, memory_order_relaxed));
  return 0;
}

static void release(sl_store *s, size_t n) {
  atomic_fetch_sub_explicit(&s->bytes, n, memory_order_relaxed);
}

/* n bytes against the budget, up to limit; *why says what failed. */
static void *alloc_upto(sl_store *s, size_t n, size_t limit, int *why) {
  int dummy;
  if (!why) why = &dummy;
  if (n > SIZE_MAX - ALLOC_OVERHEAD || reserve(s, n + ALLOC_OVERHEAD, limit)) {
    *why = OVER_BUDGET;
    return NULL;
  }
  void *p = s_alloc(s, n);
  if (!p) {
    release(s, n + ALLOC_OVERHEAD);
    *why = ALLOC_FAILED;
  }
  return p;
}

/* (table.h) What keys allocate (tables, long keys, logs): never the
   limiters' room at the top of the cap. */
void *store_budget_alloc(sl_store *s, size_t n, int *why) {
  return alloc_upto(s, n, s->key_cap, why);
}

static void *budget_alloc(sl_store *s, size_t n) {
  return store_budget_alloc(s, n, NULL);
}

/* What limiters allocate (their structs, the registry's chunks): up to the
   cap itself, so that a flood of keys, which may fill keys' part, never
   keeps a new rule or ad-hoc policy out. */
static void *limiter_alloc(sl_store *s, size_t n) {
  return alloc_upto(s, n, s->max_memory, NULL);
}

static void budget_free(sl_store *s, void *p, size_t n) {
  if (!p) return;
  s_free(s, p, n);
  release(s, n + ALLOC_OVERHEAD);
}

void store_budget_free(sl_store *s, void *p, size_t n) { budget_free(s, p, n); }

/* Bytes of a table of cap slots; SIZE_MAX when that overflows. */
static size_t table_size(size_t cap) {
  size_t per = sizeof(slot) + sizeof(uint32_t);
  return cap > SIZE_MAX / per ? SIZE_MAX : cap * per;
}

/* ---- locks: test-and-test-and-set, yielding when the holder is off-CPU ---- */

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

static void spin_lock(atomic_int *l) {
  for (;;) {
    if (!atomic_exchange_explicit(l, 1, memory_order_acquire)) return;
    unsigned spins = 0;
    while (atomic_load_explicit(l, memory_order_relaxed)) {
      if (++spins < 100) {
        cpu_relax();
      } else {
        sched_yield();
        spins = 0;
      }
    }
  }
}

static void spin_unlock(atomic_int *l) {
  atomic_store_explicit(l, 0, memory_order_release);
}

void store_lock(sl_store *s, unsigned n) {
  spin_lock(&s->shards[n].lock);
}

void store_unlock(sl_store *s, unsigned n) {
  spin_unlock(&s->shards[n].lock);
}

/* ---- hashing and control words ---- */

static uint64_t fmix64(uint64_t k) {
  k ^= k >> 33;
  k *= UINT64_C(0xff51afd7ed558ccd);
  k ^= k >> 33;
  k *= UINT64_C(0xc4ceb9fe1a85ec53);
  k ^= k >> 33;
  return k;
}

static uint64_t hash_key(const sl_store *s, uint16_t id, const void *key,
                         size_t len) {
  uint64_t h;
  crypto_shorthash((unsigned char *)&h, len ? key : (const void *)"", len,
                   s->hkey);
  return fmix64(h ^ ((uint64_t)id + 1) * UINT64_C(0x9e3779b97f4a7c15));
}

void store_ref_init(sl_store *s, store_ref *r, const algo_policy *p,
                    uint16_t id, const void *key, size_t len) {
  r->p = p;
  r->id = id;
  r->key = key;
  r->len = len;
  r->h = hash_key(s, id, key, len);
  r->shard = (unsigned)(r->h & (s->nshards - 1));
  r->inl[0] = r->inl[1] = 0;
  r->lease = 0;
  if (len && len <= KEY_INLINE) memcpy(r->inl, key, len);
}

/* The full hash of the entry in slot i (for rehashing). */
static uint64_t slot_hash(const sl_store *s, const shard *sh, size_t i) {
  uint32_t c = sh->ctrl[i];
  const slot *sl = &sh->slots[i];
  if (CTRL_LEN(c) == LEN_LONG) return sl->key.big.h;
  return hash_key(s, CTRL_ID(c), sl->key.bytes, CTRL_LEN(c));
}

/* The home index of the entry in slot i. */
static size_t slot_home(const sl_store *s, const shard *sh, size_t i) {
  uint32_t d = CTRL_DIST(sh->ctrl[i]);
  if (d < DIST_SAT) return (i + sh->cap - (d - 1)) % sh->cap;
  return home_of(slot_hash(s, sh, i), sh->cap);
}

/* The slot holding r, or -1. */
static long find(const shard *sh, const store_ref *r) {
  return store_find(sh, r);
}

long store_find(const shard *sh, const store_ref *r) {
  if (sh->count == 0) return -1;
  uint32_t lenb = len_byte(r->len);
  size_t cap = sh->cap, i = home_of(r->h, cap);
  for (size_t k = 0;; k++) {
    uint32_t c = sh->ctrl[i];
    if (!c) return -1;
    if (c == ctrl_make(k, lenb, r->id) && key_eq(&sh->slots[i], lenb, r))
      return (long)i;
    i = next_i(i, cap);
  }
}

/* Claims the first empty slot from h's home and returns it. */
static size_t place(shard *sh, uint64_t h, uint32_t lenb, uint16_t id) {
  size_t i = home_of(h, sh->cap), k = 0;
  while (sh->ctrl[i]) {
    i = next_i(i, sh->cap);
    k++;
  }
  sh->ctrl[i] = ctrl_make(k, lenb, id);
  sh->count++;
  return i;
}

/* ---- removing entries ---- */

/* The blocks slot i owns outside the table: a long key, a log. */
typedef struct payload {
  void *key, *log;
  size_t key_size, log_size; /* as allocated */
} payload;

static payload payload_of(sl_store *s, const shard *sh, size_t i) {
  payload pl = {NULL, NULL, 0, 0};
  uint32_t c = sh->ctrl[i];
  const slot *sl = &sh->slots[i];
  if (CTRL_LEN(c) == LEN_LONG) {
    uint16_t len;
    memcpy(&len, sl->key.big.ptr, sizeof len);
    pl.key = sl->key.big.ptr;
    pl.key_size = sizeof len + len;
  }
  sl_algo algo = reg_get(s, CTRL_ID(c))->pub.algo;
  if (algo == SL_SLIDING_LOG && sl->st.a) {
    slog *log = slog_of(&sl->st);
    pl.log = log;
    pl.log_size = slog_bytes(log->cap);
  } else if (algo == SL_CONCURRENCY && lset_of(&sl->st)) {
    lset *set = lset_of(&sl->st);
    pl.log = set;
    pl.log_size = lset_bytes(set->cap);
  }
  return pl;
}

/* What dropping slot i gives back to the budget. */
size_t store_payload_bytes(sl_store *s, const shard *sh, size_t i) {
  payload pl = payload_of(s, sh, i);
  return (pl.key ? pl.key_size + ALLOC_OVERHEAD : 0) +
         (pl.log ? pl.log_size + ALLOC_OVERHEAD : 0);
}

static void free_payload(sl_store *s, shard *sh, size_t i) {
  payload pl = payload_of(s, sh, i);
  budget_free(s, pl.key, pl.key_size);
  budget_free(s, pl.log, pl.log_size);
}

/* Removes slot i, shifting the rest of its cluster back (Knuth's R). */
void store_erase(sl_store *s, shard *sh, size_t i) {
  free_payload(s, sh, i);
  sh->count--;
  size_t cap = sh->cap, j = i;
  for (;;) {
    j = next_i(j, cap);
    uint32_t c = sh->ctrl[j];
    if (!c) break;
    size_t h = slot_home(s, sh, j);
    size_t dj = (j + cap - h) % cap, di = (i + cap - h) % cap;
    if (di < dj) { /* i lies between j's home and j: move j back to i */
      sh->slots[i] = sh->slots[j];
      sh->ctrl[i] = ctrl_make(di, CTRL_LEN(c), CTRL_ID(c));
      i = j;
    }
  }
  sh->ctrl[i] = 0;
}

static int64_t slot_fresh_at(sl_store *s, const shard *sh, size_t i) {
  const algo_policy *p = reg_get(s, CTRL_ID(sh->ctrl[i]));
  return p->ops->fresh_at(p, &sh->slots[i].st);
}

static int resize(sl_store *s, shard *sh, size_t ncap);

/*
 * Examines up to `budget` slots from the shard's cursor, at most one pass
 * over the table, and drops entries that have been fresh for the grace
 * period at now. A table left under 1/4 full shrinks to half full. Returns
 * the number dropped.
 */
static size_t sweep(sl_store *s, shard *sh, int64_t now, size_t budget) {
  size_t dropped = 0, passed = 0;
  while (budget-- && passed < sh->cap && sh->count) {
    size_t i = sh->cursor < sh->cap ? sh->cursor : 0;
    if (sh->ctrl[i] && slot_fresh_at(s, sh, i) <= now - s->grace) {
      store_erase(s, sh, i); /* may pull a later entry into i: look again */
      sh->expirations++;
      dropped++;
      sh->cursor = i;
    } else {
      sh->cursor = i + 1;
      passed++;
    }
  }
  if (sh->cap > sh->min_cap && sh->count * 4 < sh->cap) {
    size_t ncap = sh->count * 2 + 1;
    resize(s, sh, ncap > sh->min_cap ? ncap : sh->min_cap); /* or later */
  }
  return dropped;
}

/* ---- growth ---- */

static void set_hints(shard *sh) {
  atomic_store_explicit(&sh->hint_slots, (uintptr_t)sh->slots,
                        memory_order_relaxed);
  atomic_store_explicit(&sh->hint_ctrl, (uintptr_t)sh->ctrl,
                        memory_order_relaxed);
  atomic_store_explicit(&sh->hint_cap, sh->cap, memory_order_relaxed);
}

/* Moves the tables' share of the budget from `from` to `to` bytes; growth
   fails (-1) past table_cap. */
static int table_budget(sl_store *s, size_t from, size_t to) {
  size_t cur = atomic_load_explicit(&s->table_bytes, memory_order_relaxed);
  do {
    if (to > from && cur - from + to > s->table_cap) return -1;
  } while (!atomic_compare_exchange_weak_explicit(
      &s->table_bytes, &cur, cur - from + to, memory_order_relaxed,
      memory_order_relaxed));
  return 0;
}

/*
 * Moves the shard into a table of ncap slots (bigger or smaller). 0, or
 * OVER_BUDGET / ALLOC_FAILED with the shard unchanged.
 */
static int resize(sl_store *s, shard *sh, size_t ncap) {
  int why = 0;
  size_t from = sh->cap ? table_size(sh->cap) : 0, to = table_size(ncap);
  if (table_budget(s, from, to)) return OVER_BUDGET;
  slot *ns = store_budget_alloc(s, to, &why);
  if (!ns) {
    table_budget(s, to, from);
    return why;
  }
  uint32_t *nc = (uint32_t *)(ns + ncap);
  memset(nc, 0, ncap * sizeof *nc);
  for (size_t i = 0; i < sh->cap; i++) {
    uint32_t c = sh->ctrl[i];
    if (!c) continue;
    size_t j = home_of(slot_hash(s, sh, i), ncap), k = 0;
    while (nc[j]) {
      j = next_i(j, ncap);
      k++;
    }
    nc[j] = ctrl_make(k, CTRL_LEN(c), CTRL_ID(c));
    ns[j] = sh->slots[i];
  }
  budget_free(s, sh->slots, table_size(sh->cap));
  sh->slots = ns;
  sh->ctrl = nc;
  sh->cap = ncap;
  sh->cursor = 0;
  set_hints(sh);
  return 0;
}

static int over_load(size_t count, size_t cap) { return count * 8 > cap * 7; }

/*
 * Inserts r with state *st and returns its slot, or SL_ENOMEM. Makes room
 * first: a little sweeping, then growth, and eviction when growth would pass
 * the cap.
 */
static long insert(sl_store *s, shard *sh, const store_ref *r, int64_t now,
                   const algo_state *st) {
  return store_insert(s, sh, r, now, st);
}

long store_insert(sl_store *s, shard *sh, const store_ref *r, int64_t now,
                  const algo_state *st) {
  sweep(s, sh, now, SWEEP_ON_INSERT);
  uint32_t lenb = len_byte(r->len);
  uint8_t *big = NULL;
  if (lenb == LEN_LONG) {
    uint16_t len = (uint16_t)r->len;
    int err;
    big = store_alloc_evicting(s, sh, r, now, sizeof len + r->len, &err);
    if (!big) return err;
    memcpy(big, &len, sizeof len);
    memcpy(big + sizeof len, r->key, r->len);
  }
  if (over_load(sh->count + 1, sh->cap)) {
    /* Grow; at the cap, make a slot by eviction instead. */
    int why = resize(s, sh, sh->cap + sh->cap / 8);
    int rc = why == OVER_BUDGET ? store_evict(s, sh, r, now, FOR_SLOT)
             : why              ? SL_ENOMEM
                                : 0;
    if (rc) {
      if (big) budget_free(s, big, sizeof(uint16_t) + r->len);
      return rc;
    }
  }
  size_t i = place(sh, r->h, lenb, r->id);
  slot *sl = &sh->slots[i];
  if (big) {
    sl->key.big.ptr = big;
    sl->key.big.h = r->h;
  } else {
    memcpy(sl->key.bytes, r->inl, KEY_INLINE);
  }
  sl->st = *st;
  return (long)i;
}

/* ---- sliding_log's blocks ---- */

/*
 * Records an allowed sliding_log request, resizing its log block first when
 * it is full (doubling) or mostly empty (halving; skipped if that allocation
 * fails, since the old block still fits). *inserted says whether the key
 * was new.
 */
static int log_charge(sl_store *s, shard *sh, const store_ref *r, long i,
                      int64_t now, int64_t cost, int *inserted) {
  const algo_policy *p = r->p;
  slog *log = i >= 0 ? slog_of(&sh->slots[i].st) : NULL;
  uint64_t need = slog_needed(p, log, now);
  uint64_t cap = log ? log->cap : 0;
  int grow = need > cap;
  *inserted = 0;
  if (grow || (cap > 16 && need * 4 <= cap)) {
    /* Grow by doubling, shrink by half, never past LIMIT entries, unless
       forced charges (a debt: more than LIMIT live) need more: then by
       half again each time, so that a run of them stays linear. */
    uint64_t ncap = grow ? (cap * 2 > need ? cap * 2 : need) : cap / 2;
    uint64_t most = need > (uint64_t)p->L ? need + need / 2 : (uint64_t)p->L;
    if (most > UINT32_MAX) most = UINT32_MAX;
    if (ncap < 4) ncap = 4;
    if (ncap > most) ncap = most;
    if (ncap < need) ncap = need;
    size_t bytes = slog_bytes((uint32_t)ncap);
    int err = SL_ENOMEM;
    void *mem = grow ? store_alloc_evicting(s, sh, r, now, bytes, &err)
                     : budget_alloc(s, bytes);
    if (!mem && grow) return err;
    if (mem) {
      slog *nlog = slog_init(mem, (uint32_t)ncap);
      algo_state st = {(int64_t)(uintptr_t)nlog, 0};
      if (i >= 0) i = find(sh, r); /* eviction may have moved it */
      if (i >= 0) {
        log = slog_of(&sh->slots[i].st);
        slog_move(p, nlog, log, now);
        budget_free(s, log, slog_bytes(log->cap));
        sh->slots[i].st = st;
      } else {
        i = insert(s, sh, r, now, &st);
        if (i < 0) {
          budget_free(s, nlog, slog_bytes((uint32_t)ncap));
          return (int)i;
        }
        *inserted = 1;
      }
    }
  }
  slog_commit(p, slog_of(&sh->slots[i].st), now, cost);
  return 0;
}

/* ---- decisions ---- */

static int settle(sl_store *s, shard *sh, const store_ref *r, long i,
                  int64_t now, int change, int64_t cost,
                  const algo_state *next, store_undo *undo);

int store_decide_locked(sl_store *s, const store_ref *r, int64_t cost,
                        int64_t now, int charge, sl_decision *d,
                        store_undo *undo) {
  shard *sh = &s->shards[r->shard];
  const algo_policy *p = r->p;
  long i = find(sh, r);
  if (undo) undo->kind = UNDO_NONE;
  /* A state that is back to fresh decides exactly like no state at all, so
     it is used as it is; only when it is left untouched is it dropped. */
  algo_state next = {0, 0};
  int change =
      p->ops->decide(p, i >= 0 ? &sh->slots[i].st : NULL, now, cost, d, &next);
  int rc = settle(s, sh, r, i, now, change && charge, cost, &next, undo);
  if (change && charge && !rc && p->pub.algo == SL_CONCURRENCY)
    d->lease = r->lease; /* recorded: the caller's to release */
  return rc;
}

/*
 * After an algorithm has decided on slot i (-1: none): when `change`,
 * writes its new state (next; sliding_log: logs cost), recording in undo
 * how to take it back; else drops a slot that is back to fresh.
 */
static int settle(sl_store *s, shard *sh, const store_ref *r, long i,
                  int64_t now, int change, int64_t cost,
                  const algo_state *next, store_undo *undo) {
  const algo_policy *p = r->p;
  if (!change) {
    if (i >= 0 && p->ops->fresh_at(p, &sh->slots[i].st) <= now - s->grace) {
      store_erase(s, sh, (size_t)i);
      sh->expirations++;
    }
    return 0;
  }
  if (p->pub.algo == SL_CONCURRENCY) {
    int inserted, rc = store_lease_charge(s, sh, r, i, now, &inserted);
    if (!rc && undo) {
      undo->kind = inserted ? UNDO_REMOVE : UNDO_LEASE;
      undo->lease = r->lease;
    }
    return rc;
  }
  if (p->pub.algo == SL_SLIDING_LOG) {
    int inserted, rc = log_charge(s, sh, r, i, now, cost, &inserted);
    if (!rc && undo) {
      undo->kind = inserted ? UNDO_REMOVE : UNDO_LOG;
      undo->cost = cost;
    }
    return rc;
  }
  if (i >= 0) {
    if (undo) {
      undo->kind = UNDO_RESTORE;
      undo->old = sh->slots[i].st;
    }
    sh->slots[i].st = *next;
    return 0;
  }
  i = insert(s, sh, r, now, next);
  if (i < 0) return (int)i;
  if (undo) undo->kind = UNDO_REMOVE;
  return 0;
}

/* A forced charge of `cost`, or (to not NULL) of what brings the level
   down to *to (nothing when it is there already: a first charge of 0
   reads the level), in one lookup under the shard's lock. */
static int force(sl_store *s, const store_ref *r, int64_t cost,
                 const int64_t *to, int64_t now, int64_t *level) {
  store_prefetch(s, r);
  store_lock(s, r->shard);
  shard *sh = &s->shards[r->shard];
  long i = find(sh, r);
  const algo_state *st = i >= 0 ? &sh->slots[i].st : NULL;
  algo_state next = {0, 0};
  int change = r->p->ops->force(r->p, st, now, &cost, level, &next);
  if (to && *level > *to) {
    cost = *level - *to;
    next = (algo_state){0, 0};
    change = r->p->ops->force(r->p, st, now, &cost, level, &next);
  }
  int rc = settle(s, sh, r, i, now, change, cost, &next, NULL);
  store_unlock(s, r->shard);
  return rc;
}

int store_force(sl_store *s, const store_ref *r, int64_t cost, int64_t now,
                int64_t *level) {
  return force(s, r, cost, NULL, now, level);
}

int store_force_to(sl_store *s, const store_ref *r, int64_t target,
                   int64_t now, int64_t *level) {
  return force(s, r, 0, &target, now, level);
}

void store_undo_locked(sl_store *s, const store_ref *r,
                       const store_undo *undo) {
  shard *sh = &s->shards[r->shard];
  long i = undo->kind == UNDO_NONE ? -1 : find(sh, r);
  if (i < 0) return; /* nothing charged, or evicted since: nothing to undo */
  switch (undo->kind) {
  case UNDO_RESTORE:
    sh->slots[i].st = undo->old;
    break;
  case UNDO_REMOVE:
    store_erase(s, sh, (size_t)i);
    break;
  case UNDO_LOG:
    slog_uncommit(slog_of(&sh->slots[i].st), undo->cost);
    break;
  case UNDO_LEASE:
    conc_remove(&sh->slots[i].st, undo->lease);
    break;
  case UNDO_NONE:
    break;
  }
}

int store_take(sl_store *s, const store_ref *r, int64_t cost, int64_t now,
               sl_decision *d) {
  store_prefetch(s, r); /* both lines load while we take the lock */
  store_lock(s, r->shard);
  int rc = store_decide_locked(s, r, cost, now, 1, d, NULL);
  store_unlock(s, r->shard);
  return rc;
}

int store_remove(sl_store *s, const store_ref *r) {
  shard *sh = &s->shards[r->shard];
  store_lock(s, r->shard);
  long i = find(sh, r);
  if (i >= 0) store_erase(s, sh, (size_t)i);
  store_unlock(s, r->shard);
  return i >= 0;
}

void store_prefetch(sl_store *s, const store_ref *r) {
  shard *sh = &s->shards[r->shard];
  size_t cap = atomic_load_explicit(&sh->hint_cap, memory_order_relaxed);
  if (!cap) return;
  size_t i = home_of(r->h, cap);
  uintptr_t c = atomic_load_explicit(&sh->hint_ctrl, memory_order_relaxed);
  uintptr_t sl = atomic_load_explicit(&sh->hint_slots, memory_order_relaxed);
  /* Integer arithmetic: the table may have moved; a stale hint is harmless. */
  __builtin_prefetch((const void *)(c + i * sizeof(uint32_t)));
  __builtin_prefetch((const void *)(sl + i * sizeof(slot)));
  __builtin_prefetch((const void *)(sl + (i + 2) * sizeof(slot)));
  __builtin_prefetch((const void *)(sl + (i + 4) * sizeof(slot)));
}

/* ---- limiter registry ---- */

int store_register(sl_store *s, const algo_policy *p, uint16_t *id) {
  int rc = SL_ELIMITERS;
  pthread_mutex_lock(&s->reg_lock);
  /* Ids 0..65534, searched round-robin from the last one given. */
  for (unsigned k = 0; k < 65535 && rc == SL_ELIMITERS; k++) {
    unsigned n = (s->reg_hint + k) % 65535;
    reg_entry *chunk =
        atomic_load_explicit(&s->reg[n / REG_CHUNK], memory_order_relaxed);
    if (!chunk) {
      chunk = limiter_alloc(s, REG_CHUNK * sizeof *chunk);
      if (!chunk) {
        rc = SL_ENOMEM;
        break;
      }
      for (unsigned j = 0; j < REG_CHUNK; j++) atomic_init(&chunk[j], NULL);
      atomic_store_explicit(&s->reg[n / REG_CHUNK], chunk,
                            memory_order_release);
    }
    if (!atomic_load_explicit(&chunk[n % REG_CHUNK], memory_order_relaxed)) {
      atomic_store_explicit(&chunk[n % REG_CHUNK], p, memory_order_release);
      *id = (uint16_t)n;
      s->reg_hint = n + 1;
      s->nlimiters++;
      rc = 0;
    }
  }
  pthread_mutex_unlock(&s->reg_lock);
  return rc;
}

void store_unregister(sl_store *s, uint16_t id) {
  store_unregister_many(s, &id, 1);
}

void store_unregister_many(sl_store *s, const uint16_t *ids, size_t n) {
  uint64_t gone[65536 / 64] = {0}; /* the ids, as bits: one test a slot */
  for (size_t k = 0; k < n; k++) gone[ids[k] / 64] |= UINT64_C(1) << (ids[k] % 64);
  for (unsigned m = 0; n && m < s->nshards; m++) {
    shard *sh = &s->shards[m];
    store_lock(s, m);
    for (size_t i = 0; i < sh->cap;) {
      uint32_t c = sh->ctrl[i];
      if (c && (gone[CTRL_ID(c) / 64] >> (CTRL_ID(c) % 64) & 1))
        store_erase(s, sh, i); /* a later entry may move into i: look again */
      else
        i++;
    }
    store_unlock(s, m);
  }
  pthread_mutex_lock(&s->reg_lock);
  for (size_t k = 0; k < n; k++) {
    reg_entry *chunk = atomic_load_explicit(&s->reg[ids[k] / REG_CHUNK],
                                            memory_order_relaxed);
    atomic_store_explicit(&chunk[ids[k] % REG_CHUNK], NULL,
                          memory_order_release);
    s->nlimiters--;
  }
  pthread_mutex_unlock(&s->reg_lock);
}

void store_walk_shard(sl_store *s, unsigned n, store_walk_fn fn, void *ud) {
  shard *sh = &s->shards[n];
  store_lock(s, n);
  for (size_t i = 0; i < sh->cap; i++) {
    uint32_t c = sh->ctrl[i], big = CTRL_LEN(c) == LEN_LONG;
    const slot *sl = &sh->slots[i];
    uint16_t len = 0;
    if (c && big) memcpy(&len, sl->key.big.ptr, sizeof len);
    if (c)
      fn(ud, &(store_entry){CTRL_ID(c), reg_get(s, CTRL_ID(c)),
                            big ? sl->key.big.ptr + 2 : sl->key.bytes,
                            big ? len : CTRL_LEN(c), &sl->st});
  }
  store_unlock(s, n);
}

void *store_alloc(sl_store *s, size_t n) { return limiter_alloc(s, n); }
void store_free(sl_store *s, void *p, size_t n) { budget_free(s, p, n); }
unsigned store_nshards(const sl_store *s) { return s->nshards; }

/* ---- the public store API ---- */

void sl_store_options_init(sl_store_options *opts) {
  memset(opts, 0, sizeof *opts);
}

int sl_store_new(const sl_store_options *opts, sl_store **out) {
  sl_store_options o;
  if (opts)
    o = *opts;
  else
    sl_store_options_init(&o);
  if (!out) return SL_EINVAL;
  *out = NULL;
  if (o.shards & (o.shards - 1)) return SL_EINVAL;
  size_t max_memory = o.max_memory ? o.max_memory : SL_STORE_DEFAULT_MEMORY;
  unsigned nshards = o.shards ? o.shards : DEFAULT_SHARDS;
  /* Small caps get fewer shards, so each can still hold a useful table. */
  while (nshards > 1 && max_memory / nshards < MIN_SHARD_BYTES) nshards /= 2;
  size_t own = sizeof(sl_store) + nshards * sizeof(shard) + 63 +
               2 * ALLOC_OVERHEAD;
  size_t min_tables = nshards * (table_size(MIN_CAP) + ALLOC_OVERHEAD);
  if (max_memory < own + min_tables * 8 / 7 + 1) return SL_EINVAL;
  if (o.expiry_grace_ns < 0) return SL_EINVAL;

  sl_alloc_fn alloc = o.alloc ? o.alloc : default_alloc;
  sl_store *s = alloc(o.alloc_ud, NULL, 0, sizeof *s);
  if (!s) return SL_ENOMEM;
  memset(s, 0, sizeof *s);
  s->alloc = alloc;
  s->alloc_ud = o.alloc_ud;
  s->max_memory = max_memory;
  s->nshards = nshards;
  atomic_init(&s->bytes, own);
  atomic_init(&s->table_bytes, 0);
  s->table_cap = (max_memory - own) / 8 * 7;
  /* Limiters' room: a 32nd of the cap, at most LIMITER_ROOM. */
  size_t room = (max_memory - own) / 32;
  s->key_cap = max_memory - (room < LIMITER_ROOM ? room : LIMITER_ROOM);
  s->grace = o.expiry_grace_ns ? o.expiry_grace_ns : INT64_C(1000000000);
  atomic_init(&s->sweep_next, 0);
  for (size_t c = 0; c < 65536 / REG_CHUNK; c++) atomic_init(&s->reg[c], NULL);
  if (o.hash_key) {
    memcpy(s->hkey, o.hash_key, sizeof s->hkey);
  } else {
    if (sodium_init() < 0) {
      alloc(o.alloc_ud, s, sizeof *s, 0);
      return SL_ENOMEM;
    }
    randombytes_buf(s->hkey, sizeof s->hkey);
  }
  /* Lease ids are secrets whatever hash_key says: always a random key. */
  if (sodium_init() < 0) {
    alloc(o.alloc_ud, s, sizeof *s, 0);
    return SL_ENOMEM;
  }
  randombytes_buf(s->lease_key, sizeof s->lease_key);
  atomic_init(&s->lease_next, 0);
  void *mem = alloc(o.alloc_ud, NULL, 0, nshards * sizeof(shard) + 63);
  if (!mem) {
    alloc(o.alloc_ud, s, sizeof *s, 0);
    return SL_ENOMEM;
  }
  s->shards = (shard *)(((uintptr_t)mem + 63) & ~(uintptr_t)63);
  memset(s->shards, 0, nshards * sizeof(shard));
  s->shards_raw = mem;
  pthread_mutex_init(&s->reg_lock, NULL);

  /* Every shard starts with a table, sized for expected_keys as far as its
     share of the cap allows. */
  size_t share = s->table_cap / nshards / (table_size(1) + 1);
  size_t per = o.expected_keys / nshards;
  if (per > share) per = share;
  per += per / 7 + 1; /* at the load where tables grow */
  if (per > share) per = share;
  for (unsigned n = 0; n < nshards; n++) {
    shard *sh = &s->shards[n];
    atomic_init(&sh->lock, 0);
    size_t cap = per > MIN_CAP ? per : MIN_CAP;
    if (resize(s, sh, cap) != 0 && resize(s, sh, MIN_CAP) != 0) {
      sl_store_free(s);
      return SL_ENOMEM;
    }
    sh->min_cap = sh->cap;
  }
  *out = s;
  return 0;
}

void sl_store_free(sl_store *s) {
  if (!s) return;
  for (unsigned n = 0; n < s->nshards; n++) {
    shard *sh = &s->shards[n];
    for (size_t i = 0; i < sh->cap; i++)
      if (sh->ctrl[i]) free_payload(s, sh, i);
    store_lease_spare_free(s, sh);
    budget_free(s, sh->slots, table_size(sh->cap));
  }
  for (size_t c = 0; c < 65536 / REG_CHUNK; c++) {
    reg_entry *chunk = atomic_load_explicit(&s->reg[c], memory_order_relaxed);
    budget_free(s, chunk, REG_CHUNK * sizeof *chunk);
  }
  pthread_mutex_destroy(&s->reg_lock);
  s_free(s, s->shards_raw, s->nshards * sizeof(shard) + 63);
  s_free(s, s, sizeof *s);
}

void sl_store_stats_get(sl_store *s, sl_store_stats *out) {
  memset(out, 0, sizeof *out);
  for (unsigned n = 0; n < s->nshards; n++) {
    shard *sh = &s->shards[n];
    store_lock(s, n);
    out->keys += sh->count;
    out->expirations += sh->expirations;
    out->evictions += sh->evictions;
    out->evicted_units += sh->evicted_units;
    store_unlock(s, n);
  }
  out->bytes = atomic_load_explicit(&s->bytes, memory_order_relaxed);
  out->max_memory = s->max_memory;
  pthread_mutex_lock(&s->reg_lock);
  out->limiters = s->nlimiters;
  pthread_mutex_unlock(&s->reg_lock);
}

int64_t sl_store_expire(sl_store *s, int64_t now, size_t max_slots) {
  if (!s) return SL_EINVAL;
  if (now < 0 || now >= SL_TIME_MAX_NS) return SL_ETIME;
  /* Round-robin, a bounded slice per shard, until the budget is spent. */
  size_t slice = max_slots / s->nshards;
  if (slice < 64) slice = 64;
  int64_t dropped = 0;
  for (unsigned visited = 0; max_slots > 0 && visited < s->nshards;
       visited++) {
    unsigned n = atomic_fetch_add_explicit(&s->sweep_next, 1,
                                           memory_order_relaxed) &
                 (s->nshards - 1);
    size_t budget = slice < max_slots ? slice : max_slots;
    store_lock(s, n);
    dropped += (int64_t)sweep(s, &s->shards[n], now, budget);
    store_unlock(s, n);
    max_slots -= budget;
  }
  return dropped;
}
