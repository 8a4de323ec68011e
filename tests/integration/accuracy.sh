#!/bin/sh
# accuracy.sh — integration checks for `sluice accuracy` (POSIX sh).
#
#   SLUICE=build/sluice sh tests/integration/accuracy.sh      (make integration)
#
# Every check runs, each failure is printed as "FAIL: <check>: <why>", and the
# script exits 1 if any check failed, 0 otherwise. The checks are properties
# the algorithms' definitions guarantee (docs/semantics.md), not recorded
# figures: sliding_log is the ideal and scores zero on every trace; a fixed
# window never denies falsely and doubles the limit at a boundary; the
# bucket algorithms decide alike; output is a function of the seed. Most runs
# use shorter traces (--windows, --keys) to stay fast under sanitizers.

. "$(dirname "$0")/check_lib.sh"
lib_init accuracy

sl() {
  "$SLUICE" "$@" </dev/null >"$tmp/out" 2>"$tmp/err"
  rc=$?
}

want_rc() {
  if [ "$rc" -eq "$2" ]; then pass; else
    fail "$1: exit status $rc, want $2 (stderr: $(head -n 1 "$tmp/err" | cut -c1-200))"
  fi
}

has() {
  if grep -Eq -- "$3" "$2"; then pass; else
    fail "$1: no line matches /$3/ (first line: $(head -n 1 "$2" | cut -c1-200))"
  fi
}

# check NAME AWK-CONDITION — every accuracy line of $tmp/out (fields split
# into an array f by name) for which the awk program prints nothing passes;
# a printed line is the offending one.
check() {
  awk -v cond="$2" '
    /^accuracy / {
      delete f
      for (i = 2; i <= NF; i++) { split($i, kv, "="); f[kv[1]] = kv[2] }
      print f["trace"], f["algo"], f["requests"], f["false_allow_pct"],
            f["false_deny_pct"], f["worst_window"], f["limit"]
    }' "$tmp/out" >"$tmp/fields"
  awk "$2" "$tmp/fields" >"$tmp/bad"
  if [ -s "$tmp/bad" ]; then
    fail "$1: $(head -n 3 "$tmp/bad" | tr '\n' ';')"
  else pass; fi
}

TRACES="poisson-0.5x poisson-1x poisson-2x on-off boundary many-keys"
ALGOS="token_bucket leaky_bucket fixed_window sliding_log sliding_window gcra"
SHORT="--windows 10 --keys 20000"

# --------------------------------------------------------------------------
# (a) the output: one exact line per trace and algorithm, then the table
# --------------------------------------------------------------------------
sl accuracy $SHORT --svg "$tmp/svg"
want_rc "accuracy" 0
cp "$tmp/out" "$tmp/run1"
n=0
for t in $TRACES; do
  for a in $ALGOS; do
    has "line for $t/$a" "$tmp/out" \
      "^accuracy trace=$t algo=$a requests=[0-9]+ false_allow_pct=[0-9]+\\.[0-9]{3} false_deny_pct=[0-9]+\\.[0-9]{3} worst_window=[0-9]+ limit=100\$"
    n=$((n + 1))
  done
done
if [ "$(grep -c '^accuracy ' "$tmp/out")" -eq "$n" ]; then pass; else
  fail "$(grep -c '^accuracy ' "$tmp/out") accuracy lines, want $n"
fi
has "table header" "$tmp/out" '^\| trace \| algorithm \| requests \| false allow % \| false deny % \| worst window \| limit \|$'
has "table alignment row" "$tmp/out" '^\|---\|---\|---:\|---:\|---:\|---:\|---:\|$'
# The table holds the same figures as the lines, in the same order.
sed -n 's/^accuracy trace=\([^ ]*\) algo=\([^ ]*\) requests=\([^ ]*\) false_allow_pct=\([^ ]*\) false_deny_pct=\([^ ]*\) worst_window=\([^ ]*\) limit=\([^ ]*\)$/| \1 | \2 | \3 | \4 | \5 | \6 | \7 |/p' \
  "$tmp/out" >"$tmp/want_table"
grep '^| [a-z]' "$tmp/out" | grep -v '^| trace ' >"$tmp/got_table"
if cmp -s "$tmp/want_table" "$tmp/got_table"; then pass; else
  fail "the Markdown table differs from the accuracy lines"
fi

# --------------------------------------------------------------------------
# (b) what the definitions guarantee
# --------------------------------------------------------------------------
# sliding_log is the ideal: no false allow, no false deny, never over L.
check "sliding_log is exact on every trace" \
  '$2 == "sliding_log" && ($4 != "0.000" || $5 != "0.000" || $6 > $7)'
# A fixed window's window lies inside the trailing one, so whatever it
# denies would not have fitted: never a false deny. At most 2L in a window.
check "fixed_window never denies falsely" \
  '$2 == "fixed_window" && ($5 != "0.000" || $6 > 2 * $7)'
# The boundary attacker gets exactly 2L through a fixed window.
check "fixed_window lets 2L through at the boundary" \
  '$1 == "boundary" && $2 == "fixed_window" && $6 != 2 * $7'
check "sliding_log keeps the boundary attacker to L" \
  '$1 == "boundary" && $2 == "sliding_log" && $6 != $7'
# Buckets with burst L refilling L per W: at most B + L in a window.
check "buckets stay within burst + limit" \
  '($2 ~ /bucket|gcra/) && $6 > 2 * $7'
# At half the limit there is nothing to get wrong.
check "poisson-0.5x: nobody is wrong" \
  '$1 == "poisson-0.5x" && ($4 != "0.000" || $5 != "0.000")'
# Every algorithm sees the whole trace.
check "same request count for every algorithm of a trace" \
  '{ if ($1 in n && n[$1] != $3) print; n[$1] = $3 }'
# token_bucket, leaky_bucket and gcra make the same decisions.
for t in $TRACES; do
  grep "^accuracy trace=$t algo=\\(token_bucket\\|leaky_bucket\\|gcra\\) " \
    "$tmp/out" | sed 's/ algo=[a-z_]*//' | sort -u >"$tmp/buckets"
  if [ "$(wc -l <"$tmp/buckets")" -eq 1 ]; then pass; else
    fail "$t: token_bucket, leaky_bucket and gcra differ: $(tr '\n' ';' <"$tmp/buckets")"
  fi
done
# Poisson at 1x and 2x the limit: a trace long enough to matter.
check "poisson traces have their size" \
  '($1 == "poisson-1x" && $3 != 1000) || ($1 == "poisson-2x" && $3 != 2000)'

# --------------------------------------------------------------------------
# (c) determinism, trace selection, plots
# --------------------------------------------------------------------------
sl accuracy $SHORT
if cmp -s "$tmp/run1" "$tmp/out"; then pass; else
  fail "same seed, different output"
fi
sl accuracy $SHORT --seed 2
if cmp -s "$tmp/run1" "$tmp/out"; then
  fail "seeds 1 and 2 give identical output"
else pass; fi

# A trace alone gives the lines it gives in the full run.
sl accuracy $SHORT --trace on-off,boundary
want_rc "--trace on-off,boundary" 0
grep '^accuracy trace=\(on-off\|boundary\) ' "$tmp/run1" >"$tmp/want"
grep '^accuracy ' "$tmp/out" >"$tmp/got"
if cmp -s "$tmp/want" "$tmp/got"; then pass; else
  fail "--trace: lines differ from the full run's"
fi

for t in $TRACES; do
  f="$tmp/svg/accuracy-$t.svg"
  if [ ! -s "$f" ]; then
    fail "--svg: no $f"
  elif ! command -v xmllint >/dev/null 2>&1; then
    fail "--svg: xmllint is missing (scripts/deps.sh build installs libxml2-utils)"
  elif xmllint --noout "$f" 2>"$tmp/xmlerr"; then
    pass
    has "chart $t has a lane per algorithm" "$f" '>gcra</text>'
  else
    fail "--svg: $f is not well-formed: $(head -n 2 "$tmp/xmlerr")"
  fi
done

# Another limit and period: 10 per second.
sl accuracy --limit 10 --period s --windows 20 --trace boundary
want_rc "--limit 10 --period s" 0
has "--limit 10: fixed window doubles it" "$tmp/out" \
  '^accuracy trace=boundary algo=fixed_window requests=200 .* worst_window=20 limit=10$'

# The many-keys trace at its default size of sources (100 000), over 20
# windows: 200 000 requests judged per key. (The full default run takes
# well under a second here, but several under TSan.)
sl accuracy --trace many-keys --windows 20
want_rc "many-keys, 100 000 sources" 0
check "many-keys: sliding_log is exact" \
  '$2 == "sliding_log" && ($4 != "0.000" || $5 != "0.000" || $6 > $7)'
has "many-keys: its size" "$tmp/out" \
  '^accuracy trace=many-keys algo=gcra requests=200000 '

# docs/algorithms.md holds the default run's table (make docs); the cheap
# traces of it must be today's.
DOCS=${DOCS:-docs}
sl accuracy --trace poisson-0.5x,poisson-1x,on-off,boundary
grep '^| [a-z]' "$tmp/out" | grep -v '^| trace ' >"$tmp/rows"
while IFS= read -r row; do
  if grep -qxF -- "$row" "$DOCS/algorithms.md"; then pass; else
    fail "docs/algorithms.md is stale (run make docs): no row '$row'"
  fi
done <"$tmp/rows"

# --------------------------------------------------------------------------
# (d) errors and help
# --------------------------------------------------------------------------
sl accuracy --trace nope
want_rc "unknown trace" 2
has "unknown trace (message)" "$tmp/err" "no trace 'nope'"
sl accuracy --period 5x
want_rc "bad period" 2
has "bad period (message)" "$tmp/err" "period"
sl accuracy --limit 0
want_rc "zero limit" 2
sl accuracy --seed abc
want_rc "bad seed" 2
sl accuracy extra
want_rc "extra argument" 2
sl accuracy --list-traces
want_rc "--list-traces" 0
for t in $TRACES; do has "--list-traces lists $t" "$tmp/out" "^$t "; done
sl accuracy --help
want_rc "accuracy --help" 0
has "accuracy --help shows the line format" "$tmp/out" \
  'accuracy trace=NAME algo=ALGO requests=N false_allow_pct=X false_deny_pct=Y worst_window=K limit=L'
for o in --seed --trace --svg; do has "accuracy --help: $o" "$tmp/out" "$o"; done
sl --help
has "sluice --help lists accuracy" "$tmp/out" '^  accuracy '

# --------------------------------------------------------------------------
lib_finish
