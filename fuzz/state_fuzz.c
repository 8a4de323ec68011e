/*
 * state_fuzz.c — libFuzzer harness for the state file's loader
 * (store_snapshot_load, src/store/snapshot.c): the daemon reads
 * --state-file at start, and a file cut short by a crash, damaged on disk
 * or written by someone else must be an error, never a crash.
 *
 * One store with a limiter of every algorithm, named "tb", "lb", "fw",
 * "sl", "sw", "gc". Each input is loaded as it is (exact-size copy: a read
 * past the end is an ASan report), and, so that the fuzzer reaches past
 * the checksum, as the records after a valid header naming the six with a
 * valid end and checksum appended. Properties beyond "no crash, no leak,
 * no sanitizer report":
 *   - a failed load says where ("offset N: ...") and restores nothing;
 *   - after a load the store still decides every limiter's keys.
 */
#include <sodium.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/le.h"
#include "limiter.h"
#include "store/snapshot.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define NOW (INT64_C(1767225600) * 1000000000) /* 2026-01-01T00:00:00Z */
#define NALGO 6

static const char *const specs[NALGO] = {
    "token_bucket:5/m", "leaky_bucket:5/m",  "fixed_window:5/m",
    "sliding_log:5/m",  "sliding_window:5/m", "gcra:5/m:burst=3"};
static const char *const names[NALGO] = {"tb", "lb", "fw", "sl", "sw", "gc"};

static int resolve(void *ud, const char *name, size_t len,
                   const algo_policy **p, uint16_t *id) {
  sl_limiter **lim = ud;
  for (int i = 0; i < NALGO; i++)
    if (len == 2 && !memcmp(name, names[i], 2)) {
      limiter_ident(lim[i], p, id);
      return 0;
    }
  return -1;
}

static void put(uint8_t *b, size_t *n, uint64_t v, int bytes) {
  le_put(b + *n, v, (size_t)bytes);
  *n += (size_t)bytes;
}

/* A header naming the six as ids 0..5, data, and a valid end. */
static uint8_t *framed(const uint8_t *data, size_t size, size_t *len) {
  uint8_t *b = malloc(32 + NALGO * 6 + size + 1 + 8 + 32);
  if (!b) return NULL;
  size_t n = 0;
  memcpy(b, "SLUICEST", 8);
  n = 8;
  put(b, &n, 1, 4);
  put(b, &n, 32, 4);
  put(b, &n, (uint64_t)NOW, 8);
  put(b, &n, NALGO, 4);
  put(b, &n, 0, 4);
  for (int i = 0; i < NALGO; i++) {
    put(b, &n, (uint64_t)i, 2);
    put(b, &n, 2, 2);
    memcpy(b + n, names[i], 2);
    n += 2;
  }
  memcpy(b + n, data, size);
  n += size;
  /* The record count is the fuzzer's to guess: take its first byte. */
  b[n++] = 'E';
  put(b, &n, size ? data[0] % 4 : 0, 8);
  crypto_generichash(b + n, 32, b, n, NULL, 0);
  *len = n + 32;
  return b;
}

static void load(const uint8_t *buf, size_t len) {
  sl_store_options o;
  sl_store_options_init(&o);
  o.max_memory = 4 << 20;
  sl_store *s;
  if (sl_store_new(&o, &s)) abort();
  sl_limiter *lim[NALGO];
  for (int i = 0; i < NALGO; i++) {
    sl_policy p;
    if (sl_policy_parse(specs[i], &p, NULL, 0) || sl_limiter_new(s, &p, &lim[i]))
      abort();
  }
  store_snap_stats st;
  char err[256] = "";
  int rc = store_snapshot_load(s, buf, len, resolve, lim, NOW, &st, err,
                               sizeof err);
  sl_store_stats ss;
  sl_store_stats_get(s, &ss);
  if (rc && (!strstr(err, "offset ") || ss.keys != 0)) abort();
  for (int i = 0; i < NALGO; i++) {
    sl_decision d;
    for (int k = 0; k < 3; k++)
      if (sl_limiter_take(lim[i], "\x01\x00", (size_t)k, 1, NOW + k, &d))
        abort();
    sl_limiter_free(lim[i]);
  }
  sl_store_free(s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  uint8_t *copy = malloc(size ? size : 1);
  if (!copy) return 0;
  memcpy(copy, data, size);
  load(copy, size);
  free(copy);
  size_t len;
  uint8_t *b = framed(data, size, &len);
  if (b) load(b, len);
  free(b);
  return 0;
}
