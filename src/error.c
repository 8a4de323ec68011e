/*
 * error.c — error messages and the library version, generated from the one
 * list of codes in sluice.h (SL_ERRNO_MAP).
 */
#include "sluice.h"

const char *sl_strerror(int err) {
  switch (err) {
  case SL_OK:
    return "success";
#define SL__ERR_MSG(name, code, msg) \
  case code:                         \
    return msg;
    SL_ERRNO_MAP(SL__ERR_MSG)
#undef SL__ERR_MSG
  }
  return "unknown error";
}

const char *sl_err_name(int err) {
  switch (err) {
  case SL_OK:
    return "OK";
#define SL__ERR_NAME(name, code, msg) \
  case code:                          \
    return #name;
    SL_ERRNO_MAP(SL__ERR_NAME)
#undef SL__ERR_NAME
  }
  return "UNKNOWN";
}

unsigned sl_version(void) { return SL_VERSION_HEX; }

#define SL__STR2(x) #x
#define SL__STR(x) SL__STR2(x)
const char *sl_version_string(void) {
  return SL__STR(SL_VERSION_MAJOR) "." SL__STR(SL_VERSION_MINOR) "." SL__STR(
      SL_VERSION_PATCH);
}
