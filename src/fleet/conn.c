/*
 * conn.c — fleet mode's configuration (the --store URL) and its blocking
 * connections: the handshake every connection makes, and the discovery of
 * the slot map at start.
 */
#include "conn.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "script.h"

/* ---- configuration ---- */

/* "HOST:PORT" (n bytes; the last colon separates the port, so an IPv6
   host may have colons) into *a. 0, or -1 with a message in err. */
static int parse_hostport(const char *s, size_t n, rc_addr *a, char *err,
                          size_t len) {
  const char *colon = NULL;
  for (size_t i = 0; i < n; i++)
    if (s[i] == ':') colon = s + i;
  if (!colon || colon == s || (size_t)(colon - s) >= sizeof a->host) {
    snprintf(err, len, "expected HOST:PORT, got '%.*s'", (int)n, s);
    return -1;
  }
  memcpy(a->host, s, (size_t)(colon - s));
  a->host[colon - s] = '\0';
  long port = 0;
  const char *p = colon + 1;
  if (p == s + n) port = -1;
  for (; p < s + n; p++) {
    if (*p < '0' || *p > '9' || port > 65535) {
      port = -1;
      break;
    }
    port = port * 10 + (*p - '0');
  }
  if (port <= 0 || port > 65535) {
    snprintf(err, len, "bad port in '%.*s'", (int)n, s);
    return -1;
  }
  a->port = (int)port;
  return 0;
}

int rc_config_parse(const char *url, rc_config *c, char *err, size_t len) {
  const char *rest;
  if (!strncmp(url, "redis://", 8)) {
    c->cluster = 0;
    rest = url + 8;
  } else if (!strncmp(url, "redis-cluster://", 16)) {
    c->cluster = 1;
    rest = url + 16;
  } else {
    snprintf(err, len,
             "'%s': expected memory, redis://HOST:PORT[/DB] or "
             "redis-cluster://HOST:PORT[,HOST:PORT...]",
             url);
    return -1;
  }
  c->password[0] = c->user[0] = '\0';
  c->db = 0;
  c->nseeds = 0;
  const char *at = strrchr(rest, '@');
  if (at) {
    const char *colon = memchr(rest, ':', (size_t)(at - rest));
    if (!colon) {
      snprintf(err, len, "credentials must be [USER]:PASSWORD@");
      return -1;
    }
    size_t ul = (size_t)(colon - rest), pl = (size_t)(at - colon - 1);
    if (ul >= sizeof c->user || pl >= sizeof c->password || pl == 0) {
      snprintf(err, len, "user or password empty or too long");
      return -1;
    }
    memcpy(c->user, rest, ul);
    c->user[ul] = '\0';
    memcpy(c->password, colon + 1, pl);
    c->password[pl] = '\0';
    rest = at + 1;
  }
  const char *slash = strchr(rest, '/');
  const char *end = slash ? slash : rest + strlen(rest);
  if (slash) {
    if (c->cluster) {
      snprintf(err, len, "a cluster has no database number");
      return -1;
    }
    char *e;
    long db = strtol(slash + 1, &e, 10);
    if (!slash[1] || *e || db < 0 || db > 1000000) {
      snprintf(err, len, "bad database number '%s'", slash + 1);
      return -1;
    }
    c->db = (int)db;
  }
  const char *p = rest;
  while (p < end) {
    const char *comma = memchr(p, ',', (size_t)(end - p));
    const char *e = comma ? comma : end;
    if (c->nseeds == RC_MAX_SEEDS) {
      snprintf(err, len, "more than %d nodes", RC_MAX_SEEDS);
      return -1;
    }
    if (parse_hostport(p, (size_t)(e - p), &c->seeds[c->nseeds++], err, len))
      return -1;
    if (!c->cluster && comma) {
      snprintf(err, len, "redis:// takes one node (redis-cluster:// many)");
      return -1;
    }
    p = comma ? comma + 1 : end;
  }
  if (c->nseeds == 0) {
    snprintf(err, len, "no HOST:PORT in '%s'", url);
    return -1;
  }
  return 0;
}

/* ---- blocking connections, discovery at start ---- */

redisContext *rc_connect_sync(const rc_config *c, const rc_addr *a,
                              char *err, size_t len) {
  struct timeval tv = {c->timeout_ms / 1000, (c->timeout_ms % 1000) * 1000};
  redisContext *r = redisConnectWithTimeout(a->host, a->port, tv);
  if (!r || r->err) {
    snprintf(err, len, "%s:%d: %s", a->host, a->port,
             r ? r->errstr : "out of memory");
    if (r) redisFree(r);
    return NULL;
  }
  redisSetTimeout(r, tv);
  redisReply *rep = NULL;
  if (c->password[0]) {
    rep = c->user[0] ? redisCommand(r, "AUTH %s %s", c->user, c->password)
                     : redisCommand(r, "AUTH %s", c->password);
  } else {
    rep = redisCommand(r, "PING");
  }
  if (rep && rep->type != REDIS_REPLY_ERROR && c->db && !c->cluster) {
    freeReplyObject(rep);
    rep = redisCommand(r, "SELECT %d", c->db);
  }
  if (rep && rep->type != REDIS_REPLY_ERROR) {
    size_t sl;
    const char *script = rs_script(&sl);
    freeReplyObject(rep);
    rep = redisCommand(r, "SCRIPT LOAD %b", script, sl);
  }
  if (!rep || rep->type == REDIS_REPLY_ERROR) {
    snprintf(err, len, "%s:%d: %s", a->host, a->port,
             rep ? rep->str : r->errstr);
    if (rep) freeReplyObject(rep);
    redisFree(r);
    return NULL;
  }
  freeReplyObject(rep);
  return r;
}

int rc_discover(const rc_config *c, rc_topology *t, char *err, size_t len) {
  memset(t->slot_node, 0xff, sizeof t->slot_node);
  t->nnodes = 0;
  for (int i = 0; i < c->nseeds; i++)
    rc_topology_node(t, c->seeds[i].host, c->seeds[i].port);
  for (int i = 0; i < c->nseeds; i++) {
    redisContext *r = rc_connect_sync(c, &c->seeds[i], err, len);
    if (!r) {
      if (!c->cluster) return -1;
      continue;
    }
    if (!c->cluster) {
      redisFree(r);
      memset(t->slot_node, 0, sizeof t->slot_node);
      return 0;
    }
    redisReply *rep = redisCommand(r, "CLUSTER SLOTS");
    if (!rep || rep->type != REDIS_REPLY_ARRAY) {
      snprintf(err, len, "CLUSTER SLOTS: %s",
               rep && rep->type == REDIS_REPLY_ERROR ? rep->str : r->errstr);
      if (rep) freeReplyObject(rep);
      redisFree(r);
      continue;
    }
    rc_topology_read(t, rep, c->seeds[i].host);
    freeReplyObject(rep);
    redisFree(r);
    /* Load the script on every master now (NOSCRIPT would do it later). */
    int ok = 1;
    for (int n = 0; n < t->nnodes; n++) {
      redisContext *m = rc_connect_sync(c, &t->nodes[n], err, len);
      if (!m) {
        ok = 0;
        continue;
      }
      redisFree(m);
    }
    return ok ? 0 : -1;
  }
  return -1;
}
