/*
 * engine_fixture.h — what the engine's tests share (test_engine.c,
 * test_sync_engine.c): a config from YAML text, one engine with one worker
 * thread, reloads from the test's thread, and ad-hoc decisions. Include
 * after helpers.h, config/config.h and server/engine.h.
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

#endif
