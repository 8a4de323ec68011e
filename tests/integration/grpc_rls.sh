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

# 5. HTTP/2 requests no gRPC client sends (curl, prior knowledge), answered
#    as gRPC's servers answer them (trailers only, grpc-message
#    percent-encoded); the bounds: --max-grpc-connections,
#    --max-header-bytes, --max-input-buffer.
sv_start w -t 1 --max-grpc-connections 2 --max-header-bytes 1024 \
  --max-body 1M --max-input-buffer 1M || lib_finish
M="http://127.0.0.1:$GRPC/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"
# h2 NAME ARGS...: one request, its head and trailers into $tmp/h.NAME
h2() {
  _n=$1; shift
  curl -sS -m 5 --http2-prior-knowledge -i -X POST "$@" 2>&1 |
    tr -d '\r' >"$tmp/h.$_n"
}
has() { # NAME LINE: the answer to request NAME has the line LINE
  if grep -qxF "$2" "$tmp/h.$1"; then pass; else
    fail "$1: no '$2' in: $(tr '\n' '|' <"$tmp/h.$1")"; fi
}
ct='content-type: application/grpc'
h2 ctype -H 'content-type: text/plain' "$M"
has ctype "HTTP/2 415 "
has ctype "grpc-status: 3"
h2 gzip -H "$ct" -H 'grpc-encoding: gzip' "$M"
has gzip "grpc-status: 12"
has gzip "grpc-accept-encoding: identity"
printf '\001\000\000\000\002ab' >"$tmp/comp"
h2 flag -H "$ct" --data-binary @"$tmp/comp" "$M"
has flag "grpc-status: 12"
h2 nomsg -H "$ct" "$M"
has nomsg "grpc-status: 3"
has nomsg "grpc-message: no request message"
# A message cut short (its prefix says 100 bytes, 10 came): not decided on
# what came, as grpc-go answers; nor are 1 to 4 stray bytes.
printf '\000\000\000\000\144\012\001d\022\005\012\003\012\001k' >"$tmp/cut"
h2 cut -H "$ct" --data-binary @"$tmp/cut" "$M"
has cut "grpc-status: 13"
has cut "grpc-message: incomplete message"
printf '\000\000' >"$tmp/stray"
h2 stray -H "$ct" --data-binary @"$tmp/stray" "$M"
has stray "grpc-status: 13"
# Only protobuf messages: application/grpc+json is not served.
h2 json -H 'content-type: application/grpc+json' "$M"
has json "HTTP/2 415 "
h2 bighead -H "$ct" -H "x-big: $(printf '%02000d' 0)" "$M"
has bighead "grpc-status: 8"
h2 pct -H "$ct" "http://127.0.0.1:$GRPC/no%such/Method"
has pct "grpc-status: 12"
has pct "grpc-message: unknown method /no%25such/Method"
run_suite conns
# A client that sends streams and never reads: the daemon stops reading
# from it once its answers back up, rather than queueing them (its memory
# grows by far less than the million frames would take queued: 58 MiB
# before).
rss() { ps -o rss= -p "$(cat "$tmp/sv.w/pid")" | tr -d ' '; }
rss0=$(rss)
"$PY" "$(dirname "$0")/h2_flood.py" "$GRPC" 8 1000000 >"$tmp/flood.n"
say "a client that never reads: $(cat "$tmp/flood.n") frames sent," \
  "RSS $rss0 -> $(rss) KiB"
# (A sanitized build keeps freed memory in quarantine, up to 256 MiB, and
# the refused streams are allocated and freed: there only the plain
# build's figure means anything.)
case $SLUICE in
*/san-*) grew_most=600000 ;;
*) grew_most=24576 ;;
esac
in_range "never reading: the daemon's RSS grew by under $grew_most KiB" \
  -100000 "$grew_most" $(($(rss) - rss0))
sv_stop w

# 6. SIGTERM with calls in flight: every call answered or refused with a
#    clear status, and the daemon stops cleanly (sv_stop checks its exit
#    status and log).
sv_start s -t 2 || lib_finish
$PYT "127.0.0.1:$GRPC" "$URL" slow >"$tmp/slow.out" 2>&1 &
slow=$!
sleep 0.3
sv_stop s
if wait $slow; then pass; else fail "stop: the client failed: $(tail -n 3 "$tmp/slow.out")"; fi
grep -q '^FAIL' "$tmp/slow.out" && fail "stop: $(grep '^FAIL' "$tmp/slow.out")"

# 7. Exact fleet mode: decisions wait for Redis on the workers' loops.
rport=$(free_port)
rs_start r "$rport" || lib_finish
sv_start x -t 2 --store "redis://127.0.0.1:$rport" --redis-timeout 2000 ||
  lib_finish
run_suite default
# Redis stopped: decisions wait (up to --redis-timeout) while the calls'
# deadlines pass or the client cancels; then Redis is back.
rs_kill r STOP
run_suite deadline
# The daemon's side of a deadline: a decision still waiting for Redis at
# the call's grpc-timeout is answered DEADLINE_EXCEEDED then.
printf '\000\000\000\000\026\012\007default\022\013\012\011\012\003key\022\002dl' \
  >"$tmp/dl"
t0=$(date +%s%N)
h2 dl -H "$ct" -H 'grpc-timeout: 300m' --data-binary @"$tmp/dl" \
  "http://127.0.0.1:$GRPC/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"
ms=$((($(date +%s%N) - t0) / 1000000))
has dl "grpc-status: 4"
if [ "$ms" -lt 1500 ]; then pass; else
  fail "grpc-timeout 300m answered after $ms ms (Redis's timeout is 2000)"; fi
rs_kill r CONT
sleep 2.2 # the decisions that waited end (per on_store_error)
curl -s -o /dev/null -w '%{http_code}' "$URL/v1/check?domain=default&key=z" >"$tmp/c"
eq "after the slow Redis, HTTP still answers" 200 "$(cat "$tmp/c")"
sv_stop x

lib_finish
