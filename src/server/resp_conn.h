/*
 * resp_conn.h — one RESP connection, as the RESP front end's files share
 * it: resp.c (reading, replies, the command table), resp_guard.c (what a
 * connection may hold and for how long: its timers and the process-wide
 * input budget) and resp_auth.c (AUTH, its throttle, admin commands).
 * Nothing outside src/server/resp*.c includes it.
 */
#ifndef SLUICE_SERVER_RESP_CONN_H
#define SLUICE_SERVER_RESP_CONN_H

#include "resp_parse.h"
#include "server.h"

struct resp_slot; /* a reply held back behind a waiting command (resp.c) */

typedef struct resp_conn {
  h2o_linklist_t link;
  worker *w;
  h2o_socket_t *sock;
  int authed;
  int admin;         /* AUTH admin <token> succeeded (--admin-token) */
  int auth_failures; /* failed AUTH attempts on this connection */
  int closing;       /* close once the replies are out */
  int writing;       /* a write is in flight (h2o allows one) */
  int reading;
  size_t need;       /* don't parse again before this many input bytes */
  size_t held;       /* input buffer bytes counted in the budget */
  h2o_timeout_entry_t timer; /* the AUTH deadline, or the idle timeout */
  strbuf out;  /* replies not yet handed to the socket */
  strbuf wbuf; /* the replies being written (h2o holds them until done) */
  struct resp_slot *head, *tail; /* replies held back behind a waiting one */
  size_t nslots;
} resp_conn;

/* Appends raw reply bytes (out of memory: the connection closes). */
void out_raw(resp_conn *c, const char *s, size_t n);
/* An error reply "-MESSAGE\r\n" (newlines in it become spaces). */
void out_err(resp_conn *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void out_int(resp_conn *c, long long v);
void out_bulk(resp_conn *c, const char *s, size_t n);

/* Whether argument i of cmd is word, in any case (as Redis reads its
   keywords). */
int resp_arg_is(const resp_cmd *cmd, int i, const char *word);

/* Closes the connection now and frees it (its waiting commands' slots are
   freed by their answers). */
void resp_conn_close(resp_conn *c);

#endif /* SLUICE_SERVER_RESP_CONN_H */
