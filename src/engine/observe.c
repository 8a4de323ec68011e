/*
 * observe.c — what the decision observer (engine.h: eng_observe_fn) needs
 * of a decision that waits for its store: the caller's query lives on its
 * stack and is gone when the answer comes, so the engine keeps a deep
 * copy of it, in one allocation, for the observer alone.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* Bytes at the end of the copy, handed out in order. */
typedef struct arena {
  char *p;
  size_t used;
} arena;

/* Copies n bytes of s into the arena (NUL-terminated): the copy. */
static const char *put(arena *a, const char *s, size_t n) {
  char *d = a->p + a->used;
  if (n) memcpy(d, s, n);
  d[n] = '\0';
  a->used += n + 1;
  return d;
}

/* The bytes query_copy needs for q's strings (each with its NUL). */
static size_t strings_size(const eng_query *q) {
  size_t n = q->key_len + 1 + q->spec_len + 1;
  n += q->client ? ENG_CLIENT_MAX : 0;
  if (q->kind == ENG_QUERY_RULES && q->req) {
    n += q->req->domain_len + 1;
    for (size_t i = 0; i < q->req->n; i++)
      for (size_t k = 0; k < q->req->descriptors[i].n; k++) {
        const cfg_entry *e = &q->req->descriptors[i].entries[k];
        n += e->key_len + 1 + e->value_len + 1;
      }
  }
  return n;
}

/* eng_client_fn of a copy: the address asked when the copy was made. */
static void copied_client(void *ud, char *buf, size_t len) {
  snprintf(buf, len, "%s", (const char *)ud);
}

eng_query *query_copy(const eng_query *q) {
  int rules = q->kind == ENG_QUERY_RULES && q->req;
  size_t nd = rules ? q->req->n : 0;
  size_t fixed = sizeof(eng_query) + sizeof(eng_request) + sizeof(sl_policy) +
                 nd * sizeof(eng_descriptor);
  eng_query *c = malloc(fixed + strings_size(q));
  if (!c) return NULL;
  *c = *q;
  eng_request *r = (eng_request *)(c + 1);
  sl_policy *pol = (sl_policy *)(r + 1);
  eng_descriptor *ds = (eng_descriptor *)(pol + 1);
  arena a = {(char *)c + fixed, 0};
  c->key = q->key ? put(&a, q->key, q->key_len) : NULL;
  c->spec = q->spec ? put(&a, q->spec, q->spec_len) : NULL;
  if (q->client) { /* asked now: the connection may be gone later */
    char *addr = a.p + a.used;
    q->client(q->client_ud, addr, ENG_CLIENT_MAX);
    addr[ENG_CLIENT_MAX - 1] = '\0';
    a.used += ENG_CLIENT_MAX;
    c->client = copied_client;
    c->client_ud = addr;
  }
  if (q->policy) {
    *pol = *q->policy;
    c->policy = pol;
  }
  if (rules) {
    *r = *q->req;
    r->domain = put(&a, q->req->domain, q->req->domain_len);
    r->descriptors = ds;
    for (size_t i = 0; i < nd; i++) {
      ds[i] = q->req->descriptors[i];
      for (size_t k = 0; k < ds[i].n; k++) {
        cfg_entry *e = &ds[i].entries[k];
        e->key = put(&a, e->key, e->key_len);
        e->value = put(&a, e->value, e->value_len);
      }
    }
    c->req = r;
  }
  return c;
}
