/*
 * resp_auth.c — RESP's AUTH and the limits on guessing (see resp_auth.h).
 *
 * Two users, as Redis 6's `AUTH username password` names them: `default`
 * (or no username) with --password, and `admin` with --admin-token, which
 * also authenticates the connection and lets it run the admin commands
 * (resp.c's table marks them). redis-cli: `--user admin --pass TOKEN`;
 * redis-py: `Redis(username="admin", password=TOKEN)`.
 *
 * Guessing is limited by sluice's own limiter: a private store (capped at
 * RESP_AUTH_PEERS_MEMORY, so the table of peers is bounded too: past it,
 * the store evicts) with one limiter, RESP_AUTH_PEER_POLICY, charged one
 * unit per failure and keyed by the peer's address. Before a secret is
 * compared, the peer's level is read; an address with nothing left is
 * refused without a comparison, so a guesser gets that policy's rate
 * however many connections it opens. A success charges nothing.
 */
#include <arpa/inet.h>
#include <ctype.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "resp_auth.h"

struct resp_auth {
  sl_store *store;
  sl_limiter *lim;
  atomic_ullong failed;     /* failures since the last log line */
  _Atomic int64_t logged_at; /* clock_mono_ns of the last line; 0: none */
};

int resp_auth_new(resp_shared *g) {
  struct resp_auth *a = calloc(1, sizeof *a);
  if (!a) return -1;
  sl_store_options so;
  sl_store_options_init(&so);
  so.max_memory = RESP_AUTH_PEERS_MEMORY;
  so.shards = 4;
  sl_policy p;
  char err[128];
  if (sl_policy_parse(RESP_AUTH_PEER_POLICY, &p, err, sizeof err) ||
      sl_store_new(&so, &a->store) || sl_limiter_new(a->store, &p, &a->lim)) {
    log_msg("error", "resp: the failed-AUTH limiter could not be made");
    if (a->store) sl_store_free(a->store);
    free(a);
    return -1;
  }
  g->auth = a;
  return 0;
}

void resp_auth_free(resp_shared *g) {
  struct resp_auth *a = g->auth;
  if (!a) return;
  sl_limiter_free(a->lim);
  sl_store_free(a->store);
  free(a);
  g->auth = NULL;
}

/*
 * The peer's key for the limiter (an IPv4 address; an IPv6 /64, since one
 * host commonly has a whole /64; a v4-mapped address as IPv4) into key,
 * its length returned, and the address as text into text.
 */
static size_t peer_key(resp_conn *c, unsigned char key[9], char *text,
                       size_t tlen) {
  struct sockaddr_storage ss;
  memset(&ss, 0, sizeof ss);
  snprintf(text, tlen, "?");
  if (!h2o_socket_getpeername(c->sock, (struct sockaddr *)&ss)) {
    key[0] = 0;
    return 1;
  }
  if (ss.ss_family == AF_INET6) {
    const struct sockaddr_in6 *s6 = (const void *)&ss;
    inet_ntop(AF_INET6, &s6->sin6_addr, text, (socklen_t)tlen);
    if (!IN6_IS_ADDR_V4MAPPED(&s6->sin6_addr)) {
      key[0] = 6;
      memcpy(key + 1, s6->sin6_addr.s6_addr, 8);
      return 9;
    }
    key[0] = 4;
    memcpy(key + 1, s6->sin6_addr.s6_addr + 12, 4);
    return 5;
  }
  if (ss.ss_family == AF_INET) {
    const struct sockaddr_in *s4 = (const void *)&ss;
    inet_ntop(AF_INET, &s4->sin_addr, text, (socklen_t)tlen);
    key[0] = 4;
    memcpy(key + 1, &s4->sin_addr, 4);
    return 5;
  }
  key[0] = 0; /* (a Unix socket: all one peer) */
  return 1;
}

/* One line per RESP_AUTH_LOG_EVERY_S at most, with the count since the
   last one; whichever thread is first past the interval writes it. */
static void log_failure(struct resp_auth *a, const char *peer, int throttled) {
  atomic_fetch_add(&a->failed, 1);
  int64_t now = clock_mono_ns(), last = atomic_load(&a->logged_at);
  if (last && now - last < (int64_t)RESP_AUTH_LOG_EVERY_S * 1000000000)
    return;
  if (!atomic_compare_exchange_strong(&a->logged_at, &last, now)) return;
  unsigned long long n = atomic_exchange(&a->failed, 0);
  log_msg("warn",
          "resp: %llu failed AUTH attempt%s since the last report (the "
          "latest from %s%s; a connection closes after %d, an address may "
          "fail at %s)",
          n, n == 1 ? "" : "s", peer, throttled ? ", refused unchecked" : "",
          RESP_AUTH_MAX_FAILURES, RESP_AUTH_PEER_POLICY);
}

/* A failed attempt (`kind`: RESP_AUTH_*): counted, charged to the peer,
   logged, answered; the connection closes at the last one it may make. */
static void failed(resp_conn *c, int kind, const unsigned char *key,
                   size_t klen, const char *peer) {
  resp_shared *g = c->w->srv->resp;
  resp_count_auth(c->w, kind);
  if (kind == RESP_AUTH_WRONG) {
    sl_decision d;
    sl_limiter_take(g->auth->lim, key, klen, 1, clock_wall_ns(), &d);
    out_err(c, "WRONGPASS invalid username-password pair or user is "
               "disabled.");
  } else {
    out_err(c, "ERR too many failed AUTH attempts from this address; "
               "try again later");
  }
  log_failure(g->auth, peer, kind == RESP_AUTH_THROTTLED);
  if (++c->auth_failures >= RESP_AUTH_MAX_FAILURES) {
    c->closing = 1;
    resp_count_close(c->w, RESP_CLOSE_AUTH_FAILURES);
  }
}

/* Constant-time comparison of a secret. */
static int same_secret(const char *a, size_t alen, const char *b) {
  size_t blen = strlen(b);
  unsigned char diff = alen != blen;
  for (size_t i = 0; i < alen; i++)
    diff |= (unsigned char)(a[i] ^ b[i % (blen ? blen : 1)]);
  return diff == 0;
}

/*
 * Checks a secret given for user (NULL: no user named, AUTH's one-argument
 * form). 0 when it opens the connection (then marked authenticated, as
 * admin with the admin token); -1 when it does not, the error answered.
 */
static int check_secret(resp_conn *c, const char *user, size_t ulen,
                        const char *given, size_t given_len) {
  const srv_opts *o = &c->w->srv->o;
  int named = user != NULL;
  int as_admin = named && o->admin_token && ulen == 5 &&
                 !strncasecmp(user, "admin", 5);
  const char *secret = as_admin ? o->admin_token : o->password;
  if (!secret && !(named && o->admin_token)) {
    out_err(c, "ERR AUTH <password> called without any password "
               "configured for the default user. Are you sure your "
               "configuration is correct?");
    return -1;
  }
  unsigned char key[9];
  char peer[INET6_ADDRSTRLEN];
  size_t klen = peer_key(c, key, peer, sizeof peer);
  sl_decision d;
  if (sl_limiter_take(c->w->srv->resp->auth->lim, key, klen, 0,
                      clock_wall_ns(), &d) == 0 &&
      d.remaining <= 0) {
    failed(c, RESP_AUTH_THROTTLED, key, klen, peer);
    return -1;
  }
  int is_default = named && ulen == 7 && !strncasecmp(user, "default", 7);
  if (!secret || (named && !as_admin && !is_default) ||
      !same_secret(given, given_len, secret)) {
    failed(c, RESP_AUTH_WRONG, key, klen, peer);
    return -1;
  }
  c->admin = as_admin;
  resp_guard_authed(c);
  return 0;
}

void cmd_auth(resp_conn *c, const resp_cmd *cmd) {
  int named = cmd->argc == 3;
  if (!check_secret(c, named ? cmd->argv[1] : NULL, named ? cmd->len[1] : 0,
                    cmd->argv[cmd->argc - 1], cmd->len[cmd->argc - 1]))
    out_raw(c, "+OK\r\n", 5);
}

/*
 * HELLO [protover [AUTH username password] [SETNAME clientname]], as Redis
 * 6+ answers it: protover 2 or 3 (3: RESP3 replies from then on: maps,
 * sets, nulls as `_`, text as verbatim strings; the rest as in RESP2), any
 * other number NOPROTO; then the server's facts as a map (a flat array in
 * RESP2). Its AUTH is AUTH's, throttled the same way; a connection that
 * needs AUTH and gives none gets Redis's NOAUTH; SETNAME names the
 * connection as CLIENT SETNAME does. Nothing changes unless all is well.
 */
void cmd_hello(resp_conn *c, const resp_cmd *cmd) {
  int proto = c->proto;
  if (cmd->argc >= 2) {
    /* Redis reads a long long; any number but 2 or 3 is one it lacks. */
    size_t n = cmd->len[1], i = n && cmd->argv[1][0] == '-';
    while (i < n && i < 19 && isdigit((unsigned char)cmd->argv[1][i])) i++;
    if (!n || i != n || (n == 1 && cmd->argv[1][0] == '-')) {
      out_err(c, "ERR Protocol version is not an integer or out of range");
      return;
    }
    if (n != 1 || (cmd->argv[1][0] != '2' && cmd->argv[1][0] != '3')) {
      out_err(c, "NOPROTO unsupported protocol version");
      return;
    }
    proto = cmd->argv[1][0] - '0';
  }
  const char *user = NULL, *pass = NULL, *name = NULL;
  size_t ulen = 0, plen = 0, nlen = 0;
  for (int i = 2; i < cmd->argc; i++) {
    if (resp_arg_is(cmd, i, "AUTH") && i + 2 < cmd->argc) {
      user = cmd->argv[i + 1], ulen = cmd->len[i + 1];
      pass = cmd->argv[i + 2], plen = cmd->len[i + 2];
      i += 2;
    } else if (resp_arg_is(cmd, i, "SETNAME") && i + 1 < cmd->argc) {
      name = cmd->argv[i + 1], nlen = cmd->len[i + 1];
      i += 1;
    } else {
      out_err(c, "ERR Syntax error in HELLO option '%.*s'",
              (int)(cmd->len[i] < 40 ? cmd->len[i] : 40), cmd->argv[i]);
      return;
    }
  }
  if (user && check_secret(c, user, ulen, pass, plen)) return;
  if (!user && c->w->srv->o.password && !c->authed) {
    out_err(c, "NOAUTH HELLO must be called with the client already "
               "authenticated, otherwise the HELLO <proto> AUTH <user> "
               "<pass> option can be used to authenticate the client and "
               "select the RESP protocol version at the same time");
    return;
  }
  if (name && !resp_name_ok(name, nlen)) {
    out_err(c, "ERR Client names cannot contain spaces, newlines or "
               "special characters.");
    return;
  }
  if (name && resp_name_set(&c->name, name, nlen)) {
    out_err(c, "ERR out of memory");
    return;
  }
  c->proto = proto;
  const char *version = sl_version_string();
  out_map(c, 7);
  out_cstr(c, "server");
  out_cstr(c, "sluice");
  out_cstr(c, "version");
  out_cstr(c, version);
  out_cstr(c, "proto");
  out_int(c, proto);
  out_cstr(c, "id");
  out_int(c, c->id);
  out_cstr(c, "mode");
  out_cstr(c, "standalone");
  out_cstr(c, "role");
  out_cstr(c, "master");
  out_cstr(c, "modules");
  out_raw(c, "*0\r\n", 4);
}
