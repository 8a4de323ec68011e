#!/bin/sh
# demo.sh — `make run`: sluice replay shows the boundary burst.
#
# One client sends 100 requests at 00:00:59.900 and 100 more at 00:01:00.000,
# 200 requests within 100 ms, against "100 per minute" under each algorithm.
# A fixed window resets at the minute boundary and lets all 200 through; the
# sliding algorithms and the buckets keep to the limit.
set -eu
SLUICE=${SLUICE:-build/sluice}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM

t0=1767225659900 # 2026-01-01T00:00:59.900Z, in ms
awk -v t0="$t0" 'BEGIN {
  print "# T(ms) KEY: 100 requests just before a minute boundary, 100 just after"
  for (i = 0; i < 100; i++) printf "%.0f client\n", t0
  for (i = 0; i < 100; i++) printf "%.0f client\n", t0 + 100
}' >"$tmp/trace"

echo "sluice replay: 200 requests in 100 ms across a minute boundary,"
echo "against a limit of 100 per minute."
echo
printf '  %-28s %8s %8s\n' POLICY ALLOWED DENIED
for policy in fixed_window:100/m sliding_window:100/m sliding_log:100/m \
              token_bucket:100/m gcra:100/m leaky_bucket:100/m; do
  "$SLUICE" replay --policy "$policy" "$tmp/trace" >"$tmp/out"
  awk -v p="$policy" '{ n[$3]++ } END {
    printf "  %-28s %8d %8d\n", p, n["allow"], n["deny"] }' "$tmp/out"
done
echo
echo "fixed_window lets 2x the limit through; here are its last decisions"
echo "before and first after the boundary (sluice replay output):"
"$SLUICE" replay --policy fixed_window:100/m "$tmp/trace" | sed -n '99,102p' | sed 's/^/  /'
echo
echo "and sliding_window's, which denies the second burst:"
"$SLUICE" replay --policy sliding_window:100/m "$tmp/trace" | sed -n '99,102p' | sed 's/^/  /'
echo
echo "Try your own: sluice replay --policy gcra:50/s:burst=100 access.trace"
echo "(one 'T_ms KEY [COST]' per line; see README.md and sluice replay --help)."
