/*
 * sim.h — `sluice sim`'s scenario language and runner, apart from the
 * command line, so that the fuzz harness (fuzz/sim_fuzz.c) drives exactly
 * the code users do.
 *
 * A scenario is text, one command per line, '#' starts a comment:
 *   policy NAME SPEC                      a limiter to run (1 to 8, first)
 *   at TIME | advance DURATION            move the virtual clock
 *   request [KEY] [COST]                  one request now
 *   burst N [KEY] [COST]                  N requests at this instant
 *   every DURATION for DURATION [KEY] [COST]
 *                                         a steady stream starting now
 *   retry off | immediate [every D] [max N] | after [jitter D] [max N] |
 *         full-jitter BASE CAP [max N]
 *                                         what clients do when denied
 *   fleet N [lb round-robin|sticky] [store local|exact|sync D]
 *           [on_store_error allow|deny|local]
 *                                         N daemons behind a load balancer
 *   store down | store up                 the shared store fails, recovers
 * The runner decides every request through the public API, one limiter per
 * policy on one store, on a virtual clock, and reports a timeline, one
 * summary line per policy and, on request, an SVG plot.
 */
#ifndef SLUICE_SIM_H
#define SLUICE_SIM_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define SIM_MAX_POLICIES 8
#define SIM_MAX_REQUESTS UINT64_C(1000000)
#define SIM_MAX_BYTES ((size_t)16 << 20) /* largest scenario text */

typedef struct sim_scenario sim_scenario;

/*
 * Parses a scenario of len bytes (need not be NUL-terminated). A scenario
 * may generate at most max_requests decisions per policy, counting every
 * retry it allows (requests x attempts), so a hostile one cannot run for
 * long or fill memory. Returns 0 with *out (free with sim_free), or -1 with
 * "line N: message" in err.
 */
int sim_parse(const char *text, size_t len, uint64_t max_requests,
              sim_scenario **out, char *err, size_t err_len);
void sim_free(sim_scenario *sc);

/* The number of policies (1 to SIM_MAX_POLICIES). */
int sim_npolicies(const sim_scenario *sc);

/* The comment lines that open the scenario (up to 6, joined by '\n';
   "" if none): its description. */
const char *sim_description(const sim_scenario *sc);

typedef struct sim_options {
  const char *name; /* scenario name, for headings */
  int summary_only; /* only the summary lines */
  int all_steps;    /* one row per step, no grouping of alike steps */
  int color;        /* ANSI colours in the timeline */
  uint64_t seed;    /* retry jitter */
  FILE *svg;        /* NULL: no plot */
  FILE *json;       /* set: the run as one JSON document here (sim_json.c),
                       instead of the timeline and the summary lines */
} sim_options;

/*
 * Runs the scenario: writes the timeline (unless summary_only), then
 *   summary policy=NAME allowed=N denied=M max_in_window=K
 * per policy, to out, the plot to
 * opts->svg when set, and only the JSON document when opts->json is set. The result is a
 * function of the scenario and the seed alone. Returns 0, or -1 with a
 * message in err (out of memory, an I/O error on the plot).
 */
int sim_run(const sim_scenario *sc, const sim_options *opts, FILE *out,
            char *err, size_t err_len);

/* The built-in scenarios (examples.c). */
typedef struct sim_example {
  const char *name;
  const char *what; /* one line */
  const char *text; /* the scenario */
} sim_example;

extern const sim_example sim_examples[];
extern const size_t sim_nexamples;

#endif /* SLUICE_SIM_H */
