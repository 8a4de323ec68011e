/*
 * svg.c — the lane chart of `sluice sim` and `sluice accuracy` (see svg.h).
 *
 * Coordinates are computed in doubles: they only place pixels, never decide
 * anything, and one decimal is plenty for a renderer. Bars use a square-root
 * scale against the busiest bin of the whole chart, so one request next to a
 * burst of a hundred is still visible and lanes compare directly.
 */
#include "svg.h"

#include <stdlib.h>
#include <string.h>

#include "lab.h"

/* Layout, in pixels. */
#define LEFT 64.0
#define RIGHT 24.0
#define TOP 58.0
#define LANE_H 128.0
#define LEVEL_DY 24.0 /* level area: from lane top + LEVEL_DY ... */
#define LEVEL_H 54.0  /* ... this high */
#define STRIP_DY 84.0 /* bar strip: from lane top + STRIP_DY ... */
#define STRIP_H 36.0  /* ... this high, middle line halfway */

#define FONT "DejaVu Sans, Helvetica, Arial, sans-serif"
#define LEVEL_COLOR "#1f5fbf"

int svg_chart_init(svg_chart *c, size_t nlanes, int64_t t0, int64_t t1) {
  memset(c, 0, sizeof *c);
  if (t1 < t0) t1 = t0;
  c->t0 = t0;
  c->nbins = SVG_PLOT_WIDTH;
  /* Ceiling, and at least 1 ns, so that t1 falls inside the last bin. */
  c->bin_ns = (t1 - t0) / (int64_t)c->nbins + 1;
  c->nlanes = nlanes;
  c->lanes = calloc(nlanes ? nlanes : 1, sizeof *c->lanes);
  if (!c->lanes) return -1;
  for (size_t i = 0; i < nlanes; i++) {
    svg_lane *l = &c->lanes[i];
    l->lv = malloc(c->nbins * 4 * sizeof *l->lv);
    l->has = calloc(c->nbins, 1);
    l->count = calloc(c->nbins * SVG_KINDS, sizeof *l->count);
    l->level_max = 1;
    l->ref = -1;
    if (!l->lv || !l->has || !l->count) {
      svg_chart_free(c);
      return -1;
    }
  }
  return 0;
}

void svg_chart_free(svg_chart *c) {
  for (size_t i = 0; c->lanes && i < c->nlanes; i++) {
    free(c->lanes[i].lv);
    free(c->lanes[i].has);
    free(c->lanes[i].count);
  }
  free(c->lanes);
  c->lanes = NULL;
  c->nlanes = 0;
}

size_t svg_bin(const svg_chart *c, int64_t t) {
  if (t <= c->t0) return 0;
  int64_t i = (t - c->t0) / c->bin_ns;
  return i >= (int64_t)c->nbins ? c->nbins - 1 : (size_t)i;
}

int64_t svg_bin_start(const svg_chart *c, size_t i) {
  return c->t0 + (int64_t)i * c->bin_ns;
}

void svg_level(svg_chart *c, size_t lane, int64_t t, int64_t v) {
  svg_lane *l = &c->lanes[lane];
  size_t b = svg_bin(c, t);
  int64_t *q = &l->lv[b * 4];
  if (!l->has[b]) {
    q[0] = q[1] = q[2] = v;
    l->has[b] = 1;
  }
  if (v < q[1]) q[1] = v;
  if (v > q[2]) q[2] = v;
  q[3] = v;
}

void svg_count(svg_chart *c, size_t lane, int64_t t, int kind, uint64_t n) {
  if (kind < 0 || kind >= SVG_KINDS) return;
  c->lanes[lane].count[svg_bin(c, t) * SVG_KINDS + (size_t)kind] += n;
}

/* Length of the valid UTF-8 sequence at s allowed in XML, or 0. */
static size_t utf8_len(const unsigned char *s) {
  unsigned char c = s[0];
  if (c < 0x80) return 1;
  size_t n;
  unsigned char lo = 0x80, hi = 0xBF;
  if (c >= 0xC2 && c <= 0xDF) {
    n = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    n = 3;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F; /* no surrogates */
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  if (s[1] < lo || s[1] > hi) return 0;
  for (size_t i = 2; i < n; i++)
    if (s[i] < 0x80 || s[i] > 0xBF) return 0;
  /* U+FFFE and U+FFFF are not XML characters. */
  if (c == 0xEF && s[1] == 0xBF && (s[2] == 0xBE || s[2] == 0xBF)) return 0;
  return n;
}

void svg_escape(FILE *f, const char *str) {
  const unsigned char *s = (const unsigned char *)str;
  while (*s) {
    switch (*s) {
    case '&': fputs("&amp;", f); s++; continue;
    case '<': fputs("&lt;", f); s++; continue;
    case '>': fputs("&gt;", f); s++; continue;
    case '"': fputs("&quot;", f); s++; continue;
    case '\'': fputs("&#39;", f); s++; continue;
    default: break;
    }
    if (*s < 0x20 && *s != '\t') {
      fputc('?', f);
      s++;
      continue;
    }
    size_t n = utf8_len(s);
    if (n == 0) {
      fputc('?', f);
      s++;
      continue;
    }
    fwrite(s, 1, n, f);
    s += n;
  }
}

/* floor(sqrt(v)) for 64-bit v. */
static uint64_t isqrt64(uint64_t v) {
  uint64_t r = 0;
  for (uint64_t bit = (uint64_t)1 << 62; bit; bit >>= 2) {
    if (v >= r + bit) {
      v -= r + bit;
      r = (r >> 1) + bit;
    } else {
      r >>= 1;
    }
  }
  return r;
}

/* Bar height for n events when the busiest bin holds max: sqrt scale. */
static double bar_height(uint64_t n, uint64_t max, double full) {
  if (n == 0 || max == 0) return 0;
  /* sqrt(n / max) with 16 fractional bits, in integers (no libm). */
  __extension__ unsigned __int128 q = ((unsigned __int128)n << 32) / max;
  double h = full * (double)isqrt64((uint64_t)q) / 65536.0;
  return h < 1.5 ? 1.5 : h;
}

/* A tick spacing giving at most 8 ticks over span: 1-2-5 steps, then
   the usual clock steps from a second up. */
static int64_t tick_step(int64_t span) {
  static const int64_t clock[] = {
      INT64_C(1000000000),     INT64_C(2000000000),     INT64_C(5000000000),
      INT64_C(10000000000),    INT64_C(15000000000),    INT64_C(30000000000),
      INT64_C(60000000000),    INT64_C(120000000000),   INT64_C(300000000000),
      INT64_C(600000000000),   INT64_C(900000000000),   INT64_C(1800000000000),
      INT64_C(3600000000000),  INT64_C(7200000000000),  INT64_C(10800000000000),
      INT64_C(21600000000000), INT64_C(43200000000000), INT64_C(86400000000000)};
  for (int64_t p = 1; p < INT64_C(1000000000); p *= 10) {
    if (p * 1 * 8 >= span) return p;
    if (p * 2 * 8 >= span) return p * 2;
    if (p * 5 * 8 >= span) return p * 5;
  }
  for (size_t i = 0; i < sizeof clock / sizeof clock[0]; i++)
    if (clock[i] * 8 >= span) return clock[i];
  int64_t d = INT64_C(86400000000000);
  int64_t k = span / (8 * d) + 1;
  return k * d;
}

static double xpos(const svg_chart *c, int64_t t) {
  return LEFT + (double)(t - c->t0) / (double)c->bin_ns;
}

static double ypos(const svg_lane *l, double top, int64_t v) {
  double max = (double)l->level_max;
  double r = (double)v / max;
  if (r < 0) r = 0;
  if (r > 1.08) r = 1.08;
  return top + LEVEL_H * (1.0 - r);
}

/* Tenths of a pixel: coordinates are written with one decimal, and two
   points that print alike are alike. */
static long tenths(double v) { return (long)(v * 10.0 + (v < 0 ? -0.5 : 0.5)); }

/* Writes v to one decimal, without a trailing ".0" (plots are mostly
   numbers; this keeps them small). */
static void put_num(FILE *f, double v) {
  long t = tenths(v);
  if (t % 10 == 0)
    fprintf(f, "%ld", t / 10);
  else
    fprintf(f, "%s%ld.%ld", t < 0 ? "-" : "", labs(t) / 10, labs(t) % 10);
}

/* The level line of one lane: per bin its first value, its extremes when
   they lie outside first..last, and its last value; a point in the middle
   of a straight horizontal or vertical run is left out (long flat stretches
   cost two points, not hundreds). */
static void draw_level(const svg_chart *c, const svg_lane *l, double top,
                       FILE *f) {
  enum { MAXPTS = 4 * SVG_PLOT_WIDTH };
  static __thread double px[MAXPTS], py[MAXPTS];
  size_t n = 0;
  for (size_t b = 0; b < c->nbins && n + 4 <= MAXPTS; b++) {
    if (!l->has[b]) continue;
    const int64_t *q = &l->lv[b * 4];
    double xl = LEFT + (double)b, xr = xl + 1.0, xm = xl + 0.5;
    int64_t a = q[0] < q[3] ? q[0] : q[3], z = q[0] < q[3] ? q[3] : q[0];
    if (q[1] == q[2]) { /* one value all through the bin: one point */
      px[n] = xm, py[n++] = ypos(l, top, q[0]);
      continue;
    }
    px[n] = xl, py[n++] = ypos(l, top, q[0]);
    if (q[2] > z) px[n] = xm, py[n++] = ypos(l, top, q[2]);
    if (q[1] < a) px[n] = xm, py[n++] = ypos(l, top, q[1]);
    px[n] = xr, py[n++] = ypos(l, top, q[3]);
  }
  if (n == 0) return;
  fprintf(f, "<polyline fill=\"none\" stroke=\"" LEVEL_COLOR
             "\" stroke-width=\"1.6\" stroke-linejoin=\"round\" points=\"");
  for (size_t i = 0; i < n; i++) {
    if (i > 0 && i + 1 < n) {
      int flat = tenths(py[i - 1]) == tenths(py[i]) &&
                 tenths(py[i]) == tenths(py[i + 1]);
      int upright = tenths(px[i - 1]) == tenths(px[i]) &&
                    tenths(px[i]) == tenths(px[i + 1]);
      if (flat || upright) continue;
    }
    put_num(f, px[i]);
    fputc(',', f);
    put_num(f, py[i]);
    fputc(' ', f);
  }
  fprintf(f, "\"/>\n");
}

/*
 * The bars of one lane: per kind one path of rectangles, kinds drawn up
 * stacked above the strip's middle and the others below it; neighbouring
 * bins whose bars print alike become one rectangle.
 */
static void draw_bars(const svg_chart *c, const svg_lane *l, double mid,
                      uint64_t maxcount, FILE *f) {
  static __thread double up[SVG_PLOT_WIDTH], down[SVG_PLOT_WIDTH];
  static __thread double by[SVG_PLOT_WIDTH], bh[SVG_PLOT_WIDTH];
  const double half = STRIP_H / 2 - 1;
  size_t nb = c->nbins < SVG_PLOT_WIDTH ? c->nbins : SVG_PLOT_WIDTH;
  for (size_t b = 0; b < nb; b++) up[b] = down[b] = 0;
  for (int k = 0; k < SVG_KINDS; k++) {
    if (!c->kinds[k].name) continue;
    int any = 0;
    for (size_t b = 0; b < nb; b++) {
      uint64_t n = l->count[b * SVG_KINDS + (size_t)k];
      double *acc = c->kinds[k].down ? &down[b] : &up[b];
      double h = bar_height(n, maxcount, half);
      if (*acc + h > half) h = half - *acc;
      if (h <= 0) {
        bh[b] = 0;
        continue;
      }
      by[b] = c->kinds[k].down ? mid + *acc : mid - *acc - h;
      bh[b] = h;
      *acc += h;
      any = 1;
    }
    if (!any) continue;
    fprintf(f, "<path fill=\"%s\" d=\"", c->kinds[k].color);
    for (size_t b = 0; b < nb;) {
      if (bh[b] <= 0) {
        b++;
        continue;
      }
      size_t e = b + 1;
      while (e < nb && bh[e] > 0 && tenths(by[e]) == tenths(by[b]) &&
             tenths(bh[e]) == tenths(bh[b]))
        e++;
      fputc('M', f);
      put_num(f, LEFT + (double)b - 0.5);
      fputc(' ', f);
      put_num(f, by[b]);
      fprintf(f, "h%zuv", e - b + 1);
      put_num(f, bh[b]);
      fprintf(f, "h-%zuz", e - b + 1);
      b = e;
    }
    fprintf(f, "\"/>\n");
  }
}

static void draw_lane(const svg_chart *c, const svg_lane *l, double y0,
                      uint64_t maxcount, int64_t step, FILE *f) {
  double lt = y0 + LEVEL_DY, st = y0 + STRIP_DY, mid = st + STRIP_H / 2;
  double xr = LEFT + (double)c->nbins;

  fprintf(f, "<g>\n<text x=\"%.1f\" y=\"%.1f\" font-size=\"13\" "
             "font-weight=\"bold\">", LEFT, y0 + 14);
  svg_escape(f, l->title);
  fprintf(f, "</text>\n<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\" "
             "fill=\"#555\" text-anchor=\"end\">", xr, y0 + 14);
  svg_escape(f, l->note);
  fprintf(f, "</text>\n");

  /* Frames: the level area and the bar strip. */
  fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%zu\" height=\"%.1f\" "
             "fill=\"#fafafa\" stroke=\"#ccc\"/>\n", LEFT, lt, c->nbins,
          LEVEL_H);
  fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%zu\" height=\"%.1f\" "
             "fill=\"#fafafa\" stroke=\"#ccc\"/>\n", LEFT, st, c->nbins,
          STRIP_H);
  fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" "
             "stroke=\"#ccc\"/>\n", LEFT, mid, xr, mid);

  /* Grid at the time ticks. */
  int64_t t1 = svg_bin_start(c, c->nbins);
  for (int64_t t = (c->t0 + step - 1) / step * step; t <= t1; t += step)
    fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" "
               "stroke=\"#e6e6e6\"/>\n", xpos(c, t), lt, xpos(c, t),
            st + STRIP_H);

  /* Window boundaries, when there are few enough to mean something. */
  if (l->boundary_ns > 0) {
    int64_t first = (c->t0 + l->boundary_ns - 1) / l->boundary_ns;
    int64_t last = t1 / l->boundary_ns;
    if (last >= first && last - first < 120)
      for (int64_t k = first; k <= last; k++) {
        double x = xpos(c, k * l->boundary_ns);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" "
                   "stroke=\"#777\" stroke-dasharray=\"4,3\"/>\n", x, lt - 2,
                x, st + STRIP_H);
      }
  }

  /* Y labels; the reference line is named on the axis when it is the top
     of the scale (a bucket's burst, a window's limit), beside it if not. */
  int ref_on_top = l->ref == l->level_max;
  fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"10\" fill=\"#333\" "
             "text-anchor=\"end\">", LEFT - 5, lt + 4);
  if (ref_on_top)
    svg_escape(f, l->ref_name);
  else
    fprintf(f, "%lld", (long long)l->level_max);
  fprintf(f, "</text>\n<text x=\"%.1f\" y=\"%.1f\" font-size=\"10\" "
             "fill=\"#555\" text-anchor=\"end\">0</text>\n", LEFT - 5,
          lt + LEVEL_H);
  if (l->level_name) {
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"10\" fill=\""
               LEVEL_COLOR "\" text-anchor=\"end\">", LEFT - 5,
            lt + LEVEL_H / 2 + 4);
    svg_escape(f, l->level_name);
    fprintf(f, "</text>\n");
  }

  /* Reference line (the limit). */
  if (l->ref >= 0) {
    double y = ypos(l, lt, l->ref);
    fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" "
               "stroke=\"#333\" stroke-width=\"1\" "
               "stroke-dasharray=\"6,3\"/>\n", LEFT, y, xr, y);
    if (!ref_on_top) {
      fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"10\" "
                 "fill=\"#333\" text-anchor=\"end\">", LEFT - 5, y + 4);
      svg_escape(f, l->ref_name);
      fprintf(f, "</text>\n");
    }
  }

  draw_bars(c, l, mid, maxcount, f);
  draw_level(c, l, lt, f);
  fprintf(f, "</g>\n");
}

/* Width estimate of an 11 px legend text: about 6.5 px a character. */
static double text_w(const char *s) { return 6.5 * (double)strlen(s); }

/*
 * Lays out the legend from (LEFT, y) and draws it when f is set: the level
 * line, the limit, window boundaries, then every kind of bar, wrapping to a
 * new row where the next item would pass the plot's right edge. Returns the
 * number of rows.
 */
static int legend(const svg_chart *c, FILE *f, double y) {
  const char *lvl = c->level_legend[0] ? c->level_legend : "level";
  double right = LEFT + (double)c->nbins, x = LEFT;
  int rows = 1;
  for (int item = 0; item < 3 + SVG_KINDS; item++) {
    const char *text = item == 0 ? lvl
                       : item == 1 ? "limit"
                       : item == 2 ? "window boundary"
                                   : c->kinds[item - 3].name;
    if (!text) continue;
    double w = 22 + text_w(text) + 24;
    if (x > LEFT && x + w - 24 > right) {
      x = LEFT;
      y += 16;
      rows++;
    }
    if (f) {
      if (item == 0)
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" "
                   "stroke=\"" LEVEL_COLOR "\" stroke-width=\"2\"/>", x,
                y - 4, x + 18, y - 4);
      else if (item == 1)
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" "
                   "stroke=\"#333\" stroke-dasharray=\"6,3\"/>", x, y - 4,
                x + 18, y - 4);
      else if (item == 2)
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" "
                   "stroke=\"#777\" stroke-dasharray=\"4,3\"/>", x + 9,
                y - 12, x + 9, y + 2);
      else
        fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"12\" "
                   "height=\"10\" fill=\"%s\"/>", x + 3, y - 9,
                c->kinds[item - 3].color);
      fprintf(f, "<text x=\"%.1f\" y=\"%.1f\">", x + 22, y);
      svg_escape(f, text);
      fprintf(f, "</text>\n");
    }
    x += w;
  }
  return rows;
}

int svg_chart_write(const svg_chart *c, FILE *f) {
  double width = LEFT + (double)c->nbins + RIGHT;
  /* The subtitle's lines push the lanes down. */
  char sub[sizeof c->subtitle];
  snprintf(sub, sizeof sub, "%s", c->subtitle);
  char *lines[6];
  int nsub = 0;
  for (char *p = sub, *e; p && nsub < 6; p = e ? e + 1 : NULL) {
    e = strchr(p, '\n');
    if (e) *e = '\0';
    lines[nsub++] = p;
  }
  double top = TOP + 15.0 * (nsub > 1 ? nsub - 1 : 0);
  double lanes_end = top + LANE_H * (double)c->nlanes;
  double height = lanes_end + 46 + 16.0 * legend(c, NULL, 0);
  int64_t t1 = svg_bin_start(c, c->nbins);
  int64_t step = tick_step(t1 - c->t0);
  uint64_t maxcount = 0;
  for (size_t i = 0; i < c->nlanes; i++)
    for (size_t j = 0; j < c->nbins * SVG_KINDS; j++)
      if (c->lanes[i].count[j] > maxcount) maxcount = c->lanes[i].count[j];

  fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
             "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" "
             "height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\" font-family=\"" FONT
             "\">\n<title>", width, height, width, height);
  svg_escape(f, c->title);
  fprintf(f, "</title>\n<rect width=\"100%%\" height=\"100%%\" "
             "fill=\"white\"/>\n<text x=\"%.1f\" y=\"22\" font-size=\"16\" "
             "font-weight=\"bold\">", LEFT);
  svg_escape(f, c->title);
  fprintf(f, "</text>\n");
  for (int i = 0; i < nsub; i++) {
    fprintf(f, "<text x=\"%.1f\" y=\"%d\" font-size=\"12\" "
               "fill=\"#444\">", LEFT, 40 + 15 * i);
    svg_escape(f, lines[i]);
    fprintf(f, "</text>\n");
  }

  for (size_t i = 0; i < c->nlanes; i++)
    draw_lane(c, &c->lanes[i], top + LANE_H * (double)i, maxcount, step, f);

  /* Time axis. */
  double ya = lanes_end - 6;
  fprintf(f, "<g font-size=\"10\" fill=\"#333\" text-anchor=\"middle\">\n");
  char buf[40];
  for (int64_t t = (c->t0 + step - 1) / step * step; t <= t1; t += step) {
    double x = xpos(c, t);
    fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" "
               "stroke=\"#333\"/>\n<text x=\"%.1f\" y=\"%.1f\">%s</text>\n",
            x, ya, x, ya + 4, x, ya + 15, lab_fmt_short(t, buf, sizeof buf));
  }
  fprintf(f, "</g>\n");

  /* Legend: the items left to right, wrapped to the plot's width. */
  fprintf(f, "<g font-size=\"11\" fill=\"#222\">\n");
  legend(c, f, ya + 36);
  fprintf(f, "</g>\n</svg>\n");
  return ferror(f) ? -1 : 0;
}
