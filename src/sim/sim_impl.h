/*
 * sim_impl.h — what the files of `sluice sim` share (sim.h is the public
 * face): the scenario as sim_parse.c leaves it, and the run's state as
 * sim_run.c drives it and sim_print.c reports it.
 *
 *   sim_parse.c  the scenario language: lines, words, commands, limits
 *   sim_run.c    the runner: commands merged by time, retries per policy,
 *                every decision the library's, the exact window judge
 *   sim_print.c  the timeline, the retry report, the plot's captions
 *   ../cli/sim.c the command line (the sim layer holds the rest, so that
 *                the daemon serves the same engine at POST /v1/sim)
 */
#ifndef SLUICE_SIM_IMPL_H
#define SLUICE_SIM_IMPL_H

#include <stdint.h>
#include <stdio.h>

#include "lab.h"
#include "sim.h"
#include "sluice.h"
#include "svg.h"

#define NS_MS INT64_C(1000000)
#define NS_S INT64_C(1000000000)
/* The scenario clock runs from 0 to 100 years: far enough for any
   scenario, and retries beyond it still stay below SL_TIME_MAX_NS. */
#define SIM_TIME_MAX (INT64_C(36500) * 86400 * NS_S)
#define SIM_NAME_MAX 32
#define SIM_LINE_MAX 4096
#define SIM_WORDS 16
#define SIM_MAX_ATTEMPTS 1000000
/* Distinct keys and retry settings: plenty to see what a limiter does, and
   bounds on the memory a hostile scenario can make the run take. */
#define SIM_MAX_KEYS 100000
#define SIM_MAX_RETRY_SETTINGS 64

enum { CMD_REQUEST, CMD_BURST, CMD_EVERY };
enum { RETRY_OFF, RETRY_IMMEDIATE, RETRY_AFTER };

typedef struct sim_policy {
  char name[SIM_NAME_MAX + 1];
  char spec[96]; /* canonical spelling */
  sl_policy pol;
  int64_t capacity; /* the largest cost it can allow: burst or limit */
} sim_policy;

typedef struct sim_retry {
  int line;
  int mode;
  int64_t every_ns, jitter_ns;
  uint32_t max_attempts;
  char text[128]; /* as shown in the report */
} sim_retry;

/* One request-making command: `instants` instants, every_ns apart from t0,
   each with per_instant requests of `cost` for `key`. */
typedef struct sim_cmd {
  int line;
  int kind;
  int64_t t0, every_ns;
  uint64_t instants, per_instant;
  uint32_t key;
  int64_t cost;
  int32_t retry; /* index in retries, -1 = off */
} sim_cmd;

struct sim_scenario {
  sim_policy pol[SIM_MAX_POLICIES];
  int npol;
  sim_cmd *cmd;
  size_t ncmd, capcmd;
  char **keys;
  size_t nkeys, capkeys;
  uint32_t *kindex; /* open addressing: key index + 1, 0 = empty */
  size_t kindex_cap;
  sim_retry *retry;
  size_t nretry, capretry;
  uint64_t requests; /* first attempts */
  char description[640]; /* up to 6 lines */
};

/* ---- the run (sim_run.c) ---- */

/* A pending retry of one policy. */
typedef struct retry_ev {
  int64_t t, first_t, cost;
  uint64_t seq;
  uint32_t key, attempt;
  int32_t retry;
} retry_ev;

/* A policy's pending retries: a binary heap by time (ties: first come). */
typedef struct rheap {
  retry_ev *v;
  size_t n, cap;
} rheap;

/* What one policy did in one step (or a group of alike steps). */
typedef struct cell {
  int used;
  uint64_t allowed, denied, delayed;
  int64_t remaining, max_delay, retry_after;
} cell;

/* A row of the timeline: one step, or consecutive alike steps. */
typedef struct row {
  int active;
  int64_t t_first, t_last;
  uint64_t steps;
  int64_t src; /* command index, -1 for retries */
  cell c[SIM_MAX_POLICIES];
} row;

/* What one retry setting cost one policy. */
typedef struct retry_stats {
  uint64_t requests, attempts, served, gave_up;
  int64_t max_wait;
} retry_stats;

/* One pass over the scenario: the limiters, the judges, the counts, and
   what the timeline (first pass) or the plot (second pass) needs. */
typedef struct run_state {
  const sim_scenario *sc;
  const sim_options *opts;
  FILE *out;
  sl_store *store;
  sl_limiter *lim[SIM_MAX_POLICIES];
  lab_window win[SIM_MAX_POLICIES];
  rheap retries[SIM_MAX_POLICIES];
  uint64_t rng[SIM_MAX_POLICIES];
  uint64_t allowed[SIM_MAX_POLICIES], denied[SIM_MAX_POLICIES];
  int64_t max_delay[SIM_MAX_POLICIES];
  retry_stats *rstats; /* nretry x npol */
  uint64_t seq;
  int64_t t_min, t_max; /* first and last decision */
  int any;
  svg_chart *chart; /* the plot pass only */
  size_t next_peek;
  int show; /* print the timeline */
  row pending;
  cell step[SIM_MAX_POLICIES];
  int name_w, label_w;
  int oom;
} run_state;

/* ---- reporting (sim_print.c) ---- */

/* The timeline's name of command i ("burst 100 client"), into buf. */
const char *sim_cmd_label(const sim_scenario *sc, size_t i, char *buf,
                          size_t len);

/* The timeline's heading: the scenario, its policies, the columns. */
void sim_print_header(run_state *rs);

/* Prints a row of the timeline (a step, or a group of alike steps). */
void sim_print_row(run_state *rs, const row *r);

/* Ends one step at t (src: its command, -1 for retries): merges it into
   the pending row, or prints that row and starts another. */
void sim_end_step(run_state *rs, int64_t t, int64_t src);

/* Per retry setting that was used: what it cost each policy. */
void sim_print_retries(run_state *rs);

/* The plot's titles, legends and lanes, from the first pass's figures. */
void sim_fill_chart(const sim_scenario *sc, const sim_options *opts,
                    const run_state *first, svg_chart *c);

/* The plotted level of a decision, in the policy's own terms. */
int64_t sim_level_of(const sl_policy *p, const sl_decision *d);

#endif /* SLUICE_SIM_IMPL_H */
