/*
 * quickstart.c — the README's C example: one store, one limiter, decisions.
 * Built and run by `make check` so the documented usage cannot rot.
 *
 *   cc -Iinclude examples/quickstart.c build/libsluice.a -lsodium -lpthread
 *   cc examples/quickstart.c $(pkg-config --cflags --libs sluice)  (installed)
 */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "sluice.h"

static int64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int main(void) {
  sl_store *store;
  sl_limiter *lim;
  sl_policy policy;
  char err[128];

  if (sl_policy_parse("gcra:5/s:burst=10", &policy, err, sizeof err)) {
    fprintf(stderr, "policy: %s\n", err);
    return 1;
  }
  sl_store_options opts;
  sl_store_options_init(&opts);
  opts.max_memory = 64 << 20; /* never more than 64 MiB, whatever the keys */
  int rc = sl_store_new(&opts, &store);
  if (!rc) rc = sl_limiter_new(store, &policy, &lim);
  if (rc) {
    fprintf(stderr, "sluice: %s\n", sl_strerror(rc));
    return 1;
  }

  const char *key = "api-key:42";
  int64_t t = now_ns();
  for (int i = 1; i <= 12; i++) {
    sl_decision d;
    rc = sl_limiter_take(lim, key, strlen(key), 1, t, &d);
    if (rc) {
      fprintf(stderr, "take: %s\n", sl_strerror(rc));
      return 1;
    }
    printf("request %2d: %s remaining=%lld retry_after=%lldms\n", i,
           d.allowed ? "allow" : "deny ", (long long)d.remaining,
           (long long)((d.retry_after_ns + 999999) / 1000000));
  }
  sl_limiter_free(lim);
  sl_store_free(store);
  return 0;
}
