/*
 * errors.h — the one vocabulary of the daemon's errors.
 *
 * A decision or a reset fails with a library code (SL_E*, include/sluice.h)
 * or an engine code (ENG_E*, below). Each has one entry here: its name, the
 * HTTP status it is answered with, and its general message; the engine
 * writes the particular message (naming the domain, the cost, the policy
 * as the client wrote them) into the result it was deciding (eng_result's
 * and eng_reset's msg). A front end answers any failure the same way —
 * HTTP: eng_error_of(rc)->http_status with msg; RESP: "ERR " msg — and
 * maps no code by hand, so a code added here reaches every protocol.
 */
#ifndef SLUICE_ENGINE_ERRORS_H
#define SLUICE_ENGINE_ERRORS_H

#include "sluice.h"

/* The engine's codes: XX(NAME, code, HTTP status, message). */
#define ENG_ERRNO_MAP(XX)                                                      \
  XX(EDOMAIN, -100, 404, "unknown domain")                                     \
  XX(EDESCRIPTOR, -101, 400, "empty, too many or too long descriptors")        \
  XX(EADHOC, -102, 400, "too many distinct ad-hoc policies")                   \
  XX(EREMOTE, -103, 503, "this worker has no Redis client")                    \
  XX(ESTORE, -104, 503, "the store (Redis) failed")

enum {
#define ENG__ERR_ENUM(name, code, status, msg) ENG_##name = (code),
  ENG_ERRNO_MAP(ENG__ERR_ENUM)
#undef ENG__ERR_ENUM
};

/* An asynchronous call's "the answer comes later" (positive: not an
   error). */
#define ENG_PENDING 1

/* The room a result has for its message. */
#define ENG_MSG_MAX 256

typedef struct eng_error {
  int code;
  const char *name;    /* "EDOMAIN", "ECOST" */
  int http_status;     /* 400, 404, 503 ... */
  const char *message; /* the general message */
} eng_error;

/* The entry of any SL_E* or ENG_E* code; an unknown one gets a 500
   "internal error" entry (never NULL). */
const eng_error *eng_error_of(int code);

#endif /* SLUICE_ENGINE_ERRORS_H */
