/*
 * sim_run.c — `sluice sim`'s runner (sim.h): decides every request of a
 * scenario under every policy, on a virtual clock.
 *
 * Every decision is the library's own: one store, one sl_limiter per policy
 * (the same key under two limiters is two states), `now` from the scenario.
 * Nothing is sampled or approximated except the plot's pixels: the summary's
 * max_in_window is computed exactly over each policy's allowed history.
 *
 * Requests are never materialised: the runner merges the commands by time
 * with a heap. Retries depend on each policy's answers, so every policy has
 * its own queue of retries; a step is one command at one instant (decided
 * by every policy) or the retries due at one instant.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "sim_impl.h"

static int rev_less(const retry_ev *a, const retry_ev *b) {
  return a->t < b->t || (a->t == b->t && a->seq < b->seq);
}

static int rheap_push(rheap *h, const retry_ev *e) {
  if (h->n == h->cap) {
    size_t ncap = h->cap ? h->cap * 2 : 64;
    retry_ev *n = realloc(h->v, ncap * sizeof *n);
    if (!n) return -1;
    h->v = n;
    h->cap = ncap;
  }
  size_t i = h->n++;
  while (i > 0 && rev_less(e, &h->v[(i - 1) / 2])) {
    h->v[i] = h->v[(i - 1) / 2];
    i = (i - 1) / 2;
  }
  h->v[i] = *e;
  return 0;
}

static retry_ev rheap_pop(rheap *h) {
  retry_ev top = h->v[0], last = h->v[--h->n];
  size_t i = 0;
  for (;;) {
    size_t c = 2 * i + 1;
    if (c >= h->n) break;
    if (c + 1 < h->n && rev_less(&h->v[c + 1], &h->v[c])) c++;
    if (!rev_less(&h->v[c], &last)) break;
    h->v[i] = h->v[c];
    i = c;
  }
  if (h->n) h->v[i] = last;
  return top;
}

/* The heap of commands by their next instant (ties: scenario order). */
typedef struct cmd_pos {
  int64_t t;
  uint32_t cmd;
  uint64_t instant;
} cmd_pos;

static int cpos_less(const cmd_pos *a, const cmd_pos *b) {
  return a->t < b->t || (a->t == b->t && a->cmd < b->cmd);
}

static void cheap_sift_down(cmd_pos *h, size_t n, size_t i) {
  cmd_pos x = h[i];
  for (;;) {
    size_t c = 2 * i + 1;
    if (c >= n) break;
    if (c + 1 < n && cpos_less(&h[c + 1], &h[c])) c++;
    if (!cpos_less(&h[c], &x)) break;
    h[i] = h[c];
    i = c;
  }
  h[i] = x;
}

int64_t sim_level_of(const sl_policy *p, const sl_decision *d) {
  switch (p->algo) {
  case SL_TOKEN_BUCKET:
  case SL_GCRA:
    return d->remaining; /* tokens */
  default:
    return d->limit - d->remaining; /* queue, count, estimate */
  }
}

/* Samples the plotted key (key 0) of every policy at the end of every bin
   that ends before t, by peeking (cost 0 changes nothing). */
static void peek_until(run_state *rs, int64_t t) {
  svg_chart *c = rs->chart;
  if (!c || rs->sc->nkeys == 0) return;
  const char *key = rs->sc->keys[0];
  while (rs->next_peek < c->nbins &&
         svg_bin_start(c, rs->next_peek + 1) - 1 <= t) {
    int64_t at = svg_bin_start(c, rs->next_peek + 1) - 1;
    for (int p = 0; p < rs->sc->npol; p++) {
      sl_decision d;
      if (sl_limiter_take(sim_fleet_plot_lim(rs, p), key, strlen(key), 0, at,
                          &d) == 0)
        svg_level(c, (size_t)p, at, sim_level_of(&rs->sc->pol[p].pol, &d));
    }
    rs->next_peek++;
  }
}

/* Decides one request under policy p and does the bookkeeping: counts,
   the judge, the plot, and a retry when the client is set to retry. */
/* sl_backoff_delay's random source: a policy's seeded generator. */
static uint64_t sim_random(void *ud) { return lab_rand(ud); }

static int decide(run_state *rs, int p, int64_t t, uint32_t key, int64_t cost,
                  int32_t retry, int32_t cls, uint32_t attempt,
                  int64_t first_t) {
  const sim_scenario *sc = rs->sc;
  sl_decision d;
  if (!sim_shed_take(rs, p, t, cls, cost, &d)) { /* the shedder first */
    int e = sim_fleet_take(rs, p, t, key, cost, &d);
    if (e) return e;
    if (d.allowed) sim_shed_served(rs, p, cls);
  }
  if (rs->opts->json) sim_json_event(rs, p, t, key, &d);
  if (!rs->any) rs->t_min = t;
  rs->any = 1;
  rs->t_max = t;
  cell *c = &rs->step[p];
  c->used = 1;
  c->remaining = d.remaining;
  lab_window_sum(&rs->win[p], key, t);
  retry_stats *st = retry >= 0 ? &rs->rstats[(size_t)retry * (size_t)sc->npol + (size_t)p] : NULL;
  if (st) {
    st->attempts++;
    if (attempt == 1) st->requests++;
  }
  if (d.allowed) {
    rs->allowed[p]++;
    c->allowed++;
    if (d.delay_ns > 0) {
      c->delayed++;
      rs->delayed[p]++;
      if (d.delay_ns > rs->max_delay[p]) rs->max_delay[p] = d.delay_ns;
      if (d.delay_ns > c->max_delay) c->max_delay = d.delay_ns;
    }
    if (lab_window_add(&rs->win[p], key, t, cost)) return SL_ENOMEM;
    if (st) {
      st->served++;
      if (t - first_t > st->max_wait) st->max_wait = t - first_t;
    }
  } else {
    rs->denied[p]++;
    c->denied++;
    c->retry_after = d.retry_after_ns;
    if (st) {
      const sim_retry *r = &sc->retry[retry];
      int64_t wait = r->every_ns;
      if (r->mode == RETRY_FULL_JITTER) {
        /* The library's backoff, on this policy's seeded generator: never
           before the limiter's retry_after, then full jitter. */
        sl_rate_info ri;
        sl_rate_info_init(&ri);
        ri.retry_after_ns = d.retry_after_ns;
        wait = sl_backoff_delay(r->base_ns, r->cap_ns, attempt - 1, &ri,
                                sim_random, &rs->rng[p]);
      } else if (r->mode == RETRY_AFTER) {
        wait = d.retry_after_ns;
        /* Whole milliseconds, as clients' timers are, when the jitter
           is at least that long. */
        int64_t g = r->jitter_ns >= NS_MS ? NS_MS : 1;
        if (r->jitter_ns > 0)
          wait += g * (int64_t)lab_rand_below(&rs->rng[p],
                                              (uint64_t)(r->jitter_ns / g) + 1);
      }
      if (attempt >= r->max_attempts || wait > SL_TIME_MAX_NS - 1 - t) {
        st->gave_up++;
      } else {
        retry_ev ev = {.t = t + wait, .first_t = first_t, .cost = cost,
                       .seq = rs->seq++, .key = key, .attempt = attempt + 1,
                       .retry = retry, .cls = cls};
        if (rheap_push(&rs->retries[p], &ev)) return SL_ENOMEM;
      }
    }
  }
  if (rs->chart) {
    svg_chart *ch = rs->chart;
    svg_count(ch, (size_t)p, t, d.allowed ? (d.delay_ns > 0 ? 1 : 0) : 2, 1);
    if (key == 0) svg_level(ch, (size_t)p, t, sim_level_of(&sc->pol[p].pol, &d));
  }
  return 0;
}

/* ---- one pass --------------------------------------------------------- */

static int run_pass(run_state *rs, char *err, size_t err_len) {
  const sim_scenario *sc = rs->sc;
  const int np = sc->npol;
  int rc = 0;
  cmd_pos *heap = NULL;
  size_t nheap = 0;
  sl_store_options so;
  sl_store_options_init(&so);
  /* Far above what a capped scenario can hold: an eviction would make
     decisions lenient, and the simulator must show exact ones. */
  so.max_memory = (size_t)1 << 30;
  if (sl_store_new(&so, &rs->store)) goto oom;
  for (int p = 0; p < np; p++) {
    if (sl_limiter_new(rs->store, &sc->pol[p].pol, &rs->lim[p])) goto oom;
    if (lab_window_init(&rs->win[p], sc->pol[p].pol.period_ns, sc->nkeys))
      goto oom;
    uint64_t s = rs->opts->seed + (uint64_t)p * UINT64_C(0x9e3779b97f4a7c15);
    rs->rng[p] = lab_rand(&s);
  }
  if (sim_fleet_init(rs) || sim_shed_init(rs)) goto oom;
  rs->rstats = calloc(sc->nretry * (size_t)np + 1, sizeof *rs->rstats);
  heap = malloc((sc->ncmd + 1) * sizeof *heap);
  if (!rs->rstats || !heap) goto oom;
  for (size_t i = 0; i < sc->ncmd; i++)
    heap[nheap++] = (cmd_pos){sc->cmd[i].t0, (uint32_t)i, 0};
  for (size_t i = nheap / 2; i-- > 0;) cheap_sift_down(heap, nheap, i);

  for (;;) {
    int64_t ts = nheap ? heap[0].t : INT64_MAX, tr = INT64_MAX;
    for (int p = 0; p < np; p++)
      if (rs->retries[p].n && rs->retries[p].v[0].t < tr)
        tr = rs->retries[p].v[0].t;
    if (ts == INT64_MAX && tr == INT64_MAX) break;
    if (ts <= tr) {
      cmd_pos cp = heap[0];
      const sim_cmd *c = &sc->cmd[cp.cmd];
      peek_until(rs, cp.t);
      if (c->kind == CMD_STORE) rs->store_down = (int)c->cost;
      for (int p = 0; p < np; p++)
        for (uint64_t i = 0; i < c->per_instant; i++)
          if ((rc = decide(rs, p, cp.t, c->key, c->cost, c->retry, c->cls, 1,
                           cp.t)))
            goto fail;
      if (c->kind != CMD_STORE) sim_end_step(rs, cp.t, cp.cmd);
      if (++cp.instant < c->instants) {
        cp.t = c->t0 + (int64_t)cp.instant * c->every_ns;
        heap[0] = cp;
      } else {
        heap[0] = heap[--nheap];
      }
      if (nheap) cheap_sift_down(heap, nheap, 0);
    } else {
      peek_until(rs, tr);
      for (int p = 0; p < np; p++)
        while (rs->retries[p].n && rs->retries[p].v[0].t == tr) {
          retry_ev ev = rheap_pop(&rs->retries[p]);
          if ((rc = decide(rs, p, tr, ev.key, ev.cost, ev.retry, ev.cls,
                           ev.attempt, ev.first_t)))
            goto fail;
        }
      sim_end_step(rs, tr, -1);
    }
  }
  if (rs->chart) peek_until(rs, INT64_MAX);
  if (rs->show && rs->pending.active) sim_print_row(rs, &rs->pending);
  free(heap);
  return 0;
oom:
  rc = SL_ENOMEM;
fail:
  free(heap);
  snprintf(err, err_len, "%s", sl_strerror(rc));
  return -1;
}

static void run_free(run_state *rs) {
  sim_fleet_free(rs);
  sim_shed_free(rs);
  for (int p = 0; p < SIM_MAX_POLICIES; p++) {
    sl_limiter_free(rs->lim[p]);
    rs->lim[p] = NULL;
    lab_window_free(&rs->win[p]);
    free(rs->retries[p].v);
    rs->retries[p] = (rheap){0};
  }
  sl_store_free(rs->store);
  rs->store = NULL;
  free(rs->rstats);
  rs->rstats = NULL;
}

int sim_run(const sim_scenario *sc, const sim_options *opts, FILE *out,
            char *err, size_t err_len) {
  run_state rs;
  memset(&rs, 0, sizeof rs);
  rs.sc = sc;
  rs.opts = opts;
  rs.out = out;
  rs.show = !opts->summary_only && !opts->json;
  rs.name_w = 6;
  for (int p = 0; p < sc->npol; p++)
    if ((int)strlen(sc->pol[p].name) > rs.name_w)
      rs.name_w = (int)strlen(sc->pol[p].name);
  rs.label_w = 4;
  char label[128];
  for (size_t i = 0; i < sc->ncmd; i++) {
    int n = (int)strlen(sim_cmd_label(sc, i, label, sizeof label));
    if (n > rs.label_w) rs.label_w = n;
  }
  if (sc->nretry && rs.label_w < 5) rs.label_w = 5;
  if (rs.show) sim_print_header(&rs);
  if (opts->json) sim_json_head(&rs);
  if (run_pass(&rs, err, err_len)) {
    run_free(&rs);
    return -1;
  }
  if (opts->json) {
    sim_json_tail(&rs);
    run_free(&rs);
    return 0;
  }
  if (rs.show) sim_print_retries(&rs);
  if (rs.show) fprintf(out, "\n");
  for (int p = 0; p < sc->npol; p++)
    fprintf(out, "summary policy=%s allowed=%llu denied=%llu "
                 "max_in_window=%lld\n", sc->pol[p].name,
            (unsigned long long)rs.allowed[p], (unsigned long long)rs.denied[p],
            (long long)rs.win[p].worst);
  sim_shed_print(&rs);

  int rc = 0;
  if (opts->svg) {
    /* A second pass, now that the time span is known, fills the plot's
       bins; the run is deterministic, so it repeats the first exactly. */
    int64_t lo = rs.any ? rs.t_min : 0, hi = rs.any ? rs.t_max : 0;
    int64_t pad = (hi - lo) / 20;
    if (pad == 0) pad = NS_S;
    lo = lo > pad ? lo - pad : 0;
    hi = hi + pad;
    run_state two;
    memset(&two, 0, sizeof two);
    two.sc = sc;
    two.opts = opts;
    two.out = out;
    svg_chart chart;
    if (svg_chart_init(&chart, (size_t)sc->npol, lo, hi)) {
      snprintf(err, err_len, "out of memory");
      run_free(&rs);
      return -1;
    }
    sim_fill_chart(sc, opts, &rs, &chart);
    two.chart = &chart;
    if (run_pass(&two, err, err_len) == 0) {
      if (svg_chart_write(&chart, opts->svg)) {
        snprintf(err, err_len, "writing the plot: %s", strerror(errno));
        rc = -1;
      }
    } else {
      rc = -1;
    }
    run_free(&two);
    svg_chart_free(&chart);
  }
  run_free(&rs);
  return rc;
}
