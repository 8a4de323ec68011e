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

typedef struct resp_cmd {
  int argc;
  const char *argv[RESP_MAX_ARGS];
  size_t len[RESP_MAX_ARGS];
  char unquoted[RESP_MAX_INLINE]; /* inline arguments, quotes resolved */
} resp_cmd;

/*
 * Parses the command at the start of buf[0..len). Returns the bytes it
 * spans (> 0) with *cmd filled; 0 when it is incomplete (*need = the least
 * total length worth parsing again at); -1 on a protocol error (*err = the
 * message, e.g. "Protocol error: invalid multibulk length"), after which
 * the connection must be closed. An empty inline line gives argc 0.
 */
ssize_t resp_parse(const char *buf, size_t len, resp_cmd *cmd, size_t *need,
                   const char **err);

#endif /* SLUICE_RESP_PARSE_H */
