/*
 * cli.h — what the subcommands of the `sluice` binary share.
 */
#ifndef SLUICE_CLI_H
#define SLUICE_CLI_H

#include <stdint.h>
#include <stdio.h>

/* Each subcommand: argv[0] is its own name; returns the exit status. */
int cmd_replay(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_serve(int argc, char **argv);
int cmd_check_config(int argc, char **argv);
int cmd_sim(int argc, char **argv);
int cmd_accuracy(int argc, char **argv);

typedef struct replay_counts {
  uint64_t requests, allowed, denied;
} replay_counts;

struct sl_limiter;
struct sl_store;
/*
 * Decides every request of the trace `in` with lim (whose store is `store`)
 * and writes one line per request to `out`. Returns 0, or 1 after printing
 * "sluice replay: NAME:LINE: message" to stderr for the first bad line.
 */
int replay_stream(FILE *in, FILE *out, const char *name, struct sl_limiter *lim,
                  struct sl_store *store, replay_counts *n);

/* Parses a decimal integer in [min, max] with optional K/M/G suffix
   (binary, for byte sizes) when `suffix` is set. 0 or -1. */
int cli_parse_int(const char *s, int64_t min, int64_t max, int suffix,
                  int64_t *out);

/* ceil(ns / 1e6) for ns >= 0: durations are printed in whole ms, rounded up. */
static inline int64_t ns_to_ms_up(int64_t ns) {
  return ns / 1000000 + (ns % 1000000 != 0);
}

#endif /* SLUICE_CLI_H */
