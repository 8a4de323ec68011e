/*
 * shed.c — the load shedder of sluice.h: priority classes, each shed once
 * a signal reaches its threshold, over two signals (Stripe's two load
 * shedders): the protected service's utilisation, reported per source and
 * expiring, and fleet usage, the units charged per window (or in flight)
 * against a declared capacity.
 *
 * The request path (sl_shedder_check, _charge) reads a handful of atomics
 * and adds to one; the lock is taken only to end a window, to record a
 * report, and to recombine the reports when the earliest one expires. So
 * two threads that race at a window's end may lose a few units, and a
 * check that races a charge may let one request more through: the shedder
 * is a guard against overload, not a quota, and docs/shedding.md says so.
 *
 * The usage count is a weighted two-window counter (the sliding window's
 * estimate): the previous window's count, weighted by the part of it the
 * sliding window still covers, plus the current window's. Windows start
 * at multiples of their length since the epoch, so that daemons that
 * share their counts (fleet mode) count the same windows.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sluice.h"

#define DEFAULT_SOURCES 64
#define MAX_UTILISATION_PM 10000
#define NO_EXPIRY INT64_MAX

typedef struct src_slot {
  char name[SL_SHED_SOURCE_MAX];
  size_t len;
  uint32_t pm;
  int64_t until; /* fresh while now < until; 0: a free slot */
} src_slot;

struct sl_shedder {
  sl_shed_opts o;
  uint64_t inv_w; /* 2^64 / window_ns: weights without a division */
  /* The sources' combined utilisation, valid until util_until (the
     earliest expiry among the fresh sources; NO_EXPIRY with 0 when there
     are none). */
  _Atomic uint32_t util_pm;
  _Atomic int64_t util_until;
  /* Fleet usage: the current window's start and count, the previous
     window's count (in-flight mode: cur is what is in flight), and what
     the other daemons use. */
  _Atomic int64_t win_start;
  _Atomic int64_t cur;
  _Atomic uint64_t prev, remote;
  _Atomic uint64_t shed[SL_SHED_CLASSES_MAX];
  _Atomic uint64_t refused;
  pthread_mutex_t lock; /* src[], ending a window */
  src_slot *src;
};

int sl_shed_opts_validate(const sl_shed_opts *o, char *err, size_t len) {
  char tmp[8];
  if (!err) {
    err = tmp;
    len = sizeof tmp;
  }
  if (!o) return snprintf(err, len, "no options"), SL_EINVAL;
  if (o->nclasses < 1 || o->nclasses > SL_SHED_CLASSES_MAX)
    return snprintf(err, len, "classes: 1 to %d, not %u", SL_SHED_CLASSES_MAX,
                    o->nclasses),
           SL_EINVAL;
  for (uint32_t c = 1; c < o->nclasses; c++)
    if (o->threshold_pm[c] > o->threshold_pm[c - 1])
      return snprintf(err, len,
                      "class %u's threshold is above class %u's: a less "
                      "important class must be shed first",
                      c, c - 1),
             SL_EINVAL;
  if (o->capacity && (o->window_ns < 0 || o->window_ns > 86400000000000LL ||
                      (o->window_ns && o->window_ns < 1000000)))
    return snprintf(err, len, "window must be 1 ms to 1 day, or 0 (in "
                              "flight)"),
           SL_EINVAL;
  if (o->capacity > (UINT64_MAX >> 12))
    return snprintf(err, len, "capacity too large"), SL_EINVAL;
  if (o->max_sources > SL_SHED_SOURCES_MAX)
    return snprintf(err, len, "max_sources: at most %d", SL_SHED_SOURCES_MAX),
           SL_EINVAL;
  if (o->combine != SL_SHED_MAX && o->combine != SL_SHED_MEAN)
    return snprintf(err, len, "combine must be max or mean"), SL_EINVAL;
  return 0;
}

int sl_shedder_new(const sl_shed_opts *o, sl_shedder **out, char *err,
                   size_t len) {
  if (!out) return SL_EINVAL;
  *out = NULL;
  int rc = sl_shed_opts_validate(o, err, len);
  if (rc) return rc;
  sl_shedder *sh = calloc(1, sizeof *sh);
  if (!sh) return SL_ENOMEM;
  sh->o = *o;
  if (!sh->o.max_sources) sh->o.max_sources = DEFAULT_SOURCES;
  if (sh->o.window_ns > 0) /* rounded up: an exact half weighs half */
    sh->inv_w = UINT64_MAX / (uint64_t)sh->o.window_ns + 1;
  sh->src = calloc(sh->o.max_sources, sizeof *sh->src);
  if (!sh->src || pthread_mutex_init(&sh->lock, NULL)) {
    free(sh->src);
    free(sh);
    return SL_ENOMEM;
  }
  atomic_init(&sh->util_until, NO_EXPIRY);
  *out = sh;
  return 0;
}

void sl_shedder_free(sl_shedder *sh) {
  if (!sh) return;
  pthread_mutex_destroy(&sh->lock);
  free(sh->src);
  free(sh);
}

/* Recombines the fresh sources' reports into util_pm and util_until.
   Under sh->lock. */
static void recombine(sl_shedder *sh, int64_t now) {
  uint64_t sum = 0, top = 0, n = 0;
  int64_t until = NO_EXPIRY;
  for (uint32_t i = 0; i < sh->o.max_sources; i++) {
    src_slot *s = &sh->src[i];
    if (s->until <= now) continue;
    n++;
    sum += s->pm;
    if (s->pm > top) top = s->pm;
    if (s->until < until) until = s->until;
  }
  uint32_t pm = !n ? 0
                   : (uint32_t)(sh->o.combine == SL_SHED_MEAN ? sum / n : top);
  atomic_store_explicit(&sh->util_pm, pm, memory_order_relaxed);
  atomic_store_explicit(&sh->util_until, until, memory_order_release);
}

int sl_shedder_report(sl_shedder *sh, const char *source, size_t len,
                      uint32_t pm, int64_t ttl_ns, int64_t now) {
  if (!sh || (len && !source) || len > SL_SHED_SOURCE_MAX ||
      pm > MAX_UTILISATION_PM || ttl_ns <= 0 || now < 0 ||
      ttl_ns > INT64_MAX - now)
    return SL_EINVAL;
  pthread_mutex_lock(&sh->lock);
  src_slot *mine = NULL, *free_slot = NULL;
  for (uint32_t i = 0; i < sh->o.max_sources && !mine; i++) {
    src_slot *s = &sh->src[i];
    if (s->until > now && s->len == len && !memcmp(s->name, source, len))
      mine = s;
    else if (s->until <= now && !free_slot)
      free_slot = s;
  }
  if (!mine) mine = free_slot;
  int rc = 0;
  if (!mine) {
    atomic_fetch_add(&sh->refused, 1);
    rc = SL_EFULL;
  } else {
    if (len) memcpy(mine->name, source, len);
    mine->len = len;
    mine->pm = pm;
    mine->until = now + ttl_ns;
    recombine(sh, now);
  }
  pthread_mutex_unlock(&sh->lock);
  return rc;
}

/* The combined utilisation at now (recombined when a report expired). */
static uint32_t utilisation(sl_shedder *sh, int64_t now) {
  int64_t until = atomic_load_explicit(&sh->util_until, memory_order_acquire);
  if (now < until)
    return atomic_load_explicit(&sh->util_pm, memory_order_relaxed);
  /* A report expired: one thread recombines; the others read 0 from the
     expired value's end on, which the recombination then corrects. */
  if (pthread_mutex_trylock(&sh->lock) == 0) {
    recombine(sh, now);
    pthread_mutex_unlock(&sh->lock);
    until = atomic_load_explicit(&sh->util_until, memory_order_acquire);
    if (now < until)
      return atomic_load_explicit(&sh->util_pm, memory_order_relaxed);
  }
  return 0;
}

/* The local counts as of now: the window's start, its count and the
   previous one's, moved on (without writing) if windows have ended. */
static void counts_at(const sl_shedder *sh, int64_t now, int64_t *ws,
                      uint64_t *cur, uint64_t *prev) {
  int64_t W = sh->o.window_ns;
  *ws = atomic_load_explicit(&sh->win_start, memory_order_acquire);
  int64_t c = atomic_load_explicit(&sh->cur, memory_order_relaxed);
  *cur = c > 0 ? (uint64_t)c : 0;
  *prev = atomic_load_explicit(&sh->prev, memory_order_relaxed);
  if (!W || now < *ws + W) return;
  if (now < *ws + 2 * W) {
    *prev = *cur;
  } else {
    *prev = 0;
  }
  *cur = 0;
  *ws = now - now % W;
}

/* Units in use at now: local (weighted two windows, or in flight) and
   the other daemons'. */
static uint64_t usage(const sl_shedder *sh, int64_t now) {
  int64_t ws;
  uint64_t cur, prev;
  counts_at(sh, now, &ws, &cur, &prev);
  uint64_t u = cur + atomic_load_explicit(&sh->remote, memory_order_relaxed);
  int64_t W = sh->o.window_ns;
  if (W && prev) {
    int64_t left = W - (now - ws); /* the previous window still covered */
    /* Its weight in 1/65536ths, by a multiplication with the window's
       reciprocal (no division on the request path), to within 1/65536 of
       the previous window's count (rounded down). */
    if (left > 0) {
      uint64_t w16 = (uint64_t)(((unsigned __int128)left * sh->inv_w) >> 48);
      u += (uint64_t)(((unsigned __int128)prev * w16) >> 16);
    }
  }
  return u;
}

static uint32_t pm_of(uint64_t units, uint64_t capacity) {
  unsigned __int128 pm = (unsigned __int128)units * 1000 / capacity;
  return pm > UINT32_MAX - 1 ? UINT32_MAX - 1 : (uint32_t)pm;
}

void sl_shedder_check(sl_shedder *sh, uint32_t cls, int64_t cost, int64_t now,
                      sl_shed_decision *out) {
  if (cls >= sh->o.nclasses) cls = sh->o.nclasses - 1;
  uint32_t thr = sh->o.threshold_pm[cls];
  *out = (sl_shed_decision){0, SL_SHED_NONE, 0, thr};
  if (thr == SL_SHED_NEVER) return;
  uint32_t u = utilisation(sh, now);
  if (u && u >= thr) {
    *out = (sl_shed_decision){1, SL_SHED_UTILISATION, u, thr};
    return;
  }
  if (!sh->o.capacity) return;
  uint64_t level = usage(sh, now) + (uint64_t)(cost > 0 ? cost : 0);
  /* Shed when this cost would take usage past thr of capacity. */
  if ((unsigned __int128)level * 1000 >
      (unsigned __int128)thr * sh->o.capacity)
    *out = (sl_shed_decision){1, SL_SHED_USAGE, pm_of(level, sh->o.capacity),
                              thr};
}

/* Moves the window on to now's (under the lock; a rare path). */
static void roll(sl_shedder *sh, int64_t now) {
  pthread_mutex_lock(&sh->lock);
  int64_t ws;
  uint64_t cur, prev;
  counts_at(sh, now, &ws, &cur, &prev);
  if (ws != atomic_load(&sh->win_start)) {
    atomic_store(&sh->prev, prev);
    atomic_store(&sh->cur, (int64_t)cur);
    atomic_store_explicit(&sh->win_start, ws, memory_order_release);
  }
  pthread_mutex_unlock(&sh->lock);
}

void sl_shedder_charge(sl_shedder *sh, int64_t cost, int64_t now) {
  if (!sh->o.capacity || cost <= 0) return;
  int64_t W = sh->o.window_ns;
  if (W && now >= atomic_load_explicit(&sh->win_start, memory_order_acquire) +
                      W)
    roll(sh, now);
  atomic_fetch_add_explicit(&sh->cur, cost, memory_order_relaxed);
}

void sl_shedder_take(sl_shedder *sh, uint32_t cls, int64_t cost, int64_t now,
                     sl_shed_decision *out) {
  sl_shedder_check(sh, cls, cost, now, out);
  if (out->shed) {
    uint32_t c = cls < sh->o.nclasses ? cls : sh->o.nclasses - 1;
    atomic_fetch_add_explicit(&sh->shed[c], 1, memory_order_relaxed);
  } else {
    sl_shedder_charge(sh, cost, now);
  }
}

void sl_shedder_release(sl_shedder *sh, int64_t cost) {
  if (!sh->o.capacity || sh->o.window_ns || cost <= 0) return;
  int64_t v = atomic_load_explicit(&sh->cur, memory_order_relaxed);
  /* Never below zero: a release without its charge changes nothing. */
  while (!atomic_compare_exchange_weak_explicit(
      &sh->cur, &v, v > cost ? v - cost : 0, memory_order_relaxed,
      memory_order_relaxed)) {
  }
}

void sl_shedder_set_remote(sl_shedder *sh, uint64_t units) {
  atomic_store_explicit(&sh->remote, units, memory_order_relaxed);
}

void sl_shedder_counts(const sl_shedder *sh, int64_t *ws, uint64_t *cur,
                       uint64_t *prev) {
  *ws = atomic_load_explicit(&sh->win_start, memory_order_acquire);
  int64_t c = atomic_load_explicit(&sh->cur, memory_order_relaxed);
  *cur = c > 0 ? (uint64_t)c : 0;
  *prev = atomic_load_explicit(&sh->prev, memory_order_relaxed);
}

void sl_shedder_stats(sl_shedder *sh, int64_t now, sl_shed_stats *out) {
  memset(out, 0, sizeof *out);
  out->utilisation_pm = utilisation(sh, now);
  pthread_mutex_lock(&sh->lock);
  for (uint32_t i = 0; i < sh->o.max_sources; i++)
    out->sources += sh->src[i].until > now;
  pthread_mutex_unlock(&sh->lock);
  out->refused = atomic_load(&sh->refused);
  if (sh->o.capacity) {
    out->usage = usage(sh, now);
    out->usage_pm = pm_of(out->usage, sh->o.capacity);
  }
  for (uint32_t c = 0; c < SL_SHED_CLASSES_MAX; c++)
    out->shed[c] = atomic_load(&sh->shed[c]);
}

void sl_shedder_inherit(sl_shedder *sh, const sl_shedder *from) {
  if (!sh || !from || sh == from) return;
  sl_shedder *f = (sl_shedder *)from; /* its lock only */
  pthread_mutex_lock(&f->lock);
  pthread_mutex_lock(&sh->lock);
  uint32_t n = 0;
  for (uint32_t i = 0; i < f->o.max_sources && n < sh->o.max_sources; i++)
    if (f->src[i].until) sh->src[n++] = f->src[i];
  recombine(sh, 0);
  /* Counts carry over when they count the same thing. */
  if (sh->o.window_ns == f->o.window_ns && !!sh->o.capacity == !!f->o.capacity) {
    atomic_store(&sh->win_start, atomic_load(&f->win_start));
    atomic_store(&sh->cur, atomic_load(&f->cur));
    atomic_store(&sh->prev, atomic_load(&f->prev));
    atomic_store(&sh->remote, atomic_load(&f->remote));
  }
  atomic_store(&sh->refused, atomic_load(&f->refused));
  for (uint32_t c = 0; c < SL_SHED_CLASSES_MAX; c++)
    atomic_store(&sh->shed[c], atomic_load(&f->shed[c]));
  pthread_mutex_unlock(&sh->lock);
  pthread_mutex_unlock(&f->lock);
}

int sl_shed_parse_level(const char *s, size_t len, uint32_t *pm) {
  if (!s || !pm) return SL_EINVAL;
  int pct = len && s[len - 1] == '%';
  if (pct) len--;
  uint64_t whole = 0, frac = 0, scale = 1;
  size_t digits = 0, i = 0;
  for (; i < len && s[i] >= '0' && s[i] <= '9' && whole < 100000; i++, digits++)
    whole = whole * 10 + (uint64_t)(s[i] - '0');
  if (i < len && s[i] == '.')
    for (i++; i < len && s[i] >= '0' && s[i] <= '9'; i++, digits++)
      if (scale < 1000) { /* permille is as fine as it goes */
        frac = frac * 10 + (uint64_t)(s[i] - '0');
        scale *= 10;
      }
  if (i != len || !digits) return SL_EINVAL;
  /* The level in units of 1/(scale * 1000): a percentage is /100. */
  uint64_t v = (whole * scale + frac) * (pct ? 10 : 1000) / scale;
  if (v > MAX_UTILISATION_PM) return SL_EINVAL;
  *pm = (uint32_t)v;
  return 0;
}
