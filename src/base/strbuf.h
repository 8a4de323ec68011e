/*
 * strbuf.h — a growable byte buffer: replies being built, commands being
 * queued. Appends never fail loudly: a failed one sets `oom` and drops the
 * bytes, and the owner checks oom once, when the buffer is complete (a
 * reply that could not be built is answered "out of memory" instead).
 *
 * A buffer may start in storage of the caller's (strbuf_init_with: a stack
 * array that a typical reply fits, so the hot path never allocates); it
 * moves to the heap when it outgrows it. Or its memory may come from an
 * allocator of the caller's (strbuf_init_alloc: Lua-style, as sluice.h's
 * sl_alloc_fn), so that a test can make its growth fail. The bytes are
 * always followed by a NUL (not counted in len), so a buffer of text is a
 * C string.
 */
#ifndef SLUICE_BASE_STRBUF_H
#define SLUICE_BASE_STRBUF_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "fmt.h"

/* An allocator: (ud, NULL, 0, n) allocates, (ud, p, old, n) resizes,
   (ud, p, old, 0) frees; NULL for a non-zero n is a failure. */
typedef void *(*strbuf_alloc_fn)(void *ud, void *p, size_t old, size_t n);

typedef struct strbuf {
  char *p;      /* the bytes (NULL until the first append) */
  size_t len;   /* bytes used */
  size_t cap;   /* bytes available at p */
  int oom;      /* an append failed: the contents are incomplete */
  int borrowed; /* p is the caller's storage (strbuf_init_with): not freed */
  strbuf_alloc_fn alloc; /* NULL: malloc, realloc, free */
  void *alloc_ud;
  size_t first; /* the first allocation's size at least (0: 64) */
} strbuf;

/* An empty buffer on the heap: strbuf b = STRBUF_INIT; */
#define STRBUF_INIT                                                            \
  { NULL, 0, 0, 0, 0, NULL, NULL, 0 }

/* An empty buffer that starts in mem[0..cap) (the caller's, not freed). */
void strbuf_init_with(strbuf *b, char *mem, size_t cap);

/* An empty buffer whose memory comes from fn (NULL: the C library's), at
   least `first` bytes at a time from empty. */
void strbuf_init_alloc(strbuf *b, strbuf_alloc_fn fn, void *ud, size_t first);

/* Grows b to hold `more` bytes after len: 0, or -1 with oom set. */
int strbuf_grow(strbuf *b, size_t more);

/* Room for `more` bytes after len: 0, or -1 with oom set. Inline, as the
   appends below: a reply is built of many small ones, and most fit. */
static inline int strbuf_reserve(strbuf *b, size_t more) {
  return b->len + more < b->cap ? 0 : strbuf_grow(b, more); /* (+ the NUL) */
}

static inline void strbuf_add(strbuf *b, const void *s, size_t n) {
  if (strbuf_reserve(b, n)) return;
  if (n) memcpy(b->p + b->len, s, n);
  b->len += n;
  b->p[b->len] = '\0';
}

void strbuf_addf(strbuf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static inline void strbuf_add_i64(strbuf *b, int64_t v) {
  if (strbuf_reserve(b, FMT_INT_MAX)) return;
  b->len += fmt_i64(b->p + b->len, v);
  b->p[b->len] = '\0';
}

/* A string literal, its length counted by the compiler. */
#define STRBUF_LIT(b, lit) strbuf_add((b), (lit), sizeof(lit) - 1)

/* The heap bytes (their capacity in *cap), now the caller's: to free
   with the buffer's allocator (free() without one). The buffer is left
   empty, its allocator kept. NULL when there are none or they are
   borrowed. */
char *strbuf_take(strbuf *b, size_t *cap);

/* Frees what the buffer owns and empties it (borrowed storage kept). */
void strbuf_free(strbuf *b);

#endif /* SLUICE_BASE_STRBUF_H */
