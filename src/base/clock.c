/*
 * clock.c — the wall and monotonic clocks, their test override and the
 * wall clock's skew.
 */
#include "clock.h"

#include <stdatomic.h>
#include <stddef.h>
#include <time.h>

static _Atomic int64_t skew_ns;
static const clock_source *_Atomic source;

static int64_t read_clock(clockid_t id) {
  struct timespec ts;
  clock_gettime(id, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int64_t clock_wall_ns(void) {
  const clock_source *s = atomic_load_explicit(&source, memory_order_acquire);
  int64_t now =
      s && s->wall_ns ? s->wall_ns(s->ud) : read_clock(CLOCK_REALTIME);
  return now + atomic_load_explicit(&skew_ns, memory_order_relaxed);
}

int64_t clock_mono_ns(void) {
  const clock_source *s = atomic_load_explicit(&source, memory_order_acquire);
  return s && s->mono_ns ? s->mono_ns(s->ud) : read_clock(CLOCK_MONOTONIC);
}

void clock_set_skew_ns(int64_t ns) {
  atomic_store_explicit(&skew_ns, ns, memory_order_relaxed);
}

void clock_override(const clock_source *src) {
  atomic_store_explicit(&source, src, memory_order_release);
}
