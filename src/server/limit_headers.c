/*
 * limit_headers.c — the rate limit headers of a decision (limit_headers.h):
 * the IETF draft's RateLimit-Policy and RateLimit as Structured Fields,
 * X-RateLimit-Limit/Remaining/Used/Reset, X-RateLimit-Unchecked when a
 * limit failed open, and Retry-After on a denial. One
 * writer for HTTP's answers and gRPC's response_headers_to_add.
 */
#include <string.h>

#include "../base/fmt.h"
#include "../base/strbuf.h"
#include "limit_headers.h"

/* A policy's window in seconds for RateLimit-Policy's w: the period for
   windows; for buckets the time a full burst takes to refill. */
static int64_t window_s(const sl_policy *p) {
  int bucket = p->algo == SL_TOKEN_BUCKET || p->algo == SL_LEAKY_BUCKET ||
               p->algo == SL_GCRA;
  __int128 ns = bucket ? (__int128)p->period_ns * (p->burst ? p->burst
                                                            : p->limit) /
                             p->limit
                       : p->period_ns;
  int64_t s = (int64_t)(ns / 1000000000 + (ns % 1000000000 != 0));
  return s > 0 ? s : 1;
}

/* A Structured Field String: printable ASCII, '"' and '\' escaped. */
static void sf_str(strbuf *b, const char *s) {
  STRBUF_LIT(b, "\"");
  for (; *s; s++) {
    char ch = (*s >= 0x20 && *s < 0x7f) ? *s : '_';
    if (ch == '"' || ch == '\\') STRBUF_LIT(b, "\\");
    strbuf_add(b, &ch, 1);
  }
  STRBUF_LIT(b, "\"");
}

const char *limit_status_name(const eng_status *s) {
  if (!s->limit) return s->policy_str;
  return s->limit->name ? s->limit->name : s->limit->rule;
}

/* RateLimit-Policy and RateLimit: enforced rules first, the most
   restrictive leading; one item per name. */
static void ietf_headers(const eng_result *r, limit_header_fn add, void *ud) {
  const eng_status *worst = &r->st[r->worst];
  char pol_mem[512], cur_mem[512];
  strbuf pol, cur;
  strbuf_init_with(&pol, pol_mem, sizeof pol_mem);
  strbuf_init_with(&cur, cur_mem, sizeof cur_mem);
  const eng_status *order[ENG_MAX_STATUSES];
  size_t n = 0;
  order[n++] = worst;
  for (int pass = 0; pass < 2; pass++)
    for (size_t i = 0; i < r->n; i++) {
      const eng_status *s = &r->st[i];
      if (s == worst || s->unlimited || s->shadow != pass) continue;
      int dup = 0;
      for (size_t k = 0; k < n; k++)
        dup |= !strcmp(limit_status_name(order[k]), limit_status_name(s));
      if (!dup) order[n++] = s;
    }
  for (size_t k = 0; k < n; k++) {
    const eng_status *s = order[k];
    if (pol.len) STRBUF_LIT(&pol, ", ");
    if (cur.len) STRBUF_LIT(&cur, ", ");
    sf_str(&pol, limit_status_name(s));
    STRBUF_LIT(&pol, ";q=");
    strbuf_add_i64(&pol, s->d.limit);
    if (s->policy && !(s->limit && s->limit->blocked)) {
      STRBUF_LIT(&pol, ";w=");
      /* A calendar window: this one's length (months differ). */
      strbuf_add_i64(&pol, s->window_ns ? ns_to_s_up(s->window_ns)
                                        : window_s(s->policy));
    }
    if (s->unchecked) { /* its policy, but no current figures */
      if (cur.len >= 2 && !memcmp(cur.p + cur.len - 2, ", ", 2))
        cur.len -= 2;
      continue;
    }
    sf_str(&cur, limit_status_name(s));
    STRBUF_LIT(&cur, ";r=");
    strbuf_add_i64(&cur, s->d.remaining);
    STRBUF_LIT(&cur, ";t=");
    strbuf_add_i64(&cur, ns_to_s_up(s->d.reset_ns));
  }
  if (!pol.oom && !cur.oom) {
    add(ud, "ratelimit-policy", pol.p, pol.len);
    if (cur.len) add(ud, "ratelimit", cur.p, cur.len);
  }
  strbuf_free(&pol);
  strbuf_free(&cur);
}

/* One header whose value is the integer v. */
static void int_header(limit_header_fn add, void *ud, const char *name,
                       int64_t v) {
  char num[24];
  add(ud, name, num, (size_t)fmt_i64(num, v));
}

void limit_headers(const eng_result *r, int style, int64_t now,
                   limit_header_fn add, void *ud) {
  if (r->worst < 0) return;
  const eng_status *worst = &r->st[r->worst];
  if (worst->unlimited) return;
  if (style & HDR_IETF) ietf_headers(r, add, ud);
  if (style & HDR_X) {
    int_header(add, ud, "x-ratelimit-limit", worst->d.limit);
    if (!worst->unchecked) { /* not checked: nothing true to say */
      int_header(add, ud, "x-ratelimit-remaining", worst->d.remaining);
      /* GitHub's: what this window has used, limit - remaining. */
      int64_t used = worst->d.limit - worst->d.remaining;
      int_header(add, ud, "x-ratelimit-used", used > 0 ? used : 0);
      int_header(add, ud, "x-ratelimit-reset",
                 ns_to_s_up(now + worst->d.reset_ns));
    }
  }
  for (size_t i = 0; style && i < r->n; i++)
    if (r->st[i].unchecked && !r->st[i].shadow) {
      /* A limit failed open (on_store_error: allow): say so, whatever
         the style, rather than show figures nobody counted. */
      add(ud, "x-ratelimit-unchecked", "store_error", 11);
      break;
    }
  if (!r->allowed && worst->d.retry_after_ns >= 0) {
    int64_t s = ns_to_s_up(worst->d.retry_after_ns);
    int_header(add, ud, "retry-after", s > 0 ? s : 1);
  }
}
