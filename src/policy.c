/*
 * policy.c — the policy syntax: "ALGORITHM:LIMIT/PERIOD[:burst=N]".
 *
 * One grammar for the CLI, the config file, RESP and HTTP:
 *   ALGORITHM  token_bucket | leaky_bucket | fixed_window | sliding_log |
 *              sliding_window | gcra
 *   LIMIT      1..4294967295
 *   PERIOD     [N]UNIT, UNIT one of ms s m h d; a bare unit means 1 of it
 *              (so a period is always a whole number of milliseconds)
 *   burst=N    bucket algorithms and gcra only; default LIMIT
 * and, for requests in flight rather than a rate,
 * "concurrency:N[:lease=DURATION]": N 1..SL_CONCURRENCY_MAX, DURATION
 * [N]UNIT as a period (default SL_LEASE_DEFAULT_NS).
 * Every error names the part it is about, quoted as the user wrote it.
 */
#include <stdio.h>
#include <string.h>

#include "algo/algo.h"
#include "base/duration.h"

/*
 * Reads the decimal digits at *s into *out, advancing *s. Returns the number
 * of digits, or -1 if the value exceeds max.
 */
static int read_uint(const char **s, uint64_t max, uint64_t *out) {
  uint64_t v = 0;
  int n = 0;
  while (**s >= '0' && **s <= '9') {
    unsigned dgt = (unsigned)(**s - '0');
    if (v > (max - dgt) / 10) {
      while (**s >= '0' && **s <= '9') (*s)++;
      return -1;
    }
    v = v * 10 + dgt;
    (*s)++;
    n++;
  }
  *out = v;
  return n;
}

/* Length of the token at s, up to the next ':' or '/' or the end. */
static int token_len(const char *s) { return (int)strcspn(s, ":/"); }

/*
 * Reads a duration [N]UNIT at *s (up to the next ':' or the end) into *ns,
 * advancing *s; `what` names it in errors ("period", "lease"). 0, or
 * SL_EPOLICY with the message in err.
 */
static int read_duration(const char **s, const char *what, int64_t *ns,
                         char *err, size_t err_len) {
  const char *per = *s;
  int per_len = (int)strcspn(per, ":"); /* as the user wrote it, for errors */
  uint64_t count = 1;
  int digits = read_uint(s, (uint64_t)INT64_MAX, &count);
  if (digits < 0)
    return algo_policy_error(err, err_len, "%s '%.*s' is too large", what,
                             per_len, per);
  if (digits == 0) count = 1; /* a bare unit means 1 of it */
  int ulen = (int)strspn(*s, "abcdefghijklmnopqrstuvwxyz");
  int64_t unit = duration_unit_ns(*s, (size_t)ulen);
  if (!unit)
    return algo_policy_error(
        err, err_len, "%s '%.*s' needs a unit: ms, s, m, h or d (e.g. 15m)",
        what, per_len, per);
  if (count == 0)
    return algo_policy_error(err, err_len, "%s '%.*s' must be positive", what,
                             digits + ulen, per);
  if (count > (uint64_t)(SL_PERIOD_MAX_NS / unit))
    return algo_policy_error(err, err_len, "%s '%.*s' is longer than 3650 days",
                             what, digits + ulen, per);
  *ns = (int64_t)count * unit;
  *s += ulen;
  return 0;
}

/* "concurrency:N[:lease=DURATION]", s just after the algorithm's name. */
static int parse_concurrency(const char *spec, const char *s, sl_policy *out,
                             char *err, size_t err_len) {
  /* Zeroed whole, padding included, as the other algorithms' policies
     are (sl_policy_parse's "{0}"), so that equal policies have equal
     bytes. */
  sl_policy p;
  memset(&p, 0, sizeof p);
  p.algo = SL_CONCURRENCY;
  p.period_ns = SL_LEASE_DEFAULT_NS;
  if (*s != ':')
    return algo_policy_error(err, err_len,
                             "missing ':N' after 'concurrency' in '%s' "
                             "(concurrency:N[:lease=DURATION])",
                             spec);
  s++;
  const char *lim = s;
  uint64_t v;
  int digits = read_uint(&s, SL_CONCURRENCY_MAX, &v);
  if (digits < 0)
    return algo_policy_error(err, err_len, "limit '%.*s' is too large (max %u)",
                             token_len(lim), lim, SL_CONCURRENCY_MAX);
  if (digits > 0 && *s == '/')
    return algo_policy_error(err, err_len,
                             "concurrency has no period ('%s'): it counts "
                             "requests in flight (concurrency:N"
                             "[:lease=DURATION])",
                             lim);
  if (digits == 0 || (*s != ':' && *s != '\0'))
    return algo_policy_error(err, err_len,
                             "limit '%.*s' is not a positive integer",
                             token_len(lim), lim);
  if (v == 0)
    return algo_policy_error(err, err_len, "limit '%.*s' must be positive",
                             digits, lim);
  p.limit = (uint32_t)v;
  if (*s == ':') {
    s++;
    if (strncmp(s, "lease=", 6) != 0)
      return algo_policy_error(err, err_len,
                               "unexpected '%s' after the limit "
                               "(only ':lease=DURATION' may follow)",
                               s);
    s += 6;
    int rc = read_duration(&s, "lease", &p.period_ns, err, err_len);
    if (rc) return rc;
    if (*s != '\0')
      return algo_policy_error(err, err_len, "unexpected '%s' after the lease",
                               s);
  }
  int rc = sl_policy_validate(&p, err, err_len);
  if (rc == 0) *out = p;
  return rc;
}

static int is_window(sl_algo a) {
  return a == SL_FIXED_WINDOW || a == SL_SLIDING_LOG || a == SL_SLIDING_WINDOW;
}

int sl_policy_parse(const char *spec, sl_policy *out, char *err,
                    size_t err_len) {
  if (!spec || !out) return algo_policy_error(err, err_len, "no policy given");
  sl_policy p = {0};
  const char *s = spec;

  /* ALGORITHM */
  int n = (int)strcspn(s, ":");
  int found = 0;
  for (int a = 0; a < SL_ALGO_COUNT; a++) {
    const char *name = sl_algo_name((sl_algo)a);
    if ((int)strlen(name) == n && strncmp(s, name, (size_t)n) == 0) {
      p.algo = (sl_algo)a;
      found = 1;
    }
  }
  if (!found) {
    if (s[n] != ':')
      return algo_policy_error(
          err, err_len, "policy '%s' is not ALGORITHM:LIMIT/PERIOD[:burst=N]",
          spec);
    return algo_policy_error(
        err, err_len,
        "unknown algorithm '%.*s' (expected token_bucket, "
        "leaky_bucket, fixed_window, sliding_log, sliding_window, "
        "gcra or concurrency)",
        n, s);
  }
  s += n;
  if (p.algo == SL_CONCURRENCY) return parse_concurrency(spec, s, out, err, err_len);
  if (*s != ':')
    return algo_policy_error(err, err_len,
                             "missing ':LIMIT/PERIOD' after '%.*s'", n, spec);
  s++;

  /* LIMIT */
  const char *lim = s;
  uint64_t v;
  int digits = read_uint(&s, SL_LIMIT_MAX, &v);
  if (digits < 0)
    return algo_policy_error(err, err_len, "limit '%.*s' is too large (max %u)",
                             token_len(lim), lim, SL_LIMIT_MAX);
  if (digits == 0 || (*s != '/' && *s != '\0' && *s != ':'))
    return algo_policy_error(err, err_len,
                             "limit '%.*s' is not a positive integer",
                             token_len(lim), lim);
  if (v == 0)
    return algo_policy_error(err, err_len, "limit '%.*s' must be positive",
                             digits, lim);
  p.limit = (uint32_t)v;
  if (*s != '/')
    return algo_policy_error(
        err, err_len, "missing '/PERIOD' after limit '%.*s'", digits, lim);
  s++;

  /* PERIOD = [N]UNIT */
  int rc = read_duration(&s, "period", &p.period_ns, err, err_len);
  if (rc) return rc;

  /* [:burst=N] */
  if (*s == ':') {
    s++;
    if (strncmp(s, "burst=", 6) != 0)
      return algo_policy_error(err, err_len,
                               "unexpected '%s' after the period "
                               "(only ':burst=N' may follow)",
                               s);
    if (is_window(p.algo))
      return algo_policy_error(
          err, err_len,
          "burst is not allowed for %s (window algorithms have none)",
          sl_algo_name(p.algo));
    s += 6;
    const char *b = s;
    digits = read_uint(&s, SL_LIMIT_MAX, &v);
    if (digits < 0)
      return algo_policy_error(err, err_len, "burst '%s' is too large (max %u)",
                               b, SL_LIMIT_MAX);
    if (digits == 0 || *s != '\0')
      return algo_policy_error(err, err_len,
                               "burst '%s' is not a positive integer", b);
    if (v == 0)
      return algo_policy_error(err, err_len, "burst '%s' must be positive", b);
    p.burst = (uint32_t)v;
  } else if (*s != '\0') {
    return algo_policy_error(err, err_len, "unexpected '%s' after the period",
                             s);
  }
  if (!is_window(p.algo) && p.burst == 0) p.burst = p.limit;

  rc = sl_policy_validate(&p, err, err_len);
  if (rc == 0) *out = p;
  return rc;
}

int sl_policy_format(const sl_policy *policy, char *buf, size_t len) {
  algo_policy ap;
  if (algo_policy_compile(policy, &ap, NULL, 0) != 0) return SL_EINVAL;
  /* The largest unit that divides the period exactly. */
  const duration_unit *u = &duration_units[DURATION_NUNITS - 1];
  while (u > duration_units && ap.W % u->ns != 0) u--;
  int64_t count = ap.W / u->ns;
  char period[32];
  if (ap.pub.algo == SL_CONCURRENCY) {
    if (ap.W == SL_LEASE_DEFAULT_NS)
      return snprintf(buf, len, "concurrency:%u", ap.pub.limit);
    return snprintf(buf, len, "concurrency:%u:lease=%lld%s", ap.pub.limit,
                    (long long)count, u->name);
  }
  if (count == 1)
    snprintf(period, sizeof period, "%s", u->name);
  else
    snprintf(period, sizeof period, "%lld%s", (long long)count, u->name);
  if (!is_window(ap.pub.algo) && ap.pub.burst != ap.pub.limit)
    return snprintf(buf, len, "%s:%u/%s:burst=%u", ap.ops->name, ap.pub.limit,
                    period, ap.pub.burst);
  return snprintf(buf, len, "%s:%u/%s", ap.ops->name, ap.pub.limit, period);
}
