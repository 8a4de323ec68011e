/*
 * backend.h — where per-key state lives, as the engine sees it.
 *
 * The engine matches requests to limits and reports, ranks and counts the
 * outcome; a backend holds the state and makes the decisions. Three
 * implement this interface: memory (engine/memory.c: this daemon's store,
 * the default), and fleet mode's exact backend (every decision one script
 * in Redis) and approximate backend (local decisions, synced every
 * interval) in src/fleet/. The engine knows nothing of Redis: it hands a
 * backend each limiter's name across the fleet (eng_name) and the request's
 * hash tag, and the backend turns them into whatever its store needs.
 *
 * Threads: a backend may keep state per worker thread (thread_new), which
 * the engine passes back to decide, reset and flush; those run on the
 * thread's own worker. forget runs under the engine's limiter lock
 * (engine_limiters_lock), from the reloading thread.
 */
#ifndef SLUICE_ENGINE_BACKEND_H
#define SLUICE_ENGINE_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "engine.h"
#include "metrics.h"

/* A limiter's name across the fleet: the same on every daemon with the
   same config (a rule and its policy, or an ad-hoc policy). */
typedef struct eng_name {
  char kind;        /* 'r': a rule's; 'a': an ad-hoc policy's */
  const char *id_a; /* 'r': the rule's id; 'a': the canonical policy */
  const char *id_b; /* 'r': the rule's canonical policy (a sub-counter's:
                       its share's, then "#SUB/NSUB"); 'a': NULL */
  /* A split limit's sub-counter SUB of NSUB (nsub 0: not split): a store
     that spreads keys places each sub-counter apart (fleet/keys.c). */
  uint16_t sub, nsub;
} eng_name;

/* One check of a decision. */
typedef struct eng_check {
  sl_check c; /* this daemon's limiter, the key, the cost, shadow */
  eng_name name;
  sl_limiter *local; /* on_store_error: local's limiter, else NULL */
  int on_error;      /* what it does when the store fails (a
                        cfg_store_error, never DEFAULT) */
  /* A calendar limit's window for this decision, [win_start, win_end) ns
     (fixed_window counts in it, not in its epoch-aligned period); 0, 0:
     none. */
  int64_t win_start, win_end;
  int64_t max_delay_ns; /* wait mode: a delay above it denies, charging
                           nothing (limiter_take_all_within; the memory
                           backend); 0: no bound */
  /* CL.THROTTLE's check (ENG_BACKEND_CELL): this call's rate, applied to
     the key's one state (algo/cell.h); c.limiter is the engine's cell
     limiter, name {'c', "cell"}; the request has this check alone. NULL:
     an ordinary check. */
  const struct algo_cell *cell;
} eng_check;

/* One request's checks, decided all-or-nothing. */
typedef struct eng_decision {
  const eng_check *checks;
  size_t n;
  const char *tag; /* the request's hash tag (a domain's hash_tag), "" */
  size_t tag_len;
  int64_t now;
  int charge_all; /* ENG_CHARGE_ALL (engine.h): a denied request, or one
                     above a capacity, is charged all the same (memory
                     backend only) */
  int lease_op;   /* ENG_LEASE_RELEASE / _RENEW (engine.h): every check is
                     a concurrency one; dec[i].allowed = its lease was
                     live (released / renewed), *all = every one was */
  uint64_t lease;
} eng_decision;

/* A pending decision's answer: dec[i] per check, all the overall one. */
typedef void (*eng_decided_fn)(void *ud, const sl_decision *dec, int all);

/* One (limiter, key) a reset forgets. */
typedef struct eng_forget {
  sl_limiter *lim;   /* this daemon's limiter (NULL: none made here) */
  sl_limiter *local; /* its on_store_error: local limiter, or NULL */
  eng_name name;
  const void *key;
  size_t key_len;
} eng_forget;

/* What one reset forgets. */
typedef struct eng_forgets {
  const eng_forget *items;
  size_t n;
  const char *tag; /* the request's hash tag (exact mode's keys carry it) */
  size_t tag_len;
} eng_forgets;

typedef struct eng_backend_ops {
  const char *name;
  /* ENG_BACKEND_FALLIBLE, ENG_BACKEND_ASYNC (below). */
  unsigned flags;
  /* Called once by engine_new, before any thread: registers metrics,
     keeps the engine. 0, or -1 with a message in err. */
  int (*attach)(eng_backend *b, engine *e, char *err, size_t err_len);
  /* Per-thread state, or NULL with *failed set. */
  void *(*thread_new)(eng_backend *b, engine_thread *t, int *failed);
  void (*thread_free)(eng_backend *b, void *bt);
  /* Whether the backend can decide policy p (an ad-hoc policy the client
     names; the config's are checked at load): 0, or SL_EPOLICY with the
     reason in err (err may be NULL). NULL: every valid policy. */
  int (*policy_ok)(eng_backend *b, const sl_policy *p, char *err,
                   size_t err_len);
  /* Decides q: 0 with dec[0..q->n) and *all filled; ENG_PENDING (only
     with done non-NULL): done runs later on this thread, exactly once; or
     an SL_E* code (nothing charged). */
  int (*decide)(eng_backend *b, void *bt, const eng_decision *q,
                sl_decision *dec, int *all, eng_decided_fn done, void *ud);
  /* Forgets f's states, filling out (dropped, keys, failed, err): the
     returns of engine_reset (0, ENG_PENDING, ENG_ESTORE, ENG_EREMOTE,
     SL_ENOMEM); done as decide's. */
  int (*reset)(eng_backend *b, void *bt, const eng_forgets *f, eng_reset *out,
               eng_reset_fn done, void *ud);
  /* lim is about to be freed (a reload): the backend drops what it keeps
     of it. Under the limiter lock. NULL: nothing kept. */
  void (*forget)(eng_backend *b, const sl_limiter *lim);
  /* At the end of an event-loop pass (engine_thread_flush). NULL:
     nothing. */
  void (*flush)(eng_backend *b, void *bt);
  void (*free)(eng_backend *b);
} eng_backend_ops;

/* ENG_BACKEND_FALLIBLE: its store can fail, so the limits'
   on_store_error applies (the engine makes the local limiters). */
#define ENG_BACKEND_FALLIBLE 1u
/* ENG_BACKEND_ASYNC: decide may answer later (ENG_PENDING) when it is
   given a callback; the engine then keeps the request's state for it. */
#define ENG_BACKEND_ASYNC 2u
/* ENG_BACKEND_CELL: decides CL.THROTTLE's checks (eng_check.cell) with
   one state per key, as redis-cell does; without it the engine decides a
   CL.THROTTLE as the ad-hoc GCRA policy of its rate (a state per key and
   rate). */
#define ENG_BACKEND_CELL 4u

/* A backend: ops first, the implementation's own state after it. */
struct eng_backend {
  const eng_backend_ops *ops;
};

/* ---- what the engine offers its backends ---- */

/* The thread's metric values (metrics.h), and the engine's registry. */
metric_slots *engine_thread_metrics(engine_thread *t);
metrics *engine_metrics_registry(engine *e);
/* The engine's backend (engine_opts.backend, or the memory one). */
eng_backend *engine_backend(engine *e);
/* The backend's state for thread t (thread_new's). */
void *engine_thread_backend(engine_thread *t);

/* Decides q on this daemon's own store, at once (sl_take_all): the memory
   backend's decide, and what the others fall back on. */
int engine_decide_local(const eng_decision *q, sl_decision *dec, int *all);
/* Drops f's states on this daemon's own store (the limiters and their
   local ones); the number of items that had any. */
int engine_forget_local(const eng_forgets *f);

/*
 * The engine's limiters (rules' and ad-hoc policies') may be freed by a
 * reload at any time, except while this lock is held: a backend that
 * looks one up by name (engine_limiter_named) or keeps pointers to them
 * off the request path holds it. Never taken on the request path.
 */
void engine_limiters_lock(engine *e);
void engine_limiters_unlock(engine *e);
/* The limiter of this daemon that a name read back from a store names,
   or NULL (under the lock): kind 'a', id the canonical policy; kind 'r',
   id the rule's id and its policy joined by sep (the rule's id may hold
   sep itself: each rule is tried at its own length). */
sl_limiter *engine_limiter_named(engine *e, char kind, const char *id,
                                 size_t id_len, char sep);

#endif /* SLUICE_ENGINE_BACKEND_H */
