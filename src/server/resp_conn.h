/*
 * resp_conn.h — one RESP connection, as the RESP front end's files share
 * it: resp.c (reading, replies, the command table), resp_guard.c (what a
 * connection may hold and for how long: its timers and the process-wide
 * input budget) and resp_auth.c (AUTH, its throttle, admin commands).
 * Nothing outside src/server/resp*.c includes it.
 */
#ifndef SLUICE_SERVER_RESP_CONN_H
#define SLUICE_SERVER_RESP_CONN_H

#include "../algo/cell.h"
#include "../engine/engine.h"
#include "hold.h"
#include "resp_parse.h"
#include "resp_txn.h"
#include "server.h"

#define RESP_NAME_MAX 128 /* CLIENT SETNAME's name, SETINFO's values */


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
  int proto;         /* 2, or 3 after HELLO 3: RESP3's maps and nulls */
  long long id;      /* CLIENT ID (HELLO's id) */
  int64_t opened_ns; /* clock_mono_ns at accept (CLIENT INFO's age) */
  resp_txn txn;      /* MULTI ... EXEC */
  char *name, *lib_name, *lib_ver; /* CLIENT SETNAME / SETINFO; NULL */
  /* The peer's address as text, made on first use (resp_client): a
     denial log line then costs no getnameinfo. peer_len < 0: not yet. */
  int peer_len;
  char peer[48];
} resp_conn;

/* Writes the reply of a decided query (resp_decide). */
typedef void (*resp_reply_fn)(resp_conn *c, const eng_result *r);

/* A command's reply, when a command before it (or itself) waits: for
   Redis (fleet mode) or for its delay (wait mode, resp_wait.c). */
typedef struct resp_slot {
  struct resp_slot *next;
  resp_conn *c;        /* NULL: the connection closed while it waited */
  int done;            /* reply in buf */
  int kind;
  resp_reply_fn reply; /* K_FN: writes the reply (resp_decide) */
  char *buf;
  size_t len;
  /* Wait mode (resp_wait.c): the longest hold (0: none, or its place in
     the hold given back), whether it is in the hold now, its entry. */
  worker *w;
  int64_t cap;
  int held;
  hold_entry hold;
  /* then, for a waiting command, the eng_result (or, for SL.RESET, the
     eng_reset) the engine fills */
} resp_slot;

/*
 * One row of resp.c's command table. Arity counts the command's name:
 * min_argc..max_argc arguments (max -1: any number). flags: RESP_CMD_*.
 */
typedef struct resp_command {
  const char *name;
  size_t name_len; /* (NAME() fills both: no strlen per row per command) */
  int min_argc, max_argc;
  int flags;
  void (*run)(resp_conn *c, const resp_cmd *cmd);
  const char *arity_err; /* NULL: Redis's "wrong number of arguments" */
  const char *summary;   /* COMMAND DOCS */
} resp_command;

enum {
  RESP_CMD_BEFORE_AUTH = 1, /* runs before AUTH (with --password) */
  RESP_CMD_ADMIN = 2,       /* needs AUTH admin (with --admin-token) */
  RESP_CMD_TXN = 4,         /* runs at once inside MULTI (EXEC, DISCARD..) */
  RESP_CMD_KEY = 8,         /* its first argument is a key (COMMAND INFO) */
  RESP_CMD_WRITE = 16,      /* changes state (COMMAND INFO's flags) */
};

/* Decides q and replies with reply(c, r), or the engine's error; in fleet
   mode, later, in command order (resp.c). */
void resp_decide(resp_conn *c, const eng_query *q, resp_reply_fn reply);

/* SL.ACQUIRE, SL.RELEASE, SL.RENEW (resp_lease.c). */
void cmd_sl_acquire(resp_conn *c, const resp_cmd *cmd);
void cmd_sl_release(resp_conn *c, const resp_cmd *cmd);
void cmd_sl_renew(resp_conn *c, const resp_cmd *cmd);

/* The table and its length (resp.c). */
const resp_command *resp_commands(size_t *n);

/* Runs one command as if it had just been read: the table, AUTH, arity,
   MULTI's queueing (resp.c). */
void resp_dispatch(resp_conn *c, const resp_cmd *cmd);
/* Runs cmd, keeping its reply behind any reply still waiting for Redis
   (resp.c): what EXEC does for each queued command. */
void resp_run_ordered(resp_conn *c, const resp_cmd *cmd);
/* Writes an array header "*n" behind any waiting reply (EXEC's). */
void resp_header_ordered(resp_conn *c, size_t n);

/* ---- replies as bytes (resp_out.c) ---- */

/* Appends raw reply bytes (out of memory: the connection closes). */
void out_raw(resp_conn *c, const char *s, size_t n);
/* An error reply "-MESSAGE\r\n" (newlines in it become spaces). */
void out_err(resp_conn *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void out_int(resp_conn *c, long long v);
/* An array of n < 10 integers (the throttle commands' replies). */
void out_ints(resp_conn *c, const int64_t *v, size_t n);
void out_bulk(resp_conn *c, const char *s, size_t n);
void out_cstr(resp_conn *c, const char *s); /* a bulk of a C string */
/* A header line: "*n" (array), "$n", ... */
void out_hdr(resp_conn *c, char type, int64_t n);
/* A map of n pairs: "%n" in RESP3, an array of 2n in RESP2. */
void out_map(resp_conn *c, size_t n);
/* A null: "_" in RESP3, "$-1" (a null bulk) in RESP2. */
void out_null(resp_conn *c);
/* Text for a human (INFO, CLIENT INFO): RESP3's verbatim "=N txt:", else
   a bulk. */
void out_verbatim(resp_conn *c, const char *s, size_t n);
/* "ERR unknown command ..." as Redis words it. */
void reply_unknown(resp_conn *c, const resp_cmd *cmd);

/* A throttle command (CL.THROTTLE or SL.THROTTLE), parsed: what it
   decides, and how its reply reads. */
typedef struct resp_throttle {
  int cell;        /* CL.THROTTLE (else SL.THROTTLE) */
  eng_query q;     /* all but now; its pointers lead into this struct and
                      the command's arguments */
  sl_policy p;     /* CL.THROTTLE's, as a policy (fleet mode) */
  algo_cell rate;  /* CL.THROTTLE's rate */
  int64_t wait;    /* SL.THROTTLE ... WAIT [max_wait]: the client's cap
                      (INT64_MAX: none given); 0: no WAIT */
} resp_throttle;

/* cmd (CL.THROTTLE or SL.THROTTLE, in arity) into *t: 0, or -1 with the
   error reply's text in err (resp.c). */
int resp_throttle_parse(const resp_cmd *cmd, resp_throttle *t, char *err,
                        size_t n);
/* t's reply for decision d. */
void resp_throttle_reply(resp_conn *c, const resp_throttle *t,
                         const sl_decision *d);

/* ---- a pipeline's throttle commands, decided together (resp_batch.c) ---- */

/* Takes cmd (parsed from the next `bytes` of unconsumed input) into the
   worker's batch when it is a throttle command that can wait there: 1
   (counted, bytes still unconsumed), or 0 (dispatch it as usual, after
   resp_batch_flush). */
int resp_batch_add(resp_conn *c, const resp_cmd *cmd, size_t bytes);
/* Decides the batch and writes its replies in order, then consumes its
   input. Nothing to do when it is empty. */
void resp_batch_flush(resp_conn *c);
/* Input bytes the batch holds, not yet consumed (parsing resumes after). */
size_t resp_batch_bytes(const resp_conn *c);
int resp_batch_init(worker *w);
void resp_batch_dispose(worker *w);

/* ---- replies that wait (resp.c) ---- */

/* Joins s to the back of c's replies. */
void slot_link(resp_conn *c, resp_slot *s);
/* s's reply is the output written since mark: into s, and out with the
   others that are ready. */
void slot_answered(resp_conn *c, resp_slot *s, size_t mark);
/* The output written since mark moves into s, not yet to be sent (a held
   reply: rendered when the hold starts, since a reload may free the
   rules it names before the hold ends). */
void slot_keep(resp_conn *c, resp_slot *s, size_t mark);
/* s's kept reply is ready: out with the others that are. */
void slot_ready(resp_conn *c, resp_slot *s);

/* ---- the wait mode: WAIT [max_wait] (resp_wait.c) ---- */

/* WAIT's max_wait v[0..len) (NULL: none given) into *wait: the client's
   cap, INT64_MAX for none. 0, or -1 with the error reply's text in err. */
int resp_wait_arg(const char *v, size_t len, int64_t *wait, char *err,
                  size_t n);
/* The longest hold for a client's cap `wait` (0: no WAIT) on c: lowered
   to --max-wait; 0 when the command does not wait (the mode is off). */
int64_t resp_wait_cap(const resp_conn *c, int64_t wait);
/* Decides q in wait mode (cap > 0) and replies with reply(c, r): held for
   its leaky_bucket delay, in command order, or at once. */
void resp_wait_decide(resp_conn *c, eng_query *q, resp_reply_fn reply,
                      int64_t cap);
/* c is closing: drops held s from the hold and frees it. */
void resp_wait_cancel(resp_slot *s);

/* Whether argument i of cmd is word, in any case (as Redis reads its
   keywords). */
int resp_arg_is(const resp_cmd *cmd, int i, const char *word);

/* Closes the connection now and frees it (its waiting commands' slots are
   freed by their answers). */
void resp_conn_close(resp_conn *c);

/* The table's handlers in resp_multi.c: MULTI, EXEC, DISCARD, WATCH,
   UNWATCH, RESET; and what queues a command inside MULTI. */
void cmd_multi(resp_conn *c, const resp_cmd *cmd);
void cmd_exec(resp_conn *c, const resp_cmd *cmd);
void cmd_discard(resp_conn *c, const resp_cmd *cmd);
void cmd_watch(resp_conn *c, const resp_cmd *cmd);
void cmd_unwatch(resp_conn *c, const resp_cmd *cmd);
void cmd_reset(resp_conn *c, const resp_cmd *cmd);
void resp_multi_queue(resp_conn *c, const resp_cmd *cmd);
/* Ends c's transaction, if any (its queue freed, the gauge updated). */
void resp_multi_end(resp_conn *c);

/* ... in resp_info.c: INFO, DBSIZE, SELECT, TIME, COMMAND, CONFIG,
   CLIENT. */
void cmd_info(resp_conn *c, const resp_cmd *cmd);
void cmd_dbsize(resp_conn *c, const resp_cmd *cmd);
void cmd_select(resp_conn *c, const resp_cmd *cmd);
void cmd_time(resp_conn *c, const resp_cmd *cmd);
void cmd_command(resp_conn *c, const resp_cmd *cmd);
void cmd_config(resp_conn *c, const resp_cmd *cmd);
void cmd_client(resp_conn *c, const resp_cmd *cmd);
/* ... in resp_top.c: SL.TOP; and the peer's address of connection ud
   (eng_client_fn: the denial log's client). */
void cmd_sl_top(resp_conn *c, const resp_cmd *cmd);
void resp_client(void *ud, char *buf, size_t len);
/* Whether s[0..n) may be a client's name or SETINFO value: '!'..'~'
   only, as Redis allows, and at most RESP_NAME_MAX bytes. */
int resp_name_ok(const char *s, size_t n);
/* Replaces *slot with a copy of s[0..n) (n 0: NULL). 0, or -1 (memory). */
int resp_name_set(char **slot, const char *s, size_t n);

/* ... in resp_shed.c: SL.UTILISATION, and SL.CHECK's answer when the
   load shedder shed the request: [0, -1, -1, retry_after_ms, 0,
   "shed:CLASS"]. */
void cmd_sl_utilisation(resp_conn *c, const resp_cmd *cmd);
void reply_shed(resp_conn *c, const eng_result *r);

#endif /* SLUICE_SERVER_RESP_CONN_H */
