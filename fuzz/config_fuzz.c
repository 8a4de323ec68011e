/*
 * config_fuzz.c — libFuzzer harness for the daemon's YAML rules
 * (src/rules/) and the engine that runs them
 * (src/engine/). Config files are trusted more than requests, but
 * a reload must never bring the daemon down, and request descriptors are
 * untrusted bytes.
 *
 * Properties beyond "no crash, no leak, no sanitizer report":
 *   - a config either loads with no errors or fails with at least one,
 *     each "fuzz.yaml:LINE:COL: message" or "fuzz.yaml: message";
 *   - every domain is found by its name; walking the tree along the exact
 *     (key, value) of each plain node finds that node when it has limits
 *     (nothing otherwise): the descriptor's depth decides, as in envoy;
 *   - descriptors made of raw input bytes match without reading out of
 *     bounds, and the engine decides them (rc 0, ENG_EDESCRIPTOR, or
 *     SL_ECOST) with figures that make sense.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rules/config.h"
#include "engine/engine.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define NOW (INT64_C(1767225600) * 1000000000) /* 2026-01-01T00:00:00Z */
#define MAX_WALK 64

static void check_errors(const cfg_errors *e) {
  for (size_t i = 0; i < e->n; i++) {
    const char *m = e->msgs[i];
    if (strncmp(m, "fuzz.yaml", 9) || (m[9] != ':')) abort();
    if (strlen(m) < 12) abort();
  }
}

/* Decides d (one descriptor) in domain `dom` and checks the answer. */
static void decide(engine_thread *t, const char *dom, const eng_descriptor *d,
                   int64_t hits) {
  eng_descriptor copy = *d;
  eng_request r = {dom, strlen(dom), &copy, 1, hits};
  eng_result out;
  eng_query q = {.kind = ENG_QUERY_RULES, .req = &r, .now = NOW};
  int rc = engine_decide(t, &q, &out, NULL, NULL);
  if (rc == ENG_EDESCRIPTOR || rc == SL_ECOST) return;
  if (rc != 0) abort();
  if (out.n > ENG_MAX_STATUSES) abort();
  if (out.n == 0 && (!out.allowed || out.worst != -1)) abort();
  for (size_t i = 0; i < out.n; i++) {
    const eng_status *s = &out.st[i];
    if (!s->limit || !s->policy_str || s->descriptor != 0) abort();
    if (s->d.remaining < 0 || (!s->unlimited && s->d.remaining > s->d.limit))
      abort();
    if (!s->shadow && !s->unlimited && !s->d.allowed && out.allowed) abort();
  }
}

/*
 * Walks the tree depth first; at each node reached by exact (key, value)
 * entries (no wildcard or key-only node on the way), matching that
 * descriptor must give the node when it has limits, NULL otherwise.
 */
static void walk(const cfg_domain *dom, const cfg_node *n, cfg_entry *path,
                 size_t depth, int exact, engine_thread *t) {
  for (size_t i = 0; i < n->nchildren && depth < MAX_WALK; i++) {
    const cfg_node *c = n->children[i];
    path[depth] = (cfg_entry){c->key, strlen(c->key), c->value ? c->value : "",
                              c->value ? strlen(c->value) : 0};
    int ex = exact && c->value && !c->wildcard;
    const cfg_node *m = config_match(dom, path, depth + 1);
    if (ex && m != (c->nlimits ? c : NULL)) abort();
    if (m && m->nlimits == 0) abort();
    if (depth + 1 <= ENG_MAX_ENTRIES) {
      eng_descriptor d = {.n = depth + 1, .hits = -1};
      memcpy(d.entries, path, (depth + 1) * sizeof *path);
      decide(t, dom->name, &d, 1);
    }
    walk(dom, c, path, depth + 1, ex, t);
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > 65536) return 0;
  cfg_errors errs = {0};
  sl_config *cfg =
      config_load_string((const char *)data, size, "fuzz.yaml", &errs);
  check_errors(&errs);
  if (!cfg) {
    if (errs.n == 0) abort();
    cfg_errors_free(&errs);
    return 0;
  }
  if (errs.n != 0) abort();
  cfg_errors_free(&errs);

  for (size_t i = 0; i < cfg->ndomains; i++) {
    const cfg_domain *d = cfg->domains[i];
    if (config_domain(cfg, d->name, strlen(d->name)) != d) abort();
  }
  for (size_t i = 0; i < cfg->nlimits; i++)
    if (cfg->limits[i]->index != i || !cfg->limits[i]->rule ||
        !cfg->limits[i]->policy_str)
      abort();

  /* The engine owns cfg from here. */
  engine_opts o = {.max_memory = 1 << 20};
  char err[256];
  engine *e = engine_new(&o, cfg, err, sizeof err);
  if (!e) abort();
  engine_thread *t = engine_thread_new(e);
  if (!t) abort();
  const sl_config *c = engine_config(e);

  cfg_entry path[MAX_WALK];
  for (size_t i = 0; i < c->ndomains; i++)
    walk(c->domains[i], &c->domains[i]->root, path, 0, 1, t);

  /* Descriptors of raw input bytes: keys and values split at the input's
     own bytes (NULs, newlines and all), under each domain. */
  for (size_t i = 0; i < c->ndomains; i++) {
    const cfg_domain *dom = c->domains[i];
    eng_descriptor d = {.hits = -1};
    size_t pos = 0;
    while (d.n < 4 && pos < size) {
      size_t kl = 1 + data[pos] % 8, vl = data[pos] / 8 % 16;
      if (pos + 1 + kl + vl > size) break;
      d.entries[d.n++] = (cfg_entry){(const char *)data + pos + 1, kl,
                                     (const char *)data + pos + 1 + kl, vl};
      pos += 1 + kl + vl;
    }
    for (size_t n = 1; n <= d.n; n++) {
      config_match(dom, d.entries, n);
      eng_descriptor one = d;
      one.n = n;
      decide(t, dom->name, &one, 1);
      decide(t, dom->name, &one, 0);
    }
    /* Each configured key with its value cut short or extended by bytes
       from the input's tail, shifted so that 'A' becomes NUL: requests
       carry any bytes, a valid YAML file cannot. */
    for (size_t k = 0; k < dom->root.nchildren && k < 8; k++) {
      const cfg_node *ch = dom->root.children[k];
      char v[96];
      size_t vl = ch->value ? strlen(ch->value) : 0;
      size_t tail = size < 16 ? size : 16, keep = vl;
      if (keep > sizeof v - tail) continue;
      if (size && data[size - 1] % 4 == 0 && keep) keep--;
      memcpy(v, ch->value ? ch->value : "", keep);
      for (size_t j = 0; j < tail; j++)
        v[keep + j] = (char)(data[size - tail + j] - 'A');
      for (size_t extra = 0; extra <= tail; extra += 4) {
        eng_descriptor one = {.n = 1, .hits = -1};
        one.entries[0] = (cfg_entry){ch->key, strlen(ch->key), v, keep + extra};
        config_match(dom, one.entries, 1);
        decide(t, dom->name, &one, 1);
      }
    }
  }

  /* Reload the same text: unchanged rules keep their limiters. */
  cfg_errors e2 = {0};
  sl_config *again =
      config_load_string((const char *)data, size, "fuzz.yaml", &e2);
  cfg_errors_free(&e2);
  if (!again) abort();
  engine_thread_offline(t);
  if (engine_reload(e, again) != 0) abort();
  engine_thread_quiesce(t);

  size_t mlen;
  char *m = engine_metrics(e, &mlen);
  if (!m || strlen(m) != mlen) abort();
  free(m);
  engine_thread_free(t);
  engine_free(e);
  return 0;
}
