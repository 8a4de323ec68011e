/*
 * resp_out.c — RESP replies as bytes: the writers every RESP command
 * answers with (resp_conn.h), into the connection's output buffer, which
 * resp.c sends. RESP3's types (maps, nulls, verbatim text) are written as
 * such only after HELLO 3; RESP2 gets their RESP2 forms.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "../base/fmt.h"
#include "resp_conn.h"

void out_raw(resp_conn *c, const char *s, size_t n) {
  strbuf_add(&c->out, s, n);
  if (c->out.oom) c->closing = 1; /* out of memory: drop the connection */
}

/* An error reply; newlines in the message would break the protocol. */
void out_err(resp_conn *c, const char *fmt, ...) {
  char buf[400];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  size_t n = 0;
  for (; buf[n]; n++)
    if (buf[n] == '\r' || buf[n] == '\n') buf[n] = ' ';
  out_raw(c, "-", 1);
  out_raw(c, buf, n);
  out_raw(c, "\r\n", 2);
  engine_count(c->w->et, EC_RESP_ERRORS, 1);
}

/* A header ("*", "$") or integer (":") line: TYPE, v, CRLF. */
void out_hdr(resp_conn *c, char type, int64_t v) {
  char buf[24];
  buf[0] = type;
  size_t n = 1 + fmt_i64(buf + 1, v);
  buf[n++] = '\r';
  buf[n++] = '\n';
  out_raw(c, buf, n);
}

void out_int(resp_conn *c, long long v) { out_hdr(c, ':', v); }

/* An array of n integers, the throttle commands' reply. */
void out_ints(resp_conn *c, const int64_t *v, size_t n) {
  char buf[8 * 24];
  size_t len = 0;
  buf[len++] = '*';
  buf[len++] = (char)('0' + n); /* n < 10 */
  buf[len++] = '\r';
  buf[len++] = '\n';
  for (size_t i = 0; i < n; i++) {
    buf[len++] = ':';
    len += fmt_i64(buf + len, v[i]);
    buf[len++] = '\r';
    buf[len++] = '\n';
  }
  out_raw(c, buf, len);
}

void out_bulk(resp_conn *c, const char *s, size_t n) {
  out_hdr(c, '$', (int64_t)n);
  out_raw(c, s, n);
  out_raw(c, "\r\n", 2);
}

void out_cstr(resp_conn *c, const char *s) { out_bulk(c, s, strlen(s)); }

void out_map(resp_conn *c, size_t n) {
  if (c->proto == 3)
    out_hdr(c, '%', (int64_t)n);
  else
    out_hdr(c, '*', 2 * (int64_t)n);
}

void out_null(resp_conn *c) {
  if (c->proto == 3)
    out_raw(c, "_\r\n", 3);
  else
    out_raw(c, "$-1\r\n", 5);
}

void out_verbatim(resp_conn *c, const char *s, size_t n) {
  if (c->proto != 3) {
    out_bulk(c, s, n);
    return;
  }
  out_hdr(c, '=', (int64_t)n + 4);
  out_raw(c, "txt:", 4);
  out_raw(c, s, n);
  out_raw(c, "\r\n", 2);
}
