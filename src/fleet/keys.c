/*
 * keys.c — state key names, written and read back, and RESP commands.
 */
#include "keys.h"

#include <hiredis/hiredis.h>
#include <string.h>

#include "../base/fmt.h"
#include "../base/hash.h"
#include "slot.h"

size_t key_id_len(const eng_name *n) {
  return strlen(n->id_a) + (n->id_b ? 1 + strlen(n->id_b) : 0);
}

unsigned redis_sub_slot(const eng_name *n, const void *key, size_t key_len) {
  uint64_t h = fnv1a_str(FNV1A_INIT, n->id_a);
  h = fnv1a(h, key, key_len);
  unsigned start = (unsigned)(hash_mix(h) >> 32) & 16383;
  unsigned nsub = n->nsub ? n->nsub : 1;
  return (start + (unsigned)(16384u * n->sub / nsub)) & 16383;
}

size_t redis_key(char *dst, const char *tag, size_t tag_len, const eng_name *n,
                 const void *key, size_t key_len) {
  if (n->nsub > 1) tag = rc_slot_tag(redis_sub_slot(n, key, key_len), &tag_len);
  size_t la = strlen(n->id_a), lb = n->id_b ? strlen(n->id_b) : 0;
  size_t len = 4;
  memcpy(dst, "sl:{", 4);
  memcpy(dst + len, tag, tag_len);
  len += tag_len;
  dst[len++] = '}';
  dst[len++] = n->kind;
  len += fmt_u64(dst + len, key_id_len(n));
  dst[len++] = ':';
  memcpy(dst + len, n->id_a, la);
  len += la;
  if (n->id_b) {
    dst[len++] = KEY_ID_SEP;
    memcpy(dst + len, n->id_b, lb);
    len += lb;
  }
  memcpy(dst + len, key, key_len);
  return len + key_len;
}

/* Reads "LEN:" at *p (below end): LEN, or -1. */
static long long take_len(const char **p, const char *end) {
  long long v = 0;
  const char *q = *p;
  for (; q < end && *q >= '0' && *q <= '9' && v < (1LL << 40); q++)
    v = v * 10 + (*q - '0');
  if (q == *p || q == end || *q != ':') return -1;
  *p = q + 1;
  return v;
}

int redis_key_parse(const char *k, size_t len, redis_key_parts *out) {
  const char *end = k + len, *tag_end;
  if (len < 5 || memcmp(k, "sl:{", 4) ||
      !(tag_end = memchr(k + 4, '}', len - 4)) || end - tag_end < 2)
    return -1;
  out->kind = tag_end[1];
  const char *q = tag_end + 2;
  long long idl = take_len(&q, end);
  if (idl < 0 || idl > end - q) return -1;
  out->id = q;
  out->id_len = (size_t)idl;
  out->key = q + idl;
  out->key_len = (size_t)(end - out->key);
  return 0;
}

char *resp_command(int argc, const char **argv, const size_t *lens,
                   size_t *len) {
  char *cmd = NULL;
  int n = redisFormatCommandArgv(&cmd, argc, argv, lens);
  if (n < 0) return NULL;
  *len = (size_t)n;
  return cmd;
}
