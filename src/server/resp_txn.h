/*
 * resp_txn.h — a RESP connection's transaction (MULTI ... EXEC): what it
 * has queued, and the bounds on it. Pure (no sockets, no h2o), so that the
 * RESP fuzz harness drives the same code the daemon runs.
 *
 * Between MULTI and EXEC a connection's commands are queued, not run: each
 * is copied (arguments and all) into one buffer. The queue is bounded by
 * RESP_TXN_MAX_COMMANDS commands and RESP_TXN_MAX_BYTES bytes; a command
 * past either is refused and, as with any error while queueing (an unknown
 * command, a wrong arity), the transaction is then "dirty": EXEC answers
 * EXECABORT and runs nothing, as Redis does. The queued bytes also count
 * against --max-input-buffer (resp_guard.c).
 */
#ifndef SLUICE_SERVER_RESP_TXN_H
#define SLUICE_SERVER_RESP_TXN_H

#include <stddef.h>

#include "../base/strbuf.h"
#include "resp_parse.h"

#define RESP_TXN_MAX_COMMANDS 1024
#define RESP_TXN_MAX_BYTES (1 << 20)

typedef struct resp_txn {
  int on;      /* between MULTI and EXEC / DISCARD */
  int dirty;   /* a command was refused while queueing: EXEC aborts */
  size_t n;    /* commands queued */
  strbuf q;    /* the queued commands (resp_txn_add's encoding) */
} resp_txn;

/* Starts a transaction (MULTI): an empty queue, not dirty. */
void resp_txn_begin(resp_txn *t);
/* Ends it (EXEC, DISCARD, RESET, a close): the queue is freed. */
void resp_txn_end(resp_txn *t);

/*
 * Queues a copy of cmd. 0 when queued; -1 when it would pass a bound, -2
 * out of memory: then nothing is queued and the transaction is dirty.
 */
int resp_txn_add(resp_txn *t, const resp_cmd *cmd);

/*
 * The queued command at byte offset *off of the queue into cmd (its
 * arguments point into the queue, which must not change while cmd is
 * used); *off moves past it. 1 when a command was read, 0 at the end.
 */
int resp_txn_next(const resp_txn *t, size_t *off, resp_cmd *cmd);

/* The bytes one command takes in the queue. */
size_t resp_txn_cost(const resp_cmd *cmd);

#endif /* SLUICE_SERVER_RESP_TXN_H */
