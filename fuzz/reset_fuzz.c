/*
 * reset_fuzz.c — libFuzzer harness for the messages approximate mode's
 * resets are published in (approx_reset_message, src/fleet/approx.c): the
 * sync thread reads them from a Redis channel, where any client of that
 * Redis can publish.
 *
 * One approximate-mode engine, with a rule and an ad-hoc policy whose
 * states and unpushed charges exist for a few keys. Each input is read
 * twice: as a whole message (exact-size copy: a read past the end is an
 * ASan report), and as the body after a valid header from another daemon.
 * Properties beyond "no crash, no leak, no sanitizer report":
 *   - the answer is -1 (not a reset message) or the states dropped, at
 *     most one per "LEN:" in the body (so at most the body's bytes / 2);
 *   - a message with this daemon's own header is skipped (0);
 *   - the same message read again is still a message (>= 0), and the
 *     engine still decides afterwards.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/backend.h"
#include "fleet/approx.h"
#include "rules/config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define NOW (INT64_C(1767225600) * 1000000000) /* 2026-01-01T00:00:00Z */

static const char yaml[] =
    "domain: d\n"
    "descriptors:\n"
    "  - key: k\n"
    "    rate_limit: {policy: \"fixed_window:10/h\"}\n";

static engine *e;
static engine_thread *t;

static void charge(void) {
  static const char *const keys[] = {"a", "user:42", "", "b"};
  for (size_t i = 0; i < sizeof keys / sizeof *keys; i++) {
    eng_result r;
    eng_query adhoc = {.kind = ENG_QUERY_POLICY, .key = keys[i],
                       .key_len = strlen(keys[i]), .spec = "gcra:5/s",
                       .spec_len = 8, .cost = 1, .now = NOW};
    engine_decide(t, &adhoc, &r, NULL, NULL);
    eng_descriptor d;
    memset(&d, 0, sizeof d);
    d.hits = -1;
    d.entries[0] = (cfg_entry){"k", 1, keys[i], strlen(keys[i])};
    d.n = 1;
    eng_request req = {"d", 1, &d, 1, 1};
    eng_query rules = {.kind = ENG_QUERY_RULES, .req = &req, .now = NOW};
    if (engine_decide(t, &rules, &r, NULL, NULL)) abort();
  }
}

static void setup(void) {
  cfg_errors ce = {0};
  sl_config *c = config_load_string(yaml, sizeof yaml - 1, "f.yaml", &ce);
  if (!c) abort();
  engine_opts o = {.backend = fleet_approx_new(&(fleet_opts){0})};
  char err[256];
  e = engine_new(&o, c, err, sizeof err);
  if (!e || !(t = engine_thread_new(e))) abort();
}

static int reset(const uint8_t *p, size_t n) {
  uint8_t *copy = malloc(n ? n : 1);
  if (!copy) abort();
  if (n) memcpy(copy, p, n);
  int r = approx_reset_message(fleet_approx_of(engine_backend(e)), copy, n);
  free(copy);
  return r;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!e) setup();
  charge();
  int r = reset(data, size);
  if (r < -1 || (r > 0 && (size_t)r > size / 2)) abort();

  static const char head[] = "sluice-reset 00000000000000ff\n";
  size_t hl = sizeof head - 1;
  uint8_t *msg = malloc(hl + size + 1);
  if (!msg) abort();
  memcpy(msg, head, hl);
  if (size) memcpy(msg + hl, data, size);
  charge();
  r = reset(msg, hl + size);
  if (r < 0 || (size_t)r > size / 2) abort();
  if (reset(msg, hl + size) < 0) abort(); /* again: still a message */
  free(msg);

  /* And the engine still decides. */
  eng_result out;
  eng_query peek = {.kind = ENG_QUERY_POLICY, .key = "a", .key_len = 1,
                    .spec = "gcra:5/s", .spec_len = 8, .cost = 0, .now = NOW};
  if (engine_decide(t, &peek, &out, NULL, NULL)) abort();
  return 0;
}
