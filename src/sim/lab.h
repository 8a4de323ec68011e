/*
 * lab.h — what `sluice sim` and `sluice accuracy` share: exact durations
 * written as text ("59.9s", "1m30s"), the ideal trailing-window judge
 * ("at most L in any window W", measured on an allowed history), and the
 * seeded PRNG that keeps every run reproducible.
 *
 * Everything here is integer arithmetic on nanoseconds, like the library:
 * a figure the lab reports must not depend on rounding in the lab itself.
 */
#ifndef SLUICE_LAB_H
#define SLUICE_LAB_H

#include <stddef.h>
#include <stdint.h>

/*
 * Parses a duration: one or more NUMBER UNIT parts with units in strictly
 * decreasing order (d, h, m, s, ms), NUMBER decimal digits with an optional
 * fraction ("59.9s", "1m", "250ms", "1m30s", "1.5h"). The value must be a
 * whole number of nanoseconds and at most max_ns. Returns 0 with *out, or -1
 * with a message (naming the text as written) in err (err may be NULL).
 */
int lab_parse_duration(const char *s, int64_t max_ns, int64_t *out, char *err,
                       size_t err_len);

/*
 * Writes ns >= 0 into buf (at least 32 bytes) and returns buf.
 *   fixed: aligned columns, "0.250s", "59.900s", "1m00.000s", "2h05m00.000s"
 *          (3 decimals, or 6 or 9 when the value needs them);
 *   short: the least text that parses back to ns, "250ms", "59.9s", "1m",
 *          "1m0.05s", "2h5m".
 * Both forms are accepted by lab_parse_duration.
 */
char *lab_fmt_fixed(int64_t ns, char *buf, size_t len);
char *lab_fmt_short(int64_t ns, char *buf, size_t len);

/* splitmix64: the PRNG of the lab; state advances by one step per call. */
uint64_t lab_rand(uint64_t *state);
/* Uniform in [0, n) for n > 0, without modulo bias. */
uint64_t lab_rand_below(uint64_t *state, uint64_t n);

/*
 * The ideal sliding limit, judged on one history of allowed requests per
 * key: the total cost allowed in the half-open window (t - W, t], exactly as
 * sliding_log defines it. Keys are small integers (0 .. nkeys-1); times per
 * key must be non-decreasing. Memory holds only the entries still inside
 * some key's window (expired ones are recycled), so a long run costs no
 * more than its busiest window.
 */
typedef struct lab_wkey {
  uint32_t head, tail; /* oldest and newest live entry, LAB_NONE if none */
  int64_t sum;         /* total cost of the live entries */
} lab_wkey;

typedef struct lab_wrec {
  int64_t t, cost;
  uint32_t next; /* the key's next newer entry, or the free list's next */
} lab_wrec;

typedef struct lab_window {
  int64_t W;
  size_t nkeys;
  lab_wkey *keys;
  lab_wrec *rec;
  uint32_t nrec, cap, free_list;
  int64_t worst; /* the largest total any key ever had in one window */
} lab_window;

#define LAB_NONE UINT32_MAX

/* An empty judge for window W > 0 and nkeys keys. 0, or -1 out of memory. */
int lab_window_init(lab_window *w, int64_t W, size_t nkeys);
void lab_window_free(lab_window *w);

/*
 * The total allowed for `key` in (t - W, t]; drops (recycles) the entries
 * that have left that window for good, so t must not go backwards for a key.
 */
int64_t lab_window_sum(lab_window *w, size_t key, int64_t t);

/*
 * Records an allowed request of `cost` for `key` at t (after
 * lab_window_sum(w, key, t)) and updates w->worst. Cost 0 records nothing.
 * Returns 0, or -1 out of memory (nothing recorded).
 */
int lab_window_add(lab_window *w, size_t key, int64_t t, int64_t cost);

#endif /* SLUICE_LAB_H */
