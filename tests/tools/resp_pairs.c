/*
 * resp_pairs.c — a pipelined RESP client for `make bench-server`'s lease
 * target (issue 16): SL.ACQUIRE + SL.RELEASE pairs against two
 * SL.THROTTLE calls per pair, on the same keys, by the same client.
 * redis-benchmark cannot do it: a release needs the lease id that the
 * acquire's reply carries.
 *
 *   build/tests/tools/resp_pairs PORT MODE [CONNS [DEPTH [SECONDS [KEYS]]]]
 *
 * MODE `lease`: each pair is `SL.ACQUIRE k concurrency:1000:lease=60s`,
 * then, once its reply is in, `SL.RELEASE k LEASE`. MODE `throttle`: `SL.
 * THROTTLE k gcra:1000000/h`, then once its reply is in a second one on
 * the same key. Either way a pair is two commands in a row, the second
 * sent when the first is answered, so the two modes differ only in what
 * the server does. CONNS connections (default 50) each keep DEPTH pairs
 * (default 16) in flight, every pair on a key drawn among KEYS (default
 * 100000), for SECONDS (default 3). One thread, poll(); each read's
 * replies are answered by one write.
 *
 * Prints one line: "pairs=N seconds=S requests_per_s=PAIRS_PER_S
 * errors=E denied=D" (requests_per_s counts pairs, for run.sh's
 * best-of). Exit status 1 when nothing could be measured.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_CONNS 512
#define MAX_DEPTH 256
#define TOKEN_MAX 128
#define IN_MAX (1 << 16)

/* One pair in flight: its key and, between its two steps, its lease. */
typedef struct chain {
  unsigned key;
  int step; /* 0: the first command is out, 1: the second */
  char lease[TOKEN_MAX];
  size_t lease_len;
} chain;

typedef struct conn {
  int fd;
  chain ch[MAX_DEPTH];
  int fifo[2 * MAX_DEPTH]; /* chains in the order their replies come */
  size_t head, n;
  char in[IN_MAX];
  size_t in_len;
  char *out;
  size_t out_len, out_cap;
} conn;

static int lease_mode;
static unsigned nkeys = 100000;
static unsigned long long pairs, errors, denied;
static unsigned rng = 2463534242u;

static unsigned next_rand(void) {
  rng ^= rng << 13;
  rng ^= rng >> 17;
  rng ^= rng << 5;
  return rng;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void out_add(conn *c, const char *s, size_t n) {
  if (c->out_len + n > c->out_cap) {
    size_t cap = c->out_cap ? c->out_cap * 2 : 65536;
    while (cap < c->out_len + n) cap *= 2;
    c->out = realloc(c->out, cap);
    if (!c->out) {
      perror("resp_pairs: realloc");
      exit(1);
    }
    c->out_cap = cap;
  }
  memcpy(c->out + c->out_len, s, n);
  c->out_len += n;
}

/* Appends one command of argc arguments (RESP array of bulks). */
static void out_cmd(conn *c, int argc, const char **argv, const size_t *len) {
  char buf[32];
  out_add(c, buf, (size_t)snprintf(buf, sizeof buf, "*%d\r\n", argc));
  for (int i = 0; i < argc; i++) {
    out_add(c, buf, (size_t)snprintf(buf, sizeof buf, "$%zu\r\n", len[i]));
    out_add(c, argv[i], len[i]);
    out_add(c, "\r\n", 2);
  }
}

/* Sends chain i's next command and queues it for its reply. */
static void send_step(conn *c, int i) {
  chain *ch = &c->ch[i];
  char key[24];
  size_t klen = (size_t)snprintf(key, sizeof key, "pair:%u", ch->key);
  static const char acq[] = "SL.ACQUIRE", rel[] = "SL.RELEASE",
                    thr[] = "SL.THROTTLE", cpol[] = "concurrency:1000:lease=60s",
                    tpol[] = "gcra:1000000/h";
  if (lease_mode && ch->step == 0) {
    const char *a[] = {acq, key, cpol};
    size_t l[] = {sizeof acq - 1, klen, sizeof cpol - 1};
    out_cmd(c, 3, a, l);
  } else if (lease_mode) {
    const char *a[] = {rel, key, ch->lease};
    size_t l[] = {sizeof rel - 1, klen, ch->lease_len};
    out_cmd(c, 3, a, l);
  } else {
    const char *a[] = {thr, key, tpol};
    size_t l[] = {sizeof thr - 1, klen, sizeof tpol - 1};
    out_cmd(c, 3, a, l);
  }
  c->fifo[(c->head + c->n) % (2 * MAX_DEPTH)] = i;
  c->n++;
}

static void start_pair(conn *c, int i) {
  c->ch[i].key = next_rand() % nkeys;
  c->ch[i].step = 0;
  send_step(c, i);
}

/* The length of one complete reply at s[0..n) (arrays of integers,
   bulks, nulls, errors), or 0 when incomplete. The first bulk, when
   there is one, goes into *bulk and *blen; the first integer into
   *first. */
static size_t reply_len(const char *s, size_t n, const char **bulk,
                        size_t *blen, long long *first, int *err) {
  const char *end = memchr(s, '\n', n);
  if (!end) return 0;
  size_t i = (size_t)(end - s) + 1;
  if (s[0] == '-') {
    *err = 1;
    return i;
  }
  if (s[0] == ':') {
    *first = strtoll(s + 1, NULL, 10);
    return i;
  }
  if (s[0] == '$') {
    long long bl = strtoll(s + 1, NULL, 10);
    if (bl < 0) return i;
    if (n < i + (size_t)bl + 2) return 0;
    if (!*bulk) {
      *bulk = s + i;
      *blen = (size_t)bl;
    }
    return i + (size_t)bl + 2;
  }
  if (s[0] == '*') {
    long long k = strtoll(s + 1, NULL, 10);
    long long f = -1;
    for (long long e = 0; e < k; e++) {
      long long v = -1;
      size_t m = reply_len(s + i, n - i, bulk, blen, &v, err);
      if (!m) return 0;
      if (e == 0) f = v;
      i += m;
    }
    *first = f;
    return i;
  }
  *err = 1; /* anything else: count it and go on */
  return i;
}

/* Handles the replies in c's input; returns -1 on a broken stream. */
static int on_replies(conn *c) {
  size_t off = 0;
  while (off < c->in_len && c->n) {
    const char *bulk = NULL;
    size_t blen = 0;
    long long first = -1;
    int err = 0;
    size_t m = reply_len(c->in + off, c->in_len - off, &bulk, &blen, &first,
                         &err);
    if (!m) break;
    off += m;
    int i = c->fifo[c->head];
    c->head = (c->head + 1) % (2 * MAX_DEPTH);
    c->n--;
    chain *ch = &c->ch[i];
    if (err) errors++;
    if (ch->step == 0) {
      if (!err && first != 1) denied++;
      if (lease_mode) {
        if (!bulk || blen >= TOKEN_MAX) { /* denied or failed: start over */
          start_pair(c, i);
          continue;
        }
        memcpy(ch->lease, bulk, blen);
        ch->lease_len = blen;
      }
      ch->step = 1;
      send_step(c, i);
    } else {
      pairs++;
      start_pair(c, i);
    }
  }
  memmove(c->in, c->in + off, c->in_len - off);
  c->in_len -= off;
  return 0;
}

static int flush_out(conn *c) {
  size_t done = 0;
  while (done < c->out_len) {
    ssize_t w = write(c->fd, c->out + done, c->out_len - done);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && errno == EAGAIN) {
      struct pollfd p = {c->fd, POLLOUT, 0};
      poll(&p, 1, 1000);
      continue;
    }
    if (w <= 0) return -1;
    done += (size_t)w;
  }
  c->out_len = 0;
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: resp_pairs PORT lease|throttle [CONNS [DEPTH "
                    "[SECONDS [KEYS]]]]\n");
    return 2;
  }
  int port = atoi(argv[1]);
  lease_mode = !strcmp(argv[2], "lease");
  int nconn = argc > 3 ? atoi(argv[3]) : 50;
  int depth = argc > 4 ? atoi(argv[4]) : 16;
  double secs = argc > 5 ? atof(argv[5]) : 3;
  if (argc > 6) nkeys = (unsigned)atoi(argv[6]);
  if (nconn < 1 || nconn > MAX_CONNS || depth < 1 || depth > MAX_DEPTH ||
      secs <= 0 || nkeys < 1) {
    fprintf(stderr, "resp_pairs: CONNS 1..%d, DEPTH 1..%d, SECONDS > 0, "
                    "KEYS >= 1\n", MAX_CONNS, MAX_DEPTH);
    return 2;
  }
  conn *cs = calloc((size_t)nconn, sizeof *cs);
  struct pollfd *pf = calloc((size_t)nconn, sizeof *pf);
  if (!cs || !pf) return 1;
  struct sockaddr_in sa = {.sin_family = AF_INET,
                           .sin_port = htons((uint16_t)port)};
  inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
  for (int k = 0; k < nconn; k++) {
    conn *c = &cs[k];
    c->fd = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (connect(c->fd, (struct sockaddr *)&sa, sizeof sa)) {
      perror("resp_pairs: connect");
      return 1;
    }
    fcntl(c->fd, F_SETFL, O_NONBLOCK);
    for (int i = 0; i < depth; i++) start_pair(c, i);
    if (flush_out(c)) return 1;
    pf[k] = (struct pollfd){c->fd, POLLIN, 0};
  }
  double t0 = now_s(), t1 = t0;
  while ((t1 = now_s()) - t0 < secs) {
    int r = poll(pf, (nfds_t)nconn, 100);
    if (r < 0 && errno != EINTR) break;
    for (int k = 0; k < nconn && r > 0; k++) {
      if (!pf[k].revents) continue;
      conn *c = &cs[k];
      ssize_t got = read(c->fd, c->in + c->in_len, IN_MAX - c->in_len);
      if (got <= 0) {
        if (got < 0 && (errno == EAGAIN || errno == EINTR)) continue;
        fprintf(stderr, "resp_pairs: connection %d closed\n", k);
        return 1;
      }
      c->in_len += (size_t)got;
      if (on_replies(c) || flush_out(c)) return 1;
    }
  }
  double el = t1 - t0;
  printf("pairs=%llu seconds=%.2f requests_per_s=%.0f errors=%llu "
         "denied=%llu\n", pairs, el, (double)pairs / el, errors, denied);
  return pairs ? 0 : 1;
}
