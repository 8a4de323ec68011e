/*
 * grpc_msg.h — the messages of the gRPC front end, with no gRPC in them:
 * envoy's RateLimitRequest (protobuf, decoded by protobuf-c from
 * proto/'s files) into the engine's request, the engine's result into a
 * RateLimitResponse as envoyproxy/ratelimit answers, and gRPC's health
 * check. The transport (grpc_conn.c, grpc_server.c) moves bytes; this
 * file gives them meaning, and fuzz/rls_fuzz.c drives it alone.
 */
#ifndef SLUICE_SERVER_GRPC_MSG_H
#define SLUICE_SERVER_GRPC_MSG_H

#include <stddef.h>
#include <stdint.h>

#include "../engine/engine.h"

/* The gRPC status codes this front end answers with (grpc/status.h's
   numbers, which are the protocol's). */
enum {
  RPC_OK = 0,
  RPC_CANCELLED = 1,
  RPC_INVALID_ARGUMENT = 3,
  RPC_DEADLINE_EXCEEDED = 4,
  RPC_NOT_FOUND = 5,
  RPC_RESOURCE_EXHAUSTED = 8,
  RPC_UNIMPLEMENTED = 12,
  RPC_INTERNAL = 13,
  RPC_UNAVAILABLE = 14
};

/* What a response needs to say about its request, besides the result. */
typedef struct rls_arena rls_arena;

typedef struct rls_req {
  void *msg;   /* the decoded RateLimitRequest (protobuf-c's), owned */
  rls_arena *arena; /* where msg was allocated (NULL: malloc) */
  eng_request er;
  eng_descriptor ds[ENG_MAX_DESCRIPTORS];
  eng_override ov[ENG_MAX_DESCRIPTORS]; /* one per descriptor of er */
  /* The request's descriptors in order: skipped[i] marks one with no
     entries (answered OK, as envoyproxy/ratelimit answers a descriptor
     that matches nothing); the others are er's, in order. */
  int skipped[ENG_MAX_DESCRIPTORS];
  size_t asked;
} rls_req;

/*
 * Decodes a RateLimitRequest from buf[0..len) into r (rls_free it
 * whatever this returns): the domain, the descriptors and their entries
 * (pointing into r->msg), the request's cost (hits_addend, 0 meaning 1 as
 * in envoy) and each descriptor's own (its hits_addend when set, 0 a
 * peek). Returns RPC_OK, or RPC_INVALID_ARGUMENT with err saying what is
 * wrong: not a RateLimitRequest, an empty domain, no descriptors, more
 * than ENG_MAX_DESCRIPTORS or a descriptor with more than ENG_MAX_ENTRIES
 * entries, an empty key, a key or value longer than max_key bytes.
 */
int rls_decode(rls_req *r, const uint8_t *buf, size_t len, size_t max_key,
               char *err, size_t err_len);
/* rls_decode, the message allocated in `a` (NULL: malloc): a bump
   allocator that one request at a time may use, emptied by its rls_free
   (what does not fit in it is malloc'd). It spares the decoder's
   allocations, a sixth of a call's instructions. */
int rls_decode_in(rls_req *r, rls_arena *a, const uint8_t *buf, size_t len,
                  size_t max_key, char *err, size_t err_len);
void rls_free(rls_req *r);
/* An arena for rls_decode_in (NULL out of memory), and its end. */
rls_arena *rls_arena_new(void);
void rls_arena_free(rls_arena *a);

/*
 * Decides r at now as envoy's service does, for gRPC and /json alike: the
 * configured rules, each descriptor with its own limit override, through
 * engine_decide on et (done and ud as there: ENG_PENDING when the answer
 * comes later). A request whose descriptors are all empty decides nothing:
 * res OK with nothing applied, and 0, or ENG_EDOMAIN in a domain e's
 * configuration does not have.
 */
int rls_decide(const rls_req *r, engine *e, engine_thread *et, int64_t now,
               eng_result *res, eng_done_fn done, void *ud);

/* The gRPC status a failed decision (engine code rc) is answered with. */
int rls_status_of(int rc);

/*
 * The RateLimitResponse for r decided as res (rc 0), or for an unknown
 * domain (rc ENG_EDOMAIN: OK with no limit, as envoyproxy/ratelimit
 * answers): overall_code, one status per descriptor in request order with
 * current_limit, limit_remaining and duration_until_reset, and the rate
 * limit headers of header_style (limit_headers.h) in
 * response_headers_to_add. A malloc'd buffer of *len bytes, or NULL out
 * of memory.
 */
uint8_t *rls_encode(const rls_req *r, int rc, const eng_result *res,
                    int header_style, int64_t now, size_t *len);

/* What rls_response_with hands the response to (m: protobuf-c's
   RateLimitResponse): 0, or -1 (its own failure, out of memory). */
typedef int (*rls_response_fn)(void *ud, const void *m);

/* The same response as rls_encode's, as the message itself (valid only
   during the call) handed to fn: for a caller that writes it otherwise
   (/json). fn's return, or -1 out of memory before it was called. */
int rls_response_with(const rls_req *r, int rc, const eng_result *res,
                      int header_style, int64_t now, rls_response_fn fn,
                      void *ud);

/*
 * grpc.health.v1.Health/Check: the HealthCheckResponse for the request in
 * buf[0..len), SERVING (or NOT_SERVING while stopping) for "" and the rate
 * limit service. Returns RPC_OK with a malloc'd *out of *out_len bytes;
 * RPC_NOT_FOUND for another service, RPC_INVALID_ARGUMENT for bytes that
 * are not a request, RPC_INTERNAL out of memory (then *out is NULL).
 */
int health_answer(const uint8_t *buf, size_t len, int stopping, uint8_t **out,
                  size_t *out_len);

#endif /* SLUICE_SERVER_GRPC_MSG_H */
