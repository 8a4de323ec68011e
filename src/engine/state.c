/*
 * state.c — the engine's state across restarts (the daemon's
 * --state-file): every live key of the memory store saved to a file, and
 * loaded back at the next start.
 *
 * The store writes and reads the bytes (store/snapshot.h); this file names
 * the limiters so that a key finds its limit again in the next process: a
 * config rule's limiter by its identity, "r" + its map id (the rule: its
 * domain and descriptor path, then its canonical policy), and an ad-hoc
 * policy's by "a" + its canonical policy, CL.THROTTLE's one state per key
 * by "c". So a changed config keeps the
 * state of every rule it kept as it was, and a rule whose limit changed
 * starts fresh, as a reload does.
 *
 * A save holds the reload lock from naming to the last byte: no limiter is
 * freed (and no id given to another) meanwhile; decisions go on, waiting
 * at most for one shard's copy. The file is written beside its final name,
 * fsync'd, and renamed over it (then the directory is fsync'd), so a crash
 * at any point leaves the old file or the new one, whole.
 */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../base/clock.h"
#include "../limiter.h"
#include "../store/snapshot.h"
#include "internal.h"

/* Names every limiter of the map and every live ad-hoc policy, under
   reload_lock: names->name[id] points into buf (kept by the caller). */
static int name_limiters(engine *e, store_names *names, char **buf) {
  size_t need = 0;
  for (size_t i = 0; i < e->nlims; i++) need += strlen(e->lims[i].id) + 1;
  size_t na = adhoc_count(e);
  need += na * (sizeof e->adhoc[0].canon + 1) + 1;
  char *p = *buf = malloc(need ? need : 1);
  if (!p) return -1;
  const algo_policy *ap;
  uint16_t id;
  for (size_t i = 0; i < e->nlims; i++) {
    size_t n = strlen(e->lims[i].id);
    if (n + 1 > STORE_SNAP_NAME_MAX) continue;
    limiter_ident(e->lims[i].lim, &ap, &id);
    p[0] = 'r';
    memcpy(p + 1, e->lims[i].id, n);
    names->name[id] = p;
    names->len[id] = (uint16_t)(n + 1);
    p += n + 1;
  }
  sl_limiter *cell = atomic_load(&e->cell);
  if (cell) { /* CL.THROTTLE's: "c" */
    limiter_ident(cell, &ap, &id);
    p[0] = 'c';
    names->name[id] = p;
    names->len[id] = 1;
    p += 1;
  }
  pthread_mutex_lock(&e->adhoc_lock); /* (no entry changes meanwhile) */
  for (size_t i = 0; i < na; i++) {
    const adhoc_entry *a = &e->adhoc[i];
    if (!adhoc_live(a)) continue;
    size_t n = strlen(a->canon);
    limiter_ident(a->lim, &ap, &id);
    p[0] = 'a';
    memcpy(p + 1, a->canon, n);
    names->name[id] = p;
    names->len[id] = (uint16_t)(n + 1);
    p += n + 1;
  }
  pthread_mutex_unlock(&e->adhoc_lock);
  return 0;
}

/* store_out_fn: all of it to the file descriptor. */
static int out_fd(void *ud, const void *buf, size_t n) {
  int fd = *(int *)ud;
  const char *p = buf;
  while (n) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return -1;
    p += w;
    n -= (size_t)w;
  }
  return 0;
}

/* Flushes the directory holding path, so that the rename is on disk. */
static void sync_dir(const char *path) {
  char copy[4096];
  snprintf(copy, sizeof copy, "%s", path);
  int fd = open(dirname(copy), O_RDONLY | O_DIRECTORY);
  if (fd >= 0) {
    fsync(fd);
    close(fd);
  }
}

/* Writes the snapshot to tmp, fsync'd. 0, or -1 with err written. */
static int write_tmp(engine *e, const store_names *names, const char *tmp,
                     int64_t now, eng_state_stats *st, char *err,
                     size_t err_len) {
  /* A new file of our own, never one that is there: in a directory other
     users can write, a link planted at the predictable name would make
     the daemon overwrite whatever it points to. (A leftover of a crash
     with the same PID is ours: it goes first.) */
  unlink(tmp);
  int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                0600);
  if (fd < 0) {
    snprintf(err, err_len, "%s: %s", tmp, strerror(errno));
    return -1;
  }
  store_snap_stats ss;
  int rc = store_snapshot_write(e->store, names, now, out_fd, &fd, &ss);
  int saved = errno;
  if (!rc && fsync(fd)) {
    rc = -1;
    saved = errno;
  }
  close(fd);
  st->keys = ss.keys;
  st->bytes = ss.bytes;
  st->longest_lock_ns = ss.longest_lock_ns;
  if (rc)
    snprintf(err, err_len, "%s: %s", tmp,
             rc == SL_ENOMEM ? "out of memory" : strerror(saved));
  return rc ? -1 : 0;
}

int engine_state_save(engine *e, const char *path, int64_t now,
                      eng_state_stats *st, char *err, size_t err_len) {
  int64_t t0 = clock_mono_ns();
  memset(st, 0, sizeof *st);
  char tmp[4096];
  if (snprintf(tmp, sizeof tmp, "%s.%d.tmp", path, (int)getpid()) >=
      (int)sizeof tmp) {
    snprintf(err, err_len, "%s: the path is too long", path);
    return -1;
  }
  store_names *names = calloc(1, sizeof *names);
  char *buf = NULL;
  int rc = -1;
  pthread_mutex_lock(&e->reload_lock);
  if (!names || name_limiters(e, names, &buf))
    snprintf(err, err_len, "out of memory");
  else
    rc = write_tmp(e, names, tmp, now, st, err, err_len);
  pthread_mutex_unlock(&e->reload_lock);
  free(names);
  free(buf);
  if (!rc && rename(tmp, path)) {
    snprintf(err, err_len, "%s: %s", path, strerror(errno));
    rc = -1;
  }
  if (rc)
    unlink(tmp);
  else
    sync_dir(path);
  st->ns = clock_mono_ns() - t0;
  metrics_global_add(e->metrics, e->mid[rc ? M_STATE_FAILED : M_STATE_OK], 1);
  if (!rc) {
    metrics_global_set(e->metrics, e->mid[M_STATE_KEYS], st->keys);
    metrics_global_set(e->metrics, e->mid[M_STATE_MS],
                       (uint64_t)(st->ns / 1000000));
  }
  return rc;
}

/* store_resolve_fn: a saved name as this engine's limiter (under
   reload_lock). An ad-hoc policy is made when new. */
static int resolve(void *ud, const char *name, size_t len,
                   const algo_policy **p, uint16_t *id) {
  engine *e = ud;
  sl_limiter *lim = NULL;
  if (len == 1 && name[0] == 'c') {
    lim = engine_cell(e);
  } else if (len > 1 && name[0] == 'r') {
    for (size_t i = 0; i < e->nlims && !lim; i++)
      if (strlen(e->lims[i].id) == len - 1 &&
          !memcmp(e->lims[i].id, name + 1, len - 1))
        lim = e->lims[i].lim;
  } else if (len > 1 && len < 64 && name[0] == 'a') {
    char canon[64];
    memcpy(canon, name + 1, len - 1);
    canon[len - 1] = '\0';
    sl_policy pol;
    int rc;
    adhoc_entry *a = NULL;
    if (!memchr(canon, '\0', len - 1) && !sl_policy_parse(canon, &pol, NULL, 0))
      a = adhoc_get(e, &pol, canon, &rc);
    lim = a ? a->lim : NULL;
  }
  if (!lim) return -1;
  limiter_ident(lim, p, id);
  return 0;
}

/* Reads path whole, at most `most` bytes. 0, 1 (no such file), or -1
   with err written. */
static int read_file(const char *path, size_t most, uint8_t **buf,
                     size_t *len, char *err, size_t err_len) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0 && errno == ENOENT) return 1;
  struct stat sb;
  if (fd < 0 || fstat(fd, &sb)) {
    snprintf(err, err_len, "%s", strerror(errno));
    if (fd >= 0) close(fd);
    return -1;
  }
  if ((uint64_t)sb.st_size > most) {
    snprintf(err, err_len, "%lld bytes; more than this store can hold",
             (long long)sb.st_size);
    close(fd);
    return -1;
  }
  *len = (size_t)sb.st_size;
  *buf = malloc(*len ? *len : 1);
  size_t got = 0;
  while (*buf && got < *len) {
    ssize_t r = read(fd, *buf + got, *len - got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    got += (size_t)r;
  }
  close(fd);
  if (*buf && got == *len) return 0;
  snprintf(err, err_len, "%s", *buf ? "short read" : "out of memory");
  free(*buf);
  *buf = NULL;
  return -1;
}

int engine_state_load(engine *e, const char *path, int64_t now,
                      eng_state_stats *st, char *err, size_t err_len) {
  memset(st, 0, sizeof *st);
  sl_store_stats ss;
  sl_store_stats_get(e->store, &ss);
  uint8_t *buf = NULL;
  size_t len = 0;
  char why[300] = "";
  int rc = read_file(path, 4 * ss.max_memory + (1u << 20), &buf, &len, why,
                     sizeof why);
  if (rc == 1) return 1;
  if (rc == 0) {
    store_snap_stats sn;
    pthread_mutex_lock(&e->reload_lock);
    rc = store_snapshot_load(e->store, buf, len, resolve, e, now, &sn, why,
                             sizeof why);
    pthread_mutex_unlock(&e->reload_lock);
    if (rc == SL_ENOMEM) snprintf(why, sizeof why, "out of memory");
    st->keys = sn.keys;
    st->bytes = sn.bytes;
    st->restored = sn.restored;
    st->fresh = sn.fresh;
    st->unmatched = sn.unmatched;
    st->failed = sn.failed;
  }
  free(buf);
  if (rc) snprintf(err, err_len, "state file %s: %s", path, why);
  return rc ? -1 : 0;
}
