/*
 * sim_print.c — what `sluice sim` shows of a run: the timeline (one row
 * per step and policy, alike consecutive steps of a command grouped, ANSI
 * colours when asked), the retry report, and the plot's captions. Lines
 * carry no trailing blanks: the golden files compare bytes.
 */
#include <string.h>

#include "sim_impl.h"

/* The timeline's name of command i ("burst 100 client"), into buf. Built
   when printed: a scenario of a million one-line commands stores no text. */
const char *sim_cmd_label(const sim_scenario *sc, size_t i, char *buf,
                             size_t len) {
  const sim_cmd *c = &sc->cmd[i];
  const char *key = sc->keys[c->key];
  char d[40], costpart[40] = "";
  if (c->cost != 1)
    snprintf(costpart, sizeof costpart, " cost %lld", (long long)c->cost);
  switch (c->kind) {
  case CMD_STORE:
    snprintf(buf, len, "store %s", c->cost ? "down" : "up");
    break;
  case CMD_REQUEST:
    snprintf(buf, len, "request %.24s%s", key, costpart);
    break;
  case CMD_BURST:
    snprintf(buf, len, "burst %llu %.24s%s",
             (unsigned long long)c->per_instant, key, costpart);
    break;
  default:
    snprintf(buf, len, "every %s %.24s%s",
             lab_fmt_short(c->every_ns, d, sizeof d), key, costpart);
  }
  return buf;
}

/* ---- the timeline ----------------------------------------------------- */

#define C_GREEN "\033[32m"
#define C_RED "\033[31m"
#define C_YELLOW "\033[33m"
#define C_DIM "\033[2m"
#define C_BOLD "\033[1m"
#define C_OFF "\033[0m"

/* 0 unused, 1 allowed, 2 allowed with delay, 3 denied, 4 mixed. */
static int cell_class(const cell *c) {
  if (!c->used) return 0;
  if (c->allowed && c->denied) return 4;
  if (c->denied) return 3;
  return c->delayed ? 2 : 1;
}

/* Prints one line, without trailing blanks (golden files compare bytes). */
static void put_line(FILE *f, char *line) {
  size_t n = strlen(line);
  while (n && line[n - 1] == ' ') n--;
  line[n] = '\0';
  fprintf(f, "%s\n", line);
}

/*
 * Prints a row: one line per policy that took part, the time and the step
 * on the first; a group of steps says on its second line (or an extra one)
 * where it ends and how many steps it holds.
 */
void sim_print_row(run_state *rs, const row *r) {
  FILE *f = rs->out;
  const int color = rs->opts->color;
  char t[40], t2[48], steps[40], d[40];
  lab_fmt_fixed(r->t_first, t, sizeof t);
  snprintf(t2, sizeof t2, "to %s", lab_fmt_fixed(r->t_last, d, sizeof d));
  snprintf(steps, sizeof steps, "(%llu steps)", (unsigned long long)r->steps);
  int lineno = 0;
  char line[512], label[128];
  if (r->src >= 0)
    sim_cmd_label(rs->sc, (size_t)r->src, label, sizeof label);
  else
    snprintf(label, sizeof label, "retry");
  for (int p = 0; p < rs->sc->npol; p++) {
    const cell *c = &r->c[p];
    if (!c->used) continue;
    char res[64], note[96] = "";
    uint64_t n = c->allowed + c->denied;
    if (c->allowed && c->denied)
      snprintf(res, sizeof res, "%llu allowed, %llu denied",
               (unsigned long long)c->allowed, (unsigned long long)c->denied);
    else if (n == 1)
      snprintf(res, sizeof res, "%s", c->allowed ? "allowed" : "denied");
    else
      snprintf(res, sizeof res, "%llu %s", (unsigned long long)n,
               c->allowed ? "allowed" : "denied");
    size_t used = 0;
    if (c->max_delay > 0)
      used += (size_t)snprintf(note, sizeof note, "delay %s%s",
                               c->allowed > 1 ? "up to " : "",
                               lab_fmt_short(c->max_delay, d, sizeof d));
    if (c->denied)
      snprintf(note + used, sizeof note - used, "%sretry after %s",
               used ? ", " : "", lab_fmt_short(c->retry_after, d, sizeof d));
    const char *col = !color ? ""
                      : c->allowed && c->denied ? C_YELLOW
                      : c->denied               ? C_RED
                                                : C_GREEN;
    const char *tcol = lineno == 0 ? t : lineno == 1 && r->steps > 1 ? t2 : "";
    const char *scol = lineno == 0   ? label
                       : lineno == 1 && r->steps > 1 ? steps
                                                     : "";
    int pad = 24 - (int)strlen(res);
    snprintf(line, sizeof line, "%12s  %-*s  %-*s  %s%s%s%*s %9lld  %s%s%s",
             tcol, rs->label_w, scol, rs->name_w, rs->sc->pol[p].name, col,
             res, color ? C_OFF : "", pad > 0 ? pad : 0, "",
             (long long)c->remaining,
             color && c->max_delay ? C_YELLOW : "", note,
             color && c->max_delay ? C_OFF : "");
    put_line(f, line);
    lineno++;
  }
  if (lineno == 1 && r->steps > 1) {
    snprintf(line, sizeof line, "%12s  %s", t2, steps);
    put_line(f, line);
  }
}

/* Ends one step: merges it into the pending row or prints that row. */
void sim_end_step(run_state *rs, int64_t t, int64_t src) {
  const int np = rs->sc->npol;
  row *r = &rs->pending;
  if (rs->show) {
    /* Steps of one command merge while every policy's outcome stays of
       the same kind (all allowed, all delayed, all denied, mixed), so a
       row ends where something changed. Retries merge until a command
       runs: one by one they are noise, and the plot shows them. */
    int same = r->active && !rs->opts->all_steps && r->src == src;
    for (int p = 0; same && src >= 0 && p < np; p++)
      same = cell_class(&r->c[p]) == cell_class(&rs->step[p]);
    if (same) {
      for (int p = 0; p < np; p++) {
        cell *a = &r->c[p];
        const cell *b = &rs->step[p];
        if (!b->used) continue;
        if (!a->used) { /* a policy's first retry in this row */
          *a = *b;
          continue;
        }
        a->allowed += b->allowed;
        a->denied += b->denied;
        a->delayed += b->delayed;
        a->remaining = b->remaining;
        if (b->max_delay > a->max_delay) a->max_delay = b->max_delay;
        if (b->denied) a->retry_after = b->retry_after;
      }
      r->t_last = t;
      r->steps++;
    } else {
      if (r->active) sim_print_row(rs, r);
      r->active = 1;
      r->t_first = r->t_last = t;
      r->steps = 1;
      r->src = src;
      memcpy(r->c, rs->step, sizeof r->c);
    }
  }
  memset(rs->step, 0, sizeof rs->step);
}

void sim_print_header(run_state *rs) {
  const sim_scenario *sc = rs->sc;
  FILE *f = rs->out;
  const int color = rs->opts->color;
  fprintf(f, "%s%s%s: %llu requests, %d %s", color ? C_BOLD : "",
          rs->opts->name ? rs->opts->name : "scenario", color ? C_OFF : "",
          (unsigned long long)sc->requests, sc->npol,
          sc->npol == 1 ? "policy" : "policies");
  if (sc->nretry) fprintf(f, ", retries on");
  fprintf(f, "\n");
  /* The description is echoed as the comments it was, so no line of it
     can pass for output ("summary policy=..." in a comment). */
  for (const char *d = sc->description; *d;) {
    size_t n = strcspn(d, "\n");
    fprintf(f, "# %.*s\n", (int)n, d);
    d += n + (d[n] == '\n');
  }
  for (int p = 0; p < sc->npol; p++)
    fprintf(f, "  %-*s  %s\n", rs->name_w, sc->pol[p].name, sc->pol[p].spec);
  if (sc->fleet.nodes) fprintf(f, "  fleet: %s\n", sc->fleet.text);
  if (sc->shed.on) fprintf(f, "  shedder: %s\n", sc->shed.text);
  fprintf(f, "\n%s%12s  %-*s  %-*s  %-24s %9s  %s%s\n", color ? C_DIM : "",
          "time", rs->label_w, "step", rs->name_w, "policy", "result",
          "remaining", "note", color ? C_OFF : "");
}

void sim_print_retries(run_state *rs) {
  const sim_scenario *sc = rs->sc;
  for (size_t r = 0; r < sc->nretry; r++) {
    int any = 0;
    for (int p = 0; p < sc->npol; p++)
      any |= rs->rstats[r * (size_t)sc->npol + (size_t)p].requests != 0;
    if (!any) continue;
    fprintf(rs->out, "\nline %d: %s\n", sc->retry[r].line, sc->retry[r].text);
    for (int p = 0; p < sc->npol; p++) {
      const retry_stats *st = &rs->rstats[r * (size_t)sc->npol + (size_t)p];
      char d[40];
      fprintf(rs->out,
              "  %-*s  %llu requests, %llu attempts, %llu served, "
              "%llu gave up; last served %s after its first attempt\n",
              rs->name_w, sc->pol[p].name, (unsigned long long)st->requests,
              (unsigned long long)st->attempts, (unsigned long long)st->served,
              (unsigned long long)st->gave_up,
              lab_fmt_short(st->max_wait, d, sizeof d));
    }
  }
}

const char *sim_level_name(sl_algo a) {
  switch (a) {
  case SL_TOKEN_BUCKET:
  case SL_GCRA:
    return "tokens";
  case SL_LEAKY_BUCKET:
    return "queue";
  case SL_SLIDING_WINDOW:
    return "estimate";
  default:
    return "count";
  }
}

void sim_fill_chart(const sim_scenario *sc, const sim_options *opts,
                    const run_state *first, svg_chart *c) {
  snprintf(c->title, sizeof c->title, "sluice sim: %s",
           opts->name ? opts->name : "scenario");
  snprintf(c->subtitle, sizeof c->subtitle, "%s", sc->description);
  c->kinds[0] = (svg_kind){"allowed", "#2ca02c", 0};
  int leaky = 0;
  for (int p = 0; p < sc->npol; p++) leaky |= sc->pol[p].pol.algo == SL_LEAKY_BUCKET;
  if (leaky) c->kinds[1] = (svg_kind){"allowed, delayed", "#f0a020", 0};
  c->kinds[2] = (svg_kind){"denied (below the line)", "#d62728", 1};
  snprintf(c->level_legend, sizeof c->level_legend,
           "state of key '%.40s'",
           sc->nkeys ? sc->keys[0] : "");
  for (int p = 0; p < sc->npol; p++) {
    svg_lane *l = &c->lanes[p];
    const sl_policy *pol = &sc->pol[p].pol;
    snprintf(l->title, sizeof l->title, "%s \xe2\x80\x94 %s", sc->pol[p].name,
             sc->pol[p].spec);
    char d[64] = "", dd[40];
    if (first->max_delay[p] > 0)
      snprintf(d, sizeof d, ", delay up to %s",
               lab_fmt_short(first->max_delay[p], dd, sizeof dd));
    snprintf(l->note, sizeof l->note,
             "allowed %llu, denied %llu, max in window %lld (limit %u)%s",
             (unsigned long long)first->allowed[p],
             (unsigned long long)first->denied[p],
             (long long)first->win[p].worst, pol->limit, d);
    l->level_name = sim_level_name(pol->algo);
    l->level_max = sc->pol[p].capacity;
    l->ref = sc->pol[p].capacity;
    snprintf(l->ref_name, sizeof l->ref_name, "%s %lld",
             pol->burst ? "burst" : "limit", (long long)sc->pol[p].capacity);
    if (pol->algo == SL_FIXED_WINDOW || pol->algo == SL_SLIDING_WINDOW)
      l->boundary_ns = pol->period_ns;
  }
}
