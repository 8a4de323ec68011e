/*
 * resp_txn.c — a transaction's queue (see resp_txn.h).
 *
 * One buffer holds the queued commands back to back: for each, its
 * argument count, then each argument's length and bytes (lengths as
 * uint32_t, native order: the buffer never leaves the process). One
 * allocation that grows, instead of one per argument, and nothing to
 * walk but the buffer when it is freed.
 */
#include <stdint.h>
#include <string.h>

#include "resp_txn.h"

void resp_txn_begin(resp_txn *t) {
  strbuf_free(&t->q);
  *t = (resp_txn){.on = 1};
}

void resp_txn_end(resp_txn *t) {
  strbuf_free(&t->q);
  *t = (resp_txn){0};
}

size_t resp_txn_cost(const resp_cmd *cmd) {
  size_t n = sizeof(uint32_t) * (1 + (size_t)cmd->argc);
  for (int i = 0; i < cmd->argc; i++) n += cmd->len[i];
  return n;
}

int resp_txn_add(resp_txn *t, const resp_cmd *cmd) {
  size_t cost = resp_txn_cost(cmd);
  if (t->n >= RESP_TXN_MAX_COMMANDS || cost > RESP_TXN_MAX_BYTES ||
      t->q.len + cost > RESP_TXN_MAX_BYTES) {
    t->dirty = 1;
    return -1;
  }
  size_t mark = t->q.len;
  uint32_t argc = (uint32_t)cmd->argc;
  strbuf_add(&t->q, &argc, sizeof argc);
  for (int i = 0; i < cmd->argc; i++) {
    uint32_t len = (uint32_t)cmd->len[i];
    strbuf_add(&t->q, &len, sizeof len);
    strbuf_add(&t->q, cmd->argv[i], cmd->len[i]);
  }
  if (t->q.oom) {
    t->q.len = mark;
    t->q.oom = 0;
    t->dirty = 1;
    return -2;
  }
  t->n++;
  return 0;
}

int resp_txn_next(const resp_txn *t, size_t *off, resp_cmd *cmd) {
  size_t at = *off;
  uint32_t argc, len;
  if (at + sizeof argc > t->q.len) return 0;
  memcpy(&argc, t->q.p + at, sizeof argc);
  at += sizeof argc;
  cmd->argc = (int)argc;
  for (uint32_t i = 0; i < argc; i++) {
    memcpy(&len, t->q.p + at, sizeof len);
    at += sizeof len;
    cmd->argv[i] = t->q.p + at;
    cmd->len[i] = len;
    at += len;
  }
  *off = at;
  return 1;
}
