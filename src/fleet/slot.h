/*
 * slot.h — Redis Cluster's routing as both of fleet mode's clients need it
 * (client.c, exact mode; sync.c, approximate mode): the key slot, the
 * redirects a node answers (MOVED, ASK), and a batched script call split
 * back into its requests when a node in the middle of a slot migration
 * refuses the batch (TRYAGAIN).
 */
#ifndef SLUICE_REDIS_SLOT_H
#define SLUICE_REDIS_SLOT_H

#include <hiredis/hiredis.h>
#include <stddef.h>
#include <stdint.h>

/* CRC16 (XMODEM) of the key, or of its {hash tag} when it has a non-empty
   one, modulo 16384. */
unsigned rc_key_slot(const char *key, size_t len);

/* A hash tag of at most RC_SLOT_TAG_MAX characters (*len) whose keys live
   in slot `slot` (0..16383): what places a split limit's sub-counters
   (keys.c). The same on every daemon; the first call builds the table. */
#define RC_SLOT_TAG_MAX 3
const char *rc_slot_tag(unsigned slot, size_t *len);

/* A node's address. */
typedef struct rc_addr {
  char host[256];
  int port;
} rc_addr;

/* The slot map: the masters, and which serves each slot. The workers'
   clients start from the one discovered at start; the sync thread keeps
   its own. */
#define RC_MAX_NODES 64
typedef struct rc_topology {
  rc_addr nodes[RC_MAX_NODES]; /* masters */
  int nnodes;
  uint8_t slot_node[16384]; /* index in nodes; 0xff = unknown */
} rc_topology;

/* The index of node HOST:PORT in t, added if new (indices never change);
   -1 when t is full or the host too long. */
int rc_topology_node(rc_topology *t, const char *host, int port);

/*
 * Reads a CLUSTER SLOTS reply into t: each range's slots point at its
 * master (the range's third element; the replicas after it are not
 * used), added to t's nodes if new (those already there keep their
 * index). A master named without a host ("": the node does not know its
 * own address) is from_host, the host the reply came from. Slots the
 * reply names no master for keep what t had. Returns how many slots it
 * set, or -1 when r is not an array (t untouched); a malformed range, or
 * one whose master t has no room for, is skipped.
 */
int rc_topology_read(rc_topology *t, const redisReply *r,
                     const char *from_host);

/* A redirect: "MOVED <slot> <host>:<port>" (the slot lives there now: send
   this and every later command for it there) or "ASK <slot> <host>:<port>"
   (the slot is being migrated and this command's keys are not here: send
   this command only, preceded by ASKING, there). */
typedef struct rc_redirect {
  int ask;
  int slot;
  char host[256]; /* "" when the node named none: its own host */
  int port;
} rc_redirect;

/* Parses an error reply's text (len bytes) into *rd. 0, or -1 when it is
   not a well-formed MOVED or ASK (slot 0-16383, port 1-65535, an IPv6
   host's colons allowed: the last one separates the port). */
int rc_parse_redirect(const char *err, size_t len, rc_redirect *rd);

/*
 * A batched call of decide.lua (EVALSHA in "g" or "f" mode with two or
 * more requests, as rs_format_batch writes it), split into one call per
 * request, in order, each in the same mode. Redis answers a call whose
 * keys are partly migrated, or not all imported yet, with TRYAGAIN; a
 * batch of requests on different keys of one slot gets that where each of
 * its requests alone would be served (by the source, or by the target
 * after ASK). part[i].cmd is malloc'd (owned by the split until taken:
 * set it to NULL); part[i].keys is how many keys the request has.
 */
typedef struct rc_split {
  size_t n;
  struct {
    char *cmd;
    size_t len;
    size_t keys;
  } part[];
} rc_split;

/* The split, or NULL: cmd is no batch of two or more requests (a single
   request's keys cannot be separated), or out of memory. */
rc_split *rc_batch_split(const char *cmd, size_t len);
/*
 * A call that may have run and got no reply (its connection lost after it
 * was written), as calls that charge nothing: each request of a decide.lua
 * call that charges ("0", or a "g" batch of any size) as a call of its own
 * in dry mode ("1": decided, not charged; its reply has the same shape, so
 * rc_batch_join joins them). NULL: cmd charges nothing already (a dry
 * call, another command) or must charge (approximate mode's "f"), or out
 * of memory.
 */
rc_split *rc_batch_dry(const char *cmd, size_t len);
/* Frees the split and the parts' commands still in it. NULL is a no-op. */
void rc_split_free(rc_split *s);

/*
 * The reply the whole batch would have had, from its parts' replies
 * (reply[i] for part i, or NULL when that call failed): the first
 * well-formed part's clock, then each request's elements in order; a
 * failed or malformed part's request gets nil elements, so that reading
 * it (rs_parse) fails that request alone. Takes every reply[i] (freed,
 * set to NULL). NULL when no part has a well-formed reply, or out of
 * memory. Exact mode's reply shape only (REPLY in decide.lua, for
 * requests decided with "g"): the sync's forced calls ("f", REPLY_F) are
 * split and followed in sync.c, never joined.
 */
redisReply *rc_batch_join(const rc_split *s, redisReply **reply);

#endif /* SLUICE_REDIS_SLOT_H */
