/*
 * example.c — a well-behaved HTTP client of `sluice serve` in C
 * (docs/clients.md): it sends N requests to URL, paces itself by the
 * RateLimit headers so as to spend the quota evenly, and after a 429/503
 * waits the server's Retry-After plus full jitter before it retries. The
 * header parsing, the backoff and the pacing are libsluice's
 * (sl_rate_info_header, sl_backoff_delay, sl_pace_interval); the HTTP is a
 * plain HTTP/1.0 GET, to stay dependency-free. Prints one line per
 * response, "elapsed_ms status retry_after_s slept_ms", then
 * "done OK DENIED" (tests/integration/clients.sh checks them).
 *
 *   cc -Iinclude examples/clients/example.c build/libsluice.a -lsodium -lpthread
 *   ./a.out 'http://127.0.0.1:8080/v1/throttle?key=me&policy=token_bucket:10/s:burst=5' 20
 */
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "sluice.h"

static int64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void sleep_ns(int64_t ns) {
  struct timespec ts = {ns / 1000000000, ns % 1000000000};
  while (nanosleep(&ts, &ts) != 0) {}
}

/* GET http://IP:PORT/PATH; the status (-1 on failure), headers into *ri. */
static int get(const char *url, sl_rate_info *ri) {
  char host[64], buf[16384];
  int port, off = 0, n;
  if (sscanf(url, "http://%63[^:]:%d%n", host, &port, &off) != 2) return -1;
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0 || inet_pton(AF_INET, host, &sa.sin_addr) != 1 ||
      connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
    if (fd >= 0) close(fd);
    return -1;
  }
  n = snprintf(buf, sizeof buf, "GET %s HTTP/1.0\r\nHost: %s\r\n\r\n",
               url + off, host);
  if (write(fd, buf, (size_t)n) != n) n = -1;
  size_t len = 0;
  ssize_t got;
  while (n >= 0 && len < sizeof buf - 1 &&
         (got = read(fd, buf + len, sizeof buf - 1 - len)) > 0)
    len += (size_t)got;
  close(fd);
  buf[len] = 0;
  int status = -1;
  if (sscanf(buf, "HTTP/1.%*d %d", &status) != 1) return -1;
  sl_rate_info_init(ri);
  int64_t now = now_ns();
  for (char *line = strstr(buf, "\r\n"); line && line[2] != '\r';) {
    char *name = line + 2, *end = strstr(name, "\r\n"), *colon;
    colon = memchr(name, ':', end ? (size_t)(end - name) : 0);
    if (!end) break;
    if (colon) {
      char *value = colon + 1;
      while (*value == ' ') value++;
      sl_rate_info_header(ri, name, (size_t)(colon - name), value,
                          (size_t)(end - value), now);
    }
    line = end;
  }
  return status;
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: %s URL N\n", argv[0]);
    return 2;
  }
  int n = atoi(argv[2]), ok = 0, denied = 0;
  unsigned attempt = 0;
  int64_t t0 = now_ns();
  while (ok < n) {
    sl_rate_info ri;
    int status = get(argv[1], &ri);
    int64_t wait;
    if (status == 429 || status == 503) {
      denied++;
      /* Retry-After (or the reset), then 0..min(2 s, 50 ms * 2^attempt). */
      wait = sl_backoff_delay(50000000, 2000000000, attempt++, &ri, NULL, NULL);
    } else if (status >= 200 && status < 300) {
      ok++;
      attempt = 0;
      wait = ok < n ? sl_pace_interval(&ri) : 0; /* spread what is left */
    } else {
      fprintf(stderr, "unexpected status %d\n", status);
      return 1;
    }
    printf("%lld %d %lld %lld\n", (long long)((now_ns() - t0) / 1000000),
           status,
           (long long)(ri.retry_after_ns > 0 ? ri.retry_after_ns / 1000000000 : 0),
           (long long)(wait / 1000000));
    fflush(stdout);
    sleep_ns(wait);
  }
  printf("done %d %d\n", ok, denied);
  return 0;
}
