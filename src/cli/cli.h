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

struct sl_limiter;
struct sl_store;

typedef struct replay_counts {
  uint64_t requests, allowed, denied;
  /* With a candidate: the requests where it disagreed, each way, and the
     distinct keys (clients) that had at least one of each. */
  uint64_t would_deny, would_allow, keys_would_deny, keys_would_allow;
} replay_counts;

/* A candidate policy replayed beside the enforced one: its limiter, and
   two of the same store that remember which keys diverged each way. */
typedef struct replay_candidate {
  struct sl_limiter *lim, *seen_deny, *seen_allow;
} replay_candidate;

/*
 * Decides every request of the trace `in` with lim (whose store is `store`)
 * and writes one line per request to `out`; with cand (not NULL), decides
 * each also under the candidate, as the daemon does (a shadow check of the
 * same request: charged when lim allows it and the candidate has room),
 * and writes only the requests where the two disagree. Returns 0, or 1
 * after printing "sluice replay: NAME:LINE: message" to stderr for the
 * first bad line.
 */
int replay_stream(FILE *in, FILE *out, const char *name, struct sl_limiter *lim,
                  const replay_candidate *cand, struct sl_store *store,
                  replay_counts *n);

#endif /* SLUICE_CLI_H */
