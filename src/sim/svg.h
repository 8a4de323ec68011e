/*
 * svg.h — the one chart `sluice sim` and `sluice accuracy` draw: time on the
 * x axis and one lane per policy (or algorithm). A lane holds a level line
 * (tokens, a window count, a window total) against a dashed reference (the
 * limit), window boundaries, and a strip of bars per time bin counting
 * events of up to SVG_KINDS kinds (allowed above the strip's middle, denied
 * below, say). A legend names everything, so the picture reads on its own.
 *
 * Callers fill bins while they run (memory is fixed by the number of bins,
 * never by the number of events) and write the chart once at the end.
 * SVG is text: it is written directly, every string escaped, so the output
 * is well-formed XML whatever bytes a scenario put into a name.
 */
#ifndef SLUICE_SVG_H
#define SLUICE_SVG_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define SVG_KINDS 3
#define SVG_PLOT_WIDTH 880 /* pixels of the time axis: one bin per pixel */

typedef struct svg_kind {
  const char *name;  /* legend text; NULL = kind unused */
  const char *color; /* CSS colour */
  int down;          /* 1: drawn below the strip's middle line */
} svg_kind;

typedef struct svg_lane {
  char title[200];        /* left, bold: "fixed  fixed_window:100/m" */
  char note[200];         /* right: "allowed 200, denied 0, max in window 200" */
  const char *level_name; /* "tokens", "count", ...; shown on the y axis */
  int64_t level_max;      /* top of the y scale (> 0) */
  int64_t ref;            /* dashed line at this level (< 0: none) */
  char ref_name[48];      /* its label, "limit 100" */
  int64_t boundary_ns;    /* a dashed line at every multiple (0: none) */
  /* per bin: first, lowest, highest, last level seen */
  int64_t *lv;
  uint8_t *has;
  uint64_t *count; /* SVG_KINDS per bin */
} svg_lane;

typedef struct svg_chart {
  char title[256];
  char subtitle[640]; /* up to 6 lines, separated by '\n' */
  int64_t t0, bin_ns; /* bin i covers [t0 + i*bin_ns, t0 + (i+1)*bin_ns) */
  size_t nbins;
  svg_kind kinds[SVG_KINDS];
  char level_legend[160]; /* legend text for the level line */
  size_t nlanes;
  svg_lane *lanes;
} svg_chart;

/*
 * Allocates a chart of nlanes empty lanes over [t0, t1] (t1 >= t0) with
 * SVG_PLOT_WIDTH bins. Returns 0, or -1 out of memory (nothing to free).
 */
int svg_chart_init(svg_chart *c, size_t nlanes, int64_t t0, int64_t t1);
void svg_chart_free(svg_chart *c);

/* The bin holding time t, clamped to the chart. */
size_t svg_bin(const svg_chart *c, int64_t t);
/* The start time of bin i (i <= nbins: nbins gives the chart's end). */
int64_t svg_bin_start(const svg_chart *c, size_t i);

/* Records a level v of lane `lane` seen at time t (in time order). */
void svg_level(svg_chart *c, size_t lane, int64_t t, int64_t v);
/* Adds n events of `kind` to lane `lane` at time t. */
void svg_count(svg_chart *c, size_t lane, int64_t t, int kind, uint64_t n);

/* Writes the chart as a standalone SVG document. 0, or -1 on an I/O error. */
int svg_chart_write(const svg_chart *c, FILE *f);

/* Writes s as XML character data: markup escaped, control characters and
   invalid UTF-8 replaced by '?'. */
void svg_escape(FILE *f, const char *s);

#endif /* SLUICE_SVG_H */
