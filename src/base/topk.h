/*
 * topk.h — the heaviest keys of a stream in bounded memory: Space-Saving
 * (Metwally, Agrawal and El Abbadi, "Efficient Computation of Frequent
 * and Top-k Elements in Data Streams", 2005), with the merge of several
 * summaries of Agarwal et al. ("Mergeable Summaries", 2012).
 *
 * A summary holds k counters. A key already counted adds to its own; a
 * new key takes a free counter, or, when all k are taken, the smallest
 * one: it inherits that count as its `err` (what it may have been given
 * that was not its own). So, for a stream of total weight N:
 *
 *   - every count is an upper bound of the key's true count, and
 *     count - err a lower bound: count - true <= err <= N/k;
 *   - every key whose true count is above N/k holds a counter.
 *
 * Merged summaries keep both promises with N the merged total: a key
 * absent from one summary is charged that summary's smallest count (an
 * upper bound of what it had there; 0 when the summary was not full).
 *
 * A full summary has a filter in front of it (after Homem and Carvalho's
 * Filtered Space-Saving, 2010): two rows of counters, one cell per row
 * for each key, at two halves of its id. A new key adds its weight to
 * its two cells, and takes the smallest counter only when both its cells
 * exceed that counter's count; else it stays out. A counter that changes
 * hands first raises its two cells to its count. The smaller cell is then
 * an upper bound of an absent key's count, so a key kept out had no more
 * than the smallest counter, as Space-Saving promises, and both promises
 * above hold unchanged; what the filter saves is the replacement (the
 * index, the heap, the text) for the light keys of a spread load, which
 * plain Space-Saving does at nearly every decision.
 *
 * Keys are known by a 64-bit id (a keyed hash of the key, the caller's);
 * the text shown for a key is copied, truncated to TOPK_TEXT - 1 bytes,
 * when it takes a counter. No locks: one thread writes a summary; the
 * caller serialises readers against it.
 */
#ifndef SLUICE_BASE_TOPK_H
#define SLUICE_BASE_TOPK_H

#include <stddef.h>
#include <stdint.h>

#define TOPK_TEXT 96 /* the shown text of a key, NUL included */
#define TOPK_MAX 4096 /* counters per summary at most */

typedef struct topk_item {
  uint64_t id;    /* the key's id */
  uint64_t count; /* an upper bound of the key's count */
  uint64_t err;   /* count - err is a lower bound */
  char text[TOPK_TEXT];
} topk_item;

typedef struct topk {
  size_t k;         /* counters */
  size_t n;         /* counters in use */
  uint64_t total;   /* N: the weight counted since the last clear */
  topk_item *items; /* n used, in no order */
  uint32_t *heap;   /* items by count, a min-heap of item indexes */
  uint32_t *pos;    /* each item's place in the heap */
  uint32_t *index;  /* open addressing by id: item index + 1, 0 empty */
  size_t icap;      /* a power of two, at least 2k */
  uint32_t *filter; /* 2 rows of fmask + 1 cells, made when first full;
                       NULL: none (not yet, or out of memory: plain
                       Space-Saving) */
  size_t fmask;
} topk;

/* Makes an empty summary of k counters (1..TOPK_MAX): 0, or -1 out of
   memory (nothing to free then). */
int topk_init(topk *s, size_t k);
void topk_free(topk *s);
/* Forgets every key (a new window). */
void topk_clear(topk *s);

/* Writes the key's text to buf (at most len bytes, NUL included); called
   only when the key takes a counter. */
typedef void (*topk_text_fn)(void *ctx, char *buf, size_t len);

/* Counts weight w (>= 1) for the key of id `id`. */
void topk_add(topk *s, uint64_t id, uint64_t w, topk_text_fn text, void *ctx);

/* A key's id with its two mixes (its index home, its filter cells),
   made once for a key counted in several summaries (a denial counts in
   the decisions' and the denials'). */
typedef struct topk_key {
  uint64_t id, home, cells;
} topk_key;
topk_key topk_key_of(uint64_t id);
/* topk_add of a key made by topk_key_of. */
void topk_add_key(topk *s, const topk_key *k, uint64_t w, topk_text_fn text,
                  void *ctx);

/* The smallest count held when every counter is taken, else 0: no key
   absent from the summary had more. */
uint64_t topk_floor(const topk *s);

/* ---- merging summaries (for a reader) ---- */

/* A counter gathered, with the floor of the summary it came from. */
typedef struct topk_gathered {
  topk_item it;
  uint64_t floor;
} topk_gathered;

typedef struct topk_merge {
  topk_gathered *v; /* every counter gathered */
  size_t n, cap;
  uint64_t total;   /* the summaries' totals */
  uint64_t sum_min; /* their floors */
  int oom;          /* a gather failed: the result is incomplete */
} topk_merge;

#define TOPK_MERGE_INIT {NULL, 0, 0, 0, 0, 0}

/* Gathers summary s (copied: s may change after the call). */
void topk_merge_add(topk_merge *m, const topk *s);
/*
 * The merged summary's heaviest keys, heaviest first: at most n of them
 * into out, each with the merged count (an upper bound) and err (count -
 * err is a lower bound). Returns how many were written. m is consumed
 * (sorted in place); topk_merge_free it afterwards.
 */
size_t topk_merge_top(topk_merge *m, topk_item *out, size_t n);
void topk_merge_free(topk_merge *m);

#endif /* SLUICE_BASE_TOPK_H */
