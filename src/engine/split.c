/*
 * split.c — the engine's side of a limit split into sub-counters (the
 * config's `split`, rules/split.c): each sub-counter's limiter, at its
 * share of the policy, made with the gen; which sub-counter decides a
 * request; and the checks and resets that name it.
 *
 * A sub-counter is a limiter of its own (the limiter map's id: the rule,
 * then its share's policy and "#SUB/NSUB"), so in memory mode its states
 * are keys of their own, as in Redis, where fleet/keys.c places each on a
 * slot of its own. The request's descriptor is the key under each.
 *
 * The choice. `by: KEY`: a hash (FNV-1a, the same on every daemon) of the
 * value of the request's KEY entry: the matched descriptor's own first,
 * else the first descriptor that has one, as a hash_tag is found; a
 * request without it rotates. `rotate: true`: each worker thread takes
 * the sub-counters in turn, per limit (a counter of its own, so nothing
 * shared is written on the request path), starting at its own place.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../base/hash.h"
#include "internal.h"

/* A thread's rotors are a multiple of 16 (a 64-byte line), so that two
   threads never write one line. */
#define ROTOR_ALIGN 16

void split_free(gen *g) {
  for (size_t i = 0; g->split && g->cfg && i < g->cfg->nlimits; i++) {
    gen_split *s = g->split[i];
    if (!s) continue;
    for (uint32_t k = 0; k < CFG_SPLIT_MAX; k++) free(s->names[k]);
    free(s);
  }
  free(g->split);
  free(g->rotor);
  g->split = NULL;
  g->rotor = NULL;
}

/* Limit l's sub-counters into a new gen_split (index its rotor): NULL out
   of memory. */
static gen_split *build_one(engine *e, const cfg_limit *l, uint32_t index) {
  gen_split *s = calloc(1, sizeof *s);
  if (!s) return NULL;
  s->rotor = index;
  for (uint32_t k = 0; k < l->split; k++) {
    sl_policy share;
    cfg_split_share(&l->policy, l->split, k, &share);
    char canon[64], name[96];
    sl_policy_format(&share, canon, sizeof canon);
    snprintf(name, sizeof name, "%s#%u/%u", canon, k, l->split);
    if (!(s->names[k] = strdup(name)) ||
        !(s->lims[k] = map_limiter(e, l->rule, name, &share, l->evict_below))) {
      for (uint32_t j = 0; j <= k; j++) free(s->names[j]);
      free(s);
      return NULL;
    }
  }
  return s;
}

int split_build(engine *e, gen *g, const sl_config *cfg) {
  size_t nsplit = 0;
  for (size_t i = 0; i < cfg->nlimits; i++)
    nsplit += cfg->limits[i]->split && !cfg->limits[i]->unlimited &&
              !cfg->limits[i]->blocked;
  if (!nsplit) return 0;
  g->rotor_stride = (nsplit + ROTOR_ALIGN - 1) / ROTOR_ALIGN * ROTOR_ALIGN;
  g->rotor = calloc(ENG_MAX_THREADS * g->rotor_stride, sizeof *g->rotor);
  g->split = calloc(cfg->nlimits, sizeof *g->split);
  if (!g->rotor || !g->split) return -1;
  uint32_t next = 0;
  for (size_t i = 0; i < cfg->nlimits; i++) {
    const cfg_limit *l = cfg->limits[i];
    if (!l->split || l->unlimited || l->blocked) continue;
    if (!(g->split[i] = build_one(e, l, next++))) return -1;
  }
  return 0;
}

/* The value of the request's `key` entry: descriptor d's own first, then
   the first descriptor's that has one with a value. NULL: none. */
static const cfg_entry *find_entry(const eng_request *req,
                                   const eng_descriptor *d, const char *key) {
  size_t kl = strlen(key);
  for (size_t pass = 0; pass < 2; pass++)
    for (size_t i = 0; i < (pass ? req->n : 1); i++) {
      const eng_descriptor *x = pass ? &req->descriptors[i] : d;
      for (size_t k = 0; k < x->n; k++) {
        const cfg_entry *en = &x->entries[k];
        if (en->key_len == kl && !memcmp(en->key, key, kl) && en->value_len)
          return en;
      }
    }
  return NULL;
}

uint32_t split_index(uint64_t hash, uint32_t n) {
  /* The mixed hash's high half times n: no modulo bias worth the name. */
  return (uint32_t)(((hash_mix(hash) >> 32) * n) >> 32);
}

uint32_t split_pick(engine_thread *t, const cfg_limit *l,
                    const eng_request *req, const eng_descriptor *d) {
  const cfg_entry *en = l->split_by ? find_entry(req, d, l->split_by) : NULL;
  if (en) return split_index(fnv1a(FNV1A_INIT, en->value, en->value_len),
                             l->split);
  gen *g = t->g;
  uint32_t *r = &g->rotor[t->slot * g->rotor_stride +
                          g->split[l->index]->rotor];
  return (uint32_t)((*r)++ + t->slot) % l->split;
}

eng_check split_check(engine_thread *t, const cfg_limit *l,
                      const eng_request *req, const eng_descriptor *d,
                      const void *key, size_t key_len, int64_t cost) {
  gen *g = t->g;
  const gen_split *s = g->split[l->index];
  uint32_t k = split_pick(t, l, req, d);
  return (eng_check){
      .c = {.limiter = s->lims[k], .key = key, .key_len = key_len,
            .cost = cost, .shadow = l->shadow},
      .name = {.kind = 'r', .id_a = l->rule, .id_b = s->names[k],
               .sub = (uint16_t)k, .nsub = (uint16_t)l->split},
      .local = g->local[l->index],
      .on_error = limit_mode(t->e, l)};
}

void split_forgets(const gen *g, const cfg_limit *l, eng_forget *out,
                   const void *key, size_t key_len) {
  const gen_split *s = g->split[l->index];
  for (uint32_t k = 0; k < l->split; k++)
    /* The local limiter's key is the logical one: dropped once. */
    out[k] = (eng_forget){s->lims[k], k ? NULL : g->local[l->index],
                          {'r', l->rule, s->names[k], (uint16_t)k,
                           (uint16_t)l->split},
                          key, key_len};
}
