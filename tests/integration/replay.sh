#!/bin/sh
# replay.sh — integration checks for `sluice replay` (POSIX sh).
#
#   SLUICE=build/sluice sh tests/integration/replay.sh      (make integration)
#
# Every check runs, each failure is printed as "FAIL: <check>: <why>", and the
# script exits 1 if any check failed, 0 otherwise. Expected outputs are
# derived by hand from the algorithms' definitions (comments beside each), not
# recorded from the binary. Runs in well under a second; all temporary files
# live in one mktemp -d directory, removed on exit.

. "$(dirname "$0")/check_lib.sh"
lib_init replay

# sl INPUT ARGS... — runs "$SLUICE ARGS..." with standard input from INPUT;
# leaves stdout in $tmp/out, stderr in $tmp/err, the exit status in $rc.
sl() {
  _in=$1
  shift
  "$SLUICE" "$@" <"$_in" >"$tmp/out" 2>"$tmp/err"
  rc=$?
}

# same NAME EXPECTED ACTUAL — the two files must be byte-identical.
same() {
  if cmp -s "$2" "$3"; then
    pass
  else
    fail "$1: output differs from the expected text (< expected, > actual)"
    diff "$2" "$3" 2>&1 | head -n 20 | sed 's/^/    /' >&2
  fi
}

# want_rc NAME WANT — the last sl run must have exited with WANT.
want_rc() {
  if [ "$rc" -eq "$2" ]; then
    pass
  else
    fail "$1: exit status $rc, want $2 (stderr: $(head -n 1 "$tmp/err" | cut -c1-200))"
  fi
}

# err_has NAME ERE — the last run's stderr must match ERE (case-insensitive).
err_has() {
  if grep -Eqi -- "$2" "$tmp/err"; then
    pass
  else
    fail "$1: stderr does not match /$2/ (stderr: $(head -n 1 "$tmp/err" | cut -c1-200))"
  fi
}

lines() { awk 'END { print NR }' "$1"; }

# --------------------------------------------------------------------------
# (a) golden trace: token_bucket:2/s:burst=10, key k.
#
# Capacity 10, starts full, refills 2/s = one token per 500 ms, continuously.
# remaining = floor(tokens after), reset = (10 - tokens) * 500 ms,
# retry_after = (cost - tokens) * 500 ms when denied.
#   t=0     10   -> 9     reset 1*500 = 500
#   t=200   9.4  -> 8.4   reset 1.6*500 = 800
#   t=300   8.6  -> 7.6, 6.6, ... 0.6 (8 allowed), reset 1200 .. 4700
#   t=300   0.6 < 1: deny, retry_after 0.4*500 = 200, reset 9.4*500 = 4700
#   t=2800  0.6 + 2500/500 = 5.6 -> 4.6: remaining 4, reset 5.4*500 = 2700
#   t=5800  4.6 + 6 = 10.6, capped at 10 -> 9: remaining 9, reset 500
# gcra decides the same (TAT - t is the debt 10 - tokens); leaky_bucket too,
# plus a delay: the queued work ahead of the request, (10 - tokens before)
# * 500 ms, and 0 for a denied request (not queued).
# --------------------------------------------------------------------------
cat >"$tmp/golden.in" <<'EOF'
0 k
200 k
300 k
300 k
300 k
300 k
300 k
300 k
300 k
300 k
300 k
2800 k
5800 k
EOF
cat >"$tmp/golden.tb" <<'EOF'
0 k allow remaining=9 reset=500 retry_after=0 delay=0
200 k allow remaining=8 reset=800 retry_after=0 delay=0
300 k allow remaining=7 reset=1200 retry_after=0 delay=0
300 k allow remaining=6 reset=1700 retry_after=0 delay=0
300 k allow remaining=5 reset=2200 retry_after=0 delay=0
300 k allow remaining=4 reset=2700 retry_after=0 delay=0
300 k allow remaining=3 reset=3200 retry_after=0 delay=0
300 k allow remaining=2 reset=3700 retry_after=0 delay=0
300 k allow remaining=1 reset=4200 retry_after=0 delay=0
300 k allow remaining=0 reset=4700 retry_after=0 delay=0
300 k deny remaining=0 reset=4700 retry_after=200 delay=0
2800 k allow remaining=4 reset=2700 retry_after=0 delay=0
5800 k allow remaining=9 reset=500 retry_after=0 delay=0
EOF
TB=token_bucket:2/s:burst=10

sl "$tmp/golden.in" replay --policy "$TB" "$tmp/golden.in"
want_rc "golden token_bucket (file)" 0
same "golden token_bucket (file)" "$tmp/golden.tb" "$tmp/out"

sl "$tmp/golden.in" replay --policy gcra:2/s:burst=10
want_rc "golden gcra" 0
same "golden gcra equals token_bucket" "$tmp/golden.tb" "$tmp/out"

sl "$tmp/golden.in" replay --policy leaky_bucket:2/s:burst=10
want_rc "golden leaky_bucket" 0
cp "$tmp/out" "$tmp/golden.lb"
sed 's/ delay=[0-9]*$//' "$tmp/golden.tb" >"$tmp/golden.nodelay"
sed 's/ delay=[0-9]*$//' "$tmp/golden.lb" >"$tmp/golden.lb.nodelay"
same "golden leaky_bucket equals token_bucket but for delay" \
  "$tmp/golden.nodelay" "$tmp/golden.lb.nodelay"
printf '%s\n' 0 300 700 1200 1700 2200 2700 3200 3700 4200 0 2200 0 \
  >"$tmp/golden.delays"
sed -n 's/.* delay=\([0-9]*\)$/\1/p' "$tmp/golden.lb" >"$tmp/golden.lb.delays"
same "golden leaky_bucket delays" "$tmp/golden.delays" "$tmp/golden.lb.delays"

# --------------------------------------------------------------------------
# (b) boundary burst: 100 requests at 59.9 s and 100 at 60.0 s, 100/min.
# A fixed window (aligned to the epoch) resets at 60 000 ms and lets all 200
# through; the sliding window and the sliding log still count the first 100.
# --------------------------------------------------------------------------
awk 'BEGIN { for (i = 0; i < 100; i++) print 59900, "u";
             for (i = 0; i < 100; i++) print 60000, "u" }' >"$tmp/burst.in"
for algo in fixed_window sliding_window sliding_log; do
  sl "$tmp/burst.in" replay --policy "$algo:100/m"
  want_rc "boundary burst $algo" 0
  a1=$(grep -c '^59900 u allow ' "$tmp/out")
  a2=$(grep -c '^60000 u allow ' "$tmp/out")
  n=$(lines "$tmp/out")
  case $algo in
  fixed_window) want1=100 want2=100 ;;
  *) want1=100 want2=0 ;;
  esac
  if [ "$n" -eq 200 ] && [ "$a1" -eq "$want1" ] && [ "$a2" -eq "$want2" ]; then
    pass
  else
    fail "boundary burst $algo:100/m: $n lines, allowed $a1 at 59900 and" \
      "$a2 at 60000; want 200 lines, $want1 and $want2"
  fi
done

# --------------------------------------------------------------------------
# (c) input handling
# --------------------------------------------------------------------------
# Keys are independent: token_bucket:1/s:burst=2, a and b interleaved.
printf '%s\n' '0 a' '0 b' '0 a' '0 b' '0 a' '0 b' '0 c' '1000 a' \
  >"$tmp/keys.in"
cat >"$tmp/keys.want" <<'EOF'
0 a allow remaining=1 reset=1000 retry_after=0 delay=0
0 b allow remaining=1 reset=1000 retry_after=0 delay=0
0 a allow remaining=0 reset=2000 retry_after=0 delay=0
0 b allow remaining=0 reset=2000 retry_after=0 delay=0
0 a deny remaining=0 reset=2000 retry_after=1000 delay=0
0 b deny remaining=0 reset=2000 retry_after=1000 delay=0
0 c allow remaining=1 reset=1000 retry_after=0 delay=0
1000 a allow remaining=0 reset=2000 retry_after=0 delay=0
EOF
sl "$tmp/keys.in" replay --policy token_bucket:1/s:burst=2
want_rc "independent keys" 0
same "independent keys" "$tmp/keys.want" "$tmp/out"

# Cost column, token_bucket:2/s:burst=10 (500 ms per token):
#   0 k 0    peek on a fresh key: 10 tokens, nothing taken, reset 0
#   0 k 3    10 -> 7, reset 3*500
#   0 k 0    peek: still 7
#   100 k 3  7.2 -> 4.2, reset 5.8*500 = 2900
#   100 k 5  4.2 < 5: deny, retry_after 0.8*500 = 400
#   100 k 0  peek: allowed, nothing taken
#   100 k 4  4.2 -> 0.2, reset 9.8*500 = 4900
#   100 k 1  explicit cost 1: 0.2 < 1, deny, retry_after 400
printf '%s\n' '0 k 0' '0 k 3' '0 k 0' '100 k 3' '100 k 5' '100 k 0' \
  '100 k 4' '100 k 1' >"$tmp/cost.in"
cat >"$tmp/cost.want" <<'EOF'
0 k allow remaining=10 reset=0 retry_after=0 delay=0
0 k allow remaining=7 reset=1500 retry_after=0 delay=0
0 k allow remaining=7 reset=1500 retry_after=0 delay=0
100 k allow remaining=4 reset=2900 retry_after=0 delay=0
100 k deny remaining=4 reset=2900 retry_after=400 delay=0
100 k allow remaining=4 reset=2900 retry_after=0 delay=0
100 k allow remaining=0 reset=4900 retry_after=0 delay=0
100 k deny remaining=0 reset=4900 retry_after=400 delay=0
EOF
sl "$tmp/cost.in" replay --policy "$TB"
want_rc "cost column" 0
same "cost column (0 peeks, 3, 5, 4, explicit 1)" "$tmp/cost.want" "$tmp/out"

# Comments, blank lines, whitespace-only lines, indented comments and CRLF
# line ends are skipped or tolerated; the output is the golden one.
{
  printf '# a trace with comments\n\n'
  sed -n '1,3p' "$tmp/golden.in"
  printf '   # indented comment\n \t \n'
  sed -n '4,10p' "$tmp/golden.in"
  printf '\r\n'
  sed -n '11,12p' "$tmp/golden.in" | sed 's/$/\r/'
  printf '\t%s  \n' "$(sed -n '13p' "$tmp/golden.in")"
  printf '# trailing comment\n'
} >"$tmp/comments.in"
sl "$tmp/comments.in" replay --policy "$TB"
want_rc "comments and blank lines" 0
same "comments and blank lines are skipped" "$tmp/golden.tb" "$tmp/out"

# File argument, standard input and '-' give the same output.
sl "$tmp/golden.in" replay --policy "$TB"
want_rc "stdin" 0
same "stdin equals the file argument" "$tmp/golden.tb" "$tmp/out"
sl "$tmp/golden.in" replay --policy "$TB" -
want_rc "'-' argument" 0
same "'-' means standard input" "$tmp/golden.tb" "$tmp/out"
sl "$tmp/golden.in" replay -p "$TB" "$tmp/golden.in"
want_rc "-p short option" 0
same "-p equals --policy" "$tmp/golden.tb" "$tmp/out"

# --------------------------------------------------------------------------
# (d) errors
# --------------------------------------------------------------------------
# line_err NAME LINENO ERE LINE... — a trace made of the given lines must stop
# with exit 1 and "<stdin>:LINENO:" plus ERE in the message. The preamble
# (a comment, a blank line, one good request) puts the bad line at line 4
# unless it says otherwise, so comments and blanks must be counted.
line_err() {
  _name=$1 _lno=$2 _ere=$3
  shift 3
  printf '%s\n' "$@" >"$tmp/bad.in"
  sl "$tmp/bad.in" replay --policy "$TB"
  want_rc "error: $_name" 1
  err_has "error: $_name (line number)" ":$_lno:"
  err_has "error: $_name (message)" "$_ere"
}
P1='# preamble'
P2=''
P3='0 k'
line_err "non-integer time" 4 'time' "$P1" "$P2" "$P3" '1.5 k'
line_err "time with a unit" 4 'time' "$P1" "$P2" "$P3" '10ms k'
line_err "negative time" 4 'time' "$P1" "$P2" "$P3" '-5 k'
line_err "missing key" 4 'key' "$P1" "$P2" "$P3" '5'
line_err "non-integer cost" 4 'cost' "$P1" "$P2" "$P3" '5 k x'
line_err "fractional cost" 4 'cost' "$P1" "$P2" "$P3" '5 k 1.5'
line_err "negative cost" 4 'cost' "$P1" "$P2" "$P3" '5 k -1'
# strtoull would skip a vertical tab or form feed and negate what follows.
line_err "cost behind a vertical tab" 4 'cost' "$P1" "$P2" "$P3" \
  "$(printf '5 k \v-18446744073709551615')"
line_err "time behind a form feed" 4 'time' "$P1" "$P2" "$P3" \
  "$(printf '\f-5 k')"
line_err "extra field" 4 'unexpected|extra|after' "$P1" "$P2" "$P3" '5 k 1 z'
line_err "time going backwards" 6 'backwards|order' \
  "$P1" "$P2" '100 k' '# note' '' '99 k'
line_err "cost larger than burst" 4 'ever pass' "$P1" "$P2" "$P3" '5 k 11'
line_err "error on the first line" 1 'time' 'x k'

# The error names the file when one is given.
printf '0 k\n\n# c\n1 k 2 3\n' >"$tmp/named.in"
sl /dev/null replay --policy "$TB" "$tmp/named.in"
want_rc "error in a named file" 1
err_has "error in a named file names it" "named\\.in:4:"

# cost = burst is fine (a full bucket); burst+1 can never pass.
printf '0 k 10\n' >"$tmp/full.in"
sl "$tmp/full.in" replay --policy "$TB"
want_rc "cost equal to the burst" 0

sl /dev/null replay --policy "$TB" "$tmp/no-such-file"
want_rc "nonexistent file" 1
err_has "nonexistent file (message)" 'no-such-file'

sl /dev/null replay "$tmp/golden.in"
want_rc "missing --policy" 2
err_has "missing --policy (message)" 'policy'

# bad_policy SPEC ERE — exit 2, a message naming the bad part, no output.
bad_policy() {
  sl "$tmp/golden.in" replay --policy "$1"
  want_rc "bad policy '$1'" 2
  err_has "bad policy '$1' (message names the bad part)" "$2"
  if [ -s "$tmp/out" ]; then
    fail "bad policy '$1': wrote to stdout"
  else
    pass
  fi
}
bad_policy 'bogus:2/s' "'bogus'"
bad_policy 'token_bucket:0/s' "'0'"
bad_policy 'token_bucket:2/x' "'x'"
bad_policy 'token_bucket:2/s:burst=abc' "'abc'"
bad_policy 'token_bucket:2/s:color=red' "color=red"
bad_policy 'fixed_window:100/m:burst=5' 'burst'
bad_policy 'token_bucket' 'limit|period'

sl /dev/null replay --policy "$TB" "$tmp/golden.in" "$tmp/golden.in"
want_rc "two files" 2

sl /dev/null replay --policy "$TB" --no-such-option "$tmp/golden.in"
want_rc "unknown option" 2

sl /dev/null replay --policy "$TB" --max-memory lots "$tmp/golden.in"
want_rc "bad --max-memory" 2

# --------------------------------------------------------------------------
# (e) help, version, unknown command
# --------------------------------------------------------------------------
sl /dev/null replay --help
want_rc "replay --help" 0
if grep -qF 'T KEY [COST]' "$tmp/out" &&
  grep -qF 'allow|deny remaining=R reset=MS retry_after=MS delay=MS' \
    "$tmp/out"; then
  pass
else
  fail "replay --help: stdout does not show the input and output line formats"
fi

sl /dev/null --help
want_rc "sluice --help" 0
if grep -q replay "$tmp/out"; then pass; else
  fail "sluice --help: does not list replay"
fi

sl /dev/null version
want_rc "sluice version" 0
if grep -Eq '^sluice [0-9]+\.[0-9]+' "$tmp/out"; then pass; else
  fail "sluice version: prints '$(cat "$tmp/out")'"
fi

sl /dev/null frobnicate
want_rc "unknown command" 2
err_has "unknown command (message)" 'frobnicate'

sl /dev/null
want_rc "no command" 2

# --------------------------------------------------------------------------
# (f) --summary: totals on stderr, stdout unchanged.
# --------------------------------------------------------------------------
sl "$tmp/golden.in" replay --summary --policy "$TB"
want_rc "--summary" 0
same "--summary leaves stdout alone" "$tmp/golden.tb" "$tmp/out"
err_has "--summary line" 'requests=13 allowed=12 denied=1'
sl "$tmp/burst.in" replay -s --policy fixed_window:100/m
err_has "-s line (boundary burst, fixed_window)" \
  'requests=200 allowed=200 denied=0'

# --------------------------------------------------------------------------
# (g) a large trace: 200 000 requests over ~200 s, 50 000 keys plus one hot
# key on every 100th line. One output line per input line, in input order
# (T and KEY echoed); the summary adds up; and the hot key and a few cold
# keys get, inside the big trace, exactly the decisions they get alone —
# keys are independent, and the store's expiry never loses live state.
# --------------------------------------------------------------------------
awk 'BEGIN {
  srand(20240601); t = 0
  for (i = 0; i < 200000; i++) {
    t += int(rand() * 3)
    if (i % 100 == 0) k = "hot"; else k = "user:" int(rand() * 50000)
    print t, k
  }
}' >"$tmp/big.in"
for pol in gcra:3/m sliding_log:3/m; do
  sl "$tmp/big.in" replay --summary --policy "$pol" "$tmp/big.in"
  want_rc "large trace $pol" 0
  n=$(lines "$tmp/out")
  if [ "$n" -eq 200000 ]; then
    pass
  else
    fail "large trace $pol: $n output lines for 200000 requests"
  fi
  cut -d' ' -f1,2 "$tmp/out" >"$tmp/big.tk"
  if cmp -s "$tmp/big.in" "$tmp/big.tk"; then
    pass
  else
    fail "large trace $pol: output T KEY columns differ from the input's"
  fi
  awk '{ n[$3]++ } END { printf "requests=%d allowed=%d denied=%d\n",
         NR, n["allow"], n["deny"] }' "$tmp/out" >"$tmp/big.counts"
  err_has "large trace $pol summary" "$(cat "$tmp/big.counts")"
  if grep -q ' deny ' "$tmp/out"; then pass; else
    fail "large trace $pol: no request was denied (the trace should hit it)"
  fi
  mv "$tmp/out" "$tmp/big.out"
  for key in hot user:0 user:12345 user:49999; do
    awk -v k="$key" '$2 == k' "$tmp/big.in" >"$tmp/one.in"
    awk -v k="$key" '$2 == k' "$tmp/big.out" >"$tmp/one.want"
    sl "$tmp/one.in" replay --policy "$pol"
    same "large trace $pol: key $key alone decides as in the mix" \
      "$tmp/one.want" "$tmp/out"
  done
done

# --------------------------------------------------------------------------
lib_finish
