/*
 * json.h — strings written as JSON, the one escaper every JSON answer,
 * log line and document of sluice's goes through (jansson builds the
 * documents sluice reads or converts; these are the ones it writes by
 * hand, on hot paths or into a FILE).
 */
#ifndef SLUICE_BASE_JSON_H
#define SLUICE_BASE_JSON_H

#include <stddef.h>
#include <stdio.h>

#include "strbuf.h"

/* Length of the valid UTF-8 sequence at s[0..n), n >= 1 (0 if invalid:
   overlong, a surrogate, past U+10FFFF, cut short). */
size_t utf8_len(const unsigned char *s, size_t n);

/* Appends s[0..n) to b as a JSON string: the quote, the backslash and
   control characters escaped, valid UTF-8 as it is, and U+FFFD for each
   byte that is not UTF-8 (answers, the denial log's lines, a config's
   metadata). */
void json_put_str(strbuf *b, const char *s, size_t n);

/* Writes the C string s to f as a JSON string in which every byte from
   0x7f is \u00XX: a document of byte strings (metric labels, a
   simulator's keys) that must come back byte for byte, valid or not. */
void json_bytes_file(FILE *f, const char *s);

#endif /* SLUICE_BASE_JSON_H */
