/*
 * resp.c — the Redis-protocol front end: any Redis client can ask sluice.
 *
 * Commands:
 *   CL.THROTTLE key max_burst count period [quantity]   redis-cell's, exactly
 *   SL.THROTTLE key policy [cost] [WAIT [max_wait]]
 *                                     [allowed, limit, remaining,
 *                                      retry_after_ms, reset_ms, delay_ms];
 *                                      WAIT: held for the delay (wait
 *                                      mode, resp_wait.c)
 *   SL.CHECK domain K1 V1 [K2 V2 ...] [HITS n]   config-driven, one
 *                                      descriptor: [allowed, limit,
 *                                      remaining, retry_after_ms, reset_ms,
 *                                      rule] (limit -1: no rule matched,
 *                                      rule ""; or an unlimited rule)
 *   SL.ACQUIRE key policy, SL.RELEASE key lease, SL.RENEW key lease:
 *                                      concurrency leases (resp_lease.c)
 *   SL.RESET key [policy]              forgets key under the ad-hoc policy,
 *                                      or every one this daemon has used:
 *                                      the number of states dropped
 *   PING [msg], ECHO msg, INFO, DBSIZE, SELECT n, AUTH [user] password,
 *   HELLO [2 [AUTH user password] [SETNAME name]], QUIT, and COMMAND /
 *   CONFIG GET / CLIENT SETNAME answered harmlessly so redis-cli and
 *   redis-benchmark work.
 * One table (`commands`, below) says each command's name, arity, whether
 * it may run before AUTH, and its handler; dispatch() only looks it up.
 *
 * Connections live on the worker's h2o event loop. Every complete command
 * in the input is answered in order (pipelining); replies accumulate in one
 * buffer while the previous one is being written, and reading pauses when
 * a client stops reading its replies. A protocol error gets "-ERR
 * Protocol error: ..." and the connection is closed, as Redis does.
 *
 * Fleet mode: a throttle command (and SL.RESET, also in approximate mode:
 * its DELs) waits for Redis without holding up the connection's later
 * commands. Each waiting command has a slot in the
 * connection's queue; replies that are ready behind a waiting one wait in
 * their own slots, so replies still leave in command order.
 */
#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../algo/cell.h"
#include "resp_auth.h"
#include "resp_conn.h"
#include "resp_guard.h"

#define OUT_PAUSE (1 << 20) /* stop reading past this much unsent output */
#define SLOTS_PAUSE 1024    /* ... or this many commands waiting for Redis */
#define WBUF_KEEP (64 << 10) /* a written buffer bigger than this is freed */

enum { K_CL, K_SL_THROTTLE, K_SL_CHECK, K_SL_RESET, K_FN };

#define SL_CHECK_ARITY                                                  \
  "ERR wrong number of arguments for 'sl.check' command (SL.CHECK domain " \
  "key value [key value ...] [HITS n] [PRIORITY class] [WAIT [max_wait]])"

/* ---- connection lifetime ---- */

static void on_read(h2o_socket_t *sock, const char *err);
static void flush(resp_conn *c);

void resp_conn_close(resp_conn *c) {
  worker *w = c->w;
  resp_guard_forget(c);
  /* A waiting command's slot is freed by its answer; the others now. */
  for (resp_slot *s = c->head, *next; s; s = next) {
    next = s->next;
    if (s->done) {
      free(s->buf);
      free(s);
    } else if (s->held) {
      resp_wait_cancel(s);
    } else {
      s->c = NULL;
    }
  }
  h2o_linklist_unlink(&c->link);
  h2o_socket_close(c->sock);
  resp_multi_end(c);
  free(c->name);
  free(c->lib_name);
  free(c->lib_ver);
  strbuf_free(&c->out);
  strbuf_free(&c->wbuf);
  free(c);
  w->resp_conns--;
  atomic_fetch_sub(&w->srv->connections, 1);
  engine_connections(w->et, 1, -1);
}

static void on_written(h2o_socket_t *sock, const char *err) {
  resp_conn *c = sock->data;
  c->writing = 0;
  if (err) {
    resp_conn_close(c);
    return;
  }
  resp_guard_touch(c);
  /* A burst's buffer goes back once written: an idle connection keeps
     little, and the budget counts what is held. */
  if (c->wbuf.cap > WBUF_KEEP) strbuf_free(&c->wbuf);
  if (!c->reading && !c->closing) {
    c->reading = 1;
    h2o_socket_read_start(sock, on_read);
  }
  on_read(sock, NULL); /* input may be waiting behind the paused read */
}

/* Sends what has accumulated, or closes when done and closing. */
static void flush(resp_conn *c) {
  if (c->writing) return;
  if (c->out.len == 0) {
    if (c->closing && !c->head) resp_conn_close(c);
    return;
  }
  /* Swap buffers: `out` keeps accumulating while `wbuf` is written. */
  strbuf b = c->wbuf;
  c->wbuf = c->out;
  c->out = b;
  c->out.len = 0;
  h2o_iovec_t v = h2o_iovec_init(c->wbuf.p, c->wbuf.len);
  c->writing = 1;
  h2o_socket_write(c->sock, &v, 1, on_written);
}

/* ---- commands ---- */

int resp_arg_is(const resp_cmd *cmd, int i, const char *word) {
  size_t n = strlen(word);
  return cmd->len[i] == n && !strncasecmp(cmd->argv[i], word, n);
}

/* A signed decimal argument in [lo, hi]. */
static int arg_i64(const resp_cmd *cmd, int i, long long lo, long long hi,
                   long long *out) {
  char buf[32];
  if (cmd->len[i] == 0 || cmd->len[i] >= sizeof buf) return -1;
  if (cmd->len[i] <= 18) { /* plain digits (a cost): no strtoll */
    long long v = 0;
    size_t k = 0;
    for (; k < cmd->len[i] && cmd->argv[i][k] >= '0' && cmd->argv[i][k] <= '9';
         k++)
      v = v * 10 + (cmd->argv[i][k] - '0');
    if (k == cmd->len[i]) {
      if (v < lo || v > hi) return -1;
      *out = v;
      return 0;
    }
  }
  memcpy(buf, cmd->argv[i], cmd->len[i]);
  buf[cmd->len[i]] = '\0';
  char *end;
  long long v = strtoll(buf, &end, 10);
  if (*end || v < lo || v > hi) return -1;
  *out = v;
  return 0;
}

/* redis-cell's seconds: whole seconds, plus one if >= 1 ms is left over. */
static long long cell_secs(int64_t ns) {
  return ns / 1000000000 + ((ns % 1000000000) / 1000000 > 0);
}

/* A failed decision or reset: the engine's message (engine/errors.h). */
static void engine_error(resp_conn *c, const char *msg) {
  out_err(c, "ERR %s", msg);
}

/* redis-cell's reply: a retry only when limited by what can fit. */
static void reply_cl(resp_conn *c, const sl_decision *d) {
  int64_t v[5] = {!d->allowed, d->limit, d->remaining,
                  !d->allowed && d->retry_after_ns >= 0
                      ? cell_secs(d->retry_after_ns)
                      : -1,
                  cell_secs(d->reset_ns)};
  out_ints(c, v, 5);
}

static void reply_sl_throttle(resp_conn *c, const sl_decision *d) {
  int64_t v[6] = {d->allowed,
                  d->limit,
                  d->remaining,
                  ns_to_ms_up(d->retry_after_ns),
                  ns_to_ms_up(d->reset_ns),
                  ns_to_ms_up(d->delay_ns)};
  out_ints(c, v, 6);
}

/* SL.THROTTLE's reply from its result (a reply that waits). */
static void reply_sl_throttle_r(resp_conn *c, const eng_result *r) {
  reply_sl_throttle(c, &r->st[0].d);
}

static void reply_sl_check(resp_conn *c, const eng_result *r) {
  if (r->shed.state == ENG_SHED_YES) { /* the load shedder's (resp_shed.c) */
    reply_shed(c, r);
    return;
  }
  int k = r->by_descriptor[0]; /* the most restrictive, or an unlimited */
  if (k < 0 || r->st[k].unlimited) {
    static const char head[] = "*6\r\n:1\r\n:-1\r\n:-1\r\n:0\r\n:0\r\n";
    out_raw(c, head, sizeof head - 1);
    if (k < 0)
      out_bulk(c, "", 0); /* no rule matched */
    else
      out_bulk(c, r->st[k].limit->rule, strlen(r->st[k].limit->rule));
    return;
  }
  const eng_status *s = &r->st[k];
  int64_t v[5] = {r->allowed, s->d.limit, s->d.remaining,
                  s->d.retry_after_ns < 0 ? -1 : ns_to_ms_up(s->d.retry_after_ns),
                  ns_to_ms_up(s->d.reset_ns)};
  out_hdr(c, '*', 6);
  for (size_t i = 0; i < 5; i++) out_int(c, v[i]);
  out_bulk(c, s->limit->rule, strlen(s->limit->rule));
}

/* ---- commands that may wait for Redis ---- */

/* Moves the reply bytes written since `mark` into slot s (done). */
void slot_keep(resp_conn *c, resp_slot *s, size_t mark) {
  s->len = c->out.len - mark;
  s->buf = s->len ? malloc(s->len) : NULL;
  if (s->len && !s->buf)
    c->closing = 1; /* out of memory: the connection cannot stay in order */
  else if (s->len)
    memcpy(s->buf, c->out.p + mark, s->len);
  c->out.len = mark;
}

void slot_link(resp_conn *c, resp_slot *s) {
  s->next = NULL;
  if (c->tail)
    c->tail->next = s;
  else
    c->head = s;
  c->tail = s;
  c->nslots++;
}

/* Sends the replies that are ready, in order. */
static void slots_drain(resp_conn *c) {
  while (c->head && c->head->done) {
    resp_slot *s = c->head;
    out_raw(c, s->buf, s->len);
    c->head = s->next;
    if (!c->head) c->tail = NULL;
    c->nslots--;
    free(s->buf);
    free(s);
  }
}

static void on_read(h2o_socket_t *sock, const char *err);

void slot_answered(resp_conn *c, resp_slot *s, size_t mark) {
  slot_keep(c, s, mark);
  slot_ready(c, s);
}

void slot_ready(resp_conn *c, resp_slot *s) {
  s->done = 1;
  int paused = c->nslots >= SLOTS_PAUSE;
  slots_drain(c);
  if (paused && c->nslots < SLOTS_PAUSE && !c->closing)
    on_read(c->sock, NULL); /* parses what waited, then flushes */
  else
    flush(c);
}

/* The engine's answer for a waiting command. */
static void slot_done(void *ud, int rc, eng_result *r) {
  resp_slot *s = ud;
  resp_conn *c = s->c;
  if (!c) {
    free(s);
    return;
  }
  size_t mark = c->out.len;
  if (rc)
    engine_error(c, r->msg);
  else if (s->kind == K_CL)
    reply_cl(c, &r->st[0].d);
  else if (s->kind == K_SL_THROTTLE)
    reply_sl_throttle(c, &r->st[0].d);
  else if (s->kind == K_FN)
    s->reply(c, r);
  else
    reply_sl_check(c, r);
  slot_answered(c, s, mark);
}

/*
 * Runs CALL (an engine_decide deciding into `r`, with slot_done and `slot`;
 * reply_: K_FN's reply writer, else NULL)
 * and leaves its rc in `rc`: in fleet mode with an answer to wait for, the
 * command's slot joins the queue and the handler returns.
 */
#define RESP_DECIDE(kind_, reply_, CALL)                     \
  eng_result stack_r, *r = &stack_r;                         \
  resp_slot *slot = NULL;                                    \
  if (c->w->may_wait) {                                      \
    slot = malloc(sizeof *slot + sizeof *r);                 \
    if (!slot) {                                             \
      out_err(c, "ERR out of memory");                       \
      return;                                                \
    }                                                        \
    slot->c = c;                                             \
    slot->done = 0;                                          \
    slot->kind = (kind_);                                    \
    slot->reply = (reply_);                                  \
    slot->buf = NULL;                                        \
    slot->len = 0;                                           \
    slot->held = 0;                                          \
    r = (eng_result *)(void *)(slot + 1);                    \
  }                                                          \
  int rc = (CALL);                                           \
  if (rc == ENG_PENDING) {                                   \
    slot_link(c, slot);                                      \
    return;                                                  \
  }                                                          \
  if (slot) { /* answered at once: keep it, free the slot */ \
    stack_r = *r;                                            \
    r = &stack_r;                                            \
  }                                                          \
  free(slot)

/* CL.THROTTLE key max_burst count period [quantity] as t's query: the
   arguments checked as redis-cell checks them (algo_cell_args). */
static int cl_parse(const resp_cmd *cmd, resp_throttle *t, char *err,
                    size_t n) {
  int64_t v[4]; /* max_burst, count, period, quantity */
  if (algo_cell_args(cmd->argc, cmd->argv, cmd->len, &t->rate, v, err, n))
    return -1;
  /* The rate as a GCRA policy, for the backends that keep one state per
     rate (approximate fleet mode), and for figures when Redis fails. */
  t->p = (sl_policy){SL_GCRA, (uint32_t)v[1], (uint32_t)(v[0] + 1),
                     v[2] * 1000000000};
  char why[128];
  if (sl_policy_validate(&t->p, why, sizeof why)) {
    snprintf(err, n, ALGO_CELL_ERR "max_burst %lld at %lld per %lld s: %s",
             (long long)v[0], (long long)v[1], (long long)v[2], why);
    return -1;
  }
  t->q = (eng_query){.kind = ENG_QUERY_CELL,
                     .key = cmd->argv[1],
                     .key_len = cmd->len[1],
                     .policy = &t->p,
                     .cell = &t->rate,
                     .cost = v[3]};
  return 0;
}

/* SL.THROTTLE key policy [cost] [WAIT [max_wait]] as t's query. */
static int sl_parse(const resp_cmd *cmd, resp_throttle *t, char *err,
                    size_t n) {
  long long cost = 1;
  int i = 3;
  if (i < cmd->argc && !resp_arg_is(cmd, i, "WAIT")) {
    if (arg_i64(cmd, i++, 0, INT64_MAX, &cost)) {
      snprintf(err, n, "ERR cost must be an integer >= 0");
      return -1;
    }
  }
  if (i < cmd->argc && !resp_arg_is(cmd, i, "WAIT")) {
    snprintf(err, n, "ERR syntax error: expected WAIT [max_wait] after the "
                     "cost");
    return -1;
  }
  if (i + 2 < cmd->argc) {
    snprintf(err, n, "ERR syntax error: nothing may follow WAIT's max_wait");
    return -1;
  }
  if (i < cmd->argc &&
      resp_wait_arg(i + 1 < cmd->argc ? cmd->argv[i + 1] : NULL,
                    i + 1 < cmd->argc ? cmd->len[i + 1] : 0, &t->wait, err, n))
    return -1;
  t->q = (eng_query){.kind = ENG_QUERY_POLICY,
                     .key = cmd->argv[1],
                     .key_len = cmd->len[1],
                     .spec = cmd->argv[2],
                     .spec_len = cmd->len[2],
                     .cost = cost};
  return 0;
}

int resp_throttle_parse(const resp_cmd *cmd, resp_throttle *t, char *err,
                        size_t n) {
  t->cell = (cmd->argv[0][0] | 0x20) == 'c'; /* CL.THROTTLE, or SL. */
  t->wait = 0;
  return t->cell ? cl_parse(cmd, t, err, n) : sl_parse(cmd, t, err, n);
}

void resp_throttle_reply(resp_conn *c, const resp_throttle *t,
                         const sl_decision *d) {
  if (t->cell)
    reply_cl(c, d);
  else
    reply_sl_throttle(c, d);
}

/* CL.THROTTLE and SL.THROTTLE, one at a time (resp_batch.c decides a
   pipeline's together). */
static void cmd_throttle(resp_conn *c, const resp_cmd *cmd) {
  resp_throttle t;
  char err[400];
  if (resp_throttle_parse(cmd, &t, err, sizeof err)) {
    out_err(c, "%s", err);
    return;
  }
  t.q.now = clock_wall_ns();
  t.q.client = resp_client;
  t.q.client_ud = c;
  int64_t cap = resp_wait_cap(c, t.wait);
  if (cap) {
    resp_wait_decide(c, &t.q, reply_sl_throttle_r, cap);
    return;
  }
  RESP_DECIDE(t.cell ? K_CL : K_SL_THROTTLE, NULL,
              engine_decide(c->w->et, &t.q, r, slot ? slot_done : NULL, slot));
  if (rc) {
    engine_error(c, r->msg);
    return;
  }
  resp_throttle_reply(c, &t, &r->st[0].d);
}

void resp_decide(resp_conn *c, const eng_query *q, resp_reply_fn reply) {
  RESP_DECIDE(K_FN, reply,
              engine_decide(c->w->et, q, r, slot ? slot_done : NULL, slot));
  if (rc) {
    engine_error(c, r->msg);
    return;
  }
  reply(c, r);
}

static void cmd_sl_check(resp_conn *c, const resp_cmd *cmd) {
  int argc = cmd->argc;
  long long hits = 1;
  const char *prio = NULL;
  size_t prio_len = 0;
  int64_t wait = -1;
  char err[200];
  /* Trailing options, each at most once: HITS n, PRIORITY class, WAIT
     [max_wait] (alone only where the pairs leave an odd count). */
  for (int round = 0; round < 3 && argc >= 4; round++) {
    if (wait < 0 && argc % 2 && resp_arg_is(cmd, argc - 1, "WAIT")) {
      wait = INT64_MAX;
      argc--;
    } else if (wait < 0 && argc >= 6 && resp_arg_is(cmd, argc - 2, "WAIT")) {
      if (resp_wait_arg(cmd->argv[argc - 1], cmd->len[argc - 1], &wait, err,
                        sizeof err)) {
        out_err(c, "%s", err);
        return;
      }
      argc -= 2;
    } else if (resp_arg_is(cmd, argc - 2, "HITS") && hits == 1) {
      if (arg_i64(cmd, argc - 1, 0, INT64_MAX, &hits)) {
        out_err(c, "ERR HITS must be an integer >= 0");
        return;
      }
      argc -= 2;
    } else if (argc >= 6 && resp_arg_is(cmd, argc - 2, "PRIORITY") &&
               !prio) { /* (a pair must stay: a key may be "PRIORITY") */
      prio = cmd->argv[argc - 1];
      prio_len = cmd->len[argc - 1];
      argc -= 2;
    }
  }
  if (argc < 4 || (argc - 2) % 2 != 0) {
    out_err(c, "%s", SL_CHECK_ARITY);
    return;
  }
  eng_descriptor d;
  d.n = (size_t)(argc - 2) / 2;
  d.hits = -1;
  if (d.n > ENG_MAX_ENTRIES) {
    out_err(c, "ERR at most %d key/value pairs", ENG_MAX_ENTRIES);
    return;
  }
  for (size_t i = 0; i < d.n; i++)
    d.entries[i] = (cfg_entry){cmd->argv[2 + 2 * i], cmd->len[2 + 2 * i],
                               cmd->argv[3 + 2 * i], cmd->len[3 + 2 * i]};
  eng_request req = {cmd->argv[1], cmd->len[1], &d, 1, hits};
  eng_query q = {.kind = ENG_QUERY_RULES,
                 .req = &req,
                 .now = clock_wall_ns(),
                 .priority = prio,
                 .priority_len = prio_len,
                 .client = resp_client,
                 .client_ud = c};
  int64_t cap = hits ? resp_wait_cap(c, wait < 0 ? 0 : wait) : 0;
  if (cap) {
    resp_wait_decide(c, &q, reply_sl_check, cap);
    return;
  }
  RESP_DECIDE(K_SL_CHECK, NULL,
              engine_decide(c->w->et, &q, r, slot ? slot_done : NULL, slot));
  if (rc) {
    engine_error(c, r->msg);
    return;
  }
  reply_sl_check(c, r);
}

/* SL.RESET's reply: the states dropped, or why Redis did not drop them. */
static void reply_reset(resp_conn *c, int rc, const eng_reset *r) {
  if (rc)
    engine_error(c, r->msg);
  else
    out_int(c, r->dropped);
}

static void reset_done(void *ud, int rc, eng_reset *r) {
  resp_slot *s = ud;
  resp_conn *c = s->c;
  if (!c) {
    free(s);
    return;
  }
  size_t mark = c->out.len;
  reply_reset(c, rc, r);
  slot_answered(c, s, mark);
}

/* SL.RESET key [policy]: in fleet mode (either) it waits for Redis's DELs,
   in a slot of the connection's queue like a waiting decision. */
static void cmd_sl_reset(resp_conn *c, const resp_cmd *cmd) {
  resp_slot *slot = malloc(sizeof *slot + sizeof(eng_reset));
  if (!slot) {
    out_err(c, "ERR out of memory");
    return;
  }
  *slot = (resp_slot){.c = c, .kind = K_SL_RESET};
  eng_reset *r = (eng_reset *)(void *)(slot + 1);
  eng_query q = {.kind = ENG_QUERY_POLICY,
                 .key = cmd->argv[1],
                 .key_len = cmd->len[1],
                 .spec = cmd->argc == 3 ? cmd->argv[2] : NULL,
                 .spec_len = cmd->argc == 3 ? cmd->len[2] : 0};
  int rc = engine_reset(c->w->et, &q, r, reset_done, slot);
  if (rc == ENG_PENDING) {
    slot_link(c, slot);
    return;
  }
  reply_reset(c, rc, r);
  free(slot);
}

static void cmd_quit(resp_conn *c, const resp_cmd *cmd) {
  (void)cmd;
  out_raw(c, "+OK\r\n", 5);
  c->closing = 1;
}

static void cmd_ping(resp_conn *c, const resp_cmd *cmd) {
  if (cmd->argc == 1)
    out_raw(c, "+PONG\r\n", 7);
  else
    out_bulk(c, cmd->argv[1], cmd->len[1]);
}

static void cmd_echo(resp_conn *c, const resp_cmd *cmd) {
  out_bulk(c, cmd->argv[1], cmd->len[1]);
}

/* "ERR unknown command 'FOO', with args beginning with: 'bar' ", as Redis
   words it. */
void reply_unknown(resp_conn *c, const resp_cmd *cmd) {
  char args[128] = "";
  size_t used = 0;
  for (int i = 1; i < cmd->argc && used < 80; i++)
    used += (size_t)snprintf(args + used, sizeof args - used, "'%.*s' ",
                             (int)(cmd->len[i] < 20 ? cmd->len[i] : 20),
                             cmd->argv[i]);
  out_err(c, "ERR unknown command '%.*s', with args beginning with: %s",
          (int)(cmd->len[0] < 40 ? cmd->len[0] : 40), cmd->argv[0], args);
}

/*
 * The commands. A command outside its arity gets arity_err, or when that
 * is NULL, Redis's "wrong number of arguments for 'name' command". Before
 * AUTH (with --password), only the commands marked so run (AUTH, HELLO,
 * QUIT, RESET); anything else gets NOAUTH, an unknown command and PING
 * included, as Redis answers. With --admin-token, an admin command runs
 * only on a connection that gave it (AUTH admin <token>): SL.RESET, which
 * drops state that every client shares (in fleet mode, every daemon's).
 * The rest decide for, or read about, their own keys, or show what
 * /metrics shows anyway. Inside MULTI, every command but those marked
 * RESP_CMD_TXN is queued (resp_multi.c).
 */

/* A row's name and its length. */
#define NAME(s) s, sizeof(s) - 1
#define BA RESP_CMD_BEFORE_AUTH
#define TX RESP_CMD_TXN
#define KW (RESP_CMD_KEY | RESP_CMD_WRITE)

static const resp_command commands[] = {
    {NAME("CL.THROTTLE"), 5, 6, KW, cmd_throttle, ALGO_CELL_USAGE,
     "redis-cell's GCRA: [limited, limit, remaining, retry_after, reset]"},
    {NAME("SL.THROTTLE"), 3, 6, KW, cmd_throttle,
     "ERR wrong number of arguments for 'sl.throttle' command (SL.THROTTLE "
     "key policy [cost] [WAIT [max_wait]])",
     "Decides for key under an ad-hoc policy"},
    {NAME("SL.CHECK"), 4, -1, RESP_CMD_WRITE, cmd_sl_check, SL_CHECK_ARITY,
     "Decides one descriptor by the configured rules"},
    {NAME("SL.ACQUIRE"), 3, 3, KW, cmd_sl_acquire,
     "ERR wrong number of arguments for 'sl.acquire' command (SL.ACQUIRE "
     "key policy)",
     "Takes a lease under a concurrency policy"},
    {NAME("SL.RELEASE"), 3, 3, KW, cmd_sl_release,
     "ERR wrong number of arguments for 'sl.release' command (SL.RELEASE "
     "key lease)",
     "Gives a lease back"},
    {NAME("SL.RENEW"), 3, 3, KW, cmd_sl_renew,
     "ERR wrong number of arguments for 'sl.renew' command (SL.RENEW key "
     "lease)",
     "Extends a live lease by its policy's lease time"},
    {NAME("SL.RESET"), 2, 3, KW | RESP_CMD_ADMIN, cmd_sl_reset,
     "ERR wrong number of arguments for 'sl.reset' command (SL.RESET key "
     "[policy])",
     "Forgets a key's state"},
    {NAME("SL.UTILISATION"), 3, 7, RESP_CMD_ADMIN, cmd_sl_utilisation,
     "ERR wrong number of arguments for 'sl.utilisation' command "
     "(SL.UTILISATION domain utilisation [SOURCE name] [TTL ms])",
     "Reports the protected service's utilisation (load shedding)"},
    {NAME("SL.TOP"), 2, 4, RESP_CMD_ADMIN, cmd_sl_top, NULL,
     "A rule's heaviest keys: key, count, ... (DENIALS: by denials)"},
    {NAME("AUTH"), 2, 3, BA, cmd_auth, NULL, "Authenticates the connection"},
    {NAME("HELLO"), 1, 7, BA, cmd_hello, NULL,
     "Handshakes: protocol 2 or 3, AUTH, SETNAME"},
    {NAME("QUIT"), 1, -1, BA | TX, cmd_quit, NULL, "Closes the connection"},
    {NAME("RESET"), 1, 1, BA | TX, cmd_reset, NULL,
     "Resets the connection: RESP2, no name, no transaction, no AUTH"},
    {NAME("PING"), 1, 2, 0, cmd_ping, NULL, "Returns PONG"},
    {NAME("ECHO"), 2, 2, 0, cmd_echo, NULL, "Returns the given string"},
    {NAME("MULTI"), 1, 1, TX, cmd_multi, NULL, "Starts a transaction"},
    {NAME("EXEC"), 1, 1, TX, cmd_exec, NULL,
     "Runs the commands queued since MULTI, in order"},
    {NAME("DISCARD"), 1, 1, TX, cmd_discard, NULL,
     "Drops the commands queued since MULTI"},
    {NAME("WATCH"), 2, -1, TX, cmd_watch, NULL, "Not supported"},
    {NAME("UNWATCH"), 1, 1, 0, cmd_unwatch, NULL, "Returns OK"},
    {NAME("INFO"), 1, -1, 0, cmd_info, NULL, "The server's facts, by section"},
    {NAME("DBSIZE"), 1, 1, 0, cmd_dbsize, NULL, "The number of keys"},
    {NAME("SELECT"), 2, 2, 0, cmd_select, NULL, "Database 0 only"},
    {NAME("TIME"), 1, 1, 0, cmd_time, NULL, "The server's time"},
    {NAME("COMMAND"), 1, -1, 0, cmd_command, NULL,
     "COUNT, INFO, DOCS, LIST: the commands"},
    {NAME("CONFIG"), 2, -1, 0, cmd_config, NULL, "GET: nothing to show"},
    {NAME("CLIENT"), 2, -1, 0, cmd_client, NULL,
     "ID, GETNAME, SETNAME, SETINFO, INFO"},
};

const resp_command *resp_commands(size_t *n) {
  *n = sizeof commands / sizeof commands[0];
  return commands;
}

/* A command's lower-case name, as Redis names one in its errors. */
static void lower_name(const resp_command *rc, char *name, size_t size) {
  size_t n = 0;
  for (; rc->name[n] && n + 1 < size; n++)
    name[n] = (char)tolower((unsigned char)rc->name[n]);
  name[n] = '\0';
}

/*
 * The table's row for cmd, after checking AUTH, admin and arity; NULL
 * when one failed (its error answered).
 */
static const resp_command *checked(resp_conn *c, const resp_cmd *cmd) {
  const resp_command *rc = NULL;
  for (size_t i = 0; i < sizeof commands / sizeof commands[0] && !rc; i++)
    if (cmd->len[0] == commands[i].name_len &&
        !strncasecmp(cmd->argv[0], commands[i].name, commands[i].name_len))
      rc = &commands[i];
  if ((!rc || !(rc->flags & BA)) && c->w->srv->o.password && !c->authed) {
    out_err(c, "NOAUTH Authentication required.");
    return NULL;
  }
  if (!rc) {
    reply_unknown(c, cmd);
    return NULL;
  }
  char name[16];
  lower_name(rc, name, sizeof name);
  if ((rc->flags & RESP_CMD_ADMIN) && c->w->srv->o.admin_token &&
      !c->admin) {
    out_err(c, "NOPERM User default has no permissions to run the '%s' "
               "command (AUTH admin <token>: --admin-token)", name);
    return NULL;
  }
  if (cmd->argc < rc->min_argc ||
      (rc->max_argc >= 0 && cmd->argc > rc->max_argc)) {
    if (rc->arity_err)
      out_err(c, "%s", rc->arity_err);
    else
      out_err(c, "ERR wrong number of arguments for '%s' command", name);
    return NULL;
  }
  return rc;
}

void resp_dispatch(resp_conn *c, const resp_cmd *cmd) {
  if (cmd->argc == 0) return; /* an empty inline line: Redis ignores it */
  engine_count(c->w->et, EC_RESP_COMMANDS, 1);
  resp_count_command(c->w);
  const resp_command *rc = checked(c, cmd);
  if (!rc) {
    if (c->txn.on) c->txn.dirty = 1; /* as Redis: EXEC will abort */
    return;
  }
  if (c->txn.on && !(rc->flags & TX))
    resp_multi_queue(c, cmd);
  else
    rc->run(c, cmd);
}

/* Whatever was written since mark goes into a slot of its own when a
   reply is still waiting ahead of it (behind: the queue's tail then). */
static void keep_order(resp_conn *c, resp_slot *behind, size_t mark) {
  if (!behind || c->out.len <= mark) return;
  resp_slot *s = calloc(1, sizeof *s);
  if (!s) {
    c->closing = 1;
    return;
  }
  s->c = c;
  slot_keep(c, s, mark);
  s->done = 1;
  slot_link(c, s);
}

void resp_run_ordered(resp_conn *c, const resp_cmd *cmd) {
  resp_slot *behind = c->tail;
  size_t mark = c->out.len;
  resp_dispatch(c, cmd);
  keep_order(c, behind, mark);
}

void resp_header_ordered(resp_conn *c, size_t n) {
  resp_slot *behind = c->tail;
  size_t mark = c->out.len;
  out_hdr(c, '*', (int64_t)n);
  keep_order(c, behind, mark);
}

/* ---- reading ---- */

static void on_read(h2o_socket_t *sock, const char *err) {
  resp_conn *c = sock->data;
  if (err) {
    resp_conn_close(c);
    return;
  }
  if (sock->input->size > 0) resp_guard_touch(c);
  /* Parsing resumes after the batch's commands (resp_batch.c), which stay
     in the input until it is flushed. */
  size_t off;
  while (!c->closing && sock->input->size > (off = resp_batch_bytes(c)) &&
         sock->input->size - off >= c->need) {
    const char *perr = NULL;
    /* (read per command: an AUTH changes the next one's limits) */
    resp_limits lim = {c->w->srv->o.max_command_bytes,
                       c->w->srv->o.password && !c->authed};
    ssize_t n = resp_parse(sock->input->bytes + off, sock->input->size - off,
                           &lim, c->w->cmd, &c->need, &perr);
    if (n == 0) break;
    if (n > 0 && resp_batch_add(c, c->w->cmd, (size_t)n)) {
      c->need = 0;
      if (c->out.len >= OUT_PAUSE) break; /* (as below) */
      continue;
    }
    resp_batch_flush(c); /* what came before goes first */
    if (n < 0) {
      resp_slot *behind = c->tail;
      size_t mark = c->out.len;
      out_err(c, "ERR %s", perr);
      keep_order(c, behind, mark);
      c->closing = 1;
      if (n == -2)
        resp_count_close(c->w, lim.unauthenticated ? RESP_CLOSE_UNAUTH_TOO_BIG
                                                   : RESP_CLOSE_TOO_BIG);
    } else {
      c->need = 0;
      resp_run_ordered(c, c->w->cmd);
      h2o_buffer_consume(&sock->input, (size_t)n);
    }
    if (n < 0) break;
    /* Replies past OUT_PAUSE wait until the ones before them are written,
       written or not yet: h2o reads the whole kernel buffer at once, and
       a client that never reads could otherwise turn it into replies
       without bound (34 bytes of NOAUTH per 6-byte PING). */
    if (c->out.len >= OUT_PAUSE) break;
    if (c->nslots >= SLOTS_PAUSE) break;
  }
  resp_batch_flush(c);
  if (c->closing && c->reading) {
    h2o_socket_read_stop(sock);
    c->reading = 0;
  } else if ((c->out.len >= OUT_PAUSE || c->nslots >= SLOTS_PAUSE) &&
             c->reading) {
    h2o_socket_read_stop(sock); /* the client is not reading: wait */
    c->reading = 0;
  } else if (!c->reading && !c->closing) {
    c->reading = 1; /* what paused it is over */
    h2o_socket_read_start(sock, on_read);
  }
  if (resp_guard_account(c)) return; /* closed: over the input budget */
  flush(c);
}

void resp_accept(worker *w, h2o_socket_t *sock) {
  resp_conn *c = calloc(1, sizeof *c);
  if (!c) {
    /* admit() counted it; nothing else will uncount it. */
    atomic_fetch_sub(&w->srv->connections, 1);
    h2o_socket_close(sock);
    return;
  }
  c->w = w;
  c->sock = sock;
  c->proto = 2;
  c->peer_len = -1; /* (resp_client formats it on first use) */
  c->opened_ns = clock_mono_ns();
  c->id = resp_count_connection(w);
  sock->data = c;
  h2o_linklist_insert(&w->resp_list, &c->link);
  w->resp_conns++;
  engine_connections(w->et, 1, 1);
  resp_guard_open(c);
  c->reading = 1;
  h2o_socket_read_start(sock, on_read);
}

void resp_shutdown(worker *w) {
  h2o_linklist_t *node = w->resp_list.next;
  while (node != &w->resp_list) {
    resp_conn *c = H2O_STRUCT_FROM_MEMBER(resp_conn, link, node);
    node = node->next;
    c->closing = 1;
    if (c->reading) {
      h2o_socket_read_stop(c->sock);
      c->reading = 0;
    }
    flush(c); /* closes it now unless a write is in flight */
  }
}

int resp_worker_init(worker *w) {
  h2o_linklist_init_anchor(&w->resp_list);
  w->cmd = malloc(sizeof *w->cmd);
  if (!w->cmd || resp_batch_init(w)) {
    free(w->cmd);
    w->cmd = NULL;
    return -1;
  }
  if (resp_guard_worker_init(w)) {
    resp_batch_dispose(w);
    free(w->cmd);
    w->cmd = NULL;
    return -1;
  }
  return 0;
}

void resp_worker_dispose(worker *w) {
  if (!w->cmd) return; /* never initialised, or disposed already */
  while (!h2o_linklist_is_empty(&w->resp_list))
    resp_conn_close(
        H2O_STRUCT_FROM_MEMBER(resp_conn, link, w->resp_list.next));
  resp_guard_worker_dispose(w);
  resp_batch_dispose(w);
  free(w->cmd);
  w->cmd = NULL;
}
