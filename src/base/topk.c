/*
 * topk.c — Space-Saving summaries and their merge (topk.h says what they
 * promise). A summary is three arrays of k and an index: the counters in
 * no order, a min-heap of them by count (the one a new key replaces is
 * its root), and an open-addressing table from a key's id to its counter.
 * A counter only ever grows until the summary is cleared, so an increment
 * only sifts down. The filter in front of a full summary (topk.h) is
 * FILTER_PER_K cells per counter in each of its two rows.
 */
#include "topk.h"

#include <stdlib.h>
#include <string.h>

#include "hash.h"

#define FILTER_PER_K 16

int topk_init(topk *s, size_t k) {
  memset(s, 0, sizeof *s);
  if (k < 1 || k > TOPK_MAX) return -1;
  size_t icap = 4, cells = 64;
  while (icap < 2 * k) icap *= 2;
  while (cells < FILTER_PER_K * k) cells *= 2;
  s->k = k;
  s->icap = icap;
  s->fmask = cells - 1;
  s->items = malloc(k * sizeof *s->items);
  s->heap = malloc(k * sizeof *s->heap);
  s->pos = malloc(k * sizeof *s->pos);
  s->index = calloc(icap, sizeof *s->index);
  if (!s->items || !s->heap || !s->pos || !s->index) {
    topk_free(s);
    return -1;
  }
  return 0;
}

void topk_free(topk *s) {
  free(s->filter);
  free(s->items);
  free(s->heap);
  free(s->pos);
  free(s->index);
  memset(s, 0, sizeof *s);
}

void topk_clear(topk *s) {
  if (s->n) memset(s->index, 0, s->icap * sizeof *s->index);
  if (s->filter) memset(s->filter, 0, 2 * (s->fmask + 1) * sizeof *s->filter);
  s->n = 0;
  s->total = 0;
}

/* The mix that picks id's filter cells: another than the index's, so
   that keys that share a slot's neighbourhood do not share cells too. */
static uint64_t cells_mix(uint64_t id) {
  return hash_mix(id ^ UINT64_C(0x9e3779b97f4a7c15));
}

topk_key topk_key_of(uint64_t id) {
  return (topk_key){id, hash_mix(id), cells_mix(id)};
}

/* The index slot of id (home: its mix): where it is, or the empty slot
   where it would go. */
static size_t slot_at(const topk *s, uint64_t id, uint64_t home) {
  size_t m = s->icap - 1, i = (size_t)home & m;
  while (s->index[i] && s->items[s->index[i] - 1].id != id) i = (i + 1) & m;
  return i;
}

static size_t slot_of(const topk *s, uint64_t id) {
  return slot_at(s, id, hash_mix(id));
}

/* Removes id's entry from the index (linear probing's backward shift:
   every entry stays reachable from its home slot). */
static void index_remove(topk *s, uint64_t id) {
  size_t m = s->icap - 1, hole = slot_of(s, id);
  if (!s->index[hole]) return;
  for (size_t i = (hole + 1) & m; s->index[i]; i = (i + 1) & m) {
    size_t home = (size_t)hash_mix(s->items[s->index[i] - 1].id) & m;
    /* The entry at i may move to the hole only if its home is not in
       (hole, i], cyclically. */
    int between = hole <= i ? (home > hole && home <= i)
                            : (home > hole || home <= i);
    if (!between) {
      s->index[hole] = s->index[i];
      hole = i;
    }
  }
  s->index[hole] = 0;
}

static uint64_t count_at(const topk *s, size_t h) {
  return s->items[s->heap[h]].count;
}

/* Puts item i at heap place h. */
static void heap_put(topk *s, size_t h, uint32_t i) {
  s->heap[h] = i;
  s->pos[i] = (uint32_t)h;
}

/* Restores the heap below place h after its count grew: the smaller
   children move up into the hole until the item's count fits (one write
   a level, not a swap's three). */
static void sift_down(topk *s, size_t h) {
  uint32_t i = s->heap[h];
  uint64_t c = s->items[i].count;
  for (;;) {
    size_t l = 2 * h + 1, least = l;
    if (l >= s->n) break;
    uint64_t lc = count_at(s, l);
    if (l + 1 < s->n && count_at(s, l + 1) < lc) lc = count_at(s, ++least);
    if (lc >= c) break;
    heap_put(s, h, s->heap[least]);
    h = least;
  }
  heap_put(s, h, i);
}

/* Restores the heap above place h (a counter added with a small count). */
static void sift_up(topk *s, size_t h) {
  uint32_t i = s->heap[h];
  uint64_t c = s->items[i].count;
  while (h > 0 && count_at(s, (h - 1) / 2) > c) {
    heap_put(s, h, s->heap[(h - 1) / 2]);
    h = (h - 1) / 2;
  }
  heap_put(s, h, i);
}

/* A key's two cells in the filter, one per row, at the two halves of
   its cells' mix h (topk_key). */
static void cells_of(const topk *s, uint64_t h, uint32_t *c[2]) {
  c[0] = &s->filter[(size_t)h & s->fmask];
  c[1] = &s->filter[s->fmask + 1 + ((size_t)(h >> 32) & s->fmask)];
}

/* A new key of a full summary (id, weight w) at the filter: 1 when it
   takes the smallest counter (floor), 0 when it stays out. Its cells
   count it (saturating: a saturated cell lets every key through); with
   no filter (out of memory) every key goes through, as in plain
   Space-Saving. */
static int filter_passes(topk *s, const topk_key *k, uint64_t w,
                         uint64_t floor) {
  if (!s->filter &&
      !(s->filter = calloc(2 * (s->fmask + 1), sizeof *s->filter)))
    return 1;
  uint32_t *c[2];
  cells_of(s, k->cells, c);
  uint64_t least = UINT64_MAX;
  for (int r = 0; r < 2; r++) {
    uint64_t v = *c[r] + w;
    *c[r] = v >= UINT32_MAX ? UINT32_MAX : (uint32_t)v;
    if (*c[r] < least) least = *c[r];
  }
  return least == UINT32_MAX || least > floor;
}

/* The key leaving counter it (its count an upper bound of its own):
   its cells rise to that count, so that they bound it while it is out. */
static void filter_hold(topk *s, const topk_item *it) {
  if (!s->filter) return;
  uint32_t n = it->count >= UINT32_MAX ? UINT32_MAX : (uint32_t)it->count;
  uint32_t *c[2];
  cells_of(s, cells_mix(it->id), c);
  for (int r = 0; r < 2; r++)
    if (*c[r] < n) *c[r] = n;
}

void topk_add(topk *s, uint64_t id, uint64_t w, topk_text_fn text, void *ctx) {
  topk_key k = topk_key_of(id);
  topk_add_key(s, &k, w, text, ctx);
}

void topk_add_key(topk *s, const topk_key *k, uint64_t w, topk_text_fn text,
                  void *ctx) {
  uint64_t id = k->id;
  s->total += w;
  size_t slot = slot_at(s, id, k->home);
  if (s->index[slot]) { /* counted already */
    uint32_t i = s->index[slot] - 1;
    s->items[i].count += w;
    sift_down(s, s->pos[i]);
    return;
  }
  uint32_t i;
  uint64_t floor = 0;
  if (s->n < s->k) { /* a free counter */
    i = (uint32_t)s->n;
    s->heap[s->n] = i;
    s->pos[i] = (uint32_t)s->n;
    s->n++;
  } else { /* the smallest counter changes hands, if the filter says */
    i = s->heap[0];
    floor = s->items[i].count;
    if (!filter_passes(s, k, w, floor)) return;
    filter_hold(s, &s->items[i]);
    index_remove(s, s->items[i].id);
    slot = slot_at(s, id, k->home);
  }
  topk_item *it = &s->items[i];
  it->id = id;
  it->count = floor + w;
  it->err = floor;
  it->text[0] = '\0';
  if (text) text(ctx, it->text, sizeof it->text);
  s->index[slot] = i + 1;
  if (floor)
    sift_down(s, s->pos[i]);
  else
    sift_up(s, s->pos[i]);
}

uint64_t topk_floor(const topk *s) {
  return s->n == s->k && s->n ? count_at(s, 0) : 0;
}

/* ---- merging ---- */

void topk_merge_add(topk_merge *m, const topk *s) {
  if (m->n + s->n > m->cap) {
    size_t cap = m->cap ? m->cap : 64;
    while (cap < m->n + s->n) cap *= 2;
    topk_gathered *v = realloc(m->v, cap * sizeof *v);
    if (!v) {
      m->oom = 1;
      return;
    }
    m->v = v;
    m->cap = cap;
  }
  uint64_t floor = topk_floor(s);
  for (size_t i = 0; i < s->n; i++)
    m->v[m->n + i] = (topk_gathered){s->items[i], floor};
  m->n += s->n;
  m->total += s->total;
  m->sum_min += floor;
}

static int by_id(const void *a, const void *b) {
  uint64_t x = ((const topk_gathered *)a)->it.id;
  uint64_t y = ((const topk_gathered *)b)->it.id;
  return x < y ? -1 : x > y;
}

static int by_count_desc(const void *a, const void *b) {
  const topk_item *x = &((const topk_gathered *)a)->it;
  const topk_item *y = &((const topk_gathered *)b)->it;
  if (x->count != y->count) return x->count < y->count ? 1 : -1;
  return x->id < y->id ? -1 : x->id > y->id; /* (a stable order) */
}

size_t topk_merge_top(topk_merge *m, topk_item *out, size_t n) {
  if (!m->n || !n) return 0;
  /* One entry per key: its counts summed over the summaries that hold
     it, plus the floor of each that does not (sum_min less the floors of
     those that do), in count and in err alike. */
  qsort(m->v, m->n, sizeof *m->v, by_id);
  size_t w = 0;
  for (size_t i = 0; i < m->n;) {
    topk_gathered g = m->v[i];
    uint64_t held_min = m->v[i].floor;
    size_t j = i + 1;
    for (; j < m->n && m->v[j].it.id == g.it.id; j++) {
      g.it.count += m->v[j].it.count;
      g.it.err += m->v[j].it.err;
      held_min += m->v[j].floor;
    }
    g.it.count += m->sum_min - held_min;
    g.it.err += m->sum_min - held_min;
    m->v[w++] = g;
    i = j;
  }
  m->n = w;
  qsort(m->v, m->n, sizeof *m->v, by_count_desc);
  size_t k = m->n < n ? m->n : n;
  for (size_t i = 0; i < k; i++) out[i] = m->v[i].it;
  return k;
}

void topk_merge_free(topk_merge *m) {
  free(m->v);
  memset(m, 0, sizeof *m);
}
