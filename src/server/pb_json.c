/*
 * pb_json.c — protobuf-c messages to and from proto3's JSON mapping
 * (pb_json.h). One walk over protobuf-c's descriptors each way, so any
 * message protoc-c generated can be read and written; the two well-known
 * types envoy's rate limit messages use (google.protobuf.Duration and the
 * wrappers) get their special spellings. Text is jansson's: it checks
 * UTF-8 and escapes on output.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <openssl/evp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pb_json.h"

#define MAX_DEPTH 32

typedef ProtobufCFieldDescriptor field;
typedef ProtobufCMessageDescriptor mdesc;

/* Where the walk is (a field path for error messages) and how deep. */
typedef struct walk {
  char path[160];
  size_t len;
  int depth;
  char *err;
  size_t err_len;
} walk;

/* Says what is wrong at the walk's path. Returns -1. */
__attribute__((format(printf, 2, 3))) static int bad(walk *w, const char *fmt,
                                                     ...) {
  char what[160];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  if (w->len)
    snprintf(w->err, w->err_len, "%.*s: %s", (int)w->len, w->path, what);
  else
    snprintf(w->err, w->err_len, "%s", what);
  return -1;
}

/* Appends ".name" or "[i]" to the path; returns the old length. */
static size_t path_push(walk *w, const char *name, long idx) {
  size_t old = w->len;
  int n = name ? snprintf(w->path + w->len, sizeof w->path - w->len, "%s%s",
                          w->len ? "." : "", name)
               : snprintf(w->path + w->len, sizeof w->path - w->len, "[%ld]",
                          idx);
  if (n > 0) w->len += (size_t)n < sizeof w->path - w->len
                           ? (size_t)n
                           : sizeof w->path - w->len - 1;
  return old;
}

/* ---- names and kinds ---- */

/* The field's JSON name: its .proto name in lowerCamelCase. */
static void json_name(const char *name, char *out, size_t cap) {
  size_t n = 0;
  int up = 0;
  for (const char *p = name; *p && n + 1 < cap; p++) {
    if (*p == '_') {
      up = 1;
      continue;
    }
    out[n++] = up && *p >= 'a' && *p <= 'z' ? (char)(*p - 'a' + 'A') : *p;
    up = 0;
  }
  out[n] = '\0';
}

/* d's field called key in JSON (lowerCamelCase) or in the .proto. */
static const field *field_named(const mdesc *d, const char *key) {
  char jn[128];
  for (unsigned i = 0; i < d->n_fields; i++) {
    json_name(d->fields[i].name, jn, sizeof jn);
    if (!strcmp(jn, key) || !strcmp(d->fields[i].name, key))
      return &d->fields[i];
  }
  return NULL;
}

static int is_duration(const mdesc *d) {
  return !strcmp(d->name, "google.protobuf.Duration");
}

/* google.protobuf.UInt64Value and the other wrappers: one field, value. */
static int is_wrapper(const mdesc *d) {
  size_t n = strlen(d->name);
  return !strncmp(d->name, "google.protobuf.", 16) && n > 21 &&
         !strcmp(d->name + n - 5, "Value") && d->n_fields == 1 &&
         !strcmp(d->fields[0].name, "value");
}

/* The bytes one value of type t takes in a message (or a repeated
   field's array). */
static size_t elt_size(ProtobufCType t) {
  switch (t) {
  case PROTOBUF_C_TYPE_INT64:
  case PROTOBUF_C_TYPE_SINT64:
  case PROTOBUF_C_TYPE_SFIXED64:
  case PROTOBUF_C_TYPE_UINT64:
  case PROTOBUF_C_TYPE_FIXED64:
  case PROTOBUF_C_TYPE_DOUBLE:
    return 8;
  case PROTOBUF_C_TYPE_BOOL:
    return sizeof(protobuf_c_boolean);
  case PROTOBUF_C_TYPE_STRING:
    return sizeof(char *);
  case PROTOBUF_C_TYPE_BYTES:
    return sizeof(ProtobufCBinaryData);
  case PROTOBUF_C_TYPE_MESSAGE:
    return sizeof(ProtobufCMessage *);
  default:
    return 4;
  }
}

/* ---- JSON to a message ---- */

static ProtobufCMessage *decode_msg(const mdesc *d, const json_t *v, walk *w);

/* An integer in [lo, hi] (hi as unsigned: uint64's range) from a JSON
   integer, an integral real, or a decimal string (64-bit integers come as
   strings). */
static int get_int(const json_t *v, int64_t lo, uint64_t hi, int is_unsigned,
                   uint64_t *out, walk *w) {
  if (json_is_integer(v)) {
    json_int_t x = json_integer_value(v);
    if (x < lo || (x >= 0 && (uint64_t)x > hi))
      return bad(w, "%" JSON_INTEGER_FORMAT " is out of range", x);
    *out = (uint64_t)x;
    return 0;
  }
  if (json_is_real(v)) {
    double x = json_real_value(v);
    if (x != floor(x) || x < (double)lo || x > (double)hi)
      return bad(w, "%g is not an integer in range", x);
    *out = x < 0 ? (uint64_t)(int64_t)x : (uint64_t)x;
    return 0;
  }
  if (!json_is_string(v)) return bad(w, "not an integer");
  const char *s = json_string_value(v);
  char *end;
  errno = 0;
  if (!*s || *s == ' ' || *s == '+') return bad(w, "'%.40s' is not an integer", s);
  if (is_unsigned) {
    if (*s == '-') return bad(w, "'%.40s' is out of range", s);
    unsigned long long x = strtoull(s, &end, 10);
    if (*end || errno) return bad(w, "'%.40s' is not an integer in range", s);
    if (x > hi) return bad(w, "'%.40s' is out of range", s);
    *out = x;
  } else {
    long long x = strtoll(s, &end, 10);
    if (*end || errno) return bad(w, "'%.40s' is not an integer in range", s);
    if (x < lo || (x >= 0 && (uint64_t)x > hi))
      return bad(w, "'%.40s' is out of range", s);
    *out = (uint64_t)x;
  }
  return 0;
}

/* "1.5s", "-0.000001s": a Duration's seconds and nanos. */
static int get_duration(const json_t *v, int64_t *sec, int32_t *nanos,
                        walk *w) {
  if (!json_is_string(v)) return bad(w, "not a duration string (\"1.5s\")");
  const char *s = json_string_value(v);
  size_t n = strlen(s);
  int neg = s[0] == '-';
  const char *p = s + neg;
  if (n < 2 || s[n - 1] != 's' || !(*p >= '0' && *p <= '9'))
    return bad(w, "'%.40s' is not a duration (\"1.5s\")", s);
  uint64_t whole = 0;
  for (; *p >= '0' && *p <= '9'; p++) {
    whole = whole * 10 + (uint64_t)(*p - '0');
    if (whole > 315576000000ULL) return bad(w, "'%.40s' is out of range", s);
  }
  int64_t frac = 0;
  int digits = 0;
  if (*p == '.')
    for (p++; *p >= '0' && *p <= '9'; p++)
      if (++digits <= 9) frac = frac * 10 + (*p - '0');
  if (*p != 's' || p[1] || digits > 9 || (digits == 0 && p[-1] == '.'))
    return bad(w, "'%.40s' is not a duration (\"1.5s\")", s);
  for (int i = digits; i < 9; i++) frac *= 10;
  *sec = neg ? -(int64_t)whole : (int64_t)whole;
  *nanos = (int32_t)(neg ? -frac : frac);
  return 0;
}

/* Base64 (standard or URL-safe, padded or not) into b. */
static int get_bytes(const json_t *v, ProtobufCBinaryData *b, walk *w) {
  if (!json_is_string(v)) return bad(w, "not a base64 string");
  size_t n = json_string_length(v);
  char *s = malloc(n + 4);
  if (!s) return bad(w, "out of memory");
  memcpy(s, json_string_value(v), n);
  for (size_t i = 0; i < n; i++)
    s[i] = s[i] == '-' ? '+' : s[i] == '_' ? '/' : s[i];
  while (n % 4) s[n++] = '='; /* unpadded */
  size_t pad = n && s[n - 1] == '=' ? 1 + (n > 1 && s[n - 2] == '=') : 0;
  b->data = malloc(n / 4 * 3 + 1);
  int got = b->data ? EVP_DecodeBlock(b->data, (unsigned char *)s, (int)n) : -1;
  free(s);
  if (got < 0 || (size_t)got < pad) {
    free(b->data);
    b->data = NULL;
    return bad(w, "not valid base64");
  }
  b->len = (size_t)got - pad;
  return 0;
}

/* One value of field f's type from v into p (a message's slot, or an
   element of a repeated field's array). */
static int decode_value(const field *f, const json_t *v, void *p, walk *w) {
  uint64_t x = 0;
  switch (f->type) {
  case PROTOBUF_C_TYPE_INT32:
  case PROTOBUF_C_TYPE_SINT32:
  case PROTOBUF_C_TYPE_SFIXED32:
    if (get_int(v, INT32_MIN, INT32_MAX, 0, &x, w)) return -1;
    *(int32_t *)p = (int32_t)(int64_t)x;
    return 0;
  case PROTOBUF_C_TYPE_UINT32:
  case PROTOBUF_C_TYPE_FIXED32:
    if (get_int(v, 0, UINT32_MAX, 1, &x, w)) return -1;
    *(uint32_t *)p = (uint32_t)x;
    return 0;
  case PROTOBUF_C_TYPE_INT64:
  case PROTOBUF_C_TYPE_SINT64:
  case PROTOBUF_C_TYPE_SFIXED64:
    if (get_int(v, INT64_MIN, INT64_MAX, 0, &x, w)) return -1;
    *(int64_t *)p = (int64_t)x;
    return 0;
  case PROTOBUF_C_TYPE_UINT64:
  case PROTOBUF_C_TYPE_FIXED64:
    if (get_int(v, 0, UINT64_MAX, 1, &x, w)) return -1;
    *(uint64_t *)p = x;
    return 0;
  case PROTOBUF_C_TYPE_FLOAT:
  case PROTOBUF_C_TYPE_DOUBLE: {
    if (!json_is_number(v)) return bad(w, "not a number");
    double d = json_number_value(v);
    if (f->type == PROTOBUF_C_TYPE_FLOAT)
      *(float *)p = (float)d;
    else
      *(double *)p = d;
    return 0;
  }
  case PROTOBUF_C_TYPE_BOOL:
    if (!json_is_boolean(v)) return bad(w, "not true or false");
    *(protobuf_c_boolean *)p = json_is_true(v);
    return 0;
  case PROTOBUF_C_TYPE_ENUM: {
    const ProtobufCEnumDescriptor *e = f->descriptor;
    if (json_is_string(v)) {
      const ProtobufCEnumValue *ev =
          protobuf_c_enum_descriptor_get_value_by_name(e, json_string_value(v));
      if (!ev)
        return bad(w, "'%.40s' is not a value of %s", json_string_value(v),
                   e->name);
      *(int32_t *)p = ev->value;
      return 0;
    }
    if (get_int(v, INT32_MIN, INT32_MAX, 0, &x, w)) return -1;
    *(int32_t *)p = (int32_t)(int64_t)x;
    return 0;
  }
  case PROTOBUF_C_TYPE_STRING: {
    if (!json_is_string(v)) return bad(w, "not a string");
    char *s = strdup(json_string_value(v));
    if (!s) return bad(w, "out of memory");
    *(char **)p = s;
    return 0;
  }
  case PROTOBUF_C_TYPE_BYTES:
    return get_bytes(v, p, w);
  case PROTOBUF_C_TYPE_MESSAGE: {
    ProtobufCMessage *m = decode_msg(f->descriptor, v, w);
    if (!m) return -1;
    *(ProtobufCMessage **)p = m;
    return 0;
  }
  }
  return bad(w, "a field of an unknown type");
}

/* A repeated field: v is an array, each element of f's type. */
static int decode_repeated(ProtobufCMessage *m, const field *f,
                           const json_t *v, walk *w) {
  if (!json_is_array(v)) return bad(w, "not an array");
  size_t n = json_array_size(v), es = elt_size(f->type);
  if (!n) return 0;
  char *arr = calloc(n, es);
  if (!arr) return bad(w, "out of memory");
  size_t *count = (size_t *)((char *)m + f->quantifier_offset);
  *(void **)((char *)m + f->offset) = arr;
  for (size_t i = 0; i < n; i++) {
    size_t old = path_push(w, NULL, (long)i);
    const json_t *e = json_array_get(v, i);
    if (json_is_null(e)) return bad(w, "null in a repeated field");
    if (decode_value(f, e, arr + i * es, w)) return -1;
    *count = i + 1; /* freed with the message from here on */
    w->len = old;
  }
  return 0;
}

/* A field of m from v (v not null). */
static int decode_field(ProtobufCMessage *m, const field *f, const json_t *v,
                        walk *w) {
  if (f->label == PROTOBUF_C_LABEL_REPEATED)
    return decode_repeated(m, f, v, w);
  void *p = (char *)m + f->offset;
  if (decode_value(f, v, p, w)) return -1;
  if (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF)
    *(uint32_t *)((char *)m + f->quantifier_offset) = f->id;
  else if (f->label == PROTOBUF_C_LABEL_OPTIONAL &&
           f->type != PROTOBUF_C_TYPE_MESSAGE &&
           f->type != PROTOBUF_C_TYPE_STRING)
    *(protobuf_c_boolean *)((char *)m + f->quantifier_offset) = 1;
  return 0;
}

/* A Duration or a wrapper, from its special JSON form into m. */
static int decode_special(const mdesc *d, ProtobufCMessage *m,
                          const json_t *v, walk *w) {
  if (is_wrapper(d)) return decode_value(&d->fields[0], v,
                                         (char *)m + d->fields[0].offset, w);
  int64_t sec = 0;
  int32_t nanos = 0;
  if (get_duration(v, &sec, &nanos, w)) return -1;
  const field *fs = protobuf_c_message_descriptor_get_field_by_name(d, "seconds"),
              *fn = protobuf_c_message_descriptor_get_field_by_name(d, "nanos");
  if (!fs || !fn) return bad(w, "a Duration without seconds and nanos");
  *(int64_t *)((char *)m + fs->offset) = sec;
  *(int32_t *)((char *)m + fn->offset) = nanos;
  return 0;
}

static int decode_object(const mdesc *d, ProtobufCMessage *m,
                         const json_t *v, walk *w) {
  if (!json_is_object(v)) return bad(w, "not an object");
  char *seen = calloc(d->n_fields ? d->n_fields : 1, 1);
  if (!seen) return bad(w, "out of memory");
  const char *key;
  json_t *fv;
  int rc = 0;
  json_object_foreach((json_t *)v, key, fv) {
    const field *f = field_named(d, key);
    size_t old = path_push(w, key, 0);
    if (!f) {
      rc = bad(w, "%s has no such field", d->name);
      break;
    }
    if (seen[f - d->fields]++) {
      rc = bad(w, "the field is given twice");
      break;
    }
    if (!json_is_null(fv) && decode_field(m, f, fv, w)) {
      rc = -1;
      break;
    }
    w->len = old;
  }
  free(seen);
  return rc;
}

static ProtobufCMessage *decode_msg(const mdesc *d, const json_t *v,
                                    walk *w) {
  if (++w->depth > MAX_DEPTH) {
    bad(w, "messages nested deeper than %d", MAX_DEPTH);
    return NULL;
  }
  ProtobufCMessage *m = calloc(1, d->sizeof_message);
  if (!m) {
    bad(w, "out of memory");
    return NULL;
  }
  d->message_init(m);
  int rc = is_duration(d) || is_wrapper(d) ? decode_special(d, m, v, w)
                                           : decode_object(d, m, v, w);
  w->depth--;
  if (rc) {
    protobuf_c_message_free_unpacked(m, NULL);
    return NULL;
  }
  return m;
}

ProtobufCMessage *pbj_decode(const mdesc *d, const json_t *v, char *err,
                             size_t err_len) {
  walk w = {.err = err, .err_len = err_len};
  w.path[0] = '\0';
  return decode_msg(d, v, &w);
}

/* ---- a message to JSON ---- */

static json_t *encode_msg(const ProtobufCMessage *m);

/* An int64 as protojson writes it: a decimal string. */
static json_t *json_i64(int64_t x, int is_unsigned) {
  char buf[24];
  if (is_unsigned)
    snprintf(buf, sizeof buf, "%" PRIu64, (uint64_t)x);
  else
    snprintf(buf, sizeof buf, "%" PRId64, x);
  return json_string(buf);
}

/* "1s", "1.500s", "0.000001500s": 0, 3, 6 or 9 digits, as protojson. */
static json_t *json_duration(const ProtobufCMessage *m) {
  const mdesc *d = m->descriptor;
  const field *fs = protobuf_c_message_descriptor_get_field_by_name(d, "seconds"),
              *fn = protobuf_c_message_descriptor_get_field_by_name(d, "nanos");
  if (!fs || !fn) return NULL;
  int64_t s = *(const int64_t *)((const char *)m + fs->offset);
  int32_t n = *(const int32_t *)((const char *)m + fn->offset);
  char buf[48];
  int neg = s < 0 || n < 0;
  uint64_t us = s < 0 ? (uint64_t)0 - (uint64_t)s : (uint64_t)s;
  uint32_t un = n < 0 ? (uint32_t)(-(int64_t)n) : (uint32_t)n;
  int k = snprintf(buf, sizeof buf, "%s%" PRIu64, neg ? "-" : "", us);
  if (un) {
    int digits = un % 1000000 == 0 ? 3 : un % 1000 == 0 ? 6 : 9;
    uint32_t shown = digits == 3 ? un / 1000000 : digits == 6 ? un / 1000 : un;
    k += snprintf(buf + k, sizeof buf - (size_t)k, ".%0*u", digits, shown);
  }
  snprintf(buf + k, sizeof buf - (size_t)k, "s");
  return json_string(buf);
}

/* The JSON of one value of f's type at p. */
static json_t *encode_value(const field *f, const void *p) {
  switch (f->type) {
  case PROTOBUF_C_TYPE_INT32:
  case PROTOBUF_C_TYPE_SINT32:
  case PROTOBUF_C_TYPE_SFIXED32:
    return json_integer(*(const int32_t *)p);
  case PROTOBUF_C_TYPE_UINT32:
  case PROTOBUF_C_TYPE_FIXED32:
    return json_integer(*(const uint32_t *)p);
  case PROTOBUF_C_TYPE_INT64:
  case PROTOBUF_C_TYPE_SINT64:
  case PROTOBUF_C_TYPE_SFIXED64:
    return json_i64(*(const int64_t *)p, 0);
  case PROTOBUF_C_TYPE_UINT64:
  case PROTOBUF_C_TYPE_FIXED64:
    return json_i64((int64_t) * (const uint64_t *)p, 1);
  case PROTOBUF_C_TYPE_FLOAT:
  case PROTOBUF_C_TYPE_DOUBLE: {
    double d = f->type == PROTOBUF_C_TYPE_FLOAT ? *(const float *)p
                                                : *(const double *)p;
    if (isnan(d)) return json_string("NaN");
    if (isinf(d)) return json_string(d > 0 ? "Infinity" : "-Infinity");
    return json_real(d);
  }
  case PROTOBUF_C_TYPE_BOOL:
    return json_boolean(*(const protobuf_c_boolean *)p);
  case PROTOBUF_C_TYPE_ENUM: {
    int32_t x = *(const int32_t *)p;
    const ProtobufCEnumValue *ev =
        protobuf_c_enum_descriptor_get_value(f->descriptor, x);
    return ev ? json_string(ev->name) : json_integer(x);
  }
  case PROTOBUF_C_TYPE_STRING:
    return json_string(*(char *const *)p ? *(char *const *)p : "");
  case PROTOBUF_C_TYPE_BYTES: {
    const ProtobufCBinaryData *b = p;
    char *s = malloc(b->len / 3 * 4 + 5);
    if (!s) return NULL;
    EVP_EncodeBlock((unsigned char *)s, b->data, (int)b->len);
    json_t *j = json_string(s);
    free(s);
    return j;
  }
  case PROTOBUF_C_TYPE_MESSAGE:
    return encode_msg(*(ProtobufCMessage *const *)p);
  }
  return NULL;
}

/* Whether a singular field without presence is at its default (proto3
   leaves those out). */
static int is_default(const field *f, const void *p) {
  switch (f->type) {
  case PROTOBUF_C_TYPE_STRING:
    return !*(char *const *)p || !**(char *const *)p;
  case PROTOBUF_C_TYPE_BYTES:
    return ((const ProtobufCBinaryData *)p)->len == 0;
  case PROTOBUF_C_TYPE_MESSAGE:
    return !*(ProtobufCMessage *const *)p;
  case PROTOBUF_C_TYPE_FLOAT:
    return *(const float *)p == 0;
  case PROTOBUF_C_TYPE_DOUBLE:
    return *(const double *)p == 0;
  case PROTOBUF_C_TYPE_BOOL:
    return !*(const protobuf_c_boolean *)p;
  default:
    return elt_size(f->type) == 8 ? *(const uint64_t *)p == 0
                                  : *(const uint32_t *)p == 0;
  }
}

/* Whether m's field f is written: set, or (without presence) not at its
   default. */
static int is_present(const ProtobufCMessage *m, const field *f) {
  const char *base = (const char *)m;
  if (f->label == PROTOBUF_C_LABEL_REPEATED)
    return *(const size_t *)(base + f->quantifier_offset) > 0;
  if (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF)
    return *(const uint32_t *)(base + f->quantifier_offset) == f->id;
  if (f->label == PROTOBUF_C_LABEL_OPTIONAL &&
      f->type != PROTOBUF_C_TYPE_MESSAGE && f->type != PROTOBUF_C_TYPE_STRING)
    return *(const protobuf_c_boolean *)(base + f->quantifier_offset);
  if (f->type == PROTOBUF_C_TYPE_MESSAGE)
    return *(ProtobufCMessage *const *)(base + f->offset) != NULL;
  return f->label == PROTOBUF_C_LABEL_REQUIRED || !is_default(f, base + f->offset);
}

/* A field's JSON: an array for a repeated one. */
static json_t *encode_field(const ProtobufCMessage *m, const field *f) {
  const char *base = (const char *)m;
  if (f->label != PROTOBUF_C_LABEL_REPEATED)
    return encode_value(f, base + f->offset);
  size_t n = *(const size_t *)(base + f->quantifier_offset);
  const char *arr = *(char *const *)(base + f->offset);
  json_t *a = json_array();
  for (size_t i = 0; a && i < n; i++)
    if (json_array_append_new(a, encode_value(f, arr + i * elt_size(f->type)))) {
      json_decref(a);
      a = NULL;
    }
  return a;
}

static json_t *encode_msg(const ProtobufCMessage *m) {
  const mdesc *d = m->descriptor;
  if (is_duration(d)) return json_duration(m);
  if (is_wrapper(d))
    return encode_value(&d->fields[0], (const char *)m + d->fields[0].offset);
  json_t *o = json_object();
  char jn[128];
  for (unsigned i = 0; o && i < d->n_fields; i++) {
    const field *f = &d->fields[i];
    if (!is_present(m, f)) continue;
    json_name(f->name, jn, sizeof jn);
    json_t *v = encode_field(m, f);
    if (!v || json_object_set_new(o, jn, v)) {
      json_decref(o);
      o = NULL;
    }
  }
  return o;
}

json_t *pbj_encode(const ProtobufCMessage *m) { return encode_msg(m); }
