/*
 * resp_batch.c — a pipeline's throttle commands, decided together.
 *
 * A client that pipelines (redis-benchmark -P 16, a redis-py pipeline
 * without a transaction) sends many commands in one read. Consecutive
 * SL.THROTTLE and CL.THROTTLE commands of one input buffer wait here, up
 * to ENG_BATCH_MAX, and are decided by one engine_decide_batch: every
 * key's state is prefetched before the first is decided, instead of one
 * cache miss after another. Any other command, the end of the buffer, or
 * a full batch flushes it first, so the replies go out in the commands'
 * order, byte for byte those of one-at-a-time decisions (tests/unit/
 * test_cell.c, tests/integration/serve_resp.sh): the batch decides in
 * order, at one instant (the flush's clock), and a command the batch
 * could not decide (a refused policy, a cost above the burst) is decided
 * alone for its error, having charged nothing.
 *
 * Only where decisions answer at once: a connection of a daemon whose
 * decisions may wait for Redis (exact mode), inside MULTI, before AUTH, or
 * behind a waiting reply goes one command at a time, and so does one
 * with WAIT (its reply may be held: resp_wait.c); so does a command
 * whose arguments are not in the input buffer (an inline command's are
 * unquoted into the parser's scratch, which the next parse reuses). The
 * batch's commands stay unconsumed in the input buffer until the flush:
 * their arguments point there, and h2o frees a buffer consumed to its end.
 */
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "../base/clock.h"
#include "resp_conn.h"
#include "resp_guard.h"

struct resp_batch {
  size_t n;
  size_t bytes; /* input the batch's commands came from, unconsumed */
  resp_throttle t[ENG_BATCH_MAX];
  eng_batch_item it[ENG_BATCH_MAX];
};

int resp_batch_init(worker *w) {
  w->batch = calloc(1, sizeof *w->batch);
  return w->batch ? 0 : -1;
}

void resp_batch_dispose(worker *w) {
  free(w->batch);
  w->batch = NULL;
}

size_t resp_batch_bytes(const resp_conn *c) { return c->w->batch->bytes; }

/* Whether every argument of cmd lies in the unconsumed input. */
static int args_in_input(const resp_conn *c, const resp_cmd *cmd) {
  const char *lo = c->sock->input->bytes, *hi = lo + c->sock->input->size;
  for (int i = 0; i < cmd->argc; i++)
    if (cmd->argv[i] < lo || cmd->argv[i] + cmd->len[i] > hi) return 0;
  return 1;
}

/* Whether cmd names a throttle command within its arity (any case:
   folding with 0x20 is exact on letters and leaves "." alone). */
static int throttle_cmd(const resp_cmd *cmd) {
  static const char name[] = "l.throttle";
  const char *s = cmd->argv[0];
  if (cmd->len[0] != 11) return 0;
  for (size_t i = 1; i < 11; i++)
    if ((i == 2 ? s[i] : s[i] | 0x20) != name[i - 1]) return 0;
  if ((s[0] | 0x20) == 's') return cmd->argc >= 3 && cmd->argc <= 4;
  if ((s[0] | 0x20) == 'c') return cmd->argc >= 5 && cmd->argc <= 6;
  return 0;
}

int resp_batch_add(resp_conn *c, const resp_cmd *cmd, size_t bytes) {
  struct resp_batch *b = c->w->batch;
  if (c->w->may_wait || c->txn.on || c->tail ||
      (c->w->srv->o.password && !c->authed) || !throttle_cmd(cmd) ||
      !args_in_input(c, cmd))
    return 0;
  char err[400];
  if (resp_throttle_parse(cmd, &b->t[b->n], err, sizeof err) ||
      b->t[b->n].wait)
    return 0; /* its error, or its wait (resp_wait.c), in its turn */
  b->t[b->n].q.client = resp_client;
  b->t[b->n].q.client_ud = c;
  engine_count(c->w->et, EC_RESP_COMMANDS, 1);
  resp_count_command(c->w);
  b->n++;
  b->bytes += bytes;
  if (b->n == ENG_BATCH_MAX) resp_batch_flush(c);
  return 1;
}

/* One command the batch did not decide: decided alone, as resp.c would. */
static void decide_alone(resp_conn *c, const resp_throttle *t) {
  eng_result r;
  int rc = engine_decide(c->w->et, &t->q, &r, NULL, NULL);
  if (rc)
    out_err(c, "ERR %s", r.msg);
  else
    resp_throttle_reply(c, t, &r.st[0].d);
}

void resp_batch_flush(resp_conn *c) {
  struct resp_batch *b = c->w->batch;
  if (b->n) {
    int64_t now = clock_wall_ns();
    for (size_t i = 0; i < b->n; i++) {
      b->t[i].q.now = now;
      b->it[i].q = &b->t[i].q;
    }
    int batched = engine_decide_batch(c->w->et, b->it, b->n) == 0;
    for (size_t i = 0; i < b->n; i++)
      if (batched && !b->it[i].rc)
        resp_throttle_reply(c, &b->t[i], &b->it[i].d);
      else
        decide_alone(c, &b->t[i]);
  }
  if (b->bytes) h2o_buffer_consume(&c->sock->input, b->bytes);
  b->n = b->bytes = 0;
}
