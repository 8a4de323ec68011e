/*
 * strbuf.c — the growable buffer.
 */
#include "strbuf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void strbuf_init_with(strbuf *b, char *mem, size_t cap) {
  *b = (strbuf){mem, 0, cap, 0, 1};
  if (cap) mem[0] = '\0';
}

int strbuf_grow(strbuf *b, size_t more) {
  if (b->len + more + 1 <= b->cap) return 0; /* + 1: the NUL */
  size_t cap = b->cap > 64 ? b->cap : 64;
  while (cap < b->len + more + 1) {
    if (cap > SIZE_MAX / 2) {
      b->oom = 1;
      return -1;
    }
    cap *= 2;
  }
  char *grown = b->borrowed ? malloc(cap) : realloc(b->p, cap);
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

char *strbuf_take(strbuf *b) {
  char *p = b->borrowed ? NULL : b->p;
  if (!b->borrowed) *b = (strbuf)STRBUF_INIT;
  return p;
}

void strbuf_free(strbuf *b) {
  if (b->borrowed) {
    b->len = 0;
    b->oom = 0;
    if (b->cap) b->p[0] = '\0';
    return;
  }
  free(b->p);
  *b = (strbuf)STRBUF_INIT;
}
