/*
 * walk.h — what the rules' parsers share to walk a libyaml document: the
 * loader (one file's state and its error list), errors at file:line:col,
 * readers of scalar values, and key tables. Internal to src/rules/.
 *
 * A key table declares the keys one kind of YAML mapping may hold, in the
 * manner of nginx's ngx_command_t: each key's name, the handler that reads
 * its value, and where in the caller's struct the value goes. One walk
 * (rules_walk) sends every key of a mapping through its table, rejects a
 * key given twice, and reports an unknown key with the table's keys as the
 * list of what was expected, so a key added to a table is parsed and named
 * in that message alike.
 */
#ifndef SLUICE_RULES_WALK_H
#define SLUICE_RULES_WALK_H

#include <stddef.h>
#include <stdint.h>
#include <yaml.h>

#include "config.h"

/* At most this many errors are kept per load (later ones are counted). */
#define RULES_MAX_ERRORS 50

/* One file being loaded into cfg. */
typedef struct rules_loader {
  const char *file; /* as errors name it (owned by cfg->files) */
  yaml_document_t *doc;
  cfg_errors *errs; /* may be NULL: errors are only counted */
  sl_config *cfg;
  unsigned opts; /* config_load's CFG_LOAD_* */
  int failed;  /* an error was reported for this file */
  size_t nerr; /* errors reported so far (even past RULES_MAX_ERRORS) */
} rules_loader;

/* Adds "file:line:col: message" (or "file: message" when line is 0) to e,
   unless e is NULL or full. */
void rules_errorf(cfg_errors *e, const char *file, int line, int col,
                  const char *fmt, ...) __attribute__((format(printf, 5, 6)));

/* Reports an error at node n (NULL: the file itself) and marks the load
   failed. */
void rules_err(rules_loader *L, const yaml_node_t *n, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* The node of the document at index. */
yaml_node_t *rules_node(rules_loader *L, int index);

/* "a scalar", "a list", "a mapping" or "empty", for messages. */
const char *rules_type_name(const yaml_node_t *n);

/* The text of a scalar node, or NULL with an error naming `what` (not a
   scalar, or a NUL byte inside). */
const char *rules_scalar(rules_loader *L, const yaml_node_t *n,
                         const char *what);

/* true/yes/on or false/no/off (any case) into *out: 0, or -1 with an
   error (*out unchanged). */
int rules_bool(rules_loader *L, const yaml_node_t *n, const char *what,
               int *out);

/* A whole number 0 .. 4294967295 into *out: 0, or -1 with an error (*out
   unchanged). */
int rules_u32(rules_loader *L, const yaml_node_t *n, const char *what,
              uint32_t *out);

/* ---- key tables ---- */

typedef struct rules_key rules_key;

/*
 * Reads the value v of `key` into conf, the struct the walk fills (a
 * handler of the generic kinds below writes at key->offset in it; a
 * handler of its own may use the whole struct). Errors go to L.
 */
typedef void rules_key_fn(rules_loader *L, const yaml_node_t *v,
                          const rules_key *key, void *conf);

struct rules_key {
  const char *name; /* NULL ends a table */
  rules_key_fn *set;
  size_t offset; /* where in conf the value goes (generic handlers) */
};

/* One kind of mapping: its keys, and where an unknown key was found for
   the message ("in a descriptor"). */
typedef struct rules_map {
  const char *where;
  const rules_key *keys;
} rules_map;

/* A scalar as read: its node (set even when it is not a valid scalar, for
   the positions of later errors) and its text, or NULL. */
typedef struct rules_text {
  const yaml_node_t *at;
  const char *s;
} rules_text;

/* A whole number as read: its node, its value, and whether it was one. */
typedef struct rules_count {
  const yaml_node_t *at;
  uint32_t v;
  int ok;
} rules_count;

/* Generic handlers: a rules_text, a rules_count, an int flag (rules_bool),
   or the value node itself (a const yaml_node_t *) at key->offset. */
rules_key_fn rules_set_text, rules_set_count, rules_set_flag, rules_set_node;

/*
 * Walks the pairs of mapping `map` in order: a key that is not a scalar,
 * one given twice, or one missing from kind's table is an error at the
 * key ("unknown key 'x' in a descriptor (expected key, value or ...)");
 * every other key's value goes to its handler with conf.
 */
void rules_walk(rules_loader *L, const yaml_node_t *map,
                const rules_map *kind, void *conf);

#endif /* SLUICE_RULES_WALK_H */
