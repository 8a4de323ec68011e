#!/bin/sh
# module_cluster.sh — build/sluice-redis.so on a real Redis Cluster: three
# masters on loopback with the module loaded, and a fourth node without
# it, the third master's replica (POSIX sh; helpers in serve_lib.sh and
# fleet_lib.sh).
#
#   SLUICE=build/sluice sh tests/integration/module_cluster.sh   (make integration)
#
#   - SL.DECIDE whose keys span slots is refused by Redis itself
#     (CROSSSLOT: the module declares its keys); keys under one hash tag
#     reach the command;
#   - a key on another master answers MOVED, and redis-cli -c follows it
#     to the module's reply;
#   - an exact daemon given one seed sends native commands to every
#     master: INFO commandstats shows sl.decide there, never evalsha
#     (once its connections are up: a call queued while one connects is
#     sent as EVALSHA, since the node may prove to have no module);
#   - failover to the replica without the module (CLUSTER FAILOVER): the
#     daemon decides there through the Lua script (evalsha at that node),
#     and after a failover back, natively again (sl.decide); every key's
#     total allowed over the three phases is its limit exactly, and no
#     decision fell back (the module and the script share the state).
# A sanitized build has no module: then it says so and checks nothing.

. "$(dirname "$0")/serve_lib.sh"
. "$(dirname "$0")/fleet_lib.sh"
lib_init module_cluster
MODULE=${MODULE:-$(dirname "$SLUICE")/sluice-redis.so}
if [ ! -f "$MODULE" ]; then
  echo "module_cluster.sh: no $MODULE (a sanitized build): nothing to check"
  exit 0
fi
MODULE=$(cd "$(dirname "$MODULE")" && pwd)/$(basename "$MODULE")

# --- the cluster: three masters with the module, a replica without ---------
P1=$(free_port)
P2=$(free_port)
P3=$(free_port)
P4=$(free_port)
for i in 1 2 3 4; do
  eval "p=\$P$i"
  load="--loadmodule $MODULE"
  [ $i -eq 4 ] && load=""
  # shellcheck disable=SC2086
  rs_start "c$i" "$p" --cluster-enabled yes \
    --cluster-config-file "$tmp/nodes-$i.conf" --cluster-port "$(free_port)" \
    --cluster-node-timeout 5000 $load || lib_finish
done
eq "slots to the first master" OK "$(rcli "$P1" CLUSTER ADDSLOTSRANGE 0 5460)"
eq "slots to the second" OK "$(rcli "$P2" CLUSTER ADDSLOTSRANGE 5461 10922)"
eq "slots to the third" OK "$(rcli "$P3" CLUSTER ADDSLOTSRANGE 10923 16383)"
bus() { rcli "$1" CONFIG GET cluster-port | cut -d' ' -f2; }
for p in $P2 $P3 $P4; do
  eq "MEET $p" OK "$(rcli "$P1" CLUSTER MEET 127.0.0.1 "$p" "$(bus "$p")")"
done
cluster_ok() {
  for _p in $P1 $P2 $P3 $P4; do
    rcli "$_p" CLUSTER INFO | grep -q 'cluster_state:ok' || return 1
    rcli "$_p" CLUSTER INFO | grep -q 'cluster_known_nodes:4' || return 1
  done
}
if ! waitfor 200 cluster_ok; then
  fail "the cluster never said cluster_state:ok: $(rcli "$P1" CLUSTER INFO)"
  lib_finish
fi
ID3=$(rcli "$P3" CLUSTER MYID)
ID4=$(rcli "$P4" CLUSTER MYID)
eq "the fourth replicates the third" "OK OK" \
  "$(rcli "$P3" CONFIG SET repl-diskless-sync-delay 0) $(rcli "$P4" CLUSTER REPLICATE "$ID3")"
# replica_of ID MASTER_ID — every node sees ID as MASTER_ID's replica.
replica_of() {
  for _p in $P1 $P2 $P3 $P4; do
    timeout 10 redis-cli -h 127.0.0.1 -p "$_p" CLUSTER NODES </dev/null |
      grep "^$1 " | grep -Eq "[ ,]slave $2 " || return 1
  done
}
synced() {
  rcli "$P4" INFO replication | grep -q 'master_link_status:up' &&
    replica_of "$ID4" "$ID3"
}
if ! waitfor 200 synced; then
  fail "the replica never synced: $(rcli "$P4" INFO replication)"
  lib_finish
fi

# --- Redis routes the module's commands ------------------------------------
# "a" hashes to slot 15495 (the third master), "b" to 3300 (the first).
eq "CROSSSLOT" "CROSSSLOT Keys in request don't hash to the same slot" \
  "$(rcli "$P1" SL.DECIDE 2 a b '' 0 0 0 x 0 0 x)"
eq "one hash tag reaches the command" "ERR sluice SL.DECIDE: malformed arguments" \
  "$(timeout 10 redis-cli -c -h 127.0.0.1 -p "$P1" SL.DECIDE 2 '{u}a' '{u}b' '' 0 0 0 x 0 0 x </dev/null)"
eq "MOVED" "MOVED 15495 127.0.0.1:$P3" "$(rcli "$P1" SL.THROTTLE a token_bucket:5/h)"
eq "MOVED followed" "1 5 4 0 720000 0" \
  "$(timeout 10 redis-cli -c -h 127.0.0.1 -p "$P1" SL.THROTTLE a token_bucket:5/h </dev/null | paste -sd' ' -)"

# --- an exact daemon, native on every master --------------------------------
sv_start d -t 1 --store "redis-cluster://127.0.0.1:$P1" --redis-timeout 5000 \
  --on-store-error deny || lib_finish
for i in $(seq 1 60); do
  echo "SL.THROTTLE mk$i token_bucket:5/h"
  echo "SL.THROTTLE mk$i token_bucket:5/h"
done >"$tmp/round"
: >"$tmp/ledger"
# round NAME — every key twice through the daemon; the replies' allowed
# flags go to the ledger, one "key allowed" a line.
round() {
  timeout 60 redis-cli -h 127.0.0.1 -p "$RESP" <"$tmp/round" >"$tmp/out" 2>&1
  awk 'NR % 6 == 1' "$tmp/out" | paste -d' ' "$tmp/keys" - >>"$tmp/ledger"
  _n=$(awk 'NR % 6 == 1' "$tmp/out" | grep -c '^[01]$')
  eq "$1: 120 decisions" 120 "$_n"
}
awk '{ print $2 }' "$tmp/round" >"$tmp/keys"
resetstat() { for _p in "$@"; do rcli "$_p" CONFIG RESETSTAT >/dev/null; done; }
# calls PORT CMD — the calls of CMD in PORT's INFO commandstats (0: none).
calls() {
  rcli "$1" INFO commandstats | tr ' ' '\n' |
    sed -n "s/^cmdstat_$2:calls=\([0-9]*\),.*/\1/p" | awk '{ n += $1 } END { print n + 0 }'
}
# The daemon connects on its first calls, and a call queued while a
# connection is being set up goes as EVALSHA (the node may turn out to
# have no module): warm every connection first.
for i in $(seq 1 30); do echo "SL.THROTTLE wk$i token_bucket:5/h"; done |
  timeout 60 redis-cli -h 127.0.0.1 -p "$RESP" >/dev/null 2>&1
resetstat "$P1" "$P2" "$P3"
round "native"
for p in $P1 $P2 $P3; do
  in_range "native: sl.decide at $p" 1 120 "$(calls "$p" sl.decide)"
  eq "native: no evalsha at $p" 0 "$(calls "$p" evalsha)"
done

# --- failover to the replica without the module, and back -------------------
role_master() { rcli "$1" INFO replication | grep -q 'role:master'; }
eq "failover to the replica without the module" OK "$(rcli "$P4" CLUSTER FAILOVER)"
if ! waitfor 200 role_master "$P4" || ! waitfor 200 replica_of "$ID3" "$ID4"; then
  fail "failover: the fourth never became master: $(rcli "$P4" INFO replication)"
fi
resetstat "$P4"
round "Lua path"
in_range "Lua path: evalsha at the new master" 1 120 "$(calls "$P4" evalsha)"
eq "Lua path: no sl.decide there" 0 "$(calls "$P4" sl.decide)"
eq "failover back to the node with the module" OK "$(rcli "$P3" CLUSTER FAILOVER)"
if ! waitfor 200 role_master "$P3" || ! waitfor 200 replica_of "$ID4" "$ID3"; then
  fail "failback: the third never became master again: $(rcli "$P3" INFO replication)"
fi
resetstat "$P3"
round "native again"
in_range "native again: sl.decide at the third" 1 120 "$(calls "$P3" sl.decide)"
eq "native again: no evalsha there" 0 "$(calls "$P3" evalsha)"

# 6 requests per key, limit 5: exactly 5 allowed for every key.
eq "every key allowed its limit exactly" "60 keys x 5" \
  "$(awk '{ n[$1] += $2 } END { for (k in n) c[n[k]]++; for (v in c) printf "%d keys x %d\n", c[v], v }' "$tmp/ledger")"
snap "$tmp/m"
eq "no decision fell back" 0 "$(metric sluice_store_fallbacks_total "$tmp/m")"
sv_stop d
lib_finish
