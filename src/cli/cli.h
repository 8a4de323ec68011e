/*
 * cli.h — what the subcommands of the `sluice` binary share.
 */
#ifndef SLUICE_CLI_H
#define SLUICE_CLI_H

#include <stdint.h>
#include <stdio.h>

#include "../base/fmt.h"
#include "../base/num.h"

/* Each subcommand: argv[0] is its own name; returns the exit status. */
int cmd_replay(int argc, char **argv);
int cmd_bench(int argc, char **argv);
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

#endif /* SLUICE_CLI_H */
