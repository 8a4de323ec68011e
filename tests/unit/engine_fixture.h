/*
 * engine_fixture.h — what the engine's tests share (test_engine.c,
 * test_sync_engine.c, test_sync.c): a config from YAML text, one engine
 * with one worker thread, reloads from the test's thread, the engine's two
 * entry points (engine_decide, engine_reset) called the way each test
 * needs them, the fleet's backends, and a fake Redis transport that
 * records commands for the test to answer. Include after helpers.h,
 * rules/config.h and engine/engine.h.
 */
#ifndef SLUICE_TEST_ENGINE_FIXTURE_H
#define SLUICE_TEST_ENGINE_FIXTURE_H

#include "engine/backend.h"
#include "fleet/approx.h"
#include "fleet/fleet.h"

static inline sl_config *cfg_of(const char *yaml) {
  cfg_errors e = {0};
  sl_config *c = config_load_string(yaml, strlen(yaml), "t.yaml", &e);
  if (!c) {
    for (size_t i = 0; i < e.n; i++) print_error("%s\n", e.msgs[i]);
    cfg_errors_free(&e);
    fail_msg("the config did not load");
  }
  return c;
}

/* One engine and one worker thread on it. */
typedef struct fixture {
  engine *e;
  engine_thread *t;
} fixture;

/* An engine with opts (NULL: the defaults) on yaml, and its thread. */
static inline fixture fixture_with(const engine_opts *opts, const char *yaml) {
  char err[256] = "";
  fixture f;
  f.e = engine_new(opts, cfg_of(yaml), err, sizeof err);
  if (!f.e) fail_msg("engine_new: %s", err);
  f.t = engine_thread_new(f.e);
  assert_non_null(f.t);
  return f;
}

static inline void fixture_free(fixture *f) {
  engine_thread_free(f->t);
  engine_free(f->e);
}

/* Reloads from the test's own thread: it must not hold a generation while
   engine_reload waits for every online thread. */
static inline void reload(fixture *f, const char *yaml) {
  engine_thread_offline(f->t);
  assert_int_equal(engine_reload(f->e, cfg_of(yaml)), 0);
  engine_thread_quiesce(f->t);
}

/* ---- the entry points, as each test calls them ---- */

/* The configured rules for req (done NULL: at once). */
static inline int do_check_async(engine_thread *t, const eng_request *req,
                                 int64_t now, eng_result *out,
                                 eng_done_fn done, void *ud) {
  eng_query q = {.kind = ENG_QUERY_RULES, .req = req, .now = now};
  return engine_decide(t, &q, out, done, ud);
}
static inline int do_check(engine_thread *t, const eng_request *req,
                           int64_t now, eng_result *out) {
  return do_check_async(t, req, now, out, NULL, NULL);
}

/* key under the ad-hoc policy spelled spec; err gets why a policy was
   refused (out->err). */
static inline int do_throttle_async(engine_thread *t, const char *key,
                                    size_t key_len, const char *spec,
                                    size_t spec_len, int64_t cost,
                                    int64_t now, eng_result *out, char *err,
                                    size_t err_len, eng_done_fn done,
                                    void *ud) {
  eng_query q = {.kind = ENG_QUERY_POLICY, .key = key, .key_len = key_len,
                 .spec = spec, .spec_len = spec_len, .cost = cost,
                 .now = now};
  int rc = engine_decide(t, &q, out, done, ud);
  if (err && err_len) { /* (truncated to the caller's buffer) */
    size_t n = strnlen(out->err, err_len - 1);
    memcpy(err, out->err, n);
    err[n] = '\0';
  }
  return rc;
}
static inline int do_throttle(engine_thread *t, const char *key,
                              size_t key_len, const char *spec,
                              size_t spec_len, int64_t cost, int64_t now,
                              eng_result *out, char *err, size_t err_len) {
  return do_throttle_async(t, key, key_len, spec, spec_len, cost, now, out,
                           err, err_len, NULL, NULL);
}

/* key under the policy value p (CL.THROTTLE's way). */
static inline int do_throttle_policy_async(engine_thread *t, const char *key,
                                           size_t key_len, const sl_policy *p,
                                           int64_t cost, int64_t now,
                                           eng_result *out, eng_done_fn done,
                                           void *ud) {
  eng_query q = {.kind = ENG_QUERY_POLICY, .key = key, .key_len = key_len,
                 .policy = p, .cost = cost, .now = now};
  return engine_decide(t, &q, out, done, ud);
}
static inline int do_throttle_policy(engine_thread *t, const char *key,
                                     size_t key_len, const sl_policy *p,
                                     int64_t cost, int64_t now,
                                     eng_result *out) {
  return do_throttle_policy_async(t, key, key_len, p, cost, now, out, NULL,
                                  NULL);
}

/* An ad-hoc decision of `cost` for a NUL-terminated key; asserts rc 0. */
static inline eng_result throttle(engine_thread *t, const char *key,
                                  const char *spec, int64_t cost,
                                  int64_t now) {
  eng_result r;
  char err[256] = "";
  int rc = do_throttle(t, key, strlen(key), spec, strlen(spec), cost, now,
                       &r, err, sizeof err);
  if (rc)
    fail_msg("engine_decide(%s, %s, %lld): rc %d %s", key, spec,
             (long long)cost, rc, r.msg);
  return r;
}

/* Resets: key under the policy spelled spec (NULL: every ad-hoc one). */
static inline int do_reset_key_async(engine_thread *t, const char *key,
                                     size_t key_len, const char *spec,
                                     size_t spec_len, eng_reset *out,
                                     eng_reset_fn done, void *ud) {
  eng_query q = {.kind = ENG_QUERY_POLICY, .key = key, .key_len = key_len,
                 .spec = spec, .spec_len = spec_len};
  return engine_reset(t, &q, out, done, ud);
}
static inline int do_reset_descriptor_async(engine_thread *t,
                                            const eng_request *req,
                                            eng_reset *out, eng_reset_fn done,
                                            void *ud) {
  eng_query q = {.kind = ENG_QUERY_RULES, .req = req};
  return engine_reset(t, &q, out, done, ud);
}
/* Memory mode's short forms: the number of states dropped, or an error. */
static inline int do_reset_key(engine_thread *t, const char *key,
                               size_t key_len) {
  eng_reset out;
  int rc = do_reset_key_async(t, key, key_len, NULL, 0, &out, NULL, NULL);
  return rc ? rc : out.dropped;
}
static inline int do_reset_descriptor(engine_thread *t,
                                      const eng_request *req) {
  eng_reset out;
  int rc = do_reset_descriptor_async(t, req, &out, NULL, NULL);
  return rc ? rc : out.dropped;
}

/* ---- fleet mode's backends ---- */

/* Engine options for exact mode (fleet_opts o) with on_store_error mode. */
static inline engine_opts exact_opts(fleet_opts o, int mode) {
  engine_opts eo = {.on_store_error = mode, .backend = fleet_exact_new(&o)};
  assert_non_null(eo.backend);
  return eo;
}

/* Engine options for approximate mode. */
static inline engine_opts approx_opts(void) {
  fleet_opts o = {0};
  engine_opts eo = {.backend = fleet_approx_new(&o)};
  assert_non_null(eo.backend);
  return eo;
}

/* Engine e's approximate backend (the sync thread's side of it). */
static inline approx *approx_of(engine *e) {
  approx *a = fleet_approx_of(engine_backend(e));
  assert_non_null(a);
  return a;
}

/* ---- fleet mode: a fake transport (fleet_thread_set_transport) ---- */

/* A remote that records each command, for the test to answer by hand
   (or refuses them all while `down`). */
typedef struct fake_redis {
  int n, down;
  char *cmd[64];
  size_t len[64];
  int slot[64];
  fleet_reply_fn cb[64];
  void *ud[64];
} fake_redis;

static inline int send_fake(void *io, int slot, char *cmd, size_t len,
                            int64_t since_ns, fleet_reply_fn cb, void *ud) {
  (void)since_ns;
  fake_redis *f = io;
  if (f->down) {
    free(cmd);
    return -1;
  }
  assert_true(f->n < 64);
  f->cmd[f->n] = cmd;
  f->len[f->n] = len;
  f->slot[f->n] = slot;
  f->cb[f->n] = cb;
  f->ud[f->n] = ud;
  f->n++;
  return 0;
}

static inline void fake_free(fake_redis *f) {
  for (int i = 0; i < f->n; i++) free(f->cmd[i]);
  memset(f, 0, sizeof *f);
}

/* Redis's answer to command i: an integer (UNLINK: the keys it deleted). */
static inline void answer_int(fake_redis *f, int i, long long v) {
  redisReply r;
  memset(&r, 0, sizeof r);
  r.type = REDIS_REPLY_INTEGER;
  r.integer = v;
  f->cb[i](f->ud[i], &r, NULL);
}

/* Command i failed (timeout, connection lost). */
static inline void answer_fail(fake_redis *f, int i, const char *why) {
  f->cb[i](f->ud[i], NULL, why);
}

/* Redis's answer to command i: an error reply. */
static inline void answer_err(fake_redis *f, int i, const char *msg) {
  redisReply r;
  memset(&r, 0, sizeof r);
  r.type = REDIS_REPLY_ERROR;
  r.str = (char *)msg;
  r.len = strlen(msg);
  f->cb[i](f->ud[i], &r, NULL);
}

#endif
