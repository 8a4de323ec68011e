/*
 * grpc_server.c — the gRPC front end's transport (grpc_server.h), on
 * gRPC's C core: one server, one completion queue, and a few threads
 * taking its events.
 *
 * Calls. Every call is a slot (rpc_call) asked of the server in advance:
 * RPC_SLOTS for ShouldRateLimit, a few for the health check and a few for
 * any other method (answered UNIMPLEMENTED). A slot is asked again only
 * when its call is over, so the slots bound the calls in flight; calls
 * beyond them wait in the core's own queue of pending calls (bounded:
 * over it, the core answers RESOURCE_EXHAUSTED). A method registered with
 * GRPC_SRM_PAYLOAD_READ_INITIAL_BYTE_BUFFER arrives with its request
 * message, so a call is two events: its arrival, and the end of the one
 * batch that answers it (initial metadata, the message, the status, and
 * the client's close, which also ends a call the client cancelled or
 * whose deadline passed).
 *
 * Decisions go through engine_decide, as HTTP's and RESP's do. In memory
 * and approximate mode they never wait: the completion queue's thread
 * decides on an engine thread of its own. In exact fleet mode a decision
 * waits for Redis, whose client lives on a worker's event loop: the call
 * is handed to a worker (round robin, h2o's multithread queue), decided
 * there with a callback, and its answer batch is started from the worker
 * (grpc_call_start_batch may be called from any thread). The completion
 * queue's threads never block on Redis.
 *
 * A call's memory passes between threads through gRPC's own queue, which
 * ThreadSanitizer cannot see (libgrpc is not instrumented); `handed` is
 * an explicit release/acquire pair around that hand-over (released before
 * each call that gives the slot to gRPC, acquired at each event).
 * tests/tsan.supp leaves out what ThreadSanitizer reports inside libgrpc
 * itself, for the same reason.
 */
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "grpc_msg.h"
#include "grpc_server.h"

#define RPC_SLOTS 1024  /* ShouldRateLimit calls in flight, at most */
#define HEALTH_SLOTS 8
#define OTHER_SLOTS 4
#define QUOTA_BYTES (64u << 20) /* the core's buffers, every connection */
#define IDLE_MS 300000          /* an idle connection is closed after it */
#define POLL_MS 50              /* a thread quiesces at least this often */
#define MAX_THREADS 16

static const char rls_method[] =
    "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";
static const char health_method[] = "/grpc.health.v1.Health/Check";

enum { K_RLS, K_HEALTH, K_OTHER };
enum { S_ASKED, S_ANSWERING };

/* A decision's working set, for one call while it is decided. */
typedef struct rpc_job {
  h2o_multithread_message_t msg; /* to a worker (exact mode) */
  struct rpc_call *c;
  worker *w; /* exact mode: the worker deciding it */
  rls_req rq;
  eng_result res;
  int64_t now;
} rpc_job;

/* One slot: the call the server hands it, and what answering it holds. */
typedef struct rpc_call {
  grpc_front *g;
  int kind, state;
  grpc_call *call;
  gpr_timespec deadline;
  grpc_metadata_array md;
  grpc_call_details details; /* K_OTHER: the method asked for */
  grpc_byte_buffer *payload; /* the request message (NULL: none came) */
  grpc_byte_buffer *reply;
  grpc_slice status_msg;
  int has_status_msg;
  int cancelled; /* RECV_CLOSE_ON_SERVER's */
  rpc_job *job;
  _Atomic int handed; /* released before each start_batch (see the top) */
} rpc_call;

struct grpc_front {
  server *srv;
  grpc_server *gs;
  grpc_completion_queue *cq;
  void *rls_tag, *health_tag; /* the registered methods */
  worker **workers;           /* exact mode: where decisions go */
  unsigned nworkers;
  atomic_uint next_worker;
  unsigned nthreads;
  pthread_t tid[MAX_THREADS];
  unsigned tid_started;
  engine_thread *et[MAX_THREADS];
  int direct; /* decisions never wait: decided on the queue's threads */
  atomic_int stopping, shut;
  int shutdown_tag; /* its address is the shutdown's tag */
};

/* ---- slots ---- */

/* Asks the server for the next call of c's kind (c reset). 0, or -1. */
static int ask(rpc_call *c) {
  grpc_front *g = c->g;
  c->state = S_ASKED;
  c->call = NULL;
  c->payload = c->reply = NULL;
  c->has_status_msg = 0;
  c->cancelled = 0;
  c->job = NULL;
  grpc_metadata_array_init(&c->md);
  if (c->kind == K_OTHER) grpc_call_details_init(&c->details);
  int kind = c->kind;
  void *method = kind == K_RLS ? g->rls_tag : g->health_tag;
  /* Its next event may come on another thread (see the top): nothing of c
     is read once it is released, until that event. */
  atomic_store_explicit(&c->handed, 1, memory_order_release);
  grpc_call_error e;
  if (kind == K_OTHER) {
    e = grpc_server_request_call(g->gs, &c->call, &c->details, &c->md, g->cq,
                                 g->cq, c);
  } else {
    e = grpc_server_request_registered_call(g->gs, method, &c->call,
                                            &c->deadline, &c->md, &c->payload,
                                            g->cq, g->cq, c);
  }
  if (e != GRPC_CALL_OK) { /* no event will come: c is ours again */
    grpc_metadata_array_destroy(&c->md);
    if (kind == K_OTHER) grpc_call_details_destroy(&c->details);
    return -1;
  }
  return 0;
}

/* Frees what c's call held; then asks for the next call, or, stopping,
   frees c. */
static void recycle(rpc_call *c) {
  atomic_load_explicit(&c->handed, memory_order_acquire);
  grpc_front *g = c->g;
  if (c->payload) grpc_byte_buffer_destroy(c->payload);
  if (c->reply) grpc_byte_buffer_destroy(c->reply);
  if (c->has_status_msg) grpc_slice_unref(c->status_msg);
  if (c->job) {
    rls_free(&c->job->rq);
    free(c->job);
  }
  grpc_metadata_array_destroy(&c->md);
  if (c->kind == K_OTHER) grpc_call_details_destroy(&c->details);
  if (c->call) grpc_call_unref(c->call);
  if (atomic_load(&g->stopping) || ask(c)) free(c);
}

/* ---- answers ---- */

/*
 * Answers c: status (with msg, NULL for none) and, when body is not NULL,
 * the response message (body, len bytes, freed with the call). May run on
 * any thread; c belongs to the completion queue again once it returns.
 */
static void answer(rpc_call *c, engine_thread *et, int status, const char *msg,
                   uint8_t *body, size_t len) {
  engine_count(et, EC_GRPC_REQUESTS, 1);
  if (status != RPC_OK) engine_count(et, EC_GRPC_ERRORS, 1);
  grpc_op ops[4];
  memset(ops, 0, sizeof ops);
  size_t n = 0;
  ops[n++].op = GRPC_OP_SEND_INITIAL_METADATA;
  if (body) {
    grpc_slice s = grpc_slice_new(body, len, free);
    c->reply = grpc_raw_byte_buffer_create(&s, 1);
    grpc_slice_unref(s);
    ops[n].op = GRPC_OP_SEND_MESSAGE;
    ops[n++].data.send_message.send_message = c->reply;
  }
  ops[n].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
  ops[n].data.send_status_from_server.status = (grpc_status_code)status;
  if (msg) {
    c->status_msg = grpc_slice_from_copied_string(msg);
    c->has_status_msg = 1;
    ops[n].data.send_status_from_server.status_details = &c->status_msg;
  }
  n++;
  ops[n].op = GRPC_OP_RECV_CLOSE_ON_SERVER;
  ops[n++].data.recv_close_on_server.cancelled = &c->cancelled;
  c->state = S_ANSWERING;
  /* Nothing of c is read once it is released: its completion may come on
     another thread before start_batch returns. */
  grpc_call *call = c->call;
  atomic_store_explicit(&c->handed, 1, memory_order_release);
  grpc_call_error e = grpc_call_start_batch(call, ops, n, c, NULL);
  if (e != GRPC_CALL_OK) {
    /* No completion will come: the call is over here. */
    log_msg("error", "grpc: cannot answer a call (error %d)", (int)e);
    recycle(c);
  }
}

/* The decision of c's job is in (rc as engine_decide's): its answer. */
static void decided(rpc_call *c, engine_thread *et, int rc) {
  rpc_job *j = c->job;
  if (rc && rc != ENG_EDOMAIN) {
    answer(c, et, rls_status_of(rc), j->res.msg, NULL, 0);
    return;
  }
  if (rc == ENG_EDOMAIN) engine_count(et, EC_GRPC_UNKNOWN_DOMAIN, 1);
  size_t len = 0;
  uint8_t *body = rls_encode(&j->rq, rc, &j->res, c->g->srv->o.header_style,
                             j->now, &len);
  if (!body)
    answer(c, et, RPC_RESOURCE_EXHAUSTED, "out of memory", NULL, 0);
  else
    answer(c, et, RPC_OK, NULL, body, len);
}

/* Decides j on engine thread et (a worker's, or the queue thread's); the
   answer goes now, or from the callback when the decision waits. */
static void engine_done(void *ud, int rc, eng_result *res);

static void decide(rpc_job *j, engine_thread *et, int may_wait) {
  j->now = clock_wall_ns();
  int rc = 0;
  if (j->rq.er.n) {
    eng_query q = {.kind = ENG_QUERY_RULES, .req = &j->rq.er,
                   .overrides = j->rq.ov, .now = j->now};
    rc = engine_decide(et, &q, &j->res, may_wait ? engine_done : NULL, j);
    if (rc == ENG_PENDING) return;
  } else { /* every descriptor was empty: nothing applies */
    const sl_config *cfg = engine_config(j->c->g->srv->eng);
    if (!config_domain(cfg, j->rq.er.domain, j->rq.er.domain_len))
      rc = ENG_EDOMAIN;
    engine_result_init(&j->res, 1);
  }
  decided(j->c, et, rc);
}

/* Exact mode: a decision that waited is in, on the worker's thread. */
static void engine_done(void *ud, int rc, eng_result *res) {
  (void)res; /* j->res */
  rpc_job *j = ud;
  decided(j->c, j->w->et, rc);
}

void grpc_worker_receive(h2o_multithread_receiver_t *rx,
                         h2o_linklist_t *messages) {
  worker *w = H2O_STRUCT_FROM_MEMBER(worker, grpc_rx, rx);
  while (!h2o_linklist_is_empty(messages)) {
    rpc_job *j = H2O_STRUCT_FROM_MEMBER(rpc_job, msg.link, messages->next);
    h2o_linklist_unlink(&j->msg.link);
    j->w = w;
    decide(j, w->et, w->may_wait);
  }
}

/* ---- the completion queue's events ---- */

/* The request's bytes, flattened (a slice the caller unrefs). */
static grpc_slice payload_bytes(grpc_byte_buffer *bb) {
  grpc_byte_buffer_reader r;
  if (!grpc_byte_buffer_reader_init(&r, bb)) return grpc_empty_slice();
  grpc_slice s = grpc_byte_buffer_reader_readall(&r);
  grpc_byte_buffer_reader_destroy(&r);
  return s;
}

/* A ShouldRateLimit call arrived: decoded, then decided here or on a
   worker. */
static void on_rls(rpc_call *c, engine_thread *et) {
  grpc_front *g = c->g;
  if (!c->payload) {
    answer(c, et, RPC_INVALID_ARGUMENT, "no request message", NULL, 0);
    return;
  }
  rpc_job *j = malloc(sizeof *j);
  if (!j) {
    answer(c, et, RPC_RESOURCE_EXHAUSTED, "out of memory", NULL, 0);
    return;
  }
  c->job = j;
  j->c = c;
  j->msg = (h2o_multithread_message_t){{NULL, NULL}}; /* not linked */
  grpc_slice s = payload_bytes(c->payload);
  char err[256];
  int st = rls_decode(&j->rq, GRPC_SLICE_START_PTR(s), GRPC_SLICE_LENGTH(s),
                      g->srv->o.max_key, err, sizeof err);
  grpc_slice_unref(s);
  if (st != RPC_OK) {
    answer(c, et, st, err, NULL, 0);
    return;
  }
  if (g->direct) {
    decide(j, et, 0);
    return;
  }
  unsigned k = atomic_fetch_add(&g->next_worker, 1) % g->nworkers;
  h2o_multithread_send_message(&g->workers[k]->grpc_rx, &j->msg);
}

static void on_health(rpc_call *c, engine_thread *et) {
  uint8_t *body = NULL;
  size_t len = 0;
  int st = RPC_INVALID_ARGUMENT;
  if (c->payload) {
    grpc_slice s = payload_bytes(c->payload);
    st = health_answer(GRPC_SLICE_START_PTR(s), GRPC_SLICE_LENGTH(s),
                       atomic_load(&c->g->stopping), &body, &len);
    grpc_slice_unref(s);
  }
  answer(c, et, st, st == RPC_NOT_FOUND ? "unknown service" : NULL, body, len);
}

static void on_other(rpc_call *c, engine_thread *et) {
  char msg[300];
  grpc_slice m = c->details.method;
  snprintf(msg, sizeof msg, "unknown method %.*s",
           (int)(GRPC_SLICE_LENGTH(m) < 200 ? GRPC_SLICE_LENGTH(m) : 200),
           (const char *)GRPC_SLICE_START_PTR(m));
  answer(c, et, RPC_UNIMPLEMENTED, msg, NULL, 0);
}

/* One event of slot c: a call arrived (or, ok 0, the server is stopping
   and no call will come), or its answer is done. */
static void on_event(rpc_call *c, int ok, engine_thread *et) {
  atomic_load_explicit(&c->handed, memory_order_acquire);
  if (c->state == S_ANSWERING) {
    recycle(c);
    return;
  }
  if (!ok) { /* shutting down: this slot gets no call */
    grpc_metadata_array_destroy(&c->md);
    if (c->kind == K_OTHER) grpc_call_details_destroy(&c->details);
    if (c->payload) grpc_byte_buffer_destroy(c->payload);
    free(c);
    return;
  }
  static void (*const on[])(rpc_call *, engine_thread *) = {
      [K_RLS] = on_rls, [K_HEALTH] = on_health, [K_OTHER] = on_other};
  on[c->kind](c, et);
}

typedef struct thread_arg {
  grpc_front *g;
  engine_thread *et;
} thread_arg;

static void *cq_main(void *arg) {
  grpc_front *g = ((thread_arg *)arg)->g;
  engine_thread *et = ((thread_arg *)arg)->et;
  free(arg);
  for (;;) {
    if (g->direct) engine_thread_quiesce(et);
    gpr_timespec until = gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                                      gpr_time_from_millis(POLL_MS, GPR_TIMESPAN));
    grpc_event ev = grpc_completion_queue_next(g->cq, until, NULL);
    if (ev.type == GRPC_QUEUE_SHUTDOWN) break;
    if (ev.type != GRPC_OP_COMPLETE) continue;
    if (ev.tag == &g->shutdown_tag)
      atomic_store(&g->shut, 1);
    else
      on_event(ev.tag, ev.success, et);
  }
  engine_thread_offline(et);
  return NULL;
}

/* ---- start and stop ---- */

/* The server's channel arguments: the bounds of docs/hardening.md. */
static grpc_server *new_server(const server *srv, grpc_resource_quota *quota) {
  grpc_arg a[8];
  memset(a, 0, sizeof a);
  const struct {
    const char *key;
    int value;
  } ints[] = {
      /* A request larger than --max-body is refused by the core
         (RESOURCE_EXHAUSTED) before it is read whole. */
      {GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH, (int)srv->o.max_body},
      {GRPC_ARG_MAX_CONCURRENT_STREAMS, (int)srv->o.grpc_max_streams},
      {GRPC_ARG_MAX_CONNECTION_IDLE_MS, IDLE_MS},
      /* A port another process holds is an error, not a shared port. */
      {GRPC_ARG_ALLOW_REUSEPORT, 0},
      {GRPC_ARG_MAX_METADATA_SIZE, (int)srv->o.max_header_bytes},
      {GRPC_ARG_ENABLE_CENSUS, 0}};
  size_t n = sizeof ints / sizeof ints[0];
  for (size_t i = 0; i < n; i++) {
    a[i].type = GRPC_ARG_INTEGER;
    a[i].key = (char *)ints[i].key;
    a[i].value.integer = ints[i].value;
  }
  a[n].type = GRPC_ARG_POINTER;
  a[n].key = (char *)GRPC_ARG_RESOURCE_QUOTA;
  a[n].value.pointer.p = quota;
  a[n++].value.pointer.vtable = grpc_resource_quota_arg_vtable();
  grpc_channel_args args = {n, a};
  return grpc_server_create(&args, NULL);
}

/* Asks for n calls of kind k. 0, or -1 out of memory. */
static int ask_new(grpc_front *g, int k, int n) {
  for (int i = 0; i < n; i++) {
    rpc_call *c = calloc(1, sizeof *c);
    if (!c) return -1;
    c->g = g;
    c->kind = k;
    if (ask(c)) {
      free(c);
      return -1;
    }
  }
  return 0;
}

/* Listens and registers; 0, or -1 after logging why. */
static int bind_server(grpc_front *g) {
  server *srv = g->srv;
  grpc_resource_quota *quota = grpc_resource_quota_create("sluice-grpc");
  grpc_resource_quota_resize(quota, QUOTA_BYTES);
  g->gs = new_server(srv, quota);
  grpc_resource_quota_unref(quota);
  g->cq = grpc_completion_queue_create_for_next(NULL);
  grpc_server_register_completion_queue(g->gs, g->cq, NULL);
  g->rls_tag = grpc_server_register_method(
      g->gs, rls_method, NULL, GRPC_SRM_PAYLOAD_READ_INITIAL_BYTE_BUFFER, 0);
  g->health_tag = grpc_server_register_method(
      g->gs, health_method, NULL, GRPC_SRM_PAYLOAD_READ_INITIAL_BYTE_BUFFER, 0);
  grpc_server_credentials *creds = grpc_insecure_server_credentials_create();
  int port = grpc_server_add_http2_port(g->gs, srv->o.grpc_addr, creds);
  grpc_server_credentials_release(creds);
  if (port <= 0) {
    log_msg("error", "--grpc %s: cannot listen there", srv->o.grpc_addr);
    return -1;
  }
  srv->grpc_port = port;
  const char *colon = strrchr(srv->o.grpc_addr, ':');
  int host = colon ? (int)(colon - srv->o.grpc_addr) : 0;
  snprintf(srv->grpc_at, sizeof srv->grpc_at, "%.*s:%d", host,
           srv->o.grpc_addr, port);
  return 0;
}

grpc_front *grpc_front_start(server *srv, worker **workers, unsigned n) {
  grpc_init();
  grpc_front *g = calloc(1, sizeof *g);
  if (!g) {
    grpc_shutdown();
    log_msg("error", "out of memory");
    return NULL;
  }
  g->srv = srv;
  g->workers = workers;
  g->nworkers = n;
  /* Exact mode's decisions wait for Redis on a worker's loop. */
  g->direct = !srv->exact || n == 0;
  g->nthreads = srv->o.threads < MAX_THREADS ? srv->o.threads : MAX_THREADS;
  if (g->nthreads == 0) g->nthreads = 1;
  if (bind_server(g)) {
    grpc_front_stop(g);
    return NULL;
  }
  grpc_server_start(g->gs);
  if (ask_new(g, K_RLS, RPC_SLOTS) || ask_new(g, K_HEALTH, HEALTH_SLOTS) ||
      ask_new(g, K_OTHER, OTHER_SLOTS)) {
    log_msg("error", "grpc: out of memory");
    grpc_front_stop(g);
    return NULL;
  }
  for (unsigned i = 0; i < g->nthreads; i++) {
    thread_arg *a = malloc(sizeof *a);
    g->et[i] = engine_thread_new(srv->eng);
    if (!a || !g->et[i]) {
      free(a);
      log_msg("error", "grpc: out of memory");
      grpc_front_stop(g);
      return NULL;
    }
    if (!g->direct) engine_thread_offline(g->et[i]); /* counts only */
    *a = (thread_arg){g, g->et[i]};
    if (pthread_create(&g->tid[i], NULL, cq_main, a)) {
      free(a);
      log_msg("error", "grpc: cannot start a thread");
      grpc_front_stop(g);
      return NULL;
    }
    g->tid_started++;
  }
  return g;
}

/* Sleeps a few milliseconds (the stop's waits). */
static void nap(void) {
  struct timespec ts = {0, 5 * 1000000};
  nanosleep(&ts, NULL);
}

void grpc_front_stop(grpc_front *g) {
  if (!g) return;
  atomic_store(&g->stopping, 1);
  if (g->gs) {
    grpc_server_shutdown_and_notify(g->gs, g->cq, &g->shutdown_tag);
    if (g->tid_started) {
      /* In-flight calls get the grace; then they are cancelled (a call
         waiting on a worker ends when its answer fails to send). */
      int64_t end = clock_mono_ns() +
                    (int64_t)g->srv->o.shutdown_grace_ms * 1000000;
      while (!atomic_load(&g->shut) && clock_mono_ns() < end) nap();
      if (!atomic_load(&g->shut)) grpc_server_cancel_all_calls(g->gs);
      while (!atomic_load(&g->shut)) nap();
    } else { /* no thread takes the events: drain them here */
      grpc_server_cancel_all_calls(g->gs);
      for (;;) {
        grpc_event ev = grpc_completion_queue_next(
            g->cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL);
        if (ev.tag == &g->shutdown_tag) break;
        if (ev.type == GRPC_OP_COMPLETE) on_event(ev.tag, ev.success, NULL);
      }
    }
    grpc_server_destroy(g->gs);
  }
  if (g->cq) {
    grpc_completion_queue_shutdown(g->cq);
    for (unsigned i = 0; i < g->tid_started; i++) pthread_join(g->tid[i], NULL);
    if (!g->tid_started)
      while (grpc_completion_queue_next(g->cq,
                                        gpr_inf_future(GPR_CLOCK_MONOTONIC),
                                        NULL)
                 .type != GRPC_QUEUE_SHUTDOWN)
        ;
    grpc_completion_queue_destroy(g->cq);
  }
  for (unsigned i = 0; i < MAX_THREADS; i++) engine_thread_free(g->et[i]);
  free(g);
  grpc_shutdown();
}
