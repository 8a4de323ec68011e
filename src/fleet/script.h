/*
 * script.h — exact mode's server-side script: the six algorithms in Lua
 * (decide.lua, embedded), run atomically by Redis, and the C that formats
 * its calls and reads its replies.
 *
 * One call decides one request: every check (rule) whose key lives in one
 * Redis node/slot, all-or-nothing like sl_take_all. Time comes from Redis
 * `TIME` inside the script, so the daemons' clocks do not matter; a test
 * may pass its own clock instead (now_ns >= 0). Each state key gets a TTL
 * equal to its time-to-fresh, so idle keys evaporate.
 *
 * Lua computes in doubles: every quantity the script handles must stay an
 * exact integer below 2^53. rs_policy_check says which policies the script
 * decides exactly (the same decisions as the core engine, field for field);
 * the daemon refuses the others at load with that message.
 */
#ifndef SLUICE_REDIS_SCRIPT_H
#define SLUICE_REDIS_SCRIPT_H

#include <stddef.h>
#include <stdint.h>

#include <hiredis/hiredis.h>

#include "sluice.h"

#define RS_CHECKS_MAX SL_CHECKS_MAX

/* 0 when the script decides policy p exactly; else SL_EPOLICY with the
   reason in err (err may be NULL). */
int rs_policy_check(const sl_policy *p, char *err, size_t err_len);

/* The script's source (*len bytes) and its SHA1, 40 hex digits. */
const char *rs_script(size_t *len);
const char *rs_script_sha(void);

/* One check of a request: a rule's policy, the full Redis key name of its
   state, the cost, and whether it is shadow (never denies). */
typedef struct rs_check {
  const sl_policy *policy;
  const char *key;
  size_t key_len;
  int64_t cost;
  int shadow;
  /* fixed_window: its windows start at phase_ns + k*period (a calendar
     window: the daemon computes its start and length, since Lua in Redis
     has no time zones); 0: epoch-aligned. A whole number of ms. */
  int64_t phase_ns;
  uint64_t lease; /* concurrency: the lease to record (cost 1), or to
                     release or renew (RS_RELEASE, RS_RENEW) */
  /* CL.THROTTLE's check: this call's rate, applied to the key's one TAT
     (decide.lua's algorithm "7", redis-cell's layout; rs_cell_check says
     which rates it computes exactly); the cost is the quantity, any
     size. policy is then only the rate's GCRA policy, for figures when
     Redis fails. NULL: an ordinary check. */
  const struct algo_cell *cell;
} rs_check;

/* 0 when the script decides CL.THROTTLE's rate c exactly: its full burst
   plus one emission interval within 2^52 ns (about 52 days); else
   SL_EPOLICY. */
struct algo_cell;
int rs_cell_check(const struct algo_cell *c);

/* Requests in one batched call (decide.lua's "g" mode: a byte each). */
#define RS_BATCH_MAX 255

/* What rs_parse needs to map the script's reply back to the checks. */
typedef struct rs_call {
  size_t n;                   /* checks as given */
  size_t nu;                  /* distinct keys sent */
  uint8_t map[RS_CHECKS_MAX]; /* check i -> distinct key map[i] */
  /* Where this request's answer is in the call's reply: its overall
     allowed at element `at`, six per key after it; the reply has
     `elements` in all. Forced (RS_FORCE: the reply is now and one string
     of (level, limit) per key): its first key is the at-th of the call's
     `elements` keys. Set by rs_prepare* (a call of its own) and
     rs_format_batch. */
  size_t at, elements;
  /* Charged by force (RS_FORCE): remaining is the signed level. */
  int force;
  int mode;          /* the call's mode (rs_format_batch sets it) */
  uint64_t conc;     /* bit u: key u is a concurrency key, charged */
  uint64_t lease;    /* ... with this lease (the first such check's) */
  int script_only;   /* it has a concurrency key: the script's, never
                        the module's (rs_native) */
  uint64_t cell;     /* bit u: key u is CL.THROTTLE's (remaining may be
                        INT64_MAX; a limited retry of 0: it never fits) */
} rs_call;

/* What a call does with its requests (rs_format, rs_format_batch). */
enum {
  RS_DECIDE = 0, /* each request all-or-nothing, charged when allowed */
  RS_DRY = 1,    /* decide, charge nothing (one request only) */
  RS_FORCE = 2,  /* charge every key by force (sl_limiter_force): the
                    reply's remaining is the signed level after it */
  RS_RELEASE = 3, /* one request of concurrency keys: release each key's
                     lease (rs_check.lease); allowed = it was live */
  RS_RENEW = 4    /* the same, renewing it */
};

/*
 * Formats one EVALSHA of the script for checks[0..n) as a RESP command
 * (malloc'd into *cmd, *len bytes). Checks on the same key name are one
 * state, merged as sl_take_all merges them: their costs add up, and the
 * merged check is shadow only if all its parts are.
 *   mode RS_DECIDE: all-or-nothing: every check is decided; only if every
 *            non-shadow one allows is each allowing check charged.
 *   mode RS_DRY: decide every check, charge nothing (check-then-commit's).
 *   mode RS_FORCE: charge every check by force (approximate mode's sync).
 * now_ns >= 0 replaces Redis TIME (tests); -1 uses TIME.
 * Returns 0, SL_EINVAL (n == 0 or > RS_CHECKS_MAX, NULL arguments, negative
 * cost), SL_ECOST (a merged cost above what the policy can ever allow),
 * SL_EPOLICY (rs_policy_check fails), SL_EKEY, SL_ENOMEM.
 */
int rs_format(const rs_check *checks, size_t n, int mode, int64_t now_ns,
              rs_call *call, char **cmd, size_t *len);

/*
 * Batching: several requests in one EVALSHA, so that Redis pays its
 * per-call cost once for all of them (the script decides them in order,
 * each all-or-nothing).
 *
 * rs_prepare merges and checks one request's checks like rs_format (same
 * errors) and formats its words: *words (malloc'd, *len bytes) holds the
 * RESP bulk strings of its keys (the first *keys_len bytes), then those of
 * its per-key values. rs_format_batch joins n (1..RS_BATCH_MAX) prepared
 * requests into one EVALSHA (*cmd malloc'd) and sets each call's place in
 * the reply. RS_DRY (the check of check-then-commit) only with n = 1.
 * rs_prepare_force prepares a request for RS_FORCE: the same, but a cost
 * may exceed the largest (a forced charge takes any cost).
 */
typedef struct rs_request {
  rs_call *call;
  const char *words;
  size_t keys_len, len;
} rs_request;

int rs_prepare(const rs_check *checks, size_t n, rs_call *call, char **words,
               size_t *keys_len, size_t *len);
int rs_prepare_force(const rs_check *checks, size_t n, rs_call *call,
                     char **words, size_t *keys_len, size_t *len);
int rs_format_batch(const rs_request *reqs, size_t n, int mode, int64_t now_ns,
                    char **cmd, size_t *len);

/*
 * The Redis module's native form of a call (docs/fleet.md, "The Redis
 * module"). SL.DECIDE takes the script's arguments after its numkeys, so
 * only the head differs: rs_native reads the EVALSHA that rs_format or
 * rs_format_batch wrote in cmd[0..len), writes SL.DECIDE's head into hdr
 * (*hdr_len bytes, at most RS_NATIVE_HDR) and returns the offset in cmd
 * where the words both forms share begin: SL.DECIDE is hdr followed by
 * cmd[offset..len). Its reply is the script's (rs_parse reads either).
 * Returns (size_t)-1 when cmd is not such an EVALSHA.
 */
#define RS_NATIVE_HDR 32
size_t rs_native(const char *cmd, size_t len, char *hdr, size_t *hdr_len);

/* What r, the reply to SL.VERSION, says of the node's module: 1, loaded
   and built from this daemon's decide.lua (its SHA-1 is the script's):
   SL.DECIDE may be sent; -1, loaded but from another build (a rolling
   upgrade): the script, not SL.DECIDE, whose arguments may differ; 0, no
   module (an unknown command, an ACL's refusal): the script. */
int rs_native_probe(const redisReply *r);

/*
 * decide.lua's REPLY_P (the Redis module's answer to a call asking for it:
 * REPLY's values as one string of little-endian int64) as the REPLY array
 * it packs, every value an integer, so that what reads replies (rs_parse,
 * a split batch's join) reads both alike. Any other reply (an array, an
 * error, a string of no whole number of values) is r itself, for rs_parse
 * to judge. Takes r: returns it, or frees it and returns the array (NULL
 * when out of memory).
 */
redisReply *rs_unpack(redisReply *r);

/* Sets call's place in the reply back to that of a call of its own (a
   batch's request sent again alone). */
void rs_call_alone(rs_call *call);

/*
 * Reads the script's reply (of one call, or this request's part of a
 * batch's): out[i] for each check as given (merged checks
 * share their figures), *allowed the overall answer, exactly as
 * sl_take_all reports them; *now_ns the clock the script used.
 * Returns 0, or SL_EINVAL when r is not a well-formed reply of this call
 * (an error reply included: the caller looks at r->type first).
 */
int rs_parse(const rs_call *call, const redisReply *r, sl_decision *out,
             int *allowed, int64_t *now_ns);

#endif /* SLUICE_REDIS_SCRIPT_H */
