/*
 * fixtures.h — the YAML configs of tests/fixtures/ (shared with other
 * tests, or real-world examples such as envoyproxy/ratelimit's README),
 * read by name: yaml_fixture("envoy/example7.yaml"). Include after
 * helpers.h.
 *
 * The unit tests run from the repository root (make unit), so the path is
 * relative to it. Each file is read once and kept for the test's run (the
 * cache keeps it reachable, so leak checkers do not count it).
 */
#ifndef SLUICE_TEST_FIXTURES_H
#define SLUICE_TEST_FIXTURES_H

#define FIXTURES_DIR "tests/fixtures/"

/* The text of tests/fixtures/NAME, NUL-terminated; fails the test when it
   cannot be read. */
static inline const char *yaml_fixture(const char *name) {
  static struct {
    char name[128];
    char *text;
  } cache[32];
  static size_t n;
  for (size_t i = 0; i < n; i++)
    if (!strcmp(cache[i].name, name)) return cache[i].text;
  char path[256];
  snprintf(path, sizeof path, FIXTURES_DIR "%s", name);
  FILE *f = fopen(path, "rb");
  if (!f)
    fail_msg("cannot open %s (run the tests from the repository root)", path);
  char *text = NULL;
  size_t len = 0, cap = 0;
  for (size_t got = 1; got;) {
    if (len + 4096 + 1 > cap) {
      cap = cap ? cap * 2 : 8192;
      text = realloc(text, cap);
      assert_non_null(text);
    }
    got = fread(text + len, 1, cap - len - 1, f);
    len += got;
  }
  assert_int_equal(ferror(f), 0);
  fclose(f);
  text[len] = '\0';
  if (n == sizeof cache / sizeof cache[0] ||
      strlen(name) >= sizeof cache[0].name)
    fail_msg("fixtures.h: raise the size of the cache for %s", name);
  snprintf(cache[n].name, sizeof cache[n].name, "%s", name);
  cache[n].text = text;
  return cache[n++].text;
}

#endif /* SLUICE_TEST_FIXTURES_H */
