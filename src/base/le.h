/*
 * le.h — integers as little-endian bytes: the layouts decide.lua packs
 * and unpacks ('<i8', '<I4'), which the daemon's calls, the Redis module's
 * state keys and its packed replies share, and the memory store's
 * snapshots. Inline, through memcpy and the byte order's conversion,
 * which the compiler makes one load or store (a byte at a time, in loops,
 * was about an eighth of the module's instructions per decision).
 */
#ifndef SLUICE_BASE_LE_H
#define SLUICE_BASE_LE_H

#include <endian.h>
#include <stdint.h>
#include <string.h>

/* v as 8 (4) bytes at p, least significant first. */
static inline void le_put64(void *p, uint64_t v) {
  v = htole64(v);
  memcpy(p, &v, sizeof v);
}
static inline void le_put32(void *p, uint32_t v) {
  v = htole32(v);
  memcpy(p, &v, sizeof v);
}

/* The 8 (4) bytes at p, least significant first. */
static inline uint64_t le_get64(const void *p) {
  uint64_t v;
  memcpy(&v, p, sizeof v);
  return le64toh(v);
}
static inline uint32_t le_get32(const void *p) {
  uint32_t v;
  memcpy(&v, p, sizeof v);
  return le32toh(v);
}

/* The low n bytes of v at p (n <= 8; a snapshot's 2-byte ids, say), and
   back: the first n bytes of a little-endian number are its low ones. */
static inline void le_put(void *p, uint64_t v, size_t n) {
  v = htole64(v);
  memcpy(p, &v, n);
}
static inline uint64_t le_get(const void *p, size_t n) {
  uint64_t v = 0;
  memcpy(&v, p, n);
  return le64toh(v);
}

#endif /* SLUICE_BASE_LE_H */
