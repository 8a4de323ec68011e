#!/bin/sh
# sim.sh — integration checks for `sluice sim` (POSIX sh).
#
#   SLUICE=build/sluice sh tests/integration/sim.sh          (make integration)
#
# Every check runs, each failure is printed as "FAIL: <check>: <why>", and the
# script exits 1 if any check failed, 0 otherwise. The built-in examples are
# compared with golden files (tests/golden/sim-*.txt, reviewed by hand when
# recorded); the small scenarios below have expectations derived from the
# algorithms' definitions in the comments beside them. Plots are checked
# with xmllint (Debian's libxml2-utils, installed by scripts/deps.sh).

. "$(dirname "$0")/check_lib.sh"
lib_init sim
GOLDEN=${GOLDEN:-tests/golden}

# sl ARGS... — runs "$SLUICE ARGS..." with stdin from $tmp/in (if present);
# stdout in $tmp/out, stderr in $tmp/err, exit status in $rc.
sl() {
  if [ -f "$tmp/in" ]; then
    "$SLUICE" "$@" <"$tmp/in" >"$tmp/out" 2>"$tmp/err"
  else
    "$SLUICE" "$@" </dev/null >"$tmp/out" 2>"$tmp/err"
  fi
  rc=$?
}

# scenario LINE... — writes the lines as the scenario on standard input.
scenario() { printf '%s\n' "$@" >"$tmp/in"; }

want_rc() {
  if [ "$rc" -eq "$2" ]; then pass; else
    fail "$1: exit status $rc, want $2 (stderr: $(head -n 1 "$tmp/err" | cut -c1-200))"
  fi
}

same() {
  if cmp -s "$2" "$3"; then pass; else
    fail "$1: output differs from the expected text (< expected, > actual)"
    diff "$2" "$3" 2>&1 | head -n 20 | sed 's/^/    /' >&2
  fi
}

# has NAME FILE ERE — FILE must contain a line matching ERE.
has() {
  if grep -Eq -- "$3" "$2"; then pass; else
    fail "$1: no line matches /$3/ (first line: $(head -n 1 "$2" | cut -c1-200))"
  fi
}

# hasnt NAME FILE ERE — FILE must not contain a line matching ERE.
hasnt() {
  if grep -Eq -- "$3" "$2"; then
    fail "$1: a line matches /$3/: $(grep -E -- "$3" "$2" | head -n 1 | cut -c1-200)"
  else pass; fi
}

# summary NAME POLICY ALLOWED DENIED MAX — the last run's summary line.
summary() {
  has "$1" "$tmp/out" "^summary policy=$2 allowed=$3 denied=$4 max_in_window=$5\$"
}

# well_formed NAME FILE — FILE is well-formed XML with an <svg> root.
well_formed() {
  if ! command -v xmllint >/dev/null 2>&1; then
    fail "$1: xmllint is missing (scripts/deps.sh build installs libxml2-utils)"
  elif xmllint --noout "$2" 2>"$tmp/xmlerr" &&
    [ "$(xmllint --xpath 'local-name(/*)' "$2" 2>/dev/null)" = svg ]; then
    pass
  else
    fail "$1: not a well-formed SVG document: $(head -n 2 "$tmp/xmlerr")"
  fi
}

# line_err NAME LINENO ERE LINE... — the scenario must fail with exit 1 and
# "line LINENO: " followed by a message matching ERE, and print no summary.
line_err() {
  _name=$1 _lno=$2 _ere=$3
  shift 3
  scenario "$@"
  sl sim -
  want_rc "error: $_name" 1
  has "error: $_name (line number and message)" "$tmp/err" "line $_lno: .*($_ere)"
  hasnt "error: $_name (no summary)" "$tmp/out" '^summary'
}

# --------------------------------------------------------------------------
# (a) the built-in examples: golden outputs, the boundary burst figures, plots
# --------------------------------------------------------------------------
sl sim --list-examples
want_rc "--list-examples" 0
examples=$(cut -d' ' -f1 "$tmp/out")
for want in boundary-burst idle-burst smoothing retry-storm; do
  has "--list-examples lists $want" "$tmp/out" "^$want "
done

for ex in $examples; do
  sl sim --example "$ex" --color never --svg "$tmp/$ex.svg"
  want_rc "example $ex" 0
  if [ -f "$GOLDEN/sim-$ex.txt" ]; then
    same "example $ex (golden output)" "$GOLDEN/sim-$ex.txt" "$tmp/out"
  else
    fail "example $ex: no golden file $GOLDEN/sim-$ex.txt"
  fi
  well_formed "example $ex plot" "$tmp/$ex.svg"
  # One lane per policy, each titled with its name.
  for pol in $(sed -n 's/^summary policy=\([^ ]*\) .*/\1/p' "$tmp/out"); do
    has "example $ex plot has a lane for $pol" "$tmp/$ex.svg" ">$pol "
  done
done

# docs/algorithms.md is generated from these examples (make docs): their
# summary lines there must be today's.
DOCS=${DOCS:-docs}
for ex in $examples; do
  sl sim --example "$ex" --summary-only
  while IFS= read -r line; do
    if grep -qxF -- "$line" "$DOCS/algorithms.md"; then pass; else
      fail "docs/algorithms.md is stale for $ex (run make docs): no '$line'"
    fi
  done <"$tmp/out"
done

# boundary-burst, 100 per minute: the fixed window lets 2x the limit into
# one window (100 at 59.9 s, 100 at 60 s); the sliding ones keep to it.
sl sim --example boundary-burst --summary-only
want_rc "boundary-burst --summary-only" 0
summary "boundary-burst fixed_window" fixed 200 0 200
summary "boundary-burst sliding_window" sliding 100 100 100
summary "boundary-burst sliding_log" log 100 100 100
if [ "$(wc -l <"$tmp/out")" -eq 3 ]; then pass; else
  fail "--summary-only: $(wc -l <"$tmp/out") lines, want the 3 summary lines"
fi

# Colours: never into a file by default, always on request, never with
# NO_COLOR even when asked for auto.
sl sim --example boundary-burst
hasnt "no colour into a file" "$tmp/out" "$(printf '\033')"
sl sim --example boundary-burst --color always
has "--color always" "$tmp/out" "$(printf '\033')\\[3[12]m"
NO_COLOR=1 "$SLUICE" sim --example boundary-burst --color auto >"$tmp/out" 2>&1
hasnt "NO_COLOR" "$tmp/out" "$(printf '\033')"

# --print shows the scenario; fed back on stdin it runs the same.
sl sim --example smoothing --print
want_rc "--print" 0
has "--print shows the policies" "$tmp/out" '^policy leaky +leaky_bucket:2/s:burst=20'
mv "$tmp/out" "$tmp/in"
sl sim -
want_rc "printed example from stdin" 0
tail -n +2 "$GOLDEN/sim-smoothing.txt" >"$tmp/want"
tail -n +2 "$tmp/out" >"$tmp/got"
same "printed example runs as the example" "$tmp/want" "$tmp/got"
rm -f "$tmp/in"

# retry-storm: the seed drives the jitter; same seed, same run.
sl sim --example retry-storm --seed 7
cp "$tmp/out" "$tmp/seed7a"
sl sim --example retry-storm --seed 7
same "retry-storm: same seed, same output" "$tmp/seed7a" "$tmp/out"
sl sim --example retry-storm --seed 8
if cmp -s "$tmp/seed7a" "$tmp/out"; then
  fail "retry-storm: seeds 7 and 8 give identical runs (jitter ignored?)"
else pass; fi
# Both waves are served in full; the eager one takes many more attempts.
awk '/^line [0-9]+: retry/ { mode = $4 }
     /requests, .* attempts/ { sub(",", "", $4); print mode, $1, $2, $4, $6 }' \
  "$GOLDEN/sim-retry-storm.txt" >"$tmp/retries"
if awk '$1 == "immediate" && $3 == 40 && $4 > 2000 { e++ }
        $1 == "after" && $3 == 40 && $4 < 400 { p++ }
        $5 != 40 { bad++ }
        END { exit !(e == 2 && p == 2 && !bad) }' "$tmp/retries"; then
  pass
else
  fail "retry-storm: want 40 requests served per wave, > 2000 eager attempts" \
    "and < 400 polite ones per policy; got: $(tr '\n' ';' <"$tmp/retries")"
fi

# --------------------------------------------------------------------------
# (b) small scenarios, expectations by hand
# --------------------------------------------------------------------------
# fixed_window:5/s, a request every 100 ms for 1 s: 0.0 .. 0.4 allowed, the
# other five denied; the stream does not move the clock, so the request
# after it is at 0 s too (the sixth at 0 s: denied).
scenario 'policy f fixed_window:5/s' 'every 100ms for 1s' 'request'
sl sim -
want_rc "stream" 0
summary "stream: 5 of 11 allowed" f 5 6 5

# Keys are separate states, and max_in_window is per key:
# sliding_log:2/s, 3 requests each for a and b -> 2 + 2 allowed.
scenario 'policy s sliding_log:2/s' 'burst 3 a' 'burst 3 b'
sl sim -
summary "keys apart" s 4 2 2

# Cost: token_bucket:2/s:burst=10 starts full; cost 4 twice -> 2 left;
# cost 3 denied; a peek (cost 0) is allowed and charges nothing; 500 ms
# later one token more: cost 3 allowed. max_in_window (1 s): 4+4+3 = 11.
scenario 'policy tb token_bucket:2/s:burst=10' 'request k 4' 'request k 4' \
  'request k 3' 'request k 0' 'advance 500ms' 'request k 3'
sl sim - --all-steps
summary "costs" tb 4 1 11
has "costs: remaining after the peek" "$tmp/out" 'tb +allowed +2$'
has "costs: time after advance" "$tmp/out" '^ +0\.500s +request k cost 3 '

# at and advance: 'at 1m' then 'advance 1.5s' is 61.5 s.
scenario 'policy g gcra:1/s' 'at 1m' 'advance 1.5s' 'request'
sl sim -
has "at + advance" "$tmp/out" '^ +1m01\.500s +request client '

# leaky_bucket delays instead of denying: 2/s with burst 3, 4 at once: the
# first three leave 0, 500 and 1000 ms later, the fourth is denied.
scenario 'policy lb leaky_bucket:2/s:burst=3' 'burst 4'
sl sim -
summary "leaky" lb 3 1 3
has "leaky shows its delay" "$tmp/out" 'delay up to 1s'

# Retries. fixed_window:1/s, two clients at 0 s: one allowed; the other
# retries every 100 ms up to 5 attempts (0.1 .. 0.4 s) and gives up.
scenario 'policy f fixed_window:1/s' 'retry immediate every 100ms max 5' 'burst 2'
sl sim -
summary "retry immediate" f 1 5 1
has "retry immediate stats" "$tmp/out" '^  f +2 requests, 6 attempts, 1 served, 1 gave up'
# Honouring retry_after (1 s, to the next window) without jitter: served
# on the second attempt, exactly at 1 s.
scenario 'policy f fixed_window:1/s' 'retry after max 3' 'burst 2'
sl sim -
summary "retry after" f 2 1 1
has "retry after: served at the window's end" "$tmp/out" \
  '2 requests, 3 attempts, 2 served, 0 gave up; last served 1s after'

# Grouping: 20 steps of a stream that are all allowed are one row; with
# --all-steps, 20 rows.
scenario 'policy g gcra:100/s' 'every 10ms for 200ms'
sl sim -
has "grouped stream" "$tmp/out" '^ +to 0\.190s +\(20 steps\)$'
sl sim - --all-steps
if [ "$(grep -c 'every 10ms client' "$tmp/out")" -eq 20 ]; then pass; else
  fail "--all-steps: $(grep -c 'every 10ms client' "$tmp/out") rows, want 20"
fi

# Hostile names in the plot are escaped: still well-formed XML.
printf 'policy p sliding_window:3/s\nburst 5 <&"\047>\nrequest \377\376bad\n' \
  >"$tmp/in"
sl sim - --svg "$tmp/hostile.svg"
want_rc "hostile key" 0
well_formed "hostile key plot" "$tmp/hostile.svg"

# A large scenario within the cap runs, and quickly (200 000 requests).
scenario 'policy s sliding_log:1000/s' 'policy t token_bucket:1000/s' \
  'every 1ms for 200s'
sl sim - --summary-only
want_rc "200 000 requests" 0
summary "large: sliding_log" s 200000 0 1000

# A file argument works like standard input; a missing one is exit 1.
scenario 'policy f fixed_window:5/s' 'every 100ms for 1s' 'request'
mv "$tmp/in" "$tmp/file.sim"
sl sim "$tmp/file.sim"
want_rc "file argument" 0
summary "file argument" f 5 6 5
sl sim "$tmp/no-such-file"
want_rc "missing file" 1
has "missing file (message)" "$tmp/err" 'no-such-file'

# --------------------------------------------------------------------------
# (c) errors: "line N: message", exit 1, no summary
# --------------------------------------------------------------------------
P='policy f fixed_window:5/s'
line_err "unknown command" 3 "unknown command 'jump'" "$P" '# c' 'jump 5s'
line_err "bad duration" 2 "duration '5x' needs a unit" "$P" 'at 5x'
line_err "duration without unit" 2 "needs a unit" "$P" 'advance 10'
line_err "duration finer than a ns" 2 "finer than a nanosecond" "$P" 'at 0.0000000001s'
line_err "bad policy" 1 "unknown algorithm 'bogus'" 'policy x bogus:1/s'
line_err "bad policy limit" 2 "limit '0'" "$P" 'policy y token_bucket:0/s'
line_err "time going backwards" 4 "goes back in time" "$P" 'at 10s' 'request' 'at 9.5s'
line_err "too many requests (burst)" 3 "too many requests" "$P" 'burst 600000' 'burst 400001'
line_err "too many requests (stream)" 2 "too many requests" "$P" 'every 1ms for 1h'
line_err "too many requests (retries)" 3 "too many requests" "$P" \
  'retry immediate max 1000' 'burst 1001'
line_err "policy after a request" 3 "after the first request" "$P" 'request' \
  'policy g gcra:1/s'
line_err "duplicate policy" 2 "declared twice" "$P" "$P"
line_err "no policy" 1 "no policy" 'request'
line_err "empty scenario" 1 "no policy" '# nothing here'
line_err "cost above capacity" 2 "cost 6 exceeds policy f" "$P" 'request k 6'
line_err "bad burst count" 2 "burst 'many'" "$P" 'burst many'
line_err "every without for" 2 "expected 'every DURATION for DURATION" "$P" 'every 1s 10s'
line_err "zero interval" 2 "must be positive" "$P" 'every 0s for 1s'
line_err "bad retry mode" 2 "unknown retry mode" "$P" 'retry sometimes'
line_err "bad policy name" 1 "policy name" 'policy a/b gcra:1/s'

# Bounds on what a scenario may hold, so that a hostile one cannot take
# the memory: distinct keys and retry settings.
{ echo "$P"; awk 'BEGIN { for (i = 0; i <= 100000; i++) print "request k" i }'; } >"$tmp/in"
sl sim - --summary-only
want_rc "too many keys" 1
has "too many keys (message)" "$tmp/err" 'line 100002: more than 100000 distinct keys'
{ echo "$P"; awk 'BEGIN { for (i = 1; i <= 65; i++) print "retry immediate every " i "ms" }'; } >"$tmp/in"
sl sim -
want_rc "too many retry settings" 1
has "too many retry settings (message)" "$tmp/err" 'line 66: more than 64 different retry settings'
# The same setting given twice is one: its figures add up.
scenario 'policy f fixed_window:1/s' 'retry after max 3' 'burst 2' 'retry off' \
  'at 10s' 'retry after max 3' 'burst 2'
sl sim -
has "a repeated retry setting is one" "$tmp/out" '^  f +4 requests, 6 attempts, 4 served'
rm -f "$tmp/in"

sl sim --example no-such-example
want_rc "unknown example" 2
sl sim
want_rc "no scenario" 2
sl sim --color sometimes --example smoothing
want_rc "bad --color" 2
sl sim --seed -3 --example smoothing
want_rc "bad --seed" 2
sl sim --svg /nonexistent-dir/x.svg --example smoothing
want_rc "unwritable --svg" 1

# --------------------------------------------------------------------------
# (d) help
# --------------------------------------------------------------------------
sl sim --help
want_rc "sim --help" 0
for w in 'policy NAME SPEC' 'at TIME' 'advance DURATION' 'request \[KEY\] \[COST\]' \
  'burst N \[KEY\] \[COST\]' 'every DURATION for DURATION' 'retry after' \
  'summary policy=NAME allowed=N denied=M max_in_window=K' '--svg FILE' \
  '--example NAME' '--list-examples'; do
  has "sim --help mentions $w" "$tmp/out" "$w"
done
sl --help
has "sluice --help lists sim" "$tmp/out" '^  sim '

# --------------------------------------------------------------------------
# (e) fleets: N nodes behind a load balancer, the store going down
# --------------------------------------------------------------------------
# The seeds' quiz: 10 nodes, fixed window 100/min, 1000 requests at 59.9 s
# and 1000 at 1 min. Counting on their own, every node allows 100 per
# window twice: 2000. One shared count (exact): 100 + 100 = 200, the fixed
# window's own boundary burst.
Q='policy fixed fixed_window:100/m'
quiz() { scenario "fleet 10 $1" "$Q" 'at 59.9s' 'burst 1000' 'at 1m' 'burst 1000'; }
quiz 'store local'
sl sim - --summary-only
summary "fleet quiz, local" fixed 2000 0 2000
quiz 'lb sticky store local'
sl sim - --summary-only
# Sticky: one client, one node: the fleet holds like one daemon.
summary "fleet quiz, sticky" fixed 200 1800 200
quiz 'store exact'
sl sim - --summary-only
summary "fleet quiz, exact" fixed 200 1800 200
# Syncing every 7 s (at 56 s, 63 s): both bursts fall between two syncs, so every node
# counts alone, as in local mode.
quiz 'store sync 7s'
sl sim - --summary-only
summary "fleet quiz, sync 7s" fixed 2000 0 2000
# A burst of 100 a node at 0 s, synced at 1 s: from then on every node
# knows the window is full and denies.
scenario 'fleet 10 store sync 1s' "$Q" 'burst 1000' 'at 2s' 'burst 1000'
sl sim - --summary-only
summary "fleet, sync after a burst" fixed 1000 1000 1000
sl sim - --color never
has "the heading names the fleet" "$tmp/out" '^  fleet: 10 nodes, lb round-robin, store sync 1s, on_store_error allow$'

# The store down: 2 nodes, 10 per minute exact; 20 requests while it is
# down. allow: all 20 pass, uncounted; deny: none; local: each node's own
# count, 10 each.
down() { scenario "fleet 2 store exact on_store_error $1" 'policy w fixed_window:10/m' 'store down' 'burst 20' 'store up' 'burst 20'; }
down allow
sl sim - --summary-only
summary "store down, allow" w 30 10 30
down deny
sl sim - --summary-only
summary "store down, deny" w 10 30 10
down local
sl sim - --summary-only
summary "store down, local" w 30 10 30

# JSON: the same run, every decision, the same summary line.
sl sim --example boundary-burst --json
want_rc "--json" 0
if python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
assert len(d["events"]) == 600, len(d["events"])
assert [s["line"] for s in d["summary"]] == [
  "summary policy=fixed allowed=200 denied=0 max_in_window=200",
  "summary policy=sliding allowed=100 denied=100 max_in_window=100",
  "summary policy=log allowed=100 denied=100 max_in_window=100"], d["summary"]
assert d["policies"][0]["algorithm"] == "fixed_window"
assert d["events"][0][:5] == [59900, 0, 0, 0, 0], d["events"][0]
' "$tmp/out" 2>"$tmp/pyerr"; then pass; else
  fail "--json: $(tail -n 1 "$tmp/pyerr")"
fi
scenario 'fleet 3 store exact on_store_error deny' "$P" 'at 1s' 'store down' 'request' 'store up'
sl sim - --json
if python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
assert d["fleet"]["nodes"] == 3 and d["fleet"]["on_store_error"] == "deny", d["fleet"]
assert d["store"] == [[1000, "down"], [1000, "up"]], d["store"]
assert d["events"][0][4] == 2 and d["events"][0][7] == 2, d["events"]
' "$tmp/out" 2>"$tmp/pyerr"; then pass; else
  fail "--json, fleet and store: $(tail -n 1 "$tmp/pyerr")"
fi

line_err "fleet of 0 nodes" 1 "number of nodes must be 1 to 64, not '0'" 'fleet 0'
line_err "fleet of 65 nodes" 1 "1 to 64, not '65'" 'fleet 65'
line_err "bad balancer" 1 "lb is round-robin or sticky, not 'random'" 'fleet 2 lb random'
line_err "bad store mode" 1 "store is local, exact or sync" 'fleet 2 store redis'
line_err "sync without interval" 1 "store sync needs an interval" 'fleet 2 store sync'
line_err "sync too often" 1 "at least 1ms" 'fleet 2 store sync 1us'
line_err "bad on_store_error" 1 "on_store_error is allow, deny or local" 'fleet 2 on_store_error maybe'
line_err "fleet setting without value" 1 "a value must follow 'lb'" 'fleet 2 lb'
line_err "fleet after a request" 3 "fleet comes after the first request" "$P" 'request' 'fleet 2'
line_err "store down without fleet" 2 "store down needs a fleet" "$P" 'store down'
line_err "store sideways" 3 "expected 'store down' or 'store up'" 'fleet 2' "$P" 'store sideways'
line_err "too many keys syncing" 7 "more than 4 distinct keys in a fleet that syncs" \
  'fleet 2 store sync 1s' "$P" 'request a' 'request b' 'request c' 'request d' 'request e'

# --------------------------------------------------------------------------
lib_finish
