/*
 * redis_h2o.c — loop.h's adapter for h2o's evloop: exact mode's client
 * connects, writes and reads through h2o sockets, and its timer is a
 * timerfd on the loop (h2o 2.2's own timers count whole milliseconds; the
 * batch window is microseconds).
 */
#include "redis_h2o.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

/*
 * A connection: the h2o socket and the client's callbacks. A callback may
 * close it (the client fails a node while reading its replies): `busy`
 * counts the callbacks running, and a close inside one leaves the freeing
 * to the last of them. h2o itself calls nothing of a closed socket.
 */
struct rc_sock {
  h2o_socket_t *hs;
  void *ud;
  rc_io_fn on_connect, on_written;
  rc_read_fn on_read;
  int busy, closed;
};

/* Ends a callback: frees s if it was closed meanwhile. 1 when it was. */
static int leave(rc_sock *s) {
  if (--s->busy || !s->closed) return 0;
  free(s);
  return 1;
}

static void on_connect(h2o_socket_t *hs, const char *err) {
  rc_sock *s = hs->data;
  if (!err) { /* requests are small and pipelined: no Nagle delay */
    int one = 1;
    setsockopt(h2o_socket_get_fd(hs), IPPROTO_TCP, TCP_NODELAY, &one,
               sizeof one);
  }
  s->busy++;
  s->on_connect(s->ud, err);
  leave(s);
}

static void on_write(h2o_socket_t *hs, const char *err) {
  rc_sock *s = hs->data;
  s->busy++;
  s->on_written(s->ud, err);
  leave(s);
}

/* The client takes every byte (its reader copies them): consumed after
   its callback, unless that closed the connection. */
static void on_read(h2o_socket_t *hs, const char *err) {
  rc_sock *s = hs->data;
  s->busy++;
  if (err)
    s->on_read(s->ud, err, NULL, 0);
  else
    s->on_read(s->ud, NULL, hs->input->bytes, hs->input->size);
  if (!s->closed && !err) h2o_buffer_consume(&hs->input, hs->input->size);
  leave(s);
}

static rc_sock *sock_connect(void *loop, const struct sockaddr *sa,
                             socklen_t salen, rc_io_fn cb, void *ud) {
  rc_sock *s = calloc(1, sizeof *s);
  if (!s) return NULL;
  s->hs = h2o_socket_connect(loop, (struct sockaddr *)sa, salen, on_connect);
  if (!s->hs) {
    free(s);
    return NULL;
  }
  s->hs->data = s;
  s->ud = ud;
  s->on_connect = cb;
  return s;
}

static void sock_write(rc_sock *s, const char *buf, size_t len, rc_io_fn cb) {
  h2o_iovec_t iov = h2o_iovec_init(buf, len);
  s->on_written = cb;
  h2o_socket_write(s->hs, &iov, 1, on_write);
}

static void sock_read_start(rc_sock *s, rc_read_fn cb) {
  s->on_read = cb;
  h2o_socket_read_start(s->hs, on_read);
}

static void sock_close(rc_sock *s) {
  h2o_socket_close(s->hs);
  s->closed = 1;
  if (!s->busy) free(s);
}

/* ---- the timer: a timerfd read by the loop ---- */

struct rc_timer {
  h2o_socket_t *hs;
  rc_tick_fn on_tick;
  void *ud;
};

static void on_tick(h2o_socket_t *hs, const char *err) {
  rc_timer *t = hs->data;
  if (err) return;
  h2o_buffer_consume(&hs->input, hs->input->size);
  t->on_tick(t->ud);
}

static rc_timer *timer_new(void *loop, rc_tick_fn cb, void *ud) {
  rc_timer *t = calloc(1, sizeof *t);
  int fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
  if (!t || fd < 0) {
    free(t);
    if (fd >= 0) close(fd);
    return NULL;
  }
  t->hs = h2o_evloop_socket_create(loop, fd, 0);
  t->hs->data = t;
  t->on_tick = cb;
  t->ud = ud;
  h2o_socket_read_start(t->hs, on_tick);
  return t;
}

static void timer_arm(rc_timer *t, int64_t in_ns) {
  struct itimerspec its = {{0, 0}, {in_ns / 1000000000, in_ns % 1000000000}};
  timerfd_settime(h2o_socket_get_fd(t->hs), 0, &its, NULL);
}

static void timer_free(rc_timer *t) {
  h2o_socket_close(t->hs); /* closes the timerfd */
  free(t);
}

rc_loop redis_h2o_loop(h2o_loop_t *loop) {
  return (rc_loop){.loop = loop,
                   .connect = sock_connect,
                   .write = sock_write,
                   .read_start = sock_read_start,
                   .close = sock_close,
                   .timer_new = timer_new,
                   .timer_arm = timer_arm,
                   .timer_free = timer_free};
}
