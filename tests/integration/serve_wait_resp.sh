#!/bin/sh
# serve_wait_resp.sh — the wait mode over RESP (docs/server.md, "Wait
# mode"): `SL.THROTTLE key policy [cost] WAIT [max_wait]` and `SL.CHECK
# ... WAIT` hold their reply for the leaky_bucket's delay, in command order
# on a pipelined connection (POSIX sh; python3 and wait_resp.py, helpers in
# serve_lib.sh).
#
#   SLUICE=build/sluice sh tests/integration/serve_wait_resp.sh  (make integration)
#
# 10 pipelined SL.THROTTLE ... WAIT under leaky_bucket:10/s answered about
# 100 ms apart as the client sees them (loose bounds: a loaded 2-core VM),
# in order, a PING behind them last; a delay over max_wait denied at once;
# --max-waiting refuses with an error, in its turn; a client that
# disconnects while held frees its places at once and leaves the daemon
# serving.

. "$(dirname "$0")/serve_lib.sh"
lib_init serve_wait_resp
WR="$PY $(dirname "$0")/wait_resp.py"

cat >"$tmp/edge.yaml" <<'EOF2'
domain: edge
descriptors:
  - key: user
    rate_limit: {policy: "leaky_bucket:10/s:burst=20", max_wait: 15s}
  - key: slow
    rate_limit: {policy: "leaky_bucket:2/s:burst=5", max_wait: 15s}
EOF2
sv_start r -t 2 --config "$tmp/edge.yaml" --max-wait 20000 || lib_finish

# wr TIMEOUT [CLOSE_AFTER] — the commands on stdin, pipelined; the replies
# with their arrival (ms) in $tmp/out.
wr() { $WR "$RESP" "$@" >"$tmp/out"; }
# waiting_is N — whether sluice_waiting is N now (for waitfor, which must
# scrape again each try).
waiting_is() { [ "$(metric 'sluice_waiting')" = "$1" ]; }

# 10 at once, then a PING: the replies come in order, spaced by the bucket.
{
  for i in 1 2 3 4 5 6 7 8 9 10; do
    echo "SL.THROTTLE k leaky_bucket:10/s:burst=20 WAIT"
  done
  echo PING
} | wr 20
sed 's/^/    /' "$tmp/out"
eq "pipelined WAIT: 11 replies" 11 "$(grep -c '' "$tmp/out")"
eq "pipelined WAIT: the 10 are allowed" 10 "$(grep -c '^[0-9]* \*6 \[:1,' "$tmp/out")"
eq "pipelined WAIT: the PING comes last" "+PONG" "$(tail -n 1 "$tmp/out" | cut -d' ' -f2)"
"$PY" - "$tmp/out" >"$tmp/spacing" <<'EOF2'
import sys
rows = [l.split(" ", 1) for l in open(sys.argv[1])][:10]
t = [float(r[0]) for r in rows]
# delay_ms, the 6th field: the reply's place in the queue (0, 100, ...).
d = [int(r[1].split("[")[1].rstrip("]\n").split(", ")[5][1:]) for r in rows]
in_order = all(a <= b for a, b in zip(t, t[1:])) and d == sorted(d)
early = sum(1 for x, y in zip(t, d) if x < y - 20)
print(int(in_order), "%.0f" % (t[-1] - t[0]), early, d[-1])
EOF2
read -r in_order span early last_delay <"$tmp/spacing"
eq "pipelined WAIT: in command order (arrivals and delays)" 1 "$in_order"
# (each command reads the clock when it is decided: a slow run drifts)
in_range "pipelined WAIT: the last one's delay is about 900 ms" 800 900 "$last_delay"
in_range "pipelined WAIT: the span is about 0.9 s (>= 0.8 s)" 800 5000 "$span"
eq "pipelined WAIT: none answered before its delay (-20 ms)" 0 "$early"

URL=http://127.0.0.1:$HTTP
eq "metrics: 9 replies were held" 9 "$(metric 'sluice_waits_total{result="served"}')"
eq "metrics: nothing is held now" 0 "$(metric 'sluice_waiting')"

# SL.CHECK ... WAIT: the rule's queue, the same way.
printf 'SL.CHECK edge user u WAIT\nSL.CHECK edge user u WAIT 5s\nSL.CHECK edge user u HITS 1 WAIT\n' | wr 20
sed 's/^/    /' "$tmp/out"
eq "SL.CHECK WAIT: 3 allowed" 3 "$(grep -c '^[0-9]* \*6 \[:1, :20, :.*\$edge.user\]' "$tmp/out")"
in_range "SL.CHECK WAIT: the 3rd comes >= 180 ms after the send" 180 5000 \
  "$(tail -n 1 "$tmp/out" | cut -d' ' -f1)"

# A reload while replies are held: they name the rule of their decision,
# whose configuration the reload frees (the replies are written when the
# hold starts; under ASan a reply written at its end read freed memory).
printf 'SL.CHECK edge slow s WAIT\nSL.CHECK edge slow s WAIT\nSL.CHECK edge slow s WAIT\n' |
  $WR "$RESP" 20 >"$tmp/out.reload" &
wr_pid=$!
# Held first, then the reload (a fixed sleep let a slow start send the
# commands after the reload, to a domain no longer there).
held() { [ "$(metric 'sluice_waiting')" -ge 1 ] 2>/dev/null; }
waitfor 50 held
reload_away r "$tmp/edge.yaml"
wait $wr_pid
sed 's/^/    /' "$tmp/out.reload"
eq "reload while held: 3 allowed, each naming its rule" 3 \
  "$(grep -c '^[0-9]* \*6 \[:1, :5, :.*\$edge.slow\]' "$tmp/out.reload")"
in_range "reload while held: the 3rd came after its delay (~1 s)" 800 10000 \
  "$(tail -n 1 "$tmp/out.reload" | cut -d' ' -f1)"

# Over max_wait: denied at once with the excess as retry_after, charging
# nothing; a bad max_wait is an error.
printf 'SL.THROTTLE c leaky_bucket:1/m:burst=5\nSL.THROTTLE c leaky_bucket:1/m:burst=5 WAIT 200ms\nSL.THROTTLE c leaky_bucket:1/m:burst=5 0\nSL.THROTTLE c leaky_bucket:1/m:burst=5 1 WAIT soon\nSL.THROTTLE c leaky_bucket:1/m:burst=5 1 2\n' | wr 10
sed 's/^/    /' "$tmp/out"
like "max_wait: the 2nd is denied" '^[0-9]+ \*6 \[:0, :5, ' "$(sed -n 2p "$tmp/out")"
in_range "max_wait: retry_after is the excess (~59.8 s)" 59000 59800 \
  "$(sed -n 2p "$tmp/out" | sed 's/.*\[\(.*\)\]/\1/' | cut -d, -f4 | tr -d ' :')"
in_range "max_wait: denied at once (< 1 s)" 0 1000 "$(sed -n 2p "$tmp/out" | cut -d' ' -f1)"
like "max_wait: the denial charged nothing (4 remain)" '\[:1, :5, :4, ' "$(sed -n 3p "$tmp/out")"
like "WAIT soon is an error" "-ERR WAIT's max_wait 'soon' is not a duration" "$(sed -n 4p "$tmp/out")"
like "a cost then no WAIT is an error" '-ERR syntax error' "$(sed -n 5p "$tmp/out")"
sv_stop r

# --max-waiting 2: of 4 pipelined commands under 1 per 4 s, the 1st goes at
# once, the 2nd and 3rd are held (4 and 8 s), the 4th is refused: its
# error comes in its turn, after them. Here the client disconnects after
# 0.5 s instead: the places come back at once.
sv_start m -t 1 --max-waiting 2 --max-wait 600000 || lib_finish
URL=http://127.0.0.1:$HTTP
P='SL.THROTTLE m leaky_bucket:1/4s:burst=10 WAIT'
printf '%s\n%s\n%s\n%s\n' "$P" "$P" "$P" "$P" | wr 20 0.5
sed 's/^/    /' "$tmp/out"
eq "max-waiting: only the 1st answered before the disconnect" 1 \
  "$(grep -c '\*6' "$tmp/out")"
eq "max-waiting: the client closed with replies held" CLOSED "$(tail -n 1 "$tmp/out")"
eq "max-waiting: the 4th was refused (counted as full)" 1 \
  "$(metric 'sluice_waits_total{result="full"}')"
waitfor 20 waiting_is 0
eq "disconnect: the held places come back at once" 0 "$(metric 'sluice_waiting')"
eq "disconnect: nothing was served" 0 "$(metric 'sluice_waits_total{result="served"}')"
# The refusal's words, on a second connection while a first holds two
# (the queue now 12 and 16 s long): at once. Then the first client is
# killed while its replies are held: its places come back.
printf '%s\n%s\n%s\n' "$P" "$P" "$P" | $WR "$RESP" 60 60 >"$tmp/out_a" &
holder=$!
lib_track $holder
waitfor 200 waiting_is 2
eq "max-waiting: the first connection holds 2" 2 "$(metric 'sluice_waiting')"
printf '%s\n' "$P" | wr 10
like "max-waiting: another connection is refused at once" \
  "^[0-9]+ -ERR too many requests waiting \(--max-waiting 2\)" "$(cat "$tmp/out")"
kill "$holder" 2>/dev/null
waitfor 100 waiting_is 0
eq "killed client: the places come back" 0 "$(metric 'sluice_waiting')"
printf 'PING\n' | wr 10
like "the daemon still serves" '\+PONG' "$(cat "$tmp/out")"
sv_stop m
lib_finish
