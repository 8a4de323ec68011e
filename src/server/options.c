/*
 * options.c — `sluice serve`'s options as one table.
 *
 * A row says everything about an option: its long name and letter, the
 * field of serve_args it sets (offsetof), its kind (a string, an address
 * or 'off', an on/off flag, an integer, a byte size with a K/M/G suffix,
 * milliseconds, one of a few words, or a parser of its own), its bounds,
 * its default and its help line. From the table come getopt_long's array,
 * the checks (one error message per kind, naming the option and the
 * bounds), the defaults (parsed as if given first, so a default can never
 * be out of its own bounds) and --help. Checks that involve two options
 * (--sync needs --store) follow the table, in serve_args_parse.
 */
#include <errno.h>
#include <getopt.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../base/num.h"
#include "../fleet/script.h"
#include "options.h"

typedef enum {
  OPT_STRING, /* const char *: the argument as given */
  OPT_ADDR,   /* const char *: HOST:PORT, or NULL for 'off' */
  OPT_FLAG,   /* int: 1 when given; no argument */
  OPT_INT,    /* an integer in [min, max] */
  OPT_BYTES,  /* an integer in [min, max], K/M/G suffix allowed */
  OPT_MS,     /* milliseconds in [min, max] */
  OPT_ENUM,   /* int: the value of one of `words` */
  OPT_CUSTOM, /* parse() reads it */
  OPT_HELP,   /* prints --help and stops */
} opt_kind;

typedef struct opt_word {
  const char *word;
  int value;
} opt_word;

typedef struct serve_option {
  const char *name;  /* --name */
  char letter;       /* -l, or 0 */
  const char *arg;   /* the argument's name in --help; NULL: none */
  opt_kind kind;
  size_t off, size;  /* the field in serve_args (OPT_CUSTOM: unused) */
  int64_t min, max;  /* OPT_INT, OPT_BYTES, OPT_MS */
  const opt_word *words; /* OPT_ENUM, ending with {NULL} */
  /* OPT_CUSTOM: 0, or -1 with the message (after "sluice serve: ") in err */
  int (*parse)(serve_args *a, const char *v, char *err, size_t len);
  const char *def;   /* the default, parsed before argv; NULL: none */
  const char *env;   /* OPT_STRING: the default from this variable */
  const char *section; /* --help: a heading before this option */
  const char *help;
} serve_option;

#define FIELD(f) offsetof(serve_args, f), sizeof(((serve_args *)0)->f)
#define STR_(x) #x
#define STR(x) STR_(x)

static const opt_word on_off[] = {{"on", 1}, {"off", 0}, {NULL, 0}};

static const opt_word header_styles[] = {{"ietf", HDR_IETF},
                                         {"x", HDR_X},
                                         {"both", HDR_IETF | HDR_X},
                                         {"none", 0},
                                         {NULL, 0}};

static const opt_word charging_models[] = {
    {"sluice", ENG_CHARGE_ALLOWED}, {"envoy", ENG_CHARGE_ALL}, {NULL, 0}};

static int parse_store(serve_args *a, const char *v, char *err, size_t len);
static int parse_store_error(serve_args *a, const char *v, char *err,
                             size_t len);
static int parse_clock_skew(serve_args *a, const char *v, char *err,
                            size_t len);
static int parse_log_rate(serve_args *a, const char *v, char *err,
                          size_t len);

static const opt_word value_modes[] = {{"plain", OBS_VALUES_PLAIN},
                                       {"hash", OBS_VALUES_HASH},
                                       {"redact", OBS_VALUES_REDACT},
                                       {NULL, 0}};

static const serve_option options[] = {
    {.name = "http", .arg = "ADDR:PORT", .kind = OPT_ADDR,
     FIELD(o.http_addr), .def = "127.0.0.1:8080", .section = "options",
     .help = "HTTP listener; 'off' to disable"},
    {.name = "resp", .arg = "ADDR:PORT", .kind = OPT_ADDR,
     FIELD(o.resp_addr), .def = "127.0.0.1:6390",
     .help = "Redis-protocol listener; 'off' to disable"},
    {.name = "grpc", .arg = "ADDR:PORT", .kind = OPT_ADDR,
     FIELD(o.grpc_addr), .def = "127.0.0.1:8081",
     .help = "gRPC listener: envoy's rate limit service and the health "
             "check (docs/envoy.md); 'off' to disable"},
    {.name = "grpc-max-streams", .arg = "N", .kind = OPT_INT,
     FIELD(o.grpc_max_streams), .min = 1, .max = 100000, .def = "100",
     .help = "gRPC: concurrent calls per connection at most"},
    {.name = "config", .letter = 'c', .arg = "PATH", .kind = OPT_STRING,
     FIELD(o.config_path),
     .help = "YAML file, or directory of *.yaml (one domain each); default: "
             "the embedded domain 'default', key at sliding_window:100/m"},
    {.name = "merge-domains", .kind = OPT_FLAG, FIELD(o.merge_domains),
     .help = "config files that name the same domain add their descriptors "
             "to it (envoyproxy/ratelimit's MERGE_DOMAIN_CONFIG=true, which "
             "is read too)"},
    {.name = "charging", .arg = "MODEL", .kind = OPT_ENUM, FIELD(charging),
     .words = charging_models, .def = "sluice",
     .help = "sluice: a denied request costs nothing; envoy: every matched "
             "rule is charged, denied or not, and hits above a limit are a "
             "denial, not a 400 (memory mode)"},
    {.name = "threads", .letter = 't', .arg = "N", .kind = OPT_INT,
     FIELD(o.threads), .min = 1, .max = ENG_MAX_THREADS - 8,
     .help = "worker threads (default: cores)"},
    {.name = "deny-status", .arg = "CODE", .kind = OPT_INT,
     FIELD(o.deny_status), .min = 400, .max = 599, .def = "429",
     .help = "HTTP status of a denial; 403 for nginx auth_request"},
    {.name = "deny-message", .arg = "TEMPLATE", .kind = OPT_STRING,
     FIELD(o.deny_message),
     .help = "a denial's JSON \"message\": {limit}, {window}, "
             "{retry_after}, {rule} and {policy} filled in (default: "
             "\"{limit} requests per {window}. Retry after {retry_after} "
             "seconds.\"); '' for none"},
    {.name = "max-memory", .letter = 'm', .arg = "BYTES", .kind = OPT_BYTES,
     FIELD(o.max_memory), .min = 1 << 20, .max = INT64_MAX, .def = "128M",
     .help = "store cap, K/M/G"},
    {.name = "headers", .arg = "STYLE", .kind = OPT_ENUM,
     FIELD(o.header_style), .words = header_styles, .def = "both",
     .help = "rate limit headers: ietf, x, both or none"},
    {.name = "password", .arg = "PASS", .kind = OPT_STRING,
     FIELD(o.password), .env = "SLUICE_PASSWORD",
     .help = "require AUTH on RESP"},
    {.name = "admin-token", .arg = "TOKEN", .kind = OPT_STRING,
     FIELD(o.admin_token), .env = "SLUICE_ADMIN_TOKEN",
     .help = "bearer token for /admin/*; without one, only loopback clients "
             "may use them"},
    {.name = "max-connections", .arg = "N", .kind = OPT_INT,
     FIELD(o.max_connections), .min = 1, .max = 1000000, .def = "10000",
     .help = "open connections at most, every listener together"},
    {.name = "max-http-connections", .arg = "N", .kind = OPT_INT,
     FIELD(o.max_http_connections), .min = 1, .max = 1000000,
     .help = "open HTTP connections at most (default: 80% of "
             "--max-connections, so that the others always have a fifth; "
             "all of it with --resp and --grpc off)"},
    {.name = "max-resp-connections", .arg = "N", .kind = OPT_INT,
     FIELD(o.max_resp_connections), .min = 1, .max = 1000000,
     .help = "open RESP connections at most (default: 80% of "
             "--max-connections; all of it with --http and --grpc off)"},
    {.name = "max-grpc-connections", .arg = "N", .kind = OPT_INT,
     FIELD(o.max_grpc_connections), .min = 1, .max = 1000000,
     .help = "open gRPC connections at most (default: 80% of "
             "--max-connections; all of it when the other listeners are "
             "off)"},
    {.name = "http-timeout", .arg = "MS", .kind = OPT_MS,
     FIELD(o.http_timeout_ms), .min = 100, .max = 600000, .def = "10000",
     .help = "an HTTP request (line, headers and body) must arrive whole "
             "within MS; an idle keep-alive connection is closed after MS"},
    {.name = "max-body", .arg = "BYTES", .kind = OPT_BYTES,
     FIELD(o.max_body), .min = 64, .max = 1 << 20, .def = "64K",
     .help = "POST body limit: a larger declared body gets 413 before any "
             "of it is read, a chunked one as soon as it passes the limit"},
    {.name = "max-header-bytes", .arg = "N", .kind = OPT_BYTES,
     FIELD(o.max_header_bytes), .min = 256, .max = 256 << 10, .def = "8K",
     .help = "request line + headers limit"},
    {.name = "max-key", .arg = "BYTES", .kind = OPT_BYTES, FIELD(o.max_key),
     .min = 1, .max = SL_KEY_MAX, .def = STR(SL_KEY_MAX),
     .help = "longest key or descriptor value"},
    {.name = "max-command-bytes", .arg = "BYTES", .kind = OPT_BYTES,
     FIELD(o.max_command_bytes), .min = 4096, .max = 64 << 20, .def = "1M",
     .help = "RESP: one command's bytes at most, refused at the header that "
             "shows more (before AUTH: 4K and 10 arguments)"},
    {.name = "max-input-buffer", .arg = "BYTES", .kind = OPT_BYTES,
     FIELD(o.max_input_buffer), .min = 1 << 20, .max = INT64_MAX,
     .def = "64M",
     .help = "RESP: unparsed input and unsent replies held by all "
             "connections together; past it, the largest holders are "
             "closed"},
    {.name = "resp-auth-timeout", .arg = "MS", .kind = OPT_MS,
     FIELD(o.resp_auth_timeout_ms), .min = 0, .max = 3600000, .def = "10000",
     .help = "RESP with --password: a connection not authenticated this "
             "long after it opened is closed; 0 = never"},
    {.name = "resp-idle-timeout", .arg = "MS", .kind = OPT_MS,
     FIELD(o.resp_idle_timeout_ms), .min = 0, .max = 86400000,
     .def = "300000",
     .help = "RESP: a connection that neither reads nor writes this long is "
             "closed; 0 = never"},
    {.name = "max-wait", .arg = "MS", .kind = OPT_MS, FIELD(o.max_wait_ms),
     .min = 0, .max = 600000, .def = "10000",
     .help = "wait mode (?wait=1, Sluice-Wait, SL.THROTTLE ... WAIT): the "
             "longest an answer is held for a leaky_bucket's delay; a "
             "longer delay is denied with Retry-After, charging nothing. "
             "A rule's max_wait or the request's own may lower it; 0 = "
             "wait mode off"},
    {.name = "max-waiting", .arg = "N", .kind = OPT_INT,
     FIELD(o.max_waiting), .min = 1, .max = 1000000, .def = "10000",
     .help = "wait mode: answers held at once, all workers together (each "
             "at most twice its share); past it, HTTP's 503 with "
             "Retry-After, RESP's error with its retry"},
    {.name = "ui", .arg = "on|off", .kind = OPT_ENUM, FIELD(o.ui),
     .words = on_off, .def = "on",
     .help = "the page at /ui/ (the simulator and a live view of this "
             "daemon) with its POST /v1/sim and GET /v1/stats (docs/ui.md)"},
    {.name = "trust-forwarded", .kind = OPT_FLAG, FIELD(o.trust_forwarded),
     .help = "take $remote_addr from X-Forwarded-For from any peer "
             "(default: loopback peers only)"},
    {.name = "shutdown-grace", .arg = "MS", .kind = OPT_MS,
     FIELD(o.shutdown_grace_ms), .min = 0, .max = 600000, .def = "5000",
     .help = "time in-flight requests get on SIGTERM"},
    {.name = "ready-file", .arg = "PATH", .kind = OPT_STRING,
     FIELD(ready_file),
     .help = "once listening, write {\"pid\": N, \"http\": \"ADDR:PORT\", "
             "\"resp\": \"ADDR:PORT\"} there (null for a listener that is "
             "off; \"grpc\": \"ADDR:PORT\" added when gRPC is on; written "
             "whole, by rename); removed at a clean stop"},
    {.name = "watch", .arg = "on|off", .kind = OPT_ENUM, FIELD(watch),
     .words = on_off, .def = "on",
     .help = "reload the config when one of its files changed on disk"},
    {.name = "watch-interval", .arg = "MS", .kind = OPT_MS, FIELD(watch_ms),
     .min = 100, .max = 600000, .def = "1000",
     .help = "how often the config's files are looked at"},
    {.name = "watch-settle", .arg = "MS", .kind = OPT_MS, FIELD(settle_ms),
     .min = 0, .max = 600000, .def = "2000",
     .help = "reload only once the changed files have stayed as they are "
             "this long (a file written in parts is not loaded half-way)"},
    {.name = "state-file", .arg = "PATH", .kind = OPT_STRING,
     FIELD(state_file),
     .help = "memory mode: save every key's state there (atomically) every "
             "--state-interval and at SIGTERM, and load it at start"},
    {.name = "state-interval", .arg = "MS", .kind = OPT_MS, FIELD(state_ms),
     .min = 100, .max = 86400000, .def = "10000",
     .help = "how often --state-file is saved: what a kill -9 can lose"},

    {.name = "denial-log", .arg = "PATH", .kind = OPT_STRING,
     FIELD(obs.log_path),
     .section = "who is being limited (docs/operations.md)",
     .help = "write a JSON line per denial to PATH ('-': stderr); opened "
             "again on SIGUSR1 (logrotate)"},
    {.name = "log-denials", .arg = "RATE", .kind = OPT_CUSTOM,
     .parse = parse_log_rate,
     .help = "the share of denials logged, 0 to 1 (default 1 with "
             "--denial-log; without it, RATE > 0 logs to stderr)"},
    {.name = "denial-log-limit", .arg = "POLICY", .kind = OPT_STRING,
     FIELD(obs.log_limit), .def = "token_bucket:1000/s",
     .help = "lines written at most, as a sluice policy (a flood of "
             "denials cannot fill the disk; the rest are counted in "
             "sluice_denial_log_dropped_total)"},
    {.name = "denial-log-buffer", .arg = "BYTES", .kind = OPT_BYTES,
     FIELD(obs.log_buffer), .min = 4096, .max = 1 << 30, .def = "1M",
     .help = "lines waiting for the disk at most; past it they are dropped "
             "and counted, and the workers never wait"},
    {.name = "denial-log-values", .arg = "MODE", .kind = OPT_ENUM,
     FIELD(obs.values), .words = value_modes, .def = "plain",
     .help = "how descriptor values and client addresses are shown in the "
             "log and in top keys: plain, hash (keyed BLAKE2b) or redact"},
    {.name = "denial-log-secret", .arg = "FILE", .kind = OPT_STRING,
     FIELD(obs.secret_path),
     .help = "the key of the hashes (at least 16 bytes): the same hashes "
             "across restarts and daemons (default: random at start)"},
    {.name = "top-keys", .arg = "K", .kind = OPT_INT, FIELD(obs.top_k),
     .min = 0, .max = TOP_N_MAX, .def = "32",
     .help = "counters per rule for its heaviest keys (GET /v1/top, "
             "SL.TOP, sluice_top_key_share): counts are within N/K; 0 off"},
    {.name = "top-keys-window", .arg = "MS", .kind = OPT_MS,
     FIELD(obs.top_window_ms), .min = 1000, .max = 86400000, .def = "60000",
     .help = "top keys count the window running and the one before"},

    {.name = "store", .arg = "URL", .kind = OPT_CUSTOM, .parse = parse_store,
     .section = "fleet mode (one limit across many daemons; docs/fleet.md)",
     .help = "memory (default), redis://[[USER]:PASS@]HOST:PORT[/DB], or "
             "redis-cluster://HOST:PORT[,HOST:PORT...]; the password may "
             "also come from $SLUICE_REDIS_PASSWORD"},
    {.name = "redis-timeout", .arg = "MS", .kind = OPT_MS,
     FIELD(redis.timeout_ms), .min = 1, .max = 60000, .def = "50",
     .help = "a decision's wait for Redis, from the request's arrival "
             "to its answer; every call and connect too"},
    {.name = "batch-window", .arg = "US", .kind = OPT_INT,
     FIELD(redis.batch_us), .min = 0, .max = 100000, .def = "0",
     .help = "wait up to this long to pipeline more decisions together; 0: "
             "send at the end of each event-loop pass"},
    {.name = "batch-max", .arg = "N", .kind = OPT_INT, FIELD(batch_max),
     .min = 1, .max = RS_BATCH_MAX, .def = STR(BATCH_MAX_DEFAULT),
     .help = "requests decided by one script call: a thread's requests of "
             "one event-loop pass share calls of up to N, 1..255; 1 = a "
             "call each"},
    {.name = "breaker-interval", .arg = "MS", .kind = OPT_MS,
     FIELD(redis.breaker_ms), .min = 10, .max = 600000, .def = "1000",
     .help = "a failed Redis is left alone this long before a probe"},
    {.name = "on-store-error", .arg = "MODE", .kind = OPT_CUSTOM,
     .parse = parse_store_error, .def = "allow",
     .help = "allow, deny, or local[:FRACTION] (an in-memory limiter at "
             "FRACTION of the limit, default 0.5), for rules that set no "
             "on_store_error of their own"},
    {.name = "sync", .arg = "MS", .kind = OPT_MS, FIELD(sync_ms), .min = 1,
     .max = 600000,
     .help = "approximate mode: decide locally, and every MS push local "
             "charges to Redis and pull the fleet's level, debt included: "
             "over the limit, every daemon owes the excess (docs/fleet.md; "
             "default: exact mode)"},
    {.name = "clock-skew", .arg = "MS", .kind = OPT_CUSTOM,
     .parse = parse_clock_skew,
     .help = "tests: run this daemon's clock MS off (exact mode decides on "
             "Redis's clock regardless)"},
    {.name = "help", .letter = 'h', .kind = OPT_HELP, .help = "this help"},
};

#define NOPTIONS (sizeof options / sizeof options[0])

/* ---- the custom kinds ---- */

/* --store: memory, or a Redis URL (fleet mode). */
static int parse_store(serve_args *a, const char *v, char *err, size_t len) {
  if (!strcmp(v, "memory")) {
    a->fleet = 0;
    return 0;
  }
  char why[256];
  if (rc_config_parse(v, &a->redis, why, sizeof why)) {
    snprintf(err, len, "--store %s", why);
    return -1;
  }
  a->fleet = 1;
  return 0;
}

/* --on-store-error: allow, deny or local[:FRACTION] (rules/config.h). */
static int parse_store_error(serve_args *a, const char *v, char *err,
                             size_t len) {
  char why[256];
  if (cfg_parse_store_error(v, &a->on_store_error, &a->local_fraction, why,
                            sizeof why)) {
    snprintf(err, len, "--on-store-error %s", why);
    return -1;
  }
  return 0;
}

/* --clock-skew: signed milliseconds, at most a day either way. */
static int parse_clock_skew(serve_args *a, const char *v, char *err,
                            size_t len) {
  char *end;
  errno = 0;
  long long ms = strtoll(v, &end, 10);
  if (end == v || *end || errno || ms < -86400000 || ms > 86400000) {
    snprintf(err, len, "--clock-skew '%s' is not a number of ms within a day",
             v);
    return -1;
  }
  a->clock_skew_ms = ms;
  return 0;
}

/* --log-denials: a share of denials, 0 to 1. */
static int parse_log_rate(serve_args *a, const char *v, char *err,
                          size_t len) {
  char *end;
  errno = 0;
  double r = strtod(v, &end);
  if (end == v || *end || errno || !(r >= 0 && r <= 1)) {
    snprintf(err, len, "--log-denials '%s' is not a share from 0 to 1", v);
    return -1;
  }
  a->obs.log_rate = r;
  return 0;
}

/* ---- the generic kinds ---- */

/* Stores v in an integer field of 4 or 8 bytes (int, unsigned, long,
   size_t): every bound in the table fits the field's type. */
static void set_int(void *field, size_t size, int64_t v) {
  if (size == sizeof(int32_t)) {
    int32_t x = (int32_t)v;
    memcpy(field, &x, sizeof x);
  } else {
    memcpy(field, &v, sizeof v);
  }
}

/* "expected ietf, x, both or none". */
static void list_words(const opt_word *w, char *buf, size_t len) {
  size_t n = 0, used = 0;
  while (w[n].word) n++;
  buf[0] = '\0';
  for (size_t i = 0; i < n && used < len; i++)
    used += (size_t)snprintf(buf + used, len - used, "%s%s",
                             i == 0 ? "" : i + 1 == n ? " or " : ", ",
                             w[i].word);
}

/*
 * Applies option `op` with argument v (NULL for a flag) to *a. Returns 0,
 * or -1 with the message (after "sluice serve: ") in err.
 */
static int apply(serve_args *a, const serve_option *op, const char *v,
                 char *err, size_t len) {
  void *field = (char *)a + op->off;
  int64_t n;
  switch (op->kind) {
  case OPT_STRING:
    memcpy(field, &v, sizeof v);
    return 0;
  case OPT_ADDR: {
    const char *addr = strcmp(v, "off") ? v : NULL;
    memcpy(field, &addr, sizeof addr);
    return 0;
  }
  case OPT_FLAG:
    set_int(field, op->size, 1);
    return 0;
  case OPT_INT:
  case OPT_MS:
  case OPT_BYTES:
    if (parse_int(v, op->min, op->max, op->kind == OPT_BYTES, &n)) {
      snprintf(err, len, "--%s '%s' is not a number in %lld..%lld", op->name,
               v, (long long)op->min, (long long)op->max);
      return -1;
    }
    set_int(field, op->size, n);
    return 0;
  case OPT_ENUM:
    for (const opt_word *w = op->words; w->word; w++)
      if (!strcmp(v, w->word)) {
        set_int(field, op->size, w->value);
        return 0;
      }
    char words[128];
    list_words(op->words, words, sizeof words);
    snprintf(err, len, "--%s '%s': expected %s", op->name, v, words);
    return -1;
  case OPT_CUSTOM:
    return op->parse(a, v, err, len);
  case OPT_HELP:
    return 0;
  }
  return 0;
}

/* The defaults: those of the table, then those it cannot say. */
static void set_defaults(serve_args *a) {
  memset(a, 0, sizeof *a);
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  a->o.threads = cores > 0 ? (unsigned)cores : 1;
  a->obs.log_rate = -1; /* not given */
  for (size_t i = 0; i < NOPTIONS; i++) {
    const serve_option *op = &options[i];
    const char *v = op->env ? getenv(op->env) : op->def;
    char err[300];
    if (v && apply(a, op, v, err, sizeof err))
      abort(); /* a default out of its own bounds: the table is wrong */
  }
}

/* The checks that involve more than one option, and what follows from
   them. 0, or 2 after a message. */
static int check_args(serve_args *a) {
  srv_opts *o = &a->o;
  if (!o->http_addr && !o->resp_addr) {
    fprintf(stderr, "sluice serve: both listeners are off\n");
    return 2;
  }
  if (o->password && !*o->password) o->password = NULL;
  if (o->admin_token && !*o->admin_token) o->admin_token = NULL;
  const char *rpw = getenv("SLUICE_REDIS_PASSWORD");
  if (a->fleet && !a->redis.password[0] && rpw)
    snprintf(a->redis.password, sizeof a->redis.password, "%s", rpw);
  if (a->state_file && a->fleet) {
    fprintf(stderr, "sluice serve: --state-file is for memory mode: in fleet "
                    "mode Redis holds the state\n");
    return 2;
  }
  if (a->sync_ms && !a->fleet) {
    fprintf(stderr, "sluice serve: --sync needs --store redis://... or "
                    "redis-cluster://...\n");
    return 2;
  }
  return 0;
}

int serve_args_parse(serve_args *a, int argc, char **argv) {
  set_defaults(a);
  /* getopt_long's view of the table: a lettered option answers with its
     letter, the others with 256 + their row. */
  struct option longs[NOPTIONS + 1];
  char shorts[2 * NOPTIONS + 1];
  size_t ns = 0;
  for (size_t i = 0; i < NOPTIONS; i++) {
    const serve_option *op = &options[i];
    int has_arg = op->kind == OPT_FLAG || op->kind == OPT_HELP
                      ? no_argument
                      : required_argument;
    longs[i] = (struct option){op->name, has_arg, NULL,
                               op->letter ? op->letter : 256 + (int)i};
    if (op->letter) {
      shorts[ns++] = op->letter;
      if (has_arg == required_argument) shorts[ns++] = ':';
    }
  }
  longs[NOPTIONS] = (struct option){NULL, 0, NULL, 0};
  shorts[ns] = '\0';

  int c;
  optind = 1;
  while ((c = getopt_long(argc, argv, shorts, longs, NULL)) != -1) {
    const serve_option *op = NULL;
    if (c >= 256)
      op = &options[c - 256];
    for (size_t i = 0; !op && c != '?' && i < NOPTIONS; i++)
      if (options[i].letter == c) op = &options[i];
    if (!op) { /* getopt said why */
      serve_usage(stderr);
      return 2;
    }
    if (op->kind == OPT_HELP) {
      serve_usage(stdout);
      return 0;
    }
    char err[400];
    if (apply(a, op, optarg, err, sizeof err)) {
      fprintf(stderr, "sluice serve: %s\n", err);
      return 2;
    }
  }
  if (optind != argc) {
    fprintf(stderr, "sluice serve: unexpected argument '%s'\n", argv[optind]);
    return 2;
  }
  return check_args(a) ? 2 : -1;
}

/* ---- --help ---- */

#define HELP_COL 25   /* where the help text starts */
#define HELP_WIDTH 78 /* the longest line */

/* Writes text from column HELP_COL, wrapped at word boundaries. */
static void put_wrapped(FILE *f, const char *text, size_t col) {
  const char *p = text;
  while (*p) {
    size_t room = HELP_WIDTH - HELP_COL, n = strlen(p);
    if (n > room) { /* break at the last space that fits */
      n = room;
      while (n > 0 && p[n] != ' ') n--;
      if (n == 0) n = strcspn(p, " ");
    }
    fprintf(f, "%*s%.*s\n", (int)(HELP_COL - col), "", (int)n, p);
    col = 0;
    p += n;
    while (*p == ' ') p++;
  }
}

void serve_usage(FILE *f) {
  fprintf(f, "usage: sluice serve [OPTIONS]\n"
             "\n"
             "The rate limit daemon: decisions over HTTP, the Redis protocol "
             "and gRPC\n"
             "(envoy's rate limit service), from envoyproxy/ratelimit-style "
             "YAML rules\n"
             "(or ad-hoc policies).\n");
  for (size_t i = 0; i < NOPTIONS; i++) {
    const serve_option *op = &options[i];
    if (op->section) fprintf(f, "\n%s:\n", op->section);
    char left[64];
    char letter[5] = "";
    if (op->letter) snprintf(letter, sizeof letter, "-%c, ", op->letter);
    int n = snprintf(left, sizeof left, "  %s--%s%s%s", letter, op->name,
                     op->arg ? " " : "", op->arg ? op->arg : "");
    char help[512];
    snprintf(help, sizeof help, "%s%s%s%s%s%s", op->help,
             op->env ? " (or $" : "", op->env ? op->env : "",
             op->env ? ")" : "", op->def ? " (default " : "",
             op->def ? op->def : "");
    if (op->def) strncat(help, ")", sizeof help - strlen(help) - 1);
    fputs(left, f);
    if (n + 1 > HELP_COL) { /* no room beside it: the next line */
      fputc('\n', f);
      n = 0;
    }
    put_wrapped(f, help, (size_t)n);
  }
  fprintf(f, "\n"
             "Signals: SIGHUP reloads the config (a changed config file "
             "reloads\n"
             "too, once settled; an invalid one is reported and the old one "
             "kept);\n"
             "SIGTERM and SIGINT stop gracefully (saving --state-file). See\n"
             "docs/server.md.\n");
}
