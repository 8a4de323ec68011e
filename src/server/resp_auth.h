/*
 * resp_auth.h — RESP's AUTH: the password (--password), the admin token
 * (--admin-token, as `AUTH admin <token>`), and the limits on guessing
 * them: a connection is closed after RESP_AUTH_MAX_FAILURES failed
 * attempts, and a peer address that has failed RESP_AUTH_PEER_POLICY's
 * worth is refused unchecked until it has waited. Failures are logged,
 * one line per RESP_AUTH_LOG_EVERY_S at most, with their count.
 */
#ifndef SLUICE_SERVER_RESP_AUTH_H
#define SLUICE_SERVER_RESP_AUTH_H

#include "resp_guard.h"

#define RESP_AUTH_MAX_FAILURES 3 /* per connection; then it is closed */
/* Failures per peer address (an IPv4 address, an IPv6 /64). */
#define RESP_AUTH_PEER_POLICY "token_bucket:10/m"
#define RESP_AUTH_LOG_EVERY_S 10
#define RESP_AUTH_PEERS_MEMORY (1 << 20) /* the peers' table: its cap */

/* The failed-AUTH limiter in g (g->auth). 0, or -1 after logging why. */
int resp_auth_new(resp_shared *g);
void resp_auth_free(resp_shared *g);

/* AUTH [user] secret: the command table's handler. */
void cmd_auth(resp_conn *c, const resp_cmd *cmd);
/* HELLO [2|3 [AUTH user secret] [SETNAME name]]: the table's handler. */
void cmd_hello(resp_conn *c, const resp_cmd *cmd);

#endif /* SLUICE_SERVER_RESP_AUTH_H */
