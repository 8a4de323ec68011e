/*
 * headers_fuzz.c — libFuzzer harness for the client's header parsers
 * (src/client.c: sl_rate_info_header), which read what any server sends.
 *
 * The input is a header name, a NUL, then its value (no NUL: the value is
 * tried under every name the parser knows). Properties beyond "no crash,
 * no sanitizer report": a refused value leaves the struct unchanged; an
 * accepted one leaves every figure -1 or within 0..SL_TIME_MAX_NS, a
 * NUL-terminated policy name, and backoff and pacing in range.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sluice.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *names[] = {"Retry-After", "RateLimit", "RateLimit-Policy",
                              "RateLimit-Remaining", "X-RateLimit-Reset",
                              "x-ratelimit-limit"};

static void check(const sl_rate_info *ri) {
  const int64_t f[] = {ri->limit, ri->remaining, ri->reset_ns, ri->window_ns,
                       ri->retry_after_ns};
  for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
    if (f[i] < -1 || f[i] > SL_TIME_MAX_NS) abort();
  if (!memchr(ri->policy, '\0', sizeof ri->policy)) abort();
  int64_t p = sl_pace_interval(ri);
  if (p < 0 || p > SL_TIME_MAX_NS) abort();
  uint64_t seed = 1;
  int64_t d = sl_backoff_delay(1000000, 1000000000, 5, ri, NULL, NULL);
  (void)seed;
  if (d < 0 || d > SL_TIME_MAX_NS + 1000000000) abort();
}

static void one(const char *name, size_t nlen, const uint8_t *v, size_t vlen) {
  sl_rate_info ri, before;
  sl_rate_info_init(&ri);
  for (int k = 0; k < 2; k++) { /* twice: merging into known figures */
    before = ri;
    int rc = sl_rate_info_header(&ri, name, nlen, (const char *)v, vlen,
                                 INT64_C(1767225600) * 1000000000);
    if (rc != 1 && memcmp(&before, &ri, sizeof ri)) abort();
    check(&ri);
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const uint8_t *nul = memchr(data, '\0', size);
  if (nul) {
    size_t n = (size_t)(nul - data);
    one((const char *)data, n, nul + 1, size - n - 1);
    return 0;
  }
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    one(names[i], strlen(names[i]), data, size);
  return 0;
}
