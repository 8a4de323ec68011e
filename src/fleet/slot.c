/*
 * slot.c — Redis Cluster's key slot (the cluster spec's keyHashSlot), its
 * redirects, and TRYAGAIN's batch split (slot.h says why).
 */
#include "slot.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* CRC16-CCITT (XMODEM): polynomial 0x1021, initial 0, no reflection. */
static uint16_t crc16(const char *buf, size_t len) {
  uint16_t crc = 0;
  for (size_t i = 0; i < len; i++) {
    crc ^= (uint16_t)((uint8_t)buf[i] << 8);
    for (int b = 0; b < 8; b++)
      crc = (uint16_t)(crc & 0x8000 ? (crc << 1) ^ 0x1021 : crc << 1);
  }
  return crc;
}

unsigned rc_key_slot(const char *key, size_t len) {
  /* The first '{', and the first '}' after it, with something between. */
  const char *open = memchr(key, '{', len);
  if (open) {
    size_t rest = len - (size_t)(open + 1 - key);
    const char *close = memchr(open + 1, '}', rest);
    if (close && close > open + 1)
      return crc16(open + 1, (size_t)(close - open - 1)) & 16383;
  }
  return crc16(key, len) & 16383;
}

/* ---- a tag for every slot ---- */

/* tags[s]: the first string of 1 to 3 characters of [0-9A-Za-z] (shorter
   first, then in that order) whose slot is s. The 242,234 such strings
   cover all 16,384 slots; every daemon builds the same table. */
static char slot_tags[16384][4];
static pthread_once_t slot_tags_once = PTHREAD_ONCE_INIT;

static void slot_tags_build(void) {
  static const char al[] =
      "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
  size_t found = 0, na = sizeof al - 1;
  char s[4] = "";
  for (size_t len = 1; len <= 3 && found < 16384; len++) {
    size_t total = 1;
    for (size_t k = 0; k < len; k++) total *= na;
    for (size_t v = 0; v < total && found < 16384; v++) {
      size_t x = v;
      for (size_t k = len; k-- > 0; x /= na) s[k] = al[x % na];
      s[len] = '\0';
      unsigned slot = crc16(s, len) & 16383;
      if (!slot_tags[slot][0]) {
        memcpy(slot_tags[slot], s, len + 1);
        found++;
      }
    }
  }
}

const char *rc_slot_tag(unsigned slot, size_t *len) {
  pthread_once(&slot_tags_once, slot_tags_build);
  const char *t = slot_tags[slot & 16383];
  *len = strlen(t);
  return t;
}

/* ---- the slot map ---- */

int rc_topology_node(rc_topology *t, const char *host, int port) {
  for (int i = 0; i < t->nnodes; i++)
    if (t->nodes[i].port == port && !strcmp(t->nodes[i].host, host)) return i;
  if (t->nnodes == RC_MAX_NODES || strlen(host) >= sizeof t->nodes[0].host)
    return -1;
  snprintf(t->nodes[t->nnodes].host, sizeof t->nodes[0].host, "%s", host);
  t->nodes[t->nnodes].port = port;
  return t->nnodes++;
}

/* A CLUSTER SLOTS range's master: its index in t (added if new), or -1
   when the range is malformed or t is full. */
static int range_master(rc_topology *t, const redisReply *e,
                        const char *from_host) {
  if (e->type != REDIS_REPLY_ARRAY || e->elements < 3 ||
      e->element[0]->type != REDIS_REPLY_INTEGER ||
      e->element[1]->type != REDIS_REPLY_INTEGER)
    return -1;
  const redisReply *m = e->element[2];
  if (m->type != REDIS_REPLY_ARRAY || m->elements < 2 ||
      m->element[0]->type != REDIS_REPLY_STRING ||
      m->element[1]->type != REDIS_REPLY_INTEGER ||
      m->element[1]->integer <= 0 || m->element[1]->integer > 65535)
    return -1;
  const char *host = m->element[0]->len ? m->element[0]->str : from_host;
  return rc_topology_node(t, host, (int)m->element[1]->integer);
}

int rc_topology_read(rc_topology *t, const redisReply *r,
                     const char *from_host) {
  if (!r || r->type != REDIS_REPLY_ARRAY) return -1;
  int set = 0;
  for (size_t k = 0; k < r->elements; k++) {
    const redisReply *e = r->element[k];
    int n = range_master(t, e, from_host);
    if (n < 0) continue;
    long long lo = e->element[0]->integer, hi = e->element[1]->integer;
    for (long long s = lo < 0 ? 0 : lo; s <= hi && s < 16384; s++, set++)
      t->slot_node[s] = (uint8_t)n;
  }
  return set;
}

/* ---- redirects ---- */

/* A decimal in [p, end), 1 to 5 digits, at most max; -1 if not. */
static long small_dec(const char *p, const char *end, long max) {
  if (p == end || end - p > 5) return -1;
  long v = 0;
  for (; p < end; p++) {
    if (*p < '0' || *p > '9') return -1;
    v = v * 10 + (*p - '0');
  }
  return v <= max ? v : -1;
}

int rc_parse_redirect(const char *err, size_t len, rc_redirect *rd) {
  if (!err || !rd) return -1;
  const char *p = err, *end = err + len;
  int ask;
  if (len > 6 && !memcmp(p, "MOVED ", 6)) {
    ask = 0;
    p += 6;
  } else if (len > 4 && !memcmp(p, "ASK ", 4)) {
    ask = 1;
    p += 4;
  } else {
    return -1;
  }
  const char *sp = memchr(p, ' ', (size_t)(end - p));
  if (!sp) return -1;
  long slot = small_dec(p, sp, 16383);
  const char *addr = sp + 1, *colon = NULL;
  for (const char *q = addr; q < end; q++)
    if (*q == ':') colon = q;
  if (slot < 0 || !colon || (size_t)(colon - addr) >= sizeof rd->host)
    return -1;
  long port = small_dec(colon + 1, end, 65535);
  if (port <= 0) return -1;
  for (const char *q = addr; q < colon; q++)
    if (*q == ' ' || *q == '\0') return -1;
  rd->ask = ask;
  rd->slot = (int)slot;
  memcpy(rd->host, addr, (size_t)(colon - addr));
  rd->host[colon - addr] = '\0';
  rd->port = (int)port;
  return 0;
}

/* ---- TRYAGAIN: a batch split into its requests, and joined again ---- */

/* The arguments of a RESP command (an array of bulk strings) into
   argv/lens (malloc'd, *argc of them). 0, or -1 if malformed. */
static int resp_args(const char *cmd, size_t len, const char ***argv,
                     size_t **lens, size_t *argc) {
  const char *p = cmd, *end = cmd + len;
  *argv = NULL;
  *lens = NULL;
  size_t n = 0;
  if (p == end || *p++ != '*') return -1;
  while (p < end && *p >= '0' && *p <= '9' && n < 100000)
    n = n * 10 + (size_t)(*p++ - '0');
  if (n == 0 || end - p < 2 || p[0] != '\r' || p[1] != '\n') return -1;
  p += 2;
  const char **a = malloc(n * sizeof *a);
  size_t *l = malloc(n * sizeof *l);
  if (!a || !l) goto bad;
  for (size_t i = 0; i < n; i++) {
    size_t bl = 0;
    if (p == end || *p++ != '$') goto bad;
    const char *d0 = p;
    while (p < end && *p >= '0' && *p <= '9' && p - d0 < 12)
      bl = bl * 10 + (size_t)(*p++ - '0');
    if (p == d0 || end - p < 2 || p[0] != '\r' || p[1] != '\n') goto bad;
    p += 2;
    if ((size_t)(end - p) < bl + 2 || p[bl] != '\r' || p[bl + 1] != '\n')
      goto bad;
    a[i] = p;
    l[i] = bl;
    p += bl + 2;
  }
  if (p != end) goto bad;
  *argv = a;
  *lens = l;
  *argc = n;
  return 0;
bad:
  free(a);
  free(l);
  return -1;
}

void rc_split_free(rc_split *s) {
  if (!s) return;
  for (size_t i = 0; i < s->n; i++) free(s->part[i].cmd);
  free(s);
}

/*
 * decide.lua's CALL: EVALSHA sha nk KEYS[1..nk] now mode VALUES[3 nk],
 * mode = '0' (one request of every key), or 'g' or 'f' and a byte per
 * request (its number of keys, the keys consecutive, three values per
 * key); '0' and 'g' perhaps after a 'p' (dropped in the parts). Part i:
 * EVALSHA sha k_i its keys now mode' k_i its values, mode' being mode[0]
 * k_i, or '1' (dry: decided, not charged) when dry. Without dry: a 'g'
 * or 'f' batch of two or more requests only; with it: any 'g' or '0'
 * call (a '1' is dry already, an 'f' must charge).
 */
static rc_split *split_as(const char *cmd, size_t len, int dry) {
  const char **argv, **a = NULL;
  size_t *lens, *al = NULL, argc;
  if (!cmd || resp_args(cmd, len, &argv, &lens, &argc)) return NULL;
  rc_split *s = NULL;
  size_t nk = 0;
  if (argc < 9 || lens[0] != 7 || strncasecmp(argv[0], "EVALSHA", 7) ||
      lens[2] == 0 || lens[2] > 4)
    goto out;
  for (size_t i = 0; i < lens[2]; i++) {
    if (argv[2][i] < '0' || argv[2][i] > '9') goto out;
    nk = nk * 10 + (size_t)(argv[2][i] - '0');
  }
  if (nk == 0 || argc != 5 + 4 * nk) goto out;
  const char *mode = argv[4 + nk];
  /* A "p" (the module's packed reply) is dropped: the parts' replies are
     joined as arrays, whichever a part's node would have answered. */
  if (lens[4 + nk] > 1 && mode[0] == 'p') {
    mode++;
    lens[4 + nk]--;
  }
  /* One request ('0'): read as a 'g' batch of one. */
  char one[2] = {'g', (char)(uint8_t)(nk < 256 ? nk : 0)};
  int single = dry && lens[4 + nk] == 1 && mode[0] == '0';
  if (single) mode = one;
  size_t n = single ? 1 : lens[4 + nk] - 1, sum = 0;
  if (!single &&
      (lens[4 + nk] < (dry ? 2u : 3u) ||
       (mode[0] != 'g' && (dry || mode[0] != 'f'))))
    goto out;
  for (size_t i = 0; i < n; i++) {
    if ((uint8_t)mode[1 + i] == 0) goto out;
    sum += (uint8_t)mode[1 + i];
  }
  if (sum != nk) goto out;
  s = calloc(1, sizeof *s + n * sizeof s->part[0]);
  a = malloc(argc * sizeof *a);
  al = malloc(argc * sizeof *al);
  if (!s || !a || !al) goto fail;
  s->n = n;
  for (size_t i = 0, o = 0; i < n; i++) {
    size_t k = (uint8_t)mode[1 + i], c = 0;
    char num[8], m[2] = {dry ? '1' : mode[0], (char)k};
    a[c] = argv[0], al[c++] = lens[0];
    a[c] = argv[1], al[c++] = lens[1];
    a[c] = num, al[c++] = (size_t)snprintf(num, sizeof num, "%zu", k);
    for (size_t x = 0; x < k; x++)
      a[c] = argv[3 + o + x], al[c++] = lens[3 + o + x];
    a[c] = argv[3 + nk], al[c++] = lens[3 + nk];
    a[c] = m, al[c++] = dry ? 1 : 2;
    for (size_t x = 0; x < 3 * k; x++)
      a[c] = argv[5 + nk + 3 * o + x], al[c++] = lens[5 + nk + 3 * o + x];
    int pl = redisFormatCommandArgv(&s->part[i].cmd, (int)c, a, al);
    if (pl < 0) goto fail;
    s->part[i].len = (size_t)pl;
    s->part[i].keys = k;
    o += k;
  }
  goto out;
fail:
  rc_split_free(s);
  s = NULL;
out:
  free(a);
  free(al);
  free(argv);
  free(lens);
  return s;
}

rc_split *rc_batch_split(const char *cmd, size_t len) {
  return split_as(cmd, len, 0);
}

rc_split *rc_batch_dry(const char *cmd, size_t len) {
  return split_as(cmd, len, 1);
}

/* A part's reply as decide.lua gives one request: now, allowed, six per
   key. */
static int part_ok(const redisReply *r, size_t keys) {
  return r && r->type == REDIS_REPLY_ARRAY && r->element &&
         r->elements == 2 + 6 * keys && r->element[0];
}

redisReply *rc_batch_join(const rc_split *s, redisReply **reply) {
  size_t total = 1, first = s->n;
  for (size_t i = 0; i < s->n; i++) {
    total += 1 + 6 * s->part[i].keys;
    if (first == s->n && part_ok(reply[i], s->part[i].keys)) first = i;
  }
  redisReply *out = NULL;
  if (first == s->n) goto done;
  out = calloc(1, sizeof *out);
  if (!out || !(out->element = calloc(total, sizeof *out->element))) {
    free(out);
    out = NULL;
    goto done;
  }
  out->type = REDIS_REPLY_ARRAY;
  out->elements = total;
  out->element[0] = reply[first]->element[0];
  reply[first]->element[0] = NULL;
  for (size_t i = 0, at = 1; i < s->n; i++) {
    size_t m = 1 + 6 * s->part[i].keys;
    int good = i == first || part_ok(reply[i], s->part[i].keys);
    for (size_t x = 0; x < m; x++, at++) {
      if (good) {
        out->element[at] = reply[i]->element[1 + x];
        reply[i]->element[1 + x] = NULL;
      } else if ((out->element[at] = calloc(1, sizeof **out->element))) {
        out->element[at]->type = REDIS_REPLY_NIL;
      } else {
        freeReplyObject(out);
        out = NULL;
        goto done;
      }
    }
  }
done:
  for (size_t i = 0; i < s->n; i++) {
    freeReplyObject(reply[i]);
    reply[i] = NULL;
  }
  return out;
}
