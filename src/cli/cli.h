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

/* Parses a decimal integer in [min, max] with optional K/M/G suffix
   (binary, for byte sizes) when `suffix` is set. 0 or -1. */
int cli_parse_int(const char *s, int64_t min, int64_t max, int suffix,
                  int64_t *out);

/* ceil(ns / 1e6) for ns >= 0: durations are printed in whole ms, rounded up. */
static inline int64_t ns_to_ms_up(int64_t ns) {
  return ns / 1000000 + (ns % 1000000 != 0);
}

#endif /* SLUICE_CLI_H */
