/*
 * resp_guard.c — what a RESP connection may hold, and for how long (see
 * resp_guard.h).
 *
 * The input budget counts what h2o's input buffer of each connection has
 * allocated (its capacity, not only the unparsed bytes: that is the
 * memory held), and its reply buffers (a client that sends and never
 * reads makes the daemon hold replies, each at most OUT_PAUSE before
 * parsing waits), updated after every read. The parser already refuses a
 * command past --max-command-bytes at the header that shows it, so one
 * connection holds at most about that plus one read; the budget bounds
 * the sum, which --max-connections times that would not. A worker can
 * close only its own connections: when the process is over budget it
 * closes its largest holders, as long as they hold at least the average
 * (so that a worker whose connections are small does not pay for another
 * worker's large ones), and a sweep every second lets a worker that is
 * not reading act too.
 *
 * Timers are h2o timeouts of the worker's loop: one list per duration, so
 * starting a connection's timer again is an unlink and an append.
 */
#include <stdlib.h>

#include "../engine/backend.h"
#include "resp_auth.h"
#include "resp_guard.h"

#define SWEEP_MS 1000

/* A worker's timers (worker's `resp`), made on its first connection: the
   loop exists only once the worker's thread runs. */
typedef struct resp_worker {
  worker *w;
  int on;
  h2o_timeout_t auth_timeout, idle_timeout, sweep_timeout;
  h2o_timeout_entry_t sweep;
} resp_worker;

/* ---- the shared part ---- */

static const char close_help[] =
    "RESP connections closed by sluice, by reason: command_too_big (over "
    "--max-command-bytes), unauthenticated_too_big (before AUTH: over 10 "
    "arguments or 4 KiB), input_budget (the largest when "
    "--max-input-buffer was full), auth_timeout, idle_timeout, "
    "auth_failures.";

/* Registers the metrics (before any worker thread runs). */
static int register_metrics(worker *w, resp_shared *g) {
  static const char *const reasons[RESP_CLOSE_N] = {
      "reason=\"command_too_big\"", "reason=\"unauthenticated_too_big\"",
      "reason=\"input_budget\"",    "reason=\"auth_timeout\"",
      "reason=\"idle_timeout\"",    "reason=\"auth_failures\""};
  static const char *const auth[RESP_AUTH_N] = {"result=\"wrong\"",
                                                "result=\"throttled\""};
  metrics *m = engine_metrics_registry(w->srv->eng);
  metric_def d = {"sluice_resp_input_buffer_bytes", NULL, METRIC_GAUGE,
                  METRIC_THREADS, METRIC_GROUP_DAEMON,
                  "Memory held by RESP connections' unparsed input and "
                  "unsent replies (all of it counts against "
                  "--max-input-buffer)."};
  if ((g->m_input = metrics_add(m, &d)) < 0) return -1;
  d = (metric_def){"sluice_resp_multi_queued_commands", NULL, METRIC_GAUGE,
                   METRIC_THREADS, METRIC_GROUP_DAEMON,
                   "Commands queued by RESP connections between MULTI and "
                   "EXEC (at most 1024 each; their bytes count against "
                   "--max-input-buffer)."};
  if ((g->m_queued = metrics_add(m, &d)) < 0) return -1;
  d = (metric_def){"sluice_resp_multi_refused_total", NULL, METRIC_COUNTER,
                   METRIC_THREADS, METRIC_GROUP_DAEMON,
                   "Commands refused inside MULTI because the transaction "
                   "was full (1024 commands or 1 MiB): its EXEC aborts."};
  if ((g->m_txn_full = metrics_add(m, &d)) < 0) return -1;
  for (int i = 0; i < RESP_CLOSE_N; i++) {
    d = (metric_def){"sluice_resp_closed_total", reasons[i], METRIC_COUNTER,
                     METRIC_THREADS, METRIC_GROUP_DAEMON,
                     i == 0 ? close_help : NULL};
    if ((g->m_closed[i] = metrics_add(m, &d)) < 0) return -1;
  }
  for (int i = 0; i < RESP_AUTH_N; i++) {
    d = (metric_def){"sluice_resp_auth_failures_total", auth[i],
                     METRIC_COUNTER, METRIC_THREADS, METRIC_GROUP_DAEMON,
                     i == 0 ? "Failed RESP AUTH attempts: a wrong password "
                              "or token, or refused unchecked because the "
                              "peer address failed too often."
                            : NULL};
    if ((g->m_auth[i] = metrics_add(m, &d)) < 0) return -1;
  }
  return 0;
}

/* The shared part, made by the first worker (on the main thread, before
   any worker thread runs). NULL after logging why not. */
static resp_shared *shared_new(worker *w) {
  resp_shared *g = calloc(1, sizeof *g);
  if (!g) return NULL;
  g->started_ns = clock_mono_ns();
  if (register_metrics(w, g)) {
    log_msg("error", "resp: too many metrics");
    free(g);
    return NULL;
  }
  if (resp_auth_new(g)) {
    free(g);
    return NULL;
  }
  return g;
}

int resp_guard_worker_init(worker *w) {
  server *srv = w->srv;
  if (!srv->resp && !(srv->resp = shared_new(w))) return -1;
  if (!(w->resp = calloc(1, sizeof *w->resp))) return -1;
  atomic_fetch_add(&srv->resp->users, 1);
  return 0;
}

void resp_guard_worker_dispose(worker *w) {
  resp_worker *rw = w->resp;
  if (rw && rw->on) {
    h2o_timeout_unlink(&rw->sweep);
    h2o_timeout_dispose(w->loop, &rw->sweep_timeout);
    h2o_timeout_dispose(w->loop, &rw->auth_timeout);
    h2o_timeout_dispose(w->loop, &rw->idle_timeout);
  }
  free(rw);
  w->resp = NULL;
  resp_shared *g = w->srv->resp;
  if (g && atomic_fetch_sub(&g->users, 1) == 1) { /* the last worker */
    resp_auth_free(g);
    free(g);
    w->srv->resp = NULL;
  }
}

void resp_count_close(worker *w, resp_close_reason why) {
  metric_add(engine_thread_metrics(w->et), w->srv->resp->m_closed[why], 1);
}

void resp_count_auth(worker *w, int kind) {
  metric_add(engine_thread_metrics(w->et), w->srv->resp->m_auth[kind], 1);
}

void resp_count_command(worker *w) {
  atomic_fetch_add_explicit(&w->srv->resp->commands, 1,
                            memory_order_relaxed);
}

long long resp_count_connection(worker *w) {
  atomic_fetch_add_explicit(&w->srv->resp->clients, 1, memory_order_relaxed);
  return atomic_fetch_add(&w->srv->resp->accepted, 1) + 1;
}

void resp_count_queued(worker *w, int64_t delta) {
  metric_add(engine_thread_metrics(w->et), w->srv->resp->m_queued,
             (uint64_t)delta); /* a gauge: wraps back */
}

void resp_count_txn_full(worker *w) {
  metric_add(engine_thread_metrics(w->et), w->srv->resp->m_txn_full, 1);
}

/* ---- the input budget ---- */

/* Counts `now` bytes for c (was c->held). */
static void hold(resp_conn *c, size_t now) {
  resp_shared *g = c->w->srv->resp;
  if (now == c->held) return;
  if (now > c->held)
    atomic_fetch_add(&g->input, now - c->held);
  else
    atomic_fetch_sub(&g->input, c->held - now);
  if (!c->held != !now) atomic_fetch_add(&g->holders, now ? 1 : -1);
  metric_add(engine_thread_metrics(c->w->et), g->m_input,
             (uint64_t)now - (uint64_t)c->held); /* a gauge: wraps back */
  c->held = now;
}

/* This worker's connection holding the most input, or NULL. */
static resp_conn *largest(worker *w) {
  resp_conn *big = NULL;
  for (h2o_linklist_t *n = w->resp_list.next; n != &w->resp_list;
       n = n->next) {
    resp_conn *c = H2O_STRUCT_FROM_MEMBER(resp_conn, link, n);
    if (!big || c->held > big->held) big = c;
  }
  return big;
}

/* Over budget: closes this worker's largest holders (those at or above the
   average). Returns 1 when `self` was one of them. */
static int enforce_budget(worker *w, resp_conn *self) {
  resp_shared *g = w->srv->resp;
  size_t budget = w->srv->o.max_input_buffer;
  int closed_self = 0;
  for (;;) {
    size_t total = atomic_load(&g->input);
    long holders = atomic_load(&g->holders);
    if (total <= budget) break;
    resp_conn *big = largest(w);
    if (!big || !big->held ||
        (holders > 0 && big->held < total / (size_t)holders))
      break;
    resp_count_close(w, RESP_CLOSE_BUDGET);
    if (big == self) closed_self = 1;
    resp_conn_close(big);
  }
  return closed_self;
}

int resp_guard_account(resp_conn *c) {
  h2o_buffer_t *in = c->sock->input;
  /* Input not yet parsed, the replies not yet sent, and the commands
     MULTI queued: all are what a client makes the daemon hold. */
  hold(c, (in->bytes ? in->capacity : 0) + c->out.cap + c->wbuf.cap +
              c->txn.q.cap);
  return enforce_budget(c->w, c);
}

void resp_guard_forget(resp_conn *c) {
  hold(c, 0);
  atomic_fetch_sub_explicit(&c->w->srv->resp->clients, 1,
                            memory_order_relaxed);
  if (h2o_timeout_is_linked(&c->timer)) h2o_timeout_unlink(&c->timer);
}

/* Every SWEEP_MS: a worker whose connections are not reading closes its
   share of an over-budget process too. */
static void on_sweep(h2o_timeout_entry_t *e) {
  resp_worker *rw = H2O_STRUCT_FROM_MEMBER(resp_worker, sweep, e);
  enforce_budget(rw->w, NULL);
  h2o_timeout_link(rw->w->loop, &rw->sweep_timeout, &rw->sweep);
}

/* ---- timers ---- */

static void on_timer(h2o_timeout_entry_t *e) {
  resp_conn *c = H2O_STRUCT_FROM_MEMBER(resp_conn, timer, e);
  int deadline = c->w->srv->o.password && !c->authed;
  resp_count_close(c->w, deadline ? RESP_CLOSE_AUTH_TIMEOUT : RESP_CLOSE_IDLE);
  resp_conn_close(c);
}

/* The worker's timers, on its first connection. */
static resp_worker *timers_of(worker *w) {
  resp_worker *rw = w->resp;
  if (rw->on) return rw;
  const srv_opts *o = &w->srv->o;
  h2o_timeout_init(w->loop, &rw->auth_timeout,
                   (uint64_t)o->resp_auth_timeout_ms);
  h2o_timeout_init(w->loop, &rw->idle_timeout,
                   (uint64_t)o->resp_idle_timeout_ms);
  h2o_timeout_init(w->loop, &rw->sweep_timeout, SWEEP_MS);
  rw->w = w;
  rw->sweep.cb = on_sweep;
  h2o_timeout_link(w->loop, &rw->sweep_timeout, &rw->sweep);
  rw->on = 1;
  return rw;
}

/* Starts c's timer on `t` (duration ms; 0: none). */
static void arm(resp_conn *c, h2o_timeout_t *t, int ms) {
  if (h2o_timeout_is_linked(&c->timer)) h2o_timeout_unlink(&c->timer);
  if (ms > 0) h2o_timeout_link(c->w->loop, t, &c->timer);
}

void resp_guard_open(resp_conn *c) {
  resp_worker *rw = timers_of(c->w);
  const srv_opts *o = &c->w->srv->o;
  c->timer.cb = on_timer;
  if (o->password)
    arm(c, &rw->auth_timeout, o->resp_auth_timeout_ms);
  else
    arm(c, &rw->idle_timeout, o->resp_idle_timeout_ms);
}

void resp_guard_touch(resp_conn *c) {
  const srv_opts *o = &c->w->srv->o;
  if (!o->password || c->authed)
    arm(c, &c->w->resp->idle_timeout, o->resp_idle_timeout_ms);
}

void resp_guard_authed(resp_conn *c) {
  c->authed = 1;
  resp_guard_touch(c);
}
