/*
 * test_pb_json.c — proto3's JSON mapping of envoy's rate limit messages
 * (src/server/pb_json.c), as Go's protojson (envoyproxy/ratelimit's /json)
 * reads and writes them: names in either spelling, 64-bit integers and
 * wrappers, enums by name or number, durations, defaults left out, and a
 * clear error with its path for every kind of bad input.
 */
#include "helpers.h"

#include <envoy/service/ratelimit/v3/rls.pb-c.h>
#include <string.h>

#include "server/pb_json.h"

typedef Envoy__Service__Ratelimit__V3__RateLimitRequest req_t;
typedef Envoy__Service__Ratelimit__V3__RateLimitResponse resp_t;
#define REQ_DESC envoy__service__ratelimit__v3__rate_limit_request__descriptor
#define RESP_DESC envoy__service__ratelimit__v3__rate_limit_response__descriptor

static char err[256];

/* The request text spells, or NULL with err set. */
static req_t *parse(const char *text) {
  json_error_t je;
  json_t *v = json_loads(text, 0, &je);
  assert_non_null(v);
  err[0] = '\0';
  ProtobufCMessage *m = pbj_decode(&REQ_DESC, v, err, sizeof err);
  json_decref(v);
  return (req_t *)m;
}

/* The compact JSON of m (static buffer). */
static const char *dump(const ProtobufCMessage *m) {
  static char buf[1024];
  json_t *o = pbj_encode(m);
  assert_non_null(o);
  size_t n = json_dumpb(o, buf, sizeof buf - 1, JSON_COMPACT);
  json_decref(o);
  buf[n] = '\0';
  return buf;
}

static void reads_both_spellings_wrappers_and_enums(void **state) {
  (void)state;
  req_t *r = parse(
      "{\"domain\":\"d\",\"hits_addend\":2,\"descriptors\":[{\"entries\":"
      "[{\"key\":\"k\",\"value\":\"v\"},{\"key\":\"k2\"}],\"hitsAddend\":"
      "\"18446744073709551615\",\"limit\":{\"requestsPerUnit\":3,\"unit\":"
      "\"MINUTE\"}},{\"entries\":[{\"key\":\"x\"}],\"hits_addend\":7,"
      "\"limit\":{\"requests_per_unit\":1,\"unit\":4}},{\"entries\":null}]}");
  assert_non_null(r);
  assert_string_equal(r->domain, "d");
  assert_int_equal(r->hits_addend, 2);
  assert_int_equal(r->n_descriptors, 3);
  assert_int_equal(r->descriptors[0]->n_entries, 2);
  assert_string_equal(r->descriptors[0]->entries[1]->key, "k2");
  assert_string_equal(r->descriptors[0]->entries[1]->value, "");
  assert_true(r->descriptors[0]->hits_addend->value == UINT64_MAX);
  assert_int_equal(r->descriptors[0]->limit->requests_per_unit, 3);
  assert_int_equal(r->descriptors[0]->limit->unit, 2); /* MINUTE */
  assert_int_equal(r->descriptors[1]->hits_addend->value, 7);
  assert_int_equal(r->descriptors[1]->limit->unit, 4);
  assert_int_equal(r->descriptors[2]->n_entries, 0); /* null: the default */
  assert_null(r->descriptors[2]->hits_addend);
  protobuf_c_message_free_unpacked(&r->base, NULL);
}

static void says_what_is_wrong_and_where(void **state) {
  (void)state;
  static const struct {
    const char *text, *want;
  } cases[] = {
      {"{\"domain\":\"d\",\"extra\":1}",
       "extra: envoy.service.ratelimit.v3.RateLimitRequest has no such field"},
      {"{\"domain\":5}", "domain: not a string"},
      {"{\"hits_addend\":4294967296}", "hits_addend: 4294967296 is out of range"},
      {"{\"hits_addend\":-1}", "hits_addend: -1 is out of range"},
      {"{\"hits_addend\":1.5}", "hits_addend: 1.5 is not an integer in range"},
      {"{\"hits_addend\":\" 1\"}", "hits_addend: ' 1' is not an integer"},
      {"{\"hitsAddend\":1,\"hits_addend\":1}",
       "hits_addend: the field is given twice"},
      {"{\"descriptors\":{}}", "descriptors: not an array"},
      {"{\"descriptors\":[null]}", "descriptors[0]: null in a repeated field"},
      {"{\"descriptors\":[{\"entries\":[{\"key\":\"a\"},{\"key\":[]}]}]}",
       "descriptors[0].entries[1].key: not a string"},
      {"{\"descriptors\":[{\"limit\":{\"unit\":\"FORTNIGHT\"}}]}",
       "descriptors[0].limit.unit: 'FORTNIGHT' is not a value of "
       "envoy.type.v3.RateLimitUnit"},
      {"{\"descriptors\":[{\"hits_addend\":\"-3\"}]}",
       "descriptors[0].hits_addend: '-3' is out of range"},
      {"{\"descriptors\":[{\"hits_addend\":\"99999999999999999999\"}]}",
       "descriptors[0].hits_addend: '99999999999999999999' is not an integer "
       "in range"},
      {"[]", "not an object"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    req_t *r = parse(cases[i].text);
    if (r) fail_msg("accepted %s", cases[i].text);
    assert_string_equal(err, cases[i].want);
  }
}

static void writes_what_protojson_writes(void **state) {
  (void)state;
  Envoy__Service__Ratelimit__V3__RateLimitResponse__RateLimit lim =
      ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_RESPONSE__RATE_LIMIT__INIT;
  lim.requests_per_unit = 10;
  lim.unit = 7; /* WEEK */
  Google__Protobuf__Duration d = GOOGLE__PROTOBUF__DURATION__INIT;
  Envoy__Service__Ratelimit__V3__RateLimitResponse__DescriptorStatus st =
      ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_RESPONSE__DESCRIPTOR_STATUS__INIT;
  st.code = 2;
  st.current_limit = &lim;
  st.duration_until_reset = &d;
  Envoy__Service__Ratelimit__V3__RateLimitResponse__DescriptorStatus *sts[] = {&st};
  resp_t r = ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_RESPONSE__INIT;
  assert_string_equal(dump(&r.base), "{}"); /* UNKNOWN: all defaults */
  r.overall_code = 2;
  r.n_statuses = 1;
  r.statuses = sts;
  static const struct {
    int64_t s;
    int32_t n;
    const char *want;
  } durs[] = {{0, 0, "0s"},        {59, 0, "59s"},
              {1, 500000000, "1.500s"}, {0, 1500, "0.000001500s"},
              {2, 1000, "2.000001s"},   {-1, -500000000, "-1.500s"}};
  for (size_t i = 0; i < sizeof durs / sizeof durs[0]; i++) {
    d.seconds = durs[i].s;
    d.nanos = durs[i].n;
    char want[256];
    snprintf(want, sizeof want,
             "{\"overallCode\":\"OVER_LIMIT\",\"statuses\":[{\"code\":"
             "\"OVER_LIMIT\",\"currentLimit\":{\"requestsPerUnit\":10,"
             "\"unit\":\"WEEK\"},\"durationUntilReset\":\"%s\"}]}",
             durs[i].want);
    assert_string_equal(dump(&r.base), want);
  }
  lim.unit = 42; /* not a value of the enum: its number */
  st.duration_until_reset = NULL;
  st.limit_remaining = 4294967295u;
  assert_string_equal(dump(&st.base),
                      "{\"code\":\"OVER_LIMIT\",\"currentLimit\":"
                      "{\"requestsPerUnit\":10,\"unit\":42},"
                      "\"limitRemaining\":4294967295}");
  r.raw_body.data = (uint8_t *)"hi!?";
  r.raw_body.len = 4;
  r.n_statuses = 0;
  assert_string_equal(dump(&r.base),
                      "{\"overallCode\":\"OVER_LIMIT\",\"rawBody\":\"aGkhPw==\"}");
}

/* What a message is written as reads back as the same message. */
static void reads_back_what_it_writes(void **state) {
  (void)state;
  req_t *r = parse("{\"domain\":\"dom\",\"descriptors\":[{\"entries\":[{\"key\":"
                   "\"k\",\"value\":\"\\u00e9\"}],\"hitsAddend\":\"0\"}]}");
  assert_non_null(r);
  char first[512];
  snprintf(first, sizeof first, "%s", dump(&r->base));
  assert_string_equal(first, "{\"domain\":\"dom\",\"descriptors\":[{\"entries\":"
                             "[{\"key\":\"k\",\"value\":\"\xc3\xa9\"}],"
                             "\"hitsAddend\":\"0\"}]}");
  req_t *again = parse(first);
  assert_non_null(again);
  assert_string_equal(dump(&again->base), first);
  protobuf_c_message_free_unpacked(&r->base, NULL);
  protobuf_c_message_free_unpacked(&again->base, NULL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(reads_both_spellings_wrappers_and_enums),
      cmocka_unit_test(says_what_is_wrong_and_where),
      cmocka_unit_test(writes_what_protojson_writes),
      cmocka_unit_test(reads_back_what_it_writes),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
