/*
 * lab.c — durations as text, the trailing-window judge and the PRNG that
 * `sluice sim` and `sluice accuracy` share (see lab.h for the contracts).
 */
#include "lab.h"

#include "../base/duration.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NS_MS INT64_C(1000000)
#define NS_S INT64_C(1000000000)

__extension__ typedef unsigned __int128 lab_u128;

static int dur_fail(char *err, size_t err_len, const char *fmt, ...) {
  if (err && err_len) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, err_len, fmt, ap);
    va_end(ap);
  }
  return -1;
}

int lab_parse_duration(const char *s, int64_t max_ns, int64_t *out, char *err,
                       size_t err_len) {
  if (!s || !*s) return dur_fail(err, err_len, "missing duration");
  const char *p = s;
  lab_u128 total = 0;
  int64_t last_unit = INT64_MAX;
  while (*p) {
    /* NUMBER: digits, optionally '.' and more digits. The integer part
       past 2^64 is beyond any valid duration; past 18 decimals a non-zero
       digit is below a nanosecond for every unit (a day is < 10^14 ns), so
       the number always fits 128 bits. */
    lab_u128 num = 0, scale = 1;
    int digits = 0, frac_digits = 0;
    while (*p >= '0' && *p <= '9') {
      num = num * 10 + (unsigned)(*p - '0');
      if (num >> 64) return dur_fail(err, err_len, "duration '%s' is too long", s);
      p++;
      digits++;
    }
    if (*p == '.') {
      p++;
      while (*p >= '0' && *p <= '9') {
        if (frac_digits < 18) {
          num = num * 10 + (unsigned)(*p - '0');
          scale *= 10;
        } else if (*p != '0') {
          return dur_fail(err, err_len,
                          "duration '%s' is finer than a nanosecond", s);
        }
        p++;
        frac_digits++;
      }
      if (frac_digits == 0)
        return dur_fail(err, err_len,
                        "duration '%s': expected digits after '.'", s);
    }
    if (digits == 0 && frac_digits == 0)
      return dur_fail(err, err_len,
                      "'%s' is not a duration (e.g. 250ms, 59.9s, 1m30s)", s);
    int64_t unit = 0;
    /* the longest unit first: "ms" is never "m" followed by "s" */
    size_t ulen = duration_unit_at(p, &unit);
    if (!unit)
      return dur_fail(err, err_len,
                      "duration '%s' needs a unit: ms, s, m, h or d", s);
    if (unit >= last_unit)
      return dur_fail(err, err_len,
                      "duration '%s': units must go from large to small "
                      "(e.g. 1m30s)", s);
    last_unit = unit;
    p += ulen;
    if (num > ~(lab_u128)0 / (lab_u128)unit)
      return dur_fail(err, err_len, "duration '%s' is too long", s);
    lab_u128 ns = num * (lab_u128)unit;
    if (ns % scale != 0)
      return dur_fail(err, err_len,
                      "duration '%s' is finer than a nanosecond", s);
    total += ns / scale;
    if (total > (lab_u128)max_ns)
      return dur_fail(err, err_len, "duration '%s' is too long", s);
  }
  *out = (int64_t)total;
  return 0;
}

/* Appends the fraction of a second to buf: 3, 6 or 9 decimals (ms, us,
   ns), the fewest that hold it exactly. */
static void frac_fixed(char *buf, size_t len, int64_t sub_ns) {
  char d[16];
  snprintf(d, sizeof d, "%09lld", (long long)sub_ns);
  int n = sub_ns % 1000000 == 0 ? 3 : sub_ns % 1000 == 0 ? 6 : 9;
  size_t used = strlen(buf);
  snprintf(buf + used, len > used ? len - used : 0, ".%.*s", n, d);
}

char *lab_fmt_fixed(int64_t ns, char *buf, size_t len) {
  if (ns < 0) ns = 0;
  int64_t s = ns / NS_S, sub = ns % NS_S;
  int64_t d = s / 86400, h = s / 3600 % 24, m = s / 60 % 60, sec = s % 60;
  if (d)
    snprintf(buf, len, "%lldd%02lldh%02lldm%02lld", (long long)d, (long long)h,
             (long long)m, (long long)sec);
  else if (h)
    snprintf(buf, len, "%lldh%02lldm%02lld", (long long)h, (long long)m,
             (long long)sec);
  else if (m)
    snprintf(buf, len, "%lldm%02lld", (long long)m, (long long)sec);
  else
    snprintf(buf, len, "%lld", (long long)sec);
  frac_fixed(buf, len, sub);
  size_t used = strlen(buf);
  snprintf(buf + used, len > used ? len - used : 0, "s");
  return buf;
}

char *lab_fmt_short(int64_t ns, char *buf, size_t len) {
  if (ns < 0) ns = 0;
  buf[0] = '\0';
  if (ns == 0) {
    snprintf(buf, len, "0s");
    return buf;
  }
  if (ns < NS_S && ns % NS_MS == 0) {
    snprintf(buf, len, "%lldms", (long long)(ns / NS_MS));
    return buf;
  }
  int64_t s = ns / NS_S, sub = ns % NS_S;
  static const struct {
    int64_t secs;
    char unit;
  } big[] = {{86400, 'd'}, {3600, 'h'}, {60, 'm'}};
  size_t used = 0;
  for (size_t i = 0; i < 3; i++) {
    if (s >= big[i].secs) {
      used += (size_t)snprintf(buf + used, len > used ? len - used : 0,
                               "%lld%c", (long long)(s / big[i].secs),
                               big[i].unit);
      s %= big[i].secs;
    }
  }
  if (s || sub) {
    used += (size_t)snprintf(buf + used, len > used ? len - used : 0, "%lld",
                             (long long)s);
    if (sub) {
      char d[16];
      snprintf(d, sizeof d, "%09lld", (long long)sub);
      int n = 9;
      while (d[n - 1] == '0') n--;
      used += (size_t)snprintf(buf + used, len > used ? len - used : 0,
                               ".%.*s", n, d);
    }
    snprintf(buf + used, len > used ? len - used : 0, "s");
  }
  return buf;
}

uint64_t lab_rand(uint64_t *state) {
  uint64_t z = (*state += UINT64_C(0x9e3779b97f4a7c15));
  z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
  z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
  return z ^ (z >> 31);
}

uint64_t lab_rand_below(uint64_t *state, uint64_t n) {
  /* Reject the top partial block of 2^64 so every residue is equally
     likely (Lemire's threshold, with a plain modulo). */
  uint64_t threshold = (0 - n) % n;
  for (;;) {
    uint64_t r = lab_rand(state);
    if (r >= threshold) return r % n;
  }
}

int lab_window_init(lab_window *w, int64_t W, size_t nkeys) {
  memset(w, 0, sizeof *w);
  w->W = W;
  w->nkeys = nkeys;
  w->free_list = LAB_NONE;
  w->keys = malloc((nkeys ? nkeys : 1) * sizeof *w->keys);
  if (!w->keys) return -1;
  for (size_t i = 0; i < nkeys; i++) {
    w->keys[i].head = w->keys[i].tail = LAB_NONE;
    w->keys[i].sum = 0;
  }
  return 0;
}

void lab_window_free(lab_window *w) {
  free(w->keys);
  free(w->rec);
  memset(w, 0, sizeof *w);
}

int64_t lab_window_sum(lab_window *w, size_t key, int64_t t) {
  lab_wkey *k = &w->keys[key];
  /* An entry at time e counts while e > t - W; written without the
     subtraction so that t near 0 or near the top of the range is exact. */
  while (k->head != LAB_NONE && w->rec[k->head].t + w->W <= t) {
    uint32_t old = k->head;
    k->sum -= w->rec[old].cost;
    k->head = w->rec[old].next;
    if (k->head == LAB_NONE) k->tail = LAB_NONE;
    w->rec[old].next = w->free_list;
    w->free_list = old;
  }
  return k->sum;
}

int lab_window_add(lab_window *w, size_t key, int64_t t, int64_t cost) {
  if (cost <= 0) return 0;
  lab_wkey *k = &w->keys[key];
  /* Same instant as the newest entry: one entry holds both. */
  if (k->tail != LAB_NONE && w->rec[k->tail].t == t) {
    w->rec[k->tail].cost += cost;
  } else {
    uint32_t r = w->free_list;
    if (r != LAB_NONE) {
      w->free_list = w->rec[r].next;
    } else {
      if (w->nrec == w->cap) {
        if (w->cap >= (UINT32_MAX >> 2)) return -1;
        uint32_t ncap = w->cap ? w->cap * 2 : 64;
        lab_wrec *n = realloc(w->rec, (size_t)ncap * sizeof *n);
        if (!n) return -1;
        w->rec = n;
        w->cap = ncap;
      }
      r = w->nrec++;
    }
    w->rec[r].t = t;
    w->rec[r].cost = cost;
    w->rec[r].next = LAB_NONE;
    if (k->tail != LAB_NONE)
      w->rec[k->tail].next = r;
    else
      k->head = r;
    k->tail = r;
  }
  k->sum += cost;
  if (k->sum > w->worst) w->worst = k->sum;
  return 0;
}
