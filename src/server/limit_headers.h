/*
 * limit_headers.h — the rate limit headers of a decision, for every front
 * end that carries headers: HTTP writes them on its answer (http_render.c),
 * gRPC puts them in RateLimitResponse.response_headers_to_add (grpc_msg.c),
 * so both say the same thing for the same decision. No h2o here: the
 * caller gets each header through a callback.
 */
#ifndef SLUICE_SERVER_LIMIT_HEADERS_H
#define SLUICE_SERVER_LIMIT_HEADERS_H

#include <stddef.h>
#include <stdint.h>

#include "../engine/engine.h"

/* --headers: which rate limit fields an answer carries (a bit set). */
enum { HDR_IETF = 1, HDR_X = 2 };

/* Receives one header: name (lower case, NUL-terminated) and its value
   (len bytes, not NUL-terminated; valid only during the call). */
typedef void (*limit_header_fn)(void *ud, const char *name, const char *value,
                                size_t len);

/* The name a status is reported under: its rule's name, else its rule's
   id, else (an ad-hoc policy) its policy. */
const char *limit_status_name(const eng_status *s);

/*
 * The headers of decision r at wall time now (ns): with style's HDR_IETF,
 * RateLimit-Policy and RateLimit (one item per enforced rule, the most
 * restrictive first, then shadow rules; a limit that failed open has its
 * policy item but no current one); with HDR_X, X-RateLimit-Limit,
 * -Remaining, -Used (GitHub's: limit - remaining) and -Reset of the most
 * restrictive rule (only -Limit when it failed open); with any style,
 * X-RateLimit-Unchecked: store_error when an enforced limit failed open
 * (on_store_error: allow); on a denial Retry-After (whatever style says:
 * it is plain HTTP). Nothing when no limit applied or the most restrictive
 * one is unlimited. Out of memory, the IETF pair is left out rather than
 * sent cut.
 */
void limit_headers(const eng_result *r, int style, int64_t now,
                   limit_header_fn add, void *ud);

#endif /* SLUICE_SERVER_LIMIT_HEADERS_H */
