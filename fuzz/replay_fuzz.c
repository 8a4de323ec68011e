/*
 * replay_fuzz.c — libFuzzer harness for `sluice replay`'s trace reader
 * (untrusted: traces are access logs from anywhere). The bytes are a trace;
 * the first line picks one of a few policies so every algorithm is reached.
 * Properties: no crash or sanitizer report, and a trace that is accepted
 * yields exactly one output line per request.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../src/cli/cli.h"
#include "sluice.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *const policies[] = {
    "token_bucket:2/s:burst=10", "leaky_bucket:3/s:burst=5",
    "fixed_window:5/m",          "sliding_log:4/10s",
    "sliding_window:7/s",        "gcra:50/s:burst=100",
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size == 0 || size > 1 << 16) return 0;
  static sl_store *store;
  static sl_limiter *lims[6];
  if (!store) {
    if (sl_store_new(NULL, &store)) abort();
    for (int i = 0; i < 6; i++) {
      sl_policy p;
      if (sl_policy_parse(policies[i], &p, NULL, 0) ||
          sl_limiter_new(store, &p, &lims[i]))
        abort();
    }
  }
  sl_limiter *lim = lims[data[0] % 6];
  FILE *in = fmemopen((void *)(data + 1), size - 1, "r");
  char *outbuf = NULL;
  size_t outlen = 0;
  FILE *out = open_memstream(&outbuf, &outlen);
  FILE *devnull = fopen("/dev/null", "w");
  if (!in || !out || !devnull) abort();
  FILE *saved = stderr;
  stderr = devnull; /* bad lines are expected; their messages are noise */
  replay_counts n = {0};
  int rc = replay_stream(in, out, "fuzz", lim, NULL, store, &n);
  stderr = saved;
  fclose(in);
  fclose(out);
  fclose(devnull);
  size_t lines = 0;
  for (size_t i = 0; i < outlen; i++) lines += outbuf[i] == '\n';
  if (lines != n.requests || n.allowed + n.denied != n.requests) abort();
  if (rc != 0 && rc != 1) abort();
  free(outbuf);
  /* Keys from one input must not leak into the next. */
  for (int i = 0; i < 6; i++) {
    sl_limiter_free(lims[i]);
    sl_policy p;
    sl_policy_parse(policies[i], &p, NULL, 0);
    if (sl_limiter_new(store, &p, &lims[i])) abort();
  }
  return 0;
}
