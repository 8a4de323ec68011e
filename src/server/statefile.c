/*
 * statefile.c — the daemon's --state-file (statefile.h): the engine's
 * state.c does the saving and loading; this file says what happened, in
 * one log line each, and decides what a damaged file means for the start.
 */
#include "statefile.h"

#include <stdio.h>

#include "../base/clock.h"
#include "../base/log.h"

void statefile_load(engine *e, const char *path) {
  eng_state_stats st;
  char err[512];
  int rc = engine_state_load(e, path, clock_wall_ns(), &st, err, sizeof err);
  if (rc == 1) {
    log_msg("info", "state file %s: none yet; starting with no state", path);
  } else if (rc == 0) {
    log_msg("info",
            "state file %s: %llu keys restored (%llu back to fresh, %llu of "
            "rules or policies that are gone, %llu without room)",
            path, (unsigned long long)st.restored,
            (unsigned long long)st.fresh, (unsigned long long)st.unmatched,
            (unsigned long long)st.failed);
  } else {
    char bad[4200];
    snprintf(bad, sizeof bad, "%s.bad", path);
    int kept = rename(path, bad) == 0;
    log_msg("error", "%s; starting with no state%s%s%s", err,
            kept ? " (the file is now " : "", kept ? bad : "",
            kept ? ")" : "");
  }
}

int statefile_save(engine *e, const char *path, int loud) {
  eng_state_stats st;
  char err[512];
  if (engine_state_save(e, path, clock_wall_ns(), &st, err, sizeof err)) {
    log_msg("error", "state file: cannot save: %s", err);
    return -1;
  }
  if (loud)
    log_msg("info", "state file %s: %llu keys saved (%llu bytes, %lld ms)",
            path, (unsigned long long)st.keys, (unsigned long long)st.bytes,
            (long long)(st.ns / 1000000));
  return 0;
}
