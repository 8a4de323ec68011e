/*
 * hash.h — FNV-1a, for tables whose keys are not the clients' choice
 * (metric series, policy caches, scenario keys). Keys a client chooses go
 * through a keyed hash instead (SipHash, libsodium), so that nobody can
 * aim many of them at one slot.
 */
#ifndef SLUICE_BASE_HASH_H
#define SLUICE_BASE_HASH_H

#include <stddef.h>
#include <stdint.h>

#define FNV1A_INIT UINT64_C(0xcbf29ce484222325)

/* Continues an FNV-1a hash h (FNV1A_INIT to start) over n bytes. */
static inline uint64_t fnv1a(uint64_t h, const void *p, size_t n) {
  const unsigned char *s = p;
  for (size_t i = 0; i < n; i++) h = (h ^ s[i]) * UINT64_C(0x100000001b3);
  return h;
}

/* The same over a NUL-terminated string. */
static inline uint64_t fnv1a_str(uint64_t h, const char *s) {
  for (; *s; s++) h = (h ^ (unsigned char)*s) * UINT64_C(0x100000001b3);
  return h;
}

/* Mixes every bit of h into every other (MurmurHash3's fmix64): FNV-1a's
   high bits barely change with an input's last bytes, so a value that
   picks one of n by its high bits goes through this first. */
static inline uint64_t hash_mix(uint64_t h) {
  h ^= h >> 33;
  h *= UINT64_C(0xff51afd7ed558ccd);
  h ^= h >> 33;
  h *= UINT64_C(0xc4ceb9fe1a85ec53);
  return h ^ (h >> 33);
}

#endif /* SLUICE_BASE_HASH_H */
