/*
 * log.c — log lines: formatted once, handed to the sink.
 */
#include "log.h"

#include <stdarg.h>
#include <stdio.h>
#include <time.h>

static log_sink_fn sink;
static void *sink_ud;

/* The default: a timestamped line on stderr (one fprintf: lines of
   concurrent threads do not interleave). */
static void to_stderr(const char *level, const char *msg) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  struct tm tm;
  gmtime_r(&ts.tv_sec, &tm);
  char when[32];
  strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%S", &tm);
  fprintf(stderr, "%s.%03ldZ %s: %s\n", when, ts.tv_nsec / 1000000, level, msg);
}

void log_msg(const char *level, const char *fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (sink)
    sink(sink_ud, level, msg);
  else
    to_stderr(level, msg);
}

void log_set_sink(log_sink_fn fn, void *ud) {
  sink = fn;
  sink_ud = ud;
}
