/* test_smoke.c — the library links and the worked token bucket example holds. */
#include "helpers.h"

static void token_bucket_example_from_the_issue(void **state) {
  (void)state;
  sl_store *s = store_with_cap(0);
  sl_limiter *lim = limiter_of(s, "token_bucket:2/s:burst=10");
  take(lim, "k", 1, T0);
  take(lim, "k", 1, T0 + MS(200));
  for (int i = 0; i < 8; i++) assert_true(take(lim, "k", 1, T0 + MS(300)).allowed);
  sl_decision d = take(lim, "k", 1, T0 + MS(300));
  assert_false(d.allowed);
  assert_int_equal(d.retry_after_ns, MS(200));
  assert_int_equal(take(lim, "k", 1, T0 + MS(2800)).remaining, 4);
  assert_int_equal(take(lim, "k", 1, T0 + MS(5800)).remaining, 9);
  sl_limiter_free(lim);
  sl_store_free(s);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(token_bucket_example_from_the_issue),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
