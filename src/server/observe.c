/*
 * observe.c — the decision observer's start and stop, and the keys it
 * uses: one to hash the values a log line or a top-keys answer shows
 * (--denial-log-values hash: keyed BLAKE2b, so that nobody holding the
 * log can test guesses of an API key against it without the secret), one
 * to give each key its id (SipHash, also keyed: nobody can make two keys
 * share a counter).
 *
 * The secret comes from --denial-log-secret's file (hashes stay the same
 * across restarts and daemons), else from the random generator at start.
 */
#include <errno.h>
#include <fcntl.h>
#include <sodium.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "../base/log.h"
#include "observe.h"

/* The hash key from a secret file's bytes (all of them, up to 4 KiB: a
   key file, not a document). 0, or -1 after logging why. */
static int read_secret(observe *obs, const char *path) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    log_msg("error", "--denial-log-secret %s: %s", path, strerror(errno));
    return -1;
  }
  unsigned char buf[4096];
  ssize_t n = read(fd, buf, sizeof buf);
  close(fd);
  if (n < 16) {
    log_msg("error", "--denial-log-secret %s: %s", path,
            n < 0 ? strerror(errno) : "fewer than 16 bytes");
    return -1;
  }
  /* Both keys derive from the secret, each under its own context. */
  crypto_generichash(obs->hash_key, sizeof obs->hash_key, buf, (size_t)n,
                     (const unsigned char *)"sluice-values", 13);
  crypto_generichash(obs->id_key, sizeof obs->id_key, buf, (size_t)n,
                     (const unsigned char *)"sluice-key-ids", 14);
  sodium_memzero(buf, sizeof buf);
  return 0;
}

int observe_start(observe *obs, const observe_opts *o) {
  memset(obs, 0, sizeof *obs);
  obs->o = *o;
  if (sodium_init() < 0) {
    log_msg("error", "libsodium did not start");
    return -1;
  }
  if (o->secret_path) {
    if (read_secret(obs, o->secret_path)) return -1;
  } else {
    randombytes_buf(obs->hash_key, sizeof obs->hash_key);
    randombytes_buf(obs->id_key, sizeof obs->id_key);
  }
  char err[256];
  if (o->log_path || o->log_rate > 0) {
    if (!(obs->log = denylog_new(obs, err, sizeof err))) {
      log_msg("error", "%s", err);
      return -1;
    }
  }
  if (o->top_k > 0 && !(obs->top = topkeys_new(obs, err, sizeof err))) {
    log_msg("error", "%s", err);
    return -1;
  }
  return 0;
}

int observe_metrics(observe *obs, metrics *m) {
  if (obs->log && denylog_metrics(obs->log, m)) return -1;
  if (obs->top && topkeys_metrics(obs->top, m)) return -1;
  return 0;
}

int observe_wanted(const observe *obs) { return obs->log || obs->top; }

void observe_decision(void *ud, unsigned slot, const struct eng_query *q,
                      const struct eng_result *out) {
  observe *obs = ud;
  int logged = obs->top && topkeys_decision(obs->top, slot, q, out);
  if (obs->log && !logged) denylog_decision(obs->log, slot, q, out);
}

void observe_reopen(observe *obs) {
  if (obs->log) denylog_reopen(obs->log);
}

void observe_stop(observe *obs) {
  topkeys_free(obs->top); /* (first: it hands the log lines it holds) */
  denylog_free(obs->log);
  obs->log = NULL;
  obs->top = NULL;
}

void observe_value(const observe *obs, strbuf *b, const char *v, size_t n) {
  if (obs->o.values == OBS_VALUES_PLAIN) {
    strbuf_add(b, v, n);
  } else if (obs->o.values == OBS_VALUES_REDACT) {
    STRBUF_LIT(b, "[redacted]");
  } else {
    unsigned char h[8];
    char hex[2 * sizeof h + 1];
    crypto_generichash(h, sizeof h, (const unsigned char *)v, n,
                       obs->hash_key, sizeof obs->hash_key);
    sodium_bin2hex(hex, sizeof hex, h, sizeof h);
    STRBUF_LIT(b, "h:");
    strbuf_add(b, hex, 2 * sizeof h);
  }
}

uint64_t observe_id(const observe *obs, const void *p, size_t n) {
  unsigned char h[crypto_shorthash_BYTES];
  crypto_shorthash(h, p, n, obs->id_key);
  uint64_t id;
  memcpy(&id, h, sizeof id);
  return id;
}
