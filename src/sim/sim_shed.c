/*
 * sim_shed.c — the simulator's load shedder (docs/shedding.md): the
 * library's sl_shedder on the scenario's clock, in front of every policy,
 * its fleet-usage signal against a declared capacity, and the classes the
 * requests carry:
 *
 *   shedder 100/s critical:never default:90% sheddable:60%
 *   class sheddable            # the requests that follow are sheddable
 *
 * A shed request is denied before its policy sees it (it charges nothing
 * there), told to retry after a second; what the shedder let through
 * counts into its usage. The report says, per policy and class, how many
 * requests came, were served, and were shed.
 */
#include <stdio.h>
#include <string.h>

#include "../base/duration.h"
#include "../base/num.h"
#include "sim_impl.h"

static int serr(char *err, size_t len, int line, const char *msg,
                const char *what) {
  snprintf(err, len, "line %d: %s%.40s%s", line, msg, what ? what : "",
           what ? "'" : "");
  return -1;
}

int sim_shed_parse(sim_shed *s, int line, char **w, int n, char *err,
                   size_t err_len) {
  if (n < 3)
    return serr(err, err_len, line, "expected 'shedder CAPACITY/PERIOD "
                "NAME:THRESHOLD...' (most important class first; a "
                "threshold such as 90% or never)", NULL);
  sim_shed ns = {.on = 1};
  const char *slash = strchr(w[1], '/');
  int64_t cap = 0, per = 0;
  char num[24];
  size_t nl = slash ? (size_t)(slash - w[1]) : 0;
  if (nl && nl < sizeof num) {
    memcpy(num, w[1], nl);
    num[nl] = '\0';
  }
  char msg[200];
  if (!nl || nl >= sizeof num || parse_int(num, 1, SL_LIMIT_MAX, 0, &cap) ||
      (lab_parse_duration(slash + 1, 86400 * NS_S, &per, msg, sizeof msg) &&
       !(per = duration_unit_ns(slash + 1, strlen(slash + 1)))) ||
      per < NS_MS)
    return serr(err, err_len, line, "shedder: the capacity must be "
                "requests per period such as 100/s, not '", w[1]);
  ns.opts.capacity = (uint64_t)cap;
  ns.opts.window_ns = per;
  if (n - 2 > SL_SHED_CLASSES_MAX)
    return serr(err, err_len, line, "shedder: at most 8 classes", NULL);
  int len = snprintf(ns.text, sizeof ns.text, "capacity %s,", w[1]);
  for (int i = 2; i < n; i++) {
    char *colon = strchr(w[i], ':');
    uint32_t c = (uint32_t)(i - 2), pm = SL_SHED_NEVER;
    size_t name_len = colon ? (size_t)(colon - w[i]) : 0;
    if (!colon || !name_len || name_len > SIM_NAME_MAX ||
        (strcmp(colon + 1, "never") &&
         sl_shed_parse_level(colon + 1, strlen(colon + 1), &pm)))
      return serr(err, err_len, line, "shedder: a class is NAME:THRESHOLD "
                  "(a percentage or never), not '", w[i]);
    memcpy(ns.names[c], w[i], name_len);
    ns.names[c][name_len] = '\0';
    for (uint32_t k = 0; k < c; k++)
      if (!strcmp(ns.names[k], ns.names[c]))
        return serr(err, err_len, line, "shedder: a class named twice: '",
                    ns.names[c]);
    ns.opts.threshold_pm[c] = pm;
    ns.opts.nclasses = c + 1;
    if (len > 0 && (size_t)len < sizeof ns.text)
      len += snprintf(ns.text + len, sizeof ns.text - (size_t)len, " %s",
                      w[i]);
  }
  if (sl_shed_opts_validate(&ns.opts, msg, sizeof msg)) {
    snprintf(err, err_len, "line %d: shedder: %s", line, msg);
    return -1;
  }
  *s = ns;
  return 0;
}

int sim_shed_class(const sim_shed *s, const char *name) {
  for (uint32_t c = 0; c < s->opts.nclasses; c++)
    if (!strcmp(s->names[c], name)) return (int)c;
  return -1;
}

int sim_shed_default(const sim_shed *s) {
  int c = sim_shed_class(s, "default");
  return c >= 0 ? c : (int)s->opts.nclasses - 1;
}

int sim_shed_init(run_state *rs) {
  if (!rs->sc->shed.on) return 0;
  for (int p = 0; p < rs->sc->npol; p++) {
    int rc = sl_shedder_new(&rs->sc->shed.opts, &rs->shed[p], NULL, 0);
    if (rc) return rc;
  }
  return 0;
}

void sim_shed_free(run_state *rs) {
  for (int p = 0; p < SIM_MAX_POLICIES; p++) {
    sl_shedder_free(rs->shed[p]);
    rs->shed[p] = NULL;
  }
}

int sim_shed_take(run_state *rs, int p, int64_t t, int32_t cls, int64_t cost,
                  sl_decision *d) {
  if (!rs->shed[p]) return 0;
  rs->cls_req[p][cls]++;
  sl_shed_decision sd;
  sl_shedder_take(rs->shed[p], (uint32_t)cls, cost, t, &sd);
  if (!sd.shed) return 0;
  rs->cls_shed[p][cls]++;
  *d = (sl_decision){0, 0, 0, 0, NS_S, 0, 0};
  return 1;
}

void sim_shed_served(run_state *rs, int p, int32_t cls) {
  if (rs->shed[p]) rs->cls_served[p][cls]++;
}

void sim_shed_print(run_state *rs) {
  const sim_scenario *sc = rs->sc;
  if (!sc->shed.on) return;
  for (int p = 0; p < sc->npol; p++)
    for (uint32_t c = 0; c < sc->shed.opts.nclasses; c++)
      fprintf(rs->out, "shed policy=%s class=%s requests=%llu served=%llu "
                       "shed=%llu\n",
              sc->pol[p].name, sc->shed.names[c],
              (unsigned long long)rs->cls_req[p][c],
              (unsigned long long)rs->cls_served[p][c],
              (unsigned long long)rs->cls_shed[p][c]);
}
