/*
 * duration.h — the time units every duration in sluice is written with:
 * ms, s, m, h, d (policies "gcra:50/s", scenarios "advance 250ms",
 * "at 1m30s").
 */
#ifndef SLUICE_BASE_DURATION_H
#define SLUICE_BASE_DURATION_H

#include <stddef.h>
#include <stdint.h>

typedef struct duration_unit {
  const char *name;
  int64_t ns;
} duration_unit;

/* The units, shortest first: ms, s, m, h, d. */
#define DURATION_NUNITS 5
extern const duration_unit duration_units[DURATION_NUNITS];

/* The unit spelled exactly name[0..len): its length in ns, or 0. */
int64_t duration_unit_ns(const char *name, size_t len);

/* The longest unit s starts with ("ms" before "m"): its name's length,
   and its ns in *ns; 0 when s starts with none. */
size_t duration_unit_at(const char *s, int64_t *ns);

/* A duration written NUMBER[UNIT] ("500ms", "5s", "2m"; a bare number is
   milliseconds), all of s[0..n): its ns in *ns, at most max_ns. 0, or -1
   (not a duration, an unknown unit, above max_ns). */
int duration_parse(const char *s, size_t n, int64_t max_ns, int64_t *ns);

#endif /* SLUICE_BASE_DURATION_H */
