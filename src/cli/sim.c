/*
 * sim.c — `sluice sim`: run a scenario against several policies side by
 * side, on a virtual clock, and show what each one did (see sim.h for the
 * language).
 *
 * Every decision is the library's own: one store, one sl_limiter per policy
 * (the same key under two limiters is two states), `now` from the scenario.
 * Nothing is sampled or approximated except the plot's pixels: the summary's
 * max_in_window is computed exactly over each policy's allowed history.
 *
 * Requests are never materialised: a command is one record (a stream of a
 * million requests costs a few bytes), and the runner merges the commands
 * by time with a heap. Retries depend on each policy's answers, so every
 * policy has its own queue of retries; a step is one command at one instant
 * (decided by every policy) or the retries due at one instant.
 */
#include "sim.h"

#include "../base/hash.h"

#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "lab.h"
#include "sluice.h"
#include "svg.h"

#define NS_MS INT64_C(1000000)
#define NS_S INT64_C(1000000000)
/* The scenario clock runs from 0 to 100 years: far enough for any
   scenario, and retries beyond it still stay below SL_TIME_MAX_NS. */
#define SIM_TIME_MAX (INT64_C(36500) * 86400 * NS_S)
#define SIM_NAME_MAX 32
#define SIM_LINE_MAX 4096
#define SIM_WORDS 16
#define SIM_MAX_ATTEMPTS 1000000
/* Distinct keys and retry settings: plenty to see what a limiter does, and
   bounds on the memory a hostile scenario can make the run take. */
#define SIM_MAX_KEYS 100000
#define SIM_MAX_RETRY_SETTINGS 64

enum { CMD_REQUEST, CMD_BURST, CMD_EVERY };
enum { RETRY_OFF, RETRY_IMMEDIATE, RETRY_AFTER };

typedef struct sim_policy {
  char name[SIM_NAME_MAX + 1];
  char spec[96]; /* canonical spelling */
  sl_policy pol;
  int64_t capacity; /* the largest cost it can allow: burst or limit */
} sim_policy;

typedef struct sim_retry {
  int line;
  int mode;
  int64_t every_ns, jitter_ns;
  uint32_t max_attempts;
  char text[128]; /* as shown in the report */
} sim_retry;

/* One request-making command: `instants` instants, every_ns apart from t0,
   each with per_instant requests of `cost` for `key`. */
typedef struct sim_cmd {
  int line;
  int kind;
  int64_t t0, every_ns;
  uint64_t instants, per_instant;
  uint32_t key;
  int64_t cost;
  int32_t retry; /* index in retries, -1 = off */
} sim_cmd;

struct sim_scenario {
  sim_policy pol[SIM_MAX_POLICIES];
  int npol;
  sim_cmd *cmd;
  size_t ncmd, capcmd;
  char **keys;
  size_t nkeys, capkeys;
  uint32_t *kindex; /* open addressing: key index + 1, 0 = empty */
  size_t kindex_cap;
  sim_retry *retry;
  size_t nretry, capretry;
  uint64_t requests; /* first attempts */
  char description[640]; /* up to 6 lines */
};

/* ---- parsing --------------------------------------------------------- */

static int perr(char *err, size_t err_len, int line, const char *fmt, ...) {
  if (err && err_len) {
    int n = snprintf(err, err_len, "line %d: ", line);
    if (n > 0 && (size_t)n < err_len) {
      va_list ap;
      va_start(ap, fmt);
      vsnprintf(err + n, err_len - (size_t)n, fmt, ap);
      va_end(ap);
    }
  }
  return -1;
}

/* The index of key (interned on first use), or -1 out of memory. */
static int64_t intern_key(sim_scenario *sc, const char *key) {
  if (sc->nkeys * 2 >= sc->kindex_cap) {
    size_t ncap = sc->kindex_cap ? sc->kindex_cap * 2 : 64;
    uint32_t *n = calloc(ncap, sizeof *n);
    if (!n) return -1;
    for (size_t i = 0; i < sc->kindex_cap; i++) {
      if (!sc->kindex[i]) continue;
      size_t j = fnv1a_str(FNV1A_INIT, sc->keys[sc->kindex[i] - 1]) & (ncap - 1);
      while (n[j]) j = (j + 1) & (ncap - 1);
      n[j] = sc->kindex[i];
    }
    free(sc->kindex);
    sc->kindex = n;
    sc->kindex_cap = ncap;
  }
  size_t j = fnv1a_str(FNV1A_INIT, key) & (sc->kindex_cap - 1);
  while (sc->kindex[j]) {
    if (!strcmp(sc->keys[sc->kindex[j] - 1], key)) return sc->kindex[j] - 1;
    j = (j + 1) & (sc->kindex_cap - 1);
  }
  if (sc->nkeys == sc->capkeys) {
    size_t ncap = sc->capkeys ? sc->capkeys * 2 : 16;
    char **n = realloc(sc->keys, ncap * sizeof *n);
    if (!n) return -1;
    sc->keys = n;
    sc->capkeys = ncap;
  }
  char *copy = strdup(key);
  if (!copy) return -1;
  sc->keys[sc->nkeys] = copy;
  sc->kindex[j] = (uint32_t)++sc->nkeys;
  return (int64_t)sc->nkeys - 1;
}

static int valid_name(const char *s) {
  size_t n = strlen(s);
  if (n == 0 || n > SIM_NAME_MAX) return 0;
  for (; *s; s++)
    if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') ||
          (*s >= '0' && *s <= '9') || *s == '_' || *s == '-' || *s == '.'))
      return 0;
  return 1;
}

/* Parser state that lives only while parsing. */
typedef struct parse_state {
  sim_scenario *sc;
  int line;
  int64_t now;
  int32_t retry; /* current retry setting, -1 = off */
  uint64_t max_requests;
  uint64_t decisions; /* requests x attempts, per policy, so far */
  char *err;
  size_t err_len;
} parse_state;

static int parse_time(parse_state *ps, const char *what, const char *s,
                      int64_t *out) {
  char msg[200];
  if (lab_parse_duration(s, SIM_TIME_MAX, out, msg, sizeof msg))
    return perr(ps->err, ps->err_len, ps->line, "%s: %s", what, msg);
  return 0;
}

/* Adds a request-making command after checking what it makes. */
static int add_requests(parse_state *ps, int kind, int64_t every_ns,
                        uint64_t instants, uint64_t per_instant,
                        const char *key, const char *cost_s) {
  sim_scenario *sc = ps->sc;
  if (sc->npol == 0)
    return perr(ps->err, ps->err_len, ps->line,
                "no policy yet: a scenario starts with 'policy NAME SPEC'");
  if (!key) key = "client";
  if (strlen(key) > SL_KEY_MAX)
    return perr(ps->err, ps->err_len, ps->line,
                "key longer than %d bytes", SL_KEY_MAX);
  int64_t cost = 1;
  if (cost_s && parse_int(cost_s, 0, SL_LIMIT_MAX, 0, &cost))
    return perr(ps->err, ps->err_len, ps->line,
                "cost '%s' is not an integer from 0 to %u", cost_s,
                SL_LIMIT_MAX);
  for (int p = 0; p < sc->npol; p++)
    if (cost > sc->pol[p].capacity)
      return perr(ps->err, ps->err_len, ps->line,
                  "cost %lld exceeds policy %s (%s): no request that large "
                  "can ever pass", (long long)cost, sc->pol[p].name,
                  sc->pol[p].spec);
  /* The cap counts every decision the command may cause, retries too. */
  uint64_t attempts = ps->retry >= 0 ? sc->retry[ps->retry].max_attempts : 1;
  uint64_t room = ps->max_requests - ps->decisions;
  if (instants > room || per_instant > room / instants ||
      instants * per_instant > room / attempts)
    return perr(ps->err, ps->err_len, ps->line,
                "too many requests: the scenario would make more than "
                "%llu decisions per policy (requests x retry attempts)",
                (unsigned long long)ps->max_requests);
  ps->decisions += instants * per_instant * attempts;
  size_t before = sc->nkeys;
  int64_t kidx = intern_key(sc, key);
  if (kidx < 0) return perr(ps->err, ps->err_len, ps->line, "out of memory");
  if (sc->nkeys > before && sc->nkeys > SIM_MAX_KEYS)
    return perr(ps->err, ps->err_len, ps->line,
                "more than %d distinct keys", SIM_MAX_KEYS);
  if (sc->ncmd == sc->capcmd) {
    size_t ncap = sc->capcmd ? sc->capcmd * 2 : 16;
    sim_cmd *n = realloc(sc->cmd, ncap * sizeof *n);
    if (!n) return perr(ps->err, ps->err_len, ps->line, "out of memory");
    sc->cmd = n;
    sc->capcmd = ncap;
  }
  sim_cmd *c = &sc->cmd[sc->ncmd++];
  memset(c, 0, sizeof *c);
  c->line = ps->line;
  c->kind = kind;
  c->t0 = ps->now;
  c->every_ns = every_ns;
  c->instants = instants;
  c->per_instant = per_instant;
  c->key = (uint32_t)kidx;
  c->cost = cost;
  c->retry = ps->retry;
  sc->requests += instants * per_instant;
  return 0;
}

static int parse_policy(parse_state *ps, char **w, int n) {
  sim_scenario *sc = ps->sc;
  if (n != 3)
    return perr(ps->err, ps->err_len, ps->line,
                "expected 'policy NAME SPEC', e.g. policy api gcra:10/s");
  if (sc->ncmd)
    return perr(ps->err, ps->err_len, ps->line,
                "policy '%.32s' comes after the first request: declare every "
                "policy first, so that all of them see every request", w[1]);
  if (!valid_name(w[1]))
    return perr(ps->err, ps->err_len, ps->line,
                "policy name '%.40s' must be 1 to %d letters, digits, '_', "
                "'-' or '.'", w[1], SIM_NAME_MAX);
  for (int p = 0; p < sc->npol; p++)
    if (!strcmp(sc->pol[p].name, w[1]))
      return perr(ps->err, ps->err_len, ps->line,
                  "policy '%s' is declared twice", w[1]);
  if (sc->npol == SIM_MAX_POLICIES)
    return perr(ps->err, ps->err_len, ps->line,
                "more than %d policies", SIM_MAX_POLICIES);
  sim_policy *sp = &sc->pol[sc->npol];
  char msg[256];
  if (sl_policy_parse(w[2], &sp->pol, msg, sizeof msg))
    return perr(ps->err, ps->err_len, ps->line, "policy %s: %s", w[1], msg);
  snprintf(sp->name, sizeof sp->name, "%s", w[1]);
  sl_policy_format(&sp->pol, sp->spec, sizeof sp->spec);
  sp->capacity = sp->pol.burst ? sp->pol.burst : sp->pol.limit;
  sc->npol++;
  return 0;
}

static int parse_retry(parse_state *ps, char **w, int n) {
  sim_scenario *sc = ps->sc;
  if (n < 2)
    return perr(ps->err, ps->err_len, ps->line,
                "expected 'retry off', 'retry immediate [every D] [max N]' or "
                "'retry after [jitter D] [max N]'");
  sim_retry r = {.line = ps->line, .every_ns = 10 * NS_MS, .max_attempts = 100};
  if (!strcmp(w[1], "off")) {
    if (n != 2)
      return perr(ps->err, ps->err_len, ps->line,
                  "unexpected '%.40s' after 'retry off'", w[2]);
    ps->retry = -1;
    return 0;
  }
  if (!strcmp(w[1], "immediate"))
    r.mode = RETRY_IMMEDIATE;
  else if (!strcmp(w[1], "after"))
    r.mode = RETRY_AFTER;
  else
    return perr(ps->err, ps->err_len, ps->line,
                "unknown retry mode '%.40s' (expected off, immediate or "
                "after)", w[1]);
  for (int i = 2; i < n; i += 2) {
    if (i + 1 >= n)
      return perr(ps->err, ps->err_len, ps->line,
                  "'%.40s' needs a value", w[i]);
    if (!strcmp(w[i], "max")) {
      int64_t v;
      if (parse_int(w[i + 1], 1, SIM_MAX_ATTEMPTS, 0, &v))
        return perr(ps->err, ps->err_len, ps->line,
                    "max '%.40s' is not a number of attempts from 1 to %d",
                    w[i + 1], SIM_MAX_ATTEMPTS);
      r.max_attempts = (uint32_t)v;
    } else if (!strcmp(w[i], "every") && r.mode == RETRY_IMMEDIATE) {
      if (parse_time(ps, "every", w[i + 1], &r.every_ns)) return -1;
      if (r.every_ns == 0)
        return perr(ps->err, ps->err_len, ps->line,
                    "retry every '%.40s' must be positive", w[i + 1]);
    } else if (!strcmp(w[i], "jitter") && r.mode == RETRY_AFTER) {
      if (parse_time(ps, "jitter", w[i + 1], &r.jitter_ns)) return -1;
    } else {
      return perr(ps->err, ps->err_len, ps->line,
                  "unexpected '%.40s' (retry immediate takes every and max; "
                  "retry after takes jitter and max)", w[i]);
    }
  }
  char d[40];
  if (r.mode == RETRY_IMMEDIATE)
    snprintf(r.text, sizeof r.text, "retry immediate every %s, max %u attempts",
             lab_fmt_short(r.every_ns, d, sizeof d), r.max_attempts);
  else
    snprintf(r.text, sizeof r.text,
             "retry after retry_after + jitter up to %s, max %u attempts",
             lab_fmt_short(r.jitter_ns, d, sizeof d), r.max_attempts);
  /* A setting given again is the same one (its figures add up under the
     line that first gave it). */
  for (size_t i = 0; i < sc->nretry; i++)
    if (sc->retry[i].mode == r.mode && sc->retry[i].every_ns == r.every_ns &&
        sc->retry[i].jitter_ns == r.jitter_ns &&
        sc->retry[i].max_attempts == r.max_attempts) {
      ps->retry = (int32_t)i;
      return 0;
    }
  if (sc->nretry == SIM_MAX_RETRY_SETTINGS)
    return perr(ps->err, ps->err_len, ps->line,
                "more than %d different retry settings",
                SIM_MAX_RETRY_SETTINGS);
  if (sc->nretry == sc->capretry) {
    size_t ncap = sc->capretry ? sc->capretry * 2 : 4;
    sim_retry *nr = realloc(sc->retry, ncap * sizeof *nr);
    if (!nr) return perr(ps->err, ps->err_len, ps->line, "out of memory");
    sc->retry = nr;
    sc->capretry = ncap;
  }
  sc->retry[sc->nretry] = r;
  ps->retry = (int32_t)sc->nretry++;
  return 0;
}

/* One line, already split into n words. */
static int parse_line(parse_state *ps, char **w, int n) {
  const char *cmd = w[0];
  int64_t v;
  if (!strcmp(cmd, "policy")) return parse_policy(ps, w, n);
  if (!strcmp(cmd, "retry")) return parse_retry(ps, w, n);
  if (!strcmp(cmd, "at") || !strcmp(cmd, "advance")) {
    int at = cmd[0] == 'a' && cmd[1] == 't';
    if (n != 2)
      return perr(ps->err, ps->err_len, ps->line, "expected '%s %s'", cmd,
                  at ? "TIME" : "DURATION");
    if (parse_time(ps, cmd, w[1], &v)) return -1;
    if (at && v < ps->now) {
      char a[40], b[40];
      return perr(ps->err, ps->err_len, ps->line,
                  "at %s goes back in time (the clock is already at %s)",
                  lab_fmt_short(v, a, sizeof a),
                  lab_fmt_short(ps->now, b, sizeof b));
    }
    if (!at && v > SIM_TIME_MAX - ps->now)
      return perr(ps->err, ps->err_len, ps->line,
                  "advance %s: the clock would pass 36500 days", w[1]);
    ps->now = at ? v : ps->now + v;
    return 0;
  }
  if (!strcmp(cmd, "request")) {
    if (n > 3)
      return perr(ps->err, ps->err_len, ps->line,
                  "expected 'request [KEY] [COST]'");
    return add_requests(ps, CMD_REQUEST, 0, 1, 1, n > 1 ? w[1] : NULL,
                        n > 2 ? w[2] : NULL);
  }
  if (!strcmp(cmd, "burst")) {
    if (n < 2 || n > 4)
      return perr(ps->err, ps->err_len, ps->line,
                  "expected 'burst N [KEY] [COST]'");
    if (parse_int(w[1], 1, INT64_MAX, 0, &v))
      return perr(ps->err, ps->err_len, ps->line,
                  "burst '%.40s' is not a positive number of requests", w[1]);
    return add_requests(ps, CMD_BURST, 0, 1, (uint64_t)v, n > 2 ? w[2] : NULL,
                        n > 3 ? w[3] : NULL);
  }
  if (!strcmp(cmd, "every")) {
    if (n < 4 || n > 6 || strcmp(w[2], "for") != 0)
      return perr(ps->err, ps->err_len, ps->line,
                  "expected 'every DURATION for DURATION [KEY] [COST]'");
    int64_t every, span;
    if (parse_time(ps, "every", w[1], &every) ||
        parse_time(ps, "for", w[3], &span))
      return -1;
    if (every == 0)
      return perr(ps->err, ps->err_len, ps->line,
                  "every '%.40s' must be positive", w[1]);
    if (span == 0)
      return perr(ps->err, ps->err_len, ps->line,
                  "for '%.40s' must be positive", w[3]);
    uint64_t instants = (uint64_t)((span + every - 1) / every);
    if (span > SIM_TIME_MAX - ps->now)
      return perr(ps->err, ps->err_len, ps->line,
                  "the stream would run past 36500 days");
    return add_requests(ps, CMD_EVERY, every, instants, 1,
                        n > 4 ? w[4] : NULL, n > 5 ? w[5] : NULL);
  }
  return perr(ps->err, ps->err_len, ps->line,
              "unknown command '%.40s' (expected policy, at, advance, "
              "request, burst, every or retry)", cmd);
}

int sim_parse(const char *text, size_t len, uint64_t max_requests,
              sim_scenario **out, char *err, size_t err_len) {
  *out = NULL;
  sim_scenario *sc = calloc(1, sizeof *sc);
  if (!sc) return perr(err, err_len, 0, "out of memory");
  parse_state ps = {.sc = sc, .retry = -1, .max_requests = max_requests,
                    .err = err, .err_len = err_len};
  char buf[SIM_LINE_MAX + 1];
  size_t pos = 0;
  int described = 0, in_header = 1, rc = 0;
  while (pos < len) {
    ps.line++;
    const char *nl = memchr(text + pos, '\n', len - pos);
    size_t n = nl ? (size_t)(nl - (text + pos)) : len - pos;
    const char *src = text + pos;
    pos += n + (nl != NULL);
    if (n > SIM_LINE_MAX) {
      rc = perr(err, err_len, ps.line, "longer than %d bytes", SIM_LINE_MAX);
      break;
    }
    if (memchr(src, '\0', n)) {
      rc = perr(err, err_len, ps.line, "contains a NUL byte");
      break;
    }
    memcpy(buf, src, n);
    buf[n] = '\0';
    char *words[SIM_WORDS + 1];
    int nw = 0;
    char *s = buf;
    for (;;) {
      s += strspn(s, " \t\r\v\f");
      if (!*s) break;
      if (*s == '#') {
        /* The comment lines before the first command describe the
           scenario (the plot's subtitle, the timeline's heading). */
        if (in_header && nw == 0 && described < 6) {
          const char *d = s + 1 + strspn(s + 1, " \t");
          size_t used = strlen(sc->description);
          snprintf(sc->description + used, sizeof sc->description - used,
                   "%s%s", used ? "\n" : "", d);
          size_t dl = strlen(sc->description);
          while (dl && (sc->description[dl - 1] == '\r' ||
                        sc->description[dl - 1] == ' '))
            sc->description[--dl] = '\0';
          described++;
        }
        break;
      }
      if (nw == SIM_WORDS) {
        nw++;
        break;
      }
      words[nw++] = s;
      s += strcspn(s, " \t\r\v\f");
      if (*s) *s++ = '\0';
    }
    if (nw > SIM_WORDS) {
      rc = perr(err, err_len, ps.line, "more than %d words", SIM_WORDS);
      break;
    }
    if (nw) in_header = 0;
    if (nw && (rc = parse_line(&ps, words, nw)) != 0) break;
  }
  if (!rc && sc->npol == 0)
    rc = perr(err, err_len, ps.line ? ps.line : 1,
              "no policy: a scenario needs at least one 'policy NAME SPEC' "
              "line");
  if (rc) {
    sim_free(sc);
    return -1;
  }
  *out = sc;
  return 0;
}

void sim_free(sim_scenario *sc) {
  if (!sc) return;
  for (size_t i = 0; i < sc->nkeys; i++) free(sc->keys[i]);
  free(sc->keys);
  free(sc->kindex);
  free(sc->cmd);
  free(sc->retry);
  free(sc);
}

const char *sim_description(const sim_scenario *sc) { return sc->description; }

int sim_npolicies(const sim_scenario *sc) { return sc->npol; }

/* The timeline's name of command i ("burst 100 client"), into buf. Built
   when printed: a scenario of a million one-line commands stores no text. */
static const char *cmd_label(const sim_scenario *sc, size_t i, char *buf,
                             size_t len) {
  const sim_cmd *c = &sc->cmd[i];
  const char *key = sc->keys[c->key];
  char d[40], costpart[40] = "";
  if (c->cost != 1)
    snprintf(costpart, sizeof costpart, " cost %lld", (long long)c->cost);
  switch (c->kind) {
  case CMD_REQUEST:
    snprintf(buf, len, "request %.24s%s", key, costpart);
    break;
  case CMD_BURST:
    snprintf(buf, len, "burst %llu %.24s%s",
             (unsigned long long)c->per_instant, key, costpart);
    break;
  default:
    snprintf(buf, len, "every %s %.24s%s",
             lab_fmt_short(c->every_ns, d, sizeof d), key, costpart);
  }
  return buf;
}

/* ---- running ---------------------------------------------------------- */

/* A pending retry of one policy. */
typedef struct retry_ev {
  int64_t t, first_t, cost;
  uint64_t seq;
  uint32_t key, attempt;
  int32_t retry;
} retry_ev;

typedef struct rheap {
  retry_ev *v;
  size_t n, cap;
} rheap;

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

/* What one policy did in one step (or a group of alike steps). */
typedef struct cell {
  int used;
  uint64_t allowed, denied, delayed;
  int64_t remaining, max_delay, retry_after;
} cell;

typedef struct row {
  int active;
  int64_t t_first, t_last;
  uint64_t steps;
  int64_t src; /* command index, -1 for retries */
  cell c[SIM_MAX_POLICIES];
} row;

typedef struct retry_stats {
  uint64_t requests, attempts, served, gave_up;
  int64_t max_wait;
} retry_stats;

typedef struct run_state {
  const sim_scenario *sc;
  const sim_options *opts;
  FILE *out;
  sl_store *store;
  sl_limiter *lim[SIM_MAX_POLICIES];
  lab_window win[SIM_MAX_POLICIES];
  rheap retries[SIM_MAX_POLICIES];
  uint64_t rng[SIM_MAX_POLICIES];
  uint64_t allowed[SIM_MAX_POLICIES], denied[SIM_MAX_POLICIES];
  int64_t max_delay[SIM_MAX_POLICIES];
  retry_stats *rstats; /* nretry x npol */
  uint64_t seq;
  int64_t t_min, t_max; /* first and last decision */
  int any;
  svg_chart *chart; /* the plot pass only */
  size_t next_peek;
  int show; /* print the timeline */
  row pending;
  cell step[SIM_MAX_POLICIES];
  int name_w, label_w;
  int oom;
} run_state;

/* The plotted level of a decision, in the policy's own terms. */
static int64_t level_of(const sl_policy *p, const sl_decision *d) {
  switch (p->algo) {
  case SL_TOKEN_BUCKET:
  case SL_GCRA:
    return d->remaining; /* tokens */
  default:
    return d->limit - d->remaining; /* queue, count, estimate */
  }
}

static const char *level_name(sl_algo a) {
  switch (a) {
  case SL_TOKEN_BUCKET:
  case SL_GCRA:
    return "tokens";
  case SL_LEAKY_BUCKET:
    return "queue";
  case SL_SLIDING_WINDOW:
    return "estimate";
  default:
    return "count";
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
      if (sl_limiter_take(rs->lim[p], key, strlen(key), 0, at, &d) == 0)
        svg_level(c, (size_t)p, at, level_of(&rs->sc->pol[p].pol, &d));
    }
    rs->next_peek++;
  }
}

/* Decides one request under policy p and does the bookkeeping: counts,
   the judge, the plot, and a retry when the client is set to retry. */
static int decide(run_state *rs, int p, int64_t t, uint32_t key, int64_t cost,
                  int32_t retry, uint32_t attempt, int64_t first_t) {
  const sim_scenario *sc = rs->sc;
  const char *k = sc->keys[key];
  sl_decision d;
  int e = sl_limiter_take(rs->lim[p], k, strlen(k), cost, t, &d);
  if (e) return e;
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
      if (r->mode == RETRY_AFTER) {
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
                       .retry = retry};
        if (rheap_push(&rs->retries[p], &ev)) return SL_ENOMEM;
      }
    }
  }
  if (rs->chart) {
    svg_chart *ch = rs->chart;
    svg_count(ch, (size_t)p, t, d.allowed ? (d.delay_ns > 0 ? 1 : 0) : 2, 1);
    if (key == 0) svg_level(ch, (size_t)p, t, level_of(&sc->pol[p].pol, &d));
  }
  return 0;
}

/* ---- the timeline ----------------------------------------------------- */

#define C_GREEN "\033[32m"
#define C_RED "\033[31m"
#define C_YELLOW "\033[33m"
#define C_DIM "\033[2m"
#define C_BOLD "\033[1m"
#define C_OFF "\033[0m"

/* 0 unused, 1 allowed, 2 allowed with delay, 3 denied, 4 mixed. */
static int cell_class(const cell *c) {
  if (!c->used) return 0;
  if (c->allowed && c->denied) return 4;
  if (c->denied) return 3;
  return c->delayed ? 2 : 1;
}

/* Prints one line, without trailing blanks (golden files compare bytes). */
static void put_line(FILE *f, char *line) {
  size_t n = strlen(line);
  while (n && line[n - 1] == ' ') n--;
  line[n] = '\0';
  fprintf(f, "%s\n", line);
}

/*
 * Prints a row: one line per policy that took part, the time and the step
 * on the first; a group of steps says on its second line (or an extra one)
 * where it ends and how many steps it holds.
 */
static void print_row(run_state *rs, const row *r) {
  FILE *f = rs->out;
  const int color = rs->opts->color;
  char t[40], t2[48], steps[40], d[40];
  lab_fmt_fixed(r->t_first, t, sizeof t);
  snprintf(t2, sizeof t2, "to %s", lab_fmt_fixed(r->t_last, d, sizeof d));
  snprintf(steps, sizeof steps, "(%llu steps)", (unsigned long long)r->steps);
  int lineno = 0;
  char line[512], label[128];
  if (r->src >= 0)
    cmd_label(rs->sc, (size_t)r->src, label, sizeof label);
  else
    snprintf(label, sizeof label, "retry");
  for (int p = 0; p < rs->sc->npol; p++) {
    const cell *c = &r->c[p];
    if (!c->used) continue;
    char res[64], note[96] = "";
    uint64_t n = c->allowed + c->denied;
    if (c->allowed && c->denied)
      snprintf(res, sizeof res, "%llu allowed, %llu denied",
               (unsigned long long)c->allowed, (unsigned long long)c->denied);
    else if (n == 1)
      snprintf(res, sizeof res, "%s", c->allowed ? "allowed" : "denied");
    else
      snprintf(res, sizeof res, "%llu %s", (unsigned long long)n,
               c->allowed ? "allowed" : "denied");
    size_t used = 0;
    if (c->max_delay > 0)
      used += (size_t)snprintf(note, sizeof note, "delay %s%s",
                               c->allowed > 1 ? "up to " : "",
                               lab_fmt_short(c->max_delay, d, sizeof d));
    if (c->denied)
      snprintf(note + used, sizeof note - used, "%sretry after %s",
               used ? ", " : "", lab_fmt_short(c->retry_after, d, sizeof d));
    const char *col = !color ? ""
                      : c->allowed && c->denied ? C_YELLOW
                      : c->denied               ? C_RED
                                                : C_GREEN;
    const char *tcol = lineno == 0 ? t : lineno == 1 && r->steps > 1 ? t2 : "";
    const char *scol = lineno == 0   ? label
                       : lineno == 1 && r->steps > 1 ? steps
                                                     : "";
    int pad = 24 - (int)strlen(res);
    snprintf(line, sizeof line, "%12s  %-*s  %-*s  %s%s%s%*s %9lld  %s%s%s",
             tcol, rs->label_w, scol, rs->name_w, rs->sc->pol[p].name, col,
             res, color ? C_OFF : "", pad > 0 ? pad : 0, "",
             (long long)c->remaining,
             color && c->max_delay ? C_YELLOW : "", note,
             color && c->max_delay ? C_OFF : "");
    put_line(f, line);
    lineno++;
  }
  if (lineno == 1 && r->steps > 1) {
    snprintf(line, sizeof line, "%12s  %s", t2, steps);
    put_line(f, line);
  }
}

/* Ends one step: merges it into the pending row or prints that row. */
static void end_step(run_state *rs, int64_t t, int64_t src) {
  const int np = rs->sc->npol;
  row *r = &rs->pending;
  if (rs->show) {
    /* Steps of one command merge while every policy's outcome stays of
       the same kind (all allowed, all delayed, all denied, mixed), so a
       row ends where something changed. Retries merge until a command
       runs: one by one they are noise, and the plot shows them. */
    int same = r->active && !rs->opts->all_steps && r->src == src;
    for (int p = 0; same && src >= 0 && p < np; p++)
      same = cell_class(&r->c[p]) == cell_class(&rs->step[p]);
    if (same) {
      for (int p = 0; p < np; p++) {
        cell *a = &r->c[p];
        const cell *b = &rs->step[p];
        if (!b->used) continue;
        if (!a->used) { /* a policy's first retry in this row */
          *a = *b;
          continue;
        }
        a->allowed += b->allowed;
        a->denied += b->denied;
        a->delayed += b->delayed;
        a->remaining = b->remaining;
        if (b->max_delay > a->max_delay) a->max_delay = b->max_delay;
        if (b->denied) a->retry_after = b->retry_after;
      }
      r->t_last = t;
      r->steps++;
    } else {
      if (r->active) print_row(rs, r);
      r->active = 1;
      r->t_first = r->t_last = t;
      r->steps = 1;
      r->src = src;
      memcpy(r->c, rs->step, sizeof r->c);
    }
  }
  memset(rs->step, 0, sizeof rs->step);
}

static void print_header(run_state *rs) {
  const sim_scenario *sc = rs->sc;
  FILE *f = rs->out;
  const int color = rs->opts->color;
  fprintf(f, "%s%s%s: %llu requests, %d %s", color ? C_BOLD : "",
          rs->opts->name ? rs->opts->name : "scenario", color ? C_OFF : "",
          (unsigned long long)sc->requests, sc->npol,
          sc->npol == 1 ? "policy" : "policies");
  if (sc->nretry) fprintf(f, ", retries on");
  fprintf(f, "\n");
  /* The description is echoed as the comments it was, so no line of it
     can pass for output ("summary policy=..." in a comment). */
  for (const char *d = sc->description; *d;) {
    size_t n = strcspn(d, "\n");
    fprintf(f, "# %.*s\n", (int)n, d);
    d += n + (d[n] == '\n');
  }
  for (int p = 0; p < sc->npol; p++)
    fprintf(f, "  %-*s  %s\n", rs->name_w, sc->pol[p].name, sc->pol[p].spec);
  fprintf(f, "\n%s%12s  %-*s  %-*s  %-24s %9s  %s%s\n", color ? C_DIM : "",
          "time", rs->label_w, "step", rs->name_w, "policy", "result",
          "remaining", "note", color ? C_OFF : "");
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
      for (int p = 0; p < np; p++)
        for (uint64_t i = 0; i < c->per_instant; i++)
          if ((rc = decide(rs, p, cp.t, c->key, c->cost, c->retry, 1, cp.t)))
            goto fail;
      end_step(rs, cp.t, cp.cmd);
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
          if ((rc = decide(rs, p, tr, ev.key, ev.cost, ev.retry, ev.attempt,
                           ev.first_t)))
            goto fail;
        }
      end_step(rs, tr, -1);
    }
  }
  if (rs->chart) peek_until(rs, INT64_MAX);
  if (rs->show && rs->pending.active) print_row(rs, &rs->pending);
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

static void print_retries(run_state *rs) {
  const sim_scenario *sc = rs->sc;
  for (size_t r = 0; r < sc->nretry; r++) {
    int any = 0;
    for (int p = 0; p < sc->npol; p++)
      any |= rs->rstats[r * (size_t)sc->npol + (size_t)p].requests != 0;
    if (!any) continue;
    fprintf(rs->out, "\nline %d: %s\n", sc->retry[r].line, sc->retry[r].text);
    for (int p = 0; p < sc->npol; p++) {
      const retry_stats *st = &rs->rstats[r * (size_t)sc->npol + (size_t)p];
      char d[40];
      fprintf(rs->out,
              "  %-*s  %llu requests, %llu attempts, %llu served, "
              "%llu gave up; last served %s after its first attempt\n",
              rs->name_w, sc->pol[p].name, (unsigned long long)st->requests,
              (unsigned long long)st->attempts, (unsigned long long)st->served,
              (unsigned long long)st->gave_up,
              lab_fmt_short(st->max_wait, d, sizeof d));
    }
  }
}

static void fill_chart(const sim_scenario *sc, const sim_options *opts,
                       const run_state *first, svg_chart *c) {
  snprintf(c->title, sizeof c->title, "sluice sim: %s",
           opts->name ? opts->name : "scenario");
  snprintf(c->subtitle, sizeof c->subtitle, "%s", sc->description);
  c->kinds[0] = (svg_kind){"allowed", "#2ca02c", 0};
  int leaky = 0;
  for (int p = 0; p < sc->npol; p++) leaky |= sc->pol[p].pol.algo == SL_LEAKY_BUCKET;
  if (leaky) c->kinds[1] = (svg_kind){"allowed, delayed", "#f0a020", 0};
  c->kinds[2] = (svg_kind){"denied (below the line)", "#d62728", 1};
  snprintf(c->level_legend, sizeof c->level_legend,
           "state of key '%.40s'",
           sc->nkeys ? sc->keys[0] : "");
  for (int p = 0; p < sc->npol; p++) {
    svg_lane *l = &c->lanes[p];
    const sl_policy *pol = &sc->pol[p].pol;
    snprintf(l->title, sizeof l->title, "%s \xe2\x80\x94 %s", sc->pol[p].name,
             sc->pol[p].spec);
    char d[64] = "", dd[40];
    if (first->max_delay[p] > 0)
      snprintf(d, sizeof d, ", delay up to %s",
               lab_fmt_short(first->max_delay[p], dd, sizeof dd));
    snprintf(l->note, sizeof l->note,
             "allowed %llu, denied %llu, max in window %lld (limit %u)%s",
             (unsigned long long)first->allowed[p],
             (unsigned long long)first->denied[p],
             (long long)first->win[p].worst, pol->limit, d);
    l->level_name = level_name(pol->algo);
    l->level_max = sc->pol[p].capacity;
    l->ref = sc->pol[p].capacity;
    snprintf(l->ref_name, sizeof l->ref_name, "%s %lld",
             pol->burst ? "burst" : "limit", (long long)sc->pol[p].capacity);
    if (pol->algo == SL_FIXED_WINDOW || pol->algo == SL_SLIDING_WINDOW)
      l->boundary_ns = pol->period_ns;
  }
}

int sim_run(const sim_scenario *sc, const sim_options *opts, FILE *out,
            char *err, size_t err_len) {
  run_state rs;
  memset(&rs, 0, sizeof rs);
  rs.sc = sc;
  rs.opts = opts;
  rs.out = out;
  rs.show = !opts->summary_only;
  rs.name_w = 6;
  for (int p = 0; p < sc->npol; p++)
    if ((int)strlen(sc->pol[p].name) > rs.name_w)
      rs.name_w = (int)strlen(sc->pol[p].name);
  rs.label_w = 4;
  char label[128];
  for (size_t i = 0; i < sc->ncmd; i++) {
    int n = (int)strlen(cmd_label(sc, i, label, sizeof label));
    if (n > rs.label_w) rs.label_w = n;
  }
  if (sc->nretry && rs.label_w < 5) rs.label_w = 5;
  if (rs.show) print_header(&rs);
  if (run_pass(&rs, err, err_len)) {
    run_free(&rs);
    return -1;
  }
  if (rs.show) print_retries(&rs);
  if (rs.show) fprintf(out, "\n");
  for (int p = 0; p < sc->npol; p++)
    fprintf(out, "summary policy=%s allowed=%llu denied=%llu "
                 "max_in_window=%lld\n", sc->pol[p].name,
            (unsigned long long)rs.allowed[p], (unsigned long long)rs.denied[p],
            (long long)rs.win[p].worst);

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
    fill_chart(sc, opts, &rs, &chart);
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

/* ---- the command ------------------------------------------------------ */

static void sim_usage(FILE *f) {
  fprintf(f,
          "usage: sluice sim [OPTIONS] SCENARIO|-\n"
          "       sluice sim [OPTIONS] --example NAME\n"
          "       sluice sim --list-examples\n"
          "\n"
          "Runs a scenario against one or more policies side by side, on a\n"
          "virtual clock, with the library's own decisions. Prints a timeline\n"
          "(per step and policy: allowed/denied, remaining, delay, retry\n"
          "after), then one line per policy:\n"
          "  summary policy=NAME allowed=N denied=M max_in_window=K\n"
          "max_in_window: the most cost one key had allowed in any window of\n"
          "the policy's PERIOD, (t-PERIOD, t]; above LIMIT, the policy let a\n"
          "burst through.\n"
          "\n"
          "Scenario: one command per line, '#' starts a comment.\n"
          "  policy NAME SPEC           e.g. policy api gcra:10/s:burst=20;\n"
          "                             1 to 8 policies, before any request\n"
          "  at TIME                    absolute, never backwards: 59.9s, 1m\n"
          "  advance DURATION           e.g. 250ms, 1m30s\n"
          "  request [KEY] [COST]       one request now\n"
          "  burst N [KEY] [COST]       N requests at this same instant\n"
          "  every DURATION for DURATION [KEY] [COST]\n"
          "                             a steady stream starting now; it does\n"
          "                             not move the clock, so other commands\n"
          "                             can run alongside\n"
          "  retry immediate [every D] [max N]\n"
          "  retry after [jitter D] [max N]\n"
          "  retry off                  what the clients of the requests that\n"
          "                             follow do when denied: try again D\n"
          "                             later (default 10ms), or after the\n"
          "                             policy's retry_after plus a random\n"
          "                             jitter in [0, D] (seeded); at most N\n"
          "                             attempts (default 100)\n"
          "KEY defaults to 'client', COST to 1 (0 peeks). Durations: a number\n"
          "with optional fraction and a unit ms, s, m, h or d, or several\n"
          "(1m30s); exact to the nanosecond. At most %llu decisions per\n"
          "policy, counting retries.\n"
          "\n"
          "options:\n"
          "  -e, --example NAME    run a built-in scenario\n"
          "  -l, --list-examples   list the built-in scenarios\n"
          "  -P, --print           print the scenario's text instead of running\n"
          "                        it (a start for your own)\n"
          "  -o, --svg FILE        also draw a plot: one lane per policy with\n"
          "                        allowed/denied marks, the state of the first\n"
          "                        key as a line, window boundaries\n"
          "  -a, --all-steps       one timeline row per step (default: alike\n"
          "                        consecutive steps of a command are grouped)\n"
          "  -q, --summary-only    print only the summary lines\n"
          "      --color WHEN      auto (default: if stdout is a terminal and\n"
          "                        NO_COLOR is unset), always or never\n"
          "  -s, --seed S          seed of the retry jitter (default 1)\n"
          "  -h, --help            this help\n"
          "\n"
          "Exit status: 0; 1 on a bad scenario ('line N: message') or an\n"
          "unreadable file; 2 on bad options.\n",
          (unsigned long long)SIM_MAX_REQUESTS);
}

/* Reads all of f (at most SIM_MAX_BYTES). 0, or -1 with errno / EFBIG. */
static int read_all(FILE *f, char **out, size_t *len) {
  size_t cap = 1 << 16, n = 0;
  char *buf = malloc(cap);
  if (!buf) return -1;
  for (;;) {
    if (n == cap) {
      if (cap >= SIM_MAX_BYTES) {
        free(buf);
        errno = EFBIG;
        return -1;
      }
      char *nb = realloc(buf, cap * 2);
      if (!nb) {
        free(buf);
        return -1;
      }
      buf = nb;
      cap *= 2;
    }
    size_t got = fread(buf + n, 1, cap - n, f);
    n += got;
    if (got == 0) break;
  }
  if (ferror(f)) {
    int e = errno; /* fread's own reason: EISDIR, EIO, ... */
    free(buf);
    errno = e ? e : EIO;
    return -1;
  }
  *out = buf;
  *len = n;
  return 0;
}

int cmd_sim(int argc, char **argv) {
  static const struct option opts[] = {
      {"example", required_argument, NULL, 'e'},
      {"list-examples", no_argument, NULL, 'l'},
      {"print", no_argument, NULL, 'P'},
      {"svg", required_argument, NULL, 'o'},
      {"all-steps", no_argument, NULL, 'a'},
      {"summary-only", no_argument, NULL, 'q'},
      {"quiet", no_argument, NULL, 'q'},
      {"color", required_argument, NULL, 'C'},
      {"seed", required_argument, NULL, 's'},
      {"help", no_argument, NULL, 'h'},
      {NULL, 0, NULL, 0}};
  const char *example = NULL, *svg_path = NULL, *color_when = "auto";
  int list = 0, print = 0, c;
  sim_options so = {.seed = 1};
  int64_t seed;
  optind = 1;
  while ((c = getopt_long(argc, argv, "e:lPo:aqs:h", opts, NULL)) != -1) {
    switch (c) {
    case 'e': example = optarg; break;
    case 'l': list = 1; break;
    case 'P': print = 1; break;
    case 'o': svg_path = optarg; break;
    case 'a': so.all_steps = 1; break;
    case 'q': so.summary_only = 1; break;
    case 'C': color_when = optarg; break;
    case 's':
      if (parse_int(optarg, 0, INT64_MAX, 0, &seed)) {
        fprintf(stderr, "sluice sim: --seed '%s' is not a non-negative "
                        "integer\n", optarg);
        return 2;
      }
      so.seed = (uint64_t)seed;
      break;
    case 'h': sim_usage(stdout); return 0;
    default: sim_usage(stderr); return 2;
    }
  }
  if (!strcmp(color_when, "always"))
    so.color = 1;
  else if (!strcmp(color_when, "never"))
    so.color = 0;
  else if (!strcmp(color_when, "auto"))
    so.color = isatty(STDOUT_FILENO) && !getenv("NO_COLOR");
  else {
    fprintf(stderr, "sluice sim: --color '%s': expected auto, always or "
                    "never\n", color_when);
    return 2;
  }
  if (list) {
    for (size_t i = 0; i < sim_nexamples; i++)
      printf("%-16s %s\n", sim_examples[i].name, sim_examples[i].what);
    return 0;
  }
  int nargs = argc - optind;
  if ((example && nargs) || (!example && nargs != 1)) {
    fprintf(stderr, "sluice sim: give one scenario file, '-' or --example "
                    "NAME\n\n");
    sim_usage(stderr);
    return 2;
  }

  char *text = NULL;
  size_t len = 0;
  const char *name;
  char namebuf[256];
  if (example) {
    const sim_example *ex = NULL;
    for (size_t i = 0; i < sim_nexamples; i++)
      if (!strcmp(sim_examples[i].name, example)) ex = &sim_examples[i];
    if (!ex) {
      fprintf(stderr, "sluice sim: no example '%s' (try --list-examples)\n",
              example);
      return 2;
    }
    len = strlen(ex->text);
    text = malloc(len + 1);
    if (!text) {
      fprintf(stderr, "sluice sim: out of memory\n");
      return 1;
    }
    memcpy(text, ex->text, len + 1);
    name = ex->name;
  } else {
    const char *path = argv[optind];
    FILE *in = strcmp(path, "-") ? fopen(path, "r") : stdin;
    if (!in || read_all(in, &text, &len)) {
      fprintf(stderr, "sluice sim: %s: %s\n", path,
              errno == EFBIG ? "larger than 16 MiB" : strerror(errno));
      if (in && in != stdin) fclose(in);
      return 1;
    }
    if (in != stdin) fclose(in);
    const char *base = strrchr(path, '/');
    snprintf(namebuf, sizeof namebuf, "%s",
             strcmp(path, "-") ? (base ? base + 1 : path) : "<stdin>");
    name = namebuf;
  }
  if (print) {
    fwrite(text, 1, len, stdout);
    free(text);
    return fflush(stdout) ? 1 : 0;
  }
  so.name = name;

  sim_scenario *sc;
  char err[512];
  if (sim_parse(text, len, SIM_MAX_REQUESTS, &sc, err, sizeof err)) {
    fprintf(stderr, "sluice sim: %s: %s\n", name, err);
    free(text);
    return 1;
  }
  free(text);
  if (svg_path && !(so.svg = fopen(svg_path, "w"))) {
    fprintf(stderr, "sluice sim: %s: %s\n", svg_path, strerror(errno));
    sim_free(sc);
    return 1;
  }
  int rc = sim_run(sc, &so, stdout, err, sizeof err);
  if (rc) fprintf(stderr, "sluice sim: %s: %s\n", name, err);
  if (so.svg && fclose(so.svg) != 0 && !rc) {
    fprintf(stderr, "sluice sim: %s: %s\n", svg_path, strerror(errno));
    rc = -1;
  }
  sim_free(sc);
  if (fflush(stdout) != 0) rc = -1;
  return rc ? 1 : 0;
}
