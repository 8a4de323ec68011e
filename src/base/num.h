/*
 * num.h — numbers as users write them on command lines: decimal, no
 * sign, with a binary K/M/G suffix where a size is expected.
 */
#ifndef SLUICE_BASE_NUM_H
#define SLUICE_BASE_NUM_H

#include <stdint.h>

/* Parses s, a decimal integer in [min, max], with an optional K, M or G
   suffix (x1024, x1024^2, x1024^3) when `suffix` is set. 0 with *out, or
   -1 (nothing written). */
int parse_int(const char *s, int64_t min, int64_t max, int suffix,
              int64_t *out);

#endif /* SLUICE_BASE_NUM_H */
