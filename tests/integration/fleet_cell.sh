#!/bin/sh
# fleet_cell.sh — CL.THROTTLE in exact fleet mode keeps one state per key,
# as redis-cell and the in-memory daemon do (POSIX sh; helpers in
# serve_lib.sh and fleet_lib.sh).
#
#   SLUICE=build/sluice sh tests/integration/fleet_cell.sh   (make integration)
#
# One redis-server (no module: decide.lua's algorithm "7"), an exact-mode
# daemon on it and an in-memory daemon. The same sequence of mixed rates
# on one key through both gives the same replies (and the ones worked out
# below by hand: every emission interval is 30 s or more, so the
# milliseconds between calls never show in whole seconds); Redis then
# holds exactly one key for it, sl:{}c4:cell<key>, whose value is the TAT
# in ns as decimal text (redis-cell's layout) expiring with it; 2,000
# distinct rates on one key are answered without an error and still make
# one Redis key (sluice kept a state, and an ad-hoc policy, per rate
# before); the errors are redis-cell's, the same in both modes; SL.RESET
# through the exact daemon deletes the key in Redis.

. "$(dirname "$0")/serve_lib.sh"
. "$(dirname "$0")/fleet_lib.sh"
lib_init fleet_cell

RP=$(free_port)
rs_start main "$RP" || lib_finish
sv_start exact --store "redis://127.0.0.1:$RP" -t 1 || lib_finish
XP=$RESP
sv_start mem -t 1 || lib_finish
MP=$RESP

# The sequence on one key, and the replies worked out by hand: ei 60 s
# twice, then ei 30 s (limited: 150 s past its 60 s tolerance), a peek and
# a quantity above the limit at 60 s, a charge of 1 and of 5 at ei 120 s,
# then limited at 0 1 60 and 4 1 60. The calls go on one connection, a few
# ms apart; the TAT - now they report shrinks by the time since the first,
# so a loaded machine may see a retry or reset a second or two less (the
# rest is exact).
seq="4 1 60|4 1 60|1 2 60|4 1 60 0|4 1 60 6|15 30 3600|15 30 3600 5|0 1 60|4 1 60"
want="0 5 4 -1 60|0 5 3 -1 120|1 2 0 90 120|0 5 3 -1 120|1 5 3 -1 120"
want="$want|0 16 14 -1 240|0 16 9 -1 840|1 1 0 840 840|1 5 0 600 840"
# run_seq PORT KEY — the sequence's replies, "|" between them.
run_seq() {
  echo "$seq" | tr '|' '\n' | sed "s/^/CL.THROTTLE $2 /" |
    timeout 10 redis-cli -p "$1" 2>&1 | paste -sd' ' - |
    awk '{ for (i = 1; i <= NF; i++) printf "%s%s", $i,
           (i == NF ? "\n" : i % 5 ? " " : "|") }'
}
# close WANT GOT — whether GOT matches WANT: every field exact, except a
# retry or reset that may be up to 2 s less.
close() {
  awk -v w="$1" -v g="$2" 'BEGIN {
    nw = split(w, a, /[ |]/); ng = split(g, b, /[ |]/)
    if (nw != ng) exit 1
    for (i = 1; i <= nw; i++) {
      f = (i - 1) % 5
      if (a[i] == b[i]) continue
      if (f < 3 || a[i] == -1 || b[i] > a[i] || b[i] < a[i] - 2) exit 1
    }
  }'
}
got_m=$(run_seq "$MP" k1)
got_x=$(run_seq "$XP" k1)
if close "$want" "$got_m"; then pass; else
  fail "memory: mixed rates on one key: got '$got_m', want '$want'"
fi
if close "$want" "$got_x"; then pass; else
  fail "exact: mixed rates on one key: got '$got_x', want '$want'" \
    "(memory mode: '$got_m')"
fi

# One Redis key for the cell key, redis-cell's layout, with its TTL.
eq "exact: one Redis key per cell key" "sl:{}c4:cellk1" \
  "$(rcli "$RP" --scan --pattern 'sl:*')"
tat=$(rcli "$RP" GET 'sl:{}c4:cellk1')
like "exact: the key holds the TAT in ns, as decimal text" '^[0-9]{19}$' "$tat"
now_ns=$(($(now_ms) * 1000000))
ahead=$(((tat - now_ns) / 1000000000))
if [ "$ahead" -ge 800 ] && [ "$ahead" -le 840 ]; then pass; else
  fail "exact: the TAT is $ahead s ahead, want about 840"
fi
pttl=$(rcli "$RP" PTTL 'sl:{}c4:cellk1')
if [ "$pttl" -gt 800000 ] && [ "$pttl" -le 840000 ]; then pass; else
  fail "exact: the key's PTTL is $pttl ms, want about 840000"
fi

# 2,000 distinct rates on one key: no error, one key.
seq 1 2000 | sed 's/.*/CL.THROTTLE many 10 & 3600/' |
  timeout 60 redis-cli -p "$XP" >"$tmp/many" 2>&1
_e=$(grep -c -i err "$tmp/many")
_l=$(grep -c . "$tmp/many")
if [ "$_e" = 0 ] && [ "$_l" = 10000 ]; then pass; else
  fail "exact: 2,000 rates on one key: $_e errors in $_l lines:" \
    "$(grep -i -m 3 err "$tmp/many")"
fi
eq "exact: 2,000 rates, still two Redis keys in all" 2 \
  "$(rcli "$RP" --scan --pattern 'sl:*' | wc -w | tr -d ' ')"

# redis-cell's errors, the same in both modes.
for args in "k 1 2" "k 1 x 60" "k 1 0 60" "k 1 1 -5" "k -1 1 5"; do
  # shellcheck disable=SC2086 # the words
  eq "errors: CL.THROTTLE $args in both modes" "$(rcli "$MP" CL.THROTTLE $args)" \
    "$(rcli "$XP" CL.THROTTLE $args)"
done
eq "errors: redis-cell's text" \
  "Cell error: Store error: Couldn't parse as integer: x" \
  "$(rcli "$XP" CL.THROTTLE k 1 x 60)"
# A rate whose full burst the script cannot compute exactly: an error.
like "exact: a burst beyond 2^52 ns is refused" '^ERR this rate.s full burst' \
  "$(rcli "$XP" CL.THROTTLE big 100 1 86400)"

# SL.RESET through the exact daemon deletes the key in Redis.
rcli "$XP" SL.RESET k1 >/dev/null
eq "exact: SL.RESET deletes the cell key" 0 \
  "$(rcli "$RP" EXISTS 'sl:{}c4:cellk1')"
eq "exact: after the reset, a fresh key" "0 5 4 -1 60" \
  "$(rcli "$XP" CL.THROTTLE k1 4 1 60)"

lib_finish
