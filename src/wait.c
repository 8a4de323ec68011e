/*
 * wait.c — sl_limiter_wait: take, then sleep until the request may go.
 *
 * The shape of Go's rate.Limiter.Wait(ctx): a deadline that is checked
 * before anything is charged (the decision itself refuses a delay beyond
 * it, limiter_take_all_within, under the shard's lock, so no other thread
 * can slip in between the check and the charge), and a cancellation the
 * caller signals from elsewhere. The cancellation is a file descriptor
 * rather than a flag: the sleep is a ppoll on it, so a cancel wakes the
 * sleeper at once instead of at its next look at a flag, and any eventfd,
 * pipe, signalfd or timerfd the caller already has will do.
 *
 * This is the only place in the library that reads a clock or blocks.
 */
#include <errno.h>
#include <poll.h>
#include <time.h>

#include "base/clock.h"
#include "limiter.h"

/*
 * Sleeps ns (> 0) on the monotonic clock, or until fd (>= 0) is readable
 * (or in error). Returns 0 after the full sleep, 1 when fd woke it.
 */
static int sleep_or_cancel(int64_t ns, int fd) {
  int64_t end = clock_mono_ns() + ns;
  for (;;) {
    int64_t left = end - clock_mono_ns();
    if (left <= 0) return 0;
    struct timespec ts = {left / 1000000000, left % 1000000000};
    struct pollfd p = {fd, POLLIN, 0};
    int n = ppoll(fd >= 0 ? &p : NULL, fd >= 0 ? 1 : 0, &ts, NULL);
    if (n > 0) return 1;
    if (n < 0 && errno != EINTR) return 1; /* a broken fd cancels */
  }
}

/* Whether fd (>= 0) is readable now. */
static int cancelled(int fd) {
  if (fd < 0) return 0;
  struct pollfd p = {fd, POLLIN, 0};
  return poll(&p, 1, 0) != 0;
}

int sl_limiter_wait(sl_limiter *lim, const void *key, size_t key_len,
                    int64_t cost, int64_t deadline_ns, int cancel_fd,
                    sl_decision *out) {
  if (!lim || !out || (!key && key_len) || cost < 0) return SL_EINVAL;
  for (;;) {
    if (cancelled(cancel_fd)) return SL_ECANCELED;
    int64_t now = clock_wall_ns();
    /* The most this request may wait from now: 1 ns when the deadline has
       passed (0 would mean no bound), so only a request that can go at
       once still goes. */
    int64_t most = 0;
    if (deadline_ns > 0) most = deadline_ns - now > 0 ? deadline_ns - now : 1;
    sl_check c = {lim, key, key_len, cost, 0};
    int allowed;
    int rc = limiter_take_all_within(&c, NULL, &most, 1, now, out, &allowed);
    if (rc) return rc;
    if (allowed) {
      if (out->delay_ns > 0 && sleep_or_cancel(out->delay_ns, cancel_fd))
        return SL_ECANCELED;
      return 0;
    }
    /* Denied: when it could go is retry_after from now; that is a wait
       too, if it ends before the deadline. */
    if (out->retry_after_ns <= 0 ||
        (deadline_ns > 0 && out->retry_after_ns > deadline_ns - now))
      return 0;
    if (sleep_or_cancel(out->retry_after_ns, cancel_fd)) return SL_ECANCELED;
  }
}
