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

enum { CMD_REQUEST, CMD_BURST, CMD_EVERY, CMD_STORE };
enum { RETRY_OFF, RETRY_IMMEDIATE, RETRY_AFTER, RETRY_FULL_JITTER };

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
  int64_t base_ns, cap_ns; /* full-jitter: sl_backoff_delay's */
  uint32_t max_attempts;
  char text[128]; /* as shown in the report */
} sim_retry;

/* A fleet (sim_fleet.c): `nodes` daemons behind a load balancer, each
   counting on its own (local), sharing one store exactly (exact), or
   counting locally and syncing with the store every sync_ns (sync). While
   the store is down, exact mode answers by on_error. nodes == 0: no fleet,
   one process deciding everything (the language before fleets). */
#define SIM_MAX_NODES 64
#define SIM_SYNC_KEYS 4 /* keys a scenario in sync mode may use */
enum { LB_ROUND_ROBIN, LB_STICKY };
enum { FLEET_LOCAL, FLEET_EXACT, FLEET_SYNC };
enum { ONERR_ALLOW, ONERR_DENY, ONERR_LOCAL };
/* How a decision was reached (JSON's "via"): by the policy's state, or
   while the store was down, by on_store_error. */
enum { VIA_STATE, VIA_DOWN_ALLOW, VIA_DOWN_DENY, VIA_DOWN_LOCAL };

typedef struct sim_fleet {
  int nodes, lb, mode, on_error;
  int64_t sync_ns;
  char text[128]; /* as shown in the timeline's heading */
} sim_fleet;

/* The load shedder in front of every policy (sim_shed.c): `shedder
   CAPACITY/PERIOD NAME:THRESHOLD...` (classes most important first), and
   `class NAME` giving the requests that follow their class. */
typedef struct sim_shed {
  int on;
  sl_shed_opts opts;
  char names[SL_SHED_CLASSES_MAX][SIM_NAME_MAX + 1];
  char text[200]; /* as shown in the heading */
} sim_shed;

/* One request-making command (or, CMD_STORE, the store going down or up:
   per_instant 0, cost 1 for down, 0 for up): `instants` instants, every_ns apart from t0,
   each with per_instant requests of `cost` for `key`. */
typedef struct sim_cmd {
  int line;
  int kind;
  int64_t t0, every_ns;
  uint64_t instants, per_instant;
  uint32_t key;
  int64_t cost;
  int32_t retry; /* index in retries, -1 = off */
  int32_t cls;   /* the shedder's class (0 without a shedder) */
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
  sim_fleet fleet;
  sim_shed shed;
  char description[640]; /* up to 6 lines */
};

/* ---- the run (sim_run.c) ---- */

/* A pending retry of one policy. */
typedef struct retry_ev {
  int64_t t, first_t, cost;
  uint64_t seq;
  uint32_t key, attempt;
  int32_t retry, cls;
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
  /* The fleet (sim_fleet.c): every node's own limiter per policy
     (nlim[p * nodes + n]; lim[p] is the shared store's), the charges each
     node made since its last sync, the balancer's turn, the store's state. */
  sl_limiter **nlim;
  int64_t *charges;
  int64_t next_sync[SIM_MAX_POLICIES];
  uint64_t turn[SIM_MAX_POLICIES];
  int store_down;
  int node, via; /* the last decision's node and how it was reached */
  uint64_t delayed[SIM_MAX_POLICIES];
  /* The shedder per policy (sim_shed.c), and per class what it saw. */
  sl_shedder *shed[SIM_MAX_POLICIES];
  uint64_t cls_req[SIM_MAX_POLICIES][SL_SHED_CLASSES_MAX];
  uint64_t cls_shed[SIM_MAX_POLICIES][SL_SHED_CLASSES_MAX];
  uint64_t cls_served[SIM_MAX_POLICIES][SL_SHED_CLASSES_MAX];
} run_state;

/* ---- the load shedder (sim_shed.c) ---- */

/* Parses 'shedder CAPACITY/PERIOD NAME:THRESHOLD...' (w[0] "shedder").
   0, or -1 with "line N: message" in err. */
int sim_shed_parse(sim_shed *s, int line, char **w, int n, char *err,
                   size_t err_len);
/* The class NAME names, or -1. The class of requests before any `class`
   line: "default" if there is one, else the last. */
int sim_shed_class(const sim_shed *s, const char *name);
int sim_shed_default(const sim_shed *s);
/* Makes each policy's shedder (none without one). 0, or an SL_E* code. */
int sim_shed_init(run_state *rs);
void sim_shed_free(run_state *rs);
/* Whether the shedder sheds a request of class cls and cost at t in
   front of policy p (counted; *d then says denied, retry after a
   second). */
int sim_shed_take(run_state *rs, int p, int64_t t, int32_t cls, int64_t cost,
                  sl_decision *d);
/* The served request of class cls counts as served. */
void sim_shed_served(run_state *rs, int p, int32_t cls);
/* Prints the shedder's lines: per policy and class, requests, served,
   shed ("shed policy=P class=C requests=N served=N shed=N"). */
void sim_shed_print(run_state *rs);

/* ---- fleets (sim_fleet.c) ---- */

/* Parses 'fleet N [lb round-robin|sticky] [store local|exact|sync D]
   [on_store_error allow|deny|local]' (w[0] is "fleet") into *f. 0, or -1
   with "line N: message" in err. */
int sim_fleet_parse(sim_fleet *f, int line, char **w, int n, char *err,
                    size_t err_len);

/* Makes the run's per-node limiters (none without a fleet). 0, or an
   SL_E* code. */
int sim_fleet_init(run_state *rs);
void sim_fleet_free(run_state *rs);

/* Decides one request of key under policy p at t, as the fleet would:
   picks the node, syncs when due, routes to the node's or the shared
   state, or answers by on_store_error while the store is down. Sets
   rs->node and rs->via. Returns 0 with *d, or an SL_E* code. */
int sim_fleet_take(run_state *rs, int p, int64_t t, uint32_t key,
                   int64_t cost, sl_decision *d);

/* The limiter whose key-0 state the plot draws for policy p. */
sl_limiter *sim_fleet_plot_lim(run_state *rs, int p);

/* ---- JSON (sim_json.c) ---- */

/* The document's head: the scenario, its fleet, its policies, and the
   opening of the events array. */
void sim_json_head(const run_state *rs);
/* One decision (after sim_fleet_take), as an array of numbers. */
void sim_json_event(run_state *rs, int p, int64_t t, uint32_t key,
                    const sl_decision *d);
/* The events' end and the summary per policy. */
void sim_json_tail(const run_state *rs);

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

/* What the plotted level is for an algorithm: "tokens", "queue",
   "count" or "estimate". */
const char *sim_level_name(sl_algo a);

/* The plotted level of a decision, in the policy's own terms. */
int64_t sim_level_of(const sl_policy *p, const sl_decision *d);

#endif /* SLUICE_SIM_IMPL_H */
