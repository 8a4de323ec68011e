/*
 * duration.c — the table of time units and its two lookups.
 */
#include "duration.h"

#include <string.h>

const duration_unit duration_units[DURATION_NUNITS] = {
    {"ms", INT64_C(1000000)},       {"s", INT64_C(1000000000)},
    {"m", INT64_C(60000000000)},    {"h", INT64_C(3600000000000)},
    {"d", INT64_C(86400000000000)},
};

int64_t duration_unit_ns(const char *name, size_t len) {
  for (size_t i = 0; i < DURATION_NUNITS; i++)
    if (strlen(duration_units[i].name) == len &&
        !memcmp(name, duration_units[i].name, len))
      return duration_units[i].ns;
  return 0;
}

size_t duration_unit_at(const char *s, int64_t *ns) {
  size_t best = 0;
  for (size_t i = 0; i < DURATION_NUNITS; i++) {
    size_t n = strlen(duration_units[i].name);
    if (n > best && !strncmp(s, duration_units[i].name, n)) {
      best = n;
      *ns = duration_units[i].ns;
    }
  }
  return best;
}

int duration_parse(const char *s, size_t n, int64_t max_ns, int64_t *ns) {
  size_t i = 0;
  int64_t v = 0;
  if (n == 0 || s[0] < '0' || s[0] > '9') return -1;
  for (; i < n && s[i] >= '0' && s[i] <= '9'; i++) {
    if (v > (INT64_MAX - 9) / 10) return -1;
    v = v * 10 + (s[i] - '0');
  }
  int64_t unit = i == n ? INT64_C(1000000) : duration_unit_ns(s + i, n - i);
  if (!unit || v > max_ns / unit) return -1;
  *ns = v * unit;
  return 0;
}
