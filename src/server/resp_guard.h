/*
 * resp_guard.h — what a RESP connection may hold, and for how long.
 *
 * Every byte of input a connection has read but not yet parsed counts
 * against one process-wide budget (--max-input-buffer, after Redis's
 * maxmemory-clients): past it, the connections holding the most are
 * closed, largest first. A connection that has not authenticated (with
 * --password) is closed --resp-auth-timeout after it was accepted; an
 * authenticated one after --resp-idle-timeout without reading or writing.
 * Each close is counted by reason (sluice_resp_closed_total), and the
 * bytes held now are a gauge (sluice_resp_input_buffer_bytes).
 *
 * The process-wide part (resp_shared) is made by the first worker's
 * resp_worker_init and freed by the last worker's resp_worker_dispose;
 * it also holds resp_auth.c's failed-AUTH limiter.
 */
#ifndef SLUICE_SERVER_RESP_GUARD_H
#define SLUICE_SERVER_RESP_GUARD_H

#include <stdatomic.h>

#include "resp_conn.h"

/* Why a connection was closed by sluice (one counter each). */
typedef enum resp_close_reason {
  RESP_CLOSE_TOO_BIG,        /* a command over --max-command-bytes */
  RESP_CLOSE_UNAUTH_TOO_BIG, /* before AUTH: over RESP_UNAUTH_* */
  RESP_CLOSE_BUDGET,         /* the largest when --max-input-buffer is full */
  RESP_CLOSE_AUTH_TIMEOUT,   /* no AUTH within --resp-auth-timeout */
  RESP_CLOSE_IDLE,           /* idle for --resp-idle-timeout */
  RESP_CLOSE_AUTH_FAILURES,  /* RESP_AUTH_MAX_FAILURES failed AUTHs */
  RESP_CLOSE_N
} resp_close_reason;

/* Failed AUTH attempts, by what happened (one counter each). */
enum { RESP_AUTH_WRONG, RESP_AUTH_THROTTLED, RESP_AUTH_N };

/* What the workers share (server's `resp`). */
typedef struct resp_shared {
  atomic_int users;         /* workers initialised and not yet disposed */
  atomic_size_t input;      /* input bytes held by every connection */
  atomic_long holders;      /* connections holding any */
  int m_closed[RESP_CLOSE_N], m_auth[RESP_AUTH_N], m_input; /* metric ids */
  int m_queued, m_txn_full; /* MULTI's queued commands; refused as over */
  /* For INFO (relaxed counters: figures, not decisions). */
  atomic_ullong commands;   /* commands read, every connection */
  atomic_llong accepted;    /* connections accepted: the last CLIENT ID */
  atomic_long clients;      /* RESP connections open */
  atomic_llong ops_at_ns, ops_at; /* instantaneous_ops_per_sec's sample */
  atomic_llong ops_rate;
  int64_t started_ns;       /* clock_mono_ns when made (INFO's uptime) */
  struct resp_auth *auth;   /* resp_auth.c's */
} resp_shared;

/* Per-worker setup and teardown of the shared part and the timers (from
   resp_worker_init / resp_worker_dispose). 0, or -1 after logging why. */
int resp_guard_worker_init(worker *w);
void resp_guard_worker_dispose(worker *w);

/* A new connection: its timer (the AUTH deadline, or the idle one). */
void resp_guard_open(resp_conn *c);
/* The connection read or wrote: its idle timer starts again. */
void resp_guard_touch(resp_conn *c);
/* AUTH succeeded: from the AUTH deadline to the idle timeout. */
void resp_guard_authed(resp_conn *c);
/*
 * Counts what c's input buffer holds now; when that takes the process
 * over --max-input-buffer, closes this worker's largest holders (c too,
 * if it is one). Returns 1 when c itself was closed (the caller must not
 * touch it again), else 0.
 */
int resp_guard_account(resp_conn *c);
/* The connection is closing: its bytes leave the budget, its timer stops. */
void resp_guard_forget(resp_conn *c);

/* Counts a close (by the caller) for `why`; a failed AUTH (RESP_AUTH_*). */
void resp_count_close(worker *w, resp_close_reason why);
void resp_count_auth(worker *w, int kind);
/* A command read (INFO's total_commands_processed). */
void resp_count_command(worker *w);
/* A connection accepted: its id (CLIENT ID), from 1. */
long long resp_count_connection(worker *w);
/* Commands queued by MULTI, up or down by delta (the gauge). */
void resp_count_queued(worker *w, int64_t delta);
/* A command refused for the queue's bounds. */
void resp_count_txn_full(worker *w);

#endif /* SLUICE_SERVER_RESP_GUARD_H */
