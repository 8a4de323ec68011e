/*
 * resp_parse.c — RESP2 request parsing (see resp_parse.h).
 *
 * Why not hiredis's reader: it buffers a declared bulk ("$1000000000") until
 * it is complete before calling back, so an oversized length cannot be
 * refused at its header. Redis's own server refuses it there; so does this,
 * with Redis's messages. The caller's limits (resp_limits) are checked the
 * same way: a command that will pass max_bytes is refused at the header of
 * the bulk that takes it there, so what a connection buffers for one
 * command is bounded by max_bytes, not by what the client declares.
 */
#include "resp_parse.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* A decimal after the type byte, up to "\r\n". 1 parsed, 0 need more, -1
   malformed. *end = the byte after "\r\n". */
static int read_int(const char *p, const char *lim, long long *v,
                    const char **end) {
  const char *q = p + (p < lim && *p == '-'), *digits = q;
  long long x = 0;
  /* (one pass: the digits, then "\r\n"; a 19th digit is too many) */
  for (; q < lim && *q >= '0' && *q <= '9' && q - digits < 18; q++)
    x = x * 10 + (*q - '0');
  if (q < lim && *q >= '0' && *q <= '9') return -1;
  if (q + 1 >= lim) return lim - p > 32 ? -1 : 0; /* need more */
  if (q == digits || q[0] != '\r' || q[1] != '\n') return -1;
  *v = *p == '-' ? -x : x;
  *end = q + 2;
  return 1;
}

static int is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' ||
         c == '\f';
}

static int hexv(char c) {
  return c >= '0' && c <= '9'   ? c - '0'
         : c >= 'a' && c <= 'f' ? c - 'a' + 10
         : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                : -1;
}

/*
 * Splits one inline line [p, end) into arguments the way Redis does
 * (sdssplitargs): a plain argument points into the line, one with quotes
 * is written, resolved, to cmd->unquoted. 0, -1 for unbalanced quotes (a
 * closing quote must end the argument), -2 for too many arguments.
 */
static int split_inline(const char *p, const char *end, resp_cmd *cmd) {
  char *out = cmd->unquoted; /* never outgrows the line it comes from */
  cmd->argc = 0;
  for (;;) {
    while (p < end && is_space(*p)) p++;
    if (p == end) return 0;
    if (cmd->argc == RESP_MAX_ARGS) return -2;
    char *arg = out;
    const char *tok = p;
    int inq = 0, insq = 0, done = 0, quoted = 0;
    while (!done) {
      char c = p < end ? *p : '\0';
      if (inq) {
        if (p == end) return -1; /* no closing quote */
        if (c == '\\' && p + 3 < end && p[1] == 'x' && hexv(p[2]) >= 0 &&
            hexv(p[3]) >= 0) {
          *out++ = (char)(hexv(p[2]) << 4 | hexv(p[3]));
          p += 3;
        } else if (c == '\\' && p + 1 < end) {
          p++;
          switch (*p) {
          case 'n': *out++ = '\n'; break;
          case 'r': *out++ = '\r'; break;
          case 't': *out++ = '\t'; break;
          case 'b': *out++ = '\b'; break;
          case 'a': *out++ = '\a'; break;
          default: *out++ = *p; break;
          }
        } else if (c == '"') {
          if (p + 1 < end && !is_space(p[1])) return -1;
          done = 1;
        } else {
          *out++ = c;
        }
      } else if (insq) {
        if (p == end) return -1;
        if (c == '\\' && p + 1 < end && p[1] == '\'') {
          p++;
          *out++ = '\'';
        } else if (c == '\'') {
          if (p + 1 < end && !is_space(p[1])) return -1;
          done = 1;
        } else {
          *out++ = c;
        }
      } else if (p == end || is_space(c)) {
        done = 1;
      } else if (c == '"') {
        inq = quoted = 1;
      } else if (c == '\'') {
        insq = quoted = 1;
      } else {
        *out++ = c;
      }
      if (p < end) p++;
    }
    if (!quoted) { /* the bytes as they are: point into the buffer */
      cmd->argv[cmd->argc] = tok;
      cmd->len[cmd->argc++] = (size_t)(out - arg);
      out = arg;
      continue;
    }
    cmd->argv[cmd->argc] = arg;
    cmd->len[cmd->argc++] = (size_t)(out - arg);
  }
}

/* An inline command: one line of at most `max` bytes (its newline
   aside); `over` is what exceeding it returns (-1 for the fixed
   RESP_MAX_INLINE, -2 for the caller's limit). */
static ssize_t parse_inline(const char *buf, size_t len, size_t max,
                            ssize_t over, resp_cmd *cmd, size_t *need,
                            const char **err) {
  const char *nl = memchr(buf, '\n', len);
  if (!nl) {
    if (len > max) {
      *err = "Protocol error: too big inline request";
      return over;
    }
    *need = len + 1;
    return 0;
  }
  if ((size_t)(nl - buf) > max) { /* however the bytes arrived */
    *err = "Protocol error: too big inline request";
    return over;
  }
  const char *end = nl > buf && nl[-1] == '\r' ? nl - 1 : nl;
  int rc = split_inline(buf, end, cmd);
  if (rc == -1) {
    *err = "Protocol error: unbalanced quotes in request";
    return -1;
  }
  if (rc == -2) {
    *err = "Protocol error: too many arguments in inline request";
    return -1;
  }
  return nl + 1 - buf;
}

/* The message for a command over max bytes (once written, per thread). */
static const char *too_big(size_t max) {
  static _Thread_local char msg[80];
  snprintf(msg, sizeof msg, "Protocol error: too big command (over %zu bytes)",
           max);
  return msg;
}

ssize_t resp_parse(const char *buf, size_t len, const resp_limits *limits,
                   resp_cmd *cmd, size_t *need, const char **err) {
  int unauth = limits && limits->unauthenticated;
  size_t max = limits ? limits->max_bytes : SIZE_MAX;
  if (unauth && max > RESP_UNAUTH_MAX_BYTES) max = RESP_UNAUTH_MAX_BYTES;
  *need = len + 1;
  if (len == 0) return 0;
  if (buf[0] != '*')
    return max < RESP_MAX_INLINE
               ? parse_inline(buf, len, max, -2, cmd, need, err)
               : parse_inline(buf, len, RESP_MAX_INLINE, -1, cmd, need, err);
  const char *lim = buf + len, *p;
  long long n;
  int r = read_int(buf + 1, lim, &n, &p);
  if (r < 0 || (r > 0 && (n < 0 || n > RESP_MAX_ARGS))) {
    *err = "Protocol error: invalid multibulk length";
    return -1;
  }
  if (r == 0) return 0;
  if (unauth && n > RESP_UNAUTH_MAX_ARGS) { /* Redis's order and words */
    *err = "Protocol error: unauthenticated multibulk length";
    return -2;
  }
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
    /* The bytes the command spans once this bulk is in: refused here,
       before they are read, when that is over the limit. */
    if ((size_t)(p - buf) + (size_t)blen + 2 > max) {
      *err = unauth ? "Protocol error: unauthenticated bulk length"
                    : too_big(max);
      return -2;
    }
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
