#!/bin/sh
# module.sh — `make bench-fleet`'s Redis module part: build/sluice-redis.so
# beside its anchors, every figure of one run on this machine (127.0.0.1).
#
#   SLUICE=build/sluice MODULE=build/sluice-redis.so sh bench/fleet/module.sh
#
# Three redis-servers, no persistence: one with the module for the
# commands sent straight at Redis, and one for each daemon, the same but
# for the module (loaded in one), so that the two daemons' Redis hold the
# same keys and nothing else. redis-benchmark -c 50 -P 16 -r KEYS (random
# keys), each figure the best of BENCH_REPEAT (3) interleaved runs of
# BENCH_N requests, once per key space of BENCH_KEYS ("10000 100000"),
# each on servers of its own: 10,000 keys of each kind fit in a cache,
# 100,000 (300,000 in the first Redis) need a large share of the last
# level's, which neighbours share, and the module's remaining cost is
# Redis's lookups of its keys, which wait on memory there:
#   module  SL.THROTTLE key token_bucket:1000/h 1, straight at Redis
#   lua     EVALSHA of bench/server/tokenbucket.lua (the usual token bucket
#           in a script) at the same Redis
#   incr    INCR at the same Redis: the cheapest write there is
#   setpx   SET key value PX ms (a 20-byte value, as a token bucket's
#           state) at the same Redis, for scale, not a target: the
#           cheapest write that, like every state key, has a TTL
#   daemon  sluice serve --store redis://... --threads 1 (exact mode,
#           --redis-timeout 5000: no decision falls back on a loaded
#           machine, which would flatter the figures), its
#           RESP SL.THROTTLE, once in front of each Redis: SL.DECIDE
#           (module detected) against EVALSHA of decide.lua (Lua path)
# and, from INFO commandstats, Redis's CPU per exact decision (usec of
# sl.decide or evalsha over the decisions the daemon sent). And each
# figure once more from the CPU time the redis-server process spent
# (/proc: user and system), per request or per decision: where Redis is
# the bottleneck its rate is the inverse, whoever limited the rates
# measured (one redis-benchmark thread parses six integers a reply for
# SL.THROTTLE, one for INCR, and is often the limit). Targets
# (issue 19): module >= 4x lua, module >= 0.7x incr, CPU per decision with
# the module <= 0.3x the Lua path's, daemon on the module >= 1.3x the Lua
# path. The machine is shared: the ratios, measured side by side, are
# the figures; absolute rates move with the neighbours' load.
set -u
SLUICE=${SLUICE:-build/sluice}
MODULE=${MODULE:-build/sluice-redis.so}
N=${BENCH_N:-300000}
SETV=xxxxxxxxxxxxxxxxxxxx
REPEAT=${BENCH_REPEAT:-3}
SPACES=${BENCH_KEYS:-10000 100000}
here=$(cd "$(dirname "$0")" && pwd)
BENCH=bench-fleet
. "$here/../lib.sh"
# wait_port PORT: until a Redis (or sluice's RESP) answers PING there.
wait_port() {
  wait_for redis-cli -p "$1" PING || die "port $1 never answered"
}

# BENCH_PIN=1: the redis-servers run on the last core and everything
# else (the daemons, redis-benchmark) on the others, so that
# usec_per_call, wall time inside a command, is not inflated by Redis
# being descheduled in the middle of one by a process sharing its core.
# By default only on 4 cores or more: on a smaller machine the daemons
# and the client then share what is left, and the daemons' rates measure
# that. (Redis's CPU time per request, also printed, is not inflated by
# descheduling.) BENCH_PIN=0 turns it off everywhere.
CORES=$(nproc)
PIN=${BENCH_PIN:-$([ "$CORES" -ge 4 ] && echo 1 || echo 0)}
on_redis="" on_rest=""
if [ "$PIN" = 1 ] && [ "$CORES" -ge 2 ] && command -v taskset >/dev/null; then
  on_redis="taskset -c $((CORES - 1))" on_rest="taskset -c 0-$((CORES - 2))"
fi

# PORT COMMAND...: requests per second of one redis-benchmark run.
rps() {
  _p=$1; shift
  $on_rest redis-benchmark -h 127.0.0.1 -p "$_p" -c 50 -n "$N" -P 16 -r "$KEYS" --csv \
    "$@" 2>/dev/null | awk -F'"' 'NR == 2 { print int($4) }'
}
# NAME REDIS_PID PORT COMMAND...: one rps run, kept by best, and the CPU
# time that redis-server spent in it added to $tmp/NAME.ticks and the
# requests to $tmp/NAME.reqs: Redis's CPU per request (or per decision,
# for a daemon's), what caps its rate where Redis is the bottleneck,
# whatever the client's own limit.
measure() {
  _name=$1 _rpid=$2; shift 2
  _t0=$(cpu_ticks "$_rpid")
  best "$_name" "$(rps "$@")"
  echo $(( $(cat "$tmp/$_name.ticks" 2>/dev/null || echo 0) + $(cpu_ticks "$_rpid") - _t0 )) >"$tmp/$_name.ticks"
  echo $(( $(cat "$tmp/$_name.reqs" 2>/dev/null || echo 0) + N )) >"$tmp/$_name.reqs"
}
best() { # NAME VALUE: keeps the larger in $tmp/NAME
  _old=$(cat "$tmp/$1" 2>/dev/null || echo 0)
  [ "$2" -gt "$_old" ] 2>/dev/null && echo "$2" >"$tmp/$1"
  return 0
}
usec() { # PORT COMMAND: Redis's total usec in that command
  redis-cli -p "$1" INFO commandstats | tr -d '\r' |
    awk -F'[=,]' -v c="cmdstat_$2:calls" '$1 == c { print $4 }'
}

# Redis's CPU per request (us): ticks / TCK / requests.
cpu_us() { awk -v t="$(cat "$tmp/$1.ticks")" -v n="$(cat "$tmp/$1.reqs")" -v k="$TCK" \
  'BEGIN { printf "%.3f", t / k / n * 1e6 }'; }

# redis_at PORT NAME [ARGS...]: a redis-server without persistence in the
# background ($! is its pid), logging to $tmp/NAME.log, stopped with the
# key space's servers.
redis_at() {
  _port=$1 _name=$2
  shift 2
  $on_redis redis-server --port "$_port" --bind 127.0.0.1 --save '' \
    --appendonly no "$@" >"$tmp/$_name.log" 2>&1 &
  spids="$spids $!" pids="$pids $!"
}

# space KEYS: every figure on KEYS random keys of each kind, on servers
# started for it and stopped after.
space() {
KEYS=$1 spids=""
rm -f "$tmp"/module* "$tmp"/lua* "$tmp"/incr* "$tmp"/setpx* "$tmp"/daemon_*
rx_port=$(free_port); rm_port=$(free_port); rp_port=$(free_port)
so="$(cd "$(dirname "$MODULE")" && pwd)/$(basename "$MODULE")"
redis_at "$rx_port" rx --loadmodule "$so"; rx_pid=$!
redis_at "$rm_port" rm --loadmodule "$so"; rm_pid=$!
redis_at "$rp_port" rp; rp_pid=$!
wait_port "$rx_port"; wait_port "$rm_port"; wait_port "$rp_port"
sm_port=$(free_port); sp_port=$(free_port)
$on_rest "$SLUICE" serve --grpc off --store "redis://127.0.0.1:$rm_port" --http off \
  --resp "127.0.0.1:$sm_port" -t 1 --redis-timeout 5000 >"$tmp/sm.log" 2>&1 &
spids="$spids $!" pids="$pids $!"
$on_rest "$SLUICE" serve --grpc off --store "redis://127.0.0.1:$rp_port" --http off \
  --resp "127.0.0.1:$sp_port" -t 1 --redis-timeout 5000 >"$tmp/sp.log" 2>&1 &
spids="$spids $!" pids="$pids $!"
wait_port "$sm_port"; wait_port "$sp_port"
sha=$(redis-cli -p "$rx_port" SCRIPT LOAD "$(cat "$here/../server/tokenbucket.lua")")

# Warm-up: each figure's keys made before any is measured (and the
# daemons' first connections, where the module is asked). A run that
# creates its keys measures their creation and Redis growing its tables,
# which INCR's keys (no expiry, shared small integers) barely pay: every
# figure below is of keys that exist, as in a limiter's steady state.
rps "$rx_port" SL.THROTTLE key:__rand_int__ token_bucket:1000/h 1 >/dev/null
rps "$rx_port" EVALSHA "$sha" 1 tb:__rand_int__ 1000 1000 3600000 1 >/dev/null
rps "$rx_port" INCR c:__rand_int__ >/dev/null
rps "$rx_port" SET s:__rand_int__ "$SETV" PX 3600000 >/dev/null
rps "$sm_port" SL.THROTTLE key:__rand_int__ token_bucket:1000/h 1 >/dev/null
rps "$sp_port" SL.THROTTLE key:__rand_int__ token_bucket:1000/h 1 >/dev/null
redis-cli -p "$rm_port" CONFIG RESETSTAT >/dev/null
redis-cli -p "$rp_port" CONFIG RESETSTAT >/dev/null
r=0
while [ $r -lt "$REPEAT" ]; do
  measure module "$rx_pid" "$rx_port" SL.THROTTLE key:__rand_int__ token_bucket:1000/h 1
  measure lua "$rx_pid" "$rx_port" EVALSHA "$sha" 1 tb:__rand_int__ 1000 1000 3600000 1
  measure incr "$rx_pid" "$rx_port" INCR c:__rand_int__
  measure setpx "$rx_pid" "$rx_port" SET s:__rand_int__ "$SETV" PX 3600000
  measure daemon_module "$rm_pid" "$sm_port" SL.THROTTLE key:__rand_int__ token_bucket:1000/h 1
  measure daemon_lua "$rp_pid" "$sp_port" SL.THROTTLE key:__rand_int__ token_bucket:1000/h 1
  r=$((r + 1))
done
decisions=$((N * REPEAT))
# A decision Redis did not make (a timeout: the daemon answered per
# on_store_error) is no exact decision: it would flatter the daemon's rate
# and the Redis time per decision. The generous --redis-timeout above
# keeps a loaded machine from causing any; say so if one happened.
if grep -q 'timeout; down' "$tmp/sm.log" "$tmp/sp.log"; then
  echo "module.sh: a daemon timed out on Redis: the daemon figures are not exact mode's" >&2
fi
cpu_mod=$(usec "$rm_port" sl.decide); cpu_lua=$(usec "$rp_port" evalsha)

echo "# $KEYS random keys of each kind"
[ -n "$on_redis" ] && echo "# redis-servers on core $((CORES - 1)) alone, the daemons and redis-benchmark on cores 0-$((CORES - 2))"
awk -v m="$(cat "$tmp/module")" -v l="$(cat "$tmp/lua")" \
    -v i="$(cat "$tmp/incr")" -v sx="$(cat "$tmp/setpx")" \
    -v usx="$(cpu_us setpx)" -v dm="$(cat "$tmp/daemon_module")" \
    -v dl="$(cat "$tmp/daemon_lua")" -v cm="${cpu_mod:-0}" \
    -v cl="${cpu_lua:-0}" -v n="$decisions" -v um="$(cpu_us module)" \
    -v ul="$(cpu_us lua)" -v ui="$(cpu_us incr)" -v udm="$(cpu_us daemon_module)" \
    -v udl="$(cpu_us daemon_lua)" 'BEGIN {
  printf "module SL.THROTTLE -P 16      %9d req/s\n", m
  printf "EVALSHA tokenbucket.lua -P 16 %9d req/s\n", l
  printf "INCR -P 16                    %9d req/s\n", i
  printf "SET key value PX -P 16        %9d req/s\n", sx
  printf "daemon exact, module          %9d req/s\n", dm
  printf "daemon exact, Lua path        %9d req/s\n", dl
  printf "Redis CPU per exact decision: module %.2f us, Lua %.2f us\n",
    cm / n, cl / n
  v = m / l;   printf "module / EVALSHA      %5.3fx (target >= 4)   %s\n", v, (v >= 4 ? "ok" : "MISSED")
  v = m / i;   printf "module / INCR         %5.3fx (target >= 0.7) %s\n", v, (v >= 0.7 ? "ok" : "MISSED")
  v = m / sx;  printf "module / SET PX       %5.3fx (for scale)\n", v
  v = cl ? cm / cl : 0
  printf "CPU module / Lua      %5.3fx (target <= 0.3) %s\n", v, (v <= 0.3 ? "ok" : "MISSED")
  v = dm / dl; printf "daemon module / Lua   %5.3fx (target >= 1.3) %s\n", v, (v >= 1.3 ? "ok" : "MISSED")
  # Where Redis is the bottleneck its rate is 1 / its CPU per request:
  # the same targets, read from the CPU time redis-server spent (user and
  # system: the command, its parsing and reply, the socket) whoever
  # limited the rates above (one redis-benchmark thread often does).
  printf "Redis CPU per request: SL.THROTTLE %.2f us, EVALSHA %.2f us, INCR %.2f us\n", um, ul, ui
  v = um ? ul / um : 0; printf "module / EVALSHA, Redis-bound  %5.3fx (target >= 4)   %s\n", v, (v >= 4 ? "ok" : "MISSED")
  v = um ? ui / um : 0; printf "module / INCR, Redis-bound     %5.3fx (target >= 0.7) %s\n", v, (v >= 0.7 ? "ok" : "MISSED")
  v = um ? usx / um : 0; printf "module / SET PX, Redis-bound   %5.3fx (for scale; SET PX %.2f us)\n", v, usx
  printf "Redis CPU per exact decision (its process): module %.2f us, Lua %.2f us\n", udm, udl
  v = udl ? udm / udl : 0; printf "CPU module / Lua, its process  %5.3fx (target <= 0.3) %s\n", v, (v <= 0.3 ? "ok" : "MISSED")
}'
for p in $spids; do kill "$p" 2>/dev/null; done
for p in $spids; do wait "$p" 2>/dev/null; done
return 0
}

for k in $SPACES; do space "$k"; done
