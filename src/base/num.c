/*
 * num.c — command-line numbers.
 */
#include "num.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>

int parse_int(const char *s, int64_t min, int64_t max, int suffix,
              int64_t *out) {
  if (!s || !isdigit((unsigned char)*s)) return -1; /* no sign, no space */
  char *end;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno || end == s) return -1;
  if (suffix && *end) {
    unsigned shift = *end == 'K' ? 10 : *end == 'M' ? 20 : *end == 'G' ? 30 : 0;
    if (!shift || end[1] || v > (unsigned long long)INT64_MAX >> shift)
      return -1;
    v <<= shift;
    end++;
  }
  if (*end || v > (unsigned long long)INT64_MAX) return -1;
  if ((int64_t)v < min || (int64_t)v > max) return -1;
  *out = (int64_t)v;
  return 0;
}
