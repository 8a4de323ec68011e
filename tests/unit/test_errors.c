/*
 * test_errors.c — the daemon's one vocabulary of errors (engine/errors.h):
 * every code a decision or a reset can fail with has a name, an HTTP
 * status and a message, and the message a failed decision carries is the
 * one a client sees over HTTP and RESP alike.
 */
#include "helpers.h"

#include "engine/engine.h"
#include "engine/errors.h"
#include "engine_fixture.h"
#include "rules/config.h"

static void every_library_code_has_its_own_message(void **state) {
  (void)state;
#define LIB_CODE(NAME, CODE, MSG)                                              \
  {                                                                            \
    const eng_error *e = eng_error_of(CODE);                                   \
    assert_int_equal(e->code, CODE);                                           \
    assert_string_equal(e->name, #NAME);                                       \
    assert_string_equal(e->message, MSG);                                      \
    assert_true(e->http_status == 400 || e->http_status == 503);               \
  }
  SL_ERRNO_MAP(LIB_CODE)
#undef LIB_CODE
}

static void engine_codes_carry_their_status(void **state) {
  (void)state;
  assert_int_equal(eng_error_of(ENG_EDOMAIN)->http_status, 404);
  assert_string_equal(eng_error_of(ENG_EDOMAIN)->name, "EDOMAIN");
  assert_int_equal(eng_error_of(ENG_EDESCRIPTOR)->http_status, 400);
  assert_int_equal(eng_error_of(ENG_EADHOC)->http_status, 400);
  assert_int_equal(eng_error_of(ENG_EREMOTE)->http_status, 503);
  assert_int_equal(eng_error_of(ENG_ESTORE)->http_status, 503);
  assert_int_equal(eng_error_of(SL_ENOMEM)->http_status, 503);
  assert_int_equal(eng_error_of(SL_EFULL)->http_status, 503);
  assert_int_equal(eng_error_of(SL_ECOST)->http_status, 400);
}

static void an_unknown_code_is_an_internal_error(void **state) {
  (void)state;
  const eng_error *e = eng_error_of(-9999);
  assert_int_equal(e->http_status, 500);
  assert_string_equal(e->name, "UNKNOWN");
  assert_string_equal(e->message, "internal error");
}

/* Each failure of engine_decide says what went wrong in its own words,
   naming what the client sent. */
static void a_failed_decision_says_why(void **state) {
  (void)state;
  fixture f = fixture_with(NULL, "domain: d\n"
                                 "descriptors:\n"
                                 "  - key: k\n"
                                 "    rate_limit: {policy: \"gcra:5/s\"}\n");
  eng_result r;
  eng_descriptor d = {.entries = {{"k", 1, "v", 1}}, .n = 1, .hits = -1};
  eng_request req = {"nosuch", 6, &d, 1, 1};
  assert_int_equal(do_check(f.t, &req, T0, &r), ENG_EDOMAIN);
  assert_string_equal(r.msg, "unknown domain 'nosuch'");
  req = (eng_request){"d", 1, &d, 1, 6};
  assert_int_equal(do_check(f.t, &req, T0, &r), SL_ECOST);
  assert_string_equal(r.msg, "cost 6 can never be allowed by a matching rule");
  assert_int_equal(do_throttle(f.t, "k", 1, "gcra:1/h", 8, 3, T0, &r, NULL, 0),
                   SL_ECOST);
  assert_string_equal(r.msg, "cost 3 can never be allowed by gcra:1/h");
  assert_int_equal(do_throttle(f.t, "k", 1, "gcra:0/h", 8, 1, T0, &r, NULL, 0),
                   SL_EPOLICY);
  assert_string_equal(r.msg, "invalid policy: limit '0' must be positive");
  assert_string_equal(r.err, "limit '0' must be positive");
  sl_policy p = {SL_GCRA, 1, 1, SEC(3600)};
  assert_int_equal(do_throttle_policy(f.t, "k", 1, &p, 2, T0, &r), SL_ECOST);
  assert_string_equal(r.msg, "cost 2 can never be allowed by this rate");
  char big[SL_KEY_MAX + 1];
  memset(big, 'x', sizeof big);
  assert_int_equal(
      do_throttle(f.t, big, sizeof big, "gcra:1/h", 8, 1, T0, &r, NULL, 0),
      SL_EKEY);
  assert_string_equal(r.msg, sl_strerror(SL_EKEY));
  fixture_free(&f);
}

/* A failed reset too: a bad policy, a key too long. */
static void a_failed_reset_says_why(void **state) {
  (void)state;
  fixture f = fixture_with(NULL, "domain: d\n");
  eng_reset r;
  assert_int_equal(do_reset_key_async(f.t, "k", 1, "", 0, &r, NULL, NULL),
                   SL_EPOLICY);
  assert_string_equal(r.msg, "invalid policy: policy is empty");
  assert_int_equal(do_reset_key_async(f.t, "k", 1, "bogus", 5, &r, NULL, NULL),
                   SL_EPOLICY);
  assert_non_null(strstr(r.msg, "invalid policy: "));
  assert_non_null(strstr(r.msg, "bogus"));
  fixture_free(&f);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(every_library_code_has_its_own_message),
      cmocka_unit_test(engine_codes_carry_their_status),
      cmocka_unit_test(an_unknown_code_is_an_internal_error),
      cmocka_unit_test(a_failed_decision_says_why),
      cmocka_unit_test(a_failed_reset_says_why),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
