/*
 * client.c — the client's half of the contract: read what the server said
 * about its limits (Retry-After, the IETF RateLimit fields in their three
 * generations, X-RateLimit-*), back off with full jitter but never before
 * the server's time, and pace requests so that the quota lasts until its
 * reset instead of ending in a 429.
 *
 * The header values come from the network: every parser here takes a
 * length, reads nothing past it, allocates nothing, bounds every number
 * (a figure past SL_TIME_MAX_NS is malformed, not a wrap-around) and leaves
 * *info untouched when a value is malformed. fuzz/headers_fuzz.c feeds
 * them arbitrary bytes.
 */
#include <limits.h>
#include <sodium.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "sluice.h"

#define NS_S INT64_C(1000000000)
#define VALUE_MAX 4096
/* The largest count of seconds a figure may hold: SL_TIME_MAX_NS in s. */
#define SECONDS_MAX (SL_TIME_MAX_NS / NS_S)
/* ... and of milliseconds (an epoch time in ms, X-RateLimit-Reset). */
#define MS_MAX (SL_TIME_MAX_NS / 1000000)

void sl_rate_info_init(sl_rate_info *info) {
  if (!info) return;
  info->limit = info->remaining = info->reset_ns = -1;
  info->window_ns = info->retry_after_ns = -1;
  info->policy[0] = '\0';
}

/* ---- a cursor over one header value ---- */

typedef struct cur {
  const char *s, *end;
} cur;

static void skip_ows(cur *c) {
  while (c->s < c->end && (*c->s == ' ' || *c->s == '\t')) c->s++;
}

static int at(const cur *c, char ch) { return c->s < c->end && *c->s == ch; }

/* Decimal digits at the cursor into *v (at most max). 0, or -1 when there
   are none or too many. */
static int read_digits(cur *c, int64_t max, int64_t *v) {
  const char *start = c->s;
  int64_t x = 0;
  while (c->s < c->end && *c->s >= '0' && *c->s <= '9') {
    int d = *c->s - '0';
    if (x > (max - d) / 10) return -1;
    x = x * 10 + d;
    c->s++;
  }
  if (c->s == start) return -1;
  *v = x;
  return 0;
}

/* A whole value that is only decimal digits (optional white space around),
   at most max. 0, or -1. */
static int whole_number(const char *s, size_t n, int64_t max, int64_t *v) {
  cur c = {s, s + n};
  skip_ows(&c);
  if (read_digits(&c, max, v)) return -1;
  skip_ows(&c);
  return c.s == c.end ? 0 : -1;
}

/* ---- Retry-After: delay-seconds or an HTTP-date (RFC 9110, 10.2.3) ---- */

static const char months[12][4] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                   "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};

/* Exactly n digits at the cursor. -1 if not. */
static int fixed_digits(cur *c, int n, int *v) {
  if (c->end - c->s < n) return -1;
  int x = 0;
  for (int i = 0; i < n; i++) {
    if (c->s[i] < '0' || c->s[i] > '9') return -1;
    x = x * 10 + (c->s[i] - '0');
  }
  c->s += n;
  *v = x;
  return 0;
}

static int expect(cur *c, const char *lit) {
  size_t n = strlen(lit);
  if ((size_t)(c->end - c->s) < n || memcmp(c->s, lit, n)) return -1;
  c->s += n;
  return 0;
}

static int read_month(cur *c, int *m) {
  if (c->end - c->s < 3) return -1;
  for (int i = 0; i < 12; i++)
    if (!memcmp(c->s, months[i], 3)) {
      c->s += 3;
      *m = i;
      return 0;
    }
  return -1;
}

/* "HH:MM:SS" */
static int read_clock(cur *c, struct tm *tm) {
  return fixed_digits(c, 2, &tm->tm_hour) || expect(c, ":") ||
                 fixed_digits(c, 2, &tm->tm_min) || expect(c, ":") ||
                 fixed_digits(c, 2, &tm->tm_sec) || tm->tm_hour > 23 ||
                 tm->tm_min > 59 || tm->tm_sec > 60
             ? -1
             : 0;
}

/*
 * An HTTP-date in any of RFC 9110's three formats, into seconds since the
 * epoch: IMF-fixdate "Sun, 06 Nov 1994 08:49:37 GMT", the obsolete RFC 850
 * "Sunday, 06-Nov-94 08:49:37 GMT" (a two-digit year within 50 years of
 * now, as RFC 9110 asks, simplified to 70-99 = 19xx) and asctime "Sun Nov
 * 6 08:49:37 1994". The weekday is skipped, not checked. 0, or -1.
 */
static int http_date(const char *s, size_t n, int64_t *out) {
  cur c = {s, s + n};
  skip_ows(&c);
  while (c.s < c.end && ((*c.s >= 'A' && *c.s <= 'Z') ||
                         (*c.s >= 'a' && *c.s <= 'z')))
    c.s++; /* the weekday */
  struct tm tm = {0};
  if (at(&c, ',')) {
    c.s++;
    skip_ows(&c);
    if (fixed_digits(&c, 2, &tm.tm_mday)) return -1;
    if (at(&c, ' ')) { /* IMF-fixdate */
      c.s++;
      if (read_month(&c, &tm.tm_mon) || expect(&c, " ") ||
          fixed_digits(&c, 4, &tm.tm_year))
        return -1;
      tm.tm_year -= 1900;
    } else { /* RFC 850 */
      int yy;
      if (expect(&c, "-") || read_month(&c, &tm.tm_mon) || expect(&c, "-") ||
          fixed_digits(&c, 2, &yy))
        return -1;
      tm.tm_year = yy < 70 ? yy + 100 : yy;
    }
    if (expect(&c, " ") || read_clock(&c, &tm) || expect(&c, " GMT"))
      return -1;
  } else { /* asctime: "Nov  6 08:49:37 1994" */
    if (expect(&c, " ") || read_month(&c, &tm.tm_mon) || expect(&c, " "))
      return -1;
    if (at(&c, ' ')) {
      c.s++;
      if (fixed_digits(&c, 1, &tm.tm_mday)) return -1;
    } else if (fixed_digits(&c, 2, &tm.tm_mday)) {
      return -1;
    }
    if (expect(&c, " ") || read_clock(&c, &tm) || expect(&c, " ") ||
        fixed_digits(&c, 4, &tm.tm_year))
      return -1;
    tm.tm_year -= 1900;
  }
  skip_ows(&c);
  if (c.s != c.end || tm.tm_mday < 1 || tm.tm_mday > 31) return -1;
  time_t t = timegm(&tm);
  if (t == (time_t)-1 || t < 0 || (int64_t)t > SECONDS_MAX) return -1;
  *out = (int64_t)t;
  return 0;
}

/* Retry-After into a duration from now (a date in the past: 0). */
static int retry_after(const char *v, size_t n, int64_t now, int64_t *ns) {
  int64_t secs;
  if (!whole_number(v, n, SECONDS_MAX, &secs)) {
    *ns = secs * NS_S;
    return 0;
  }
  if (http_date(v, n, &secs)) return -1;
  int64_t at_ns = secs * NS_S;
  *ns = at_ns > now ? at_ns - now : 0;
  return 0;
}

/* ---- Structured Fields: a List of Items with parameters (RFC 8941) ---- */

/* One item's parameters that the drafts define, -1 when absent. */
typedef struct sf_item {
  const char *name; /* the item's bare value when a string or token */
  size_t name_len;
  int64_t bare; /* the bare item when an integer, else -1 */
  int64_t r, t, q, w;
} sf_item;

/* A String's body (after the '"') up to the closing quote; escapes are
   kept as written in the name (they are compared as bytes). */
static int sf_string(cur *c, const char **s, size_t *n) {
  const char *start = c->s;
  while (c->s < c->end && *c->s != '"') {
    unsigned char ch = (unsigned char)*c->s;
    if (ch < 0x20 || ch > 0x7e) return -1;
    if (ch == '\\') {
      c->s++;
      if (c->s == c->end || (*c->s != '"' && *c->s != '\\')) return -1;
    }
    c->s++;
  }
  if (c->s == c->end) return -1;
  *s = start;
  *n = (size_t)(c->s - start);
  c->s++;
  return 0;
}

static int tchar(char ch) {
  return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
         (ch >= '0' && ch <= '9') || strchr("!#$%&'*+-.^_`|~:/", ch);
}

/* A bare item: string, token, integer, decimal, byte sequence, boolean.
   Integers land in *num (else -1); strings and tokens in *s, *n. */
static int sf_bare(cur *c, int64_t *num, const char **s, size_t *n) {
  *num = -1;
  *s = NULL;
  *n = 0;
  if (c->s == c->end) return -1;
  char ch = *c->s;
  if (ch == '"') {
    c->s++;
    return sf_string(c, s, n);
  }
  if (ch == ':') { /* a byte sequence (pk): base64 up to the next ':' */
    c->s++;
    while (c->s < c->end && *c->s != ':') c->s++;
    if (c->s == c->end) return -1;
    c->s++;
    return 0;
  }
  if (ch == '?') {
    c->s++;
    if (c->s == c->end || (*c->s != '0' && *c->s != '1')) return -1;
    c->s++;
    return 0;
  }
  if (ch == '-' || (ch >= '0' && ch <= '9')) {
    if (ch == '-') return -1; /* no figure of the drafts is negative */
    if (read_digits(c, SECONDS_MAX, num)) return -1;
    if (at(c, '.')) { /* a decimal: not a figure the drafts give */
      c->s++;
      int64_t frac;
      if (read_digits(c, INT64_MAX, &frac)) return -1;
      *num = -1;
    }
    return 0;
  }
  if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || ch == '*') {
    const char *start = c->s;
    while (c->s < c->end && tchar(*c->s)) c->s++;
    *s = start;
    *n = (size_t)(c->s - start);
    return 0;
  }
  return -1;
}

/* A parameter key: lcalpha / "*" then lcalpha, digits, "_-.*". */
static int sf_key(cur *c, const char **k, size_t *n) {
  const char *start = c->s;
  if (c->s == c->end || !((*c->s >= 'a' && *c->s <= 'z') || *c->s == '*'))
    return -1;
  while (c->s < c->end && ((*c->s >= 'a' && *c->s <= 'z') ||
                           (*c->s >= '0' && *c->s <= '9') ||
                           strchr("_-.*", *c->s)))
    c->s++;
  *k = start;
  *n = (size_t)(c->s - start);
  return 0;
}

/* The next item of a List, with its parameters; the cursor then stands
   after the ',' (or at the end). 0, or -1. */
static int sf_next(cur *c, sf_item *it) {
  it->r = it->t = it->q = it->w = -1;
  skip_ows(c);
  if (sf_bare(c, &it->bare, &it->name, &it->name_len)) return -1;
  while (at(c, ';')) {
    c->s++;
    skip_ows(c);
    const char *k, *s;
    size_t kn, sn;
    if (sf_key(c, &k, &kn)) return -1;
    int64_t v = -1;
    if (at(c, '=')) {
      c->s++;
      if (sf_bare(c, &v, &s, &sn)) return -1;
    }
    if (kn == 1 && k[0] == 'r') it->r = v;
    if (kn == 1 && k[0] == 't') it->t = v;
    if (kn == 1 && k[0] == 'q') it->q = v;
    if (kn == 1 && k[0] == 'w') it->w = v;
  }
  skip_ows(c);
  if (c->s == c->end) return 0;
  if (*c->s != ',') return -1;
  c->s++;
  skip_ows(c);
  return c->s == c->end ? -1 : 0; /* a trailing comma is malformed */
}

/* ---- merging figures: the more cautious wins ---- */

static void keep_least(int64_t *slot, int64_t v) {
  if (v >= 0 && (*slot < 0 || v < *slot)) *slot = v;
}

static void keep_most(int64_t *slot, int64_t v) {
  if (v >= 0 && v > *slot) *slot = v;
}

static void set_name(sl_rate_info *info, const char *s, size_t n) {
  if (!s) n = 0;
  if (n >= sizeof info->policy) n = sizeof info->policy - 1;
  if (n) memcpy(info->policy, s, n);
  info->policy[n] = '\0';
}

/* Whether the cursor's bytes start with lit (reading none past the end). */
static int starts(const cur *c, const char *lit) {
  size_t n = strlen(lit);
  return (size_t)(c->end - c->s) >= n && !memcmp(c->s, lit, n);
}

/*
 * RateLimit: the draft-08+ List (`"name";r=N;t=S`, the item with the
 * least r counts), or draft-07's Dictionary (`limit=L, remaining=R,
 * reset=S`). Into next (a copy of *info).
 */
static int ratelimit(sl_rate_info *next, const char *v, size_t n) {
  cur c = {v, v + n};
  skip_ows(&c);
  if (starts(&c, "limit=") || starts(&c, "remaining=") ||
      starts(&c, "reset=")) {
    int64_t lim = -1, rem = -1, reset = -1;
    while (c.s < c.end) { /* draft-07: key=integer members */
      const char *k;
      size_t kn;
      int64_t x;
      if (sf_key(&c, &k, &kn) || !at(&c, '=')) return -1;
      c.s++;
      if (read_digits(&c, SECONDS_MAX, &x)) return -1;
      while (at(&c, ';')) { /* parameters (w=...): skipped */
        c.s++;
        while (c.s < c.end && *c.s != ';' && *c.s != ',') c.s++;
      }
      if (kn == 5 && !memcmp(k, "limit", 5)) lim = x;
      if (kn == 9 && !memcmp(k, "remaining", 9)) rem = x;
      if (kn == 5 && !memcmp(k, "reset", 5)) reset = x;
      skip_ows(&c);
      if (c.s == c.end) break;
      if (*c.s != ',') return -1;
      c.s++;
      skip_ows(&c);
    }
    keep_least(&next->limit, lim);
    keep_least(&next->remaining, rem);
    if (reset >= 0) keep_most(&next->reset_ns, reset * NS_S);
    return 0;
  }
  sf_item best = {0}, it;
  int have = 0;
  while (c.s < c.end) {
    if (sf_next(&c, &it)) return -1;
    if (it.r >= 0 && (!have || it.r < best.r)) {
      best = it;
      have = 1;
    }
  }
  if (!have) return -1; /* r is required */
  keep_least(&next->remaining, best.r);
  if (best.t >= 0) keep_most(&next->reset_ns, best.t * NS_S);
  set_name(next, best.name, best.name_len);
  return 0;
}

/* RateLimit-Policy: the item named as the RateLimit item was (else the
   first); draft-07's bare "10;w=1" items too. */
static int ratelimit_policy(sl_rate_info *next, const char *v, size_t n) {
  cur c = {v, v + n};
  sf_item pick = {0}, it;
  int have = 0;
  size_t want = strlen(next->policy);
  while (c.s < c.end) {
    if (sf_next(&c, &it)) return -1;
    if (it.q < 0) it.q = it.bare; /* draft-07: the item is the quota */
    int named = want && it.name && it.name_len == want &&
                !memcmp(it.name, next->policy, want);
    if (!have || named) {
      pick = it;
      have = 1;
      if (named) break;
    }
  }
  if (!have) return -1;
  keep_least(&next->limit, pick.q);
  if (pick.w >= 0) keep_most(&next->window_ns, pick.w * NS_S);
  return 0;
}

/* X-RateLimit-Reset: delta seconds, or an epoch time in seconds (from
   10^9) or milliseconds (from 10^12). */
static int64_t reset_of(int64_t v, int64_t now) {
  int64_t at_ns;
  if (v >= INT64_C(1000000000000))
    at_ns = v > SL_TIME_MAX_NS / 1000000 ? SL_TIME_MAX_NS : v * 1000000;
  else if (v >= INT64_C(1000000000))
    at_ns = v > SECONDS_MAX ? SL_TIME_MAX_NS : v * NS_S;
  else
    return v * NS_S;
  return at_ns > now ? at_ns - now : 0;
}

/* The headers this file reads, by name. */
enum { H_RETRY, H_RL, H_RLP, H_LIMIT, H_REMAINING, H_RESET };
static const struct {
  const char *name;
  int kind;
} names[] = {
    {"retry-after", H_RETRY},          {"ratelimit", H_RL},
    {"ratelimit-policy", H_RLP},       {"ratelimit-limit", H_LIMIT},
    {"ratelimit-remaining", H_REMAINING}, {"ratelimit-reset", H_RESET},
    {"x-ratelimit-limit", H_LIMIT},    {"x-ratelimit-remaining", H_REMAINING},
    {"x-ratelimit-reset", H_RESET},
};

int sl_rate_info_header(sl_rate_info *info, const char *name, size_t name_len,
                        const char *value, size_t value_len, int64_t now_ns) {
  if (!info || !name || (!value && value_len)) return SL_EINVAL;
  int kind = -1;
  for (size_t i = 0; i < sizeof names / sizeof names[0] && kind < 0; i++)
    if (strlen(names[i].name) == name_len &&
        !strncasecmp(name, names[i].name, name_len))
      kind = names[i].kind;
  if (kind < 0) return 0;
  if (value_len > VALUE_MAX || value_len == 0) return SL_EINVAL;
  sl_rate_info next = *info;
  int64_t v;
  int rc = 0;
  switch (kind) {
  case H_RETRY:
    rc = retry_after(value, value_len, now_ns, &v);
    if (!rc) keep_most(&next.retry_after_ns, v);
    break;
  case H_RL:
    rc = ratelimit(&next, value, value_len);
    break;
  case H_RLP:
    rc = whole_number(value, value_len, SECONDS_MAX, &v) == 0
             ? (keep_least(&next.limit, v), 0)
             : ratelimit_policy(&next, value, value_len);
    break;
  case H_LIMIT:
  case H_REMAINING:
  case H_RESET:
    /* A bare integer; some servers list several ("100, 100;w=60"): the
       first is the one in force. */
    {
      cur c = {value, value + value_len};
      skip_ows(&c);
      rc = read_digits(&c, kind == H_RESET ? MS_MAX : SECONDS_MAX, &v);
      if (!rc) {
        skip_ows(&c);
        if (c.s != c.end && *c.s != ',' && *c.s != ';') rc = -1;
      }
    }
    if (rc) break;
    if (kind == H_LIMIT) keep_least(&next.limit, v);
    if (kind == H_REMAINING) keep_least(&next.remaining, v);
    if (kind == H_RESET) keep_most(&next.reset_ns, reset_of(v, now_ns));
    break;
  }
  if (rc) return SL_EINVAL;
  *info = next;
  return 1;
}

/* ---- backoff and pacing ---- */

/* Uniform in [0, n], by rejection (no modulo bias). */
static uint64_t uniform(uint64_t n, sl_random_fn random, void *ud) {
  if (n == UINT64_MAX) n--; /* [0, 2^64-2]: close enough */
  uint64_t range = n + 1, limit = UINT64_MAX - UINT64_MAX % range;
  for (;;) {
    uint64_t r;
    if (random) {
      r = random(ud);
    } else {
      randombytes_buf(&r, sizeof r);
    }
    if (r < limit) return r % range;
  }
}

/* What the server asked a client to wait, from info: its Retry-After, or
   with nothing remaining, the time to the reset. */
static int64_t server_wait(const sl_rate_info *info) {
  if (!info) return 0;
  int64_t w = info->retry_after_ns > 0 ? info->retry_after_ns : 0;
  if (info->remaining == 0 && info->reset_ns > w) w = info->reset_ns;
  return w;
}

int64_t sl_backoff_delay(int64_t base_ns, int64_t cap_ns, unsigned attempt,
                         const sl_rate_info *info, sl_random_fn random,
                         void *ud) {
  if (base_ns < 0) base_ns = 0;
  if (cap_ns < 0) cap_ns = 0;
  int64_t hi = base_ns;
  for (unsigned i = 0; i < attempt && hi < cap_ns; i++)
    hi = hi > cap_ns / 2 ? cap_ns : hi * 2;
  if (hi > cap_ns) hi = cap_ns;
  int64_t jitter = (int64_t)uniform((uint64_t)hi, random, ud);
  int64_t floor = server_wait(info);
  return floor > SL_TIME_MAX_NS - jitter ? SL_TIME_MAX_NS : floor + jitter;
}

int64_t sl_pace_interval(const sl_rate_info *info) {
  if (!info || info->remaining < 0 || info->reset_ns < 0) return 0;
  if (info->remaining == 0) return server_wait(info);
  int64_t r = info->remaining;
  return info->reset_ns / r + (info->reset_ns % r != 0);
}
