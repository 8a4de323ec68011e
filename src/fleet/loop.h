/*
 * loop.h — the event loop as exact mode's client (client.c) sees it: an
 * adapter, as hiredis's adapters are (libevent, libuv, ...), so that the
 * client knows no event library. The daemon's is src/server/redis_h2o.c
 * (h2o's evloop); test_client.c's plays the loop by hand.
 *
 * Every callback comes from the loop, never from inside the call that
 * asked for it (connect, write, read_start, timer_arm), except a write's
 * completion, which an adapter may report at once. A callback may close
 * its own connection; nothing of that connection is called after a close.
 */
#ifndef SLUICE_FLEET_LOOP_H
#define SLUICE_FLEET_LOOP_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

typedef struct rc_sock rc_sock;   /* a connection (the adapter's) */
typedef struct rc_timer rc_timer; /* a timer (the adapter's) */

/* A connect or a write is done: err NULL, or why it failed. */
typedef void (*rc_io_fn)(void *ud, const char *err);
/* Bytes have come (valid during the call only: take them all), or, err
   not NULL, the connection is lost. */
typedef void (*rc_read_fn)(void *ud, const char *err, const char *bytes,
                           size_t len);
typedef void (*rc_tick_fn)(void *ud);

typedef struct rc_loop {
  void *loop; /* the adapter's event loop, passed back to it */
  /* Starts connecting to sa; on_connect(ud, ...) says how it went. NULL
     when it could not even start. */
  rc_sock *(*connect)(void *loop, const struct sockaddr *sa, socklen_t salen,
                      rc_io_fn on_connect, void *ud);
  /* Writes buf[0 .. len) (the caller keeps it until on_written), after
     what was written before; on_written(ud of the connect, ...) once. */
  void (*write)(rc_sock *s, const char *buf, size_t len, rc_io_fn on_written);
  /* Reads from now on: on_read(ud of the connect, ...) with what comes. */
  void (*read_start)(rc_sock *s, rc_read_fn on_read);
  /* Closes s (no callback of it comes after); safe inside one of them. */
  void (*close)(rc_sock *s);
  /* The client's one timer: NULL when it cannot be made. */
  rc_timer *(*timer_new)(void *loop, rc_tick_fn on_tick, void *ud);
  /* Fires on_tick once, in_ns from now (> 0), replacing any earlier
     arming. */
  void (*timer_arm)(rc_timer *t, int64_t in_ns);
  void (*timer_free)(rc_timer *t);
  /* Asks the loop's owner to call rc_flush within this pass of the loop,
     before it waits again: a command was queued. NULL: the owner calls
     rc_flush after every pass anyway (a test's loop). A flush must not
     run between two passes of an h2o loop: a socket written there (its
     write, done at once, is queued as pending) and then closed would be
     freed by the next pass before its pending callback ran. */
  void (*wake)(void *wake_ud);
  void *wake_ud;
} rc_loop;

#endif /* SLUICE_FLEET_LOOP_H */
