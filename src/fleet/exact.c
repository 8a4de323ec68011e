/*
 * exact.c — exact mode's backend: every decision one atomic script in
 * Redis (decide.lua, formatted and read by script.c), on Redis's clock.
 *
 * A request's checks whose keys share a node (a slot, in a cluster) go in
 * one call, all-or-nothing, like sl_take_all. Checks on several slots
 * cannot be one call: they are first decided without charging (RS_DRY, a
 * call per slot), then, if every one allows, charged (RS_DECIDE); between
 * the two another daemon may charge, so a multi-slot request can overshoot
 * by one (docs/fleet.md; a domain's hash_tag keeps a request in one slot).
 *
 * Batching: a thread's single-slot requests of one event-loop pass are
 * queued and sent together at its end (engine_thread_flush), up to
 * batch_max per script call, so that Redis pays its per-call cost once for
 * many of them.
 *
 * When Redis fails (a call refused because the breaker is open, an error,
 * a timeout), each limit answers by its on_store_error: allow, deny (with
 * the breaker interval as Retry-After), or a local limiter at a fraction
 * of the limit, decided together all-or-nothing.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../algo/cell.h"
#include "../base/clock.h"
#include "../limiter.h"
#include "internal.h"
#include "keys.h"
#include "script.h"
#include "slot.h"

enum { PH_ATOMIC, PH_CHECK, PH_COMMIT };

typedef struct exact {
  eng_backend base;
  fleet_opts o;
  engine *e;
  int m_calls, m_errors, m_refused, m_fallbacks, m_failing, h_calls;
} exact;

/* A worker's state: its transport, and its requests queued for batched
   script calls. */
typedef struct exact_thread {
  fleet_io io; /* first: fleet_thread_set_transport */
  exact *x;
  metric_slots *m;
  struct job_group **batch;
  size_t nbatch, batch_cap;
} exact_thread;

typedef struct job_check {
  rs_check rc;       /* the Redis key and what the script needs */
  sl_policy win;     /* a calendar window's policy (rc.policy points here) */
  sl_limiter *local; /* on_store_error: local's limiter, else NULL */
  const void *lkey;  /* its key (the descriptor's) */
  size_t lkey_len;
  int mode;       /* on_store_error */
  unsigned group; /* calls of one slot */
  algo_cell cell; /* CL.THROTTLE's rate (rc.cell points here) */
} job_check;

typedef struct job_group {
  struct job *j;
  int slot;
  rs_call call;
  char *words; /* rs_prepare's, while queued for a batch */
  size_t keys_len, words_len;
} job_group;

/* One request waiting for Redis. */
typedef struct job {
  exact_thread *xt;
  eng_decided_fn done;
  void *ud;
  int phase, waiting, failed, all;
  int lease_op; /* eng_decision's: a release or renewal, not a decision */
  size_t nc, ngroups;
  int64_t now, t0, sent;
  job_check c[ENG_MAX_STATUSES];
  sl_decision dec[ENG_MAX_STATUSES];
  job_group *groups;
  char *keys;
} job;

static void job_free(job *j) {
  free(j->groups);
  free(j->keys);
  free(j);
}

static void count(exact_thread *xt, int id) { metric_add(xt->m, id, 1); }

/* ---- Redis failed: on_store_error ---- */

/* Figures for a limit answered by on_store_error allow or deny. */
static void fallback_fixed(const job_check *c, int deny, int64_t retry_ns,
                           sl_decision *d) {
  const sl_policy *p = c->rc.policy;
  int64_t B = p->burst ? p->burst : p->limit;
  memset(d, 0, sizeof *d);
  d->limit = B;
  if (deny && c->rc.cost > 0) {
    d->retry_after_ns = retry_ns;
    d->reset_ns = retry_ns;
  } else {
    d->allowed = 1;
    /* allow: the limit was not checked, so there is no remaining to tell
       (the engine marks the status unchecked: ENG_REMAINING_UNKNOWN). */
    d->remaining = deny ? 0 : -1;
  }
}

/*
 * Redis failed for this request: each limit answers per on_store_error.
 * A deny limit denies (and the local limiters only report figures); else
 * the local limiters decide together, all-or-nothing, like sl_take_all.
 */
static void job_fallback(job *j, int64_t now) {
  exact_thread *xt = j->xt;
  if (j->lease_op) { /* a local limiter's lease may be released there */
    j->all = 1;
    for (size_t c = 0; c < j->nc; c++) {
      job_check *jc = &j->c[c];
      int rc = 0;
      memset(&j->dec[c], 0, sizeof j->dec[c]);
      if (jc->mode == CFG_STORE_ERROR_LOCAL && jc->local)
        rc = j->lease_op == ENG_LEASE_RELEASE
                 ? sl_release(jc->local, jc->lkey, jc->lkey_len, jc->rc.lease,
                              now, &j->dec[c])
                 : sl_renew(jc->local, jc->lkey, jc->lkey_len, jc->rc.lease,
                            now, &j->dec[c]);
      j->dec[c].allowed = rc == 1;
      j->dec[c].limit = jc->rc.policy->limit;
      j->all &= rc == 1;
    }
    count(xt, xt->x->m_fallbacks);
    return;
  }
  int64_t retry =
      (int64_t)(xt->x->o.breaker_ms > 0 ? xt->x->o.breaker_ms : 1000) * 1000000;
  int deny = 0;
  for (size_t c = 0; c < j->nc; c++)
    if (j->c[c].mode == CFG_STORE_ERROR_DENY && !j->c[c].rc.shadow &&
        j->c[c].rc.cost > 0)
      deny = 1;
  if (j->nc == 1 && j->c[0].rc.cell && j->c[0].local && !deny &&
      j->c[0].mode == CFG_STORE_ERROR_LOCAL) {
    /* CL.THROTTLE's, local: this daemon's own state of the key */
    job_check *jc = &j->c[0];
    int rc = limiter_cell_take(jc->local, &jc->cell, jc->lkey, jc->lkey_len,
                               jc->rc.cost, now, &j->dec[0]);
    if (rc) fallback_fixed(jc, 1, retry, &j->dec[0]);
    j->all = rc == 0 && j->dec[0].allowed;
    count(xt, xt->x->m_fallbacks);
    return;
  }
  sl_check checks[ENG_MAX_STATUSES];
  size_t idx[ENG_MAX_STATUSES], nl = 0;
  int all = !deny;
  for (size_t c = 0; c < j->nc; c++) {
    job_check *jc = &j->c[c];
    if (jc->mode == CFG_STORE_ERROR_LOCAL && jc->local) {
      checks[nl] = (sl_check){jc->local, jc->lkey, jc->lkey_len,
                              deny ? 0 : jc->rc.cost, jc->rc.shadow};
      idx[nl++] = c;
    } else {
      fallback_fixed(jc, jc->mode == CFG_STORE_ERROR_DENY, retry, &j->dec[c]);
    }
  }
  if (nl) {
    sl_decision dec[ENG_MAX_STATUSES];
    int lall = 0;
    /* ECOST cannot happen: the local policy's capacity is smaller, but a
       cost above it is an over-limit request, not an error. */
    if (sl_take_all(checks, nl, now, dec, &lall) == 0) {
      for (size_t k = 0; k < nl; k++) j->dec[idx[k]] = dec[k];
    } else {
      for (size_t k = 0; k < nl; k++) {
        fallback_fixed(&j->c[idx[k]], 1, retry, &j->dec[idx[k]]);
        if (!j->c[idx[k]].rc.shadow && j->c[idx[k]].rc.cost > 0) lall = 0;
      }
    }
    all &= lall;
  }
  j->all = all;
  count(xt, xt->x->m_fallbacks);
}

/* ---- calls ---- */

static void job_reply(void *ud, const redisReply *r, const char *err);

/* Queues a one-group request for the thread's next batched call. */
static int job_queue(job *j) {
  exact_thread *xt = j->xt;
  job_group *grp = &j->groups[0];
  rs_check rc[ENG_MAX_STATUSES];
  for (size_t c = 0; c < j->nc; c++) rc[c] = j->c[c].rc;
  if (xt->nbatch == xt->batch_cap) {
    size_t cap = xt->batch_cap ? 2 * xt->batch_cap : 64;
    job_group **b = realloc(xt->batch, cap * sizeof *b);
    if (!b) return SL_ENOMEM;
    xt->batch = b;
    xt->batch_cap = cap;
  }
  int err = rs_prepare(rc, j->nc, &grp->call, &grp->words, &grp->keys_len,
                       &grp->words_len);
  if (err) return err;
  xt->batch[xt->nbatch++] = grp;
  if (xt->nbatch == 1 && xt->io.wake) xt->io.wake(xt->io.io);
  j->phase = PH_ATOMIC;
  j->all = 1;
  j->waiting = 1;
  return 0;
}

/* Sends one call per group for the phase; 0, or an SL_E* from rs_format. */
static int job_send(job *j, int phase) {
  exact_thread *xt = j->xt;
  if (phase == PH_ATOMIC && j->ngroups == 1 && xt->x->o.batch_max > 1 &&
      !j->lease_op)
    return job_queue(j);
  int mode = phase == PH_CHECK ? RS_DRY : RS_DECIDE;
  if (j->lease_op)
    mode = j->lease_op == ENG_LEASE_RELEASE ? RS_RELEASE : RS_RENEW;
  char *cmds[ENG_MAX_STATUSES];
  size_t lens[ENG_MAX_STATUSES];
  for (size_t g = 0; g < j->ngroups; g++) {
    rs_check rc[ENG_MAX_STATUSES];
    size_t n = 0;
    for (size_t c = 0; c < j->nc; c++)
      if (j->c[c].group == g) rc[n++] = j->c[c].rc;
    int err = rs_format(rc, n, mode, -1, &j->groups[g].call, &cmds[g],
                        &lens[g]);
    if (err) {
      while (g-- > 0) free(cmds[g]);
      return err;
    }
  }
  j->phase = phase;
  j->all = 1;
  j->sent = clock_mono_ns();
  for (size_t g = 0; g < j->ngroups; g++) {
    count(xt, xt->x->m_calls);
    if (xt->io.send(xt->io.io, j->groups[g].slot, cmds[g], lens[g], j->t0,
                    job_reply, &j->groups[g]) == 0) {
      j->waiting++;
    } else {
      j->failed = 1;
      count(xt, xt->x->m_refused);
    }
  }
  return 0;
}

/* After the last reply of a phase: the next phase (returns 1: more
   replies to come), or the fallback if Redis failed (0: answer now). */
static int job_step(job *j) {
  if (!j->failed && j->phase == PH_CHECK && j->all) {
    if (job_send(j, PH_COMMIT)) j->failed = 1;
    if (j->waiting) return 1;
  }
  if (j->failed) {
    metric_set(j->xt->m, j->xt->x->m_failing, 1);
    /* The request's own time: local limiters accept it (their store
       keeps a grace for stamps slightly in the past). */
    job_fallback(j, j->now);
  }
  return 0;
}

/* A group's answer (r NULL: its call failed); returns 1 when it failed. */
static int group_reply(job_group *grp, const redisReply *r) {
  job *j = grp->j;
  exact_thread *xt = j->xt;
  int failed = 0;
  j->waiting--;
  metric_observe(xt->m, xt->x->h_calls, clock_mono_ns() - j->sent);
  sl_decision dec[ENG_MAX_STATUSES];
  int allowed = 0;
  int64_t rnow;
  if (!r || r->type == REDIS_REPLY_ERROR ||
      rs_parse(&grp->call, r, dec, &allowed, &rnow)) {
    j->failed = failed = 1;
  } else {
    metric_set(xt->m, xt->x->m_failing, 0);
    size_t g = (size_t)(grp - j->groups), k = 0;
    for (size_t c = 0; c < j->nc; c++)
      if (j->c[c].group == g) j->dec[c] = dec[k++];
    j->all &= allowed;
  }
  if (j->waiting || job_step(j)) return failed;
  j->done(j->ud, j->dec, j->all);
  job_free(j);
  return failed;
}

static void job_reply(void *ud, const redisReply *r, const char *err) {
  (void)err;
  job_group *grp = ud;
  exact_thread *xt = grp->j->xt;
  if (group_reply(grp, r)) count(xt, xt->x->m_errors);
}

/* ---- batches ---- */

/* One batched call: its requests, in the order of the script's reply. */
typedef struct batch {
  exact_thread *xt;
  size_t n;
  job_group *g[];
} batch;

static void batch_reply(void *ud, const redisReply *r, const char *err) {
  (void)err;
  batch *b = ud;
  int failed = 0;
  for (size_t i = 0; i < b->n; i++) failed |= group_reply(b->g[i], r);
  if (failed) count(b->xt, b->xt->x->m_errors);
  free(b);
}

/* The call for q[0..n) (one slot): sent, or each request answered as a
   failed call (breaker open, out of memory). */
static void batch_send(exact_thread *xt, job_group **q, size_t n) {
  rs_request reqs[RS_BATCH_MAX];
  for (size_t i = 0; i < n; i++)
    reqs[i] =
        (rs_request){&q[i]->call, q[i]->words, q[i]->keys_len, q[i]->words_len};
  char *cmd = NULL;
  size_t len = 0;
  batch *b = malloc(sizeof *b + n * sizeof *b->g);
  int rc = b ? rs_format_batch(reqs, n, RS_DECIDE, -1, &cmd, &len) : SL_ENOMEM;
  int64_t now = clock_mono_ns(), since = now;
  for (size_t i = 0; i < n; i++) {
    free(q[i]->words);
    q[i]->words = NULL;
    q[i]->j->sent = now;
    if (q[i]->j->t0 < since) since = q[i]->j->t0; /* its first arrival */
  }
  count(xt, xt->x->m_calls);
  if (rc == 0) {
    b->xt = xt;
    b->n = n;
    memcpy(b->g, q, n * sizeof *q);
    if (xt->io.send(xt->io.io, q[0]->slot, cmd, len, since, batch_reply, b) ==
        0)
      return;
    count(xt, xt->x->m_refused);
  } else {
    free(cmd);
    count(xt, xt->x->m_errors);
  }
  free(b);
  for (size_t i = 0; i < n; i++) group_reply(q[i], NULL);
}

/* Sorts queued requests by slot, arrival order within one. */
static int by_slot(const void *a, const void *b) {
  const job_group *x = *(job_group *const *)a, *y = *(job_group *const *)b;
  if (x->slot != y->slot) return x->slot < y->slot ? -1 : 1;
  return x->j->t0 < y->j->t0 ? -1 : x->j->t0 > y->j->t0;
}

/* Sends the n queued requests. */
static void flush_queue(exact_thread *xt, size_t n) {
  /* Detached first: an answer given here (a refused call) may start the
     connection's next request, which queues anew. */
  job_group **q = xt->batch;
  xt->batch = NULL;
  xt->nbatch = xt->batch_cap = 0;
  if (xt->x->o.cluster) qsort(q, n, sizeof *q, by_slot);
  size_t max = (size_t)xt->x->o.batch_max;
  if (max > RS_BATCH_MAX) max = RS_BATCH_MAX;
  for (size_t i = 0; i < n;) {
    size_t k = 1;
    while (i + k < n && k < max && q[i + k]->slot == q[i]->slot) k++;
    batch_send(xt, q + i, k);
    i += k;
  }
  free(q);
}

static void exact_flush(eng_backend *b, void *bt) {
  (void)b;
  exact_thread *xt = bt;
  size_t n;
  while ((n = xt->nbatch)) flush_queue(xt, n);
}

/* ---- decisions ---- */

/* A job for q's checks: each one's Redis key (the request's tag, the
   limiter's name, the key) and a copy of its key for a local limiter
   (the request's buffer may go before Redis answers). NULL when out of
   memory. */
static job *job_new(exact_thread *xt, const eng_decision *q) {
  /* (malloc, not calloc: a job is some 8 KB, of which a request uses a few
     checks; each field is set below or before it is read) */
  job *j = malloc(sizeof *j);
  size_t total = 0;
  for (size_t c = 0; c < q->n; c++)
    total += REDIS_KEY_MAX(q->tag_len, key_id_len(&q->checks[c].name),
                           q->checks[c].c.key_len) +
             q->checks[c].c.key_len;
  if (j) j->keys = malloc(total ? total : 1);
  if (!j || !j->keys) {
    free(j);
    return NULL;
  }
  j->xt = xt;
  j->done = NULL;
  j->ud = NULL;
  j->phase = PH_ATOMIC;
  j->waiting = j->failed = 0;
  j->all = 1;
  j->ngroups = 0;
  j->sent = 0;
  j->groups = NULL;
  j->nc = q->n;
  j->now = q->now;
  j->lease_op = q->lease_op;
  j->t0 = clock_mono_ns();
  uint64_t lease = q->lease; /* an acquire's: one for all its checks */
  char *p = j->keys;
  for (size_t c = 0; c < q->n; c++) {
    const eng_check *ck = &q->checks[c];
    job_check *jc = &j->c[c];
    jc->rc.policy = sl_limiter_policy(ck->c.limiter);
    jc->rc.phase_ns = 0;
    if (ck->win_end) { /* a calendar window: its start and length */
      jc->win = *jc->rc.policy;
      jc->win.period_ns = ck->win_end - ck->win_start;
      jc->rc.policy = &jc->win;
      jc->rc.phase_ns = ck->win_start;
    }
    jc->rc.key = p;
    jc->rc.key_len =
        redis_key(p, q->tag, q->tag_len, &ck->name, ck->c.key, ck->c.key_len);
    p += jc->rc.key_len;
    jc->rc.cost = ck->c.cost;
    jc->rc.shadow = ck->c.shadow;
    jc->rc.lease = 0;
    jc->rc.cell = NULL;
    if (ck->cell) { /* a copy: the caller's may go before Redis answers */
      jc->cell = *ck->cell;
      jc->rc.cell = &jc->cell;
    }
    if (jc->rc.policy->algo == SL_CONCURRENCY && (q->lease_op || ck->c.cost)) {
      if (!lease) lease = limiter_lease_id(ck->c.limiter);
      jc->rc.lease = lease;
    }
    jc->mode = ck->on_error;
    jc->local = ck->local;
    memcpy(p, ck->c.key, ck->c.key_len);
    jc->lkey = p;
    jc->lkey_len = ck->c.key_len;
    p += ck->c.key_len;
  }
  return j;
}

/*
 * Starts job j in Redis: ENG_PENDING, or 0 when it is already answered
 * (Redis known down: on_store_error), or an SL_E* (ECOST...).
 */
static int job_start(job *j) {
  /* Group the checks by slot (a single group outside a cluster). */
  j->groups = malloc(j->nc * sizeof *j->groups);
  if (!j->groups) return SL_ENOMEM;
  j->ngroups = 0;
  for (size_t c = 0; c < j->nc; c++) {
    int slot = j->xt->x->o.cluster
                   ? (int)rc_key_slot(j->c[c].rc.key, j->c[c].rc.key_len)
                   : -1;
    size_t g = 0;
    while (g < j->ngroups && j->groups[g].slot != slot) g++;
    if (g == j->ngroups) {
      j->groups[g].j = j;
      j->groups[g].slot = slot;
      j->ngroups++;
    }
    j->c[c].group = (unsigned)g;
  }
  int rc = job_send(j, j->ngroups > 1 && !j->lease_op ? PH_CHECK : PH_ATOMIC);
  if (rc) return rc;
  if (j->waiting) return ENG_PENDING;
  job_step(j); /* nothing was sent: the breaker is open */
  return 0;
}

static int exact_decide(eng_backend *b, void *bt, const eng_decision *q,
                        sl_decision *dec, int *all, eng_decided_fn done,
                        void *ud) {
  (void)b;
  exact_thread *xt = bt;
  /* A caller that cannot wait, or a worker without Redis, decides on this
     daemon's own store. */
  if (!done || !xt->io.send) return engine_decide_local(q, dec, all);
  job *j = job_new(xt, q);
  if (!j) return SL_ENOMEM;
  j->done = done;
  j->ud = ud;
  int rc = job_start(j);
  if (rc == ENG_PENDING) return rc;
  if (rc == 0) {
    memcpy(dec, j->dec, j->nc * sizeof *dec);
    *all = j->all;
  }
  job_free(j);
  return rc;
}

/* ---- resets ---- */

static int exact_reset(eng_backend *b, void *bt, const eng_forgets *f,
                       eng_reset *out, eng_reset_fn done, void *ud) {
  exact *x = (exact *)b;
  exact_thread *xt = bt;
  unlink_opts o = {x->o.cluster, NULL, NULL};
  return fleet_reset(&xt->io, &o, f, NULL, NULL, out, done, ud);
}

/* ---- the backend ---- */

static int exact_policy_ok(eng_backend *b, const sl_policy *p, char *err,
                           size_t err_len) {
  (void)b;
  return rs_policy_check(p, err, err_len);
}

static int exact_attach(eng_backend *b, engine *e, char *err, size_t len) {
  exact *x = (exact *)b;
  x->e = e;
  metrics *m = engine_metrics_registry(e);
  const metric_def defs[] = {
      {"sluice_redis_calls_total", NULL, METRIC_COUNTER, METRIC_THREADS,
       METRIC_GROUP_BACKEND, "Fleet mode: decision scripts sent to Redis."},
      {"sluice_redis_errors_total", NULL, METRIC_COUNTER, METRIC_THREADS,
       METRIC_GROUP_BACKEND,
       "Fleet mode: scripts that failed (timeout, connection lost, error "
       "reply)."},
      {"sluice_redis_refused_total", NULL, METRIC_COUNTER, METRIC_THREADS,
       METRIC_GROUP_BACKEND,
       "Fleet mode: scripts not sent because the breaker was open (Redis "
       "down)."},
      {"sluice_store_fallbacks_total", NULL, METRIC_COUNTER, METRIC_THREADS,
       METRIC_GROUP_BACKEND,
       "Fleet mode: requests answered by on_store_error instead of Redis."},
      {"sluice_store_fallback_active", NULL, METRIC_GAUGE, METRIC_THREADS_ANY,
       METRIC_GROUP_BACKEND,
       "Fleet mode: 1 while the last Redis call of some thread failed."},
      {"sluice_redis_call_duration_seconds", NULL, METRIC_HISTOGRAM,
       METRIC_THREADS, METRIC_GROUP_BACKEND,
       "Fleet mode: from sending a script to its reply (batching "
       "included)."},
  };
  int *ids[] = {&x->m_calls,     &x->m_errors,  &x->m_refused,
                &x->m_fallbacks, &x->m_failing, &x->h_calls};
  for (size_t i = 0; i < sizeof defs / sizeof defs[0]; i++)
    if ((*ids[i] = metrics_add(m, &defs[i])) < 0) {
      snprintf(err, len, "too many metrics");
      return -1;
    }
  return 0;
}

static void *exact_thread_new(eng_backend *b, engine_thread *t, int *failed) {
  exact_thread *xt = calloc(1, sizeof *xt);
  if (!xt) {
    *failed = 1;
    return NULL;
  }
  xt->x = (exact *)b;
  xt->m = engine_thread_metrics(t);
  return xt;
}

static void exact_thread_free(eng_backend *b, void *bt) {
  (void)b;
  exact_thread *xt = bt;
  if (!xt) return;
  free(xt->batch); /* empty: the worker flushed before stopping */
  free(xt);
}

static void exact_free(eng_backend *b) { free(b); }

static const eng_backend_ops exact_ops = {
    .name = "exact",
    .flags = ENG_BACKEND_FALLIBLE | ENG_BACKEND_ASYNC | ENG_BACKEND_CELL,
    .attach = exact_attach,
    .thread_new = exact_thread_new,
    .thread_free = exact_thread_free,
    .policy_ok = exact_policy_ok,
    .decide = exact_decide,
    .reset = exact_reset,
    .flush = exact_flush,
    .free = exact_free,
};

eng_backend *fleet_exact_new(const fleet_opts *o) {
  exact *x = calloc(1, sizeof *x);
  if (!x) return NULL;
  x->base.ops = &exact_ops;
  x->o = *o;
  return &x->base;
}

void fleet_thread_set_transport(engine_thread *t, fleet_send_fn send,
                                fleet_wake_fn wake, void *io) {
  fleet_io *fio = engine_thread_backend(t);
  if (!fio) return;
  fio->send = send;
  fio->wake = wake;
  fio->io = io;
}
