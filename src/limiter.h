/*
 * limiter.h — what the daemon (src/server) uses of limiter.c beyond the
 * public API: not exported by libsluice.so (src/libsluice.map).
 */
#ifndef SLUICE_LIMITER_H
#define SLUICE_LIMITER_H

#include <stddef.h>

#include "sluice.h"

/* Starts loading key's state of lim into the cache, without waiting or
   locking: a hint for a lookup soon after (approximate mode's sync applies
   a round's levels key after key, each a cache miss otherwise). */
void limiter_prefetch(const sl_limiter *lim, const void *key, size_t key_len);

#endif /* SLUICE_LIMITER_H */
