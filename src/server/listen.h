/*
 * listen.h — the daemon's listening sockets: an address as users write it
 * (HOST:PORT, [V6]:PORT, :PORT, *:PORT) made into a socket every worker
 * can share (SO_REUSEPORT), and the address a socket was bound to, as text;
 * each listener's connection budget, the descriptors they need, and the
 * log lines that say when connections were refused.
 */
#ifndef SLUICE_SERVER_LISTEN_H
#define SLUICE_SERVER_LISTEN_H

#include <stddef.h>
#include <stdint.h>

#include "server.h"

/* Each connection's kernel socket buffers, each way (SO_RCVBUF and
   SO_SNDBUF; the kernel counts twice this): set on the listening socket,
   whose connections inherit them. Linux would otherwise grow them to
   tcp_rmem's and tcp_wmem's maximum (MiBs) for a client that sends and
   never reads, while sluice stops reading it and its answers wait.
   Requests and answers are small: this is many of them in flight. */
#define LISTEN_SOCK_BUFFER (128 << 10)

/*
 * A listening socket on addr (port `port_override` instead of addr's when
 * > 0): its fd, with the port it got in *bound_port; or -1 after logging
 * why. Its connections' buffers are LISTEN_SOCK_BUFFER. `probe` first
 * binds once without SO_REUSEPORT, so that a port another process holds
 * is an error ("address in use") rather than a port silently shared with
 * it.
 */
int listen_on(const char *addr, int port_override, int *bound_port,
              int probe);

/* The address fd is bound to, "127.0.0.1:8080" or "[::1]:8080", into buf
   ("" if it cannot be read). */
void listen_name(int fd, char *buf, size_t len);

/*
 * At start: srv->budget from the options (a listener's own cap; 0: 80% of
 * --max-connections, all of it when the others are off, at least
 * 1), and the soft RLIMIT_NOFILE raised to the hard one; logs a warning
 * when the connections allowed cannot all have a descriptor.
 */
void listen_budgets(server *srv);

/*
 * The main thread, often (every 100 ms): for each listener that refused
 * connections over a budget, or paused accepting out of descriptors, since
 * its last line, one line with the counts, at most one per
 * LISTEN_LOG_EVERY_MS. now: clock_mono_ns().
 */
#define LISTEN_LOG_EVERY_MS 10000
void listen_log(server *srv, int64_t now);

#endif /* SLUICE_SERVER_LISTEN_H */
