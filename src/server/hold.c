/*
 * hold.c — the wait mode's held answers (hold.h): per worker, a binary
 * min-heap of entries by release time and one timer entry on the loop.
 *
 * h2o 2.2's timeouts are lists of one fixed duration, so the timer is two
 * lists: a fine one (1 ms) armed when the earliest release is near, and a
 * coarse one (25 ms) when it is further away, so that a loop holding
 * answers for seconds wakes some 40 times a second rather than 1,000.
 * Each wake releases every entry whose time has come, in time order.
 */
#include "hold.h"

#include <stdlib.h>

#define FINE_MS 1
#define COARSE_MS 25

typedef struct hold_queue {
  hold_entry **heap;
  size_t n, cap;
  long reserved; /* places taken (held or about to be) */
  h2o_timeout_t fine, coarse;
  h2o_timeout_entry_t tick;
  worker *w;
} hold_queue;

/* The worker's queue, made on first use (NULL: out of memory). */
static hold_queue *queue_of(worker *w) {
  if (w->hold) return w->hold;
  hold_queue *q = calloc(1, sizeof *q);
  if (!q) return NULL;
  q->w = w;
  h2o_timeout_init(w->loop, &q->fine, FINE_MS);
  h2o_timeout_init(w->loop, &q->coarse, COARSE_MS);
  w->hold = q;
  return q;
}

/* A worker's share of --max-waiting: twice an even split, at least 1. */
static long share(const server *srv) {
  long n = srv->o.max_waiting, t = srv->o.threads ? srv->o.threads : 1;
  long s = (n + t - 1) / t * 2;
  return s < 1 ? 1 : s > n ? n : s;
}

int hold_reserve(worker *w) {
  server *srv = w->srv;
  hold_queue *q = queue_of(w);
  int full = !q || q->reserved >= share(srv);
  if (!full && atomic_fetch_add(&srv->waiting, 1) >= srv->o.max_waiting) {
    atomic_fetch_sub(&srv->waiting, 1);
    full = 1;
  }
  if (full) {
    engine_count(w->et, EC_WAITS_FULL, 1);
    return -1;
  }
  q->reserved++;
  engine_waiting(w->et, 1);
  return 0;
}

void hold_unreserve(worker *w) {
  hold_queue *q = w->hold;
  if (q) q->reserved--; /* (NULL: disposed, the worker is stopping) */
  atomic_fetch_sub(&w->srv->waiting, 1);
  engine_waiting(w->et, -1);
}

static void swap(hold_queue *q, size_t a, size_t b) {
  hold_entry *t = q->heap[a];
  q->heap[a] = q->heap[b];
  q->heap[b] = t;
  q->heap[a]->slot = a;
  q->heap[b]->slot = b;
}

static void sift_up(hold_queue *q, size_t i) {
  while (i > 0 && q->heap[(i - 1) / 2]->at > q->heap[i]->at) {
    swap(q, i, (i - 1) / 2);
    i = (i - 1) / 2;
  }
}

static void sift_down(hold_queue *q, size_t i) {
  for (;;) {
    size_t l = 2 * i + 1, r = l + 1, m = i;
    if (l < q->n && q->heap[l]->at < q->heap[m]->at) m = l;
    if (r < q->n && q->heap[r]->at < q->heap[m]->at) m = r;
    if (m == i) return;
    swap(q, i, m);
    i = m;
  }
}

/* Takes entry i out of the heap. */
static void heap_remove(hold_queue *q, size_t i) {
  q->n--;
  if (i != q->n) {
    q->heap[i] = q->heap[q->n];
    q->heap[i]->slot = i;
    sift_down(q, i);
    sift_up(q, i);
  }
}

static void on_tick(h2o_timeout_entry_t *t);

/* Arms the timer for the earliest entry (none: disarmed). */
static void arm(hold_queue *q) {
  if (h2o_timeout_is_linked(&q->tick)) h2o_timeout_unlink(&q->tick);
  if (!q->n) return;
  q->tick.cb = on_tick;
  int64_t left = q->heap[0]->at - clock_mono_ns();
  h2o_timeout_link(q->w->loop,
                   left > (COARSE_MS + 5) * 1000000 ? &q->coarse : &q->fine,
                   &q->tick);
}

/* Releases e: out of the heap, its place given back, its answer sent. */
static void release(hold_queue *q, hold_entry *e) {
  heap_remove(q, e->slot);
  e->slot = SIZE_MAX;
  hold_unreserve(q->w);
  engine_count(q->w->et, EC_WAITS_SERVED, 1);
  e->fire(e);
}

static void on_tick(h2o_timeout_entry_t *t) {
  hold_queue *q = H2O_STRUCT_FROM_MEMBER(hold_queue, tick, t);
  int64_t now = clock_mono_ns();
  /* (a ms early: the loop's clock wakes us on whole milliseconds) */
  while (q->n && q->heap[0]->at <= now + 500000) release(q, q->heap[0]);
  arm(q);
}

int hold_start(worker *w, hold_entry *e, int64_t delay_ns) {
  hold_queue *q = w->hold;
  if (q->n == q->cap) {
    size_t ncap = q->cap ? q->cap * 2 : 64;
    hold_entry **nh = realloc(q->heap, ncap * sizeof *nh);
    if (!nh) {
      hold_unreserve(w);
      return -1;
    }
    q->heap = nh;
    q->cap = ncap;
  }
  e->at = clock_mono_ns() + delay_ns;
  e->slot = q->n;
  q->heap[q->n++] = e;
  sift_up(q, e->slot);
  if (q->heap[0] == e) arm(q);
  return 0;
}

void hold_cancel(worker *w, hold_entry *e) {
  hold_queue *q = w->hold;
  if (!q || e->slot == SIZE_MAX) return;
  int first = e->slot == 0;
  heap_remove(q, e->slot);
  e->slot = SIZE_MAX;
  hold_unreserve(w);
  if (first) arm(q);
}

void hold_release_all(worker *w) {
  hold_queue *q = w->hold;
  if (!q) return;
  while (q->n) release(q, q->heap[0]);
  arm(q);
}

int64_t hold_delay(eng_result *r, int64_t cap) {
  int64_t delay = 0;
  for (size_t i = 0; r->allowed && i < r->n; i++)
    if (!r->st[i].shadow && r->st[i].d.delay_ns > delay)
      delay = r->st[i].d.delay_ns;
  if (delay <= cap) return delay;
  r->allowed = 0;
  for (size_t i = 0; i < r->n; i++)
    if (!r->st[i].shadow && r->st[i].d.delay_ns > cap) {
      r->st[i].d.allowed = 0;
      r->st[i].d.retry_after_ns = r->st[i].d.delay_ns - cap;
      r->worst = (int)i;
      /* (SL.CHECK's reply shows each descriptor's deciding status) */
      r->by_descriptor[r->st[i].descriptor] = (int)i;
    }
  return 0;
}

void hold_worker_dispose(worker *w) {
  hold_queue *q = w->hold;
  if (!q) return;
  if (h2o_timeout_is_linked(&q->tick)) h2o_timeout_unlink(&q->tick);
  h2o_timeout_dispose(w->loop, &q->fine);
  h2o_timeout_dispose(w->loop, &q->coarse);
  free(q->heap);
  free(q);
  w->hold = NULL;
}
