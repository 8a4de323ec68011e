/*
 * resp_parse.h — parsing Redis protocol (RESP2) requests, with limits.
 *
 * A request is a multibulk ("*N\r\n" then N "$LEN\r\nbytes\r\n") or an
 * inline command (words separated by spaces, ending in "\n"). The parser is
 * stateless over the connection's unread bytes: it reports a complete
 * command and how many bytes it used, or that more bytes are needed (and at
 * least how many in all, so a request trickling in byte by byte is not
 * re-parsed at every byte), or a protocol error worded as Redis words it.
 * Multibulk arguments point into the caller's buffer: nothing is copied.
 * Inline arguments are split as redis-cli and Redis split them ("double"
 * quotes with \n \r \t \b \a \xHH escapes, 'single' quotes with \'), into
 * cmd->unquoted.
 */
#ifndef SLUICE_RESP_PARSE_H
#define SLUICE_RESP_PARSE_H

#include <stddef.h>
#include <sys/types.h>

#define RESP_MAX_ARGS 1024          /* arguments per command */
#define RESP_MAX_BULK (64 * 1024)   /* bytes per argument */
#define RESP_MAX_INLINE (64 * 1024) /* bytes per inline command */
/* Before AUTH (with --password), Redis's own limits on arguments, and a
   bound of ours on a whole command: AUTH admin <token> fits with room. */
#define RESP_UNAUTH_MAX_ARGS 10
#define RESP_UNAUTH_MAX_BYTES 4096

/*
 * What one command may span, checked as soon as a header shows it: the
 * multibulk count, and each bulk length against the bytes the command
 * will then span (so a 64 MB command is refused at the header of the bulk
 * that passes max_bytes, before its bytes are read). An inline line is
 * bounded by max_bytes too (below RESP_MAX_INLINE).
 */
typedef struct resp_limits {
  size_t max_bytes;    /* one command's bytes, framing included */
  int unauthenticated; /* before AUTH: RESP_UNAUTH_*, Redis's messages */
} resp_limits;

typedef struct resp_cmd {
  int argc;
  const char *argv[RESP_MAX_ARGS];
  size_t len[RESP_MAX_ARGS];
  char unquoted[RESP_MAX_INLINE]; /* inline arguments, quotes resolved */
} resp_cmd;

/*
 * Parses the command at the start of buf[0..len) under lim (NULL: only
 * the fixed RESP_MAX_* limits). Returns the bytes it spans (> 0) with
 * *cmd filled; 0 when it is incomplete (*need = the least total length
 * worth parsing again at); -1 on a protocol error (*err = the message,
 * e.g. "Protocol error: invalid multibulk length"), -2 when the command
 * is over lim ("Protocol error: unauthenticated bulk length", "Protocol
 * error: too big command (over N bytes)"); after either the connection
 * must be closed. An empty inline line gives argc 0.
 */
ssize_t resp_parse(const char *buf, size_t len, const resp_limits *lim,
                   resp_cmd *cmd, size_t *need, const char **err);

#endif /* SLUICE_RESP_PARSE_H */
