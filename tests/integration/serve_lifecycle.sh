#!/bin/sh
# serve_lifecycle.sh — integration checks for the life of a `sluice serve`
# process (POSIX sh; curl, wrk, redis-cli, and http_raw.py / resp_raw.py for
# connections held half-way; helpers in serve_lib.sh).
#
#   SLUICE=build/sluice sh tests/integration/serve_lifecycle.sh
#
# Config reloads (SIGHUP, a changed file, an invalid file that keeps the old
# config), reloads under load without a failed request, graceful SIGTERM
# and SIGINT with connections open, --max-connections, --threads 1 and 4,
# --ready-file, and options that refuse to start.
# Counting uses sliding logs over an hour (no window boundary to race);
# waits are polls with generous bounds, never fixed sleeps that a slow
# (sanitizer) build could outrun.

. "$(dirname "$0")/serve_lib.sh"
lib_init serve_lifecycle
HRAW="$PY $(dirname "$0")/http_raw.py"
RAW="$PY $(dirname "$0")/resp_raw.py"
for t in wrk redis-cli; do
  if ! command -v $t >/dev/null 2>&1; then
    echo "serve_lifecycle: '$t' is missing (scripts/deps.sh test installs it)" >&2
    exit 1
  fi
done

# config CHANGE-LIMIT NEW-LIMIT [EXTRA] — writes the config as $tmp/life.new:
# `keep` never changes, `change` and `new` take the limits given, `gone`
# is there only while NEW-LIMIT is 0 (the first version).
config() {
  {
    echo 'domain: life'
    echo 'descriptors:'
    echo '  - key: keep'
    echo '    rate_limit: {policy: "sliding_log:5/h"}'
    echo '  - key: change'
    echo "    rate_limit: {policy: \"sliding_log:$1/h\"}"
    echo '  - key: load'
    echo '    rate_limit: {policy: "gcra:1000000/s"}'
    if [ "$2" -eq 0 ]; then
      echo '  - key: gone'
      echo '    rate_limit: {policy: "sliding_log:5/h"}'
    else
      echo '  - key: new'
      echo "    rate_limit: {policy: \"sliding_log:$2/h\"}"
    fi
  } >"$tmp/life.new"
}
# install — puts $tmp/life.new in place atomically (rename).
install_config() { mv "$tmp/life.new" "$tmp/life.yaml"; }

# limit_of KEY — the limit and remaining of life's rule for KEY, peeking
# (hits=0 charges nothing): "LIMIT REMAINING", or "none".
limit_of() {
  get "$URL/v1/check?domain=life&$1&hits=0"
  jv '" ".join(str(s[f]) for s in d["statuses"][:1] if "limit" in s
                for f in ("limit", "limit_remaining")) or "none"' |
    tr -d '"'
}
reloads() { metric "sluice_config_reloads_total{result=\"$1\"}"; }

# ===========================================================================
# 1. reloads
# ===========================================================================
config 5 0
install_config
sv_start life -t 2 --config "$tmp/life.yaml" || lib_finish
get "$URL/v1/check?domain=life&keep=k"
get "$URL/v1/check?domain=life&keep=k"
get "$URL/v1/check?domain=life&change=c"
get "$URL/v1/check?domain=life&change=c"
eq "before the reload: keep" '5 3' "$(limit_of keep=k)"
eq "before the reload: change" '5 3' "$(limit_of change=c)"
eq "before the reload: gone" '5 5' "$(limit_of gone=g)"

# SIGHUP: `keep` is unchanged and keeps its counter; `change` has a new
# policy (a new state: 7 - 1 after the next request); `gone` no longer
# limits; `new` does.
config 7 2
install_config
sv_signal life HUP
if waitfor 100 sh -c "[ \"\$(curl -s $URL/metrics | grep -c 'reloads_total{result=\"success\"} 1\$')\" = 1 ]"; then
  pass
else
  fail "SIGHUP: sluice_config_reloads_total{result=\"success\"} never reached 1"
fi
if sv_log_has life 'info: config reloaded: 1 domain, 4 rules'; then pass; else
  fail "SIGHUP: no 'config reloaded' line in the log"
fi
eq "SIGHUP: an unchanged rule keeps its counter" '5 3' "$(limit_of keep=k)"
eq "SIGHUP: a changed rule takes its new limit" '7 7' "$(limit_of change=c)"
eq "SIGHUP: a removed rule no longer limits" none "$(limit_of gone=g)"
eq "SIGHUP: an added rule limits" '2 2' "$(limit_of new=n)"

# A changed file reloads by itself, within about a second (we allow 10 s:
# sanitizer builds are slow).
config 9 2
t0=$(now_ms)
install_config
if waitfor 100 sh -c "curl -s '$URL/v1/check?domain=life&change=c&hits=0' | grep -q '\"limit\":9,'"; then
  pass
else
  fail "file change: the new limit never applied"
fi
in_range "file change: reloaded within 10 s (ms)" 0 10000 $(($(now_ms) - t0))
# (a reload is counted once the old config is retired, a moment after the
# new one applies)
if waitfor 100 sh -c "[ \"\$(curl -s $URL/metrics | grep -c 'reloads_total{result=\"success\"} 2\$')\" = 1 ]"; then
  pass
else
  fail "file change: not counted as a successful reload: $(reloads success)"
fi
eq "file change: the unchanged rule kept its counter" '5 3' "$(limit_of keep=k)"

# An invalid file: the old config stays, the log says where, the failure
# is counted; SIGHUP retries it (and fails again).
cat >"$tmp/life.new" <<'EOF'
domain: life
descriptors:
  - key: keep
    rate_limit: {policy: "sliding_log:0/h"}
EOF
install_config
if waitfor 100 sv_log_has life 'error: config reload failed: keeping the running config'; then
  pass
else
  fail "invalid file: no 'config reload failed' in the log"
fi
if sv_log_has life "error: $tmp/life.yaml:4:[0-9]+: "; then pass; else
  fail "invalid file: the log has no $tmp/life.yaml:LINE:COL: line: $(grep error "$LOG" | head -n 1)"
fi
eq "invalid file: counted as a failed reload" 1 "$(reloads failure)"
eq "invalid file: no success counted" 2 "$(reloads success)"
eq "invalid file: the old rules still apply (change)" '9 9' "$(limit_of change=c)"
eq "invalid file: the old rules still apply (keep)" '5 3' "$(limit_of keep=k)"
sv_signal life HUP
waitfor 100 sh -c "[ \"\$(curl -s $URL/metrics | grep -c 'reloads_total{result=\"failure\"} 2\$')\" = 1 ]"
eq "invalid file, SIGHUP: a second failure" 2 "$(reloads failure)"
get "$URL/healthz"
want_code "invalid file: still healthy" 200
config 11 2
install_config
waitfor 100 sh -c "curl -s '$URL/v1/check?domain=life&change=c&hits=0' | grep -q '\"limit\":11,'"
eq "a fixed file reloads again" '11 11' "$(limit_of change=c)"
eq "a fixed file: the unchanged rule still kept its counter" '5 3' "$(limit_of keep=k)"

# Reloads under load: wrk for 4 s on a rule that never denies, while the
# config alternates and SIGHUP arrives every 0.4 s: no failed request.
ok0=$(reloads success)
wrk -t 2 -c 8 -d 4s --timeout 5s "$URL/v1/check?domain=life&load=x" \
  >"$tmp/wrk" 2>&1 &
wrkpid=$!
lib_track $wrkpid
sleep 0.5
i=0
while [ $i -lt 6 ]; do
  config $((20 + i)) $((3 + i))
  install_config
  sv_signal life HUP
  sleep 0.4
  i=$((i + 1))
done
waitfor 300 sh -c "! kill -0 $wrkpid 2>/dev/null"
wait $wrkpid
eq "under load: wrk's exit status" 0 $?
n=$(awk '/requests in/ { print $1 }' "$tmp/wrk")
in_range "under load: requests served" 100 100000000 "$n"
if grep -Eq 'Non-2xx|Socket errors' "$tmp/wrk"; then
  fail "under load: failed requests: $(grep -E 'Non-2xx|Socket errors' "$tmp/wrk" | tr '\n' ' ')"
else
  pass
fi
waitfor 100 sh -c "[ \$(curl -s $URL/metrics | sed -n 's/^sluice_config_reloads_total{result=\"success\"} //p') -ge $((ok0 + 6)) ]"
in_range "under load: every SIGHUP reloaded" $((ok0 + 6)) $((ok0 + 20)) \
  "$(reloads success)"
eq "under load: no failed reload" 2 "$(reloads failure)"
eq "under load: the last config applies" '25 25' "$(limit_of change=c)"
eq "under load: the unchanged rule still kept its counter" '5 3' "$(limit_of keep=k)"

sv_stop life

# Kubernetes mounts a ConfigMap as symlinks (NAME -> ..data/NAME, ..data ->
# a timestamped directory) and updates it by swapping ..data: a directory
# config follows the swap.
mkdir -p "$tmp/cm/v1" "$tmp/cm/v2" "$tmp/cmconf"
printf 'domain: cm\ndescriptors:\n  - key: a\n    rate_limit: {policy: "sliding_log:5/h"}\n' \
  >"$tmp/cm/v1/cm.yaml"
printf 'domain: cm\ndescriptors:\n  - key: a\n    rate_limit: {policy: "sliding_log:6/h"}\n' \
  >"$tmp/cm/v2/cm.yaml"
ln -s ../cm/v1 "$tmp/cmconf/..data"
ln -s ..data/cm.yaml "$tmp/cmconf/cm.yaml"
sv_start cm -t 1 --config "$tmp/cmconf" || lib_finish
get "$URL/v1/check?domain=cm&a=1"
want_jv "ConfigMap: the first version" 'd["statuses"][0]["limit"]' 5
ln -s ../cm/v2 "$tmp/cmconf/..data_tmp"
mv -T "$tmp/cmconf/..data_tmp" "$tmp/cmconf/..data"
if waitfor 100 sh -c "curl -s '$URL/v1/check?domain=cm&a=1&hits=0' | grep -q '\"limit\":6,'"; then
  pass
else
  fail "ConfigMap: the swapped ..data never applied"
fi
sv_stop cm

# ===========================================================================
# 2. stopping
# ===========================================================================
# A request in flight when SIGTERM arrives is answered; new connections are
# refused meanwhile; then the daemon exits 0.
sv_start g1 -t 2 --config "$tmp/life.yaml" || lib_finish
$HRAW inflight "$HTTP" "$PID" '/v1/check?domain=life&keep=inflight' 0.5 >"$tmp/inflight"
eq "SIGTERM: a new connection is refused" 'new connection: refused' \
  "$(sed -n 1p "$tmp/inflight")"
like "SIGTERM: the request in flight is answered" \
  '^200 \{"overall_code":"OK",.*"limit_remaining":4,' "$(sed -n 2p "$tmp/inflight")"
sv_wait_exit g1
eq "SIGTERM: exit status" 0 "$sv_rc"
if sv_log_has g1 'info: SIGTERM: stopping' && sv_log_has g1 'info: stopped$'; then
  pass
else
  fail "SIGTERM: the log does not say stopping ... stopped"
fi

# /readyz during the drain: 503.
sv_start g2 -t 1 || lib_finish
$HRAW inflight "$HTTP" "$PID" /readyz 0.3 >"$tmp/inflight"
eq "SIGTERM: /readyz while stopping" '503 {"status":"stopping"}' \
  "$(sed -n 2p "$tmp/inflight")"
sv_wait_exit g2
eq "SIGTERM (readyz): exit status" 0 "$sv_rc"

# A request that never completes is cut at --shutdown-grace.
sv_start g3 -t 1 --shutdown-grace 1000 || lib_finish
t0=$(now_ms)
$HRAW inflight "$HTTP" "$PID" /healthz 3 >"$tmp/inflight"
sv_wait_exit g3
t1=$(now_ms)
eq "--shutdown-grace 1000: exit status" 0 "$sv_rc"
eq "--shutdown-grace 1000: the unfinished request gets nothing" 'no response' \
  "$(sed -n 2p "$tmp/inflight")"
in_range "--shutdown-grace 1000: stopped within the grace (+ slack, ms)" 0 10000 \
  $((t1 - t0))

# An idle Redis-protocol connection is closed at once.
sv_start g4 -t 2 || lib_finish
$RAW "$RESP" hold 30 >"$tmp/hold" &
holder=$!
lib_track $holder
waitfor 100 grep -qs HELD "$tmp/hold"
t0=$(now_ms)
sv_signal g4 TERM
sv_wait_exit g4
t1=$(now_ms)
wait $holder
eq "SIGTERM: exit status with an idle RESP connection" 0 "$sv_rc"
like "SIGTERM: the idle RESP connection is closed" '^CLOSED after' \
  "$(tail -n 1 "$tmp/hold")"
in_range "SIGTERM: an idle RESP connection does not hold the exit (ms)" 0 4000 \
  $((t1 - t0))

# An idle keep-alive HTTP connection does not hold the exit for the whole
# --shutdown-grace (h2o 2.2's h2o_context_request_shutdown closes idle
# HTTP/2 connections only; serve closes idle HTTP/1 ones itself), so a
# proxy that pools connections (nginx `keepalive`, Envoy) does not make
# every shutdown take the full grace.
sv_start g6 -t 1 --shutdown-grace 8000 || lib_finish
t0=$(now_ms)
eq "SIGTERM closes an idle keep-alive HTTP connection at once" closed \
  "$($HRAW idle "$HTTP" "$PID" 4)"
sv_wait_exit g6
t1=$(now_ms)
eq "SIGTERM with an idle HTTP connection: exit status" 0 "$sv_rc"
in_range "an idle HTTP connection does not hold the exit (ms)" 0 4000 \
  $((t1 - t0))

# SIGINT stops the same way.
sv_start g5 -t 1 || lib_finish
sv_signal g5 INT
sv_wait_exit g5
eq "SIGINT: exit status" 0 "$sv_rc"
if sv_log_has g5 'info: SIGINT: stopping'; then pass; else
  fail "SIGINT: no 'SIGINT: stopping' in the log"
fi

# ===========================================================================
# 3. --max-connections, --threads
# ===========================================================================
# (RESP may take all three: its own budget would otherwise be 80%)
sv_start m -t 2 --max-connections 3 --max-resp-connections 3 || lib_finish
holders=""
for i in 1 2 3; do
  $RAW "$RESP" hold 60 >"$tmp/hold$i" &
  holders="$holders $!"
  lib_track $!
  waitfor 100 grep -qs HELD "$tmp/hold$i"
done
get "$URL/healthz"
eq "--max-connections 3: a fourth connection is closed unanswered" 000 "$code"
like "--max-connections 3: redis-cli is turned away too" \
  '(Connection reset|closed|Error|error|refused)' \
  "$(timeout 10 redis-cli -h 127.0.0.1 -p "$RESP" PING 2>&1)"
set -- $holders
kill "$1"
if waitfor 100 _sv_healthy; then pass; else
  fail "--max-connections 3: a freed slot is never usable"
fi
# (2, and one per probe that came before the daemon saw the slot free)
in_range "--max-connections 3: the rejections are counted" 2 200 \
  "$(($(metric 'sluice_connections_rejected_total{protocol="http"}') + \
    $(metric 'sluice_connections_rejected_total{protocol="resp"}')))"
for p in $holders; do
  kill "$p" 2>/dev/null
  wait "$p" 2>/dev/null
done
sv_stop m

# --threads 1 and 4: the limit holds exactly whichever thread (and
# connection) decides: 60 requests at once on sliding_log:25/h give 25
# allowed; 64 Redis clients at once on sliding_log:40/h, 40.
for n in 1 4; do
  sv_start t$n -t $n || lib_finish
  if sv_log_has t$n "info: $n worker threads"; then pass; else
    fail "--threads $n: the log does not say $n worker threads"
  fi
  : >"$tmp/par.cfg"
  i=0
  while [ $i -lt 60 ]; do
    echo "url = \"$URL/v1/throttle?key=par&policy=sliding_log:25/h\"" >>"$tmp/par.cfg"
    echo 'output = "/dev/null"' >>"$tmp/par.cfg"
    i=$((i + 1))
  done
  curl -s -Z --parallel-max 20 --max-time 30 -K "$tmp/par.cfg" \
    -w '%{http_code}\n' >"$tmp/par.codes" 2>"$tmp/par.err"
  eq "--threads $n: 60 parallel requests, limit 25: 200s" 25 \
    "$(grep -c '^200$' "$tmp/par.codes")"
  eq "--threads $n: 60 parallel requests, limit 25: 429s" 35 \
    "$(grep -c '^429$' "$tmp/par.codes")"
  printf '*3\r\n$11\r\nSL.THROTTLE\r\n$6\r\nshared\r\n$16\r\nsliding_log:40/h\r\nQUIT\r\n' \
    >"$tmp/many.in"
  $RAW "$RESP" many 64 "$tmp/many.in" >"$tmp/many"
  eq "--threads $n: 64 Redis clients, limit 40: allowed" 40 \
    "$(awk '$3 ~ /^\*6/ && $4 == "[:1," { n += $1 } END { print n + 0 }' "$tmp/many")"
  if [ $n -eq 1 ]; then
    # Without --config there is nothing to reload: SIGHUP says so.
    sv_signal t1 HUP
    if waitfor 100 sv_log_has t1 'no --config: nothing to reload'; then pass; else
      fail "SIGHUP without --config: no 'nothing to reload' in the log"
    fi
    get "$URL/healthz"
    want_code "SIGHUP without --config: still serving" 200
  fi
  sv_stop t$n
done
# Many workers and the observer's threads: a worker's sockets hold its
# thread's buffer recycler (h2o's, thread-local), so its loop is disposed
# of on its own thread; disposed of on the main thread after the workers
# ended, it read an exited thread's stack, unmapped once glibc kept too
# many of them (a SIGSEGV at SIGTERM with 6 workers and a denial log).
sv_start t6 -t 6 --denial-log "$tmp/t6.log" || lib_finish
i=0 pids=
while [ $i -lt 40 ]; do
  curl -s --max-time 10 -o /dev/null \
    "$URL/v1/throttle?key=k$((i % 10))&policy=gcra:1/h" &
  pids="$pids $!"
  i=$((i + 1))
done
# shellcheck disable=SC2086 # the curls' pids
wait $pids
# Its threads are named (docs/architecture.md): top -H and ps -L tell
# the six workers, the log's writer and the top keys' counter apart.
names=$(cat /proc/"$PID"/task/*/comm 2>/dev/null | sort | tr '\n' ' ')
eq "-t 6 --denial-log: the threads' names" \
  "sluice sluice-denylog sluice-topkeys sluice-w0 sluice-w1 sluice-w2 sluice-w3 sluice-w4 sluice-w5 " \
  "$(echo "$names" | tr ' ' '\n' | grep -E '^sluice' | sort -u | tr '\n' ' ')"
sv_stop t6

# ===========================================================================
# 4. --ready-file
# ===========================================================================
# sv_start reads every daemon's ports from its ready file; here, the file
# itself: JSON with this daemon's pid and both addresses as bound (port 0
# resolved), null for a listener that is off, gone after a clean stop.
sv_start rf -t 1 --grpc off || lib_finish
rf=$tmp/sv.rf/ready
eq "--ready-file: the file, as JSON" \
  "{\"pid\": $PID, \"http\": \"127.0.0.1:$HTTP\", \"resp\": \"127.0.0.1:$RESP\"}" \
  "$(cat "$rf")"
eq "--ready-file: parses as JSON" "[$PID, \"127.0.0.1:$HTTP\"]" \
  "$("$PY" -S -c 'import json, sys; d = json.load(open(sys.argv[1]))
print(json.dumps([d["pid"], d["http"]]))' "$rf")"
like "--ready-file: a port the kernel picked" '^[1-9][0-9]*$' "$HTTP"
sv_stop rf
if [ -e "$rf" ]; then fail "--ready-file: still there after a clean stop"; else pass; fi
sv_start rf_off -t 1 --resp off --grpc off || lib_finish
like "--ready-file: a listener that is off is null" \
  '^\{"pid": [0-9]+, "http": "127\.0\.0\.1:[0-9]+", "resp": null\}$' \
  "$(cat "$tmp/sv.rf_off/ready")"
sv_stop rf_off
timeout 20 "$SLUICE" serve --http 127.0.0.1:0 --resp off --grpc off \
  --ready-file "$tmp/no/such/dir/ready" </dev/null >/dev/null 2>"$tmp/rf.err"
eq "--ready-file in a missing directory: exit status" 1 $?
like "--ready-file in a missing directory: says so" \
  'cannot write --ready-file .*no/such/dir/ready' "$(cat "$tmp/rf.err")"
"$SLUICE" serve --help >"$tmp/help.out"
like "serve --help documents --ready-file" '--ready-file PATH' \
  "$(cat "$tmp/help.out")"
eq "serve --help: no line over 79 columns" 0 \
  "$(awk 'length($0) > 79' "$tmp/help.out" | grep -c '')"

# ===========================================================================
# 5. refusing to start
# ===========================================================================
# bad_option NAME ARGS... — `sluice serve ARGS` exits 2 at once, saying why.
bad_option() {
  _n=$1
  shift
  timeout 20 "$SLUICE" serve "$@" </dev/null >/dev/null 2>"$tmp/opt.err"
  eq "serve $_n: exit status" 2 $?
  like "serve $_n: a message" '^sluice serve: ' "$(head -n 1 "$tmp/opt.err")"
}
bad_option "--deny-status 200" --http 127.0.0.1:0 --resp off --deny-status 200
bad_option "--headers bogus" --http 127.0.0.1:0 --resp off --headers bogus
bad_option "--threads 0" --http 127.0.0.1:0 --resp off --threads 0
bad_option "--max-memory 10" --http 127.0.0.1:0 --resp off -m 10
bad_option "--max-connections x" --http 127.0.0.1:0 --resp off --max-connections x
bad_option "both listeners off" --http off --resp off
bad_option "an extra argument" --http 127.0.0.1:0 --resp off extra
# A port held by another program (no SO_REUSEPORT there): exit 1.
"$PY" -S -c 'import socket, time
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen()
print(s.getsockname()[1], flush=True); time.sleep(60)' >"$tmp/busy" </dev/null &
busy=$!
lib_track $busy
waitfor 100 test -s "$tmp/busy"
timeout 20 "$SLUICE" serve --http "127.0.0.1:$(cat "$tmp/busy")" --resp off \
  </dev/null >/dev/null 2>"$tmp/busy.err"
eq "serve on a port in use: exit status" 1 $?
like "serve on a port in use: says so" 'cannot listen on 127\.0\.0\.1:[0-9]+: [Aa]ddress (already )?in use' \
  "$(cat "$tmp/busy.err")"
kill $busy 2>/dev/null
wait $busy 2>/dev/null

lib_finish
