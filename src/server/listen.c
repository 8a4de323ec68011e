/*
 * listen.c — the daemon's listening sockets (listen.h): the address
 * parsed, resolved (numeric ports only), bound with SO_REUSEPORT so that
 * every worker has a socket of its own on the same port (the kernel
 * spreads the connections), and named back for --ready-file.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <string.h>
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
