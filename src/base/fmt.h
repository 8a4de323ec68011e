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
  /* Two digits a division, from the end of a scratch buffer: replies
     write several numbers each, and this is most of their cost. */
  static const char pairs[201] =
      "00010203040506070809101112131415161718192021222324252627282930313233"
      "34353637383940414243444546474849505152535455565758596061626364656667"
      "6869707172737475767778798081828384858687888990919293949596979899";
  char tmp[FMT_INT_MAX];
  size_t i = FMT_INT_MAX;
  while (v >= 100) {
    unsigned d = (unsigned)(v % 100) * 2;
    v /= 100;
    tmp[--i] = pairs[d + 1];
    tmp[--i] = pairs[d];
  }
  if (v >= 10) {
    tmp[--i] = pairs[v * 2 + 1];
    tmp[--i] = pairs[v * 2];
  } else {
    tmp[--i] = (char)('0' + v);
  }
  size_t n = FMT_INT_MAX - i;
  for (size_t k = 0; k < n; k++) dst[k] = tmp[i + k];
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
