#!/bin/sh
# hardening_fleet.sh — issue 15's finding 7: a healthy Redis that closes
# connections is no store failure, and a stalled Redis costs a decision at
# most --redis-timeout (POSIX sh; helpers in serve_lib.sh and fleet_lib.sh;
# python3 for the clients).
#
#   SLUICE=build/sluice sh tests/integration/hardening_fleet.sh
#
#   1. Redis's idle timeout (`timeout 1`): requests 2.5 s apart on a rule
#      with on_store_error deny, each finding its connection closed by
#      Redis: every one decided by Redis (allowed), no fallback, no error;
#   2. CLIENT KILL TYPE normal every 100 ms (30 at most) under a paced
#      load (600 requests over 3 client threads, 4 s, deny and allow
#      rules): every
#      request allowed, no fallback, no error, no refused call (before:
#      about a second of fallback decisions per kill);
#   3. a stalled Redis (SIGSTOP) with --redis-timeout 50 and a breaker of
#      10 ms: rounds of 15 requests, each a probe that waits for the
#      timeout, measured by the client from its write to the answer (a
#      histogram is printed): the fastest is under 49.75 ms (the daemon
#      gives up 1 ms before the deadline, the answer's slack:
#      docs/fleet.md), the median within the timeout + 1 ms and the
#      slowest within + 10 ms. A loaded machine can delay any answer: a
#      round with a slower one is measured again (5 rounds at most). Before: every answer came after
#      the deadline (median 50.5 ms, slowest 51 to 56 ms).

. "$(dirname "$0")/serve_lib.sh"
. "$(dirname "$0")/fleet_lib.sh"
lib_init hardening_fleet

RP=$(free_port)
rs_start main "$RP" --timeout 1 || lib_finish
STORE=redis://127.0.0.1:$RP

cat >"$tmp/conf.yaml" <<'EOF'
domain: h
descriptors:
  - key: d
    on_store_error: deny
    rate_limit: {policy: "token_bucket:1000000/s"}
  - key: a
    on_store_error: allow
    rate_limit: {policy: "token_bucket:1000000/s"}
EOF

# (--redis-timeout far above what a loaded machine's stalls can reach,
# under TSan too: only the closed connections may cause a fallback here;
# section 3 measures the timeout itself)
sv_start x -t 1 --store "$STORE" --on-store-error deny --redis-timeout 1000 \
  --config "$tmp/conf.yaml" || lib_finish

# conns — the connections Redis has accepted so far.
conns() { rcli "$RP" INFO stats | tr ' ' '\n' | sed -n 's/^total_connections_received:\([0-9]*\).*/\1/p'; }

# ===========================================================================
# 1. Redis's idle timeout
snap "$tmp/m0"
c0=$(conns)
ok=0
for i in 1 2 3; do
  [ "$i" -gt 1 ] && sleep 2.5
  case "$(rcli "$RESP" SL.CHECK h d idle)" in
  "1 "*) ok=$((ok + 1)) ;;
  esac
done
snap "$tmp/m1"
eq "idle timeout: requests 2.5 s apart, decided by Redis (allowed)" 3 "$ok"
in_range "idle timeout: Redis closed the idle connections (new connections)" \
  2 1000 $(($(conns) - c0))
for m in sluice_store_fallbacks_total sluice_redis_errors_total \
  sluice_redis_refused_total; do
  eq "idle timeout: $m" 0 "$(mdelta $m "$tmp/m0" "$tmp/m1")"
done

# ===========================================================================
# 2. CLIENT KILL under load
printf 'deny\t300\tresp\tSL.CHECK\th\td\tkill\n' >"$tmp/jobs"
printf 'allow\t300\tresp\tSL.CHECK\th\ta\tkill\n' >>"$tmp/jobs"
snap "$tmp/m0"
fl_load_bg "$tmp/kill.sum" --resp "$RESP" --threads 3 --rate 150 "$tmp/jobs"
load_pid=$fl_bg_pid
kills=0
while [ $kills -lt 30 ] && kill -0 "$load_pid" 2>/dev/null; do
  rcli "$RP" CLIENT KILL TYPE normal >/dev/null
  kills=$((kills + 1))
  sleep 0.1
done
waitfor 200 sh -c "! kill -0 $load_pid 2>/dev/null"
wait "$load_pid"
snap "$tmp/m1"
in_range "CLIENT KILL: kills while the load ran" 10 30 "$kills"
eq "CLIENT KILL: no request failed ($(grep '^ERR' "$tmp/kill.sum" | head -n 1))" \
  0 "$(fl_get ALL errors "$tmp/kill.sum")"
eq "CLIENT KILL: deny rule, all 300 allowed by Redis" 300 \
  "$(fl_get deny allowed "$tmp/kill.sum")"
eq "CLIENT KILL: allow rule, all 300 allowed by Redis" 300 \
  "$(fl_get allow allowed "$tmp/kill.sum")"
for m in sluice_store_fallbacks_total sluice_redis_errors_total \
  sluice_redis_refused_total; do
  eq "CLIENT KILL: $m" 0 "$(mdelta $m "$tmp/m0" "$tmp/m1")"
done
say "CLIENT KILL: $kills kills under $(fl_get ALL requests "$tmp/kill.sum")" \
  "requests: $(mdelta sluice_store_fallbacks_total "$tmp/m0" "$tmp/m1")" \
  "fallbacks, $(mdelta sluice_redis_calls_total "$tmp/m0" "$tmp/m1") calls"
sv_stop x

# ===========================================================================
# 3. a stalled Redis: the timeout bounds the decision
TIMEOUT=50
sv_start s -t 1 --store "$STORE" --on-store-error deny --redis-timeout $TIMEOUT \
  --breaker-interval 10 --config "$tmp/conf.yaml" || lib_finish
cat >"$tmp/stall.py" <<'EOF'
# stall.py PORT N: N SL.CHECK requests on one connection, 15 ms apart (each
# a probe: the breaker is 10 ms); prints each latency in ms, from the
# request's write to its answer's last byte.
import socket, sys, time
port, n = int(sys.argv[1]), int(sys.argv[2])
s = socket.create_connection(("127.0.0.1", port))
s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
s.settimeout(5)
cmd = b"*4\r\n$8\r\nSL.CHECK\r\n$1\r\nh\r\n$1\r\nd\r\n$5\r\nstall\r\n"
for i in range(n):
    t = time.perf_counter()
    s.sendall(cmd)
    got = b""
    while got.count(b"\r\n") < 7:  # *6 and six integers
        got += s.recv(4096)
    print("%.3f %s" % ((time.perf_counter() - t) * 1000, got.split(b"\r\n")[1].decode()))
    time.sleep(0.015)
EOF
rs_kill main STOP
# us FILE LINE — the LINE-th smallest latency of FILE, in microseconds.
us() { sort -n "$1" | sed -n "$2p" | awk '{ printf "%d", $1 * 1000 }'; }
# A round is good when its median and slowest answers are in bounds; a
# loaded machine can delay any answer, so a bad round is measured again.
good() {
  [ "$(us "$1" 8)" -le $((TIMEOUT * 1000 + 1000)) ] &&
    [ "$(us "$1" 15)" -le $((TIMEOUT * 2000 - 1000)) ]
}
round=0
while [ $round -lt 5 ]; do
  round=$((round + 1))
  timeout 60 "$PY" "$tmp/stall.py" "$RESP" 15 >"$tmp/stall.$round" || break
  good "$tmp/stall.$round" && break
  say "stall: round $round: median $(us "$tmp/stall.$round" 8) us, slowest $(us "$tmp/stall.$round" 15) us (a loaded machine?); again"
done
rs_kill main CONT
eq "stall: every answer a fallback (deny: 0)" 15 \
  "$(awk '$2 == ":0"' "$tmp/stall.$round" | grep -c '')"
max=$(sort -n "$tmp/stall.$round" | tail -n 1 | cut -d' ' -f1)
say "stall: round $round: latencies (ms) of 15 answers, --redis-timeout $TIMEOUT:"
awk '{ b = int($1 * 4) / 4; n[b]++ } END { for (k in n) printf "  %6.2f ms  %d\n", k, n[k] }' \
  "$tmp/stall.$round" | sort -n
say "stall: slowest $max ms"
# The fastest answer shows where the deadline is: load only ever delays an
# answer, and before the fix none came before the timeout. The median and
# the slowest carry what the machine did meanwhile (CI runs this under
# sanitizers on two shared cores), so they get slack; the exact deadline is
# test_client's.
# Sanitizer builds (build/san-*) spend most of the 1 ms slack on their
# instrumentation (TSan: 49.78 ms at best), so there the fastest answer
# only has to come within the timeout + 1 ms; the plain build, which
# make check runs first, holds the exact bound.
case $SLUICE in
*/san-*) fast=$((TIMEOUT * 1000 + 1000)) ;;
*) fast=$((TIMEOUT * 1000 - 250)) ;;
esac
in_range "stall: the fastest answer (us) is within $fast us" \
  0 "$fast" "$(us "$tmp/stall.$round" 1)"
in_range "stall: the median answer (us) is within --redis-timeout + 1 ms" 0 \
  $((TIMEOUT * 1000 + 1000)) "$(us "$tmp/stall.$round" 8)"
# The slowest answer gets the most slack: it only has to show that no
# decision waited for the timeout twice (a retry would), which a busy
# machine's scheduling (66 ms once, with four builds running) never fakes.
in_range "stall: the slowest answer (us) is under twice --redis-timeout" \
  0 $((TIMEOUT * 2000 - 1000)) "$(us "$tmp/stall.$round" 15)"
sv_stop s
lib_finish
