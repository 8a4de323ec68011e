#!/bin/sh
# module.sh — build/sluice-redis.so inside a real redis-server (POSIX sh).
#
#   SLUICE=build/sluice TOOLS=build/tests/tools sh tests/integration/module.sh
#
# Loads the module (with TESTCLOCK, so SL.CLOCK fixes its time) into a
# redis-server of its own and checks: SL.THROTTLE's and CL.THROTTLE's
# replies on a fixed clock (redis-cell's README example among them), every
# bad input answered with a Redis-style error (arity, policies, numbers,
# huge costs, keys of another type: WRONGTYPE), TTLs equal to the time to
# fresh, SL.RESET, a WATCH broken by a write and not by a denial, keyspace
# events as the script's writes fire them, the keys
# Redis is told (COMMAND GETKEYS), state kept
# through an RDB restart and an AOF-only one (the same values and expiry
# times) and copied to a replica; writes with nowhere to go counted, an
# AOF turned on at run time fed, a replica synced under writes equal to
# its master; redis-cell's own keys read; then the parity tool's
# traces through SL.DECIDE (memory mode and the module, every field, the
# same traces redis_parity.sh runs through the Lua script), a bounded
# random-argument flood that must leave Redis answering, and one exact-mode
# daemon that finds the module (SL.VERSION names its own decide.lua) and
# sends SL.DECIDE instead of EVALSHA, CL.THROTTLE's included (the module's
# cell: the same replies as its own CL.THROTTLE on a sequence of mixed
# rates, one Redis key per cell key).
# A sanitized build has no module (it cannot load into a plain Redis):
# then it says so and checks nothing (tests/unit/test_module.c covers it).

. "$(dirname "$0")/check_lib.sh"
if [ -z "${PY:-}" ]; then
  if [ -x /usr/bin/python3 ]; then PY=/usr/bin/python3; else PY=python3; fi
fi
TOOLS=${TOOLS:-build/tests/tools}
MODULE=${MODULE:-$(dirname "$SLUICE")/sluice-redis.so}
lib_tools="redis-server redis-cli redis-benchmark timeout $PY"
lib_init module
if [ ! -f "$MODULE" ]; then
  echo "module.sh: no $MODULE (a sanitized build): nothing to check"
  exit 0
fi
MODULE=$(cd "$(dirname "$MODULE")" && pwd)/$(basename "$MODULE")

pids=""
lib_cleanup() {
  for _p in $pids; do kill -TERM "$_p" 2>/dev/null; done
  for _p in $pids; do
    _i=0
    while kill -0 "$_p" 2>/dev/null && [ $_i -lt 50 ]; do
      sleep 0.1
      _i=$((_i + 1))
    done
    kill -KILL "$_p" 2>/dev/null
    wait "$_p" 2>/dev/null
  done
  rm -rf "$tmp"
}

free_port() {
  "$PY" -c 'import socket
s = socket.socket()
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])'
}
pong() { [ "$(timeout 2 redis-cli -p "$1" PING 2>/dev/null)" = PONG ]; }
wait_pong() {
  _i=0
  while ! pong "$1" && [ $_i -lt 100 ]; do sleep 0.1; _i=$((_i + 1)); done
  pong "$1"
}

# redis NAME DIR ARGS...: a redis-server with the module; sets $port.
redis() {
  _n=$1 _d=$2
  shift 2
  mkdir -p "$_d"
  port=$(free_port)
  redis-server --port "$port" --bind 127.0.0.1 --dir "$_d" --save "" \
    --appendonly no --loadmodule "$MODULE" TESTCLOCK "$@" \
    </dev/null >"$tmp/$_n.log" 2>&1 &
  pids="$pids $!"
  if ! wait_pong "$port"; then
    fail "$_n: redis-server with the module never answered; its log:"
    tail -n 20 "$tmp/$_n.log" | sed 's/^/    /' >&2
    lib_finish
  fi
}

# is NAME WANT CMD...: redis-cli's output (lines joined by spaces) is WANT.
is() {
  _n=$1 _w=$2
  shift 2
  _g=$(timeout 5 redis-cli -p "$port" "$@" 2>&1 | tr '\n' ' ' | sed 's/ *$//')
  if [ "$_g" = "$_w" ]; then pass; else fail "$_n: got '$_g', want '$_w'"; fi
}

info_field() { # PORT SECTION FIELD
  redis-cli -p "$1" INFO "$2" | tr -d '\r' | sed -n "s/^$3://p"
}

redis main "$tmp/main"
P=$port
T0=1767225600000000000 # 2026-01-01, in ns
is "clock" "OK" SL.CLOCK $T0
# SL.VERSION: the version and the SHA-1 of the decide.lua SL.DECIDE speaks
# (a daemon sends SL.DECIDE only where it is its own script's).
_sha=$(sha1sum "$(dirname "$0")/../../src/fleet/decide.lua" | cut -c1-40)
is "version" "$("$SLUICE" --version | awk '{print $NF}') $_sha" SL.VERSION

# ---- replies on a fixed clock ----
# Hour-long policies: the keys expire in real time (their TTL is the time
# to fresh on the fixed clock), and must outlive the test.
is "first token" "1 10 9 0 360000 0" SL.THROTTLE tb token_bucket:10/1h
is "cost 9" "1 10 0 0 3600000 0" SL.THROTTLE tb token_bucket:10/1h 9
is "denied" "0 10 0 360000 3600000 0" SL.THROTTLE tb token_bucket:10/1h
is "peek" "1 10 0 0 3600000 0" SL.THROTTLE tb token_bucket:10/1h 0
_t=$(redis-cli -p $P PTTL tb)
if [ "${_t:-0}" -gt 3500000 ] && [ "$_t" -le 3600000 ]; then pass; else
  fail "ttl: PTTL tb $_t, want the time to fresh (3600000)"
fi
is "leaky" "1 2 1 0 1800000 0" SL.THROTTLE lk leaky_bucket:2/1h
is "leaky queued" "1 2 0 0 3600000 1800000" SL.THROTTLE lk leaky_bucket:2/1h
is "fixed window" "1 5 2 0 3600000 0" SL.THROTTLE fw fixed_window:5/1h 3
is "sliding log" "1 2 1 0 3600000 0" SL.THROTTLE sl sliding_log:2/1h
is "sliding log hash" "hash" TYPE sl
is "sliding window" "1 4 3 0 7200000 0" SL.THROTTLE sw sliding_window:4/1h
is "gcra" "1 16 15 0 2000 0" SL.THROTTLE g2 gcra:30/60s:burst=16 1
# A WATCH is broken by a write only: a denial writes nothing and leaves a
# transaction on its key to run, as with the script (Redis would signal
# every key the module opened for writing, had it not opted out).
# watched NAME KEY WANT CMD...: on one connection WATCH KEY, CMD, then
# MULTI, PING, EXEC, whose answer is WANT (PONG: ran; "": aborted).
watched() {
  _n=$1 _k=$2 _w=$3
  shift 3
  _g=$(printf 'WATCH %s\n%s\nMULTI\nPING\nEXEC\n' "$_k" "$*" |
    timeout 5 redis-cli -p "$port" 2>&1 | tail -1)
  if [ "$_g" = "$_w" ]; then pass; else fail "$_n: EXEC gave '$_g', want '$_w'"; fi
}
watched "watch: allowed" w "" SL.THROTTLE w fixed_window:1/1h
watched "watch: denied" w PONG SL.THROTTLE w fixed_window:1/1h
watched "watch: cell allowed" wc "" CL.THROTTLE wc 0 1 3600 1
watched "watch: cell denied" wc PONG CL.THROTTLE wc 0 1 3600 1
watched "watch: reset nothing" wn PONG SL.RESET wn
watched "watch: reset" w "" SL.RESET w
# Keyspace events: a state written fires what the script's SET key value
# PX ms fires (Redis's own SET, on another key, is the reference), a
# denial nothing, a reset "del".
redis-cli -p $P CONFIG SET notify-keyspace-events KA >/dev/null
timeout 10 redis-cli -p $P --csv PSUBSCRIBE '__keyspace@0__:ev*' \
  >"$tmp/events" 2>&1 &
_sub=$!
_i=0
while [ "$(redis-cli -p $P PUBSUB NUMPAT)" != 1 ] && [ $_i -lt 50 ]; do
  sleep 0.1; _i=$((_i + 1))
done
redis-cli -p $P SET evref x PX 3600000 >/dev/null
redis-cli -p $P SL.THROTTLE ev1 token_bucket:1/1h >/dev/null
redis-cli -p $P SL.THROTTLE ev1 token_bucket:1/1h >/dev/null
redis-cli -p $P SL.RESET ev1 >/dev/null
redis-cli -p $P PUBLISH __keyspace@0__:evend end >/dev/null
_i=0
while ! grep -q evend "$tmp/events" && [ $_i -lt 50 ]; do
  sleep 0.1; _i=$((_i + 1))
done
kill $_sub 2>/dev/null; wait $_sub 2>/dev/null
redis-cli -p $P CONFIG SET notify-keyspace-events "" >/dev/null
# (--csv: "pmessage","pattern","__keyspace@0__:KEY","EVENT")
_ev() { tr -d '"' <"$tmp/events" | awk -F, -v k="__keyspace@0__:$1" '$3 == k { printf "%s ", $4 }'; }
_want="$(_ev evref)del "
if [ -n "$(_ev evref)" ] && [ "$(_ev ev1)" = "$_want" ]; then pass; else
  fail "keyspace events: ev1 '$(_ev ev1)', want '$_want'"
fi
# redis-cell's README: 15 max burst, 30 per 60 s; one redis-cli session,
# so that the 2 s key outlives it.
port=$P
printf '%s\n' "CL.THROTTLE user123 15 30 60" "CL.THROTTLE user123 15 30 60 5" \
  "CL.THROTTLE user123 15 30 60 17" "CL.THROTTLE user123 15 30 60 11" \
  "SL.CLOCK $((T0 + 2000000000))" "CL.THROTTLE user123 15 30 60" \
  "SL.CLOCK $T0" >"$tmp/cell.in"
_g=$(timeout 5 redis-cli -p $P <"$tmp/cell.in" | tr '\n' ' ' | sed 's/ *$//')
_w="0 16 15 -1 2 0 16 10 -1 12 1 16 10 -1 12 1 16 10 2 12 OK 0 16 10 -1 12 OK"
if [ "$_g" = "$_w" ]; then pass; else fail "cell: got '$_g', want '$_w'"; fi
# One key, two rates in turn (tests/unit/test_cell.c has the trace worked
# out by hand): each call applies its own rate to the key's one TAT, as
# redis-cell does, and the key holds redis-cell's layout (the TAT in ns).
printf '%s\n' "CL.THROTTLE alt 4 1 1" "CL.THROTTLE alt 4 1 1" \
  "CL.THROTTLE alt 1 2 1" "SL.CLOCK $((T0 + 1500000000))" \
  "CL.THROTTLE alt 1 2 1" "CL.THROTTLE alt 4 1 1" "CL.THROTTLE alt 4 1 1 0" \
  "CL.THROTTLE alt 1 2 1 0" "CL.THROTTLE alt 4 1 1 6" "GET alt" \
  "SL.CLOCK $((T0 + 5000000000))" "CL.THROTTLE alt 1 2 1" \
  "SL.CLOCK $T0" >"$tmp/alt.in"
_g=$(timeout 5 redis-cli -p $P <"$tmp/alt.in" | tr '\n' ' ' | sed 's/ *$//')
_w="0 5 4 -1 1 0 5 3 -1 2 1 2 0 2 2 OK 0 2 0 -1 1 0 5 3 -1 2 0 5 3 -1 2"
_w="$_w 1 2 0 1 2 1 5 3 -1 2 $((T0 + 3500000000)) OK 0 2 1 -1 1 OK"
if [ "$_g" = "$_w" ]; then pass; else fail "cell rates: got '$_g', want '$_w'"; fi
# 2,000 distinct rates on one key: one key, no error.
seq 1 2000 | sed 's/.*/CL.THROTTLE many 10 & 3600/' |
  timeout 30 redis-cli -p $P >"$tmp/many" 2>&1
_e=$(grep -c ERR "$tmp/many")
_l=$(grep -c . "$tmp/many")
if [ "$_e" = 0 ] && [ "$_l" = 10000 ]; then pass; else
  fail "cell: 2,000 rates on one key: $_e errors in $_l lines"
fi
is "reset" "1" SL.RESET tb
is "reset again" "0" SL.RESET tb
is "after reset" "1 10 9 0 360000 0" SL.THROTTLE tb token_bucket:10/1h

# ---- bad input: Redis-style errors ----
is "arity" "ERR wrong number of arguments for 'sl.throttle' command" SL.THROTTLE k
is "arity long" "ERR wrong number of arguments for 'sl.throttle' command" SL.THROTTLE k token_bucket:1/s 1 2
is "bad policy" "ERR invalid policy: policy 'bogus' is not ALGORITHM:LIMIT/PERIOD[:burst=N]" SL.THROTTLE k bogus
is "bad cost" "ERR cost must be an integer >= 0" SL.THROTTLE k token_bucket:1/s -1
is "huge cost" "ERR cost must be an integer >= 0" SL.THROTTLE k token_bucket:1/s 99999999999999999999
is "cost over burst" "ERR cost 11 can never be allowed by token_bucket:10/1s" SL.THROTTLE k token_bucket:10/1s 11
redis-cli -p $P SET str hello >/dev/null
redis-cli -p $P RPUSH list a >/dev/null
redis-cli -p $P SET short 12.45 >/dev/null
WT="WRONGTYPE Operation against a key holding the wrong kind of value"
is "wrongtype string" "$WT" SL.THROTTLE str token_bucket:10/1s
is "wrongtype list" "$WT" SL.THROTTLE list gcra:10/1s
is "wrongtype hash" "$WT" SL.THROTTLE sl token_bucket:10/1s
is "wrongtype log" "$WT" SL.THROTTLE tb sliding_log:10/1s
is "wrongtype cell" "$WT" CL.THROTTLE short 1 1 1
# A key redis-cell wrote (its TAT in ns as a decimal string) is read as the
# same state: 15 max burst, 30 per 60 s, a TAT 5 s ahead: 13 left, 5 s.
redis-cli -p $P SET cellkey $((T0 + 5000000000)) EX 5 >/dev/null
is "redis-cell's key" "0 16 13 -1 5" CL.THROTTLE cellkey 15 30 60 0
is "redis-cell's key charged" "0 16 12 -1 7" CL.THROTTLE cellkey 15 30 60
is "untouched" "hello" GET str
is "cell usage" "Cell error: Store error: Usage: cl.throttle <key> <max_burst> <count per period> <period> [<quantity>]" CL.THROTTLE k 1 2
is "cell parse" "Cell error: Store error: Couldn't parse as integer: x" CL.THROTTLE k 1 x 60
is "cell zero" "Cell error: Store error: Zero rates are not supported" CL.THROTTLE k 1 0 60
is "decide arity" "ERR wrong number of arguments for 'sl.decide' command" SL.DECIDE 1 k
is "decide malformed" "ERR sluice SL.DECIDE: malformed arguments" SL.DECIDE 1 k "" 0 0 0 short
is "reset arity" "ERR wrong number of arguments for 'sl.reset' command" SL.RESET
is "getkeys" "a b" COMMAND GETKEYS SL.DECIDE 2 a b "" 0 0 0 x 0 0 x
is "getkeys throttle" "k" COMMAND GETKEYS SL.THROTTLE k token_bucket:1/s

# ---- persistence and replication ----
redis-cli -p $P SL.THROTTLE keep token_bucket:10/1h 4 >/dev/null
redis repl "$tmp/repl" --replicaof 127.0.0.1 $P
R=$port
# (A replica answers LOADING, not the key, until its sync is over: the
# link's state tells; the sync waits repl-diskless-sync-delay, 5 s.)
_i=0
until [ "$(info_field $R replication master_link_status)" = up ] ||
  [ $_i -gt 150 ]; do
  sleep 0.1; _i=$((_i + 1))
done
# (WAIT waits for the offset of its own connection's last write: on a
# connection of its own it has none, and returns before the replica has
# the write.)
_acked=$(printf 'SL.THROTTLE keep token_bucket:10/1h 2\nWAIT 1 5000\n' |
  redis-cli -p $P | tail -1)
if [ "$(redis-cli -p $P GET keep | od -An -tx1)" = "$(redis-cli -p $R GET keep | od -An -tx1)" ]; then
  pass
else
  fail "replica: keep differs from the master's (link $(info_field $R replication master_link_status), WAIT acked $_acked)"
fi
_t=$(redis-cli -p $R PTTL keep)
if [ "${_t:-0}" -gt 2000000 ] && [ "$_t" -le 2160000 ]; then pass; else
  fail "replica: PTTL keep $_t, want about 6 of 10 tokens' refill (2160000)"
fi
port=$P
is "save" "OK" SAVE
redis-cli -p $P SHUTDOWN NOSAVE >/dev/null 2>&1
redis main2 "$tmp/main" --dbfilename dump.rdb
P=$port
is "clock again" "OK" SL.CLOCK $T0
is "state after restart" "1 10 3 0 2520000 0" SL.THROTTLE keep token_bucket:10/1h 1

# ---- AOF only (no RDB): the effects, replayed, give the same state ----
redis aof "$tmp/aof" --appendonly yes --aof-use-rdb-preamble no
A=$port
is "aof clock" "OK" SL.CLOCK $T0
is "aof bucket" "1 10 6 0 1440000 0" SL.THROTTLE ak token_bucket:10/1h 4
is "aof log" "1 3 1 0 3600000 0" SL.THROTTLE al sliding_log:3/1h 2
_v=$(redis-cli -p $A GET ak | od -An -tx1)
_h=$(redis-cli -p $A HGETALL al | od -An -tx1)
_x=$(redis-cli -p $A PEXPIRETIME ak)
_y=$(redis-cli -p $A PEXPIRETIME al)
redis-cli -p $A SHUTDOWN NOSAVE >/dev/null 2>&1
if grep -q PXAT "$tmp"/aof/appendonlydir/*.incr.aof &&
  ! grep -qi 'sl.throttle' "$tmp"/aof/appendonlydir/*.incr.aof; then
  pass
else
  fail "aof: the AOF should hold SET ... PXAT, not the command itself"
fi
redis aof2 "$tmp/aof" --appendonly yes --aof-use-rdb-preamble no
A=$port
if [ "$(redis-cli -p $A GET ak | od -An -tx1)" = "$_v" ] &&
  [ "$(redis-cli -p $A HGETALL al | od -An -tx1)" = "$_h" ]; then pass; else
  fail "aof: values differ after the AOF-only restart"
fi
is "aof expiry" "$_x $_y" eval "return {redis.call('PEXPIRETIME', KEYS[1]), redis.call('PEXPIRETIME', KEYS[2])}" 2 ak al
is "aof clock again" "OK" SL.CLOCK $T0
is "aof state" "1 10 5 0 1800000 0" SL.THROTTLE ak token_bucket:10/1h 1
port=$P

# ---- writes nothing takes: counted; replicated once something can ----
# (src/module/repl.h) With no replica, backlog or AOF the module does not
# build the replicated command, but still counts the change, which RDB's
# save points go by.
redis feeds "$tmp/feeds"
F=$port
_c0=$(info_field $F persistence rdb_changes_since_last_save)
redis-cli -p $F SL.THROTTLE fa token_bucket:10/1h 1 >/dev/null
_c1=$(info_field $F persistence rdb_changes_since_last_save)
if [ "${_c1:-0}" -gt "${_c0:-0}" ]; then pass; else
  fail "unreplicated write: changes since the last save $_c0 -> $_c1"
fi
# An AOF turned on at run time (CONFIG SET's event tells the module, and
# the fork of its rewrite): the next write is in it.
redis-cli -p $F CONFIG SET appendonly yes >/dev/null
_i=0
until [ "$(info_field $F persistence aof_rewrite_in_progress)" = 0 ] &&
  [ "$(info_field $F persistence aof_rewrite_scheduled)" = 0 ] &&
  ls "$tmp"/feeds/appendonlydir/*.incr.aof >/dev/null 2>&1 ||
  [ $_i -gt 100 ]; do
  sleep 0.1; _i=$((_i + 1))
done
redis-cli -p $F SL.THROTTLE fb token_bucket:10/1h 1 >/dev/null
if grep -q fb "$tmp"/feeds/appendonlydir/*.incr.aof 2>/dev/null; then pass; else
  fail "aof at run time: the write after CONFIG SET appendonly yes is not in it"
fi
redis-cli -p $F SHUTDOWN NOSAVE >/dev/null 2>&1
# A replica that syncs while writes go on (diskless, after a delay: writes
# before the fork are in its snapshot, every one after comes as SET) ends
# with the master's dataset (DEBUG DIGEST: keys, values and expiry
# times). Nearly every state key is written once, so a write lost is not healed
# by a later one of the same key.
redis sync "$tmp/sync" --repl-diskless-sync yes --repl-diskless-sync-delay 1 \
  --enable-debug-command local
M=$port
# (300,000 other keys make the transfer, the fork's life, long enough for
# writes to land in it)
redis-cli -p $M DEBUG POPULATE 300000 pop 64 >/dev/null
timeout 60 redis-benchmark -p $M -c 2 -n 100000 -r 1000000 SL.THROTTLE \
  s:__rand_int__ token_bucket:10/1h 1 >/dev/null 2>&1 &
_bp=$!
sleep 0.2
redis syncr "$tmp/syncr" --replicaof 127.0.0.1 $M --enable-debug-command local
R=$port
wait $_bp
_i=0
until [ "$(info_field $R replication master_link_status)" = up ] &&
  [ "$(info_field $R replication slave_repl_offset)" = \
    "$(info_field $M replication master_repl_offset)" ] || [ $_i -gt 150 ]; do
  sleep 0.1; _i=$((_i + 1))
done
_dm=$(redis-cli -p $M DEBUG DIGEST)
_dr=$(redis-cli -p $R DEBUG DIGEST)
if [ "$(redis-cli -p $M DBSIZE)" -gt 301000 ] && [ "$_dm" = "$_dr" ]; then
  pass
else
  fail "sync under writes: the replica's dataset differs ($(redis-cli -p $M DBSIZE) keys, replica $(redis-cli -p $R DBSIZE))"
fi
redis-cli -p $R SHUTDOWN NOSAVE >/dev/null 2>&1
redis-cli -p $M SHUTDOWN NOSAVE >/dev/null 2>&1
port=$P

# ---- the same traces through SL.DECIDE and memory mode ----
prun() {
  _name=$1
  shift
  timeout 120 "$TOOLS/parity" --port "$P" --native "$@" >"$tmp/out" 2>"$tmp/err"
  _rc=$?
  _ok=$(grep -c 'decisions=[0-9]* mismatches=0$' "$tmp/out")
  if [ "$_rc" -eq 0 ] && [ "$_ok" -eq 6 ]; then pass; else
    fail "$_name: parity --native exited $_rc with $_ok of 6 algorithms clean"
    head -n 40 "$tmp/err" | sed 's/^/    /' >&2
  fi
}
port=$P
is "real clock" "OK" SL.CLOCK -1
prun "seed 1" --seed 1 --steps 150 --traces 10
prun "seed 2" --seed 2 --steps 150 --traces 10
prun "Redis clock" --time --seed 7 --steps 80 --traces 2

# ---- random arguments: errors, never a crash ----
"$PY" - "$P" >"$tmp/flood" 2>&1 <<'PYEOF'
import random, socket, sys
port = int(sys.argv[1])
rnd = random.Random(19)
words = [b"", b"0", b"1", b"-1", b"g", b"f", b"g\x01", b"f\x02", b"token_bucket:1/s",
         b"gcra:5/1s:burst=9", b"sliding_log:3/1s", b"x" * 300, b"99999999999999999999",
         b"9223372036854775807", b"-9223372036854775808", b"str", b"list", b"k",
         bytes(32), b"\xff" * 32, b"1" * 32, b"4", b"3"]
cmds = [b"SL.THROTTLE", b"CL.THROTTLE", b"SL.RESET", b"SL.DECIDE"]
s = socket.create_connection(("127.0.0.1", port))
f = s.makefile("rb")
def send(args):
    out = b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args)
    s.sendall(out)
def read():
    line = f.readline()
    if not line:
        raise SystemExit("connection closed")
    t = line[:1]
    if t == b"*":
        for _ in range(max(int(line[1:]), 0)):
            read()
    elif t == b"$" and int(line[1:]) >= 0:
        f.read(int(line[1:]) + 2)
n = 3000
for i in range(n):
    c = rnd.choice(cmds)
    args = [c] + [rnd.choice(words) if rnd.random() < 0.8 else
                  bytes(rnd.randrange(256) for _ in range(rnd.randrange(40)))
                  for _ in range(rnd.randrange(12))]
    if c == b"SL.DECIDE" and rnd.random() < 0.5:
        k = rnd.randrange(1, 3)
        args = [c, str(k).encode()] + [b"fz%d" % j for j in range(k)] + [
            b"", rnd.choice([b"0", b"1", b"g" + bytes([k]), b"f" + bytes([k])])]
        for j in range(k):
            nums = bytes(rnd.randrange(256) for _ in range(32)) if rnd.random() < 0.5 else \
                (rnd.randrange(0, 3)).to_bytes(8, "little") + (1000).to_bytes(8, "little") + \
                (1).to_bytes(8, "little") + (rnd.choice([1, 1000])).to_bytes(8, "little")
            args += [rnd.choice([b"0", b"1", b"2", b"3", b"4", b"5", b"9"]), b"0", nums]
    send(args)
    read()
print("sent", n)
PYEOF
if [ $? -eq 0 ] && pong $P; then pass; else
  fail "flood: Redis stopped answering: $(tail -n 3 "$tmp/flood")"
  tail -n 20 "$tmp/main2.log" | sed 's/^/    /' >&2
fi

# ---- an exact-mode daemon finds the module ----
sp=$(free_port)
"$SLUICE" serve --grpc off --store "redis://127.0.0.1:$P" --http off \
  --resp "127.0.0.1:$sp" -t 1 >"$tmp/sluice.log" 2>&1 &
pids="$pids $!"
wait_pong "$sp"
redis-cli -p $P CONFIG RESETSTAT >/dev/null
for i in 1 2 3 4 5; do
  redis-cli -p "$sp" SL.THROTTLE "d$i" token_bucket:10/1s >/dev/null
done
port=$sp
is "daemon decides" "1 10 9 0 100 0" SL.THROTTLE d9 token_bucket:10/1s
_s=$(redis-cli -p $P INFO commandstats | tr -d '\r')
if echo "$_s" | grep -q '^cmdstat_sl.decide:calls=[1-9]'; then pass; else
  fail "daemon: no SL.DECIDE at Redis: $_s"
fi
# CL.THROTTLE through the daemon: SL.DECIDE's cell (decide.lua's "7",
# md_cell), on the fixed clock the same replies as the module's own
# CL.THROTTLE for the same mixed rates on one key, one Redis key
# (sl:{}c4:cell<key>) holding the same TAT, and no EVALSHA.
cellseq="4 1 1|4 1 1|1 2 1|1 2 1 0|4 1 1 6|15 30 60|15 30 60 5|0 1 2|4 1 1 3|1 3 1"
port=$P
is "cell clock" "OK" SL.CLOCK $T0
redis-cli -p $P CONFIG RESETSTAT >/dev/null
# cell_seq PORT KEY: the sequence's replies on one connection.
cell_seq() {
  echo "$cellseq" | tr '|' '\n' | sed "s/^/CL.THROTTLE $2 /" |
    timeout 10 redis-cli -p "$1" 2>&1 | tr '\n' ' ' | sed 's/ *$//'
}
_d=$(cell_seq "$sp" dcell)
_m=$(cell_seq "$P" mcell)
_w="0 5 4 -1 1 0 5 3 -1 2 1 2 0 2 2 1 2 0 1 2 1 5 3 -1 2 0 16 14 -1 4"
_w="$_w 0 16 9 -1 14 1 1 0 14 14 1 5 0 12 14 1 2 0 14 14"
if [ "$_d" = "$_w" ] && [ "$_m" = "$_w" ]; then pass; else
  fail "cell through the daemon: got '$_d', the module's own '$_m'," \
    "want '$_w'"
fi
is "cell: one Redis key" "sl:{}c4:celldcell" --scan --pattern '*dcell*'
is "cell: the daemon's key holds the module's TAT" \
  "$(redis-cli -p $P GET mcell)" GET 'sl:{}c4:celldcell'
_s=$(redis-cli -p $P INFO commandstats | tr -d '\r')
if echo "$_s" | grep -q '^cmdstat_sl.decide:calls=[1-9]' &&
  ! echo "$_s" | grep -q '^cmdstat_evalsha'; then pass; else
  fail "cell through the daemon: not SL.DECIDE alone: $_s"
fi
is "cell: real clock" "OK" SL.CLOCK -1

lib_finish
