/*
 * observe.h — who is being limited: the denial log (denylog.c) and the
 * heaviest keys per rule (topkeys.c), both fed by the engine's decision
 * observer (engine.h: eng_observe_fn) at the one point where a decision
 * is final, and the redaction of values they share (observe.c).
 *
 * docs/operations.md, "Who is being limited", is the user's page.
 */
#ifndef SLUICE_SERVER_OBSERVE_H
#define SLUICE_SERVER_OBSERVE_H

#include <stddef.h>
#include <stdint.h>

#include "../base/strbuf.h"
#include "../base/topk.h"
#include "../engine/engine.h"
#include "../engine/metrics.h"

/* How descriptor values (and client addresses) are shown. */
enum { OBS_VALUES_PLAIN, OBS_VALUES_HASH, OBS_VALUES_REDACT };

#define OBS_ID_KEY 16   /* SipHash's key */
#define OBS_HASH_KEY 32 /* BLAKE2b's key, for --denial-log-values hash */
#define TOP_RULES_MAX 256 /* rules tracked per worker */
#define TOP_N_MAX 1024    /* --top-keys at most */

/* What the command line sets (options.c). */
typedef struct observe_opts {
  const char *log_path; /* --denial-log: a file; "-" is stderr; NULL */
  double log_rate;      /* --log-denials: the share of denials logged
                           (0..1); < 0: not given */
  const char *log_limit; /* --denial-log-limit: a policy for the lines */
  size_t log_buffer;     /* --denial-log-buffer: bytes queued at most */
  int values;            /* --denial-log-values: OBS_VALUES_* */
  const char *secret_path; /* --denial-log-secret: the hash's key */
  int top_k;             /* --top-keys: counters per summary; 0 off */
  int top_window_ms;     /* --top-keys-window */
} observe_opts;

typedef struct denylog denylog;
typedef struct topkeys topkeys;

typedef struct observe {
  observe_opts o;
  uint8_t hash_key[OBS_HASH_KEY]; /* keyed BLAKE2b of shown values */
  uint8_t id_key[OBS_ID_KEY];     /* keyed SipHash of keys (their ids) */
  denylog *log;                   /* NULL: no denial log */
  topkeys *top;                   /* NULL: no top keys */
} observe;

/*
 * Makes what the options ask for (nothing when they ask for neither):
 * the keys, the denial log's file, queue and writer thread, the top keys'
 * tables. 0, or -1 after logging why. Before engine_new: the engine gets
 * observe_decision and obs as its observer.
 */
int observe_start(observe *obs, const observe_opts *o);
/* Registers the metrics (after engine_new, before the workers). -1 when
   the registry is full. */
int observe_metrics(observe *obs, metrics *m);
/* Whether the engine needs an observer. */
int observe_wanted(const observe *obs);
/* The engine's observer (eng_observe_fn). */
void observe_decision(void *ud, unsigned slot, const struct eng_query *q,
                      const struct eng_result *out);
/* SIGUSR1: the denial log's file is opened again (after logrotate moved
   it). */
void observe_reopen(observe *obs);
/* Writes what is queued, stops the writer, frees all. */
void observe_stop(observe *obs);

/* Appends value v (n bytes) as the values mode shows it: the value, its
   keyed hash ("h:" and 16 hex digits), or "[redacted]". Not escaped. */
void observe_value(const observe *obs, strbuf *b, const char *v, size_t n);
/* A key's id: SipHash-2-4 of its bytes under the process's key. */
uint64_t observe_id(const observe *obs, const void *p, size_t n);

/* ---- denylog.c ---- */

denylog *denylog_new(const observe *obs, char *err, size_t len);
int denylog_metrics(denylog *d, metrics *m);
void denylog_decision(denylog *d, unsigned slot, const eng_query *q,
                      const eng_result *out);
/* Whether a denial at now (the decision's clock) is to be a line: the
   sample keeps it and the log's limiter has not closed the log (a
   refusal is counted). */
int denylog_wants(denylog *d, int64_t now);
/* An ad-hoc policy's denial, as a line shows it. */
typedef struct denylog_line {
  int64_t now, limit, remaining, retry_after_ns; /* retry < 0: never */
  int enforced;                 /* else shadow */
  const char *policy, *key, *client; /* client "": unknown */
  size_t policy_len, key_len, client_len;
} denylog_line;
/* Queues the line of denial l (that denylog_wants wanted) in the queue
   of worker slot's lines handed over with its top keys (not the one its
   worker writes); the caller holds the lock those are counted under. */
void denylog_adhoc(denylog *d, unsigned slot, const denylog_line *l);
void denylog_reopen(denylog *d);
void denylog_free(denylog *d);

/* ---- topkeys.c ---- */

topkeys *topkeys_new(const observe *obs, char *err, size_t len);
int topkeys_metrics(topkeys *t, metrics *m);
/* Counts the decision's keys; for an ad-hoc policy, also hands the
   denial log its line (then 1: the log must not see it again). */
int topkeys_decision(topkeys *t, unsigned slot, const eng_query *q,
                     const eng_result *out);
void topkeys_free(topkeys *t);
/* Counts every decision the workers have handed over but the tables do
   not hold yet (their metrics included): before a scrape. t may be
   NULL. */
void topkeys_sync(topkeys *t);

/* One rule's heaviest keys in the current window (the window before and
   the one running). */
typedef struct top_answer {
  uint64_t decisions, denials; /* N of each summary */
  size_t n_dec, n_den;
  topk_item by_decisions[TOP_N_MAX], by_denials[TOP_N_MAX];
} top_answer;

/* Fills *a for rule (its top n of each: at most the summaries' k); 0, or
   -1 out of memory. A rule nobody decided in the window has none. */
int topkeys_query(topkeys *t, const char *rule, size_t n, int64_t now,
                  top_answer *a);
/* GET /v1/top as JSON: rule NULL lists the rules tracked with their
   totals and heaviest key's share. 0, or -1 out of memory (b->oom). */
int topkeys_json(topkeys *t, const char *rule, size_t n, int64_t now,
                 strbuf *b);
/* The page's top keys (GET /v1/stats' "top", docs/ui.md): every rule
   seen in the window with its n heaviest keys by decisions and by
   denials, each named (keys 1, as GET /v1/top names it) or known by its
   id only (keys 0). 0, or -1 out of memory. */
int topkeys_stats_json(topkeys *t, size_t n, int64_t now, int keys,
                       strbuf *b);
/* The Prometheus text of the top-keys gauges (sluice_top_key_share...),
   appended to b. */
void topkeys_prometheus(topkeys *t, int64_t now, strbuf *b);
/* The counters per summary (--top-keys). */
size_t topkeys_k(const topkeys *t);

#endif /* SLUICE_SERVER_OBSERVE_H */
