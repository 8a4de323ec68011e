/*
 * test_resp_parse.c — the Redis-protocol request parser
 * (src/server/resp_parse.c): multibulk and inline commands, pipelining,
 * incremental feeding (the `need` hint), the limits, and every protocol
 * error worded exactly as Redis words it.
 */
#include "helpers.h"

#include "server/resp_parse.h"

/* ---- local helpers ---- */

static resp_cmd cmd; /* 16 KiB: not on the stack */

/* Parses all of s (NUL-terminated), expecting one complete command that
   spans all of it. */
static void parse_whole(const char *s) {
  size_t need = 0;
  const char *err = NULL;
  ssize_t n = resp_parse(s, strlen(s), NULL, &cmd, &need, &err);
  if (n < 0) fail_msg("'%s': %s", s, err);
  assert_int_equal(n, strlen(s));
}

static void assert_arg(int i, const char *want) {
  assert_true(i < cmd.argc);
  assert_int_equal(cmd.len[i], strlen(want));
  assert_memory_equal(cmd.argv[i], want, strlen(want));
}

/* Parses buf[0..len) expecting the protocol error `want`. */
static void assert_error(const char *buf, size_t len, const char *want) {
  size_t need = 0;
  const char *err = NULL;
  ssize_t n = resp_parse(buf, len, NULL, &cmd, &need, &err);
  if (n != -1) fail_msg("'%.*s': %zd, expected an error", (int)len, buf, n);
  assert_non_null(err);
  assert_string_equal(err, want);
}

static void assert_error_str(const char *s, const char *want) {
  assert_error(s, strlen(s), want);
}

/* Parses buf[0..len) expecting "incomplete" with a need > len. */
static size_t assert_incomplete(const char *buf, size_t len) {
  size_t need = 0;
  const char *err = NULL;
  ssize_t n = resp_parse(buf, len, NULL, &cmd, &need, &err);
  if (n != 0)
    fail_msg("'%.*s' (%zu bytes): %zd (%s), expected incomplete", (int)len,
             buf, len, n, n < 0 ? err : "");
  assert_true(need > len);
  return need;
}

/* ---- multibulk ---- */

static void multibulk_command_gives_its_arguments(void **state) {
  (void)state;
  const char *s = "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$5\r\nvalue\r\n";
  parse_whole(s);
  assert_int_equal(cmd.argc, 3);
  assert_arg(0, "SET");
  assert_arg(1, "k");
  assert_arg(2, "value");
}

static void arguments_point_into_the_callers_buffer(void **state) {
  (void)state;
  const char *s = "*2\r\n$4\r\nECHO\r\n$2\r\nhi\r\n";
  parse_whole(s);
  assert_ptr_equal(cmd.argv[0], s + 8);
  assert_ptr_equal(cmd.argv[1], s + 18);
}

static void bulk_arguments_are_binary_safe(void **state) {
  (void)state;
  const char s[] = "*2\r\n$4\r\nECHO\r\n$6\r\n\0\r\n*\xff$\r\n";
  size_t len = sizeof s - 1, need;
  const char *err;
  assert_int_equal(resp_parse(s, len, NULL, &cmd, &need, &err), len);
  assert_int_equal(cmd.argc, 2);
  assert_int_equal(cmd.len[1], 6);
  assert_memory_equal(cmd.argv[1], "\0\r\n*\xff$", 6);
}

static void an_empty_bulk_is_an_empty_argument(void **state) {
  (void)state;
  parse_whole("*2\r\n$0\r\n\r\n$1\r\nx\r\n");
  assert_int_equal(cmd.argc, 2);
  assert_int_equal(cmd.len[0], 0);
  assert_arg(1, "x");
}

static void a_zero_multibulk_is_an_empty_command(void **state) {
  (void)state;
  parse_whole("*0\r\n");
  assert_int_equal(cmd.argc, 0);
}

static void the_largest_bulk_and_count_are_accepted(void **state) {
  (void)state;
  /* RESP_MAX_BULK bytes in one argument. */
  size_t len = 4 + 8 + RESP_MAX_BULK + 2;
  char *buf = malloc(len + 1);
  assert_non_null(buf);
  int h = snprintf(buf, len + 1, "*1\r\n$%d\r\n", RESP_MAX_BULK);
  assert_int_equal(h, 12);
  memset(buf + h, 'a', RESP_MAX_BULK);
  memcpy(buf + h + RESP_MAX_BULK, "\r\n", 2);
  size_t need;
  const char *err;
  assert_int_equal(resp_parse(buf, len, NULL, &cmd, &need, &err), len);
  assert_int_equal(cmd.len[0], RESP_MAX_BULK);
  free(buf);
  /* RESP_MAX_ARGS arguments. */
  buf = malloc(16 + RESP_MAX_ARGS * 7);
  assert_non_null(buf);
  h = snprintf(buf, 16, "*%d\r\n", RESP_MAX_ARGS);
  len = (size_t)h + RESP_MAX_ARGS * 7;
  for (int i = 0; i < RESP_MAX_ARGS; i++) memcpy(buf + h + 7 * i, "$1\r\nx\r\n", 7);
  assert_int_equal(resp_parse(buf, len, NULL, &cmd, &need, &err), len);
  assert_int_equal(cmd.argc, RESP_MAX_ARGS);
  free(buf);
}

/* ---- inline ---- */

static void inline_command_splits_on_spaces_and_tabs(void **state) {
  (void)state;
  parse_whole("SET  key\tvalue \r\n");
  assert_int_equal(cmd.argc, 3);
  assert_arg(0, "SET");
  assert_arg(1, "key");
  assert_arg(2, "value");
}

static void inline_command_may_end_in_a_bare_newline(void **state) {
  (void)state;
  parse_whole("PING\n");
  assert_int_equal(cmd.argc, 1);
  assert_arg(0, "PING");
}

static void inline_arguments_point_into_the_buffer(void **state) {
  (void)state;
  const char *s = "ECHO hello\r\n";
  parse_whole(s);
  assert_ptr_equal(cmd.argv[0], s);
  assert_ptr_equal(cmd.argv[1], s + 5);
}

static void an_empty_inline_line_has_no_arguments(void **state) {
  (void)state;
  parse_whole("\r\n");
  assert_int_equal(cmd.argc, 0);
  parse_whole("\n");
  assert_int_equal(cmd.argc, 0);
  parse_whole("  \t \r\n");
  assert_int_equal(cmd.argc, 0);
}

static void an_inline_line_of_64k_is_still_awaited(void **state) {
  (void)state;
  char *buf = malloc(RESP_MAX_INLINE + 2);
  assert_non_null(buf);
  memset(buf, 'a', RESP_MAX_INLINE + 2);
  assert_incomplete(buf, RESP_MAX_INLINE);
  buf[RESP_MAX_INLINE] = '\n';
  size_t need;
  const char *err;
  assert_int_equal(resp_parse(buf, RESP_MAX_INLINE + 1, NULL, &cmd, &need, &err),
                   RESP_MAX_INLINE + 1);
  assert_int_equal(cmd.argc, 1);
  free(buf);
}

/* ---- pipelining ---- */

static void pipelined_commands_are_parsed_one_after_another(void **state) {
  (void)state;
  const char *s = "*1\r\n$4\r\nPING\r\n"
                  "*2\r\n$4\r\nECHO\r\n$2\r\nhi\r\n"
                  "PING inline\r\n"
                  "\r\n"
                  "*3\r\n$11\r\nCL.THROTTLE\r\n$2\r\nu1\r\n$2\r\n15\r\n"
                  "*1\r\n$4\r\nPI"; /* the last one is incomplete */
  const char *const first[] = {"PING", "ECHO", "PING", NULL, "CL.THROTTLE"};
  const int argcs[] = {1, 2, 2, 0, 3};
  size_t off = 0, len = strlen(s), need;
  const char *err;
  for (int i = 0; i < 5; i++) {
    ssize_t n = resp_parse(s + off, len - off, NULL, &cmd, &need, &err);
    assert_true(n > 0);
    assert_int_equal(cmd.argc, argcs[i]);
    if (first[i]) assert_arg(0, first[i]);
    off += (size_t)n;
  }
  assert_int_equal(resp_parse(s + off, len - off, NULL, &cmd, &need, &err), 0);
  assert_int_equal(need, 14); /* "*1\r\n$4\r\nPING\r\n" */
}

/* ---- incremental feeding ---- */

/*
 * Feeds s one byte at a time the way a connection does: parse only once
 * the buffer holds `need` bytes. Checks that every incomplete answer asks
 * for more than it has, that the hint never shrinks, and returns the number
 * of parse calls (the work done) before the command completes.
 */
static int feed_byte_by_byte(const char *s, size_t total, size_t *bytes_read) {
  size_t need = 0, last_need = 0;
  const char *err;
  int calls = 0;
  *bytes_read = 0;
  for (size_t len = 1; len <= total; len++) {
    if (len < need) continue;
    calls++;
    *bytes_read += len;
    /* An exact-size copy, so a read past the end is caught by ASan. */
    char *buf = malloc(len);
    assert_non_null(buf);
    memcpy(buf, s, len);
    ssize_t n = resp_parse(buf, len, NULL, &cmd, &need, &err);
    free(buf);
    if (n < 0) fail_msg("byte %zu: %s", len, err);
    if (n > 0) {
      assert_int_equal(len, total);
      assert_int_equal(n, total);
      return calls;
    }
    assert_true(need > len);
    assert_true(need >= last_need);
    assert_true(need <= total); /* never asks for more than is coming */
    last_need = need;
  }
  fail_msg("the command never completed");
  return -1;
}

static void a_command_fed_byte_by_byte_completes_at_its_last_byte(
    void **state) {
  (void)state;
  const char *s = "*3\r\n$11\r\nSL.THROTTLE\r\n$5\r\nalice\r\n$8\r\ngcra:5/s\r\n";
  size_t work;
  int calls = feed_byte_by_byte(s, strlen(s), &work);
  assert_true(calls > 0);
  assert_int_equal(cmd.argc, 3);
  assert_arg(2, "gcra:5/s");
  const char *in = "SL.THROTTLE alice gcra:5/s\r\n";
  feed_byte_by_byte(in, strlen(in), &work);
  assert_int_equal(cmd.argc, 3);
}

static void a_large_bulk_trickling_in_is_parsed_a_bounded_number_of_times(
    void **state) {
  (void)state;
  size_t blen = 60000;
  char *s = malloc(16 + blen + 2);
  assert_non_null(s);
  int h = snprintf(s, 16, "*1\r\n$%zu\r\n", blen);
  size_t total = (size_t)h + blen + 2;
  memset(s + h, 'z', blen);
  memcpy(s + h + blen, "\r\n", 2);
  size_t work;
  int calls = feed_byte_by_byte(s, total, &work);
  /* One parse per header byte, then one when the whole bulk is there. */
  assert_true(calls <= h + 2);
  assert_true(work <= 2 * total);
  assert_int_equal(cmd.len[0], blen);
  free(s);
}

static void need_skips_to_the_end_of_a_declared_bulk(void **state) {
  (void)state;
  const char *s = "*2\r\n$3\r\nGET\r\n$100\r\n";
  size_t need = assert_incomplete(s, strlen(s));
  assert_int_equal(need, strlen(s) + 100 + 2);
  /* Part of the bulk: the same hint. */
  char buf[64];
  memcpy(buf, s, strlen(s));
  memset(buf + strlen(s), 'x', 10);
  assert_int_equal(assert_incomplete(buf, strlen(s) + 10), need);
}

static void every_prefix_of_a_command_is_incomplete(void **state) {
  (void)state;
  const char *cmds[] = {
      "*2\r\n$4\r\nECHO\r\n$0\r\n\r\n",
      "*1\r\n$10\r\n0123456789\r\n",
      "CL.THROTTLE user1 15 30 60 1\r\n",
      "*0\r\n",
  };
  for (size_t c = 0; c < sizeof cmds / sizeof cmds[0]; c++)
    for (size_t len = 0; len < strlen(cmds[c]); len++) {
      char *buf = malloc(len ? len : 1);
      memcpy(buf, cmds[c], len);
      assert_incomplete(buf, len);
      free(buf);
    }
}

/* ---- errors, worded as Redis words them ---- */

static void a_multibulk_count_past_int_max_is_refused_at_once(void **state) {
  (void)state;
  /* Redis's own test: no allocation, no waiting for 3e9 arguments. */
  assert_error_str("*3000000000\r\n", "Protocol error: invalid multibulk length");
}

static void a_negative_multibulk_count_is_refused(void **state) {
  (void)state;
  assert_error_str("*-2\r\n", "Protocol error: invalid multibulk length");
}

static void a_non_numeric_multibulk_count_is_refused(void **state) {
  (void)state;
  assert_error_str("*abc\r\n", "Protocol error: invalid multibulk length");
  assert_error_str("*\r\n", "Protocol error: invalid multibulk length");
  assert_error_str("*1x\r\n", "Protocol error: invalid multibulk length");
  assert_error_str("*1\rX", "Protocol error: invalid multibulk length");
}

static void a_multibulk_count_above_the_argument_limit_is_refused(
    void **state) {
  (void)state;
  char s[32];
  snprintf(s, sizeof s, "*%d\r\n", RESP_MAX_ARGS + 1);
  assert_error_str(s, "Protocol error: invalid multibulk length");
}

static void an_endless_multibulk_count_is_refused(void **state) {
  (void)state;
  char s[40];
  memset(s, '9', sizeof s);
  s[0] = '*';
  assert_error(s, sizeof s, "Protocol error: invalid multibulk length");
}

static void a_negative_bulk_length_is_refused(void **state) {
  (void)state;
  assert_error_str("*1\r\n$-5\r\n", "Protocol error: invalid bulk length");
}

static void a_bulk_length_above_the_limit_is_refused_at_its_header(
    void **state) {
  (void)state;
  assert_error_str("*1\r\n$70000\r\n", "Protocol error: invalid bulk length");
  char s[32];
  snprintf(s, sizeof s, "*1\r\n$%d\r\n", RESP_MAX_BULK + 1);
  assert_error_str(s, "Protocol error: invalid bulk length");
}

static void a_non_numeric_bulk_length_is_refused(void **state) {
  (void)state;
  assert_error_str("*1\r\n$x\r\n", "Protocol error: invalid bulk length");
  assert_error_str("*1\r\n$\r\n", "Protocol error: invalid bulk length");
}

static void a_bulk_without_a_dollar_is_refused_naming_the_byte(void **state) {
  (void)state;
  assert_error_str("*1\r\nx", "Protocol error: expected '$', got 'x'");
  assert_error_str("*2\r\n$1\r\na\r\n:1\r\n",
                   "Protocol error: expected '$', got ':'");
}

static void a_bulk_not_ending_in_crlf_is_refused(void **state) {
  (void)state;
  assert_error_str("*1\r\n$3\r\nabcde",
                   "Protocol error: bulk string not terminated by CRLF");
}

static void an_inline_request_past_64k_without_newline_is_refused(
    void **state) {
  (void)state;
  char *buf = malloc(RESP_MAX_INLINE + 1);
  assert_non_null(buf);
  memset(buf, 'a', RESP_MAX_INLINE + 1);
  assert_error(buf, RESP_MAX_INLINE + 1,
               "Protocol error: too big inline request");
  free(buf);
}

static void an_inline_request_with_too_many_words_is_refused(void **state) {
  (void)state;
  size_t len = 2 * (RESP_MAX_ARGS + 1) + 1;
  char *buf = malloc(len);
  assert_non_null(buf);
  for (size_t i = 0; i < len - 1; i += 2) memcpy(buf + i, "a ", 2);
  buf[len - 1] = '\n';
  assert_error(buf, len,
               "Protocol error: too many arguments in inline request");
  free(buf);
}

static void an_error_is_found_before_the_rest_arrives(void **state) {
  (void)state;
  /* The bad header is refused without waiting for its arguments. */
  assert_error_str("*1\r\n$-1\r\n", "Protocol error: invalid bulk length");
  assert_error_str("*2\r\n$1\r\na\r\n$99999999\r\n",
                   "Protocol error: invalid bulk length");
  /* A length of 19 digits or more is refused, never overflowed. */
  assert_error_str("*-9999999299999999999999999\r\n",
                   "Protocol error: invalid multibulk length");
  assert_error_str("*9999999999999999999\r\n",
                   "Protocol error: invalid multibulk length");
}

/* ---- from the bugs found in review (fixed) ---- */

#include "server/resp_parse.h"

static resp_cmd cmd;

/*
 * Bug: RESP_MAX_INLINE ("bytes per inline command") is only enforced while
 * no newline has arrived: a 100 KB inline line that arrives whole (one
 * read, or a client that pipelines) is accepted, the same line trickling in
 * is refused. The outcome must not depend on how the bytes were split.
 */
static void an_inline_line_past_64k_is_refused_however_it_arrives(
    void **state) {
  (void)state;
  size_t len = 100000;
  char *buf = malloc(len);
  assert_non_null(buf);
  memset(buf, 'a', len);
  buf[len - 1] = '\n';
  size_t need;
  const char *err = NULL;
  /* In pieces: refused once 64K + 1 bytes are there without a newline. */
  assert_int_equal(resp_parse(buf, RESP_MAX_INLINE + 1, NULL, &cmd, &need, &err), -1);
  /* Whole: must be refused too. */
  err = NULL;
  assert_int_equal(resp_parse(buf, len, NULL, &cmd, &need, &err), -1);
  assert_string_equal(err, "Protocol error: too big inline request");
  free(buf);
}

/* Inline commands split as Redis splits them (sdssplitargs). */
static void inline_double_quotes_group_and_unescape(void **state) {
  (void)state;
  parse_whole("ECHO \"a b\" \"x\\ny\\x41\\\"\" plain\r\n");
  assert_int_equal(cmd.argc, 4);
  assert_arg(0, "ECHO");
  assert_arg(1, "a b");
  assert_arg(2, "x\nyA\"");
  assert_arg(3, "plain");
}

static void inline_single_quotes_keep_backslashes(void **state) {
  (void)state;
  parse_whole("SET 'it\\'s' 'a\\nb'\n");
  assert_int_equal(cmd.argc, 3);
  assert_arg(1, "it's");
  assert_arg(2, "a\\nb");
}

static void inline_unbalanced_quotes_are_a_protocol_error(void **state) {
  (void)state;
  const char *msg = "Protocol error: unbalanced quotes in request";
  assert_error("ECHO \"abc\r\n", 11, msg);
  assert_error("ECHO 'abc\r\n", 11, msg);
  assert_error("ECHO \"a\"b\r\n", 12, msg); /* a quote must end its arg */
}

/* ---- the caller's limits (issue 15, finding 1) ---- */

/* Parses buf[0..len) under lim expecting the limit error `want` (-2). */
static void assert_over(const char *buf, size_t len, const resp_limits *lim,
                        const char *want) {
  size_t need = 0;
  const char *err = NULL;
  ssize_t n = resp_parse(buf, len, lim, &cmd, &need, &err);
  if (n != -2) fail_msg("'%.*s': %zd, expected -2", (int)len, buf, n);
  assert_non_null(err);
  assert_string_equal(err, want);
}

/* A 64 MB command (1,024 bulks of 64 KiB) is refused at the header of the
   bulk that takes it past max_bytes, before that bulk's bytes arrive. */
static void a_command_past_max_bytes_is_refused_at_the_bulk_header(
    void **state) {
  (void)state;
  resp_limits lim = {.max_bytes = 1 << 20};
  size_t cap = (2 << 20) + 64, len = 0;
  char *buf = malloc(cap);
  assert_non_null(buf);
  len += (size_t)snprintf(buf, cap, "*1024\r\n");
  size_t need;
  const char *err = NULL;
  for (int i = 0; i < 16; i++) { /* 16 x 64 KiB + framing: just over */
    len += (size_t)snprintf(buf + len, cap - len, "$65536\r\n");
    memset(buf + len, 'x', 65536);
    len += 65536;
    memcpy(buf + len, "\r\n", 2);
    len += 2;
    if (i < 15) /* still under: incomplete */
      assert_int_equal(resp_parse(buf, len, &lim, &cmd, &need, &err), 0);
  }
  assert_over(buf, len, &lim,
              "Protocol error: too big command (over 1048576 bytes)");
  /* Without limits, the same bytes are just incomplete. */
  assert_int_equal(resp_parse(buf, len, NULL, &cmd, &need, &err), 0);
  free(buf);
}

static void a_declared_bulk_past_max_bytes_is_refused_with_no_bytes(
    void **state) {
  (void)state;
  resp_limits lim = {.max_bytes = 4096};
  assert_over("*2\r\n$3\r\nSET\r\n$5000\r\n", 24, &lim,
              "Protocol error: too big command (over 4096 bytes)");
}

static void a_command_of_exactly_max_bytes_is_accepted(void **state) {
  (void)state;
  const char *s = "*2\r\n$4\r\nECHO\r\n$2\r\nhi\r\n";
  resp_limits lim = {.max_bytes = strlen(s)};
  size_t need;
  const char *err = NULL;
  assert_int_equal(resp_parse(s, strlen(s), &lim, &cmd, &need, &err),
                   strlen(s));
  lim.max_bytes--;
  char want[64];
  snprintf(want, sizeof want, "Protocol error: too big command (over %zu "
           "bytes)", lim.max_bytes);
  assert_over(s, strlen(s), &lim, want);
}

static void an_inline_line_past_max_bytes_is_refused(void **state) {
  (void)state;
  resp_limits lim = {.max_bytes = 16};
  assert_over("PING aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", 35, &lim,
              "Protocol error: too big inline request");
  assert_over("PING aaaaaaaaaaaaaaaaaaaa\r\n", 27, &lim,
              "Protocol error: too big inline request");
}

/* Before AUTH: Redis's limits and words (networking.c), and a few KB. */
static void before_auth_more_than_10_arguments_are_refused_at_the_header(
    void **state) {
  (void)state;
  resp_limits lim = {.max_bytes = 1 << 20, .unauthenticated = 1};
  assert_over("*11\r\n", 5, &lim,
              "Protocol error: unauthenticated multibulk length");
  size_t need;
  const char *err = NULL;
  assert_int_equal(resp_parse("*10\r\n", 5, &lim, &cmd, &need, &err), 0);
}

static void before_auth_a_command_past_4k_is_refused_at_the_header(
    void **state) {
  (void)state;
  resp_limits lim = {.max_bytes = 1 << 20, .unauthenticated = 1};
  assert_over("*2\r\n$4\r\nAUTH\r\n$5000\r\n", 25, &lim,
              "Protocol error: unauthenticated bulk length");
  char s[5000];
  memset(s, 'a', sizeof s);
  memcpy(s, "AUTH ", 5);
  assert_over(s, sizeof s, &lim, "Protocol error: too big inline request");
  /* A password of 4000 bytes still fits. */
  char *b = malloc(4100);
  assert_non_null(b);
  int n = snprintf(b, 4100, "*2\r\n$4\r\nAUTH\r\n$4000\r\n");
  memset(b + n, 'p', 4000);
  memcpy(b + n + 4000, "\r\n", 2);
  size_t need;
  const char *err = NULL;
  assert_int_equal(resp_parse(b, (size_t)n + 4002, &lim, &cmd, &need, &err),
                   n + 4002);
  free(b);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(a_command_past_max_bytes_is_refused_at_the_bulk_header),
      cmocka_unit_test(a_declared_bulk_past_max_bytes_is_refused_with_no_bytes),
      cmocka_unit_test(a_command_of_exactly_max_bytes_is_accepted),
      cmocka_unit_test(an_inline_line_past_max_bytes_is_refused),
      cmocka_unit_test(
          before_auth_more_than_10_arguments_are_refused_at_the_header),
      cmocka_unit_test(before_auth_a_command_past_4k_is_refused_at_the_header),
      cmocka_unit_test(inline_double_quotes_group_and_unescape),
      cmocka_unit_test(inline_single_quotes_keep_backslashes),
      cmocka_unit_test(inline_unbalanced_quotes_are_a_protocol_error),
      cmocka_unit_test(an_inline_line_past_64k_is_refused_however_it_arrives),
      cmocka_unit_test(multibulk_command_gives_its_arguments),
      cmocka_unit_test(arguments_point_into_the_callers_buffer),
      cmocka_unit_test(bulk_arguments_are_binary_safe),
      cmocka_unit_test(an_empty_bulk_is_an_empty_argument),
      cmocka_unit_test(a_zero_multibulk_is_an_empty_command),
      cmocka_unit_test(the_largest_bulk_and_count_are_accepted),
      cmocka_unit_test(inline_command_splits_on_spaces_and_tabs),
      cmocka_unit_test(inline_command_may_end_in_a_bare_newline),
      cmocka_unit_test(inline_arguments_point_into_the_buffer),
      cmocka_unit_test(an_empty_inline_line_has_no_arguments),
      cmocka_unit_test(an_inline_line_of_64k_is_still_awaited),
      cmocka_unit_test(pipelined_commands_are_parsed_one_after_another),
      cmocka_unit_test(a_command_fed_byte_by_byte_completes_at_its_last_byte),
      cmocka_unit_test(
          a_large_bulk_trickling_in_is_parsed_a_bounded_number_of_times),
      cmocka_unit_test(need_skips_to_the_end_of_a_declared_bulk),
      cmocka_unit_test(every_prefix_of_a_command_is_incomplete),
      cmocka_unit_test(a_multibulk_count_past_int_max_is_refused_at_once),
      cmocka_unit_test(a_negative_multibulk_count_is_refused),
      cmocka_unit_test(a_non_numeric_multibulk_count_is_refused),
      cmocka_unit_test(a_multibulk_count_above_the_argument_limit_is_refused),
      cmocka_unit_test(an_endless_multibulk_count_is_refused),
      cmocka_unit_test(a_negative_bulk_length_is_refused),
      cmocka_unit_test(a_bulk_length_above_the_limit_is_refused_at_its_header),
      cmocka_unit_test(a_non_numeric_bulk_length_is_refused),
      cmocka_unit_test(a_bulk_without_a_dollar_is_refused_naming_the_byte),
      cmocka_unit_test(a_bulk_not_ending_in_crlf_is_refused),
      cmocka_unit_test(an_inline_request_past_64k_without_newline_is_refused),
      cmocka_unit_test(an_inline_request_with_too_many_words_is_refused),
      cmocka_unit_test(an_error_is_found_before_the_rest_arrives),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
