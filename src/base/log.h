/*
 * log.h — one line per event, to a sink the program chooses.
 *
 * Everything below the daemon that has something to say (a Redis node
 * down, a subscription lost) says it here, without knowing where it goes:
 * by default a line on stderr, "2026-11-21T12:00:00.123Z warn: message";
 * a test installs a sink to read what was said.
 */
#ifndef SLUICE_BASE_LOG_H
#define SLUICE_BASE_LOG_H

/* Logs one line at `level` ("info", "warn", "error"). Thread-safe. */
void log_msg(const char *level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Where the lines go: sink(ud, level, message) with the message formatted
   (no timestamp, no newline). NULL restores the stderr sink. */
typedef void (*log_sink_fn)(void *ud, const char *level, const char *msg);
void log_set_sink(log_sink_fn sink, void *ud);

#endif /* SLUICE_BASE_LOG_H */
