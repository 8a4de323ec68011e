/*
 * test_wait.c — the wait mode's decision (limiter_take_all_within: a
 * delay above the bound denies and charges nothing) and sl_limiter_wait
 * (sleeps the leaky_bucket's delay, keeps a deadline, stops on a cancel).
 * Sleeps are asserted from below only (a wait is never shorter than the
 * delay): a loaded machine may make one longer, never shorter.
 */
#include <pthread.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "helpers.h"
#include "limiter.h"

static int64_t mono(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * NS_PER_S + ts.tv_nsec;
}

static sl_limiter *leaky(sl_store **st, const char *spec) {
  sl_policy p = policy_of(spec);
  assert_int_equal(sl_store_new(NULL, st), 0);
  sl_limiter *lim;
  assert_int_equal(sl_limiter_new(*st, &p, &lim), 0);
  return lim;
}

static void a_delay_above_the_bound_denies_and_charges_nothing(void **state) {
  (void)state;
  sl_store *st;
  sl_limiter *lim = leaky(&st, "leaky_bucket:10/s:burst=100");
  sl_check c = {lim, "k", 1, 1, 0};
  int64_t most = MS(250);
  sl_decision d;
  int all;
  /* Slots at 0, 100, 200 ms fit; the fourth would wait 300 ms. */
  for (int i = 0; i < 3; i++) {
    assert_int_equal(limiter_take_all_within(&c, NULL, &most, 1, T0, &d, &all), 0);
    assert_true(all);
    assert_int_equal(d.delay_ns, MS(100) * i);
  }
  assert_int_equal(limiter_take_all_within(&c, NULL, &most, 1, T0, &d, &all), 0);
  assert_false(all);
  assert_false(d.allowed);
  assert_int_equal(d.retry_after_ns, MS(50));
  /* Nothing was charged: the queue still ends at 300 ms. */
  assert_int_equal(sl_limiter_take(lim, "k", 1, 0, T0, &d), 0);
  assert_int_equal(d.delay_ns, MS(300));
  /* After retry_after, it fits. */
  assert_int_equal(
      limiter_take_all_within(&c, NULL, &most, 1, T0 + MS(50), &d, &all), 0);
  assert_true(all);
  assert_int_equal(d.delay_ns, MS(250));
  /* No bound (NULL, or 0): as sl_take_all. */
  assert_int_equal(limiter_take_all_within(&c, NULL, NULL, 1, T0, &d, &all), 0);
  assert_true(all);
  int64_t none = 0;
  assert_int_equal(limiter_take_all_within(&c, NULL, &none, 1, T0, &d, &all), 0);
  assert_true(all);
  sl_limiter_free(lim);
  sl_store_free(st);
}

static void wait_sleeps_the_leaky_bucket_delay(void **state) {
  (void)state;
  sl_store *st;
  sl_limiter *lim = leaky(&st, "leaky_bucket:20/s:burst=10");
  sl_decision d;
  int64_t t0 = mono();
  for (int i = 0; i < 3; i++) {
    assert_int_equal(sl_limiter_wait(lim, "k", 1, 1, 0, -1, &d), 0);
    assert_true(d.allowed);
  }
  /* The third left the queue 2 slots (100 ms) after the first. */
  assert_true(mono() - t0 >= MS(95));
  sl_limiter_free(lim);
  sl_store_free(st);
}

static void wait_refuses_a_delay_past_the_deadline(void **state) {
  (void)state;
  sl_store *st;
  sl_limiter *lim = leaky(&st, "leaky_bucket:1/s:burst=10");
  sl_decision d;
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  int64_t now = (int64_t)ts.tv_sec * NS_PER_S + ts.tv_nsec;
  assert_int_equal(sl_limiter_wait(lim, "k", 1, 1, now + SEC(60), -1, &d), 0);
  assert_true(d.allowed); /* the first goes at once */
  int64_t t0 = mono();
  /* The next would wait ~1 s: past a 100 ms deadline, so it is refused at
     once and charges nothing. */
  assert_int_equal(sl_limiter_wait(lim, "k", 1, 1, now + MS(100), -1, &d), 0);
  assert_false(d.allowed);
  assert_true(d.retry_after_ns > 0);
  assert_true(mono() - t0 < SEC(1));
  clock_gettime(CLOCK_REALTIME, &ts);
  now = (int64_t)ts.tv_sec * NS_PER_S + ts.tv_nsec;
  assert_int_equal(sl_limiter_take(lim, "k", 1, 0, now, &d), 0);
  assert_int_equal(d.remaining, 9);
  /* A cost that can never pass: ECOST, no wait. */
  assert_int_equal(sl_limiter_wait(lim, "k", 1, 11, 0, -1, &d), SL_ECOST);
  assert_int_equal(sl_limiter_wait(NULL, "k", 1, 1, 0, -1, &d), SL_EINVAL);
  assert_int_equal(sl_limiter_wait(lim, "k", 1, -1, 0, -1, &d), SL_EINVAL);
  sl_limiter_free(lim);
  sl_store_free(st);
}

static void *cancel_later(void *arg) {
  int fd = *(int *)arg;
  struct timespec ts = {0, 50 * 1000000};
  nanosleep(&ts, NULL);
  uint64_t one = 1;
  assert_int_equal(write(fd, &one, sizeof one), sizeof one);
  return NULL;
}

static void wait_stops_when_cancelled(void **state) {
  (void)state;
  sl_store *st;
  sl_limiter *lim = leaky(&st, "leaky_bucket:1/m:burst=5");
  sl_decision d;
  int fd = eventfd(0, EFD_CLOEXEC);
  assert_true(fd >= 0);
  assert_int_equal(sl_limiter_wait(lim, "k", 1, 1, 0, fd, &d), 0);
  /* The second would wait a minute: a cancel from another thread ends it. */
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, cancel_later, &fd), 0);
  int64_t t0 = mono();
  assert_int_equal(sl_limiter_wait(lim, "k", 1, 1, 0, fd, &d), SL_ECANCELED);
  assert_true(mono() - t0 < SEC(30));
  pthread_join(th, NULL);
  /* Already cancelled: nothing is charged. */
  const int64_t then = 1; /* (a fixed instant: both peeks see one level) */
  assert_int_equal(sl_limiter_take(lim, "k", 1, 0, then, &d), 0);
  int64_t before = d.remaining;
  assert_int_equal(sl_limiter_wait(lim, "k", 1, 1, 0, fd, &d), SL_ECANCELED);
  assert_int_equal(sl_limiter_take(lim, "k", 1, 0, then, &d), 0);
  assert_int_equal(d.remaining, before);
  assert_string_equal(sl_err_name(SL_ECANCELED), "ECANCELED");
  close(fd);
  sl_limiter_free(lim);
  sl_store_free(st);
}

static void wait_retries_a_denial_after_its_retry_after(void **state) {
  (void)state;
  sl_store *st;
  sl_limiter *lim = leaky(&st, "token_bucket:20/s:burst=1");
  sl_decision d;
  int64_t t0 = mono();
  assert_int_equal(sl_limiter_wait(lim, "k", 1, 1, 0, -1, &d), 0);
  assert_int_equal(sl_limiter_wait(lim, "k", 1, 1, 0, -1, &d), 0);
  assert_true(d.allowed);
  assert_true(mono() - t0 >= MS(45)); /* one token refills in 50 ms */
  sl_limiter_free(lim);
  sl_store_free(st);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(a_delay_above_the_bound_denies_and_charges_nothing),
      cmocka_unit_test(wait_sleeps_the_leaky_bucket_delay),
      cmocka_unit_test(wait_refuses_a_delay_past_the_deadline),
      cmocka_unit_test(wait_stops_when_cancelled),
      cmocka_unit_test(wait_retries_a_denial_after_its_retry_after),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
