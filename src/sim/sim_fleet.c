/*
 * sim_fleet.c — fleets in the simulator: N daemons behind a load balancer
 * deciding one limit, on the virtual clock, with the library's own
 * algorithms. What the daemon does for real with Redis (docs/fleet.md) is
 * modelled by where each decision's state lives:
 *
 *   local   every node has its own state (a limiter per node): N nodes
 *           let N times the limit through;
 *   exact   every node decides on the one shared state (the store), as
 *           exact mode's script does in Redis;
 *   sync    every node decides on its own state, and every sync interval
 *           pushes the charges it made to the shared state and brings its
 *           level down to the fleet's, as approximate mode's sync thread
 *           does: between syncs the fleet can overshoot.
 *
 * While the store is down (`store down`), exact mode answers each request
 * by on_store_error: allow (fail open, nothing counted), deny (fail
 * closed) or local (the node's own state); sync mode goes on locally and
 * keeps its charges until the store is back; local mode never used it.
 */
#include <stdlib.h>
#include <string.h>

#include "../base/hash.h"
#include "../base/num.h"
#include "../limiter.h"
#include "sim_impl.h"

static int ferr(char *err, size_t err_len, int line, const char *msg,
                const char *word) {
  snprintf(err, err_len, "line %d: %s%.40s%s", line, msg, word ? word : "",
           word ? "'" : "");
  return -1;
}

/* A word's index in a NULL-terminated table, or -1. */
static int word_of(const char *const *names, const char *w) {
  for (int i = 0; names[i]; i++)
    if (!strcmp(names[i], w)) return i;
  return -1;
}

static const char *const lb_names[] = {"round-robin", "sticky", NULL};
static const char *const mode_names[] = {"local", "exact", "sync", NULL};
static const char *const onerr_names[] = {"allow", "deny", "local", NULL};

int sim_fleet_parse(sim_fleet *f, int line, char **w, int n, char *err,
                    size_t err_len) {
  int64_t v;
  if (n < 2)
    return ferr(err, err_len, line,
                "expected 'fleet N [lb round-robin|sticky] [store "
                "local|exact|sync DURATION] [on_store_error "
                "allow|deny|local]'", NULL);
  if (parse_int(w[1], 1, SIM_MAX_NODES, 0, &v))
    return ferr(err, err_len, line, "fleet: the number of nodes must be 1 to "
                "64, not '", w[1]);
  sim_fleet nf = {.nodes = (int)v, .lb = LB_ROUND_ROBIN, .mode = FLEET_LOCAL,
                  .on_error = ONERR_ALLOW};
  for (int i = 2; i < n; i += 2) {
    if (i + 1 >= n) return ferr(err, err_len, line, "fleet: a value must "
                                "follow '", w[i]);
    const char *val = w[i + 1];
    if (!strcmp(w[i], "lb")) {
      if ((nf.lb = word_of(lb_names, val)) < 0)
        return ferr(err, err_len, line, "fleet: lb is round-robin or sticky, "
                    "not '", val);
    } else if (!strcmp(w[i], "store")) {
      if ((nf.mode = word_of(mode_names, val)) < 0)
        return ferr(err, err_len, line, "fleet: store is local, exact or "
                    "sync DURATION, not '", val);
      if (nf.mode == FLEET_SYNC) {
        char msg[200];
        if (i + 2 >= n)
          return ferr(err, err_len, line, "fleet: store sync needs an "
                      "interval, e.g. 'store sync 1s'", NULL);
        if (lab_parse_duration(w[i + 2], SIM_TIME_MAX, &nf.sync_ns, msg,
                               sizeof msg) || nf.sync_ns < NS_MS)
          return ferr(err, err_len, line, "fleet: the sync interval must be "
                      "a duration of at least 1ms, not '", w[i + 2]);
        i++;
      }
    } else if (!strcmp(w[i], "on_store_error")) {
      if ((nf.on_error = word_of(onerr_names, val)) < 0)
        return ferr(err, err_len, line, "fleet: on_store_error is allow, deny "
                    "or local, not '", val);
    } else {
      return ferr(err, err_len, line, "fleet: unknown setting '", w[i]);
    }
  }
  char d[40] = "";
  if (nf.mode == FLEET_SYNC) {
    d[0] = ' ';
    lab_fmt_short(nf.sync_ns, d + 1, sizeof d - 1);
  }
  snprintf(nf.text, sizeof nf.text, "%d nodes, lb %s, store %s%s, "
           "on_store_error %s", nf.nodes, lb_names[nf.lb],
           mode_names[nf.mode], d, onerr_names[nf.on_error]);
  *f = nf;
  return 0;
}

int sim_fleet_init(run_state *rs) {
  const sim_scenario *sc = rs->sc;
  int nn = sc->fleet.nodes, np = sc->npol;
  if (nn == 0) return 0;
  rs->nlim = calloc((size_t)(np * nn), sizeof *rs->nlim);
  rs->charges = calloc((size_t)(np * nn) * (sc->nkeys + 1),
                       sizeof *rs->charges);
  if (!rs->nlim || !rs->charges) return SL_ENOMEM;
  for (int p = 0; p < np; p++) {
    rs->next_sync[p] = sc->fleet.sync_ns;
    for (int i = 0; i < nn; i++) {
      int e = sl_limiter_new(rs->store, &sc->pol[p].pol, &rs->nlim[p * nn + i]);
      if (e) return e;
    }
  }
  return 0;
}

void sim_fleet_free(run_state *rs) {
  if (rs->nlim)
    for (int i = 0; i < rs->sc->npol * rs->sc->fleet.nodes; i++)
      sl_limiter_free(rs->nlim[i]);
  free(rs->nlim);
  free(rs->charges);
  rs->nlim = NULL;
  rs->charges = NULL;
}

/* Where the charges of policy p's node i for key k wait for the sync. */
static size_t charges_at(const run_state *rs, int p, int i, uint32_t k) {
  return ((size_t)p * (size_t)rs->sc->fleet.nodes + (size_t)i) *
             rs->sc->nkeys + k;
}

/* One sync round of policy p at `at` for `key`: every node's charges to
   the shared state (forced: they were allowed already), then every node's
   level down to the fleet's. */
static int sync_round(run_state *rs, int p, int64_t at, uint32_t k) {
  int nn = rs->sc->fleet.nodes;
  const char *key = rs->sc->keys[k];
  size_t kl = strlen(key);
  int64_t fleet_level, level;
  int e;
  for (int i = 0; i < nn; i++) {
    int64_t *charged = &rs->charges[charges_at(rs, p, i, k)];
    if (*charged &&
        (e = sl_limiter_force(rs->lim[p], key, kl, *charged, at, &level)))
      return e;
    *charged = 0;
  }
  if ((e = sl_limiter_force(rs->lim[p], key, kl, 0, at, &fleet_level)))
    return e;
  for (int i = 0; i < nn; i++)
    if ((e = limiter_force_to(rs->nlim[p * nn + i], key, kl, fleet_level, at,
                              &level)))
      return e;
  return 0;
}

/* Runs the sync rounds due by t: the first one due (it carries the
   charges), and the last one before t (the levels as of then); the
   rounds between would change nothing. Every key of the scenario is
   synced (the parser allows SIM_SYNC_KEYS of them in sync mode, which
   bounds a round's work). */
static int sync_until(run_state *rs, int p, int64_t t) {
  const sim_scenario *sc = rs->sc;
  int64_t every = sc->fleet.sync_ns;
  if (rs->store_down || rs->next_sync[p] > t) return 0;
  int64_t first = rs->next_sync[p], last = t - t % every;
  for (int pass = 0; pass < (last > first ? 2 : 1); pass++)
    for (size_t k = 0; k < sc->nkeys; k++) {
      int e = sync_round(rs, p, pass ? last : first, (uint32_t)k);
      if (e) return e;
    }
  rs->next_sync[p] = last + every;
  return 0;
}

int sim_fleet_take(run_state *rs, int p, int64_t t, uint32_t key,
                   int64_t cost, sl_decision *d) {
  const sim_scenario *sc = rs->sc;
  const sim_fleet *f = &sc->fleet;
  const char *k = sc->keys[key];
  size_t kl = strlen(k);
  rs->node = 0;
  rs->via = VIA_STATE;
  if (f->nodes == 0) return sl_limiter_take(rs->lim[p], k, kl, cost, t, d);
  rs->node = f->lb == LB_STICKY
                 ? (int)(fnv1a_str(FNV1A_INIT, k) % (uint64_t)f->nodes)
                 : (int)(rs->turn[p]++ % (uint64_t)f->nodes);
  sl_limiter *own = rs->nlim[p * f->nodes + rs->node];
  int e;
  switch (f->mode) {
  case FLEET_LOCAL:
    return sl_limiter_take(own, k, kl, cost, t, d);
  case FLEET_SYNC:
    if (sc->nkeys > 0 && (e = sync_until(rs, p, t))) return e;
    if ((e = sl_limiter_take(own, k, kl, cost, t, d))) return e;
    if (d->allowed) rs->charges[charges_at(rs, p, rs->node, key)] += cost;
    return 0;
  default:
    break;
  }
  if (!rs->store_down) return sl_limiter_take(rs->lim[p], k, kl, cost, t, d);
  if (f->on_error == ONERR_LOCAL) {
    rs->via = VIA_DOWN_LOCAL;
    return sl_limiter_take(own, k, kl, cost, t, d);
  }
  /* Fail open or closed: the shared state is out of reach, so nothing is
     counted; the level shown is the node's own, unchanged. */
  if ((e = sl_limiter_take(own, k, kl, 0, t, d))) return e;
  rs->via = f->on_error == ONERR_ALLOW ? VIA_DOWN_ALLOW : VIA_DOWN_DENY;
  d->allowed = f->on_error == ONERR_ALLOW;
  d->delay_ns = 0;
  d->retry_after_ns = 0;
  return 0;
}

sl_limiter *sim_fleet_plot_lim(run_state *rs, int p) {
  const sim_fleet *f = &rs->sc->fleet;
  return f->nodes && f->mode != FLEET_EXACT ? rs->nlim[p * f->nodes]
                                            : rs->lim[p];
}
