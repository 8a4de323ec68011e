/*
 * replay.c — `sluice replay`: run a policy over a trace of requests.
 *
 * Input, one request per line: "T KEY [COST]" (T in ms since the epoch,
 * non-decreasing; COST >= 0, default 1); blank lines and '#' comments are
 * skipped. Output, exactly one line per request:
 *   T KEY allow|deny remaining=R reset=MS retry_after=MS delay=MS
 * with every duration rounded up to whole milliseconds. The decisions are the
 * library's own (same store, same algorithm code), so a replay of last week's
 * access log shows what a candidate policy would have done to it.
 *
 * With --candidate B, each request is decided under both, the way the daemon
 * decides a rule's `candidate` (sl_take_all: the policy enforced, the
 * candidate a shadow check charged when the request is), and only the
 * requests where they disagree are printed:
 *   T KEY would_deny|would_allow remaining=R candidate_remaining=R2
 * then one summary line: how many requests each way and how many distinct
 * clients (keys) the candidate would newly reject or newly let through.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "sluice.h"

static void replay_usage(FILE *f) {
  fprintf(f,
          "usage: sluice replay --policy SPEC [--candidate SPEC] [OPTIONS] "
          "[FILE]\n"
          "\n"
          "Decides every request of a trace (FILE, or standard input) under\n"
          "one policy, as the library would, and prints one line each:\n"
          "  T KEY allow|deny remaining=R reset=MS retry_after=MS delay=MS\n"
          "\n"
          "Input: one request per line, 'T KEY [COST]': T in milliseconds\n"
          "since the epoch (non-decreasing), KEY without whitespace, COST an\n"
          "integer >= 0 (default 1; 0 peeks). Blank lines and lines starting\n"
          "with '#' are skipped. Durations print rounded up to whole ms.\n"
          "\n"
          "options:\n"
          "  -p, --policy SPEC       ALGORITHM:LIMIT/PERIOD[:burst=N], e.g.\n"
          "                          token_bucket:2/s:burst=10\n"
          "  -c, --candidate SPEC    decide each request under SPEC too (a\n"
          "                          shadow of the policy, as a rule's\n"
          "                          candidate in the daemon) and print only\n"
          "                          the requests where they disagree:\n"
          "                          T KEY would_deny|would_allow remaining=R\n"
          "                          candidate_remaining=R2, then a summary line\n"
          "                          (requests, each way, distinct keys each way)\n"
          "  -m, --max-memory BYTES  store cap (K/M/G suffixes; default 1G)\n"
          "  -s, --summary           print totals to standard error at the end\n"
          "  -h, --help              this help\n"
          "\n"
          "Exit status: 0; 1 on a malformed line (reported with its line\n"
          "number) or an unreadable file; 2 on bad options or policy.\n");
}


/* Splits off the next whitespace-delimited field of *s (NUL-terminated). */
static char *next_field(char **s) {
  char *p = *s + strspn(*s, " \t\r\n");
  if (!*p) return NULL;
  char *e = p + strcspn(p, " \t\r\n");
  if (*e) *e++ = '\0';
  *s = e;
  return p;
}

/* With a candidate: prints and counts the request (T, key) when the
   candidate's decision c disagrees with the policy's (d); a key's
   first divergence each way is counted once (the seen limiters allow a
   key once: fixed_window:1/3650d). */
static void diverged(FILE *out, const char *t, const char *key,
                     const replay_candidate *cand, const sl_decision *d,
                     const sl_decision *c, replay_counts *n) {
  int allowed = d->allowed;
  if (c->allowed == allowed) return;
  sl_limiter *seen = allowed ? cand->seen_deny : cand->seen_allow;
  sl_decision first;
  int is_first = sl_limiter_take(seen, key, strlen(key), 1, 0, &first) == 0 &&
                 first.allowed;
  if (allowed) {
    n->would_deny++;
    n->keys_would_deny += is_first;
  } else {
    n->would_allow++;
    n->keys_would_allow += is_first;
  }
  fprintf(out, "%s %s %s remaining=%lld candidate_remaining=%lld\n", t, key,
          allowed ? "would_deny" : "would_allow", (long long)d->remaining,
          (long long)c->remaining);
}

int replay_stream(FILE *in, FILE *out, const char *name, sl_limiter *lim,
                  const replay_candidate *cand, sl_store *store,
                  replay_counts *n) {
  char *line = NULL;
  size_t cap = 0;
  long lineno = 0;
  int64_t last_ms = -1;
  int rc = 0;
  const int64_t max_ms = (SL_TIME_MAX_NS - 1) / 1000000;
  while (getline(&line, &cap, in) >= 0) {
    lineno++;
    char *s = line;
    char *t = next_field(&s);
    if (!t || *t == '#') continue;
    char *key = next_field(&s), *cost_s = next_field(&s);
    char *extra = next_field(&s);
    int64_t ms, cost = 1;
    const char *err = NULL;
    if (parse_int(t, 0, max_ms, 0, &ms))
      err = "time is not an integer number of milliseconds in range";
    else if (!key)
      err = "missing KEY (expected 'T KEY [COST]')";
    else if (cost_s && parse_int(cost_s, 0, INT64_MAX, 0, &cost))
      err = "COST is not an integer >= 0";
    else if (extra)
      err = "unexpected text after COST (expected 'T KEY [COST]')";
    else if (ms < last_ms)
      err = "time goes backwards (the trace must be in time order)";
    if (err) {
      fprintf(stderr, "sluice replay: %s:%ld: %s\n", name, lineno, err);
      rc = 1;
      break;
    }
    last_ms = ms;
    sl_decision d, dd[2];
    int e;
    if (cand) {
      sl_check ck[2] = {{lim, key, strlen(key), cost, 0},
                        {cand->lim, key, strlen(key), cost, 1}};
      int all;
      e = sl_take_all(ck, 2, ms * 1000000, dd, &all);
      d = dd[0];
    } else {
      e = sl_limiter_take(lim, key, strlen(key), cost, ms * 1000000, &d);
    }
    if (e) {
      if (e == SL_ECOST)
        fprintf(stderr,
                "sluice replay: %s:%ld: cost %lld exceeds the policy's "
                "capacity %u: no request that large can ever pass\n",
                name, lineno, (long long)cost,
                sl_limiter_policy(lim)->burst ? sl_limiter_policy(lim)->burst
                                              : sl_limiter_policy(lim)->limit);
      else
        fprintf(stderr, "sluice replay: %s:%ld: %s\n", name, lineno,
                sl_strerror(e));
      rc = 1;
      break;
    }
    if (cand)
      diverged(out, t, key, cand, &d, &dd[1], n);
    else
      fprintf(out,
              "%s %s %s remaining=%lld reset=%lld retry_after=%lld "
              "delay=%lld\n",
              t, key, d.allowed ? "allow" : "deny", (long long)d.remaining,
              (long long)ns_to_ms_up(d.reset_ns),
              (long long)ns_to_ms_up(d.retry_after_ns),
              (long long)ns_to_ms_up(d.delay_ns));
    n->requests++;
    if (d.allowed)
      n->allowed++;
    else
      n->denied++;
    /* Keep memory to the live keys, as the daemon's timer does. */
    if ((n->requests & 1023) == 0) sl_store_expire(store, ms * 1000000, 4096);
  }
  free(line);
  if (!rc && ferror(in)) {
    fprintf(stderr, "sluice replay: %s: read error\n", name);
    rc = 1;
  }
  return rc;
}

/* Frees the replay's limiters (NULLs skipped). */
static void limiter_free_all(sl_limiter *lim, replay_candidate *c) {
  sl_limiter_free(lim);
  sl_limiter_free(c->lim);
  sl_limiter_free(c->seen_deny);
  sl_limiter_free(c->seen_allow);
}

int cmd_replay(int argc, char **argv) {
  static const struct option opts[] = {
      {"policy", required_argument, NULL, 'p'},
      {"candidate", required_argument, NULL, 'c'},
      {"max-memory", required_argument, NULL, 'm'},
      {"summary", no_argument, NULL, 's'},
      {"help", no_argument, NULL, 'h'},
      {NULL, 0, NULL, 0}};
  const char *spec = NULL, *cand_spec = NULL;
  int64_t max_memory = (int64_t)1 << 30;
  int summary = 0, c;
  optind = 1;
  while ((c = getopt_long(argc, argv, "p:c:m:sh", opts, NULL)) != -1) {
    switch (c) {
    case 'p':
      spec = optarg;
      break;
    case 'c':
      cand_spec = optarg;
      break;
    case 'm':
      if (parse_int(optarg, 1, INT64_MAX, 1, &max_memory)) {
        fprintf(stderr, "sluice replay: --max-memory '%s' is not a byte "
                        "count (e.g. 512M)\n", optarg);
        return 2;
      }
      break;
    case 's':
      summary = 1;
      break;
    case 'h':
      replay_usage(stdout);
      return 0;
    default:
      replay_usage(stderr);
      return 2;
    }
  }
  if (!spec) {
    fprintf(stderr, "sluice replay: --policy is required\n\n");
    replay_usage(stderr);
    return 2;
  }
  if (argc - optind > 1) {
    fprintf(stderr, "sluice replay: one trace file at most\n");
    return 2;
  }
  sl_policy policy, cpolicy, once;
  char err[256];
  if (sl_policy_parse(spec, &policy, err, sizeof err)) {
    fprintf(stderr, "sluice replay: --policy: %s\n", err);
    return 2;
  }
  if (cand_spec && sl_policy_parse(cand_spec, &cpolicy, err, sizeof err)) {
    fprintf(stderr, "sluice replay: --candidate: %s\n", err);
    return 2;
  }
  sl_policy_parse("fixed_window:1/3650d", &once, NULL, 0);
  const char *name = optind < argc ? argv[optind] : "-";
  FILE *in = stdin;
  if (strcmp(name, "-") != 0 && !(in = fopen(name, "r"))) {
    fprintf(stderr, "sluice replay: %s: %s\n", name, strerror(errno));
    return 1;
  }
  sl_store_options so;
  sl_store_options_init(&so);
  so.max_memory = (size_t)max_memory;
  sl_store *store = NULL;
  sl_limiter *lim = NULL;
  replay_candidate cand = {NULL, NULL, NULL};
  int rc = sl_store_new(&so, &store);
  if (!rc) rc = sl_limiter_new(store, &policy, &lim);
  if (!rc && cand_spec) rc = sl_limiter_new(store, &cpolicy, &cand.lim);
  if (!rc && cand_spec) rc = sl_limiter_new(store, &once, &cand.seen_deny);
  if (!rc && cand_spec) rc = sl_limiter_new(store, &once, &cand.seen_allow);
  if (rc) {
    fprintf(stderr, "sluice replay: %s\n", rc == SL_EINVAL
                        ? "--max-memory is too small for a store"
                        : sl_strerror(rc));
    limiter_free_all(lim, &cand);
    sl_store_free(store);
    if (in != stdin) fclose(in);
    return 2;
  }
  replay_counts n = {0};
  rc = replay_stream(in, stdout, strcmp(name, "-") ? name : "<stdin>", lim,
                     cand_spec ? &cand : NULL, store, &n);
  if (cand_spec)
    printf("summary requests=%llu would_deny=%llu would_allow=%llu "
           "clients_newly_denied=%llu clients_newly_allowed=%llu\n",
           (unsigned long long)n.requests, (unsigned long long)n.would_deny,
           (unsigned long long)n.would_allow,
           (unsigned long long)n.keys_would_deny,
           (unsigned long long)n.keys_would_allow);
  if (summary) {
    sl_store_stats st;
    sl_store_stats_get(store, &st);
    fprintf(stderr,
            "summary requests=%llu allowed=%llu denied=%llu keys=%llu "
            "bytes=%llu evictions=%llu\n",
            (unsigned long long)n.requests, (unsigned long long)n.allowed,
            (unsigned long long)n.denied, (unsigned long long)st.keys,
            (unsigned long long)st.bytes, (unsigned long long)st.evictions);
  }
  limiter_free_all(lim, &cand);
  sl_store_free(store);
  if (in != stdin) fclose(in);
  if (fflush(stdout) != 0) rc = 1;
  return rc;
}
