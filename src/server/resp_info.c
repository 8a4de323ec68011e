/*
 * resp_info.c — the RESP commands that tell about the server and the
 * connection, as client libraries and redis-cli send them: INFO (by
 * section), DBSIZE, SELECT, TIME, COMMAND (COUNT, LIST, INFO, DOCS, from
 * resp.c's table), CONFIG GET, and CLIENT (ID, GETNAME, SETNAME, SETINFO,
 * INFO). Replies are shaped as Redis 7 shapes them, in RESP2 or RESP3
 * (maps, sets, verbatim text, nulls) as the connection asked with HELLO.
 */
#include <ctype.h>
#include <netdb.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "resp_conn.h"
#include "resp_guard.h"

/* ---- INFO ---- */

/* Appends printf output to b (INFO's lines). */
static void add(strbuf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void add(strbuf *b, const char *fmt, ...) {
  char line[256];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  if (n > 0) strbuf_add(b, line, (size_t)n < sizeof line ? (size_t)n
                                                          : sizeof line - 1);
}

/* Operations per second: the commands read since the sample before,
   sampled at most once a second by whichever INFO comes (redis-cli
   --stat asks every second). */
static long long ops_per_sec(resp_shared *g, int64_t now) {
  long long at = atomic_load(&g->ops_at_ns);
  long long total = (long long)atomic_load(&g->commands);
  if (at == 0 || now - at >= 1000000000) {
    if (atomic_compare_exchange_strong(&g->ops_at_ns, &at, now)) {
      long long before = atomic_exchange(&g->ops_at, total);
      if (at) atomic_store(&g->ops_rate, (total - before) * 1000000000LL /
                                             (now - at));
    }
  }
  return atomic_load(&g->ops_rate);
}

static void info_server(resp_conn *c, strbuf *b) {
  resp_shared *g = c->w->srv->resp;
  long long up = (clock_mono_ns() - g->started_ns) / 1000000000;
  add(b, "# Server\r\nredis_version:7.0.0\r\nsluice_version:%s\r\n"
         "redis_mode:standalone\r\narch_bits:%d\r\nmultiplexing_api:epoll\r\n"
         "process_id:%d\r\ntcp_port:%d\r\nuptime_in_seconds:%lld\r\n"
         "uptime_in_days:%lld\r\n",
      sl_version_string(), (int)(8 * sizeof(void *)), (int)getpid(),
      c->w->srv->resp_port, up, up / 86400);
}

static void info_clients(resp_conn *c, strbuf *b) {
  resp_shared *g = c->w->srv->resp;
  add(b, "# Clients\r\nconnected_clients:%ld\r\nmaxclients:%ld\r\n"
         "blocked_clients:0\r\ntracking_clients:0\r\n",
      atomic_load(&g->clients), c->w->srv->budget[LST_RESP]);
}

static void info_memory(resp_conn *c, strbuf *b) {
  sl_store_stats st;
  sl_store_stats_get(engine_store(c->w->srv->eng), &st);
  add(b, "# Memory\r\nused_memory:%llu\r\nmaxmemory:%llu\r\n"
         "maxmemory_policy:allkeys-lru\r\n",
      (unsigned long long)st.bytes, (unsigned long long)st.max_memory);
}

static void info_persistence(resp_conn *c, strbuf *b) {
  (void)c; /* ioredis's ready check reads `loading` */
  add(b, "# Persistence\r\nloading:0\r\nasync_loading:0\r\n"
         "rdb_changes_since_last_save:0\r\naof_enabled:0\r\n");
}

static void info_stats(resp_conn *c, strbuf *b) {
  resp_shared *g = c->w->srv->resp;
  sl_store_stats st;
  sl_store_stats_get(engine_store(c->w->srv->eng), &st);
  add(b, "# Stats\r\ntotal_connections_received:%lld\r\n"
         "total_commands_processed:%llu\r\ninstantaneous_ops_per_sec:%lld\r\n",
      atomic_load(&g->accepted), (unsigned long long)atomic_load(&g->commands),
      ops_per_sec(g, clock_mono_ns()));
  add(b, "expired_keys:%llu\r\nevicted_keys:%llu\r\nlimiters:%llu\r\n",
      (unsigned long long)st.expirations, (unsigned long long)st.evictions,
      (unsigned long long)st.limiters);
}

static void info_replication(resp_conn *c, strbuf *b) {
  (void)c;
  add(b, "# Replication\r\nrole:master\r\nconnected_slaves:0\r\n");
}

static void info_cpu(resp_conn *c, strbuf *b) {
  (void)c;
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  add(b, "# CPU\r\nused_cpu_sys:%ld.%06ld\r\nused_cpu_user:%ld.%06ld\r\n",
      (long)ru.ru_stime.tv_sec, (long)ru.ru_stime.tv_usec,
      (long)ru.ru_utime.tv_sec, (long)ru.ru_utime.tv_usec);
}

static void info_cluster(resp_conn *c, strbuf *b) {
  (void)c;
  add(b, "# Cluster\r\ncluster_enabled:0\r\n");
}

static void info_keyspace(resp_conn *c, strbuf *b) {
  sl_store_stats st;
  sl_store_stats_get(engine_store(c->w->srv->eng), &st);
  add(b, "# Keyspace\r\ndb0:keys=%llu,expires=%llu,avg_ttl=0\r\n",
      (unsigned long long)st.keys, (unsigned long long)st.keys);
}

/* INFO's sections, in Redis's order; all are in the default set. */
static const struct {
  const char *name;
  void (*write)(resp_conn *c, strbuf *b);
} sections[] = {
    {"server", info_server},           {"clients", info_clients},
    {"memory", info_memory},           {"persistence", info_persistence},
    {"stats", info_stats},             {"replication", info_replication},
    {"cpu", info_cpu},                 {"cluster", info_cluster},
    {"keyspace", info_keyspace},
};
#define NSECTIONS (sizeof sections / sizeof sections[0])

/*
 * INFO [section ...]: the sections named (any case; "default", "all" and
 * "everything" name them all), each once, in Redis's order, separated by
 * a blank line; an unknown name adds nothing (an empty reply if none is
 * known), as Redis answers.
 */
void cmd_info(resp_conn *c, const resp_cmd *cmd) {
  int want[NSECTIONS] = {0};
  for (size_t k = 0; k < NSECTIONS; k++) want[k] = cmd->argc == 1;
  for (int i = 1; i < cmd->argc; i++) {
    if (resp_arg_is(cmd, i, "default") || resp_arg_is(cmd, i, "all") ||
        resp_arg_is(cmd, i, "everything"))
      for (size_t k = 0; k < NSECTIONS; k++) want[k] = 1;
    for (size_t k = 0; k < NSECTIONS; k++)
      if (resp_arg_is(cmd, i, sections[k].name)) want[k] = 1;
  }
  strbuf b = STRBUF_INIT;
  for (size_t k = 0; k < NSECTIONS; k++) {
    if (!want[k]) continue;
    if (b.len) strbuf_add(&b, "\r\n", 2);
    sections[k].write(c, &b);
  }
  if (b.oom)
    out_err(c, "ERR out of memory");
  else
    out_verbatim(c, b.p ? b.p : "", b.len);
  strbuf_free(&b);
}

void cmd_dbsize(resp_conn *c, const resp_cmd *cmd) {
  (void)cmd;
  sl_store_stats st;
  sl_store_stats_get(engine_store(c->w->srv->eng), &st);
  out_int(c, (long long)st.keys);
}

/* SELECT 0: the one database there is (as Redis with `databases 1`). */
void cmd_select(resp_conn *c, const resp_cmd *cmd) {
  size_t n = cmd->len[1], i = n && (cmd->argv[1][0] == '-');
  while (i < n && isdigit((unsigned char)cmd->argv[1][i])) i++;
  if (!n || i != n || i > 18 || (n == 1 && cmd->argv[1][0] == '-'))
    out_err(c, "ERR value is not an integer or out of range");
  else if (strtoll(cmd->argv[1], NULL, 10) != 0)
    out_err(c, "ERR DB index is out of range");
  else
    out_raw(c, "+OK\r\n", 5);
}

/* TIME: [seconds, microseconds] of the wall clock, as bulk strings. */
void cmd_time(resp_conn *c, const resp_cmd *cmd) {
  (void)cmd;
  int64_t now = clock_wall_ns();
  char s[24], us[24];
  size_t sn = fmt_i64(s, now / 1000000000);
  size_t un = fmt_i64(us, now % 1000000000 / 1000);
  out_raw(c, "*2\r\n", 4);
  out_bulk(c, s, sn);
  out_bulk(c, us, un);
}

/* CONFIG GET pattern: nothing to show (an empty map); redis-benchmark
   asks. */
void cmd_config(resp_conn *c, const resp_cmd *cmd) {
  if (resp_arg_is(cmd, 1, "GET") && cmd->argc >= 3)
    out_map(c, 0);
  else if (resp_arg_is(cmd, 1, "GET"))
    out_err(c, "ERR wrong number of arguments for 'config|get' command");
  else
    out_err(c, "ERR unknown subcommand '%.*s'. Try CONFIG HELP.",
            (int)(cmd->len[1] < 40 ? cmd->len[1] : 40), cmd->argv[1]);
}

/* ---- COMMAND ---- */

/* A set's header: "~n" in RESP3, an array in RESP2. */
static void out_set(resp_conn *c, size_t n) {
  out_hdr(c, c->proto == 3 ? '~' : '*', (int64_t)n);
}

/* A command's name in lower case, as COMMAND lists it. */
static void out_lower(resp_conn *c, const resp_command *rc) {
  char name[32];
  size_t n = 0;
  for (; n < rc->name_len && n < sizeof name; n++)
    name[n] = (char)tolower((unsigned char)rc->name[n]);
  out_bulk(c, name, n);
}

/* The row named by argument i, or NULL. */
static const resp_command *find(const resp_cmd *cmd, int i) {
  size_t n;
  const resp_command *t = resp_commands(&n);
  for (size_t k = 0; k < n; k++)
    if (cmd->len[i] == t[k].name_len &&
        !strncasecmp(cmd->argv[i], t[k].name, t[k].name_len))
      return &t[k];
  return NULL;
}

/* One command's COMMAND INFO entry, Redis 7's ten fields. */
static void out_command_info(resp_conn *c, const resp_command *rc) {
  int key = (rc->flags & RESP_CMD_KEY) != 0;
  int arity = rc->max_argc == rc->min_argc ? rc->min_argc : -rc->min_argc;
  out_raw(c, "*10\r\n", 5);
  out_lower(c, rc);
  out_int(c, arity);
  int nflags = 1 + !!(rc->flags & RESP_CMD_BEFORE_AUTH);
  out_set(c, (size_t)nflags);
  if (rc->flags & RESP_CMD_WRITE)
    out_raw(c, "+write\r\n", 8);
  else
    out_raw(c, "+fast\r\n", 7);
  if (rc->flags & RESP_CMD_BEFORE_AUTH) out_raw(c, "+no_auth\r\n", 10);
  out_int(c, key);
  out_int(c, key);
  out_int(c, key);
  out_set(c, 0); /* ACL categories */
  out_set(c, 0); /* tips */
  out_raw(c, "*0\r\n*0\r\n", 8); /* key specs, subcommands */
}

/* One command's COMMAND DOCS map: summary, since, group. */
static void out_command_docs(resp_conn *c, const resp_command *rc) {
  out_lower(c, rc);
  out_map(c, 3);
  out_cstr(c, "summary");
  out_cstr(c, rc->summary ? rc->summary : "");
  out_cstr(c, "since");
  out_cstr(c, "1.0.0");
  out_cstr(c, "group");
  out_cstr(c, rc->name[2] == '.' ? "sluice" : "connection");
}

/*
 * COMMAND [COUNT | LIST | INFO [name ...] | DOCS [name ...]]: from the
 * table. INFO answers a null for a name it does not know; DOCS leaves it
 * out; no names means every command.
 */
void cmd_command(resp_conn *c, const resp_cmd *cmd) {
  size_t n;
  const resp_command *t = resp_commands(&n);
  int all = cmd->argc <= 2;
  if (cmd->argc == 1 || resp_arg_is(cmd, 1, "INFO")) {
    out_hdr(c, '*', all ? (int64_t)n : cmd->argc - 2);
    for (size_t k = 0; all && k < n; k++) out_command_info(c, &t[k]);
    for (int i = 2; i < cmd->argc; i++) {
      const resp_command *rc = find(cmd, i);
      if (rc)
        out_command_info(c, rc);
      else
        out_null(c);
    }
  } else if (resp_arg_is(cmd, 1, "COUNT") && cmd->argc == 2) {
    out_int(c, (long long)n);
  } else if (resp_arg_is(cmd, 1, "LIST")) {
    out_hdr(c, '*', (int64_t)n);
    for (size_t k = 0; k < n; k++) out_lower(c, &t[k]);
  } else if (resp_arg_is(cmd, 1, "DOCS")) {
    size_t known = 0;
    for (int i = 2; i < cmd->argc; i++) known += find(cmd, i) != NULL;
    out_map(c, all ? n : known);
    for (size_t k = 0; all && k < n; k++) out_command_docs(c, &t[k]);
    for (int i = 2; i < cmd->argc; i++)
      if (find(cmd, i)) out_command_docs(c, find(cmd, i));
  } else if (resp_arg_is(cmd, 1, "COUNT")) {
    out_err(c, "ERR wrong number of arguments for 'command|count' command");
  } else {
    out_err(c, "ERR unknown subcommand '%.*s'. Try COMMAND HELP.",
            (int)(cmd->len[1] < 40 ? cmd->len[1] : 40), cmd->argv[1]);
  }
}

/* ---- CLIENT ---- */

int resp_name_ok(const char *s, size_t n) {
  if (n > RESP_NAME_MAX) return 0;
  for (size_t i = 0; i < n; i++)
    if (s[i] < '!' || s[i] > '~') return 0;
  return 1;
}

int resp_name_set(char **slot, const char *s, size_t n) {
  char *copy = NULL;
  if (n) {
    if (!(copy = malloc(n + 1))) return -1;
    memcpy(copy, s, n);
    copy[n] = '\0';
  }
  free(*slot);
  *slot = copy;
  return 0;
}

/* CLIENT INFO's line for c, Redis's fields that mean something here. */
static void client_info(resp_conn *c) {
  struct sockaddr_storage ss;
  memset(&ss, 0, sizeof ss);
  char addr[NI_MAXHOST] = "?";
  int port = 0;
  socklen_t len = h2o_socket_getpeername(c->sock, (struct sockaddr *)&ss);
  if (len) {
    size_t an = h2o_socket_getnumerichost((struct sockaddr *)&ss, len, addr);
    addr[an == SIZE_MAX || an >= sizeof addr ? 0 : an] = '\0';
    port = h2o_socket_getport((struct sockaddr *)&ss);
  }
  char line[1024];
  int n = snprintf(
      line, sizeof line,
      "id=%lld addr=%s:%d fd=%d name=%s age=%lld idle=0 flags=%s "
      "db=0 sub=0 psub=0 ssub=0 multi=%d qbuf=0 obl=0 oll=%zu omem=%zu "
      "cmd=client|info user=%s resp=%d lib-name=%s lib-ver=%s\n",
      c->id, addr, port, h2o_socket_get_fd(c->sock), c->name ? c->name : "",
      (long long)((clock_mono_ns() - c->opened_ns) / 1000000000),
      c->txn.on ? "x" : "N", c->txn.on ? (int)c->txn.n : -1, c->nslots,
      c->out.cap, c->admin ? "admin" : "default", c->proto,
      c->lib_name ? c->lib_name : "", c->lib_ver ? c->lib_ver : "");
  out_verbatim(c, line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1);
}

/* CLIENT SETNAME / SETINFO's value check: OK, or Redis's error. */
static void set_attr(resp_conn *c, char **slot, const char *what,
                     const char *s, size_t n) {
  if (!resp_name_ok(s, n)) {
    if (n > RESP_NAME_MAX)
      out_err(c, "ERR %s is too long (at most %d bytes)", what,
              RESP_NAME_MAX);
    else if (!strcmp(what, "Client name"))
      out_err(c, "ERR Client names cannot contain spaces, newlines or "
                 "special characters.");
    else
      out_err(c, "ERR %s cannot contain spaces, newlines or special "
                 "characters.", what);
    return;
  }
  if (resp_name_set(slot, s, n))
    out_err(c, "ERR out of memory");
  else
    out_raw(c, "+OK\r\n", 5);
}

/* CLIENT's subcommands: name, arity (with CLIENT), what they do. */
enum { CL_ID, CL_GETNAME, CL_SETNAME, CL_SETINFO, CL_INFO };
static const struct {
  const char *name;
  int argc, which;
} client_subs[] = {
    {"ID", 2, CL_ID},           {"GETNAME", 2, CL_GETNAME},
    {"SETNAME", 3, CL_SETNAME}, {"SETINFO", 4, CL_SETINFO},
    {"INFO", 2, CL_INFO},
};

void cmd_client(resp_conn *c, const resp_cmd *cmd) {
  size_t k = 0, n = sizeof client_subs / sizeof client_subs[0];
  while (k < n && !resp_arg_is(cmd, 1, client_subs[k].name)) k++;
  if (k == n) {
    out_err(c, "ERR unknown subcommand '%.*s'. Try CLIENT HELP.",
            (int)(cmd->len[1] < 40 ? cmd->len[1] : 40), cmd->argv[1]);
    return;
  }
  if (cmd->argc != client_subs[k].argc) {
    char sub[16];
    size_t i = 0;
    for (; client_subs[k].name[i]; i++)
      sub[i] = (char)tolower((unsigned char)client_subs[k].name[i]);
    sub[i] = '\0';
    out_err(c, "ERR wrong number of arguments for 'client|%s' command", sub);
    return;
  }
  switch (client_subs[k].which) {
  case CL_ID:
    out_int(c, c->id);
    break;
  case CL_GETNAME:
    if (c->name)
      out_cstr(c, c->name);
    else
      out_null(c);
    break;
  case CL_SETNAME:
    set_attr(c, &c->name, "Client name", cmd->argv[2], cmd->len[2]);
    break;
  case CL_SETINFO:
    if (resp_arg_is(cmd, 2, "LIB-NAME"))
      set_attr(c, &c->lib_name, "lib-name", cmd->argv[3], cmd->len[3]);
    else if (resp_arg_is(cmd, 2, "LIB-VER"))
      set_attr(c, &c->lib_ver, "lib-ver", cmd->argv[3], cmd->len[3]);
    else
      out_err(c, "ERR Unrecognized option '%.*s'",
              (int)(cmd->len[2] < 40 ? cmd->len[2] : 40), cmd->argv[2]);
    break;
  default:
    client_info(c);
  }
}
