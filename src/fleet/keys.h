/*
 * keys.h — the names of fleet mode's state in Redis, and the commands
 * sent besides the decision script (hiredis formats them).
 *
 * A state key is "sl:{TAG}" KIND LEN ":" ID KEY, where ID names the
 * limiter (LEN bytes): a rule's id "|" its canonical policy (kind 'r': the
 * same on every daemon with the same config), or an ad-hoc policy's
 * canonical form (kind 'a'); KEY is the store key (a request's descriptor,
 * or an ad-hoc key). "{}" (no tag) makes Redis Cluster hash the whole key;
 * a tag (a domain's hash_tag) puts a request's keys in one slot; a split
 * limit's sub-counter takes the tag of a slot of its own instead
 * (redis_sub_slot), so that its sub-counters spread over the masters. This is
 * the one builder of these names, for exact mode's calls, approximate
 * mode's pushes and both modes' resets, and the one reader of them (a
 * reset another daemon published).
 */
#ifndef SLUICE_FLEET_KEYS_H
#define SLUICE_FLEET_KEYS_H

#include <stddef.h>

#include "../engine/backend.h"

/* Between a rule's id and its policy in ID. */
#define KEY_ID_SEP '|'

/* The most bytes redis_key writes for a tag, a name and a key of these
   lengths (a sub-counter's tag, at most 3 bytes, may stand for the tag). */
#define REDIS_KEY_MAX(tag_len, id_len, key_len)                                \
  (4 + (tag_len) + 3 + 2 + 20 + 1 + (id_len) + 1 + (key_len))

/* The length of n's ID. */
size_t key_id_len(const eng_name *n);

/* Writes the state key of (tag, n, key) at dst (REDIS_KEY_MAX bytes);
   returns its length. A split limit's sub-counter (n->nsub) takes the tag
   of its own slot instead (redis_sub_slot). */
size_t redis_key(char *dst, const char *tag, size_t tag_len, const eng_name *n,
                 const void *key, size_t key_len);

/*
 * The slot of sub-counter n->sub of n->nsub for (n's rule, key): the
 * sub-counters of one key sit 16384/nsub slots apart from a start that
 * the rule and the key pick, so that they land on as many masters as a
 * cluster whose masters hold even ranges of slots has (3 masters, 3
 * sub-counters: one each), and different hot keys start at different
 * places. The same on every daemon.
 */
unsigned redis_sub_slot(const eng_name *n, const void *key, size_t key_len);

/* A state key read back: its kind, ID and KEY (pointing into it). */
typedef struct redis_key_parts {
  char kind;
  const char *id;
  size_t id_len;
  const char *key;
  size_t key_len;
} redis_key_parts;

/* Reads a state key of len bytes. 0, or -1 when it is not one. */
int redis_key_parse(const char *k, size_t len, redis_key_parts *out);

/* A command of argc arguments as RESP, formatted by hiredis: malloc'd,
 *len bytes, or NULL (out of memory). */
char *resp_command(int argc, const char **argv, const size_t *lens,
                   size_t *len);

#endif /* SLUICE_FLEET_KEYS_H */
