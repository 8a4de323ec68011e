/*
 * sim_fuzz.c — libFuzzer harness for `sluice sim`'s scenario language
 * (untrusted: scenarios are shared and pasted from anywhere). The bytes are
 * a scenario; it is parsed and, when accepted, run with the timeline, the
 * summary and the plot written to memory.
 * Properties: no crash or sanitizer report; a rejected scenario has a
 * "line N: " message; an accepted one runs to completion with exactly one
 * summary line per policy, and its plot is a complete SVG document; its
 * JSON (what the daemon's POST /v1/sim answers) is one document that
 * starts with '{' and ends with "]}\n", with no byte below 0x20 or above
 * 0x7e inside (every string is escaped).
 * The request cap is lowered so that every input runs in milliseconds.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../src/sim/sim.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > 1 << 16) return 0;
  sim_scenario *sc = NULL;
  char err[512] = "";
  if (sim_parse((const char *)data, size, 5000, &sc, err, sizeof err)) {
    if (strncmp(err, "line ", 5) != 0) abort();
    return 0;
  }
  char *out = NULL, *svg = NULL;
  size_t out_len = 0, svg_len = 0;
  FILE *fout = open_memstream(&out, &out_len);
  FILE *fsvg = open_memstream(&svg, &svg_len);
  if (!fout || !fsvg) abort();
  /* The seed comes from the input too, so jitter paths are explored. */
  sim_options so = {.name = "fuzz", .all_steps = size & 1, .color = size & 2,
                    .seed = size, .svg = fsvg};
  if (sim_run(sc, &so, fout, err, sizeof err)) abort();
  fclose(fout);
  fclose(fsvg);
  int summaries = 0;
  for (const char *p = out; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
    summaries += strncmp(p, "summary policy=", 15) == 0;
  if (summaries != sim_npolicies(sc)) abort();
  if (svg_len < 6 || strncmp(svg, "<?xml", 5) != 0 ||
      !strstr(svg, "</svg>\n"))
    abort();
  char *js = NULL;
  size_t js_len = 0;
  FILE *fjs = open_memstream(&js, &js_len);
  if (!fjs) abort();
  sim_options jo = {.name = "fuzz", .seed = size, .json = fjs};
  if (sim_run(sc, &jo, fjs, err, sizeof err)) abort();
  fclose(fjs);
  if (js_len < 4 || js[0] != '{' || strcmp(js + js_len - 3, "]}\n") != 0)
    abort();
  for (size_t i = 0; i + 1 < js_len; i++)
    if ((unsigned char)js[i] < 0x20 || (unsigned char)js[i] > 0x7e) abort();
  free(js);
  free(out);
  free(svg);
  sim_free(sc);
  return 0;
}
