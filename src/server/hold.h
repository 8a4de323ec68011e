/*
 * hold.h — answers held back on a worker's loop: the wait mode, where an
 * allowed leaky_bucket request is answered only when its delay is over,
 * so that a reverse proxy passes requests on spaced as the bucket drains
 * (docs/server.md, "Wait mode"). A held answer costs a timer entry and the
 * connection it waits on, nothing else: the worker goes on serving. They
 * are a resource any client can make sluice hold, so they are bounded
 * (--max-waiting across the daemon, each worker at most twice its share),
 * counted (sluice_waiting, sluice_waits_total) and released at once when
 * the daemon stops.
 */
#ifndef SLUICE_SERVER_HOLD_H
#define SLUICE_SERVER_HOLD_H

#include "server.h"

/* One held answer: filled by hold_start, owned by the front end (it lives
   as long as the request or command it answers). */
typedef struct hold_entry {
  int64_t at;                         /* clock_mono_ns to release at */
  void (*fire)(struct hold_entry *e); /* sends the answer */
  size_t slot;                        /* in the worker's heap; internal */
} hold_entry;

/* Takes a place for an answer that may be held, before its decision (so
   that a full daemon refuses without charging anything). 0, or -1 when
   --max-waiting or the worker's share is reached (counted as "full"). */
int hold_reserve(worker *w);
/* Gives back a place taken by hold_reserve and not used. */
void hold_unreserve(worker *w);
/* Holds e in a reserved place until delay_ns from now; then e->fire(e)
   runs on w's loop, and the place is given back. 0, or -1 out of memory
   (the place is given back; answer at once). */
int hold_start(worker *w, hold_entry *e, int64_t delay_ns);
/* Drops a held e before its time (its client went away): no fire. */
void hold_cancel(worker *w, hold_entry *e);
/* Fires every held answer now (a stop: the daemon answers what it holds
   rather than keep connections open through the grace). */
void hold_release_all(worker *w);
/* The delay to hold decision r for, in wait mode with the longest hold
   cap: its allowed limits' longest delay, or 0 (answer at once). A delay
   above cap, which only a backend that does not bound it itself gives
   (exact fleet mode: the Redis script), turns r into a denial with
   retry_after the excess (its slot stays charged; docs/server.md, "Wait
   mode"). */
int64_t hold_delay(eng_result *r, int64_t cap);
/* Frees w's heap and timers (the worker's end). */
void hold_worker_dispose(worker *w);

#endif /* SLUICE_SERVER_HOLD_H */
