/*
 * resp_fuzz.c — libFuzzer harness for the RESP request parser
 * (src/server/resp_parse.c), which reads bytes from any client.
 *
 * The input's first 8 bytes seed the chunk sizes and pick the limits
 * (none, 1 MiB, a few hundred bytes, or before AUTH); the rest is the byte
 * stream of one connection. It is parsed twice: whole (command after
 * command from one buffer), and the way resp.c reads a socket (the stream
 * arrives in random chunks; the parser is called only once the unread
 * bytes reach its `need` hint, on an exact-size copy so that any read past
 * the end is an ASan report). Properties beyond "no crash":
 *   - both ways give the same commands (same arguments at the same stream
 *     offsets) and end the same way (incomplete, or the same error);
 *   - a command spans at most the bytes given, its arguments lie inside
 *     that span (or, for an inline argument with quotes, inside
 *     cmd->unquoted, and no longer than the span), argc is within
 *     [0, RESP_MAX_ARGS], each length within the limits;
 *   - "incomplete" asks for more bytes than it has (need > len);
 *   - an error is one of the known messages; a limit's (-2) only when
 *     the command would pass the limit's bytes or arguments.
 * The commands of the whole pass then drive a transaction as resp.c and
 * resp_multi.c do (src/server/resp_txn.c): MULTI starts queueing, EXEC
 * and DISCARD end it, anything else between is queued. Properties: the
 * queue never passes its bounds (commands, bytes); a command refused is
 * refused only at a bound, and makes the transaction dirty; EXEC reads
 * back exactly the commands queued, in order, byte for byte.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "server/resp_parse.h"
#include "server/resp_txn.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_CMDS 4096
#define MAX_ARGS_TOTAL 65536

typedef struct outcome {
  size_t ncmds;
  size_t argc[MAX_CMDS];
  size_t nargs;
  size_t arg_off[MAX_ARGS_TOTAL], arg_len[MAX_ARGS_TOTAL];
  uint64_t arg_hash[MAX_ARGS_TOTAL]; /* an unquoted argument's bytes */
  int failed;      /* 0: ended incomplete (or exactly at a boundary) */
  char err[64];    /* the message (the parser's may live in a static) */
  size_t err_at;   /* stream offset of the command that failed */
} outcome;

static outcome whole, chunked;
static resp_cmd cmd;
static resp_limits limits; /* this input's */
static const resp_limits *lim; /* &limits, or NULL: none */

static void check_error(const char *err) {
  static const char *const known[] = {
      "Protocol error: invalid multibulk length",
      "Protocol error: invalid bulk length",
      "Protocol error: too big inline request",
      "Protocol error: too many arguments in inline request",
      "Protocol error: bulk string not terminated by CRLF",
      "Protocol error: unbalanced quotes in request",
      "Protocol error: unauthenticated multibulk length",
      "Protocol error: unauthenticated bulk length",
  };
  if (!err) abort();
  if (!strncmp(err, "Protocol error: too big command (over ", 38)) return;
  for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
    if (!strcmp(err, known[i])) return;
  if (!strncmp(err, "Protocol error: expected '$', got '", 35) &&
      strlen(err) == 37 && err[36] == '\'')
    return;
  abort();
}

/* Checks one parse of buf[0..len) (at stream offset `at`) and records it
   in o. Returns the bytes used, 0 (incomplete), or -1 (error). */
static ssize_t parse_one(const char *buf, size_t len, size_t at, outcome *o,
                         size_t *need) {
  const char *err = NULL;
  ssize_t n = resp_parse(buf, len, lim, &cmd, need, &err);
  if (n < 0) {
    if (n != -1 && n != -2) abort();
    if (n == -2 && !lim) abort(); /* no limits: nothing to be over */
    check_error(err);
    o->failed = 1;
    snprintf(o->err, sizeof o->err, "%s", err);
    o->err_at = at;
    return -1;
  }
  if (n == 0) {
    if (*need <= len) abort();
    return 0;
  }
  if ((size_t)n > len) abort();
  if (cmd.argc < 0 || cmd.argc > RESP_MAX_ARGS) abort();
  if (lim && (size_t)n > lim->max_bytes + 1) abort(); /* (inline: + "\n") */
  if (lim && lim->unauthenticated &&
      ((size_t)n > RESP_UNAUTH_MAX_BYTES + 1 ||
       (cmd.argc > RESP_UNAUTH_MAX_ARGS && *buf == '*')))
    abort();
  if (o->ncmds == MAX_CMDS || o->nargs + (size_t)cmd.argc > MAX_ARGS_TOTAL)
    return -2; /* enough: stop comparing here */
  o->argc[o->ncmds++] = (size_t)cmd.argc;
  for (int i = 0; i < cmd.argc; i++) {
    const char *a = cmd.argv[i];
    const char *uq = cmd.unquoted;
    if (cmd.len[i] > RESP_MAX_BULK && cmd.len[i] > RESP_MAX_INLINE) abort();
    if (a >= uq && a <= uq + sizeof cmd.unquoted) { /* resolved quotes */
      if (cmd.len[i] > (size_t)(uq + sizeof cmd.unquoted - a) ||
          cmd.len[i] > (size_t)n)
        abort();
      uint64_t h = UINT64_C(0xcbf29ce484222325);
      for (size_t k = 0; k < cmd.len[i]; k++)
        h = (h ^ (uint8_t)a[k]) * UINT64_C(0x100000001b3);
      o->arg_off[o->nargs] = SIZE_MAX;
      o->arg_hash[o->nargs] = h;
    } else {
      if (a < buf || a > buf + n || cmd.len[i] > (size_t)(buf + n - a))
        abort();
      o->arg_off[o->nargs] = at + (size_t)(a - buf);
      o->arg_hash[o->nargs] = 0;
    }
    o->arg_len[o->nargs++] = cmd.len[i];
  }
  return n;
}

/* The transaction the whole pass's commands drive, and a hash of what it
   queued (FNV-1a over each argument's length and bytes) to check EXEC's
   read-back against. */
static resp_txn txn;
static resp_cmd back;
static uint64_t queued_hash;

static uint64_t cmd_hash(uint64_t h, const resp_cmd *c) {
  for (int i = 0; i < c->argc; i++) {
    size_t n = c->len[i];
    for (size_t k = 0; k < sizeof n; k++)
      h = (h ^ (uint8_t)(n >> (8 * k))) * UINT64_C(0x100000001b3);
    for (size_t k = 0; k < n; k++)
      h = (h ^ (uint8_t)c->argv[i][k]) * UINT64_C(0x100000001b3);
  }
  return h;
}

static int is_word(const resp_cmd *c, const char *w) {
  return c->argc >= 1 && c->len[0] == strlen(w) &&
         !strncasecmp(c->argv[0], w, c->len[0]);
}

/* One command of the whole pass into the transaction (see the top). */
static void txn_step(const resp_cmd *c) {
  if (c->argc == 0) return;
  if (is_word(c, "MULTI")) {
    if (!txn.on) {
      resp_txn_begin(&txn);
      queued_hash = UINT64_C(0xcbf29ce484222325);
    }
    return;
  }
  if (is_word(c, "EXEC") || is_word(c, "DISCARD")) {
    if (!txn.on) return;
    size_t off = 0, n = 0;
    uint64_t h = UINT64_C(0xcbf29ce484222325);
    while (resp_txn_next(&txn, &off, &back)) {
      h = cmd_hash(h, &back);
      n++;
    }
    if (n != txn.n || off != txn.q.len || h != queued_hash) abort();
    resp_txn_end(&txn);
    return;
  }
  if (!txn.on) return;
  size_t before = txn.q.len, cost = resp_txn_cost(c);
  int rc = resp_txn_add(&txn, c);
  if (rc == 0) {
    if (txn.q.len != before + cost) abort();
    queued_hash = cmd_hash(queued_hash, c);
  } else if (rc == -1) {
    if (!txn.dirty || txn.q.len != before ||
        (txn.n < RESP_TXN_MAX_COMMANDS && before + cost <= RESP_TXN_MAX_BYTES))
      abort();
  } else if (rc != -2) {
    abort();
  }
  if (txn.n > RESP_TXN_MAX_COMMANDS || txn.q.len > RESP_TXN_MAX_BYTES)
    abort();
}

static uint64_t next_rand(uint64_t *x) {
  uint64_t z = (*x += UINT64_C(0x9e3779b97f4a7c15));
  z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
  z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
  return z ^ (z >> 31);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 8) return 0;
  uint64_t seed;
  memcpy(&seed, data, 8);
  const char *s = (const char *)data + 8;
  size_t len = size - 8;
  static const size_t max_bytes[4] = {0, 1 << 20, 300, 1 << 20};
  unsigned mode = (unsigned)(seed >> 62);
  limits = (resp_limits){max_bytes[mode], mode == 3};
  lim = mode ? &limits : NULL;

  /* Whole: every command from one buffer (an exact-size copy). */
  memset(&whole, 0, sizeof whole);
  char *copy = malloc(len ? len : 1);
  if (!copy) return 0;
  memcpy(copy, s, len);
  size_t off = 0, need = 0;
  int stopped = 0;
  for (;;) {
    ssize_t n = parse_one(copy + off, len - off, off, &whole, &need);
    if (n == -2) stopped = 1;
    if (n <= 0) break;
    txn_step(&cmd); /* (cmd's arguments still point into copy) */
    off += (size_t)n;
  }
  resp_txn_end(&txn);
  free(copy);
  if (stopped) return 0;

  /* Chunked: as a connection reads it. */
  memset(&chunked, 0, sizeof chunked);
  size_t start = 0, have = 0; /* unread bytes: stream[start, have) */
  need = 0;
  while (have < len) {
    uint64_t r = next_rand(&seed);
    size_t chunk = (r & 3) == 0 ? 1 + (size_t)(r >> 8) % 4
                                : 1 + (size_t)(r >> 8) % 64;
    have = have + chunk < len ? have + chunk : len;
    while (have > start && have - start >= need) {
      size_t avail = have - start;
      char *buf = malloc(avail);
      if (!buf) return 0;
      memcpy(buf, s + start, avail);
      ssize_t n = parse_one(buf, avail, start, &chunked, &need);
      free(buf);
      if (n < 0) goto done;
      if (n == 0) break;
      start += (size_t)n;
      need = 0;
    }
  }
done:
  /* The same commands, the same ending. */
  if (chunked.ncmds != whole.ncmds || chunked.nargs != whole.nargs) abort();
  if (memcmp(chunked.argc, whole.argc, whole.ncmds * sizeof *whole.argc) ||
      memcmp(chunked.arg_off, whole.arg_off,
             whole.nargs * sizeof *whole.arg_off) ||
      memcmp(chunked.arg_len, whole.arg_len,
             whole.nargs * sizeof *whole.arg_len) ||
      memcmp(chunked.arg_hash, whole.arg_hash,
             whole.nargs * sizeof *whole.arg_hash))
    abort();
  if (chunked.failed != whole.failed) abort();
  if (whole.failed &&
      (strcmp(chunked.err, whole.err) || chunked.err_at != whole.err_at))
    abort();
  return 0;
}
