/*
 * fmt.h — numbers as text on the hot paths (replies, headers, Redis key
 * names), without printf's parsing, and the rounding every reply uses.
 */
#ifndef SLUICE_BASE_FMT_H
#define SLUICE_BASE_FMT_H

#include <stddef.h>
#include <stdint.h>

/* The most bytes fmt_i64 / fmt_u64 write. */
#define FMT_INT_MAX 20

/* Writes v in decimal at dst (no terminator); returns the length. */
size_t fmt_u64(char *dst, uint64_t v);
size_t fmt_i64(char *dst, int64_t v);

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
