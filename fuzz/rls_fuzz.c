/*
 * rls_fuzz.c — libFuzzer harness for the gRPC front end's messages
 * (src/server/grpc_msg.c): envoy's RateLimitRequest as any client of
 * --grpc can send it, decoded by protobuf-c, translated into an engine
 * request and decided; the response encoded; and the same bytes as a
 * health check request.
 *
 * One memory-mode engine with a rule by envoy's unit, a sluice policy and
 * a blocked value. Properties beyond "no crash, no leak, no sanitizer
 * report":
 *   - the decoder answers OK or INVALID_ARGUMENT with a message; on OK the
 *     request is within the bounds (descriptors, entries, key lengths);
 *   - a decoded request is decided without an internal error, and its
 *     response decodes again with one status per descriptor asked;
 *   - the health check answers OK, NOT_FOUND or INVALID_ARGUMENT.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <envoy/service/ratelimit/v3/rls.pb-c.h>

#include "rules/config.h"
#include "server/grpc_msg.h"
#include "server/limit_headers.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define NOW (INT64_C(1767225600) * 1000000000) /* 2026-01-01T00:00:00Z */
#define MAX_KEY 64

static const char yaml[] =
    "domain: d\n"
    "descriptors:\n"
    "  - key: k\n"
    "    rate_limit: {unit: minute, requests_per_unit: 5}\n"
    "    descriptors:\n"
    "      - key: s\n"
    "        rate_limit: {policy: \"gcra:10/s:burst=3\"}\n"
    "  - key: k\n"
    "    value: blocked\n"
    "    rate_limit: {unit: second, requests_per_unit: 0}\n";

static engine *e;
static engine_thread *t;

static void setup(void) {
  cfg_errors ce = {0};
  sl_config *c = config_load_string(yaml, sizeof yaml - 1, "f.yaml", &ce);
  if (!c) abort();
  engine_opts o = {0};
  char err[256];
  e = engine_new(&o, c, err, sizeof err);
  if (!e || !(t = engine_thread_new(e))) abort();
}

/* The decoded request is within the bounds rls_decode promises. */
static void check_bounds(const rls_req *r) {
  if (r->asked == 0 || r->asked > ENG_MAX_DESCRIPTORS || r->er.n > r->asked)
    abort();
  if (!r->er.domain_len || r->er.domain_len > MAX_KEY) abort();
  for (size_t i = 0; i < r->er.n; i++) {
    const eng_descriptor *d = &r->ds[i];
    if (d->n == 0 || d->n > ENG_MAX_ENTRIES) abort();
    for (size_t k = 0; k < d->n; k++)
      if (!d->entries[k].key_len || d->entries[k].key_len > MAX_KEY ||
          d->entries[k].value_len > MAX_KEY)
        abort();
  }
}

/* Decides r and encodes the answer, which must decode again. */
static void decide_and_answer(const rls_req *r) {
  eng_result res;
  int rc = 0;
  if (r->er.n) {
    eng_query q = {.kind = ENG_QUERY_RULES, .req = &r->er,
                   .overrides = r->ov, .now = NOW};
    rc = engine_decide(t, &q, &res, NULL, NULL);
    if (rc && rls_status_of(rc) == RPC_INTERNAL && rc != SL_ENOMEM) abort();
  } else {
    res.allowed = 1;
    res.n = 0;
    res.worst = -1;
  }
  if (rc && rc != ENG_EDOMAIN) return; /* answered with a status */
  size_t len = 0;
  uint8_t *body = rls_encode(r, rc, &res, HDR_IETF | HDR_X, NOW, &len);
  if (!body) abort();
  Envoy__Service__Ratelimit__V3__RateLimitResponse *m =
      envoy__service__ratelimit__v3__rate_limit_response__unpack(NULL, len,
                                                                 body);
  if (!m || m->n_statuses != r->asked) abort();
  envoy__service__ratelimit__v3__rate_limit_response__free_unpacked(m, NULL);
  free(body);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!e) setup();
  /* An exact-size copy: a read past the end is an ASan report. */
  uint8_t *copy = malloc(size ? size : 1);
  if (!copy) abort();
  if (size) memcpy(copy, data, size);
  rls_req r;
  char err[256] = "";
  int st = rls_decode(&r, copy, size, MAX_KEY, err, sizeof err);
  if (st == RPC_OK) {
    check_bounds(&r);
    decide_and_answer(&r);
  } else if (st != RPC_INVALID_ARGUMENT || !err[0]) {
    abort();
  }
  rls_free(&r);
  /* The daemon decodes in an arena (the worker's, reused): the same
     verdict, and what does not fit goes to malloc. */
  static rls_arena *arena;
  if (!arena && !(arena = rls_arena_new())) abort();
  char err2[256] = "";
  if (rls_decode_in(&r, arena, copy, size, MAX_KEY, err2, sizeof err2) != st)
    abort();
  if (st == RPC_OK) check_bounds(&r);
  rls_free(&r);
  uint8_t *out = NULL;
  size_t out_len = 0;
  st = health_answer(copy, size, 0, &out, &out_len);
  if (st != RPC_OK && st != RPC_NOT_FOUND && st != RPC_INVALID_ARGUMENT)
    abort();
  if ((st == RPC_OK) != (out != NULL)) abort();
  free(out);
  free(copy);
  engine_thread_quiesce(t);
  return 0;
}
