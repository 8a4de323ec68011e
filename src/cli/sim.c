/*
 * sim.c — `sluice sim`: the command line. Reads a scenario (a file, '-' or
 * a built-in example), parses it (sim_parse.c), runs it against its
 * policies side by side (sim_run.c) and prints what each did (sim_print.c);
 * sim.h is the language.
 */
#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "../sim/sim.h"

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
          "  fleet N [lb round-robin|sticky] [store local|exact|sync D]\n"
          "          [on_store_error allow|deny|local]\n"
          "                             N daemons (1 to 64) behind a load\n"
          "                             balancer, each counting on its own\n"
          "                             (local, default), sharing one store\n"
          "                             (exact) or syncing with it every D;\n"
          "                             before any request\n"
          "  store down | store up      the fleet's store fails or recovers:\n"
          "                             exact mode answers by on_store_error\n"
          "                             (allow: fail open, default)\n"
          "  shedder CAP/PERIOD NAME:THRESHOLD...\n"
          "                             a load shedder in front of every\n"
          "                             policy: classes most important\n"
          "                             first, each shed once fleet usage\n"
          "                             would pass THRESHOLD (90%%, never)\n"
          "                             of CAP; before any request\n"
          "  class NAME                 the shedder's class of the requests\n"
          "                             that follow (default: 'default', or\n"
          "                             the last class)\n"
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
          "  -j, --json            print the run as one JSON document (every\n"
          "                        decision, the summary), as POST /v1/sim\n"
          "                        of sluice serve answers\n"
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

/* The command line, read. */
typedef struct sim_cli {
  const char *example, *svg_path;
  int list, print, json;
  sim_options so;
} sim_cli;

/* Reads the options into *a. -1 to go on, else the exit status (after
   --help, or a message). */
static int parse_args(int argc, char **argv, sim_cli *a) {
  static const struct option opts[] = {
      {"example", required_argument, NULL, 'e'},
      {"list-examples", no_argument, NULL, 'l'},
      {"print", no_argument, NULL, 'P'},
      {"svg", required_argument, NULL, 'o'},
      {"all-steps", no_argument, NULL, 'a'},
      {"summary-only", no_argument, NULL, 'q'},
      {"quiet", no_argument, NULL, 'q'},
      {"json", no_argument, NULL, 'j'},
      {"color", required_argument, NULL, 'C'},
      {"seed", required_argument, NULL, 's'},
      {"help", no_argument, NULL, 'h'},
      {NULL, 0, NULL, 0}};
  const char *color_when = "auto";
  int c;
  int64_t seed;
  *a = (sim_cli){.so = {.seed = 1}};
  optind = 1;
  while ((c = getopt_long(argc, argv, "e:lPo:aqjs:h", opts, NULL)) != -1) {
    switch (c) {
    case 'e': a->example = optarg; break;
    case 'l': a->list = 1; break;
    case 'P': a->print = 1; break;
    case 'o': a->svg_path = optarg; break;
    case 'a': a->so.all_steps = 1; break;
    case 'q': a->so.summary_only = 1; break;
    case 'j': a->json = 1; break;
    case 'C': color_when = optarg; break;
    case 's':
      if (parse_int(optarg, 0, INT64_MAX, 0, &seed)) {
        fprintf(stderr, "sluice sim: --seed '%s' is not a non-negative "
                        "integer\n", optarg);
        return 2;
      }
      a->so.seed = (uint64_t)seed;
      break;
    case 'h': sim_usage(stdout); return 0;
    default: sim_usage(stderr); return 2;
    }
  }
  if (!strcmp(color_when, "always"))
    a->so.color = 1;
  else if (!strcmp(color_when, "never"))
    a->so.color = 0;
  else if (!strcmp(color_when, "auto"))
    a->so.color = isatty(STDOUT_FILENO) && !getenv("NO_COLOR");
  else {
    fprintf(stderr, "sluice sim: --color '%s': expected auto, always or "
                    "never\n", color_when);
    return 2;
  }
  return -1;
}

/*
 * The scenario's text (malloc'd, into *text and *len) and name: the
 * example a->example, else the file `path` ('-': standard input). 0, or
 * the exit status after a message.
 */
static int load_text(const sim_cli *a, const char *path, char **text,
                     size_t *len, char *name, size_t name_len) {
  if (a->example) {
    const sim_example *ex = NULL;
    for (size_t i = 0; i < sim_nexamples; i++)
      if (!strcmp(sim_examples[i].name, a->example)) ex = &sim_examples[i];
    if (!ex) {
      fprintf(stderr, "sluice sim: no example '%s' (try --list-examples)\n",
              a->example);
      return 2;
    }
    *len = strlen(ex->text);
    *text = malloc(*len + 1);
    if (!*text) {
      fprintf(stderr, "sluice sim: out of memory\n");
      return 1;
    }
    memcpy(*text, ex->text, *len + 1);
    snprintf(name, name_len, "%s", ex->name);
    return 0;
  }
  FILE *in = strcmp(path, "-") ? fopen(path, "r") : stdin;
  if (!in || read_all(in, text, len)) {
    fprintf(stderr, "sluice sim: %s: %s\n", path,
            errno == EFBIG ? "larger than 16 MiB" : strerror(errno));
    if (in && in != stdin) fclose(in);
    return 1;
  }
  if (in != stdin) fclose(in);
  const char *base = strrchr(path, '/');
  snprintf(name, name_len, "%s",
           strcmp(path, "-") ? (base ? base + 1 : path) : "<stdin>");
  return 0;
}

/* Parses and runs text (freed here) as scenario `name`. The exit status. */
static int run_text(sim_cli *a, char *text, size_t len, const char *name) {
  a->so.name = name;
  sim_scenario *sc;
  char err[512];
  if (sim_parse(text, len, SIM_MAX_REQUESTS, &sc, err, sizeof err)) {
    fprintf(stderr, "sluice sim: %s: %s\n", name, err);
    free(text);
    return 1;
  }
  free(text);
  if (a->svg_path && !(a->so.svg = fopen(a->svg_path, "w"))) {
    fprintf(stderr, "sluice sim: %s: %s\n", a->svg_path, strerror(errno));
    sim_free(sc);
    return 1;
  }
  if (a->json) a->so.json = stdout;
  int rc = sim_run(sc, &a->so, stdout, err, sizeof err);
  if (rc) fprintf(stderr, "sluice sim: %s: %s\n", name, err);
  if (a->so.svg && fclose(a->so.svg) != 0 && !rc) {
    fprintf(stderr, "sluice sim: %s: %s\n", a->svg_path, strerror(errno));
    rc = -1;
  }
  sim_free(sc);
  if (fflush(stdout) != 0) rc = -1;
  return rc ? 1 : 0;
}

int cmd_sim(int argc, char **argv) {
  sim_cli a;
  int status = parse_args(argc, argv, &a);
  if (status >= 0) return status;
  if (a.list) {
    for (size_t i = 0; i < sim_nexamples; i++)
      printf("%-16s %s\n", sim_examples[i].name, sim_examples[i].what);
    return 0;
  }
  int nargs = argc - optind;
  if ((a.example && nargs) || (!a.example && nargs != 1)) {
    fprintf(stderr, "sluice sim: give one scenario file, '-' or --example "
                    "NAME\n\n");
    sim_usage(stderr);
    return 2;
  }
  char *text = NULL, name[256];
  size_t len = 0;
  if ((status = load_text(&a, a.example ? NULL : argv[optind], &text, &len,
                          name, sizeof name)))
    return status;
  if (a.print) {
    fwrite(text, 1, len, stdout);
    free(text);
    return fflush(stdout) ? 1 : 0;
  }
  return run_text(&a, text, len, name);
}
