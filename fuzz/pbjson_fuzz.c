/*
 * pbjson_fuzz.c — libFuzzer harness for the proto3 JSON mapping
 * (src/server/pb_json.c) that POST /json runs on every body: the bytes as
 * JSON, read as envoy's RateLimitRequest. Properties beyond "no crash, no
 * leak, no sanitizer report":
 *   - a refused body always says why (a non-empty message);
 *   - an accepted one is written back as JSON that reads as the same
 *     message (written again, the same text), and packs to protobuf bytes
 *     that protobuf-c unpacks.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <envoy/service/ratelimit/v3/rls.pb-c.h>

#include "server/pb_json.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define REQ_DESC envoy__service__ratelimit__v3__rate_limit_request__descriptor

/* m's compact JSON (malloc'd), or NULL. */
static char *text_of(const ProtobufCMessage *m) {
  json_t *o = pbj_encode(m);
  if (!o) abort();
  char *s = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
  json_decref(o);
  return s;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  json_t *v = json_loadb((const char *)data, size, JSON_REJECT_DUPLICATES, NULL);
  if (!v) return 0;
  char err[256] = "";
  ProtobufCMessage *m = pbj_decode(&REQ_DESC, v, err, sizeof err);
  json_decref(v);
  if (!m) {
    if (!err[0]) abort();
    return 0;
  }
  char *first = text_of(m);
  json_t *again = json_loads(first, 0, NULL);
  ProtobufCMessage *m2 = again ? pbj_decode(&REQ_DESC, again, err, sizeof err)
                               : NULL;
  json_decref(again);
  if (!m2) abort();
  char *second = text_of(m2);
  if (strcmp(first, second)) abort();
  size_t len = protobuf_c_message_get_packed_size(m);
  uint8_t *bytes = malloc(len ? len : 1);
  if (!bytes) abort();
  protobuf_c_message_pack(m, bytes);
  ProtobufCMessage *u = protobuf_c_message_unpack(&REQ_DESC, NULL, len, bytes);
  if (!u) abort();
  protobuf_c_message_free_unpacked(u, NULL);
  free(bytes);
  free(first);
  free(second);
  protobuf_c_message_free_unpacked(m, NULL);
  protobuf_c_message_free_unpacked(m2, NULL);
  return 0;
}
