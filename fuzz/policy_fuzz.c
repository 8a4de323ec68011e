/*
 * policy_fuzz.c — libFuzzer harness for the policy parser (untrusted: it
 * reads command lines today, config files and HTTP/RESP requests later).
 *
 * Properties beyond "no crash, no sanitizer report": a spec that parses has
 * a canonical spelling that parses back to the same policy, validates, and
 * decides requests (fresh key, full burst, over-burst is SL_ECOST; for
 * concurrency the "burst" is one lease).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sluice.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char spec[512];
  if (size >= sizeof spec) return 0;
  memcpy(spec, data, size);
  spec[size] = '\0';

  sl_policy p;
  char err[128];
  if (sl_policy_parse(spec, &p, err, sizeof err) != 0) {
    if (!memchr(err, '\0', sizeof err)) abort(); /* always terminated */
    return 0;
  }
  if (sl_policy_validate(&p, NULL, 0) != 0) abort();
  char canon[128];
  int n = sl_policy_format(&p, canon, sizeof canon);
  if (n <= 0 || (size_t)n >= sizeof canon) abort();
  sl_policy q;
  if (sl_policy_parse(canon, &q, NULL, 0) != 0) abort();
  /* Field by field: sl_policy has padding after burst, whose bytes the
     parser need not set (memcmp saw stack garbage under ASan). */
  if (p.algo != q.algo || p.limit != q.limit || p.burst != q.burst ||
      p.period_ns != q.period_ns)
    abort();

  static sl_store *store;
  if (!store && sl_store_new(NULL, &store) != 0) abort();
  sl_limiter *lim;
  if (sl_limiter_new(store, &p, &lim) != 0) abort();
  /* The largest cost one take may ask: the burst, or the limit; for
     concurrency, 1 (a lease is one slot; a cost above 1 is SL_ECOST). */
  int64_t cap = p.algo == SL_CONCURRENCY ? 1 : p.burst ? p.burst : p.limit;
  int64_t now = INT64_C(1) << 60;
  sl_decision d;
  if (sl_limiter_take(lim, "k", 1, cap, now, &d) != 0 || !d.allowed) abort();
  if (sl_limiter_take(lim, "k", 1, cap + 1, now, &d) != SL_ECOST) abort();
  sl_limiter_free(lim);
  return 0;
}
