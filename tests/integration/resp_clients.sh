#!/bin/sh
# resp_clients.sh — real Redis client libraries against sluice's RESP port,
# each with its default settings: redis-cli, redis-py (Debian's
# python3-redis), and ioredis and node-redis (npm `redis`, pinned in
# tests/clients/package.json, installed by scripts/deps.sh with `npm ci`).
# Each connects, pipelines, runs a transaction (redis-py's pipeline() is
# MULTI/EXEC by default, as are the node clients' multi()), sees a denied
# or failed command as its own error type, and reconnects after sluice is
# stopped and started again on the same port. node-redis also asks for
# RESP3 (HELLO 3). Every client run is bounded in time.
#
# The client scripts (tests/clients/*) print "ok NAME" or "FAIL NAME: why"
# per check; each line is one check here.
. "$(dirname "$0")/serve_lib.sh"
lib_tools="$lib_tools redis-cli node"
lib_init resp_clients
clients=$(cd "$(dirname "$0")/../clients" && pwd)
if ! $PY -c 'import redis' 2>/dev/null; then
  echo "resp_clients: python3-redis is missing (scripts/deps.sh test installs it)" >&2
  exit 1
fi
if [ ! -d "$clients/node_modules/ioredis" ] || [ ! -d "$clients/node_modules/redis" ]; then
  echo "resp_clients: tests/clients/node_modules is missing (scripts/deps.sh test runs npm ci)" >&2
  exit 1
fi

# tally FILE: one check per "ok"/"FAIL" line a client printed; a client
# that printed nothing fails.
tally() {
  if ! grep -q '^ok \|^FAIL ' "$1"; then
    fail "$2 printed no result: $(head -c 400 "$1")"
    return
  fi
  while IFS= read -r line; do
    case $line in
    ok\ *) pass ;;
    FAIL\ *) fail "${line#FAIL }" ;;
    esac
  done <"$1"
}
py() { timeout 60 $PY "$clients/py_client.py" "$@"; }
nd() { (cd "$clients" && timeout 60 node node_client.js "$@"); }

sv_start a -t 2 --http off || lib_finish
port=$RESP

# --- redis-cli ---------------------------------------------------------------
rc() { timeout 20 redis-cli -h 127.0.0.1 -p "$port" "$@" </dev/null 2>&1 | sed '/^$/d' | paste -sd' ' -; }
eq "redis-cli: PING" PONG "$(rc PING)"
eq "redis-cli: a transaction" 'OK QUEUED QUEUED 0 2 1 -1 60 PONG' \
  "$(printf 'MULTI\nCL.THROTTLE cli:t 1 1 60\nPING\nEXEC\n' |
    timeout 20 redis-cli -h 127.0.0.1 -p "$port" 2>&1 | paste -sd' ' -)"
eq "redis-cli: EXEC without MULTI" 'ERR EXEC without MULTI' "$(rc EXEC)"
eq "redis-cli: HELLO 3 (-3)" PONG \
  "$(timeout 20 redis-cli -3 -h 127.0.0.1 -p "$port" PING </dev/null 2>&1)"
# redis-cli --stat reads INFO every second: keys, memory, clients, blocked,
# requests (and the change), connections. (stdbuf: redis-cli buffers a
# pipe's output, and timeout ends it.)
timeout 3.5 stdbuf -oL redis-cli -h 127.0.0.1 -p "$port" --stat -i 1 \
  </dev/null >"$tmp/stat" 2>&1 || true
like "redis-cli --stat prints numbers" \
  '^[0-9]+ +[0-9.]+[KMGB]? +[0-9]+ +0 +[0-9]+ \(\+[0-9]+\) +[0-9]+ *$' \
  "$(sed -n 4p "$tmp/stat" | tr -d '\r')"

# --- the libraries --------------------------------------------------------------
py "$port" basic >"$tmp/py" 2>&1
tally "$tmp/py" redis-py
for lib in ioredis node-redis; do
  nd "$lib" "$port" basic >"$tmp/$lib" 2>&1
  tally "$tmp/$lib" "$lib"
done
nd node-redis "$port" resp3 >"$tmp/resp3" 2>&1
tally "$tmp/resp3" "node-redis with RESP: 3"

# --- reconnecting: sluice stops and starts again on the same port -----------
mkdir -p "$tmp/re"
py "$port" reconnect "$tmp/re" >"$tmp/re/py.out" 2>&1 &
p1=$!
nd ioredis "$port" reconnect "$tmp/re" >"$tmp/re/ioredis.out" 2>&1 &
p2=$!
nd node-redis "$port" reconnect "$tmp/re" >"$tmp/re/node-redis.out" 2>&1 &
p3=$!
lib_pids="$lib_pids $p1 $p2 $p3"
waitfor 300 sh -c "test -f '$tmp/re/py.ready' && test -f '$tmp/re/ioredis.ready' && test -f '$tmp/re/node-redis.ready'" ||
  fail "reconnect: the clients did not connect"
sv_stop a
sleep 1
sv_start b -t 2 --http off --resp "127.0.0.1:$port" || lib_finish
touch "$tmp/re/restarted"
wait $p1 $p2 $p3 2>/dev/null || true
for c in py ioredis node-redis; do tally "$tmp/re/$c.out" "$c (reconnect)"; done

sv_stop b

# --- MULTI's bound: 1024 commands (or 1 MiB) queued per connection ----------
sv_start m -t 1 || lib_finish
$PY -c 'import sys; sys.stdout.write("MULTI\r\n" + "PING\r\n" * 1025 + "EXEC\r\nPING\r\n")' >"$tmp/multi.in"
$PY "$(dirname "$0")/resp_raw.py" "$RESP" send "$tmp/multi.in" 5 >"$tmp/multi.out"
eq "MULTI: 1024 commands queue" 1024 "$(grep -c '^+QUEUED$' "$tmp/multi.out")"
like "MULTI: the 1025th is refused, and says why" \
  '^-ERR the transaction is too big \(at most 1024 commands, 1048576 bytes\)' \
  "$(grep '^-ERR' "$tmp/multi.out")"
eq "MULTI: EXEC then aborts; the connection goes on" \
  '-EXECABORT Transaction discarded because of previous errors.|+PONG|OPEN' \
  "$(tail -n 3 "$tmp/multi.out" | paste -sd'|' -)"
eq "MULTI: the refusal is counted" 1 "$(metric sluice_resp_multi_refused_total)"
eq "MULTI: nothing stays queued" 0 "$(metric sluice_resp_multi_queued_commands)"
sv_stop m
lib_finish
