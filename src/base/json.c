/*
 * json.c — strings written as JSON (json.h): UTF-8 checked for answers and
 * log lines, byte for byte for documents of byte strings.
 */
#include "json.h"

#include <string.h>

size_t utf8_len(const unsigned char *s, size_t n) {
  if (s[0] < 0x80) return 1;
  size_t k = s[0] >= 0xf0 ? 4 : s[0] >= 0xe0 ? 3 : s[0] >= 0xc2 ? 2 : 0;
  if (!k || k > n || s[0] > 0xf4) return 0;
  for (size_t i = 1; i < k; i++)
    if ((s[i] & 0xc0) != 0x80) return 0;
  if (k == 3 && ((s[0] == 0xe0 && s[1] < 0xa0) || (s[0] == 0xed && s[1] >= 0xa0)))
    return 0;
  if (k == 4 && ((s[0] == 0xf0 && s[1] < 0x90) || (s[0] == 0xf4 && s[1] >= 0x90)))
    return 0;
  return k;
}

/* The bytes a JSON string cannot carry as they are: control characters,
   the quote and the backslash (escaped), and every byte from 0x80 (each
   sequence checked for UTF-8 before it is copied). One load a byte:
   a log line or a body escapes several strings, mostly plain. */
#define J16(x) x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x
static const unsigned char json_special[256] = {
    J16(1), J16(1),                                   /* 0x00-0x1f */
    0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,   /* 0x20: '"' */
    J16(0), J16(0),                                   /* 0x30-0x4f */
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0,   /* 0x50: '\\' */
    J16(0), J16(0),                                   /* 0x60-0x7f */
    J16(1), J16(1), J16(1), J16(1), J16(1), J16(1), J16(1), J16(1)};
#undef J16

void json_put_str(strbuf *b, const char *s, size_t n) {
  const unsigned char *u = (const unsigned char *)s;
  size_t i = 0;
  while (i < n && !json_special[u[i]]) i++;
  if (i == n) { /* nothing to escape (keys, addresses, policies): one copy */
    if (strbuf_reserve(b, n + 2)) return;
    char *o = b->p + b->len;
    o[0] = '"';
    if (n) memcpy(o + 1, s, n);
    o[n + 1] = '"';
    b->len += n + 2;
    b->p[b->len] = '\0';
    return;
  }
  STRBUF_LIT(b, "\"");
  strbuf_add(b, s, i); /* the plain bytes before the first special one */
  while (i < n) {
    /* A run of bytes that need no escape is copied whole. */
    size_t run = i;
    while (run < n && !json_special[u[run]]) run++;
    if (run > i) {
      strbuf_add(b, s + i, run - i);
      i = run;
      if (i == n) break;
    }
    unsigned char ch = u[i];
    if (ch == '"' || ch == '\\') {
      char e[2] = {'\\', (char)ch};
      strbuf_add(b, e, 2);
      i++;
    } else if (ch < 0x20) {
      strbuf_addf(b, "\\u%04x", ch);
      i++;
    } else {
      size_t k = utf8_len(u + i, n - i);
      if (k) {
        strbuf_add(b, s + i, k);
        i += k;
      } else {
        STRBUF_LIT(b, "\\ufffd");
        i++;
      }
    }
  }
  STRBUF_LIT(b, "\"");
}

void json_bytes_file(FILE *f, const char *s) {
  fputc('"', f);
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    if (*p == '"' || *p == '\\')
      fprintf(f, "\\%c", *p);
    else if (*p < 0x20 || *p >= 0x7f)
      fprintf(f, "\\u%04x", *p);
    else
      fputc(*p, f);
  }
  fputc('"', f);
}
