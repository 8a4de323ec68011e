/*
 * unlink.c — a reset in Redis (both fleet backends): one UNLINK per state
 * key, sent on the worker's transport like the decisions, and in
 * approximate mode one PUBLISH that tells the other daemons; the answer
 * when every reply is in.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../base/fmt.h"
#include "internal.h"
#include "keys.h"
#include "slot.h"

/* One command of a reset: an UNLINK (and whether this daemon held state
   for its key), or the PUBLISH. */
typedef struct unlink_item {
  struct unlink_job *j;
  char *cmd; /* until sent */
  size_t len;
  int slot;
  int local;
  int publish;
} unlink_item;

typedef struct unlink_job {
  size_t n, waiting;
  unlink_item *it;
  eng_reset *out;
  eng_reset_fn done;
  void *ud;
} unlink_job;

static void job_free(unlink_job *j) {
  for (size_t i = 0; i < j->n; i++) free(j->it[i].cmd);
  free(j->it);
  free(j);
}

/* Notes the first failure's reason in out. */
static void fail(unlink_job *j, const char *why) {
  if (!j->out->failed++) snprintf(j->out->err, sizeof j->out->err, "%s", why);
}

/* The PUBLISH failed: the other daemons were not told (why: the first
   failure, unless a deletion's came first). */
static void unpublished(unlink_job *j, const char *why) {
  j->out->unpublished = 1;
  if (!j->out->failed && !j->out->err[0])
    snprintf(j->out->err, sizeof j->out->err, "redis: PUBLISH: %.140s", why);
}

/* The reset's outcome: 0, or ENG_ESTORE with the message. */
static int outcome(eng_reset *out) {
  if (!out->failed && !out->unpublished) return 0;
  if (!out->failed) /* deleted, but the other daemons were not told */
    snprintf(out->msg, sizeof out->msg,
             "reset failed: the other daemons were not told (%s); this "
             "daemon's state and Redis's were dropped",
             out->err);
  else
    snprintf(out->msg, sizeof out->msg,
             "reset failed: Redis did not confirm %d of its %d deletions "
             "(%s)",
             out->failed, out->keys, out->err);
  return ENG_ESTORE;
}

/* A command's answer (r NULL: its call failed, err says why). */
static void on_reply(void *ud, const redisReply *r, const char *err) {
  unlink_item *it = ud;
  unlink_job *j = it->j;
  if (it->publish) { /* its answer: how many daemons (of that node) heard */
    const char *why = !r                             ? err
                      : r->type == REDIS_REPLY_ERROR ? r->str
                                                     : "unexpected reply";
    if (!r || r->type != REDIS_REPLY_INTEGER) unpublished(j, why);
  } else if (r && r->type == REDIS_REPLY_INTEGER) {
    j->out->dropped += r->integer > 0 || it->local;
  } else {
    char why[160];
    if (r && r->type == REDIS_REPLY_ERROR)
      snprintf(why, sizeof why, "redis: %.140s", r->str);
    else
      snprintf(why, sizeof why, "redis: %.140s",
               err ? err : "unexpected reply to UNLINK");
    fail(j, why);
  }
  if (--j->waiting) return;
  j->done(j->ud, outcome(j->out), j->out);
  job_free(j);
}

/* Formats the job's commands: an UNLINK per item (UNLINK: a sliding_log
   hash is freed off Redis's main thread), then the PUBLISH. 0 or -1 (out
   of memory). */
static int format(unlink_job *j, const unlink_opts *o, const eng_forgets *f,
                  const int *had) {
  j->it = calloc(f->n + 1, sizeof *j->it);
  char *names = NULL; /* "LEN:KEY" each, for the PUBLISH */
  size_t names_len = 0;
  if (!j->it) return -1;
  for (size_t i = 0; i < f->n; i++) {
    const eng_forget *x = &f->items[i];
    char *rkey =
        malloc(REDIS_KEY_MAX(f->tag_len, key_id_len(&x->name), x->key_len));
    if (!rkey) goto oom;
    size_t rlen =
        redis_key(rkey, f->tag, f->tag_len, &x->name, x->key, x->key_len);
    unlink_item *it = &j->it[j->n];
    *it = (unlink_item){
        j, NULL, 0, o->cluster ? (int)rc_key_slot(rkey, rlen) : -1, had[i], 0};
    it->cmd = resp_command(2, (const char *[]){"UNLINK", rkey},
                           (const size_t[]){6, rlen}, &it->len);
    char *grown = o->channel ? realloc(names, names_len + 21 + rlen) : NULL;
    if (grown) {
      names = grown;
      names_len += fmt_u64(names + names_len, rlen);
      names[names_len++] = ':';
      memcpy(names + names_len, rkey, rlen);
      names_len += rlen;
    }
    free(rkey);
    if (!it->cmd || (o->channel && !grown)) {
      free(it->cmd);
      goto oom;
    }
    j->n++;
  }
  if (o->channel) {
    char head[32];
    size_t hl =
        (size_t)snprintf(head, sizeof head, "sluice-reset %s\n", o->instance);
    char *msg = malloc(hl + names_len);
    if (!msg) goto oom;
    memcpy(msg, head, hl);
    memcpy(msg + hl, names, names_len);
    unlink_item *it = &j->it[j->n];
    /* to the first key's node: in a cluster a PUBLISH reaches every
       node's subscribers */
    *it = (unlink_item){j, NULL, 0, j->it[0].slot, 0, 1};
    it->cmd = resp_command(
        3, (const char *[]){"PUBLISH", o->channel, msg},
        (const size_t[]){7, strlen(o->channel), hl + names_len}, &it->len);
    free(msg);
    if (!it->cmd) goto oom;
    j->n++;
  }
  free(names);
  return 0;
oom:
  free(names);
  return -1;
}

int fleet_unlink(const fleet_io *io, const unlink_opts *o, const eng_forgets *f,
                 const int *had, eng_reset *out, eng_reset_fn done, void *ud) {
  out->keys = (int)f->n;
  if (f->n == 0) return 0;
  unlink_job *j = calloc(1, sizeof *j);
  if (!j || format(j, o, f, had)) {
    if (j) job_free(j);
    return SL_ENOMEM;
  }
  j->out = out;
  j->done = done;
  j->ud = ud;
  j->waiting = 1; /* held until every command is out: no early done */
  for (size_t i = 0; i < j->n; i++) {
    unlink_item *it = &j->it[i];
    char *cmd = it->cmd;
    it->cmd = NULL; /* the transport's from now on */
    if (io->send(io->io, it->slot, cmd, it->len, 0, on_reply, it) == 0)
      j->waiting++;
    else if (it->publish)
      unpublished(j, "down");
    else
      fail(j, "redis: down, not retried until --breaker-interval has "
              "passed since it failed");
  }
  if (--j->waiting) return ENG_PENDING;
  int rc = outcome(out);
  job_free(j);
  return rc;
}

int fleet_reset(const fleet_io *io, const unlink_opts *o, const eng_forgets *f,
                fleet_forget_fn also, void *ctx, eng_reset *out,
                eng_reset_fn done, void *ud) {
  if (!io->send || !done) {
    snprintf(out->msg, sizeof out->msg,
             "this worker has no Redis client: nothing was reset");
    return ENG_EREMOTE;
  }
  int *had = calloc(f->n ? f->n : 1, sizeof *had);
  if (!had) return SL_ENOMEM;
  for (size_t i = 0; i < f->n; i++) {
    eng_forgets one = {&f->items[i], 1, f->tag, f->tag_len};
    had[i] = engine_forget_local(&one);
    if (also) had[i] |= also(ctx, &f->items[i]);
  }
  int rc = fleet_unlink(io, o, f, had, out, done, ud);
  free(had);
  return rc;
}
