/*
 * shed.c — the daemon's load shedding (docs/shedding.md): each domain
 * with a `shedding:` block has a library shedder (sl_shedder) per config
 * generation, which takes over what the previous generation's knew, so a
 * reload forgets no report and no usage.
 *
 * A request's class comes from the front end (a JSON field, a header, a
 * RESP argument), else from its class_key descriptor entry, else the
 * domain's default class; the class entries are taken out of the
 * descriptors before the rules match them, so the rules need not know the
 * classes. The shedder decides before the rate rules: a shed request is
 * charged to no rule and answered with the domain's status and
 * retry_after; in shadow mode it goes on, marked. What the shedder lets
 * through counts into fleet usage (a request the rules then deny too: the
 * fleet still had to answer it).
 *
 * Fleet mode shares usage through Redis: every round (engine_shed_sync)
 * each daemon adds what it charged since the last round to the window's
 * counter and reads the fleet's totals back, the rest of the fleet's part
 * becoming the shedder's remote usage. Between rounds each daemon sees
 * its own charges at once and the others' as of the last round.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../base/strbuf.h"
#include "internal.h"

/* One domain's shedder in one generation. */
typedef struct shed_dom {
  const cfg_domain *dom;
  sl_shedder *sh;
  _Atomic uint64_t shadow[SL_SHED_CLASSES_MAX]; /* would have shed */
  /* The sync's (main thread): the window last pushed and how much of its
     local count was pushed. */
  int64_t pushed_ws;
  uint64_t pushed;
} shed_dom;

/* The index of dom among cfg's domains (sorted by name), or -1. */
static long dom_index(const sl_config *cfg, const cfg_domain *dom) {
  size_t lo = 0, hi = cfg->ndomains;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    int c = strcmp(cfg->domains[mid]->name, dom->name);
    if (!c) return (long)mid;
    if (c < 0)
      lo = mid + 1;
    else
      hi = mid;
  }
  return -1;
}

/* The shed_dom of the domain named name (len bytes) in g, or NULL. */
static shed_dom *dom_named(const gen *g, const char *name, size_t len) {
  const cfg_domain *d = config_domain(g->cfg, name, len);
  long i = d && d->shedding && g->shed ? dom_index(g->cfg, d) : -1;
  return i < 0 ? NULL : g->shed[i];
}

void shed_free(gen *g) {
  if (!g->shed) return;
  size_t n = g->cfg ? g->cfg->ndomains : 0;
  for (size_t i = 0; i < n; i++)
    if (g->shed[i]) {
      sl_shedder_free(g->shed[i]->sh);
      free(g->shed[i]);
    }
  free(g->shed);
  g->shed = NULL;
}

int shed_build(gen *g, const sl_config *cfg, const gen *prev) {
  size_t any = 0;
  for (size_t i = 0; i < cfg->ndomains; i++) any += !!cfg->domains[i]->shedding;
  if (!any) return 0;
  if (!(g->shed = calloc(cfg->ndomains, sizeof *g->shed))) return -1;
  for (size_t i = 0; i < cfg->ndomains; i++) {
    const cfg_domain *d = cfg->domains[i];
    if (!d->shedding) continue;
    shed_dom *sd = calloc(1, sizeof *sd);
    if (!sd) return -1;
    g->shed[i] = sd;
    sd->dom = d;
    if (sl_shedder_new(&d->shedding->opts, &sd->sh, NULL, 0)) return -1;
    shed_dom *old = prev ? dom_named(prev, d->name, strlen(d->name)) : NULL;
    if (old) {
      sl_shedder_inherit(sd->sh, old->sh);
      for (size_t c = 0; c < SL_SHED_CLASSES_MAX; c++)
        atomic_store(&sd->shadow[c], atomic_load(&old->shadow[c]));
      sd->pushed_ws = old->pushed_ws;
      sd->pushed = old->pushed;
    }
  }
  return 0;
}

/* The request's class: the front end's, or its class_key entry's, or the
   default. -1 (out->msg written) for one that names no class. */
static int class_of(const cfg_shedding *sh, const eng_query *q,
                    const eng_request *req, eng_result *out) {
  const char *s = q->priority;
  size_t n = q->priority_len;
  size_t kl = strlen(sh->class_key);
  for (size_t i = 0; !s && i < req->n; i++)
    for (size_t k = 0; !s && k < req->descriptors[i].n; k++) {
      const cfg_entry *e = &req->descriptors[i].entries[k];
      if (e->key_len == kl && !memcmp(e->key, sh->class_key, kl)) {
        s = e->value;
        n = e->value_len;
      }
    }
  if (!s) return (int)sh->default_class;
  int c = config_shed_class(sh, s, n);
  if (c < 0) {
    int len = snprintf(out->msg, sizeof out->msg,
                       "unknown priority class '%.*s' (expected ",
                       (int)(n < 64 ? n : 64), s);
    for (uint32_t i = 0; i < sh->opts.nclasses && len > 0 &&
                         (size_t)len < sizeof out->msg;
         i++)
      len += snprintf(out->msg + len, sizeof out->msg - (size_t)len, "%s, ",
                      sh->classes[i]);
    if (len > 0 && (size_t)len < sizeof out->msg)
      snprintf(out->msg + len, sizeof out->msg - (size_t)len, "or 0..%u)",
               sh->opts.nclasses - 1);
  }
  return c;
}

/* req without its class_key entries: req itself when it has none, else
   copy (over ds). A descriptor left empty matches nothing. */
static const eng_request *strip_class(const cfg_shedding *sh,
                                      const eng_request *req,
                                      eng_request *copy, eng_descriptor *ds) {
  size_t kl = strlen(sh->class_key);
  int found = 0;
  for (size_t i = 0; !found && i < req->n; i++)
    for (size_t k = 0; !found && k < req->descriptors[i].n; k++)
      found = req->descriptors[i].entries[k].key_len == kl &&
              !memcmp(req->descriptors[i].entries[k].key, sh->class_key, kl);
  if (!found) return req;
  *copy = *req;
  copy->descriptors = ds;
  for (size_t i = 0; i < req->n; i++) {
    const eng_descriptor *d = &req->descriptors[i];
    ds[i].n = 0;
    ds[i].hits = d->hits;
    for (size_t k = 0; k < d->n; k++)
      if (d->entries[k].key_len != kl ||
          memcmp(d->entries[k].key, sh->class_key, kl))
        ds[i].entries[ds[i].n++] = d->entries[k];
  }
  return copy;
}

int shed_request(engine_thread *t, const cfg_domain *dom, const eng_query *q,
                 const eng_request *req, eng_result *out,
                 const eng_request **strip, eng_request *copy,
                 eng_descriptor *ds) {
  const cfg_shedding *cs = dom->shedding;
  shed_dom *sd = dom_named(t->g, dom->name, strlen(dom->name));
  *strip = req;
  if (!sd) return 0;
  int64_t now = q->now;
  int c = class_of(cs, q, req, out);
  if (c < 0) return ENG_EDESCRIPTOR;
  *strip = strip_class(cs, req, copy, ds);
  sl_shed_decision d;
  int64_t cost = req->hits > 0 ? req->hits : 0;
  if (cs->shadow || !cost) { /* a peek is told, and charges nothing */
    sl_shedder_check(sd->sh, (uint32_t)c, cost, now, &d);
    if (!d.shed && cost) sl_shedder_charge(sd->sh, cost, now);
    if (d.shed && cost)
      atomic_fetch_add_explicit(&sd->shadow[c], 1, memory_order_relaxed);
  } else {
    sl_shedder_take(sd->sh, (uint32_t)c, cost, now, &d);
  }
  out->shed = (eng_shed){ENG_SHED_NO, cs->classes[c], d.signal, d.level_pm,
                         d.threshold_pm, cs->status, cs->retry_after_ns};
  if (d.shed) out->shed.state = cs->shadow ? ENG_SHED_SHADOW : ENG_SHED_YES;
  return 0;
}

int engine_shed_report(engine_thread *t, const char *domain, size_t len,
                       const char *source, size_t slen, uint32_t pm,
                       int64_t ttl_ns, int64_t now, char *msg,
                       size_t msg_len) {
  shed_dom *sd = dom_named(t->g, domain, len);
  if (!sd) {
    snprintf(msg, msg_len, "domain '%.*s' does not exist or sheds nothing",
             (int)(len < 200 ? len : 200), domain);
    return ENG_EDOMAIN;
  }
  if (!ttl_ns) ttl_ns = sd->dom->shedding->ttl_ns;
  int rc = sl_shedder_report(sd->sh, source, slen, pm, ttl_ns, now);
  if (rc == SL_EFULL)
    snprintf(msg, msg_len, "every one of the domain's %u utilisation sources "
                           "reported within its TTL: source refused",
             sd->dom->shedding->opts.max_sources ? sd->dom->shedding->opts.max_sources : 64);
  else if (rc)
    snprintf(msg, msg_len, "utilisation must be 0 to 1000%%, a source at "
                           "most %d bytes, a TTL positive",
             SL_SHED_SOURCE_MAX);
  return rc;
}

static const char *const signal_names[] = {"none", "utilisation",
                                           "fleet_usage"};

/* Appends permille as a decimal fraction ("0.93"). */
static void add_ratio(strbuf *b, uint64_t pm) {
  strbuf_addf(b, "%llu.%03llu", (unsigned long long)(pm / 1000),
              (unsigned long long)(pm % 1000));
}

char *engine_shed_json(engine_thread *t, const char *domain, size_t len,
                       int64_t now, size_t *out_len, char *msg,
                       size_t msg_len) {
  shed_dom *sd = dom_named(t->g, domain, len);
  if (!sd) {
    snprintf(msg, msg_len, "domain '%.*s' does not exist or sheds nothing",
             (int)(len < 200 ? len : 200), domain);
    return NULL;
  }
  const cfg_shedding *cs = sd->dom->shedding;
  sl_shed_stats st;
  sl_shedder_stats(sd->sh, now, &st);
  strbuf b = STRBUF_INIT;
  strbuf_addf(&b, "{\"domain\":\"%s\",\"shadow\":%s,\"utilisation\":",
              sd->dom->name, cs->shadow ? "true" : "false");
  add_ratio(&b, st.utilisation_pm);
  strbuf_addf(&b, ",\"sources\":%u,\"sources_refused\":%llu", st.sources,
              (unsigned long long)st.refused);
  if (cs->opts.capacity) {
    strbuf_addf(&b, ",\"capacity\":%llu,\"window_ms\":%lld,\"usage\":%llu,"
                    "\"usage_ratio\":",
                (unsigned long long)cs->opts.capacity,
                (long long)(cs->opts.window_ns / 1000000),
                (unsigned long long)st.usage);
    add_ratio(&b, st.usage_pm);
  }
  STRBUF_LIT(&b, ",\"classes\":[");
  for (uint32_t c = 0; c < cs->opts.nclasses; c++) {
    sl_shed_decision d;
    sl_shedder_check(sd->sh, c, 1, now, &d);
    strbuf_addf(&b, "%s{\"name\":\"%s\",\"threshold\":", c ? "," : "",
                cs->classes[c]);
    if (cs->opts.threshold_pm[c] == SL_SHED_NEVER)
      STRBUF_LIT(&b, "null");
    else
      add_ratio(&b, cs->opts.threshold_pm[c]);
    strbuf_addf(&b, ",\"shed_now\":%s,\"signal\":\"%s\",\"shed\":%llu,"
                    "\"shadow_shed\":%llu}",
                d.shed ? "true" : "false", signal_names[d.signal],
                (unsigned long long)st.shed[c],
                (unsigned long long)atomic_load(&sd->shadow[c]));
  }
  STRBUF_LIT(&b, "]}\n");
  if (b.oom) {
    strbuf_free(&b);
    snprintf(msg, msg_len, "out of memory");
    return NULL;
  }
  size_t cap;
  *out_len = b.len;
  return strbuf_take(&b, &cap);
}

/* The families of the shedders' figures, in the Prometheus text format,
   for every domain that sheds in the current generation (under
   reload_lock: the generation stays). */
void shed_render(engine *e, strbuf *b, int64_t now) {
  gen *g = atomic_load(&e->cur);
  if (!g->shed) return;
  STRBUF_LIT(b, "# HELP sluice_shed_requests_total Requests the load shedder "
                "shed (result=shed) or would have shed in shadow mode "
                "(result=shadow_shed), by domain and priority class.\n"
                "# TYPE sluice_shed_requests_total counter\n");
  for (size_t i = 0; i < g->cfg->ndomains; i++) {
    shed_dom *sd = g->shed[i];
    if (!sd) continue;
    sl_shed_stats st;
    sl_shedder_stats(sd->sh, now, &st);
    const cfg_shedding *cs = sd->dom->shedding;
    for (uint32_t c = 0; c < cs->opts.nclasses; c++)
      strbuf_addf(b,
                  "sluice_shed_requests_total{domain=\"%s\",class=\"%s\","
                  "result=\"shed\"} %llu\n"
                  "sluice_shed_requests_total{domain=\"%s\",class=\"%s\","
                  "result=\"shadow_shed\"} %llu\n",
                  sd->dom->name, cs->classes[c],
                  (unsigned long long)st.shed[c], sd->dom->name,
                  cs->classes[c],
                  (unsigned long long)atomic_load(&sd->shadow[c]));
  }
  static const struct {
    const char *name, *type, *help;
  } fam[] = {
      {"sluice_shed_utilisation_ratio", "gauge",
       "The protected service's reported utilisation (fresh sources)."},
      {"sluice_shed_usage_ratio", "gauge",
       "Fleet usage against the domain's declared capacity."},
      {"sluice_shed_sources", "gauge",
       "Utilisation sources with a fresh report (bounded by max_sources)."},
      {"sluice_shed_sources_refused_total", "counter",
       "Utilisation reports refused: every source slot was fresh."},
  };
  for (size_t f = 0; f < sizeof fam / sizeof *fam; f++) {
    strbuf_addf(b, "# HELP %s %s\n# TYPE %s %s\n", fam[f].name, fam[f].help,
                fam[f].name, fam[f].type);
    for (size_t i = 0; i < g->cfg->ndomains; i++) {
      shed_dom *sd = g->shed[i];
      if (!sd) continue;
      sl_shed_stats st;
      sl_shedder_stats(sd->sh, now, &st);
      strbuf_addf(b, "%s{domain=\"%s\"} ", fam[f].name, sd->dom->name);
      if (f == 0) add_ratio(b, st.utilisation_pm);
      if (f == 1) add_ratio(b, st.usage_pm);
      if (f == 2) strbuf_addf(b, "%u", st.sources);
      if (f == 3) strbuf_addf(b, "%llu", (unsigned long long)st.refused);
      STRBUF_LIT(b, "\n");
    }
  }
}

/* One domain's sync round (see the top of the file). */
static int sync_dom(shed_dom *sd, int64_t now, eng_shed_sync_fn fn,
                    void *ud) {
  int64_t W = sd->dom->shedding->opts.window_ns, ws;
  uint64_t cur, prev, fleet_prev = 0, fleet = 0, push_prev = 0;
  sl_shedder_counts(sd->sh, &ws, &cur, &prev);
  if (ws < now - now % W) { /* no charge since the window ended */
    prev = ws == now - now % W - W ? cur : 0;
    cur = 0;
    ws = now - now % W;
  }
  if (ws != sd->pushed_ws) { /* the rest of the last window, then anew */
    if (ws == sd->pushed_ws + W && prev > sd->pushed)
      push_prev = prev - sd->pushed;
    sd->pushed_ws = ws;
    sd->pushed = 0;
  }
  uint64_t push = cur > sd->pushed ? cur - sd->pushed : 0;
  if (fn(ud, sd->dom->name, ws / W, W, push_prev, push, &fleet_prev, &fleet))
    return -1;
  sd->pushed += push;
  /* The others' part: the fleet's totals less what this daemon counted. */
  uint64_t others = fleet > cur ? fleet - cur : 0;
  uint64_t others_prev = fleet_prev > prev ? fleet_prev - prev : 0;
  int64_t left = W - (now - ws);
  if (left > 0)
    others += (uint64_t)((unsigned __int128)others_prev * (uint64_t)left /
                         (uint64_t)W);
  sl_shedder_set_remote(sd->sh, others);
  return 0;
}

int engine_shed_sync(engine *e, int64_t now, eng_shed_sync_fn fn, void *ud) {
  pthread_mutex_lock(&e->reload_lock);
  gen *g = atomic_load(&e->cur);
  int n = 0;
  for (size_t i = 0; g->shed && i < g->cfg->ndomains && n >= 0; i++) {
    shed_dom *sd = g->shed[i];
    if (!sd || !sd->dom->shedding->opts.capacity ||
        !sd->dom->shedding->opts.window_ns)
      continue;
    n = sync_dom(sd, now, fn, ud) ? -1 : n + 1;
  }
  pthread_mutex_unlock(&e->reload_lock);
  return n;
}
