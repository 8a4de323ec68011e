#!/bin/sh
# redis_parity.sh — exact mode's Redis script decides as the engine does
# (POSIX sh).
#
#   SLUICE=build/sluice TOOLS=build/tests/tools \
#     sh tests/integration/redis_parity.sh                 (make integration)
#
# Starts its own redis-server on a free loopback port (no persistence) and
# runs tests/tools/parity against it: random traces of all six algorithms
# (and fixed sliding_window traces where the script's double estimates of
# wide quotients are one too high or too low, so that both its fix-ups
# count) through both sl_take_all and the script (src/fleet/decide.lua) on
# the same clock, every field of every decision compared (rounds of several
# requests in one batched call too; forced charges, decide.lua's "f" mode
# against sl_limiter_force, level for level, with ordinary requests deciding
# on the debts they leave, and fixed gcra and leaky_bucket traces where a
# clock behind the TAT sees a debt past fill_max by under a ns), TTLs and
# key hygiene checked; CL.THROTTLE's cell traces: mixed rates on one key
# against algo_cell_decide, the key's decimal TAT and PTTL checked), for a
# few seeds; then once on Redis's own clock (TIME), the
# engine deciding at the instant the script reports. Every failure is
# printed as "FAIL: <check>: <why>" with parity's first mismatches; exits 1
# if any check failed. A few seconds, under the sanitizers too.

. "$(dirname "$0")/check_lib.sh"
# Debian's python3 first: a version manager's shim can be slow.
if [ -z "${PY:-}" ]; then
  if [ -x /usr/bin/python3 ]; then PY=/usr/bin/python3; else PY=python3; fi
fi
TOOLS=${TOOLS:-build/tests/tools}
lib_tools="redis-server redis-cli timeout $PY"
lib_init redis_parity

redis_pid=""
# Stops the redis-server this script started, then removes $tmp.
lib_cleanup() {
  if [ -n "$redis_pid" ]; then
    kill -TERM "$redis_pid" 2>/dev/null
    _i=0
    while kill -0 "$redis_pid" 2>/dev/null && [ $_i -lt 50 ]; do
      sleep 0.1
      _i=$((_i + 1))
    done
    kill -KILL "$redis_pid" 2>/dev/null
    wait "$redis_pid" 2>/dev/null
  fi
  rm -rf "$tmp"
}

if [ ! -x "$TOOLS/parity" ]; then
  echo "redis_parity.sh: '$TOOLS/parity' is not an executable (run make first)" >&2
  exit 1
fi

free_port() {
  "$PY" -c 'import socket
s = socket.socket()
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])'
}

pong() { [ "$(timeout 2 redis-cli -h 127.0.0.1 -p "$port" PING 2>/dev/null)" = PONG ]; }

# A port picked by the kernel can be taken again before redis-server binds
# it: try a few.
for _try in 1 2 3; do
  port=$(free_port)
  redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no \
    --daemonize no --dir "$tmp" </dev/null >"$tmp/redis.log" 2>&1 &
  redis_pid=$!
  _i=0
  while ! pong && kill -0 "$redis_pid" 2>/dev/null && [ $_i -lt 100 ]; do
    sleep 0.1
    _i=$((_i + 1))
  done
  pong && break
  kill -KILL "$redis_pid" 2>/dev/null
  wait "$redis_pid" 2>/dev/null
  redis_pid=""
done
if [ -z "$redis_pid" ]; then
  fail "redis-server: never answered PING; its log:"
  tail -n 20 "$tmp/redis.log" | sed 's/^/    /' >&2
  lib_finish
fi

# run NAME ARGS... — parity ARGS against the server: exit 0 and a
# "mismatches=0" line for each of the six algorithms (shown, with the count
# of forced charges and of the negative levels they left).
run() {
  _name=$1
  shift
  timeout 120 "$TOOLS/parity" --port "$port" "$@" >"$tmp/out" 2>"$tmp/err"
  _rc=$?
  grep -e 'decisions=' -e '^parity: forced' "$tmp/out" | sed "s/^/  [$_name] /"
  _ok=$(grep -c 'decisions=[0-9]* mismatches=0$' "$tmp/out")
  if [ "$_rc" -eq 0 ] && [ "$_ok" -eq 6 ]; then
    pass
  else
    fail "$_name: parity exited $_rc with $_ok of 6 algorithms clean"
    head -n 60 "$tmp/err" | sed 's/^/    /' >&2
  fi
}

for seed in 1 2 3; do
  run "seed $seed" --seed "$seed" --steps 150 --traces 10
done
run "Redis TIME" --time --seed 7 --steps 80 --traces 2

lib_finish
