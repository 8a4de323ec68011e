/*
 * resp_parse.c — RESP2 request parsing (see resp_parse.h).
 *
 * Why not hiredis's reader: it buffers a declared bulk ("$1000000000") until
 * it is complete before calling back, so an oversized length cannot be
 * refused at its header. Redis's own server refuses it there; so does this,
 * with Redis's messages.
 */
#include "resp_parse.h"

#include <string.h>

/* A decimal after the type byte, up to "\r\n". 1 parsed, 0 need more, -1
   malformed. *end = the byte after "\r\n". */
static int read_int(const char *p, const char *lim, long long *v,
                    const char **end) {
  const char *cr = memchr(p, '\r', (size_t)(lim - p));
  if (!cr || cr + 1 >= lim) {
    if (lim - p > 32) return -1; /* no number is that long */
    return 0;
  }
  if (cr[1] != '\n') return -1;
  int neg = 0;
  if (p < cr && *p == '-') {
    neg = 1;
    p++;
  }
  if (p == cr || cr - p > 18) return -1;
  long long x = 0;
  for (; p < cr; p++) {
    if (*p < '0' || *p > '9') return -1;
    x = x * 10 + (*p - '0');
  }
  *v = neg ? -x : x;
  *end = cr + 2;
  return 1;
}

static ssize_t parse_inline(const char *buf, size_t len, resp_cmd *cmd,
                            size_t *need, const char **err) {
  const char *nl = memchr(buf, '\n', len);
  if (!nl) {
    if (len > RESP_MAX_INLINE) {
      *err = "Protocol error: too big inline request";
      return -1;
    }
    *need = len + 1;
    return 0;
  }
  if (nl - buf > RESP_MAX_INLINE) { /* however the bytes arrived */
    *err = "Protocol error: too big inline request";
    return -1;
  }
  const char *end = nl > buf && nl[-1] == '\r' ? nl - 1 : nl;
  cmd->argc = 0;
  for (const char *p = buf; p < end;) {
    while (p < end && (*p == ' ' || *p == '\t')) p++;
    if (p == end) break;
    const char *w = p;
    while (p < end && *p != ' ' && *p != '\t') p++;
    if (cmd->argc == RESP_MAX_ARGS) {
      *err = "Protocol error: too many arguments in inline request";
      return -1;
    }
    cmd->argv[cmd->argc] = w;
    cmd->len[cmd->argc++] = (size_t)(p - w);
  }
  return nl + 1 - buf;
}

ssize_t resp_parse(const char *buf, size_t len, resp_cmd *cmd, size_t *need,
                   const char **err) {
  *need = len + 1;
  if (len == 0) return 0;
  if (buf[0] != '*') return parse_inline(buf, len, cmd, need, err);
  const char *lim = buf + len, *p;
  long long n;
  int r = read_int(buf + 1, lim, &n, &p);
  if (r < 0 || (r > 0 && (n < 0 || n > RESP_MAX_ARGS))) {
    *err = "Protocol error: invalid multibulk length";
    return -1;
  }
  if (r == 0) return 0;
  cmd->argc = 0;
  for (long long i = 0; i < n; i++) {
    if (p >= lim) {
      *need = (size_t)(p - buf) + 1;
      return 0;
    }
    if (*p != '$') {
      static _Thread_local char msg[64];
      /* Redis: "Protocol error: expected '$', got 'x'" */
      memcpy(msg, "Protocol error: expected '$', got ' '", 38);
      msg[35] = (*p >= 32 && *p < 127) ? *p : '?';
      *err = msg;
      return -1;
    }
    long long blen;
    r = read_int(p + 1, lim, &blen, &p);
    if (r < 0 || (r > 0 && (blen < 0 || blen > RESP_MAX_BULK))) {
      *err = "Protocol error: invalid bulk length";
      return -1;
    }
    if (r == 0) return 0;
    if (lim - p < blen + 2) {
      *need = (size_t)(p - buf) + (size_t)blen + 2;
      return 0;
    }
    if (p[blen] != '\r' || p[blen + 1] != '\n') {
      *err = "Protocol error: bulk string not terminated by CRLF";
      return -1;
    }
    cmd->argv[cmd->argc] = p;
    cmd->len[cmd->argc++] = (size_t)blen;
    p += blen + 2;
  }
  return p - buf;
}
