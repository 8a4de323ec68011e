/*
 * decide.c — engine_decide: a query becomes checks (the limits its
 * descriptors match, or one ad-hoc policy), the backend decides them, and
 * the outcome is reported, ranked and counted.
 *
 * Store keys. A config rule's state is keyed by the request's whole
 * descriptor (every key and value, length-prefixed so no two descriptors
 * share a key): as in envoyproxy/ratelimit, a key-only descriptor (or a
 * wildcard) gives each value its own counter, unless the wildcard says
 * share_threshold: then every value it matches counts under the pattern.
 * Each limit has its own limiter, i.e. its own namespace in the store.
 *
 * quota_mode limits (envoy's) never deny on their own: the backend sees
 * them as shadow checks, and the request is denied when every quota limit
 * it matched is over its limit. The charging model is sluice's (a denied
 * request costs nothing) unless the daemon runs with envoy's (--charging
 * envoy: every matched limit is charged, denied or not, and a cost above
 * a limit's capacity is a denial, not an error).
 *
 * A backend that must wait for its store (fleet mode's exact one) answers
 * later: the decision's generation stays pinned meanwhile (its rules are
 * what the result points to), and the answer is finished, counted and
 * handed to the caller's callback on the worker's thread.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../base/clock.h"
#include "../algo/cell.h"
#include "../base/hash.h"
#include "../limiter.h"
#include "internal.h"
#include "memory.h"

/* What finishing a decision needs besides the backend's answer. */
typedef struct finish_ctx {
  adhoc_entry *adhoc; /* one ad-hoc policy (status 0), pinned while
                         the decision waits for the backend */
  int blocked; /* a rule of requests_per_unit 0 denies */
  int lease_op; /* a release or renewal (eng_query.lease_op): not counted */
  int never;   /* CL.THROTTLE's quantity above its limit, decided as a
                  peek: limited, no retry (decide_cell) */
  int cell;    /* CL.THROTTLE's one check, decided by the backend (status
                  0, counted as an ad-hoc decision) */
  int nquota;  /* quota_mode statuses among out->st */
  size_t nc, ndesc;
  adhoc_entry *pins[ENG_MAX_DESCRIPTORS]; /* overrides' policies, pinned
                                             while the decision waits */
  size_t npins;
  size_t check_of[ENG_MAX_STATUSES]; /* out->st index of check c */
  uint64_t cand_checks; /* bit c: check c is its status's candidate */
  uint32_t sid[ENG_MAX_STATUSES];    /* series of out->st[i] */
} finish_ctx;

/* A decision waiting for the backend. */
typedef struct pending {
  engine_thread *t;
  gen *g; /* pinned until the answer */
  eng_result *out;
  eng_done_fn done;
  void *ud;
  int64_t t0;
  eng_query *q; /* a copy for the observer (NULL: none) */
  finish_ctx f;
} pending;

/* ---- requests ---- */

/* Appends a length-prefixed piece to the key buffer. -1 if too long. */
static int key_put(uint8_t *buf, size_t *len, const char *s, size_t n) {
  uint8_t hdr[5];
  size_t h = 0;
  size_t v = n;
  do {
    hdr[h++] = (uint8_t)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
    v >>= 7;
  } while (v);
  if (*len + h + n > KEY_MAX) return -1;
  memcpy(buf + *len, hdr, h);
  if (n) memcpy(buf + *len + h, s, n);
  *len += h + n;
  return 0;
}

int descriptor_key(const eng_descriptor *d, const cfg_match *m, uint8_t *buf,
                   size_t *len) {
  *len = 0;
  for (size_t i = 0; i < d->n; i++) {
    const cfg_entry *e = &d->entries[i];
    size_t vlen = e->value_len;
    const char *v = m ? config_count_value(m, e, i, &vlen) : e->value;
    if (key_put(buf, len, e->key, e->key_len) || key_put(buf, len, v, vlen))
      return -1;
  }
  return 0;
}

void request_tag(const cfg_domain *dom, const eng_request *req,
                 const char **tag, size_t *tag_len) {
  *tag = "";
  *tag_len = 0;
  for (size_t i = 0; dom->hash_tag && i < req->n && !*tag_len; i++)
    for (size_t k = 0; k < req->descriptors[i].n; k++) {
      const cfg_entry *en = &req->descriptors[i].entries[k];
      if (en->key_len == strlen(dom->hash_tag) &&
          !memcmp(en->key, dom->hash_tag, en->key_len) && en->value_len) {
        *tag = en->value;
        *tag_len = en->value_len;
        break;
      }
    }
}

int request_valid(const gen *g, const eng_request *req, const cfg_domain **dom,
                  char *msg, size_t msg_len) {
  *dom = config_domain(g->cfg, req->domain, req->domain_len);
  if (!*dom) {
    snprintf(msg, msg_len, "unknown domain '%.*s'",
             (int)(req->domain_len < 200 ? req->domain_len : 200), req->domain);
    return ENG_EDOMAIN;
  }
  int bad = req->n == 0 || req->n > ENG_MAX_DESCRIPTORS;
  for (size_t i = 0; !bad && i < req->n; i++)
    bad = req->descriptors[i].n == 0 || req->descriptors[i].n > ENG_MAX_ENTRIES;
  if (bad) {
    snprintf(msg, msg_len,
             "descriptors: 1 to %d, each 1 to %d entries of at most %d "
             "bytes in all",
             ENG_MAX_DESCRIPTORS, ENG_MAX_ENTRIES, KEY_MAX);
    return ENG_EDESCRIPTOR;
  }
  return 0;
}

/* ---- the outcome ---- */

/* Whether status a is more restrictive than b. */
static int worse(const eng_status *a, const eng_status *b) {
  if (a->d.allowed != b->d.allowed) return !a->d.allowed;
  if (!a->d.allowed) {
    int64_t ra = a->d.retry_after_ns < 0 ? INT64_MAX : a->d.retry_after_ns;
    int64_t rb = b->d.retry_after_ns < 0 ? INT64_MAX : b->d.retry_after_ns;
    return ra > rb;
  }
  /* A limit not checked (its store failed open) says least. */
  if (a->unchecked != b->unchecked) return b->unchecked;
  if (a->d.remaining != b->d.remaining) return a->d.remaining < b->d.remaining;
  return a->d.reset_ns > b->d.reset_ns;
}

/* Fills worst and by_descriptor: enforced, limited statuses first. */
static void rank(eng_result *r, size_t ndesc) {
  r->worst = -1;
  for (size_t i = 0; i < ndesc && i < ENG_MAX_DESCRIPTORS; i++)
    r->by_descriptor[i] = -1;
  for (int pass = 0; pass < 2; pass++) /* pass 0: enforced; 1: shadow */
    for (size_t i = 0; i < r->n; i++) {
      eng_status *s = &r->st[i];
      if (s->unlimited || s->shadow != pass) continue;
      int *w = &r->by_descriptor[s->descriptor];
      if (*w < 0 || (r->st[*w].shadow == s->shadow && worse(s, &r->st[*w])))
        *w = (int)i;
      if (r->worst < 0 ||
          (r->st[r->worst].shadow == s->shadow && worse(s, &r->st[r->worst])))
        r->worst = (int)i;
    }
  for (size_t i = 0; i < ndesc && i < ENG_MAX_DESCRIPTORS; i++)
    if (r->by_descriptor[i] < 0) /* only unlimited ones: report one */
      for (size_t k = 0; k < r->n; k++)
        if (r->st[k].descriptor == (int)i) {
          r->by_descriptor[i] = (int)k;
          break;
        }
}

/* Counts each rule's outcome in its series. */
static void count_rules(engine_thread *t, eng_result *out,
                        const uint32_t *sid) {
  for (size_t i = 0; i < out->n; i++) {
    eng_status *s = &out->st[i];
    metric_counter *c = metric_series(&t->m, sid[i]);
    if (!c) continue;
    /* A rule is counted for what it said: over its limit (denied, or
       shadow_denied), or charged (allowed); a rule that had room in a
       request another rule denied was not charged and is not counted. */
    /* A candidate disagrees with the rule's own verdict (exactly: one
       count per decision where they differ). */
    if (s->candidate && s->candidate_denied == s->d.allowed)
      metric_bump(&c[s->d.allowed ? S_CAND_WOULD_DENY : S_CAND_WOULD_ALLOW],
                  1);
    if (!s->d.allowed) {
      metric_bump(&c[s->shadow ? S_SHADOW_DENIED : S_DENIED], 1);
    } else if (out->allowed) {
      metric_bump(&c[S_ALLOWED], 1);
      if (!s->unlimited && !s->unchecked && s->d.limit > 0 &&
          s->d.remaining * 5 < s->d.limit)
        metric_bump(&c[S_NEAR_LIMIT], 1);
    }
  }
}

/* The decision is complete: out gets the backend's answer (dec, all),
   the outcome is counted, and ranked. */
static void finish_decision(engine_thread *t, const finish_ctx *f,
                            eng_result *out, const sl_decision *dec, int all,
                            int64_t t0) {
  engine *e = t->e;
  metric_observe(&t->m, e->mid[M_LATENCY], clock_mono_ns() - t0);
  out->lease = 0;
  for (size_t c = 0; c < f->nc && !out->lease; c++) out->lease = dec[c].lease;
  if (f->lease_op) { /* figures, and whether the lease was live */
    for (size_t c = 0; c < f->nc; c++)
      out->st[f->adhoc ? 0 : f->check_of[c]].d = dec[c];
    out->allowed = all;
    rank(out, f->ndesc);
    return;
  }
  if (f->adhoc || f->cell) {
    out->st[0].d = dec[0];
    if (f->never) {
      out->st[0].d.allowed = 0;
      out->st[0].d.retry_after_ns = -1;
    }
    /* (an on_store_error allow: nothing checked, nothing to tell) */
    if (out->st[0].d.remaining < 0) out->st[0].d.remaining = 0;
    out->allowed = dec[0].allowed;
    out->worst = 0;
    out->by_descriptor[0] = 0;
    metric_add(&t->m, e->mid[out->allowed ? M_ADHOC_ALLOWED : M_ADHOC_DENIED],
               1);
    return;
  }
  for (size_t c = 0; c < f->nc; c++) {
    eng_status *s = &out->st[f->check_of[c]];
    if (f->cand_checks >> c & 1) { /* a candidate: reported, not ranked */
      s->cand_d = dec[c];
      s->candidate_denied = !dec[c].allowed;
      continue;
    }
    s->d = dec[c];
    /* A backend that could not check a limit and let it pass says so with
       a negative remaining (fleet mode's on_store_error: allow). */
    s->unchecked = s->d.allowed && s->d.remaining < 0;
    if (s->unchecked) s->d.remaining = 0;
  }
  out->allowed = all && !f->blocked;
  if (f->nquota) { /* denied when every quota limit is over its limit */
    int quota_ok = 0;
    for (size_t i = 0; i < out->n; i++)
      quota_ok |= out->st[i].quota && out->st[i].d.allowed;
    if (!quota_ok) out->allowed = 0;
  }
  count_rules(t, out, f->sid);
  metric_add(&t->m, e->mid[out->allowed ? M_CHECK_ALLOWED : M_CHECK_DENIED], 1);
  rank(out, f->ndesc);
}

/* finish_decision, then the decision is final: the observer sees it (q
   NULL: a waiting decision whose copy could not be made). */
static void finish(engine_thread *t, const finish_ctx *f, eng_result *out,
                   const sl_decision *dec, int all, int64_t t0,
                   const eng_query *q) {
  finish_decision(t, f, out, dec, all, t0);
  engine *e = t->e;
  if (e->o.observe && q) e->o.observe(e->o.observe_ud, t->slot, q, out);
}

/* Pins (delta 1) or unpins (-1) the ad-hoc policies a waiting decision
   uses: its own, and its descriptors' overrides. */
static void pin(const finish_ctx *f, int delta) {
  if (f->adhoc) atomic_fetch_add(&f->adhoc->pins, delta);
  for (size_t i = 0; i < f->npins; i++)
    atomic_fetch_add(&f->pins[i]->pins, delta);
}

/* The backend's answer to a pending decision. */
static void decided(void *ud, const sl_decision *dec, int all) {
  pending *p = ud;
  finish(p->t, &p->f, p->out, dec, all, p->t0, p->q);
  /* Before unpinning: the caller reads out's rules, which live in p->g. */
  p->done(p->ud, 0, p->out);
  atomic_fetch_sub(&p->g->pins, 1);
  pin(&p->f, -1);
  free(p->q);
  free(p);
}

/* The message of a failed decision (rc an SL_E* code). */
static void decision_msg(const eng_query *q, const eng_check *checks, size_t nc,
                         int rc, char *msg, size_t len) {
  if (rc != SL_ECOST) {
    snprintf(msg, len, "%s", eng_error_of(rc)->message);
    return;
  }
  /* The cost no request of that size can pass: the check's that is above
     its capacity (merged checks may be only together). */
  int64_t cost = q->kind == ENG_QUERY_RULES ? q->req->hits : q->cost;
  for (size_t c = 0; c < nc; c++) {
    const sl_policy *p = sl_limiter_policy(checks[c].c.limiter);
    int64_t cap = p->burst ? p->burst : p->limit;
    if (checks[c].c.cost > cap) {
      cost = checks[c].c.cost;
      break;
    }
  }
  if (q->kind == ENG_QUERY_RULES)
    snprintf(msg, len, "cost %lld can never be allowed by a matching rule",
             (long long)cost);
  else if (q->spec)
    snprintf(msg, len, "cost %lld can never be allowed by %.*s",
             (long long)cost, (int)(q->spec_len < 100 ? q->spec_len : 100),
             q->spec);
  else
    snprintf(msg, len, "cost %lld can never be allowed by this rate",
             (long long)cost);
}

/*
 * Has the backend decide checks[0..nc) and finishes the decision: at once
 * (0 or an SL_E* code with out->msg), or later (ENG_PENDING: done runs).
 */
static int run(engine_thread *t, const eng_query *q, const eng_check *checks,
               size_t nc, const char *tag, size_t tag_len, finish_ctx *f,
               eng_result *out, eng_done_fn done, void *ud) {
  engine *e = t->e;
  eng_backend *b = e->backend;
  eng_decision dq = {checks,
                     nc,
                     tag,
                     tag_len,
                     q->now,
                     q->kind == ENG_QUERY_RULES &&
                         e->o.charging == ENG_CHARGE_ALL,
                     q->lease_op,
                     q->lease};
  f->lease_op = q->lease_op;
  sl_decision dec[ENG_MAX_STATUSES];
  int all = 1, rc = 0;
  int64_t t0 = clock_mono_ns();
  f->nc = nc;
  if (nc && done && (b->ops->flags & ENG_BACKEND_ASYNC)) {
    pending *p = malloc(sizeof *p);
    if (!p) {
      snprintf(out->msg, sizeof out->msg, "%s",
               eng_error_of(SL_ENOMEM)->message);
      return SL_ENOMEM;
    }
    *p = (pending){t, t->g, out, done, ud, t0, NULL, *f};
    if (e->o.observe) p->q = query_copy(q);
    atomic_fetch_add(&p->g->pins, 1);
    pin(f, 1);
    rc = b->ops->decide(b, t->bt, &dq, dec, &all, decided, p);
    if (rc == ENG_PENDING) return rc;
    atomic_fetch_sub(&p->g->pins, 1);
    pin(f, -1);
    free(p->q);
    free(p);
  } else if (nc) {
    rc = b->ops->decide(b, t->bt, &dq, dec, &all, NULL, NULL);
  }
  if (rc) {
    metric_observe(&t->m, e->mid[M_LATENCY], clock_mono_ns() - t0);
    decision_msg(q, checks, nc, rc, out->msg, sizeof out->msg);
    return rc;
  }
  finish(t, f, out, dec, all, t0, q);
  return 0;
}

/* ---- the configured rules ---- */

/*
 * The series limit l counts in for a descriptor that matched it (m): its
 * rule's own (`base`), or, when its metric name depends on the request's
 * values (detailed_metric, value_to_metric), the series of that name, as
 * envoyproxy/ratelimit names it (rules/envoy.c), created on first use, at
 * most SERIES_PER_RULE per rule (later ones roll up into base). A
 * per-thread cache, by the name's hash, spares the registry's lock.
 */
static uint32_t metric_series_of(engine_thread *t, const cfg_limit *l,
                                 uint32_t base, const cfg_domain *dom,
                                 const cfg_match *m, const eng_descriptor *d) {
  char name[1200];
  size_t len = l->dynamic_metric
                   ? config_metric_name(dom, m, d->entries, d->n, l, name,
                                        sizeof name)
                   : 0;
  if (!len) return base;
  uint64_t h = fnv1a((uint64_t)(uintptr_t)l * 0x9e3779b97f4a7c15u, name, len);
  size_t slot = (size_t)(h >> 32) % DETAIL_CACHE;
  if (t->detail_cache[slot].limit == l && t->detail_cache[slot].hash == h &&
      t->detail_cache[slot].len == len)
    return t->detail_cache[slot].series;
  uint32_t s = base < MAX_SERIES
                   ? metrics_series(t->e->metrics, dom->name, name, base)
                   : base;
  if (s >= MAX_SERIES) s = base;
  /* Cached whatever it is (a roll-up too): the lock is not taken again. */
  t->detail_cache[slot].limit = l;
  t->detail_cache[slot].hash = h;
  t->detail_cache[slot].len = len;
  t->detail_cache[slot].series = s;
  return s;
}

/* Every limit the request's descriptors match (lims[], the descriptor
   of each in desc_of[], each descriptor's match in ms[]), less those
   another matched limit replaces; a descriptor with a limit override
   (ov[i].set) matches none. Their number, or -1 when there are more than
   ENG_MAX_STATUSES. */
static int matched_limits(const cfg_domain *dom, const eng_request *req,
                          const eng_override *ov, const cfg_limit **lims,
                          int *desc_of, cfg_match *ms) {
  const cfg_limit *all[ENG_MAX_STATUSES];
  int of[ENG_MAX_STATUSES];
  size_t nl = 0;
  for (size_t i = 0; i < req->n; i++) {
    const eng_descriptor *d = &req->descriptors[i];
    if (ov && ov[i].set) { /* its own limit: decide_overrides */
      memset(&ms[i], 0, sizeof ms[i]);
      continue;
    }
    if (!d->n) continue; /* only a priority class: no rule to match */
    const cfg_node *node = config_match_path(dom, d->entries, d->n, &ms[i]);
    for (size_t k = 0; node && k < node->nlimits; k++) {
      if (nl == ENG_MAX_STATUSES) return -1;
      all[nl] = node->limits[k];
      of[nl++] = (int)i;
    }
  }
  /* A matched limit named in another matched limit's `replaces` drops. */
  int dropped[ENG_MAX_STATUSES] = {0};
  for (size_t a = 0; a < nl; a++)
    for (size_t r = 0; r < all[a]->nreplaces; r++)
      for (size_t b = 0; b < nl; b++)
        if (b != a && all[b]->name &&
            !strcmp(all[b]->name, all[a]->replaces[r]))
          dropped[b] = 1;
  int n = 0;
  for (size_t i = 0; i < nl; i++)
    if (!dropped[i]) {
      lims[n] = all[i];
      desc_of[n++] = of[i];
    }
  return n;
}

/* The status of limit l for descriptor d (its figures when it decides
   nothing: unlimited, or blocked — requests_per_unit: 0, every request
   over the limit for good: no retry_after, reset at the end of the rule's
   window). */
static void status_of(eng_status *s, const cfg_limit *l, int desc, int64_t cost,
                      int64_t now) {
  memset(s, 0, sizeof *s);
  s->limit = l;
  s->policy_str = l->policy_str;
  s->policy = &l->policy;
  s->descriptor = desc;
  s->shadow = l->shadow;
  s->quota = l->quota_mode;
  if (l->unlimited) {
    s->unlimited = 1;
    s->d.allowed = 1;
    s->d.remaining = UINT32_MAX;
  } else if (l->blocked) {
    int64_t W = l->policy.period_ns > 0 ? l->policy.period_ns : 1000000000;
    s->d.allowed = cost == 0;
    s->d.retry_after_ns = cost == 0 ? 0 : -1;
    s->d.reset_ns = W - now % W;
  }
}

/*
 * The descriptors with a limit override of their own (envoy's
 * RateLimitDescriptor.limit): each gets one status and, unless its limit
 * is 0 (blocked: denied, nothing counted), one check under the ad-hoc
 * limiter of its policy, keyed by the domain and the descriptor (a 0
 * byte first, so no SL.THROTTLE key a client types by hand is likely to
 * meet it). Appends to out->st and checks[*nc]; 0, or a failure with
 * out->msg.
 */
static int decide_overrides(engine_thread *t, const eng_query *q,
                            eng_result *out, eng_check *checks, size_t *nc,
                            finish_ctx *f, uint8_t (*keys)[KEY_MAX]) {
  const eng_request *req = q->req;
  for (size_t k = 0; q->overrides && k < req->n; k++) {
    const eng_descriptor *d = &req->descriptors[k];
    const sl_policy *ov = &q->overrides[k].policy;
    if (!q->overrides[k].set) continue;
    if (out->n == ENG_MAX_STATUSES) {
      snprintf(out->msg, sizeof out->msg,
               "the descriptors match more than %d limits", ENG_MAX_STATUSES);
      return ENG_EDESCRIPTOR;
    }
    int64_t cost = d->hits >= 0 ? d->hits : req->hits;
    eng_status *s = &out->st[out->n];
    memset(s, 0, sizeof *s);
    s->descriptor = (int)k;
    f->sid[out->n] = MAX_SERIES; /* no per-rule series */
    if (ov->limit == 0) {
      int64_t W = ov->period_ns;
      s->policy_str = "blocked";
      s->d.allowed = cost == 0;
      s->d.retry_after_ns = cost == 0 ? 0 : -1;
      s->d.reset_ns = W - q->now % W;
      if (cost > 0) f->blocked = 1;
      out->n++;
      continue;
    }
    eng_query pq = {.kind = ENG_QUERY_POLICY, .policy = ov};
    int rc;
    adhoc_entry *a = adhoc_of(t, &pq, &rc, out);
    if (!a) return rc;
    s->policy_str = a->canon;
    s->policy = &a->policy;
    size_t len = 1;
    keys[k][0] = 0;
    const char *dom = req->domain;
    uint8_t lenbuf[KEY_MAX];
    size_t dl = 0;
    if (key_put(keys[k], &len, dom, req->domain_len) ||
        descriptor_key(d, NULL, lenbuf, &dl) || len + dl > KEY_MAX) {
      snprintf(out->msg, sizeof out->msg,
               "descriptor too long (at most %d bytes in all)", KEY_MAX);
      return ENG_EDESCRIPTOR;
    }
    memcpy(keys[k] + len, lenbuf, dl);
    f->pins[f->npins++] = a;
    checks[*nc] = (eng_check){
        .c = {.limiter = a->lim, .key = keys[k], .key_len = len + dl,
              .cost = cost},
        .name = {.kind = 'a', .id_a = a->canon},
        .local = a->local,
        .on_error = limit_mode(t->e, NULL),
        .max_delay_ns = q->max_delay_ns};
    f->check_of[(*nc)++] = out->n++;
  }
  return 0;
}

/* A calendar limit's check counts in the window that holds now (its
   status reports that window's length): 0, or -1 with out->msg. */
static int calendar_window(eng_check *c, eng_status *s, const cfg_limit *l,
                           int64_t now, eng_result *out) {
  if (cal_window(&l->cal, now, &c->win_start, &c->win_end)) {
    snprintf(out->msg, sizeof out->msg,
             "%s: no calendar window holds this time", l->rule);
    return -1;
  }
  s->window_ns = c->win_end - c->win_start;
  return 0;
}
static int decide_matched(engine_thread *t, const eng_query *q,
                          const eng_request *req, const cfg_domain *dom,
                          eng_result *out, eng_done_fn done, void *ud);

/* A check's max_delay_ns in wait mode: the request's bound, lowered by
   the rule's max_wait; 0 (no bound) when the request does not wait. */
static int64_t wait_bound(const eng_query *q, const cfg_limit *l) {
  if (q->max_delay_ns <= 0) return 0;
  return l->max_wait_ns > 0 && l->max_wait_ns < q->max_delay_ns
             ? l->max_wait_ns
             : q->max_delay_ns;
}

static int decide_rules(engine_thread *t, const eng_query *q, eng_result *out,
                        eng_done_fn done, void *ud) {
  const eng_request *req = q->req;
  const cfg_domain *dom;
  int rc = request_valid(t->g, req, &dom, out->msg, sizeof out->msg);
  if (rc) return rc;
  if (dom->shedding) { /* the shedder first; the rules see no class entry */
    eng_request stripped;
    eng_descriptor sds[ENG_MAX_DESCRIPTORS];
    rc = shed_request(t, dom, q, req, out, &req, &stripped, sds);
    if (rc || out->shed.state == ENG_SHED_YES) {
      for (size_t i = 0; i < req->n && i < ENG_MAX_DESCRIPTORS; i++)
        out->by_descriptor[i] = -1;
      return rc;
    }
    return decide_matched(t, q, req, dom, out, done, ud);
  }
  return decide_matched(t, q, req, dom, out, done, ud);
}

/* decide_rules' part once the shedder let req through (q->req itself,
   or a copy without its class entries): its limits. */
static int decide_matched(engine_thread *t, const eng_query *q,
                          const eng_request *req, const cfg_domain *dom,
                          eng_result *out, eng_done_fn done, void *ud) {
  engine *e = t->e;
  gen *g = t->g;
  int rc;
  const cfg_limit *lims[ENG_MAX_STATUSES];
  int desc_of[ENG_MAX_STATUSES];
  cfg_match ms[ENG_MAX_DESCRIPTORS];
  int nl = matched_limits(dom, req, q->overrides, lims, desc_of, ms);
  if (nl < 0) {
    snprintf(out->msg, sizeof out->msg,
             "the descriptors match more than %d limits", ENG_MAX_STATUSES);
    return ENG_EDESCRIPTOR;
  }
  uint8_t keys[ENG_MAX_DESCRIPTORS][KEY_MAX];
  size_t key_len[ENG_MAX_DESCRIPTORS];
  int have_key[ENG_MAX_DESCRIPTORS] = {0};
  eng_check checks[ENG_MAX_STATUSES];
  finish_ctx f; /* (filled as far as it is read: no 800-byte memset) */
  f.adhoc = NULL;
  f.blocked = 0;
  f.lease_op = 0;
  f.never = 0;
  f.cell = 0;
  f.nquota = 0;
  f.npins = 0;
  f.cand_checks = 0;
  f.ndesc = req->n;
  size_t nc = 0;
  for (int i = 0; i < nl; i++) {
    const cfg_limit *l = lims[i];
    int k = desc_of[i];
    /* A lease names concurrency limits only: the rest are not its. */
    if (q->lease_op && (l->unlimited || l->blocked ||
                        l->policy.algo != SL_CONCURRENCY))
      continue;
    const eng_descriptor *d = &req->descriptors[k];
    int64_t cost = d->hits >= 0 ? d->hits : req->hits;
    status_of(&out->st[out->n], l, k, cost, q->now);
    f.sid[out->n] = metric_series_of(t, l, g->series[l->index], dom, &ms[k], d);
    f.nquota += l->quota_mode;
    if (l->blocked && !l->shadow && !l->quota_mode && cost > 0) f.blocked = 1;
    if (!l->unlimited && !l->blocked) {
      if (!have_key[k]) {
        if (descriptor_key(d, &ms[k], keys[k], &key_len[k])) {
          snprintf(out->msg, sizeof out->msg,
                   "descriptor too long (at most %d bytes in all)", KEY_MAX);
          return ENG_EDESCRIPTOR;
        }
        have_key[k] = 1;
      }
      if (l->split)
        checks[nc] = split_check(t, l, req, d, keys[k], key_len[k], cost);
      else
        checks[nc] = (eng_check){
            .c = {.limiter = g->lims[l->index], .key = keys[k],
                  .key_len = key_len[k], .cost = cost, .shadow = l->shadow},
            .name = {.kind = 'r', .id_a = l->rule, .id_b = l->policy_str},
            .local = g->local[l->index],
            .on_error = limit_mode(e, l)};
      checks[nc].max_delay_ns = wait_bound(q, l);
      /* A quota limit never denies alone: finish() judges them all. */
      if (l->quota_mode) checks[nc].c.shadow = 1;
      if (l->cal.unit && calendar_window(&checks[nc], &out->st[out->n], l,
                                         q->now, out))
        return ENG_EDESCRIPTOR;
      f.check_of[nc++] = out->n;
    }
    if (l->candidate_str) { /* beside it, the same key, never enforced */
      if (!have_key[k] && descriptor_key(d, &ms[k], keys[k], &key_len[k])) {
        snprintf(out->msg, sizeof out->msg,
                 "descriptor too long (at most %d bytes in all)", KEY_MAX);
        return ENG_EDESCRIPTOR;
      }
      have_key[k] = 1;
      if (nc == ENG_MAX_STATUSES) {
        snprintf(out->msg, sizeof out->msg,
                 "the descriptors match more than %d limits", ENG_MAX_STATUSES);
        return ENG_EDESCRIPTOR;
      }
      out->st[out->n].candidate = 1;
      checks[nc] = (eng_check){
          .c = {.limiter = g->cand[l->index], .key = keys[k],
                .key_len = key_len[k], .cost = cost, .shadow = 1},
          .name = {.kind = 'r', .id_a = l->candidate_rule,
                   .id_b = l->candidate_str},
          .on_error = CFG_STORE_ERROR_ALLOW};
      f.cand_checks |= (uint64_t)1 << nc;
      f.check_of[nc++] = out->n;
    }
    out->n++;
  }
  rc = decide_overrides(t, q, out, checks, &nc, &f, keys);
  if (rc) return rc;
  if (q->lease_op && nc == 0) {
    snprintf(out->msg, sizeof out->msg,
             "no concurrency limit matches the descriptors: no lease here");
    return ENG_EDESCRIPTOR;
  }
  /* A blocked rule charges nothing: the others only report figures. */
  if (f.blocked)
    for (size_t c = 0; c < nc; c++) checks[c].c.cost = 0;
  const char *tag;
  size_t tag_len;
  request_tag(dom, req, &tag, &tag_len);
  return run(t, q, checks, nc, tag, tag_len, &f, out, done, ud);
}

/* ---- an ad-hoc policy ---- */

static int decide_policy(engine_thread *t, const eng_query *q, int never,
                         eng_result *out, eng_done_fn done, void *ud) {
  int rc;
  adhoc_entry *a = adhoc_of(t, q, &rc, out);
  if (!a) return rc;
  out->n = 1;
  eng_status *s = &out->st[0];
  memset(s, 0, sizeof *s);
  s->policy_str = a->canon;
  s->policy = &a->policy;
  if (q->key_len > SL_KEY_MAX || q->cost < 0) {
    rc = q->cost < 0 ? SL_EINVAL : SL_EKEY;
    snprintf(out->msg, sizeof out->msg, "%s", eng_error_of(rc)->message);
    return rc;
  }
  if (q->lease_op && a->policy.algo != SL_CONCURRENCY) {
    snprintf(out->err, sizeof out->err,
             "%s is not a concurrency policy: it holds no leases", a->canon);
    snprintf(out->msg, sizeof out->msg, "%s", out->err);
    return SL_EPOLICY;
  }
  eng_check check = {
      .c = {.limiter = a->lim, .key = q->key, .key_len = q->key_len,
            .cost = q->cost},
      .name = {.kind = 'a', .id_a = a->canon},
      .local = a->local,
      .on_error = limit_mode(t->e, NULL),
      .max_delay_ns = q->max_delay_ns};
  finish_ctx f; /* (an ad-hoc policy reads no check_of or sid) */
  f.adhoc = a;
  f.blocked = 0;
  f.npins = 0;
  f.lease_op = 0;
  f.never = never;
  f.cell = 0;
  f.ndesc = 1;
  return run(t, q, &check, 1, "", 0, &f, out, done, ud);
}

/* ---- CL.THROTTLE ---- */

/*
 * redis-cell's decision on a backend that keeps one state per key for it
 * (ENG_BACKEND_CELL: exact fleet mode): one check named {'c', "cell"},
 * the call's rate beside it. The engine's cell limiter goes with it for
 * the backend's fallbacks (on_store_error: local decides on it).
 */
static int decide_cell_backend(engine_thread *t, const eng_query *q,
                               eng_result *out, eng_done_fn done, void *ud) {
  sl_limiter *cell = engine_cell(t->e);
  if (!cell) {
    snprintf(out->msg, sizeof out->msg, "%s", eng_error_of(SL_ENOMEM)->message);
    return SL_ENOMEM;
  }
  out->n = 1;
  eng_status *s = &out->st[0];
  memset(s, 0, sizeof *s);
  s->policy_str = "cell";
  s->policy = q->policy;
  eng_check check = {
      .c = {.limiter = cell, .key = q->key, .key_len = q->key_len,
            .cost = q->cost},
      .name = {.kind = 'c', .id_a = "cell"},
      .local = cell,
      .on_error = limit_mode(t->e, NULL),
      .cell = q->cell};
  finish_ctx f;
  f.adhoc = NULL;
  f.blocked = 0;
  f.npins = 0;
  f.lease_op = 0;
  f.never = 0;
  f.cell = 1;
  f.ndesc = 1;
  int rc = run(t, q, &check, 1, "", 0, &f, out, done, ud);
  if (rc == SL_EPOLICY) /* the backend cannot compute this rate exactly */
    snprintf(out->msg, sizeof out->msg,
             "this rate's full burst (%lld ns) is beyond what fleet mode "
             "decides exactly (2^52 ns, about 52 days): use --store memory, "
             "a shorter period or a smaller max_burst",
             (long long)q->cell->dvt);
  return rc;
}

/*
 * redis-cell's decision on the memory backend: one state per key under
 * the engine's cell limiter, the call's rate applied to it; on a backend
 * that keeps such states, by it (decide_cell_backend). Other backends
 * decide the GCRA policy q->policy as an ad-hoc one (a state per key and
 * rate), a quantity above its burst as a peek that is limited.
 */
static int decide_cell(engine_thread *t, const eng_query *q, eng_result *out,
                       eng_done_fn done, void *ud) {
  engine *e = t->e;
  if (e->backend->ops->flags & ENG_BACKEND_CELL)
    return decide_cell_backend(t, q, out, done, ud);
  if (e->backend != memory_backend()) {
    eng_query pq = *q;
    int never = q->cost > (int64_t)q->policy->burst;
    pq.kind = ENG_QUERY_POLICY;
    pq.cost = never ? 0 : q->cost;
    return decide_policy(t, &pq, never, out, done, ud);
  }
  int64_t t0 = clock_mono_ns();
  out->n = 1;
  eng_status *s = &out->st[0];
  memset(s, 0, sizeof *s);
  s->policy_str = "cell";
  s->policy = q->policy;
  sl_limiter *cell = engine_cell(e);
  int rc = cell ? limiter_cell_take(cell, q->cell, q->key, q->key_len,
                                    q->cost, q->now, &s->d)
                : SL_ENOMEM;
  metric_observe(&t->m, e->mid[M_LATENCY], clock_mono_ns() - t0);
  if (rc) {
    snprintf(out->msg, sizeof out->msg, "%s", eng_error_of(rc)->message);
    return rc;
  }
  out->allowed = s->d.allowed;
  out->worst = 0;
  out->by_descriptor[0] = 0;
  metric_add(&t->m, e->mid[out->allowed ? M_ADHOC_ALLOWED : M_ADHOC_DENIED], 1);
  if (e->o.observe) e->o.observe(e->o.observe_ud, t->slot, q, out);
  return 0;
}

/* What the observer sees of a batched decision: the eng_result that
   engine_decide would have made of it (one status, as decide_policy and
   decide_cell fill it), in r, whose other fields observe_batch_init set
   once for the batch. */
static void observe_batched(engine_thread *t, eng_result *r,
                            const eng_query *q, const adhoc_entry *a,
                            const sl_decision *d) {
  engine *e = t->e;
  eng_status *s = &r->st[0];
  r->allowed = d->allowed;
  s->policy_str = a ? a->canon : "cell";
  s->policy = a ? &a->policy : q->policy;
  s->d = *d;
  e->o.observe(e->o.observe_ud, t->slot, q, r);
}

/* The fields of observe_batched's result that every decision of a batch
   shares (one status, zeroed but for what observe_batched sets). */
static void observe_batch_init(eng_result *r) {
  engine_result_init(r, 0);
  r->n = 1;
  memset(&r->st[0], 0, sizeof r->st[0]);
  r->worst = 0;
  r->by_descriptor[0] = 0;
}

int engine_decide_batch(engine_thread *t, eng_batch_item *it, size_t n) {
  engine *e = t->e;
  if (e->backend != memory_backend() || n > ENG_BATCH_MAX) return -1;
  limiter_req rq[ENG_BATCH_MAX];
  sl_decision dec[ENG_BATCH_MAX];
  int rcs[ENG_BATCH_MAX];
  adhoc_entry *ad[ENG_BATCH_MAX];
  eng_result scratch; /* a refused policy's message: unread (rc says) */
  const eng_query *prev = NULL; /* the last one spelled, and its entry */
  adhoc_entry *prev_a = NULL;
  for (size_t i = 0; i < n; i++) {
    const eng_query *q = it[i].q;
    rq[i] = (limiter_req){NULL, NULL, q->key, q->key_len, q->cost, q->now};
    it[i].rc = 0;
    ad[i] = NULL;
    if (q->kind == ENG_QUERY_CELL) {
      rq[i].lim = engine_cell(e);
      rq[i].cell = q->cell;
      if (!rq[i].lim) it[i].rc = SL_ENOMEM;
    } else {
      /* A pipeline repeats its policy: the previous spelling's entry
         spares the cache's hash (adhoc_of's answer for the same text). */
      adhoc_entry *a =
          prev_a && q->spec && q->spec_len == prev->spec_len &&
                  !memcmp(q->spec, prev->spec, q->spec_len)
              ? prev_a
              : adhoc_of(t, q, &it[i].rc, &scratch);
      if (a && q->spec) {
        prev = q;
        prev_a = a;
      }
      if (a && a->policy.algo == SL_CONCURRENCY)
        it[i].rc = ENG_PENDING; /* its lease: decided alone */
      else if (a)
        rq[i].lim = a->lim; /* (NULL: refused, rc set) */
      ad[i] = a;
    }
  }
  int64_t t0 = clock_mono_ns();
  limiter_take_many(rq, n, dec, rcs);
  int64_t each = (clock_mono_ns() - t0) / (int64_t)(n ? n : 1);
  eng_result seen; /* (what the observer sees, observe_batched) */
  if (e->o.observe) observe_batch_init(&seen);
  for (size_t i = 0; i < n; i++) {
    if (!it[i].rc) it[i].rc = rcs[i];
    if (it[i].rc) continue;
    it[i].d = dec[i];
    metric_observe(&t->m, e->mid[M_LATENCY], each);
    metric_add(&t->m, e->mid[dec[i].allowed ? M_ADHOC_ALLOWED : M_ADHOC_DENIED],
               1);
    /* (the observer sees each decision whole, in order, as engine_decide
       shows it) */
    if (e->o.observe) observe_batched(t, &seen, it[i].q, ad[i], &dec[i]);
  }
  return 0;
}

void engine_result_init(eng_result *out, int allowed) {
  out->allowed = allowed;
  out->n = 0;
  out->worst = -1;
  out->shed.state = ENG_SHED_NO;
  out->lease = 0;
  out->err[0] = out->msg[0] = '\0';
}

int engine_decide(engine_thread *t, const eng_query *q, eng_result *out,
                  eng_done_fn done, void *ud) {
  engine_result_init(out, 0);
  if (q->kind == ENG_QUERY_CELL) return decide_cell(t, q, out, done, ud);
  return q->kind == ENG_QUERY_RULES ? decide_rules(t, q, out, done, ud)
                                    : decide_policy(t, q, 0, out, done, ud);
}
