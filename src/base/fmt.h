/*
 * fmt.h — numbers as text on the hot paths (replies, headers, Redis key
 * names), without printf's parsing, and the rounding every reply uses.
 * Inline: a reply writes several numbers, and a call each costs more than
 * the digits.
 */
#ifndef SLUICE_BASE_FMT_H
#define SLUICE_BASE_FMT_H

#include <stddef.h>
#include <stdint.h>

/* The most bytes fmt_i64 / fmt_u64 write. */
#define FMT_INT_MAX 20

/* Writes v in decimal at dst (no terminator); returns the length. */
static inline size_t fmt_u64(char *dst, uint64_t v) {
  char tmp[FMT_INT_MAX];
  size_t n = 0;
  do {
    tmp[n++] = (char)('0' + v % 10);
    v /= 10;
  } while (v);
  for (size_t i = 0; i < n; i++) dst[i] = tmp[n - 1 - i];
  return n;
}

static inline size_t fmt_i64(char *dst, int64_t v) {
  if (v >= 0) return fmt_u64(dst, (uint64_t)v);
  dst[0] = '-';
  /* 0 - (uint64_t)v is |v| for INT64_MIN too. */
  return 1 + fmt_u64(dst + 1, 0 - (uint64_t)v);
}

/* ceil(ns / 1e6) and ceil(ns / 1e9) for ns >= 0: durations are reported in
   whole milliseconds or seconds, rounded up, so that a client that waits
   what it was told is never early. */
static inline int64_t ns_to_ms_up(int64_t ns) {
  return ns / 1000000 + (ns % 1000000 != 0);
}
static inline int64_t ns_to_s_up(int64_t ns) {
  return ns / 1000000000 + (ns % 1000000000 != 0);
}

#endif /* SLUICE_BASE_FMT_H */
