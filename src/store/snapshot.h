/*
 * snapshot.h — the store's state as bytes and back (the daemon's
 * --state-file): what every live key holds, written one shard at a time,
 * and read back into another store after a restart.
 *
 * The store knows limiters only by their ids, which mean nothing in the
 * next process, so the caller names them: a snapshot carries, for each id
 * it saves, the name the caller gave (the engine: a rule's identity and
 * policy, or an ad-hoc policy), and a load asks the caller which limiter of
 * the new store a name is. Keys of ids without a name are not saved; keys
 * whose name matches no limiter now are skipped at load.
 *
 * The format (all integers little-endian):
 *
 *   header   "SLUICEST" | version u32 (1) | header bytes u32 (32)
 *            | written at, ns i64 | names u32 | reserved u32 (0)
 *   names    names x { id u16 | length u16 | name bytes }
 *   records  'K' id u16 | key length u16 | key | a i64 | b i64
 *            'L' id u16 | key length u16 | key | n u32 | n x { t i64 | c u32 }
 *   end      'E' | records u64 | BLAKE2b-256 of every byte before it
 *
 * 'K' is one key's 16-byte state, 'L' a sliding_log key's log (oldest
 * first). The end must be the file's last byte: a truncated file is known
 * as such, and the checksum catches the rest of what a disk or a partial
 * copy can do. A load checks the whole input before it restores anything.
 */
#ifndef SLUICE_STORE_SNAPSHOT_H
#define SLUICE_STORE_SNAPSHOT_H

#include <stddef.h>
#include <stdint.h>

#include "mem.h"

#define STORE_SNAP_VERSION 1
#define STORE_SNAP_NAME_MAX 4096 /* longest name */

/* What the caller calls limiter id i: name[i] (len[i] bytes), or NULL. */
typedef struct store_names {
  const char *name[65536];
  uint16_t len[65536];
} store_names;

/* Receives the next n bytes of a snapshot: 0, or -1 to stop it. */
typedef int (*store_out_fn)(void *ud, const void *buf, size_t n);

typedef struct store_snap_stats {
  uint64_t keys;        /* records written / in the input */
  uint64_t bytes;       /* bytes written / read */
  uint64_t restored;    /* load: keys restored */
  uint64_t fresh;       /* load: keys back to fresh by now (skipped) */
  uint64_t unmatched;   /* load: keys whose name matches no limiter */
  uint64_t failed;      /* load: keys the store had no room for */
  int64_t longest_lock_ns; /* write: the longest a shard stayed locked */
} store_snap_stats;

/*
 * Writes the state of every key of s whose id is named (skipping those
 * already back to fresh at now) to out, one shard at a time: each shard
 * is locked only while its entries are copied, and out runs with no lock
 * held. Fills *st. Returns 0, -1 when out failed, or SL_ENOMEM.
 */
int store_snapshot_write(sl_store *s, const store_names *names, int64_t now,
                         store_out_fn out, void *ud, store_snap_stats *st);

/*
 * Which limiter of the loading store a saved name is: 0 with its policy
 * and id, or -1 when none (its keys are skipped).
 */
typedef int (*store_resolve_fn)(void *ud, const char *name, size_t len,
                                const algo_policy **p, uint16_t *id);

/*
 * Checks buf[0..len) as a whole (layout, lengths, values, checksum), then
 * restores every key whose name resolves and which is not back to fresh
 * at now; a key the store already holds is overwritten. Returns 0 with *st
 * filled, or -1 with err saying what is wrong and at which byte offset
 * ("truncated at offset 1234: a record needs 17 bytes"), having restored
 * nothing; SL_ENOMEM when a table could not be allocated.
 */
int store_snapshot_load(sl_store *s, const uint8_t *buf, size_t len,
                        store_resolve_fn resolve, void *ud, int64_t now,
                        store_snap_stats *st, char *err, size_t err_len);

#endif /* SLUICE_STORE_SNAPSHOT_H */
