/*
 * engine_fixture.h — what the engine's tests share (test_engine.c,
 * test_sync_engine.c): a config from YAML text, one engine with one worker
 * thread, reloads from the test's thread, ad-hoc decisions, and a fake
 * Redis remote that records commands for the test to answer. Include
 * after helpers.h, rules/config.h and engine/engine.h.
 */
#ifndef SLUICE_TEST_ENGINE_FIXTURE_H
#define SLUICE_TEST_ENGINE_FIXTURE_H

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

/* An ad-hoc decision of `cost` for a NUL-terminated key; asserts rc 0. */
static inline eng_result throttle(engine_thread *t, const char *key,
                                  const char *spec, int64_t cost,
                                  int64_t now) {
  eng_result r;
  char err[256] = "";
  int rc = engine_throttle(t, key, strlen(key), spec, strlen(spec), cost, now,
                           &r, err, sizeof err);
  if (rc)
    fail_msg("engine_throttle(%s, %s, %lld): rc %d %s", key, spec,
             (long long)cost, rc, err);
  return r;
}

/* ---- fleet mode: a fake remote (engine_thread_set_remote) ---- */

/* A remote that records each command, for the test to answer by hand
   (or refuses them all while `down`). */
typedef struct fake_redis {
  int n, down;
  char *cmd[64];
  size_t len[64];
  int slot[64];
  eng_reply_fn cb[64];
  void *ud[64];
} fake_redis;

static inline int send_fake(void *io, int slot, char *cmd, size_t len,
                            eng_reply_fn cb, void *ud) {
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
