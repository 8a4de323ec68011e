/*
 * lease.c — lease tokens (lease.h): the id in hex, and the ad-hoc policy.
 */
#include "lease.h"

#include <stdio.h>
#include <string.h>

size_t lease_token(char *buf, uint64_t id, const char *policy) {
  int n = snprintf(buf, LEASE_TOKEN_MAX, "%016llx%s%s", (unsigned long long)id,
                   policy ? "." : "", policy ? policy : "");
  return n < 0 ? 0 : n >= LEASE_TOKEN_MAX ? LEASE_TOKEN_MAX - 1 : (size_t)n;
}

int lease_token_parse(const char *s, size_t n, uint64_t *id,
                      const char **policy, size_t *plen) {
  if (!s || n < 16 || n >= LEASE_TOKEN_MAX || (n > 16 && s[16] != '.'))
    return -1;
  uint64_t v = 0;
  for (int i = 0; i < 16; i++) {
    char ch = s[i];
    int d = ch >= '0' && ch <= '9'   ? ch - '0'
            : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10
            : ch >= 'A' && ch <= 'F' ? ch - 'A' + 10
                                     : -1;
    if (d < 0) return -1;
    v = v << 4 | (uint64_t)d;
  }
  if (!v) return -1;
  *id = v;
  *policy = n > 17 ? s + 17 : NULL;
  *plen = n > 17 ? n - 17 : 0;
  return 0;
}
