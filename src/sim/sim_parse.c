/*
 * sim_parse.c — `sluice sim`'s scenario language (sim.h): text, one
 * command a line, into a sim_scenario. A command that makes requests is
 * one record however many requests it makes (a stream of a million costs a
 * few bytes); keys are interned. Every limit a hostile scenario could push
 * (line length, words, keys, retry settings, decisions counting retries)
 * is checked here, with "line N: message".
 */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "../base/hash.h"
#include "../base/num.h"
#include "sim_impl.h"

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
  int32_t cls;   /* current shedder class, -1 = the default */
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
  if (sc->fleet.mode == FLEET_SYNC && sc->nkeys > SIM_SYNC_KEYS)
    return perr(ps->err, ps->err_len, ps->line,
                "more than %d distinct keys in a fleet that syncs (every "
                "sync round visits every key)", SIM_SYNC_KEYS);
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
  c->cls = !sc->shed.on ? 0 : ps->cls >= 0 ? ps->cls : sim_shed_default(&sc->shed);
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
  if (sp->pol.algo == SL_CONCURRENCY) /* its traffic never releases */
    return perr(ps->err, ps->err_len, ps->line,
                "policy %s: the simulator runs rates, not concurrency", w[1]);
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
                "expected 'retry off', 'retry immediate [every D] [max N]', "
                "'retry after [jitter D] [max N]' or 'retry full-jitter BASE "
                "CAP [max N]'");
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
  else if (!strcmp(w[1], "full-jitter"))
    r.mode = RETRY_FULL_JITTER;
  else
    return perr(ps->err, ps->err_len, ps->line,
                "unknown retry mode '%.40s' (expected off, immediate, after "
                "or full-jitter)", w[1]);
  int first = 2;
  if (r.mode == RETRY_FULL_JITTER) { /* BASE CAP come first */
    if (n < 4)
      return perr(ps->err, ps->err_len, ps->line,
                  "'retry full-jitter' needs BASE and CAP durations");
    if (parse_time(ps, "base", w[2], &r.base_ns) ||
        parse_time(ps, "cap", w[3], &r.cap_ns))
      return -1;
    if (r.base_ns == 0 || r.cap_ns < r.base_ns)
      return perr(ps->err, ps->err_len, ps->line,
                  "retry full-jitter: BASE must be positive and CAP at least "
                  "BASE");
    first = 4;
  }
  for (int i = first; i < n; i += 2) {
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
                  "retry after takes jitter and max; retry full-jitter "
                  "takes max)", w[i]);
    }
  }
  char d[40];
  if (r.mode == RETRY_IMMEDIATE)
    snprintf(r.text, sizeof r.text, "retry immediate every %s, max %u attempts",
             lab_fmt_short(r.every_ns, d, sizeof d), r.max_attempts);
  else if (r.mode == RETRY_AFTER)
    snprintf(r.text, sizeof r.text,
             "retry after retry_after + jitter up to %s, max %u attempts",
             lab_fmt_short(r.jitter_ns, d, sizeof d), r.max_attempts);
  else {
    char c[40];
    snprintf(r.text, sizeof r.text,
             "retry full-jitter base %s cap %s after retry_after, max %u "
             "attempts",
             lab_fmt_short(r.base_ns, d, sizeof d),
             lab_fmt_short(r.cap_ns, c, sizeof c), r.max_attempts);
  }
  /* A setting given again is the same one (its figures add up under the
     line that first gave it). */
  for (size_t i = 0; i < sc->nretry; i++)
    if (sc->retry[i].mode == r.mode && sc->retry[i].every_ns == r.every_ns &&
        sc->retry[i].jitter_ns == r.jitter_ns &&
        sc->retry[i].base_ns == r.base_ns && sc->retry[i].cap_ns == r.cap_ns &&
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

/* 'store down' or 'store up': the fleet's shared store fails or comes
   back at the current time (a command of its own, so that it takes its
   place among the requests of the same instant in scenario order). */
static int parse_store(parse_state *ps, char **w, int n) {
  sim_scenario *sc = ps->sc;
  if (n != 2 || (strcmp(w[1], "down") && strcmp(w[1], "up")))
    return perr(ps->err, ps->err_len, ps->line, "expected 'store down' or "
                "'store up'");
  if (sc->fleet.nodes == 0)
    return perr(ps->err, ps->err_len, ps->line, "store %s needs a fleet "
                "first: 'fleet N store exact on_store_error allow|deny|"
                "local'", w[1]);
  if (sc->ncmd == sc->capcmd) {
    size_t ncap = sc->capcmd ? sc->capcmd * 2 : 16;
    sim_cmd *nc = realloc(sc->cmd, ncap * sizeof *nc);
    if (!nc) return perr(ps->err, ps->err_len, ps->line, "out of memory");
    sc->cmd = nc;
    sc->capcmd = ncap;
  }
  sc->cmd[sc->ncmd++] = (sim_cmd){.line = ps->line, .kind = CMD_STORE,
                                  .t0 = ps->now, .instants = 1,
                                  .cost = w[1][0] == 'd', .retry = -1};
  return 0;
}

/* One line, already split into n words. */
static int parse_line(parse_state *ps, char **w, int n) {
  const char *cmd = w[0];
  int64_t v;
  if (!strcmp(cmd, "policy")) return parse_policy(ps, w, n);
  if (!strcmp(cmd, "retry")) return parse_retry(ps, w, n);
  if (!strcmp(cmd, "fleet")) {
    if (ps->sc->ncmd)
      return perr(ps->err, ps->err_len, ps->line,
                  "fleet comes after the first request: describe the fleet "
                  "before the traffic");
    return sim_fleet_parse(&ps->sc->fleet, ps->line, w, n, ps->err,
                           ps->err_len);
  }
  if (!strcmp(cmd, "store")) return parse_store(ps, w, n);
  if (!strcmp(cmd, "shedder")) {
    if (ps->sc->ncmd || ps->sc->shed.on)
      return perr(ps->err, ps->err_len, ps->line,
                  "one shedder, before the first request");
    return sim_shed_parse(&ps->sc->shed, ps->line, w, n, ps->err,
                          ps->err_len);
  }
  if (!strcmp(cmd, "class")) {
    int c = n == 2 && ps->sc->shed.on ? sim_shed_class(&ps->sc->shed, w[1])
                                      : -1;
    if (c < 0)
      return perr(ps->err, ps->err_len, ps->line,
                  ps->sc->shed.on ? "expected 'class NAME', NAME one of the "
                                    "shedder's classes"
                                  : "class needs a shedder line first");
    ps->cls = c;
    return 0;
  }
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
              "request, burst, every, retry, fleet, store, shedder or class)", cmd);
}

int sim_parse(const char *text, size_t len, uint64_t max_requests,
              sim_scenario **out, char *err, size_t err_len) {
  *out = NULL;
  sim_scenario *sc = calloc(1, sizeof *sc);
  if (!sc) return perr(err, err_len, 0, "out of memory");
  parse_state ps = {.sc = sc, .retry = -1, .cls = -1, .max_requests = max_requests,
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
