#!/bin/sh
# ui.sh — the page at /ui/ in a real browser: starts `sluice serve`, runs
# tests/ui/ui.test.mjs in the system's headless Chromium (puppeteer-core,
# pinned in tests/ui/package-lock.json, installed by scripts/deps.sh with
# npm ci), and stops everything. The page's figures are compared with
# `sluice sim`'s for the same scenario; the boundary-burst example by its
# button and by REQUEST/BURST/ADVANCE TIME, algorithms switched, the fleet
# quiz, the store taken down, the live view; no console errors, every
# request answered. Bounded: the browser run has UI_SECONDS (180).
#
#   SLUICE=build/sluice sh tests/integration/ui.sh          (make integration)
#   SHOTS=docs/img ...: also writes the screenshots (make screenshots)

. "$(dirname "$0")/serve_lib.sh"
lib_tools="$lib_tools node timeout"
lib_init ui

root=$(cd "$(dirname "$0")/../.." && pwd)
CHROMIUM=${CHROMIUM:-/usr/bin/chromium}
if [ ! -x "$CHROMIUM" ]; then
  fail "no Chromium at $CHROMIUM (scripts/deps.sh test installs Debian's chromium)"
  lib_finish
fi
if [ ! -d "$root/tests/ui/node_modules/puppeteer-core" ]; then
  fail "tests/ui/node_modules is missing (scripts/deps.sh test runs npm ci there)"
  lib_finish
fi
case "$SLUICE" in /*) sl=$SLUICE ;; *) sl=$(pwd)/$SLUICE ;; esac

sv_start ui --resp off || lib_finish
# The browser's profile and crash files go to $tmp, removed on exit.
if HOME=$tmp XDG_CONFIG_HOME=$tmp XDG_CACHE_HOME=$tmp URL=$URL SLUICE=$sl \
  CHROMIUM=$CHROMIUM SHOTS=${SHOTS:-} \
  timeout -k 5 "${UI_SECONDS:-180}" node "$root/tests/ui/ui.test.mjs" >"$tmp/ui.out" 2>&1; then
  pass
else
  fail "the page in Chromium: $(grep -E '^FAIL' "$tmp/ui.out" | head -n 5)$(tail -n 3 "$tmp/ui.out")"
fi
grep -E '^(ok|FAIL):|passed' "$tmp/ui.out" | sed 's/^/  /'
sv_stop ui
lib_finish
