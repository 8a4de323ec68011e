/*
 * topkeys.c — the heaviest keys of each rule, by decisions and by
 * denials, over a recent window, in bounded memory.
 *
 * Each worker keeps its own tables (found by its engine_thread's slot),
 * and a queue in front of them: a decision only copies its rule and key
 * into the queue, without a lock (a byte ring the worker alone writes).
 * Whoever holds the worker's lock counts what is queued into the tables
 * (hashing the key, the Space-Saving updates): the counter thread, which
 * empties the queues every COUNT_PAUSE_NS while there are decisions (and
 * sleeps when there are none); a reader (GET /v1/top, SL.TOP, a scrape),
 * before it copies the summaries out, so that an answer counts every
 * decision answered before it; and the worker itself when its queue is
 * full (the counter fell behind) or a key is too large for a record. So
 * a worker's cost is a copy, and the counts are what they would be had
 * the worker counted them itself, in the same order. An ad-hoc policy's
 * denial that the denial log wants rides in its key's record too (the
 * key copied once for both), and whoever counts it hands the log its
 * line; such a record wakes the counter, so that the line never waits
 * for a reader.
 *
 * A table per rule, up to TOP_RULES_MAX per worker (past it, decisions
 * of new rules are counted, not tracked); per rule
 * two Space-Saving summaries (base/topk.h) of --top-keys counters each,
 * for decisions and for denials, in each of two windows: the window now
 * running and the one before it. Windows are epoch-aligned on the
 * decision's clock (now / --top-keys-window), and a reader merges what
 * every worker holds of the current window and the one before: between
 * one and two windows of traffic, never older.
 *
 * A key is its descriptor (all entries, or an ad-hoc policy's key), known
 * by a keyed hash (observe_id) and shown as "k=v,k2=v2" with values as
 * --denial-log-values says (plain, hashed or redacted), so that an
 * answer does not leak what the log would not.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../base/hash.h"
#include "../base/json.h"
#include "http.h"
#include "observe.h"

#define ID_BYTES 2048 /* a descriptor's bytes hashed for its id, at most */
#define RULES_LISTED 1024 /* rules a listing or a scrape shows, at most */
#define RANKS 3           /* sluice_top_key_rank_share's ranks */
#define RING_BYTES (256 * 1024) /* a worker's queue of keys to count */
#define RING_WAKE (RING_BYTES / 8) /* the counter is woken at this fill */
#define RULE_BYTES 255             /* a queued record's rule name at most */
#define COUNT_PAUSE_NS 1000000     /* the counter's pause after a round */

typedef struct tk_rule {
  char *name;
  uint64_t hash;
  int64_t epoch[2]; /* the window each pair of summaries counts */
  topk dec[2], den[2];
} tk_rule;

/*
 * A worker's tables, and its queue of keys not yet counted in them: a
 * byte ring of records (tk_rec), written by the worker alone (an
 * engine_thread serves one thread at a time) and read by whoever holds
 * `lock`. tail and head are byte counts written and read; each sits on
 * its own cache line.
 */
typedef struct tk_thread {
  pthread_mutex_t lock;
  tk_rule *last; /* the rule of the last decision (most repeat it) */
  size_t n;
  tk_rule *rules[TOP_RULES_MAX];
  uint16_t index[2 * TOP_RULES_MAX]; /* open addressing: rule + 1 */
  unsigned slot;
  char *ring; /* RING_BYTES; NULL (out of memory): counted at once */
  char pad0[64];
  _Atomic size_t tail; /* the worker's */
  char pad1[64];
  _Atomic size_t head; /* the lock holder's */
  char pad2[64];
} tk_thread;

struct topkeys {
  const observe *obs;
  size_t k;
  int64_t window_ns;
  _Atomic(tk_thread *) threads[ENG_MAX_THREADS];
  _Atomic unsigned nthreads; /* threads[] past the last made are NULL */
  metrics *m;
  int m_untracked, m_rules;
  /* The counter thread: it empties the workers' queues into their
     tables, so that a worker only copies a decision's key. */
  pthread_t counter;
  int counter_up;
  pthread_mutex_t wake_lock;
  pthread_cond_t wake;
  _Atomic int idle; /* the counter waits on wake */
  int stop;         /* (under wake_lock) */
};

static void *counter_main(void *arg);
static size_t drain_all(topkeys *t);

topkeys *topkeys_new(const observe *obs, char *err, size_t len) {
  topkeys *t = calloc(1, sizeof *t);
  if (!t) {
    snprintf(err, len, "out of memory");
    return NULL;
  }
  t->obs = obs;
  t->k = (size_t)obs->o.top_k;
  t->window_ns = (int64_t)obs->o.top_window_ms * 1000000;
  pthread_mutex_init(&t->wake_lock, NULL);
  pthread_cond_init(&t->wake, NULL);
  if (pthread_create(&t->counter, NULL, counter_main, t)) {
    snprintf(err, len, "--top-keys: cannot start its thread");
    topkeys_free(t);
    return NULL;
  }
  t->counter_up = 1;
  pthread_setname_np(t->counter, "sluice-topkeys");
  return t;
}

int topkeys_metrics(topkeys *t, metrics *m) {
  static const metric_def untracked = {
      "sluice_top_keys_untracked_total", NULL, METRIC_COUNTER, METRIC_GLOBAL,
      METRIC_GROUP_DAEMON,
      "Decisions of rules a worker could not track in top keys (past its "
      "TOP_RULES_MAX rules)."};
  static const metric_def rules = {
      "sluice_top_keys_tables", NULL, METRIC_GAUGE, METRIC_GLOBAL,
      METRIC_GROUP_DAEMON,
      "Top-keys tables (rules tracked, summed over the workers)."};
  if ((t->m_untracked = metrics_add(m, &untracked)) < 0 ||
      (t->m_rules = metrics_add(m, &rules)) < 0)
    return -1;
  t->m = m;
  return 0;
}

size_t topkeys_k(const topkeys *t) { return t->k; }

static void rule_free(tk_rule *r) {
  if (!r) return;
  for (int w = 0; w < 2; w++) {
    topk_free(&r->dec[w]);
    topk_free(&r->den[w]);
  }
  free(r->name);
  free(r);
}

void topkeys_free(topkeys *t) {
  if (!t) return;
  if (t->counter_up) {
    pthread_mutex_lock(&t->wake_lock);
    t->stop = 1;
    pthread_cond_signal(&t->wake);
    pthread_mutex_unlock(&t->wake_lock);
    pthread_join(t->counter, NULL);
    drain_all(t); /* (the denial log lines queued here go to the log) */
  }
  for (size_t i = 0; i < ENG_MAX_THREADS; i++) {
    tk_thread *th = atomic_load(&t->threads[i]);
    if (!th) continue;
    for (size_t r = 0; r < th->n; r++) rule_free(th->rules[r]);
    pthread_mutex_destroy(&th->lock);
    free(th->ring);
    free(th);
  }
  pthread_mutex_destroy(&t->wake_lock);
  pthread_cond_destroy(&t->wake);
  free(t);
}

/* The slot's tables, made by the slot's own thread on first use (and
   published for readers); NULL out of memory. */
static tk_thread *thread_of(topkeys *t, unsigned slot) {
  tk_thread *th = atomic_load_explicit(&t->threads[slot], memory_order_acquire);
  if (th || slot >= ENG_MAX_THREADS) return th;
  th = calloc(1, sizeof *th);
  if (!th) return NULL;
  th->ring = malloc(RING_BYTES); /* (pages are touched as used) */
  th->slot = slot;
  pthread_mutex_init(&th->lock, NULL);
  atomic_store_explicit(&t->threads[slot], th, memory_order_release);
  unsigned n = atomic_load(&t->nthreads);
  while (n < slot + 1 && !atomic_compare_exchange_weak(&t->nthreads, &n,
                                                       slot + 1)) {
  }
  return th;
}

/* The index slot of rule `name` (hash h) in th: where it is, or the empty
   slot where it would go. */
static size_t rule_slot(const tk_thread *th, const char *name, uint64_t h) {
  size_t m = 2 * TOP_RULES_MAX - 1, i = (size_t)hash_mix(h) & m;
  for (; th->index[i]; i = (i + 1) & m) {
    const tk_rule *r = th->rules[th->index[i] - 1];
    if (r->hash == h && !strcmp(r->name, name)) break;
  }
  return i;
}

/* Rule `name`'s tables in th (made when new; under th's lock), or NULL
   when th tracks TOP_RULES_MAX rules already or out of memory. */
static tk_rule *rule_of(topkeys *t, tk_thread *th, const char *name) {
  if (th->last && !strcmp(th->last->name, name)) return th->last;
  uint64_t h = fnv1a_str(FNV1A_INIT, name);
  size_t i = rule_slot(th, name, h);
  if (th->index[i]) return th->last = th->rules[th->index[i] - 1];
  if (th->n == TOP_RULES_MAX) return NULL;
  tk_rule *r = calloc(1, sizeof *r);
  if (!r || !(r->name = strdup(name))) goto fail;
  r->hash = h;
  r->epoch[0] = r->epoch[1] = -2;
  for (int w = 0; w < 2; w++)
    if (topk_init(&r->dec[w], t->k) || topk_init(&r->den[w], t->k)) goto fail;
  th->rules[th->n++] = r;
  th->index[i] = (uint16_t)th->n;
  if (t->m) metrics_global_add(t->m, t->m_rules, 1);
  return th->last = r;
fail:
  rule_free(r);
  return NULL;
}

/* Makes r's summaries of window `epoch` current (clearing what they held
   of an older one). */
static void roll(tk_rule *r, int64_t epoch) {
  int w = (int)(epoch & 1);
  if (r->epoch[w] == epoch) return;
  topk_clear(&r->dec[w]);
  topk_clear(&r->den[w]);
  r->epoch[w] = epoch;
}

/* One key of a decision: its id and what shows it. */
typedef struct tk_key {
  const observe *obs;
  const cfg_entry *entries; /* a descriptor's; NULL: an ad-hoc key */
  size_t n;
  const char *key; /* ad-hoc */
  size_t key_len;
} tk_key;

/* Appends n bytes of p to buf[at..room), as many as fit: the new end. */
static size_t put(char *buf, size_t at, size_t room, const char *p,
                  size_t n) {
  if (n > room - at) n = room - at;
  if (n) memcpy(buf + at, p, n);
  return at + n;
}

/* topk_text_fn: "k=v,k2=v2" (values as shown), or the ad-hoc key.
   Values shown as they are (the default) are copied straight into buf:
   a new key takes a counter at nearly every decision of a spread load. */
static void key_text(void *ctx, char *buf, size_t len) {
  const tk_key *k = ctx;
  if (k->obs->o.values == OBS_VALUES_PLAIN) {
    size_t n = 0, room = len - 1;
    if (!k->entries) n = put(buf, n, room, k->key, k->key_len);
    for (size_t i = 0; k->entries && i < k->n && n < room; i++) {
      const cfg_entry *e = &k->entries[i];
      if (i) n = put(buf, n, room, ",", 1);
      n = put(buf, n, room, e->key, e->key_len);
      n = put(buf, n, room, "=", 1);
      n = put(buf, n, room, e->value, e->value_len);
    }
    buf[n] = '\0';
    return;
  }
  char mem[TOPK_TEXT];
  strbuf b;
  strbuf_init_with(&b, mem, sizeof mem);
  if (!k->entries) observe_value(k->obs, &b, k->key, k->key_len);
  for (size_t i = 0; k->entries && i < k->n && b.len < len; i++) {
    if (i) STRBUF_LIT(&b, ",");
    strbuf_add(&b, k->entries[i].key, k->entries[i].key_len);
    STRBUF_LIT(&b, "=");
    observe_value(k->obs, &b, k->entries[i].value, k->entries[i].value_len);
  }
  size_t n = b.len < len - 1 ? b.len : len - 1;
  memcpy(buf, b.p ? b.p : "", n);
  buf[n] = '\0';
  strbuf_free(&b);
}

/* Writes a descriptor's entries (n of them) to buf (cap bytes) as its id
   hashes them: each key and value length-prefixed (a uint32_t), those
   that fit. The bytes written. */
static size_t put_entries(uint8_t *buf, size_t cap, const cfg_entry *e,
                          size_t n) {
  size_t at = 0;
  for (size_t i = 0; i < n; i++) {
    const struct {
      const char *p;
      size_t len;
    } part[2] = {{e[i].key, e[i].key_len}, {e[i].value, e[i].value_len}};
    for (int j = 0; j < 2; j++) {
      if (at + 4 + part[j].len > cap) break; /* (hash what fits) */
      uint32_t len = (uint32_t)part[j].len;
      memcpy(buf + at, &len, 4);
      if (part[j].len) memcpy(buf + at + 4, part[j].p, part[j].len);
      at += 4 + part[j].len;
    }
  }
  return at;
}

/* The bytes put_entries writes of all n entries (each fits). */
static size_t entries_bytes(const cfg_entry *e, size_t n) {
  size_t b = 0;
  for (size_t i = 0; i < n; i++) b += 8 + e[i].key_len + e[i].value_len;
  return b;
}

/* A descriptor's id: its entries, each length-prefixed, keyed-hashed. */
static uint64_t descriptor_id(const observe *obs, const eng_descriptor *d) {
  uint8_t buf[ID_BYTES];
  return observe_id(obs, buf, put_entries(buf, sizeof buf, d->entries, d->n));
}

/* Counts status s's key (id, shown by key) in rule r's tables (NULL: the
   rule could not be tracked). */
static void count(topkeys *t, tk_rule *r, int64_t epoch, uint64_t id,
                  tk_key *key, int denied) {
  if (!r) {
    if (t->m) metrics_global_add(t->m, t->m_untracked, 1);
    return;
  }
  roll(r, epoch);
  int w = (int)(epoch & 1);
  topk_key k = topk_key_of(id);
  topk_add_key(&r->dec[w], &k, 1, key_text, key);
  if (denied) topk_add_key(&r->den[w], &k, 1, key_text, key);
}

/* An ad-hoc policy's rule, "adhoc:POLICY" (pol: len bytes; cut to fit
   the name), in th; as rule_of. */
static tk_rule *adhoc_rule(topkeys *t, tk_thread *th, const char *pol,
                           size_t len) {
  char rule[96] = "adhoc:";
  if (len > sizeof rule - 7) len = sizeof rule - 7;
  memcpy(rule + 6, pol, len);
  rule[6 + len] = '\0';
  return rule_of(t, th, rule);
}

/* ---- the workers' queues ---- */

/*
 * A queued decision of one key: this header, the rule's name (an ad-hoc
 * policy's text), then the key: an ad-hoc key's bytes, or a descriptor's
 * entries as put_entries writes them (so that their hash is the id);
 * then, for an ad-hoc policy's denial that the denial log wants
 * (log_len > 0), its line's figures (tk_log) and the client's address,
 * which the counter hands to the log (denylog_adhoc): the worker copies
 * the key once for both. Each record starts at a multiple of 8 bytes
 * and never wraps: one that would is put at the ring's start, after a
 * REC_PAD record to its end.
 */
enum { REC_PAD, REC_ADHOC, REC_RULES };

typedef struct tk_rec {
  uint32_t len;      /* the record's bytes, header included */
  uint8_t kind;      /* REC_*; a REC_PAD is these 8 bytes only */
  uint8_t denied;
  uint16_t rule_len;
  uint32_t key_len;
  uint16_t nent;     /* REC_RULES: the descriptor's entries */
  uint16_t log_len;  /* the denial log's part: tk_log and the address */
  int64_t epoch;     /* the decision's window */
} tk_rec;

typedef struct tk_log {
  int64_t now, limit, remaining, retry_after_ns;
  uint32_t enforced, client_len;
} tk_log;

/* Hands the denial log the line of an ad-hoc policy's denial (policy
   pol, key, the figures and the address), in th's worker's queue (th's
   lock held, or th's worker). */
static void log_line(topkeys *t, tk_thread *th, const char *pol,
                     size_t pol_len, const char *key, size_t key_len,
                     const tk_log *l, const char *client) {
  denylog_line line = {l->now, l->limit, l->remaining, l->retry_after_ns,
                       (int)l->enforced, pol, key, client, pol_len, key_len,
                       l->client_len};
  denylog_adhoc(t->obs->log, th->slot, &line);
}

#define REC_ALIGN(n) (((n) + 7) & ~(size_t)7)

/* Counts a decision of an ad-hoc policy (pol: pol_len bytes) on key in
   th's tables, and hands the log its denial's line l (NULL: none) with
   the client's address (under th's lock): for a queued record and for a
   key counted at once alike. */
static void count_adhoc(topkeys *t, tk_thread *th, const char *pol,
                        size_t pol_len, const char *key, size_t key_len,
                        int64_t epoch, int denied, const tk_log *l,
                        const char *client) {
  tk_key k = {t->obs, NULL, 0, key, key_len};
  count(t, adhoc_rule(t, th, pol, pol_len), epoch,
        observe_id(t->obs, key, key_len), &k, denied);
  if (l) log_line(t, th, pol, pol_len, key, key_len, l, client);
}

/* Counts record h (its bytes after the header at p) in th's tables
   (under th's lock). */
static void count_record(topkeys *t, tk_thread *th, const tk_rec *h,
                         const char *p) {
  const char *key = p + h->rule_len;
  if (h->kind == REC_ADHOC) {
    tk_log l;
    const tk_log *line = NULL;
    const char *client = NULL;
    if (h->log_len) {
      memcpy(&l, key + h->key_len, sizeof l);
      line = &l;
      client = key + h->key_len + sizeof l;
    }
    count_adhoc(t, th, p, h->rule_len, key, h->key_len, h->epoch, h->denied,
                line, client);
    return;
  }
  uint64_t id = observe_id(t->obs, key, h->key_len);
  char rule[RULE_BYTES + 1];
  memcpy(rule, p, h->rule_len);
  rule[h->rule_len] = '\0';
  cfg_entry e[ENG_MAX_ENTRIES];
  size_t n = h->nent < ENG_MAX_ENTRIES ? h->nent : ENG_MAX_ENTRIES;
  const char *q = key;
  for (size_t i = 0; i < n; i++) { /* (the lengths put_entries wrote) */
    uint32_t kl, vl;
    memcpy(&kl, q, 4);
    memcpy(&vl, q + 4 + kl, 4);
    e[i] = (cfg_entry){q + 4, kl, q + 8 + kl, vl};
    q += 8 + kl + vl;
  }
  tk_key k = {t->obs, e, n, NULL, 0};
  count(t, rule_of(t, th, rule), h->epoch, id, &k, h->denied);
}

/* Counts what th's queue holds, in order (under th's lock): the records
   counted. */
static size_t drain(topkeys *t, tk_thread *th) {
  size_t head = atomic_load_explicit(&th->head, memory_order_relaxed);
  size_t tail = atomic_load_explicit(&th->tail, memory_order_acquire);
  size_t n = 0;
  while (head != tail) {
    const char *p = th->ring + head % RING_BYTES;
    tk_rec h;
    memcpy(&h, p, 8);
    if (h.kind != REC_PAD) {
      memcpy(&h, p, sizeof h);
      count_record(t, th, &h, p + sizeof h);
      n++;
    }
    head += h.len;
  }
  atomic_store_explicit(&th->head, head, memory_order_release);
  return n;
}

/* Where th's worker writes a record of n bytes (a multiple of 8, at most
   RING_BYTES / 2): the ring's place, after a REC_PAD to the ring's end
   when it would wrap; NULL when the ring has not that room. *tail is
   the byte count after it. */
static char *ring_room(tk_thread *th, size_t n, size_t *tail) {
  size_t at = atomic_load_explicit(&th->tail, memory_order_relaxed);
  size_t head = atomic_load_explicit(&th->head, memory_order_acquire);
  size_t off = at % RING_BYTES;
  size_t pad = off + n > RING_BYTES ? RING_BYTES - off : 0;
  if (at + pad + n - head > RING_BYTES) return NULL;
  if (pad) {
    tk_rec p = {.len = (uint32_t)pad, .kind = REC_PAD};
    memcpy(th->ring + off, &p, 8);
  }
  *tail = at + pad + n;
  return th->ring + (at + pad) % RING_BYTES;
}

/* Publishes th's records up to byte count `tail`, and wakes the counter
   when it sleeps and the queue has just grown past RING_WAKE, or the
   record is urgent (it holds a denial log line, which must not wait for
   a reader). */
static void publish(topkeys *t, tk_thread *th, size_t tail, int urgent) {
  size_t before = atomic_load_explicit(&th->tail, memory_order_relaxed);
  atomic_store_explicit(&th->tail, tail, memory_order_release);
  size_t head = atomic_load_explicit(&th->head, memory_order_relaxed);
  if (!urgent && (before - head >= RING_WAKE || tail - head < RING_WAKE))
    return;
  /* (seq_cst, as the counter's idle store and its look at the queues:
     either it sees this queue's fill, or this sees it idle) */
  atomic_fetch_add(&th->tail, 0);
  if (!atomic_load(&t->idle)) return;
  pthread_mutex_lock(&t->wake_lock);
  atomic_store(&t->idle, 0);
  pthread_cond_signal(&t->wake);
  pthread_mutex_unlock(&t->wake_lock);
}

/* One key of a decision, as the worker hands it over. */
typedef struct tk_item {
  int kind; /* REC_ADHOC or REC_RULES */
  int denied;
  int64_t epoch;
  const char *rule; /* REC_ADHOC: the policy's text */
  size_t rule_len;
  const char *key; /* REC_ADHOC */
  size_t key_len;
  const eng_descriptor *d; /* REC_RULES */
  const tk_log *log;       /* REC_ADHOC: its denial log line, or NULL */
  const char *client;      /* (the line's address) */
} tk_item;

/* Counts it at once, after what is queued (under th's lock): a key too
   large for a record, or a worker without a queue. */
static void count_now(topkeys *t, tk_thread *th, const tk_item *it) {
  drain(t, th);
  if (it->kind == REC_ADHOC) {
    count_adhoc(t, th, it->rule, it->rule_len, it->key, it->key_len,
                it->epoch, it->denied, it->log, it->client);
  } else {
    tk_key k = {t->obs, it->d->entries, it->d->n, NULL, 0};
    count(t, rule_of(t, th, it->rule), it->epoch, descriptor_id(t->obs, it->d),
          &k, it->denied);
  }
}

/* Hands key it over: queued as a record (the queue full: emptied by the
   worker first), or counted at once when it is too large for one. */
static void hand_over(topkeys *t, tk_thread *th, const tk_item *it) {
  size_t kb = it->kind == REC_ADHOC ? it->key_len
                                    : entries_bytes(it->d->entries, it->d->n);
  size_t lb = it->log ? sizeof *it->log + it->log->client_len : 0;
  size_t n = REC_ALIGN(sizeof(tk_rec) + it->rule_len + kb + lb), tail;
  char *p = NULL;
  if (th->ring && it->rule_len <= RULE_BYTES && kb <= ID_BYTES &&
      !(p = ring_room(th, n, &tail))) {
    pthread_mutex_lock(&th->lock); /* (the counter fell behind) */
    drain(t, th);
    pthread_mutex_unlock(&th->lock);
    p = ring_room(th, n, &tail);
  }
  if (!p) {
    pthread_mutex_lock(&th->lock);
    count_now(t, th, it);
    pthread_mutex_unlock(&th->lock);
    return;
  }
  tk_rec h = {(uint32_t)n,     (uint8_t)it->kind, (uint8_t)it->denied,
              (uint16_t)it->rule_len, (uint32_t)kb,
              it->d ? (uint16_t)it->d->n : 0, (uint16_t)lb, it->epoch};
  memcpy(p, &h, sizeof h);
  memcpy(p + sizeof h, it->rule, it->rule_len);
  char *k = p + sizeof h + it->rule_len;
  if (it->kind == REC_ADHOC)
    memcpy(k, it->key ? it->key : "", kb);
  else
    put_entries((uint8_t *)k, kb, it->d->entries, it->d->n);
  if (lb) {
    memcpy(k + kb, it->log, sizeof *it->log);
    memcpy(k + kb + sizeof *it->log, it->client, it->log->client_len);
  }
  publish(t, th, tail, lb > 0);
}

int topkeys_decision(topkeys *t, unsigned slot, const eng_query *q,
                     const eng_result *out) {
  tk_thread *th = thread_of(t, slot);
  if (!th || out->n == 0) return 0;
  int64_t epoch = q->now / t->window_ns;
  if (q->kind == ENG_QUERY_POLICY) {
    /* An ad-hoc policy counts as the rule "adhoc:POLICY"; its denial's
       log line, if the log wants one, rides in the same record. */
    const eng_status *st = &out->st[0];
    const char *pol = st->policy_str;
    tk_item it = {REC_ADHOC, !st->d.allowed, epoch, pol, strlen(pol),
                  q->key, q->key_len, NULL, NULL, NULL};
    char addr[ENG_CLIENT_MAX];
    tk_log l;
    if (t->obs->log && !st->d.allowed && denylog_wants(t->obs->log, q->now)) {
      addr[0] = '\0';
      if (q->client) q->client(q->client_ud, addr, sizeof addr);
      l = (tk_log){q->now, (int64_t)st->d.limit, (int64_t)st->d.remaining,
                   st->d.retry_after_ns, !out->allowed && !st->shadow,
                   (uint32_t)strnlen(addr, sizeof addr - 1)};
      it.log = &l;
      it.client = addr;
    }
    hand_over(t, th, &it);
    return 1;
  }
  for (size_t i = 0; i < out->n; i++) {
    const eng_status *s = &out->st[i];
    if (s->unlimited || !s->limit) continue;
    tk_item it = {REC_RULES, !s->d.allowed, epoch, s->limit->rule,
                  strlen(s->limit->rule), NULL, 0,
                  &q->req->descriptors[s->descriptor], NULL, NULL};
    hand_over(t, th, &it);
  }
  return 0;
}

/* Empties every worker's queue that holds records: how many it
   counted. */
static size_t drain_all(topkeys *t) {
  if (!t) return 0;
  size_t n = 0, nt = atomic_load(&t->nthreads);
  for (size_t i = 0; i < nt; i++) {
    tk_thread *th = atomic_load_explicit(&t->threads[i], memory_order_acquire);
    if (!th || atomic_load_explicit(&th->tail, memory_order_relaxed) ==
                   atomic_load_explicit(&th->head, memory_order_relaxed))
      continue;
    pthread_mutex_lock(&th->lock);
    n += drain(t, th);
    pthread_mutex_unlock(&th->lock);
  }
  return n;
}

void topkeys_sync(topkeys *t) { drain_all(t); }

/* Whether some worker's queue holds records (the counter then does not
   sleep: a record may hold a denial log line). */
static int some_queued(topkeys *t) {
  size_t nt = atomic_load(&t->nthreads);
  for (size_t i = 0; i < nt; i++) {
    tk_thread *th = atomic_load_explicit(&t->threads[i], memory_order_acquire);
    if (th && atomic_load(&th->tail) != atomic_load(&th->head)) return 1;
  }
  return 0;
}

/* The counter: empties the queues, pausing COUNT_PAUSE_NS after each
   round that found records (so that a flood's are counted in batches),
   and sleeps when a round found none, until a worker's queue passes
   RING_WAKE (readers and a full queue's worker count the rest). */
static void *counter_main(void *arg) {
  topkeys *t = arg;
  pthread_mutex_lock(&t->wake_lock);
  while (!t->stop) {
    pthread_mutex_unlock(&t->wake_lock);
    size_t n = drain_all(t);
    if (n) nanosleep(&(struct timespec){0, COUNT_PAUSE_NS}, NULL);
    pthread_mutex_lock(&t->wake_lock);
    if (n || t->stop) continue;
    atomic_store(&t->idle, 1); /* (then looks: publish says why) */
    if (some_queued(t)) {
      atomic_store(&t->idle, 0);
      continue;
    }
    while (atomic_load(&t->idle) && !t->stop)
      pthread_cond_wait(&t->wake, &t->wake_lock);
  }
  pthread_mutex_unlock(&t->wake_lock);
  return NULL;
}

/* ---- reading ---- */

int topkeys_query(topkeys *t, const char *rule, size_t n, int64_t now,
                  top_answer *a) {
  int64_t epoch = now / t->window_ns;
  uint64_t h = fnv1a_str(FNV1A_INIT, rule);
  topk_merge dec = TOPK_MERGE_INIT, den = TOPK_MERGE_INIT;
  for (size_t i = 0; i < ENG_MAX_THREADS; i++) {
    tk_thread *th = atomic_load_explicit(&t->threads[i], memory_order_acquire);
    if (!th) continue;
    pthread_mutex_lock(&th->lock);
    drain(t, th); /* (what was decided before is counted) */
    size_t s = rule_slot(th, rule, h);
    const tk_rule *r = th->index[s] ? th->rules[th->index[s] - 1] : NULL;
    for (int w = 0; r && w < 2; w++)
      if (r->epoch[w] == epoch || r->epoch[w] == epoch - 1) {
        topk_merge_add(&dec, &r->dec[w]);
        topk_merge_add(&den, &r->den[w]);
      }
    pthread_mutex_unlock(&th->lock);
  }
  if (n > TOP_N_MAX) n = TOP_N_MAX;
  a->decisions = dec.total;
  a->denials = den.total;
  a->n_dec = topk_merge_top(&dec, a->by_decisions, n);
  a->n_den = topk_merge_top(&den, a->by_denials, n);
  int oom = dec.oom || den.oom;
  topk_merge_free(&dec);
  topk_merge_free(&den);
  return oom ? -1 : 0;
}

/* The rules some worker counted in the current window or the one before
   (their names live as long as t), at most RULES_LISTED; their number. */
static size_t rules_seen(topkeys *t, int64_t now, const char **names) {
  int64_t epoch = now / t->window_ns;
  size_t n = 0;
  for (size_t i = 0; i < ENG_MAX_THREADS; i++) {
    tk_thread *th = atomic_load_explicit(&t->threads[i], memory_order_acquire);
    if (!th) continue;
    pthread_mutex_lock(&th->lock);
    drain(t, th);
    for (size_t r = 0; r < th->n && n < RULES_LISTED; r++) {
      const tk_rule *x = th->rules[r];
      int live = x->epoch[0] >= epoch - 1 || x->epoch[1] >= epoch - 1;
      size_t k = 0;
      while (live && k < n && strcmp(names[k], x->name)) k++;
      if (live && k == n) names[n++] = x->name;
    }
    pthread_mutex_unlock(&th->lock);
  }
  return n;
}

/* A guaranteed share: the lower bound of item's count over total. */
static double share_of(const topk_item *it, uint64_t total) {
  return total ? (double)(it->count - it->err) / (double)total : 0;
}

/* [{"key", "id", "count", "error", "share"}...]; without keys (keys 0)
   each item is known by its id only. */
static void json_items(strbuf *b, const topk_item *v, size_t n,
                       uint64_t total, int keys) {
  STRBUF_LIT(b, "[");
  for (size_t i = 0; i < n; i++) {
    if (i) STRBUF_LIT(b, ",");
    STRBUF_LIT(b, "{");
    if (keys) {
      STRBUF_LIT(b, "\"key\":");
      json_put_str(b, v[i].text, strlen(v[i].text));
      STRBUF_LIT(b, ",");
    }
    strbuf_addf(b, "\"id\":\"%016llx\",\"count\":%llu,\"error\":%llu,"
                   "\"share\":%.4f}",
                (unsigned long long)v[i].id, (unsigned long long)v[i].count,
                (unsigned long long)v[i].err, share_of(&v[i], total));
  }
  STRBUF_LIT(b, "]");
}

int topkeys_json(topkeys *t, const char *rule, size_t n, int64_t now,
                 strbuf *b) {
  top_answer *a = malloc(sizeof *a);
  if (!a) return -1;
  double window_s = (double)t->window_ns / 1e9;
  int rc = 0;
  if (rule) {
    rc = topkeys_query(t, rule, n, now, a);
    STRBUF_LIT(b, "{\"rule\":");
    json_put_str(b, rule, strlen(rule));
    strbuf_addf(b, ",\"window_seconds\":%g,\"counters\":%zu,"
                   "\"decisions\":%llu,\"denials\":%llu,"
                   "\"error_bound\":%llu,\"by_decisions\":",
                window_s, t->k, (unsigned long long)a->decisions,
                (unsigned long long)a->denials,
                (unsigned long long)(a->decisions / t->k));
    json_items(b, a->by_decisions, a->n_dec, a->decisions, 1);
    STRBUF_LIT(b, ",\"by_denials\":");
    json_items(b, a->by_denials, a->n_den, a->denials, 1);
    STRBUF_LIT(b, "}\n");
  } else {
    const char *names[RULES_LISTED];
    size_t nr = rules_seen(t, now, names);
    strbuf_addf(b, "{\"window_seconds\":%g,\"counters\":%zu,\"rules\":[",
                window_s, t->k);
    for (size_t i = 0; i < nr && !rc; i++) {
      rc = topkeys_query(t, names[i], 1, now, a);
      if (i) STRBUF_LIT(b, ",");
      STRBUF_LIT(b, "{\"rule\":");
      json_put_str(b, names[i], strlen(names[i]));
      strbuf_addf(b, ",\"decisions\":%llu,\"denials\":%llu,"
                     "\"top_key_share\":%.4f}",
                  (unsigned long long)a->decisions,
                  (unsigned long long)a->denials,
                  a->n_dec ? share_of(&a->by_decisions[0], a->decisions) : 0);
    }
    STRBUF_LIT(b, "]}\n");
  }
  free(a);
  return rc || b->oom ? -1 : 0;
}

int topkeys_stats_json(topkeys *t, size_t n, int64_t now, int keys,
                       strbuf *b) {
  static const char *const modes[] = {"plain", "hash", "redact"};
  top_answer *a = malloc(sizeof *a);
  if (!a) return -1;
  const char *names[RULES_LISTED];
  size_t nr = rules_seen(t, now, names);
  if (n > t->k) n = t->k;
  int mode = t->obs->o.values;
  strbuf_addf(b, "{\"enabled\":true,\"window_seconds\":%g,\"counters\":%zu,"
                 "\"values\":\"%s\",\"keys_shown\":%s,\"rules\":[",
              (double)t->window_ns / 1e9, t->k,
              mode >= 0 && mode < 3 ? modes[mode] : "plain",
              keys ? "true" : "false");
  int rc = 0;
  for (size_t i = 0; i < nr && !rc; i++) {
    rc = topkeys_query(t, names[i], n, now, a);
    if (i) STRBUF_LIT(b, ",");
    STRBUF_LIT(b, "{\"rule\":");
    json_put_str(b, names[i], strlen(names[i]));
    strbuf_addf(b, ",\"decisions\":%llu,\"denials\":%llu,"
                   "\"error_bound\":%llu,\"by_decisions\":",
                (unsigned long long)a->decisions,
                (unsigned long long)a->denials,
                (unsigned long long)(a->decisions / t->k));
    json_items(b, a->by_decisions, a->n_dec, a->decisions, keys);
    STRBUF_LIT(b, ",\"by_denials\":");
    json_items(b, a->by_denials, a->n_den, a->denials, keys);
    STRBUF_LIT(b, "}");
  }
  STRBUF_LIT(b, "]}");
  free(a);
  return rc || b->oom ? -1 : 0;
}

/* A label value: backslash, quote and newline escaped. */
static void add_label(strbuf *b, const char *s) {
  for (; *s; s++) {
    if (*s == '\\' || *s == '"')
      strbuf_add(b, (const char[]){'\\', *s}, 2);
    else if (*s == '\n')
      STRBUF_LIT(b, "\\n");
    else
      strbuf_add(b, s, 1);
  }
}

void topkeys_prometheus(topkeys *t, int64_t now, strbuf *b) {
  const char *names[RULES_LISTED];
  size_t nr = rules_seen(t, now, names);
  top_answer *a = malloc(sizeof *a);
  if (!a) {
    b->oom = 1;
    return;
  }
  static const char *const families[3][2] = {
      {"sluice_top_key_share",
       "The heaviest key's share of the rule's decisions in the current "
       "top-keys window (a lower bound: the true share is at most 1/k more)."},
      {"sluice_top_key_rank_share",
       "The shares of the rule's three heaviest keys (rank 1 to 3), lower "
       "bounds; no key is named."},
      {"sluice_top_window_decisions",
       "The rule's decisions in the current top-keys window (between one "
       "and two --top-keys-window)."}};
  for (int f = 0; f < 3; f++) {
    strbuf_addf(b, "# HELP %s %s\n# TYPE %s gauge\n", families[f][0],
                families[f][1], families[f][0]);
    for (size_t i = 0; i < nr; i++) {
      if (topkeys_query(t, names[i], RANKS, now, a)) continue;
      for (size_t r = 0; r < (f == 1 ? a->n_dec : 1); r++) {
        strbuf_addf(b, "%s{rule=\"", families[f][0]);
        add_label(b, names[i]);
        if (f == 1) strbuf_addf(b, "\",rank=\"%zu", r + 1);
        if (f == 2)
          strbuf_addf(b, "\"} %llu\n", (unsigned long long)a->decisions);
        else
          strbuf_addf(b, "\"} %.6f\n",
                      r < a->n_dec ? share_of(&a->by_decisions[r], a->decisions)
                                   : 0.0);
      }
    }
  }
  free(a);
}
