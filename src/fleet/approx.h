/*
 * approx.h — approximate mode's backend (--sync INTERVAL), as its sync
 * thread (sync.c) sees it: decisions stay on this daemon's store, every
 * local charge is recorded per (limiter, key), and every interval the sync
 * takes them (approx_take), pushes them to Redis by force and hands back
 * the fleet's level for each (approx_apply).
 */
#ifndef SLUICE_FLEET_APPROX_H
#define SLUICE_FLEET_APPROX_H

#include <stddef.h>
#include <stdint.h>

#include "fleet.h"

typedef struct approx approx;

/* The approximate backend b is, or NULL when b is another. */
approx *fleet_approx_of(eng_backend *b);

/*
 * The local charges of every thread since the last call, merged per
 * (limiter, key), as a list (owned by the caller until approx_apply).
 */
typedef struct approx_delta approx_delta;
approx_delta *approx_take(approx *a);
const char *approx_delta_key(const approx_delta *d, size_t *len); /* Redis */
const sl_policy *approx_delta_policy(const approx_delta *d);
int64_t approx_delta_cost(const approx_delta *d);
approx_delta *approx_delta_next(const approx_delta *d);

/*
 * After the sync: level[i] is the fleet's signed level for the list's i-th
 * key (what it has left, negative = owed). A key whose local limiter is
 * above it, less what this daemon has charged since the round began, is
 * charged the difference by force (sl_limiter_force): the fleet's debt
 * becomes this daemon's. A key Redis did not run (APPROX_LEVEL_UNSENT;
 * level NULL: all) is pushed again with the next rounds (approx_take), for
 * up to 10 s; one Redis may or may not have run (APPROX_LEVEL_UNKNOWN) is
 * not (at most once). Frees the round.
 */
#define APPROX_LEVEL_UNKNOWN INT64_MIN
#define APPROX_LEVEL_UNSENT (INT64_MIN + 1)
void approx_apply(approx *a, approx_delta *list, const int64_t *level,
                  int64_t now);

/* What the sync thread did, for /metrics (sluice_sync_*). */
enum {
  APPROX_ROUNDS,      /* rounds with charges to push */
  APPROX_CALLS,       /* script calls sent */
  APPROX_ERRORS,      /* calls that failed (timeout, connection, error) */
  APPROX_RETRIED,     /* cost Redis did not take, pushed again next round */
  APPROX_UNCONFIRMED, /* cost sent without a reply (maybe taken) */
  APPROX_LOST,        /* cost never pushed: 10 s of failures, or memory */
  APPROX_RESETS,      /* other daemons' resets applied here */
  APPROX_COUNT
};
void approx_count(approx *a, int what, uint64_t n);

/*
 * Resets reach every daemon: the one that gets a reset publishes the Redis
 * keys it deleted (PUBLISH on approx_reset_channel's channel, after the
 * UNLINKs); each daemon's sync thread subscribes and hands what it reads
 * to approx_reset_message, which drops this daemon's own state and
 * unpushed charges for each key named (its own messages are skipped: it
 * dropped them when it got the reset). Returns how many (limit, key)
 * states it dropped, or -1: not a reset message of sluice's.
 */
void approx_reset_channel(const approx *a, char *dst, size_t len);
int approx_reset_message(approx *a, const void *msg, size_t len);
/* Whether the sync thread is subscribed now (sluice_sync_resets_subscribed). */
void approx_subscribed(approx *a, int on);

#endif /* SLUICE_FLEET_APPROX_H */
