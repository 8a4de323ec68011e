/*
 * reset.c — engine_reset: a query becomes the (limiter, key) states it
 * names, and the backend forgets them (this daemon's, and in fleet mode
 * the store's and the other daemons').
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "memory.h"

/* The states a reset names, growing. */
typedef struct forget_list {
  eng_forget *it;
  size_t n, cap;
  int oom;
} forget_list;

static void add(forget_list *l, sl_limiter *lim, sl_limiter *local,
                eng_name name, const void *key, size_t key_len) {
  if (l->n == l->cap) {
    size_t cap = l->cap ? 2 * l->cap : 16;
    eng_forget *grown = realloc(l->it, cap * sizeof *grown);
    if (!grown) {
      l->oom = 1;
      return;
    }
    l->it = grown;
    l->cap = cap;
  }
  l->it[l->n++] = (eng_forget){lim, local, name, key, key_len};
}

/* A reset waiting for the backend: the caller's callback, and the message
   its failure needs. */
typedef struct reset_wait {
  eng_reset_fn done;
  void *ud;
} reset_wait;

/* Fills out->msg for a failed reset (the backend may have written it:
   a store's failure is the backend's to tell). */
static void reset_msg(int rc, eng_reset *out) {
  if (!rc || out->msg[0]) return;
  if (rc == SL_EPOLICY)
    snprintf(out->msg, sizeof out->msg, "invalid policy: %s", out->err);
  else
    snprintf(out->msg, sizeof out->msg, "%s", eng_error_of(rc)->message);
}

static void reset_done(void *ud, int rc, eng_reset *out) {
  reset_wait *w = ud;
  reset_msg(rc, out);
  w->done(w->ud, rc, out);
  free(w);
}

/* Has the backend forget l's states: engine_reset's returns. */
static int run(engine_thread *t, forget_list *l, const char *tag,
               size_t tag_len, eng_reset *out, eng_reset_fn done, void *ud) {
  eng_backend *b = t->e->backend;
  eng_forgets f = {l->it, l->n, tag, tag_len};
  reset_wait *w = done ? malloc(sizeof *w) : NULL;
  int rc = l->oom || (done && !w) ? SL_ENOMEM : 0;
  if (!rc) {
    if (w) *w = (reset_wait){done, ud};
    rc = b->ops->reset(b, t->bt, &f, out, w ? reset_done : NULL, w);
  }
  if (rc != ENG_PENDING) free(w);
  free(l->it);
  return rc;
}

/* POLICY: key under the policy q names, or under every ad-hoc policy this
   daemon has used. */
static int reset_policy(engine_thread *t, const eng_query *q, eng_reset *out,
                        eng_reset_fn done, void *ud) {
  engine *e = t->e;
  forget_list l = {0};
  if (q->key_len > SL_KEY_MAX) return SL_EKEY;
  if (q->spec && !q->spec_len) { /* named, but empty: not "every policy" */
    snprintf(out->err, sizeof out->err, "policy is empty");
    return SL_EPOLICY;
  }
  char canon[64];
  if (q->spec) {
    char buf[256];
    sl_policy p;
    if (q->spec_len >= sizeof buf) {
      snprintf(out->err, sizeof out->err, "policy is too long");
      return SL_EPOLICY;
    }
    memcpy(buf, q->spec, q->spec_len);
    buf[q->spec_len] = '\0';
    if (sl_policy_parse(buf, &p, out->err, sizeof out->err) ||
        sl_policy_format(&p, canon, sizeof canon) < 0)
      return SL_EPOLICY;
    /* Named: its store key goes whether or not this daemon has used it. */
    const adhoc_entry *a = adhoc_find(e, canon, strlen(canon));
    add(&l, a ? a->lim : NULL, a ? a->local : NULL,
        (eng_name){'a', canon, NULL, 0, 0}, q->key, q->key_len);
  } else {
    size_t n = adhoc_count(e);
    for (size_t i = 0; i < n; i++)
      if (adhoc_live(&e->adhoc[i]))
        add(&l, e->adhoc[i].lim, e->adhoc[i].local,
            (eng_name){'a', e->adhoc[i].canon, NULL, 0, 0}, q->key, q->key_len);
    /* And CL.THROTTLE's state of the key (memory backend, and exact
       fleet mode's one Redis key per cell key, whether or not this daemon
       has used it; elsewhere it is under the GCRA ad-hoc policy of each
       rate, above). */
    sl_limiter *cell = atomic_load(&e->cell);
    int cells = (e->backend->ops->flags & ENG_BACKEND_CELL) != 0;
    if ((cell && e->backend == memory_backend()) || cells)
      add(&l, cell, NULL, (eng_name){'c', "cell", NULL, 0, 0}, q->key,
          q->key_len);
  }
  return run(t, &l, "", 0, out, done, ud);
}

/* RULES: each of req's descriptors under every limit it matches. */
static int reset_rules(engine_thread *t, const eng_query *q, eng_reset *out,
                       eng_reset_fn done, void *ud) {
  gen *g = t->g;
  const eng_request *req = q->req;
  const cfg_domain *dom;
  int rc = request_valid(g, req, &dom, out->msg, sizeof out->msg);
  if (rc) return rc;
  uint8_t keys[ENG_MAX_DESCRIPTORS][KEY_MAX];
  size_t len[ENG_MAX_DESCRIPTORS];
  cfg_match ms[ENG_MAX_DESCRIPTORS];
  for (size_t i = 0; i < req->n; i++) {
    const eng_descriptor *d = &req->descriptors[i];
    /* The key a decision of this descriptor counts under (a share_threshold
       wildcard's pattern): the state to forget. */
    config_match_path(dom, d->entries, d->n, &ms[i]);
    if (descriptor_key(d, &ms[i], keys[i], &len[i])) {
      snprintf(out->msg, sizeof out->msg,
               "descriptor too long (at most %d bytes in all)", KEY_MAX);
      return ENG_EDESCRIPTOR;
    }
  }
  forget_list l = {0};
  for (size_t i = 0; i < req->n; i++) {
    const cfg_node *node = ms[i].node;
    for (size_t k = 0; node && k < node->nlimits; k++) {
      const cfg_limit *lim = node->limits[k];
      if (lim->candidate_str) /* its candidate's state too */
        add(&l, g->cand[lim->index], NULL,
            (eng_name){'r', lim->candidate_rule, lim->candidate_str, 0, 0},
            keys[i], len[i]);
      if (lim->unlimited || lim->blocked) continue; /* no state anywhere */
      if (lim->split) { /* every sub-counter of the key */
        eng_forget subs[CFG_SPLIT_MAX];
        split_forgets(g, lim, subs, keys[i], len[i]);
        for (uint32_t s = 0; s < lim->split; s++)
          add(&l, subs[s].lim, subs[s].local, subs[s].name, keys[i], len[i]);
        continue;
      }
      add(&l, g->lims[lim->index], g->local[lim->index],
          (eng_name){'r', lim->rule, lim->policy_str, 0, 0}, keys[i], len[i]);
    }
  }
  /* The keys of exact mode's decisions carry the request's hash tag: so
     must its reset's. */
  const char *tag;
  size_t tag_len;
  request_tag(dom, req, &tag, &tag_len);
  return run(t, &l, tag, tag_len, out, done, ud);
}

int engine_reset(engine_thread *t, const eng_query *q, eng_reset *out,
                 eng_reset_fn done, void *ud) {
  memset(out, 0, sizeof *out);
  int rc = q->kind == ENG_QUERY_RULES ? reset_rules(t, q, out, done, ud)
                                      : reset_policy(t, q, out, done, ud);
  if (rc != ENG_PENDING) reset_msg(rc, out);
  return rc;
}
