/*
 * lease.h — a concurrency lease as clients see it: a token string.
 *
 * The library names a lease by a 64-bit id under its (limiter, key). Over
 * the network the token is the id in 16 hex digits, followed, for a lease
 * of an ad-hoc policy, by '.' and the policy's canonical spelling
 * ("9f3ac2e4b1d07a55.concurrency:5:lease=10s"): so SL.RELEASE key lease
 * (and POST /v1/release?key=K&lease=T) find the policy on any daemon of a
 * fleet without being told it. A lease of the configured rules is the 16
 * digits alone; its release names the descriptors again. The token is
 * opaque to clients: they hand back what they got.
 */
#ifndef SLUICE_SERVER_LEASE_H
#define SLUICE_SERVER_LEASE_H

#include <stddef.h>
#include <stdint.h>

/* The longest token: 16 digits, '.', a policy. */
#define LEASE_TOKEN_MAX 128

/* Writes id's token (policy NULL: none) into buf[LEASE_TOKEN_MAX], NUL
   terminated; returns its length. */
size_t lease_token(char *buf, uint64_t id, const char *policy);

/*
 * Reads a token: *id, and the policy after the '.' (*policy NULL, *plen 0
 * when there is none). 0, or -1 when s[0..n) is not a token (not 16 hex
 * digits first, id 0, or too long).
 */
int lease_token_parse(const char *s, size_t n, uint64_t *id,
                      const char **policy, size_t *plen);

#endif /* SLUICE_SERVER_LEASE_H */
