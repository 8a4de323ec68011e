#!/bin/sh
# hardening_http.sh — what a flood or a hostile client can do to sluice's
# listeners and HTTP front end, each bounded (issue 15; docs/hardening.md):
#   1. connection budgets per listener: idle RESP connections cannot lock
#      HTTP out (nor the reverse); refusals are counted per listener and
#      logged, one line per interval; idle HTTP connections time out;
#   2. out of file descriptors: accepting pauses (the daemon stays near
#      idle), resumes when descriptors free up; the soft RLIMIT_NOFILE is
#      raised to the hard one; a warning when the limits cannot fit;
#   3. bodies: a declared length over --max-body is answered 413 before
#      any of it is read, a chunked body is cut at the limit, and many
#      connections sending large bodies hold at most --max-body each (RSS);
#   4. values: a NUL or non-UTF-8 byte in a query value is refused naming
#      the parameter (as in a JSON body), a count past its range says so;
#      more than 100 request headers get sluice's JSON 431;
#   5. /admin/* with --admin-token: no route or spelling gets past it.
# Every flood is bounded in count and time, on 127.0.0.1.
. "$(dirname "$0")/serve_lib.sh"
lib_tools="$lib_tools redis-cli"
lib_init hardening_http

FLOOD="$PY $(dirname "$0")/flood.py"
# Sanitizer builds (build/san-*) carry redzones and shadow memory: their
# RSS bounds are 4 times as loose.
case $SLUICE in */san-*) slack=4 ;; *) slack=1 ;; esac

# cpu_ticks PID — user + system CPU ticks the process has used.
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
# rss_kb PID — the process's resident set, KiB.
rss_kb() { awk '/^VmRSS:/ { print $2 }' "/proc/$1/status"; }
# log_count NAME ERE — lines of daemon NAME's log matching ERE.
log_count() { grep -Ec -- "$2" "$tmp/sv.$1/log"; }
# hold_open PORT N OUTFILE — floods PORT with N idle connections in the
# background (held 30 s at most), and waits until it has counted them.
hold_open() {
  $FLOOD hold "$1" "$2" 30 "$3" &
  lib_track $!
  held=$!
  waitfor 150 test -s "$3"
}
# field FILE NAME — NAME's value in a "a=1 b=2" line.
field() { tr ' ' '\n' <"$1" | sed -n "s/^$2=//p"; }

# ===========================================================================
# 1. Connection budgets
# ===========================================================================
# --max-connections 20: each listener may hold 16 (80%), so 20 idle RESP
# connections leave HTTP 4. (Before budgets: all 20 were RESP's and every
# HTTP request was reset.)
sv_start b -t 1 --max-connections 20 || lib_finish
hold_open "$RESP" 20 "$tmp/resp20"
eq "budget: 16 of 20 idle RESP connections are admitted" 16 \
  "$(field "$tmp/resp20" open)"
get "$URL/healthz"
eq "budget: HTTP still answers under an idle RESP flood" 200 "$code"
# curl's connection came and went; three more HTTP connections fit.
$FLOOD hold "$HTTP" 5 2 "$tmp/http5"
eq "budget: HTTP has the rest (4), the fifth is refused" "open=4 closed=1" \
  "$(cat "$tmp/http5")"
in_range "budget: RESP refusals counted per listener" 4 20 \
  "$(metric 'sluice_connections_rejected_total{protocol="resp"}')"
in_range "budget: HTTP refusals counted per listener" 1 5 \
  "$(metric 'sluice_connections_rejected_total{protocol="http"}')"
waitfor 20 sv_log_has b 'warn: resp: refused [0-9]+ connections? since the last'
like "budget: the refusals are logged, naming the listener and the budget" \
  'resp: refused [0-9]+ connections? .*budget of 16 or --max-connections 20' \
  "$(grep 'resp: refused' "$LOG" | head -n 1)"
# More refusals within the interval: no more lines.
$FLOOD hold "$RESP" 10 1 "$tmp/resp10"
eq "budget: refused again at once" "open=0 closed=10" "$(cat "$tmp/resp10")"
eq "budget: one log line per interval, not one per refusal" 1 \
  "$(log_count b 'resp: refused')"
kill "$held" 2>/dev/null
sv_stop b

# Explicit budgets: --max-http-connections 2 leaves RESP the rest.
if sv_start e -t 1 --max-connections 50 --max-http-connections 2 \
  --http-timeout 700; then
  hold_open "$HTTP" 4 "$tmp/http4"
  eq "--max-http-connections 2: two held, two refused" "open=2 closed=2" \
    "$(cat "$tmp/http4")"
  eq "--max-http-connections 2: RESP unaffected" PONG \
    "$(timeout 10 redis-cli -p "$RESP" PING 2>&1)"
  kill "$held" 2>/dev/null
  # An idle keep-alive HTTP connection is closed after --http-timeout.
  r=$($FLOOD idle "$HTTP" 5)
  like "--http-timeout 700: an idle connection is closed" \
    '^closed after (0\.[5-9]|1\.[0-9]) s' "$r"
  sv_stop e
fi

# ===========================================================================
# 2. Out of file descriptors
# ===========================================================================
cat >"$tmp/lowfd" <<EOF
#!/bin/sh
ulimit -n 128 && exec "$SLUICE" "\$@"
EOF
cat >"$tmp/softfd" <<EOF
#!/bin/sh
ulimit -S -n 128 && exec "$SLUICE" "\$@"
EOF
chmod +x "$tmp/lowfd" "$tmp/softfd"

# A soft limit under the hard one is raised at start.
real=$SLUICE
SLUICE=$tmp/softfd
sv_start soft -t 1 || lib_finish
SLUICE=$real
eq "RLIMIT_NOFILE: the soft limit is raised to the hard one" \
  "$(awk '/^Max open files/ { print $5 }' "/proc/$PID/limits")" \
  "$(awk '/^Max open files/ { print $4 }' "/proc/$PID/limits")"
sv_stop soft

# ulimit -n 128 (soft and hard), 300 idle connections: past the limit the
# connections wait in the listen queue, and the daemon stays near idle.
SLUICE=$tmp/lowfd
sv_start fd -t 2 || lib_finish
SLUICE=$real
if sv_log_has fd 'warn: file descriptors: the limit is 128, but --max-connections 10000 needs'; then
  pass
else
  fail "fd: no warning that --max-connections cannot fit: $(head -n 5 "$LOG")"
fi
hold_open "$RESP" 300 "$tmp/fd300"
sleep 0.5
t0=$(cpu_ticks "$PID")
sleep 2
t1=$(cpu_ticks "$PID")
# 2 s at 100 ticks a second: 200 ticks a core; spinning, both workers took
# ~300. Near idle: at most 20 (10% of one core).
in_range "fd: CPU over 2 s with 300 connections past the fd limit (ticks)" \
  0 20 "$((t1 - t0))"
waitfor 20 sv_log_has fd 'resp: out of file descriptors: accepting paused'
eq "fd: logged once per interval, naming the listener" 1 \
  "$(log_count fd 'resp: out of file descriptors: accepting paused')"
kill "$held"
wait "$held" 2>/dev/null
if waitfor 100 _sv_healthy; then pass; else
  fail "fd: no answer once the connections are closed"
fi
in_range "fd: the pauses are counted" 1 100000 \
  "$(metric 'sluice_accept_pauses_total{protocol="resp"}')"
sv_stop fd

# ===========================================================================
# 3. Bodies over --max-body
# ===========================================================================
sv_start body -t 2 || lib_finish
r=$($FLOOD declared "$HTTP" 1048576)
eq "declared Content-Length: 1048576: 413 before any body is sent" \
  '413 {"error":"body larger than 65536 bytes"}' "$r"
r=$($FLOOD chunked "$HTTP" 1048576)
like "chunked body: cut at the limit (64 KiB), not at 1 MiB" \
  '^413 after ([6-9][0-9]|1[0-9][0-9])[0-9]{3} bytes$' "$r"
get "$URL/v1/check?domain=default&key=warm"
base=$(rss_kb "$PID")
# 200 connections each declaring 1 MiB and sending up to 960 KiB of it.
$FLOOD bodies "$HTTP" 200 1048576 983040 30 "$tmp/big" &
lib_track $!
held=$!
waitfor 300 test -s "$tmp/big"
eq "200 declared 1 MiB bodies: all turned away (413, then closed)" 200 \
  "$(field "$tmp/big" turned_away)"
in_range "200 declared 1 MiB bodies: the 413s reach the clients" 1 200 \
  "$(field "$tmp/big" answered)"
grow=$(($(rss_kb "$PID") - base))
in_range "200 x 1 MiB bodies: RSS growth (KiB) under 32 MiB" 0 \
  $((32768 * slack)) "$grow"
echo "  200 declared 1 MiB bodies: RSS +$grow KiB, $(field "$tmp/big" sent) body bytes taken" >&2
kill "$held"
wait "$held" 2>/dev/null
# Bodies under the limit, held unfinished: at most --max-body each.
base=$(rss_kb "$PID")
$FLOOD bodies "$HTTP" 200 65536 61440 30 "$tmp/small" &
lib_track $!
held=$!
waitfor 300 test -s "$tmp/small"
grow=$(($(rss_kb "$PID") - base))
in_range "200 unfinished 60 KiB bodies: RSS growth (KiB) under 200 x 160 KiB" \
  0 $((32768 * slack)) "$grow"
echo "  200 unfinished 60 KiB bodies: RSS +$grow KiB" >&2
kill "$held"
wait "$held" 2>/dev/null

# ===========================================================================
# 4. Values
# ===========================================================================
get "$URL/v1/check?domain=default%00&key=a"
want_error "domain=default%00: 400" 400
want_jv "domain=default%00: names the parameter and the NUL" 'd["error"]' \
  "\"the value of 'domain' contains a NUL byte\""
get "$URL/v1/check?domain=default&key=a%00b"
want_jv "a NUL in a descriptor value (GET)" 'd["error"]' \
  "\"the value of 'key' contains a NUL byte\""
post "$URL/v1/check" '{"domain":"default","descriptors":[{"entries":[{"key":"key","value":"a\u0000b"}]}]}'
want_error "a NUL in a descriptor value (POST): 400" 400
want_jv "a NUL in a descriptor value (POST): the GET message" 'd["error"]' \
  "\"the value of 'key' contains a NUL byte\""
get "$URL/v1/check?domain=default&key=a%FFb"
want_error "a value that is not UTF-8 (GET): 400" 400
want_jv "a value that is not UTF-8 (GET): says so" 'd["error"]' \
  "\"the value of 'key' is not valid UTF-8\""
get "$URL/v1/throttle?key=a%00&policy=gcra:1/h"
want_jv "a NUL in /v1/throttle's key" 'd["error"]' \
  "\"the value of 'key' contains a NUL byte\""
get "$URL/v1/throttle?key=c&policy=gcra:1/h&cost=18446744073709551615"
want_error "cost=2^64-1: 400" 400
body_has "cost=2^64-1: out of range" 'cost=18446744073709551615 is out of range'
get "$URL/v1/check?domain=default&key=c&hits=99999999999999999999"
body_has "hits=10^20-1: out of range" 'hits=99999999999999999999 is out of range'
post "$URL/v1/check" '{"domain":"default","hits_addend":18446744073709551615,"descriptors":[{"entries":[{"key":"key","value":"c"}]}]}'
want_error "POST hits_addend 2^64-1: 400" 400
body_has "POST hits_addend 2^64-1: out of range" 'out of range'
post "$URL/v1/check" '{"domain":"default","descriptors":[{"hits_addend":"18446744073709551615","entries":[{"key":"key","value":"c"}]}]}'
body_has "POST descriptor hits_addend \"2^64-1\": out of range" \
  'descriptor 0: \"hits_addend\" is out of range'
get "$URL/v1/check?domain=default&key=%C3%A9t%C3%A9"
want_code "a UTF-8 value is fine" 200
# More request headers than h2o takes (100): sluice's JSON 431, not h2o's
# plain-text 400, whether the head comes in one write or in pieces.
HRAW="$PY $(dirname "$0")/http_raw.py"

eq "100 request headers: decided" 200 \
  "$($HRAW headers "$HTTP" "/v1/check?domain=default&key=h" 100 | cut -d' ' -f1)"
eq "101 request headers: JSON 431" \
  '431 {"error":"more than 100 request headers"}' \
  "$($HRAW headers "$HTTP" "/v1/check?domain=default&key=h" 101)"
eq "5,000 request headers in 50 writes: JSON 431" \
  '431 {"error":"more than 100 request headers"}' \
  "$($HRAW headers "$HTTP" "/v1/check?domain=default&key=h" 5000 50)"
sv_stop body

# ===========================================================================
# 5. /admin/* with --admin-token
# ===========================================================================
sv_start adm -t 1 --admin-token s3cret || lib_finish
for p in '/admin/reset?key=k' '/admin/inspect?key=k&policy=gcra:1/h' \
  '/admin/reset/?key=k' '//admin/reset?key=k' '/admin/%72eset?key=k' \
  '/ADMIN/reset?key=k' '/admin/reset?key=k&token=s3cret' '/admin/../admin/reset?key=k'; do
  for m in GET POST HEAD; do
    http "$m" "$URL$p" --path-as-is
    case $code in
    401 | 404) pass ;;
    *) fail "admin token: $m $p answered $code without the token" ;;
    esac
  done
done
http POST "$URL/admin/reset?key=k" -H 'Authorization: Bearer s3cret'
want_code "admin token: the token opens /admin/reset" 200
sv_stop adm

lib_finish
