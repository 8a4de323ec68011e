/*
 * resp_multi.c — RESP transactions (MULTI, EXEC, DISCARD), WATCH, and
 * RESET: the commands that change what a connection is in the middle of.
 *
 * MULTI starts queueing (resp_txn.h: a bounded copy of each command);
 * each queued command answers +QUEUED, and one that fails its checks
 * (unknown, wrong arity, NOAUTH, over the queue's bounds) answers its
 * error and makes EXEC answer EXECABORT, as Redis does. EXEC runs the
 * queue in order through the same dispatch as any command and answers
 * one array of their replies; a command that fails while running (a bad
 * number, a full store) has its error in the array and the others still
 * run, as in Redis.
 *
 * What atomic means here: the queued commands run back to back on the
 * connection's worker, with no other command of this connection between
 * them, and each decision is atomic as always. Other connections' commands
 * may land between two of them (every worker decides under the store's
 * shard locks, not one global lock), so a transaction is not isolated the
 * way a Redis transaction is. In fleet mode each decision is its own call
 * to Redis. WATCH is refused: sluice has no value a client could read and
 * then change conditionally, and a WATCH that never aborts would promise
 * what it does not keep. redis-py, ioredis and node-redis send WATCH only
 * when the application calls watch().
 */
#include <string.h>

#include "resp_auth.h"
#include "resp_conn.h"
#include "resp_guard.h"

void cmd_multi(resp_conn *c, const resp_cmd *cmd) {
  (void)cmd;
  if (c->txn.on) {
    out_err(c, "ERR MULTI calls can not be nested");
    return;
  }
  resp_txn_begin(&c->txn);
  out_raw(c, "+OK\r\n", 5);
}

void resp_multi_end(resp_conn *c) {
  if (c->txn.n) resp_count_queued(c->w, -(int64_t)c->txn.n);
  resp_txn_end(&c->txn);
}

void resp_multi_queue(resp_conn *c, const resp_cmd *cmd) {
  int rc = resp_txn_add(&c->txn, cmd);
  if (rc == 0) {
    resp_count_queued(c->w, 1);
    out_raw(c, "+QUEUED\r\n", 9);
  } else if (rc == -1) {
    resp_count_txn_full(c->w);
    out_err(c, "ERR the transaction is too big (at most %d commands, %d "
               "bytes): EXEC will abort it",
            RESP_TXN_MAX_COMMANDS, RESP_TXN_MAX_BYTES);
  } else {
    out_err(c, "ERR out of memory queueing the command: EXEC will abort "
               "the transaction");
  }
}

/*
 * Runs the queue: the transaction ends first (so its commands run, not
 * queue), its queue kept until they have. w->cmd is EXEC's own parsed
 * command, done with once here: each queued command is read into it.
 */
void cmd_exec(resp_conn *c, const resp_cmd *cmd) {
  (void)cmd;
  if (!c->txn.on) {
    out_err(c, "ERR EXEC without MULTI");
    return;
  }
  if (c->txn.dirty) {
    resp_multi_end(c);
    out_err(c, "EXECABORT Transaction discarded because of previous "
               "errors.");
    return;
  }
  resp_txn t = c->txn;
  c->txn = (resp_txn){0};
  if (t.n) resp_count_queued(c->w, -(int64_t)t.n);
  resp_header_ordered(c, t.n);
  resp_cmd *one = c->w->cmd;
  size_t off = 0;
  while (resp_txn_next(&t, &off, one)) resp_run_ordered(c, one);
  resp_txn_end(&t);
}

void cmd_discard(resp_conn *c, const resp_cmd *cmd) {
  (void)cmd;
  if (!c->txn.on) {
    out_err(c, "ERR DISCARD without MULTI");
    return;
  }
  resp_multi_end(c);
  out_raw(c, "+OK\r\n", 5);
}

void cmd_watch(resp_conn *c, const resp_cmd *cmd) {
  (void)cmd;
  if (c->txn.on) {
    out_err(c, "ERR WATCH inside MULTI is not allowed");
    c->txn.dirty = 1; /* as Redis: a refused command aborts EXEC */
    return;
  }
  out_err(c, "ERR WATCH is not supported by sluice (its keys' state "
             "changes with every decision; see docs/server.md)");
}

/* UNWATCH: nothing is ever watched (redis-py sends it after a watch()). */
void cmd_unwatch(resp_conn *c, const resp_cmd *cmd) {
  (void)cmd;
  out_raw(c, "+OK\r\n", 5);
}

/*
 * RESET, as Redis 6.2+: the transaction discarded, the name and library
 * info cleared, RESP2 again, and (with --password) not authenticated any
 * more; the reply is +RESET.
 */
void cmd_reset(resp_conn *c, const resp_cmd *cmd) {
  (void)cmd;
  resp_multi_end(c);
  resp_name_set(&c->name, NULL, 0);
  resp_name_set(&c->lib_name, NULL, 0);
  resp_name_set(&c->lib_ver, NULL, 0);
  c->proto = 2;
  c->admin = 0;
  if (c->w->srv->o.password) c->authed = 0;
  out_raw(c, "+RESET\r\n", 8);
}
