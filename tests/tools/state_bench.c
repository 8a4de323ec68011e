/*
 * state_bench.c — what a --state-file save costs (issue 15, finding 9):
 * a store of N keys (default 1,000,000) is saved to a file (tmp + fsync +
 * rename, as the daemon does) while a thread decides on random keys; the
 * decisions' p50/p99/max latency without a save running and while saves
 * run back to back, and the save's own time, are printed as key=value.
 *
 *   build/tests/tools/state_bench [KEYS] [DIR]
 */
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/clock.h"
#include "limiter.h"
#include "store/snapshot.h"

#define NLAT 4000000

static sl_limiter *lim;
static size_t nkeys;
static atomic_int phase; /* 0 warm, 1 measure quiet, 2 measure saving, 3 stop */
static int64_t *lat[3];
static size_t nlat[3];

static void *decider(void *ud) {
  (void)ud;
  uint64_t x = 88172645463325252u;
  int p;
  while ((p = atomic_load(&phase)) != 3) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    char key[32];
    int n = snprintf(key, sizeof key, "user:%zu", (size_t)(x % nkeys));
    int64_t t0 = clock_mono_ns();
    sl_decision d;
    sl_limiter_take(lim, key, (size_t)n, 1, clock_wall_ns(), &d);
    int64_t dt = clock_mono_ns() - t0;
    if (p > 0 && nlat[p] < NLAT) lat[p][nlat[p]++] = dt;
  }
  return NULL;
}

static int cmp(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

static int out_fd(void *ud, const void *buf, size_t n) {
  return write(*(int *)ud, buf, n) == (ssize_t)n ? 0 : -1;
}

int main(int argc, char **argv) {
  nkeys = argc > 1 ? (size_t)atol(argv[1]) : 1000000;
  const char *dir = argc > 2 ? argv[2] : "/tmp";
  sl_store_options o;
  sl_store_options_init(&o);
  o.max_memory = (size_t)1 << 30;
  o.expected_keys = nkeys;
  sl_store *s;
  sl_policy pol;
  if (sl_store_new(&o, &s) || sl_policy_parse("fixed_window:100/h", &pol, NULL, 0) ||
      sl_limiter_new(s, &pol, &lim))
    return 1;
  int64_t now = clock_wall_ns();
  for (size_t i = 0; i < nkeys; i++) {
    char key[32];
    int n = snprintf(key, sizeof key, "user:%zu", i);
    sl_decision d;
    sl_limiter_take(lim, key, (size_t)n, 1, now, &d);
  }
  store_names *names = calloc(1, sizeof *names);
  const algo_policy *ap;
  uint16_t id;
  limiter_ident(lim, &ap, &id);
  names->name[id] = "rbench";
  names->len[id] = 6;
  for (int p = 1; p < 3; p++) lat[p] = malloc(NLAT * sizeof(int64_t));
  pthread_t th;
  pthread_create(&th, NULL, decider, NULL);
  usleep(200000);
  atomic_store(&phase, 1);
  usleep(2000000);
  atomic_store(&phase, 2);
  char path[4096], tmp[4200];
  snprintf(path, sizeof path, "%s/state_bench.state", dir);
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  int saves = 0;
  int64_t worst = 0, total = 0, lock_max = 0, bytes = 0, t_end = clock_mono_ns() + 2000000000;
  while (clock_mono_ns() < t_end || saves == 0) {
    int64_t t0 = clock_mono_ns();
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    store_snap_stats st;
    if (fd < 0 || store_snapshot_write(s, names, clock_wall_ns(), out_fd, &fd, &st) ||
        fsync(fd) || close(fd) || rename(tmp, path))
      return 1;
    int64_t dt = clock_mono_ns() - t0;
    worst = dt > worst ? dt : worst;
    total += dt;
    lock_max = st.longest_lock_ns > lock_max ? st.longest_lock_ns : lock_max;
    bytes = (int64_t)st.bytes;
    saves++;
  }
  atomic_store(&phase, 3);
  pthread_join(th, NULL);
  printf("keys=%zu file_bytes=%lld saves=%d save_ms_mean=%.1f save_ms_max=%.1f "
         "shard_lock_max_us=%.1f\n",
         nkeys, (long long)bytes, saves, total / 1e6 / saves, worst / 1e6,
         lock_max / 1e3);
  for (int p = 1; p < 3; p++) {
    qsort(lat[p], nlat[p], sizeof(int64_t), cmp);
    printf("%s: decisions=%zu p50_ns=%lld p99_ns=%lld p999_ns=%lld max_ns=%lld\n",
           p == 1 ? "quiet" : "saving", nlat[p], (long long)lat[p][nlat[p] / 2],
           (long long)lat[p][nlat[p] * 99 / 100],
           (long long)lat[p][nlat[p] * 999 / 1000], (long long)lat[p][nlat[p] - 1]);
  }
  unlink(path);
  return 0;
}
