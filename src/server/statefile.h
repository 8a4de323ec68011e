/*
 * statefile.h — the daemon's --state-file: the memory store's keys loaded
 * at start, and saved every --state-interval and at a clean stop, each
 * outcome logged (the engine does the work: engine_state_save/load).
 */
#ifndef SLUICE_SERVER_STATEFILE_H
#define SLUICE_SERVER_STATEFILE_H

#include <stdint.h>

#include "../engine/engine.h"

/*
 * Loads path into e's store, before the workers start. A missing file is
 * a first start; a damaged one is logged with its offset and renamed to
 * PATH.bad (kept for a look, out of the next save's way), and the daemon
 * starts without state rather than not at all.
 */
void statefile_load(engine *e, const char *path);

/* Saves e's store to path, logging a failure (and, with `loud`, a
   success: the stop's save). 0 or -1. */
int statefile_save(engine *e, const char *path, int loud);

#endif /* SLUICE_SERVER_STATEFILE_H */
