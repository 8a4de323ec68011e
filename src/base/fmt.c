/*
 * fmt.c — decimal integers as text.
 */
#include "fmt.h"

size_t fmt_u64(char *dst, uint64_t v) {
  char tmp[FMT_INT_MAX];
  size_t n = 0;
  do {
    tmp[n++] = (char)('0' + v % 10);
    v /= 10;
  } while (v);
  for (size_t i = 0; i < n; i++) dst[i] = tmp[n - 1 - i];
  return n;
}

size_t fmt_i64(char *dst, int64_t v) {
  if (v >= 0) return fmt_u64(dst, (uint64_t)v);
  dst[0] = '-';
  /* 0 - (uint64_t)v is |v| for INT64_MIN too. */
  return 1 + fmt_u64(dst + 1, 0 - (uint64_t)v);
}
