/*
 * listen.h — the daemon's listening sockets: an address as users write it
 * (HOST:PORT, [V6]:PORT, :PORT, *:PORT) made into a socket every worker
 * can share (SO_REUSEPORT), and the address a socket was bound to, as text.
 */
#ifndef SLUICE_SERVER_LISTEN_H
#define SLUICE_SERVER_LISTEN_H

#include <stddef.h>

/*
 * A listening socket on addr (port `port_override` instead of addr's when
 * > 0): its fd, with the port it got in *bound_port; or -1 after logging
 * why. `probe` first binds once without SO_REUSEPORT, so that a port
 * another process holds is an error ("address in use") rather than a port
 * silently shared with it.
 */
int listen_on(const char *addr, int port_override, int *bound_port,
              int probe);

/* The address fd is bound to, "127.0.0.1:8080" or "[::1]:8080", into buf
   ("" if it cannot be read). */
void listen_name(int fd, char *buf, size_t len);

#endif /* SLUICE_SERVER_LISTEN_H */
