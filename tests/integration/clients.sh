#!/bin/sh
# clients.sh — the client examples of docs/clients.md (examples/clients/:
# C against libsluice, Python with urllib, Go with net/http, JavaScript
# with node's fetch) against a running `sluice serve` (POSIX sh; cc'd C
# example from the Makefile, python3, go, node; helpers in serve_lib.sh).
#
#   SLUICE=build/sluice EXAMPLES=build/examples sh tests/integration/clients.sh
#   (make integration builds build/examples/clients/example first)
#
# Each example prints "elapsed_ms status retry_after_s slept_ms" per
# response and "done OK DENIED". Checked, for each of the four:
#   - pacing: alone on token_bucket:10/s:burst=5, 8 requests all pass with
#     no 429, and the client spreads them (it slept t/r = 250 ms between
#     them rather than spend the burst at once); on fixed_window:3/1s,
#     6 requests with no 429 (at r=0 it waits for the reset);
#   - backoff: the four together on one key at token_bucket:4/s:burst=2,
#     each gets all its 5 requests through, never asks again earlier than
#     the Retry-After it was given (nor, at r=0, than the reset), and its
#     429s stay bounded (at most 2 per request); the key is drained
#     first, so that there are 429s to honour.

. "$(dirname "$0")/serve_lib.sh"
GO=${GO:-$(command -v go || echo /usr/bin/go)}
NODE=${NODE:-$(command -v node || echo /usr/bin/node)}
lib_tools="$lib_tools $GO $NODE"
lib_init clients
ex=$(dirname "$0")/../../examples/clients
EXAMPLES=${EXAMPLES:-$(dirname "$SLUICE")/examples}
CBIN=$EXAMPLES/clients/example
[ -x "$CBIN" ] || { fail "$CBIN is missing (make $CBIN)"; lib_finish; }
if ! "$NODE" -e 'process.exit(typeof fetch === "function" ? 0 : 1)'; then
  fail "node has no built-in fetch (node 18+ needed)"
  lib_finish
fi

# Go offline, stdlib only, its caches in $tmp.
mkdir -p "$tmp/go"
if ! env GOCACHE="$tmp/go/cache" GOPATH="$tmp/go/path" GOFLAGS=-mod=mod \
  GOPROXY=off GO111MODULE=auto "$GO" build -o "$tmp/example_go" "$ex/example.go" \
  2>"$tmp/go.err"; then
  fail "go build example.go: $(head -c 400 "$tmp/go.err")"
  lib_finish
fi

# One source: each code block of docs/clients.md marked
# "<!-- file: examples/clients/F -->" is that file, byte for byte.
docs=$(dirname "$0")/../../docs/clients.md
for f in example.c example.py example.go example.js; do
  awk -v m="<!-- file: examples/clients/$f -->" '
    $0 == m { on = 1; getline; next }
    on && /^```$/ { exit }
    on { print }' "$docs" >"$tmp/doc.$f"
  cmp -s "$tmp/doc.$f" "$ex/$f" && pass ||
    fail "docs/clients.md's $f is not examples/clients/$f"
done

sv_start s -t 2 || lib_finish

# client LANG URL N — runs that example, its output in $tmp/LANG.out; each
# is stopped after 60 s whatever happens.
client() {
  case $1 in
    c) set -- "$1" "$CBIN" "$2" "$3" ;;
    py) set -- "$1" "$PY" "$ex/example.py" "$2" "$3" ;;
    go) set -- "$1" "$tmp/example_go" "$2" "$3" ;;
    js) set -- "$1" "$NODE" "$ex/example.js" "$2" "$3" ;;
  esac
  _l=$1
  shift
  timeout 60 "$@" >"$tmp/$_l.out" 2>"$tmp/$_l.err"
}

# verify LANG N MAXDENIED — checks $tmp/LANG.out: all N through, at most
# MAXDENIED 429s, and after each 429 the next request no earlier than the
# Retry-After (the time between the two responses includes the sleep).
verify() {
  _r=$(awk -v n="$2" -v maxd="$3" '
    $1 == "done" { done = 1; ok = $2; d = $3; next }
    { if (prev429 && $1 - prevt < ra * 1000) early++
      if (($2 == 429 || $2 == 503) && $4 < $3 * 1000) short++
      prev429 = ($2 == 429 || $2 == 503); prevt = $1; ra = $3; lines++
      if (prev429) denied++ }
    END {
      if (!done) print "no done line"
      else if (ok != n) print "ok " ok " of " n
      else if (d != denied) print "done says " d " denied, lines " denied
      else if (d > maxd) print d " denials, more than " maxd
      else if (early) print early " retries earlier than Retry-After"
      else if (short) print short " waits shorter than Retry-After"
      else print "ok " d
    }' "$tmp/$1.out")
  case $_r in
    "ok "*) pass ;;
    *) fail "$4 $1: $_r ($(tr '\n' '|' <"$tmp/$1.out" | head -c 600) $(head -c 300 "$tmp/$1.err"))" ;;
  esac
}

# Pacing: alone, nothing denied; spread at t/r.
for l in c py go js; do
  client $l "$URL/v1/throttle?key=pace_$l&policy=token_bucket:10/s:burst=5" 8 ||
    fail "pace $l: exit status $?"
  verify $l 8 0 pace
  n=$(awk '$1 != "done" && $2 == 200 && $4 >= 200 && $4 <= 1000' "$tmp/$l.out" | grep -c '')
  [ "$n" -ge 6 ] && pass || fail "pace $l: only $n of 7 gaps paced at t/r"
  client $l "$URL/v1/throttle?key=win_$l&policy=fixed_window:3/1s" 6 ||
    fail "window $l: exit status $?"
  verify $l 6 0 window
done

# Backoff: the four together on one key.
# The bucket is drained first, so that the first of them to arrive
# (the C and Go ones start within milliseconds) already meets a 429.
U="$URL/v1/throttle?key=herd&policy=token_bucket:4/s:burst=2"
http GET "$U"
http GET "$U"
pids=""
for l in c py go js; do
  client $l "$U" 5 &
  pids="$pids $!"
done
for p in $pids; do
  wait "$p" || fail "herd: a client exited $?"
done
total=0
for l in c py go js; do
  verify $l 5 10 herd
  total=$((total + $(awk '$1 == "done" { print $3 }' "$tmp/$l.out")))
done
[ "$total" -ge 1 ] && pass || fail "herd: no 429 at all: nothing was tested"
echo "clients: herd of 4 x 5 requests on token_bucket:4/s:burst=2: $total 429s"

lib_finish
