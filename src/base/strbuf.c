/*
 * strbuf.c — the growable buffer.
 */
#include "strbuf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void strbuf_init_with(strbuf *b, char *mem, size_t cap) {
  *b = (strbuf)STRBUF_INIT;
  b->p = mem;
  b->cap = cap;
  b->borrowed = 1;
  if (cap) mem[0] = '\0';
}

void strbuf_init_alloc(strbuf *b, strbuf_alloc_fn fn, void *ud, size_t first) {
  *b = (strbuf)STRBUF_INIT;
  b->alloc = fn;
  b->alloc_ud = ud;
  b->first = first;
}

/* p (old bytes, NULL: none) resized to n through b's allocator. */
static void *resize(const strbuf *b, void *p, size_t old, size_t n) {
  if (b->alloc) return b->alloc(b->alloc_ud, p, old, n);
  if (n) return realloc(p, n);
  free(p);
  return NULL;
}

int strbuf_grow(strbuf *b, size_t more) {
  if (b->len + more + 1 <= b->cap) return 0; /* + 1: the NUL */
  size_t min = b->first ? b->first : 64;
  size_t cap = b->cap > min ? b->cap : min;
  while (cap < b->len + more + 1) {
    if (cap > SIZE_MAX / 2) {
      b->oom = 1;
      return -1;
    }
    cap *= 2;
  }
  char *grown = b->borrowed ? resize(b, NULL, 0, cap)
                            : resize(b, b->p, b->p ? b->cap : 0, cap);
  if (!grown) {
    b->oom = 1;
    return -1;
  }
  if (b->borrowed && b->len) memcpy(grown, b->p, b->len);
  b->p = grown;
  b->cap = cap;
  b->borrowed = 0;
  return 0;
}

void strbuf_addf(strbuf *b, const char *fmt, ...) {
  char tmp[256];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
  va_end(ap);
  if (n < 0) return;
  if ((size_t)n < sizeof tmp) {
    strbuf_add(b, tmp, (size_t)n);
    return;
  }
  if (strbuf_reserve(b, (size_t)n)) return; /* longer: straight into b */
  va_start(ap, fmt);
  vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap);
  va_end(ap);
  b->len += (size_t)n;
}

char *strbuf_take(strbuf *b, size_t *cap) {
  char *p = b->borrowed ? NULL : b->p;
  if (cap) *cap = p ? b->cap : 0;
  if (!b->borrowed) strbuf_init_alloc(b, b->alloc, b->alloc_ud, b->first);
  return p;
}

void strbuf_free(strbuf *b) {
  if (b->borrowed) {
    b->len = 0;
    b->oom = 0;
    if (b->cap) b->p[0] = '\0';
    return;
  }
  if (b->p) resize(b, b->p, b->cap, 0);
  strbuf_init_alloc(b, b->alloc, b->alloc_ud, b->first);
}
