/*
 * listen.c — the daemon's listening sockets (listen.h): the address
 * parsed, resolved (numeric ports only), bound with SO_REUSEPORT so that
 * every worker has a socket of its own on the same port (the kernel
 * spreads the connections), and named back for --ready-file; the
 * listeners' connection budgets, the file descriptors they need, and the
 * lines that say when connections were turned away (worker.c counts them;
 * the main thread writes the lines, so a flood costs one line per
 * interval, not one per connection).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "../base/log.h"
#include "listen.h"

/* Splits "HOST:PORT" / "[V6]:PORT" / ":PORT" into host and port. */
static int split_addr(const char *addr, char *host, size_t hlen, char *port,
                      size_t plen) {
  const char *colon;
  if (addr[0] == '[') {
    const char *end = strchr(addr, ']');
    if (!end || end[1] != ':') return -1;
    snprintf(host, hlen, "%.*s", (int)(end - addr - 1), addr + 1);
    colon = end + 1;
  } else {
    colon = strrchr(addr, ':');
    if (!colon) return -1;
    snprintf(host, hlen, "%.*s", (int)(colon - addr), addr);
  }
  snprintf(port, plen, "%s", colon + 1);
  if (!*port) return -1;
  if (!*host) snprintf(host, hlen, "127.0.0.1");
  return 0;
}

int listen_on(const char *addr, int port_override, int *bound_port,
                     int probe) {
  char host[256], port[16];
  if (split_addr(addr, host, sizeof host, port, sizeof port)) {
    log_msg("error", "address '%s' is not HOST:PORT", addr);
    return -1;
  }
  if (port_override > 0) snprintf(port, sizeof port, "%d", port_override);
  struct addrinfo hints = {0}, *res;
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  int rc = getaddrinfo(strcmp(host, "*") ? host : NULL, port, &hints, &res);
  if (rc) {
    log_msg("error", "address '%s': %s", addr, gai_strerror(rc));
    return -1;
  }
  int fd = -1;
  for (struct addrinfo *ai = res; ai && fd < 0; ai = ai->ai_next) {
    fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK,
                0);
    if (fd < 0) continue;
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (probe) {
      int p = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, 0);
      if (p >= 0) {
        setsockopt(p, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        int busy = bind(p, ai->ai_addr, ai->ai_addrlen) != 0 &&
                   errno == EADDRINUSE;
        close(p);
        if (busy && port_override <= 0 && strcmp(port, "0")) {
          log_msg("error", "cannot listen on %s: address in use", addr);
          close(fd);
          fd = -1;
          continue;
        }
      }
    }
    setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one);
    int buf = LISTEN_SOCK_BUFFER; /* (before listen: the connections'
                                     window is offered from it) */
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buf, sizeof buf);
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buf, sizeof buf);
    if (bind(fd, ai->ai_addr, ai->ai_addrlen) || listen(fd, SOMAXCONN)) {
      log_msg("error", "cannot listen on %s: %s", addr, strerror(errno));
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(res);
  if (fd >= 0) {
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    getsockname(fd, (struct sockaddr *)&ss, &sl);
    *bound_port = ntohs(ss.ss_family == AF_INET6
                            ? ((struct sockaddr_in6 *)&ss)->sin6_port
                            : ((struct sockaddr_in *)&ss)->sin_port);
  }
  return fd;
}

void listen_name(int fd, char *buf, size_t len) {
  struct sockaddr_storage ss;
  socklen_t sl = sizeof ss;
  char host[INET6_ADDRSTRLEN] = "";
  buf[0] = '\0';
  if (getsockname(fd, (struct sockaddr *)&ss, &sl)) return;
  if (ss.ss_family == AF_INET6) {
    const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)&ss;
    inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof host);
    snprintf(buf, len, "[%s]:%d", host, ntohs(a->sin6_port));
  } else if (ss.ss_family == AF_INET) {
    const struct sockaddr_in *a = (const struct sockaddr_in *)&ss;
    inet_ntop(AF_INET, &a->sin_addr, host, sizeof host);
    snprintf(buf, len, "%s:%d", host, ntohs(a->sin_port));
  }
}

/* Descriptors the daemon holds besides its connections: per worker its
   three listeners, its epoll and a Redis connection or few; and the log,
   the config, the main thread's. */
#define FDS_PER_WORKER 8
#define FDS_BESIDES 32

void listen_budgets(server *srv) {
  const srv_opts *o = &srv->o;
  const long given[LST_COUNT] = {o->max_http_connections,
                                 o->max_resp_connections,
                                 o->max_grpc_connections};
  const int on[LST_COUNT] = {o->http_addr != NULL, o->resp_addr != NULL,
                             o->grpc_addr != NULL};
  for (int l = 0; l < LST_COUNT; l++) {
    int other_on = 0;
    for (int k = 0; k < LST_COUNT; k++) other_on |= k != l && on[k];
    long b = given[l] ? given[l]
             : other_on ? o->max_connections * 4 / 5
                        : o->max_connections;
    srv->budget[l] = b > 0 ? b : 1;
  }
  /* (so that the first refusal is logged at once) */
  srv->listeners_logged_ns =
      clock_mono_ns() - (int64_t)LISTEN_LOG_EVERY_MS * 1000000;

  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl)) return;
  if (rl.rlim_cur < rl.rlim_max) {
    rlim_t was = rl.rlim_cur;
    rl.rlim_cur = rl.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &rl)) rl.rlim_cur = was;
  }
  long need = o->max_connections + FDS_BESIDES + FDS_PER_WORKER * (long)o->threads;
  if (rl.rlim_cur != RLIM_INFINITY && (rlim_t)need > rl.rlim_cur)
    log_msg("warn",
            "file descriptors: the limit is %llu, but --max-connections %ld "
            "needs about %ld; past the limit new connections wait in the "
            "listen queue (accepting pauses) instead of being refused and "
            "counted: raise the limit (ulimit -n, LimitNOFILE=) or lower "
            "--max-connections",
            (unsigned long long)rl.rlim_cur, o->max_connections, need);
}

void listen_log(server *srv, int64_t now) {
  static const char *const names[LST_COUNT] = {"http", "resp", "grpc"};
  if (now - srv->listeners_logged_ns < (int64_t)LISTEN_LOG_EVERY_MS * 1000000)
    return;
  long refused[LST_COUNT], paused[LST_COUNT], any = 0;
  for (int l = 0; l < LST_COUNT; l++) {
    any |= refused[l] = atomic_exchange(&srv->refused[l], 0);
    any |= paused[l] = atomic_exchange(&srv->fd_pauses[l], 0);
  }
  if (!any) return;
  srv->listeners_logged_ns = now;
  long total = atomic_load(&srv->connections);
  long http = atomic_load(&srv->http_open);
  long grpc = atomic_load(&srv->grpc_open);
  for (int l = 0; l < LST_COUNT; l++) {
    if (refused[l])
      log_msg("warn",
              "%s: refused %ld connection%s since the last such line: over "
              "its budget of %ld or --max-connections %ld (open: http %ld, "
              "resp %ld, grpc %ld)",
              names[l], refused[l], refused[l] == 1 ? "" : "s",
              srv->budget[l], srv->o.max_connections, http,
              total - http - grpc, grpc);
    if (paused[l])
      log_msg("warn",
              "%s: out of file descriptors: accepting paused %ld time%s "
              "since the last such line (open connections: %ld); new "
              "connections wait in the listen queue",
              names[l], paused[l], paused[l] == 1 ? "" : "s", total);
  }
}
