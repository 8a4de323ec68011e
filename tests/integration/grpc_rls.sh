#!/bin/sh
# grpc_rls.sh — sluice's gRPC front end (--grpc) against a real client:
# Python's grpcio (Debian python3-grpcio), with messages protoc generates
# from the project's own proto/ at test time (grpc_rls.py holds the
# checks). envoy's ShouldRateLimit for every case of serve_http.sh's
# /v1/check suite, plus deadlines, cancellation, many concurrent calls,
# malformed messages, the health check, an unknown domain, hits_addend;
# the stop with calls in flight; and exact fleet mode (decisions waiting
# for Redis on the workers' loops).
#
#   SLUICE=build/sluice sh tests/integration/grpc_rls.sh   (make integration)

. "$(dirname "$0")/serve_lib.sh"
. "$(dirname "$0")/fleet_lib.sh"
lib_tools="$lib_tools protoc curl"
lib_init grpc_rls

if ! "$PY" -c 'import grpc, google.protobuf' 2>/dev/null; then
  echo "grpc_rls.sh: python3-grpcio and python3-protobuf are missing" \
    "(scripts/deps.sh test installs them)" >&2
  exit 1
fi
proto=$(dirname "$0")/../../proto
mkdir -p "$tmp/stubs"
if ! protoc --python_out="$tmp/stubs" -I"$proto" \
  $(cd "$proto" && find envoy grpc -name '*.proto'); then
  fail "protoc: cannot generate the Python messages from proto/"
  lib_finish
fi
PYT="$PY $(dirname "$0")/grpc_rls.py $tmp/stubs"

# run_suite NAME — runs grpc_rls.py's suite NAME against the daemon in use;
# every line it prints is a check.
run_suite() {
  timeout 120 $PYT "127.0.0.1:$GRPC" "$URL" "$1" >"$tmp/py.out" 2>"$tmp/py.err"
  _rc=$?
  while IFS= read -r _l; do
    case "$_l" in
      PASS*) pass ;;
      FAIL*) fail "grpc $1: ${_l#FAIL }" ;;
    esac
  done <"$tmp/py.out"
  if [ $_rc -ne 0 ]; then
    fail "grpc $1: the client exited $_rc: $(tail -n 5 "$tmp/py.err")"
  fi
}

# 1. The embedded default config (domain "default", key "key",
#    sliding_window:100/m); 100 streams a connection at most.
sv_start d -t 2 --grpc-max-streams 100 || lib_finish
eq "the ready file names the gRPC listener" 1 \
  "$(grep -c '"grpc": "127.0.0.1:[0-9]*"' "$tmp/sv.d/addrs")"
run_suite default
curl -s "$URL/metrics" >"$tmp/m"
for m in sluice_grpc_calls_total sluice_grpc_errors_total \
  sluice_grpc_unknown_domain_total; do
  if grep -q "^# HELP $m " "$tmp/m"; then pass; else fail "/metrics: no $m"; fi
done
sv_stop d

# 2. envoyproxy/ratelimit's README examples, as serve_http.sh serves them.
mkdir -p "$tmp/conf"
fx=$(dirname "$0")/../fixtures
cp "$fx/envoy/example2.yaml" "$tmp/conf/messaging.yaml"
cp "$fx/envoy/example5.yaml" "$tmp/conf/internal.yaml"
cp "$fx"/served/*.yaml "$tmp/conf/"
sv_start e -t 2 --config "$tmp/conf" || lib_finish
run_suite examples
sv_stop e

# 3. --headers none: envoy gets no rate limit headers to add.
sv_start n -t 1 --headers none || lib_finish
run_suite noheaders
sv_stop n

# 4. --grpc off: no gRPC listener, and the ready file as before gRPC.
sv_start o -t 1 --grpc off || lib_finish
eq "--grpc off: no \"grpc\" in the ready file" 0 \
  "$(grep -c '"grpc"' "$tmp/sv.o/addrs")"
sv_stop o

# 5. SIGTERM with calls in flight: every call answered or refused with a
#    clear status, and the daemon stops cleanly (sv_stop checks its exit
#    status and log).
sv_start s -t 2 || lib_finish
$PYT "127.0.0.1:$GRPC" "$URL" slow >"$tmp/slow.out" 2>&1 &
slow=$!
sleep 0.3
sv_stop s
if wait $slow; then pass; else fail "stop: the client failed: $(tail -n 3 "$tmp/slow.out")"; fi
grep -q '^FAIL' "$tmp/slow.out" && fail "stop: $(grep '^FAIL' "$tmp/slow.out")"

# 6. Exact fleet mode: decisions wait for Redis on the workers' loops.
rport=$(free_port)
rs_start r "$rport" || lib_finish
sv_start x -t 2 --store "redis://127.0.0.1:$rport" --redis-timeout 2000 ||
  lib_finish
run_suite default
# Redis stopped: decisions wait (up to --redis-timeout) while the calls'
# deadlines pass or the client cancels; then Redis is back.
rs_kill r STOP
run_suite deadline
rs_kill r CONT
sleep 2.2 # the decisions that waited end (per on_store_error)
curl -s -o /dev/null -w '%{http_code}' "$URL/v1/check?domain=default&key=z" >"$tmp/c"
eq "after the slow Redis, HTTP still answers" 200 "$(cat "$tmp/c")"
sv_stop x

lib_finish
