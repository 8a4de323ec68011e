/*
 * errors.c — the table behind eng_error_of: the library's codes (with
 * sl_strerror's messages, from the same list in sluice.h) and the
 * engine's, with their HTTP statuses.
 */
#include "errors.h"

#include <stddef.h>

/* A library code is the client's to fix (400: a bad policy, cost, key or
   time), except running out of room (503: try again later, or
   elsewhere), a store full for the rule's evict_below included. */
#define LIB_STATUS(code) \
  ((code) == -2 || (code) == -7 || (code) == -8 ? 503 : 400)

static const eng_error table[] = {
#define LIB_ROW(name, code, msg) {code, #name, LIB_STATUS(code), msg},
    SL_ERRNO_MAP(LIB_ROW)
#undef LIB_ROW
#define ENG_ROW(name, code, status, msg) {code, #name, status, msg},
        ENG_ERRNO_MAP(ENG_ROW)
#undef ENG_ROW
};

/* (SL_ENOMEM, SL_ELIMITERS and SL_EFULL are the codes LIB_STATUS
   names.) */
_Static_assert(SL_ENOMEM == -2 && SL_ELIMITERS == -7 && SL_EFULL == -8,
               "LIB_STATUS names the library's out-of-room codes");

static const eng_error unknown = {0, "UNKNOWN", 500, "internal error"};

const eng_error *eng_error_of(int code) {
  for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
    if (table[i].code == code) return &table[i];
  return &unknown;
}
