/*
 * rm.c — the module API's function pointers (rm.h) and their fetching at
 * load time, as redismodule.h's RedisModule_Init does it: GetApi, found in
 * the context's first word, looks each one up by its name.
 */
#include "rm.h"

#define RM_DEFINE(name, ret, params) ret(*RedisModule_##name) params;
RM_FUNCS(RM_DEFINE)
RM_FUNCS_OPTIONAL(RM_DEFINE)
#undef RM_DEFINE

typedef int (*rm_getapi)(const char *name, void *out);

int rm_init(RedisModuleCtx *ctx, const char *name, int version) {
  rm_getapi get = *(rm_getapi *)(void *)ctx;
  int missing = 0;
#define RM_FETCH(fn, ret, params) \
  missing |= get("RedisModule_" #fn, (void *)&RedisModule_##fn) != 0;
  RM_FUNCS(RM_FETCH)
#undef RM_FETCH
#define RM_FETCH_OPT(fn, ret, params)                                    \
  if (get("RedisModule_" #fn, (void *)&RedisModule_##fn) != 0) \
    RedisModule_##fn = NULL;
  RM_FUNCS_OPTIONAL(RM_FETCH_OPT)
#undef RM_FETCH_OPT
  if (missing) return REDISMODULE_ERR;
  RedisModule_SetModuleAttribs(ctx, name, version, REDISMODULE_APIVER_1);
  return REDISMODULE_OK;
}
