/*
 * clock.h — the two clocks the daemon reads, in one place.
 *
 * The library never reads a clock (the caller passes the time); the daemon
 * does, for two different purposes that must not be confused:
 *   clock_wall_ns   the decisions' `now`: nanoseconds since the Unix epoch,
 *                   shifted by the skew a test asked for (--clock-skew);
 *   clock_mono_ns   intervals, deadlines and timeouts: CLOCK_MONOTONIC,
 *                   which no step of the wall clock moves.
 * A test replaces both with its own (clock_override): code under test then
 * runs on the test's time, with no function redefined around it.
 */
#ifndef SLUICE_BASE_CLOCK_H
#define SLUICE_BASE_CLOCK_H

#include <stdint.h>

/* Wall-clock nanoseconds since the Unix epoch, plus the skew. */
int64_t clock_wall_ns(void);
/* Monotonic nanoseconds (an arbitrary origin). */
int64_t clock_mono_ns(void);

/* Shifts clock_wall_ns by ns (sluice serve --clock-skew; tests). */
void clock_set_skew_ns(int64_t ns);

/* A replacement for both clocks; either function may be NULL (that clock
   stays the system's). */
typedef struct clock_source {
  int64_t (*wall_ns)(void *ud);
  int64_t (*mono_ns)(void *ud);
  void *ud;
} clock_source;

/* Makes src (which must outlive its use) the clocks' source; NULL restores
   the system clocks. For tests: not meant to change while threads read. */
void clock_override(const clock_source *src);

#endif /* SLUICE_BASE_CLOCK_H */
