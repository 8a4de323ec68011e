#!/bin/sh
# fleet_cluster.sh — fleet mode on a real Redis Cluster: three masters on
# loopback (a fourth, with no slot until the resharding's end, and a fifth
# that replicates the third until it takes its place), three exact
# `sluice serve` daemons given one seed each (the rest is discovered),
# requests sprayed round robin over the daemons (POSIX sh; helpers in
# serve_lib.sh and fleet_lib.sh).
#
#   SLUICE=build/sluice sh tests/integration/fleet_cluster.sh   (make integration)
#
#   - many distinct keys, spread over the three masters (DBSIZE of each):
#     each key's total allowed is its limit exactly; one hot key too;
#   - a request whose limits' keys live in different slots (no hash_tag):
#     no limit is ever exceeded;
#   - with hash_tag set in the domain, a request's keys share one slot
#     (CLUSTER KEYSLOT) and its limits are all-or-nothing, exactly;
#   - a reset deletes each of its keys on the master of the key's slot
#     (keys of different slots: each DEL to its node), and the tagged ones
#     under the tag of the reset's request (a JSON body of both
#     descriptors);
#   - approximate mode's resets: keys in several slots spent on two
#     --sync daemons, reset through one: gone from every master, and the
#     other (subscribed to another node) allows them again;
#   - live resharding: one slot moves from the first master to the second
#     step by step as redis-cli --cluster reshard moves it (SETSLOT
#     IMPORTING / MIGRATING, MIGRATE a few keys, then the rest, SETSLOT
#     NODE on every master), then on to the fourth master in one go, while
#     the exact daemons and an approximate one (--sync 100) take requests
#     on keys of that slot. Redis answers them ASK (a key not on the
#     source), NOSCRIPT after ASKING (the target's scripts flushed),
#     TRYAGAIN (a batched call, or one request's two keys, half migrated)
#     and MOVED (the slot moved; to a node no daemon knew, at the end);
#     INFO errorstats shows each happened. Every key's total allowed over
#     the run is its limit exactly, no decision is a fallback, the target
#     never answers MOVED while importing (every resend to it after
#     ASKING), MOVED updates the slot map (a few MOVED, not one per
#     request), and approximate mode's charges pushed in each state of the
#     slot reach Redis (the fleet's level there; none lost);
#   - failover: a fifth node, a replica of the third master, is promoted
#     (CLUSTER FAILOVER) while the exact daemons take requests on keys in
#     30 of its slots: each key's total allowed before, during and after
#     is its limit exactly, no decision falls back, the old master answers
#     fewer MOVED than there are slots (each MOVED has the whole map read
#     again: CLUSTER SLOTS), and the approximate daemon's charges reach
#     the new master;
#   - a master dies: the fifth node (master since the failover) is killed
#     (-9) under load and its replica promotes itself (cluster-node-timeout
#     1000 ms): during the outage every request on its slots is answered
#     per on_store_error; within 3 s of the promotion every decision is
#     Redis's again, with no MOVED (the daemons read the map from another
#     node); fresh keys there are then exact, and the approximate daemon's
#     charges made during the outage reach the new master.

. "$(dirname "$0")/serve_lib.sh"
. "$(dirname "$0")/fleet_lib.sh"
lib_init fleet_cluster

t_start=$(now_ms)
# --- the cluster: three masters, slots split in three ------------------------
# and a fourth with no slot (the resharding's last step moves one to it):
# CLUSTER SLOTS does not name it, so no daemon knows it.
P1=$(free_port)
P2=$(free_port)
P3=$(free_port)
P4=$(free_port)
for i in 1 2 3 4; do
  eval "p=\$P$i"
  # The bus port is named (by default it is PORT + 10000, maybe taken or
  # past 65535).
  rs_start "c$i" "$p" --cluster-enabled yes \
    --cluster-config-file "$tmp/nodes-$i.conf" --cluster-port "$(free_port)" \
    --cluster-node-timeout 5000 || lib_finish
done
eq "cluster: slots 0-5460 to the first master" OK "$(rcli "$P1" CLUSTER ADDSLOTSRANGE 0 5460)"
eq "cluster: slots 5461-10922 to the second" OK "$(rcli "$P2" CLUSTER ADDSLOTSRANGE 5461 10922)"
eq "cluster: slots 10923-16383 to the third" OK "$(rcli "$P3" CLUSTER ADDSLOTSRANGE 10923 16383)"
bus() { rcli "$1" CONFIG GET cluster-port | cut -d' ' -f2; }
eq "cluster: MEET the second" OK "$(rcli "$P1" CLUSTER MEET 127.0.0.1 "$P2" "$(bus "$P2")")"
eq "cluster: MEET the third" OK "$(rcli "$P1" CLUSTER MEET 127.0.0.1 "$P3" "$(bus "$P3")")"
eq "cluster: MEET the fourth" OK "$(rcli "$P1" CLUSTER MEET 127.0.0.1 "$P4" "$(bus "$P4")")"
cluster_ok() {
  for _p in $P1 $P2 $P3 $P4; do
    rcli "$_p" CLUSTER INFO | grep -q 'cluster_state:ok' || return 1
    rcli "$_p" CLUSTER INFO | grep -q 'cluster_known_nodes:4' || return 1
  done
}
if waitfor 200 cluster_ok; then pass; else
  fail "cluster: CLUSTER INFO never said cluster_state:ok on all four: $(rcli "$P1" CLUSTER INFO)"
  lib_finish
fi
say "cluster: 4 masters ok in $(($(now_ms) - t_start)) ms"

# --- the daemons -----------------------------------------------------------
cat >"$tmp/cluster.yaml" <<'EOF'
domain: plain
descriptors:
  - key: user
    rate_limits:
      - {name: narrow, policy: "gcra:20/h"}
      - {name: wide, policy: "sliding_log:30/h"}
  - key: org
    rate_limit: {policy: "sliding_log:25/h"}
  - key: k
    rate_limit: {policy: "token_bucket:7/h"}
EOF
cat >"$tmp/tagged.yaml" <<'EOF'
domain: tagged
hash_tag: user
descriptors:
  - key: user
    rate_limits:
      - {name: narrow, policy: "gcra:20/h"}
      - {name: wide, policy: "sliding_log:30/h"}
  - key: org
    rate_limit: {policy: "sliding_log:25/h"}
EOF
# The resharding phase's: every key of a request under the tag t.
cat >"$tmp/shard.yaml" <<'EOF'
domain: shard
hash_tag: t
descriptors:
  - key: t
    descriptors:
      - key: k
        rate_limit: {policy: "sliding_log:12/h"}
      - key: m
        rate_limits:
          - {name: a, policy: "sliding_log:12/h"}
          - {name: b, policy: "sliding_log:24/h"}
EOF
mkdir "$tmp/conf"
cp "$tmp/cluster.yaml" "$tmp/tagged.yaml" "$tmp/shard.yaml" "$tmp/conf/"
# A generous timeout: every decision here must be Redis's (checked below).
for i in 1 2 3; do
  sv_start "d$i" -t 2 --store "redis-cluster://127.0.0.1:$P1" \
    --redis-timeout 5000 --on-store-error deny --config "$tmp/conf" || lib_finish
  like "d$i: discovered the 3 masters from one seed" 'info: redis: 3 nodes' \
    "$(grep 'info: redis:' "$LOG")"
done
d_resp=""
d_http=""
for i in 1 2 3; do
  sv_use "d$i"
  d_resp=$d_resp${d_resp:+,}$RESP
  d_http=$d_http${d_http:+,}$HTTP
done

# --- many keys, and one hot key ---------------------------------------------
spread() {
  at=a$1
  : >"$tmp/jobs"
  i=0
  while [ $i -lt 40 ]; do
    # Ad-hoc keys (5 each) and config keys (7 each), 15 and 12 requests.
    printf 'ad%s\t15\tresp\tSL.THROTTLE\t%s-key%s\tsliding_log:5/h\n' $i "$at" $i >>"$tmp/jobs"
    printf 'cf%s\t12\tresp\tSL.CHECK\tplain\tk\t%s-%s\n' $i "$at" $i >>"$tmp/jobs"
    i=$((i + 1))
  done
  fl_load --resp "$d_resp" --threads 8 "$tmp/jobs" >"$tmp/sum"
  eq "spread: no request failed ($(grep '^ERR' "$tmp/sum" | head -n 1))" 0 \
    "$(fl_get ALL errors "$tmp/sum")"
  bad=$(awk '$1 ~ /^ad/ && $2 != "allowed=5" { print } $1 ~ /^cf/ && $2 != "allowed=7" { print }' \
    "$tmp/sum" | head -n 3)
  eq "spread: 80 keys over 3 daemons: each allowed exactly its limit" "" "$bad"
  printf 'hot\t400\tresp\tSL.THROTTLE\thot-%s\tgcra:100/h\n' "$at" >"$tmp/jobs"
  fl_load --resp "$d_resp" --threads 12 "$tmp/jobs" >"$tmp/sum"
  eq "hot key: gcra:100/h, 12 clients over 3 daemons: allowed" 100 \
    "$(fl_get hot allowed "$tmp/sum")"
}
t0=$(now_ms)
in_window 3600 spread
say "spread: 1080 + 400 requests in $(($(now_ms) - t0)) ms"
n1=$(rcli "$P1" DBSIZE)
n2=$(rcli "$P2" DBSIZE)
n3=$(rcli "$P3" DBSIZE)
say "keys per master: $n1 / $n2 / $n3"
in_range "keys on the first master" 5 100000 "$n1"
in_range "keys on the second master" 5 100000 "$n2"
in_range "keys on the third master" 5 100000 "$n3"

# keys_of PATTERN — every key matching PATTERN, on any master, one a line
# as "PORT KEY".
keys_of() {
  for _p in $P1 $P2 $P3; do
    timeout 10 redis-cli -h 127.0.0.1 -p "$_p" --scan --pattern "$1" </dev/null |
      sed "s/^/$_p /"
  done
}
# slots_of PATTERN — the distinct CLUSTER KEYSLOTs of those keys, one line.
slots_of() {
  keys_of "$1" | while read -r _p _k; do rcli "$_p" CLUSTER KEYSLOT "$_k"; done |
    sort -u | paste -sd' ' -
}

# --- a request over several slots, and one slot with hash_tag --------------
# Each request: two descriptors, user (narrow 20 and wide 30) and org (25);
# interleaved with requests of the org alone.
multi() {
  at=a$1
  for dom in plain tagged; do
    printf 'both\t60\tpost\t/v1/check\t{"domain":"%s","descriptors":[{"entries":[{"key":"user","value":"u-%s"}]},{"entries":[{"key":"org","value":"o-%s"}]}]}\n' \
      $dom "$at" "$at" >"$tmp/jobs"
    fl_load --http "$d_http" --threads 8 "$tmp/jobs" >"$tmp/sum.$dom"
    eq "$dom: no request failed ($(grep '^ERR' "$tmp/sum.$dom" | head -n 1))" 0 \
      "$(fl_get ALL errors "$tmp/sum.$dom")"
    sv_use d1
    # What each limit was charged: a peek with the same descriptors (with
    # hash_tag, the org's state is the one under the user's tag).
    post "$URL/v1/check" "{\"domain\":\"$dom\",\"descriptors\":[{\"entries\":[{\"key\":\"user\",\"value\":\"u-$at\"}],\"hits_addend\":0},{\"entries\":[{\"key\":\"org\",\"value\":\"o-$at\"}],\"hits_addend\":0}]}"
    want_code "$dom: the peek" 200
    narrow=$((20 - $(rl_item ratelimit narrow | sed 's/.*;r=\([0-9]*\);.*/\1/')))
    wide=$((30 - $(rl_item ratelimit wide | sed 's/.*;r=\([0-9]*\);.*/\1/')))
    org=$((25 - $(jv 'd["statuses"][1]["limit_remaining"]')))
    allowed=$(fl_get both allowed "$tmp/sum.$dom")
    say "$dom: allowed $allowed of 60; charged: narrow $narrow/20, wide $wide/30, org $org/25"
    in_range "$dom: allowed, at most the narrow limit" 1 20 "$allowed"
    in_range "$dom: narrow charged, within its limit, at least what was allowed" \
      "$allowed" 20 "$narrow"
    in_range "$dom: wide charged, within its limit, at least what was allowed" \
      "$allowed" 30 "$wide"
    in_range "$dom: org charged, within its limit, at least what was allowed" \
      "$allowed" 25 "$org"
  done
  # One slot: exact and all-or-nothing.
  eq "tagged: allowed exactly the narrow limit" 20 "$(fl_get both allowed "$tmp/sum.tagged")"
  eq "tagged: charged only for the allowed ones (narrow, wide, org)" "20 20 20" \
    "$narrow $wide $org"
}
in_window 3600 multi
slots=$(slots_of "*plain.user*")
like "plain: the user's two limits' keys are in different slots ($slots)" \
  '^[0-9]+ [0-9]+$' "$slots"
slots=$(slots_of "*plain.*")
like "plain: a request's keys are in several slots ($slots)" '^[0-9]+( [0-9]+)+$' "$slots"
# The tagged keys: sl:{u-aN}... (the value of hash_tag's key).
keys_of "*tagged.*" >"$tmp/tagged.keys"
eq "tagged: every key of the request carries the user's tag" "" \
  "$(awk '$2 !~ /^sl:\{u-a[0-9]+\}/' "$tmp/tagged.keys")"
in_range "tagged: the request's keys (narrow, wide, org)" 3 15 "$(grep -c '' "$tmp/tagged.keys")"
slots=$(slots_of "*tagged.*")
like "tagged: all of them in one slot ($slots)" '^[0-9]+$' "$slots"
eq "tagged: that is the slot of the tag" \
  "$(rcli "$P1" CLUSTER KEYSLOT "$(awk '{ print $2; exit }' "$tmp/tagged.keys" | sed 's/^sl:{\([^}]*\)}.*/\1/')")" \
  "$slots"

# --- resets: each DEL to its key's master --------------------------------
# (at: the attempt of multi that counted)
sv_use d2
eq "reset: plain: the user's two keys before, in two slots" 2 \
  "$(keys_of "*plain.user*u-$at" | grep -c '')"
http POST "$URL/admin/reset?domain=plain&user=u-$at"
want_code "reset: plain: POST /admin/reset?domain=plain&user=" 200
eq "reset: plain: both states dropped" '{"reset":2}' "$(cat "$tmp/b")"
eq "reset: plain: no key left on any master" "" "$(keys_of "*plain.user*u-$at")"
# The org's state under the user's tag: the reset names both descriptors,
# as the requests did.
body="{\"domain\":\"tagged\",\"descriptors\":[{\"entries\":[{\"key\":\"user\",\"value\":\"u-$at\"}]},{\"entries\":[{\"key\":\"org\",\"value\":\"o-$at\"}]}]}"
post "$URL/admin/reset" "$body"
eq "reset: tagged: a JSON body of both descriptors: three states dropped" \
  '{"reset":3}' "$(cat "$tmp/b")"
eq "reset: tagged: no key left under the tag" "" "$(keys_of "sl:{u-$at}*")"
sv_use d3
post "$URL/v1/check" "$body"
want_code "reset: tagged: allowed again (through another daemon)" 200
want_jv "reset: tagged: the narrow limit starts afresh" \
  'd["statuses"][0]["limit_remaining"]' 19

# --- live resharding: a slot moves from the first master to the second ----
# Step by step, as redis-cli --cluster reshard moves a slot, while the
# exact daemons (d1-d3) and an approximate one (z, --sync 100) take
# requests on keys of that slot. Every limit is a sliding_log per hour (no
# refill during the test), so each key's total allowed over the whole run
# must be its limit exactly, whatever the cluster said on the way.
#
# slot_of STRING... — each string's cluster slot (CRC16 as Redis Cluster
# computes it, whole string: callers pass a hash tag, or a name with "{}").
# find_in_slot SLOT PREFIX N — N values v (z0, z1, ...) whose key PREFIX v
# is in SLOT, one a line.
crc_py='
import sys
T = []
for i in range(256):
    c = i << 8
    for _ in range(8):
        c = ((c << 1) ^ 0x1021 if c & 0x8000 else c << 1) & 0xFFFF
    T.append(c)
def crc(b, c=0):
    for x in b:
        c = ((c << 8) & 0xFFFF) ^ T[(c >> 8) ^ x]
    return c
'
slot_of() {
  "$PY" -c "$crc_py
for s in sys.argv[1:]: print(crc(s.encode()) & 16383)" "$@"
}
find_in_slot() {
  "$PY" -c "$crc_py
slot, pre, n = int(sys.argv[1]), sys.argv[2].encode(), int(sys.argv[3])
c0, i, found = crc(pre), 0, 0
while found < n and i < 2000000:
    v = b'z%d' % i
    if crc(v, c0) & 16383 == slot:
        print(v.decode())
        found += 1
    i += 1" "$@"
}
# errstat PORT ERROR — how many ERROR replies (MOVED, ASK, TRYAGAIN,
# NOSCRIPT) that node has sent (INFO errorstats).
errstat() {
  _e=$(rcli "$1" INFO errorstats | tr ' ' '\n' |
    sed -n "s/^errorstat_$2:count=\([0-9]*\).*/\1/p")
  echo "${_e:-0}"
}

# The slot: the first hash tag t0, t1, ... that the first master serves.
i=0
while [ $i -lt 100 ]; do
  T=t$i
  S=$(slot_of "$T")
  [ "$S" -le 5460 ] && break
  i=$((i + 1))
done
eq "reshard: our slot computation agrees with CLUSTER KEYSLOT" "$S" \
  "$(rcli "$P1" CLUSTER KEYSLOT "{$T}x")"
ID1=$(rcli "$P1" CLUSTER MYID)
ID2=$(rcli "$P2" CLUSTER MYID)
ID3=$(rcli "$P3" CLUSTER MYID)

# The approximate daemon, on ad-hoc keys (approximate mode names its keys
# "sl:{}...", without a hash tag): values whose key falls in the slot.
sv_start z -t 2 --store "redis-cluster://127.0.0.1:$P1" --sync 100 \
  --redis-timeout 5000 --config "$tmp/conf" || lib_finish
sv_use z
Z=$RESP
ZP=sliding_log:12/h

# Approximate mode's resets reach every daemon through the cluster: a
# second approximate daemon, seeded from another master, spends keys in
# several slots as z does; a reset through z deletes each key on its
# master and publishes them (to one node: a PUBLISH reaches the
# subscribers of every node), and z2 drops its own state after its next
# round.
sv_start z2 -t 1 --store "redis-cluster://127.0.0.1:$P2" --sync 100 \
  --redis-timeout 5000 --config "$tmp/conf" || lib_finish
sv_use z2
Z2=$RESP
rk=zr-$(now_ms)
for i in 1 2 3 4 5 6; do
  for p in $Z $Z2; do
    for j in 1 2 3 4; do rcli "$p" SL.THROTTLE "$rk-$i" gcra:3/h >/dev/null; done
  done
done
zr_left() {
  for i in 1 2 3 4 5 6; do
    rcli "$1" SL.THROTTLE "$rk-$i" gcra:3/h 0 | cut -d' ' -f3
  done | paste -sd' ' -
}
eq "approx reset: z2 has spent the 6 keys" "0 0 0 0 0 0" "$(zr_left "$Z2")"
zr_keys() { keys_of "*gcra:3/h$rk-*" | grep -c ''; }
if waitfor 50 eval '[ "$(zr_keys)" = 6 ]'; then pass; else
  fail "approx reset: the 6 keys never all reached Redis ($(zr_keys))"
fi
in_range "approx reset: the 6 keys live on more than one master" 2 3 \
  "$(keys_of "*gcra:3/h$rk-*" | cut -d' ' -f1 | sort -u | grep -c '')"
sleep 0.3 # every charge pushed: none lands after the UNLINKs
for i in 1 2 3 4 5 6; do rcli "$Z" SL.RESET "$rk-$i" gcra:3/h >/dev/null; done
eq "approx reset: no key left on any master" 0 "$(zr_keys)"
if waitfor 30 eval '[ "$(zr_left "$Z2")" = "3 3 3 3 3 3" ]'; then pass; else
  fail "approx reset: z2's remaining $(zr_left "$Z2"), want 3 each (the published resets)"
fi
sv_use z2
eq "approx reset: z2 applied the 6 published resets" 6 \
  "$(metric sluice_sync_resets_total)"
sv_stop z2
sv_use z
sv_use d1
rcli "$RESP" SL.THROTTLE zprobe "$ZP" >/dev/null
zname=$(keys_of '*zprobe' | awk '{ print $2; exit }')
like "reshard: an ad-hoc key's name in Redis" '^sl:\{\}a[0-9]+:.*zprobe$' "$zname"
zkeys=$(find_in_slot "$S" "${zname%zprobe}" 3 | paste -sd' ' -)
like "reshard: three ad-hoc keys in slot $S" '^z[0-9]+ z[0-9]+ z[0-9]+$' "$zkeys"
set -- $zkeys
Z1=$1
# And one on the second master from the start (slot 8000), so that the
# sync thread's connection to it predates the SCRIPT FLUSH below (a new
# connection loads the script).
zkeys="$zkeys $(find_in_slot 8000 "${zname%zprobe}" 1)"
zcharged=0
zphase=reshard

# job TAG COUNT K V — a line of $tmp/jobs: SL.CHECK shard t $T K V.
job() { printf '%s\t%s\tresp\tSL.CHECK\tshard\tt\t%s\t%s\t%s\n' "$1" "$2" "$T" "$3" "$4" >>"$tmp/jobs"; }
# store_failures — Redis errors and fallback decisions, d1-d3 together.
store_failures() {
  for _i in 1 2 3; do
    sv_use "d$_i"
    snap "$tmp/m"
    echo $(($(metric sluice_redis_errors_total "$tmp/m") + $(metric sluice_store_fallbacks_total "$tmp/m")))
  done | awk '{ n += $1 } END { print n }'
}
# step NAME [PORT] — the requests of $tmp/jobs over d1-d3 (fl_load, 6
# clients), or all at once on one connection to PORT (fl_pipe: one batched
# script call); none may fail, and every decision must be Redis's (a
# failed call is answered by on_store_error, deny here: a denial); their
# outcomes go to the ledger.
step() {
  _f0=$(store_failures)
  if [ -n "${2:-}" ]; then fl_pipe "$2" "$tmp/jobs"; else
    fl_load --resp "$d_resp" --threads 6 "$tmp/jobs"
  fi >"$tmp/sum"
  eq "reshard, $1: no request failed, no Redis error, no fallback ($(grep '^ERR' "$tmp/sum" | head -n 1))" \
    "0 0" "$(fl_get ALL errors "$tmp/sum") $(($(store_failures) - _f0))"
  grep -v '^ALL\|^ERR' "$tmp/sum" >>"$tmp/ledger"
  : >"$tmp/jobs"
}
# zlevels PORT — what the fleet has left on the ad-hoc keys (peeks, through
# that daemon).
zlevels() {
  _zp=$1
  for _z in $zkeys; do
    set -- $(rcli "$_zp" SL.THROTTLE "$_z" "$ZP" 0)
    printf '%s ' "$3"
  done
}
zin_redis() { [ "$(zlevels "$D1")" = "$zwant" ]; }
# zstep NAME [COMMAND...] — two requests on each ad-hoc key ($zkeys) through
# z, all allowed (12 each in all, charged over six steps); COMMAND (a wait);
# then, within a few sync rounds, Redis has the fleet's level: 12 less all
# that z charged ($zcharged; peeks through an exact daemon), so these
# charges were pushed in this state of the slot, not lost. Checks are named
# "$zphase, NAME".
zstep() {
  : >"$tmp/zjobs"
  for _z in $zkeys; do
    printf '%s\t2\tresp\tSL.THROTTLE\t%s\t%s\n' "$_z" "$_z" "$ZP" >>"$tmp/zjobs"
  done
  fl_load --resp "$Z" --threads 3 "$tmp/zjobs" >"$tmp/zsum"
  eq "$zphase, $1: approximate: allowed, each key" \
    "$(for _z in $zkeys; do echo 2; done | paste -sd' ' -) 0" \
    "$(for _z in $zkeys; do fl_get "$_z" allowed "$tmp/zsum"; done | paste -sd' ' -) $(fl_get ALL errors "$tmp/zsum")"
  zcharged=$((zcharged + 2))
  _zn=$1
  shift
  [ $# -eq 0 ] || "$@"
  zwant=$(for _z in $zkeys; do printf '%s ' $((12 - zcharged)); done)
  waitfor 50 zin_redis
  eq "$zphase, $_zn: approximate: the fleet's level in Redis" "$zwant" "$(zlevels "$D1")"
}
sv_use d1
D1=$RESP
sv_use d2
D2=$RESP
sv_use d3
D3=$RESP
: >"$tmp/jobs"
: >"$tmp/ledger"
t0=$(now_ms)

# 1. Stable: the slot on the first master.
job ka 3 k a
job kb 3 k b
job kc 3 k c
job mx 3 m x
step "stable"
zstep "stable"
n=$(rcli "$P1" CLUSTER COUNTKEYSINSLOT "$S")
eq "reshard: the slot's keys on the first master (k a-c, m x's 2, 3 ad-hoc)" 8 "$n"
moved2=$(errstat "$P2" MOVED)
ask1=$(errstat "$P1" ASK)
try1=$(errstat "$P1" TRYAGAIN)
try1_0=$try1
try2=$(errstat "$P2" TRYAGAIN)
noscript2=$(errstat "$P2" NOSCRIPT)

# 2. IMPORTING on the target, MIGRATING on the source: nothing moved yet.
eq "reshard: SETSLOT IMPORTING on the second master" OK \
  "$(rcli "$P2" CLUSTER SETSLOT "$S" IMPORTING "$ID1")"
eq "reshard: SETSLOT MIGRATING on the first" OK \
  "$(rcli "$P1" CLUSTER SETSLOT "$S" MIGRATING "$ID2")"
# One batched call: a (on the source) and d (new: ASK); Redis refuses the
# whole with TRYAGAIN (some keys here, some not).
job ka 2 k a
job kd 2 k d
step "migrating, a and d in one call" "$D1"
in_range "reshard: the source answered TRYAGAIN (a batch of keys here and not)" \
  1 1000 $(($(errstat "$P1" TRYAGAIN) - try1))
in_range "reshard: the source answered ASK (a key not here)" \
  1 1000 $(($(errstat "$P1" ASK) - ask1))
like "reshard: d, new, was created on the target (after ASKING)" 'k.d' \
  "$(rcli "$P2" CLUSTER GETKEYSINSLOT "$S" 100)"
# Keys on the source are served there: a, b, m x's two.
job ka 1 k a
job kb 2 k b
job kd 1 k d
job mx 2 m x
step "migrating"
zstep "migrating"

# 3. Some keys MIGRATEd: b, m x's limit a, the first ad-hoc key; the target
# never loaded the script (SCRIPT FLUSH): ASK, then NOSCRIPT after ASKING.
keyname() { rcli "$P1" CLUSTER GETKEYSINSLOT "$S" 100 | tr ' ' '\n' | grep -E -- "$1" | head -n 1; }
kb=$(keyname 'k.b$')
mxa=$(keyname 'm#a\|.*m.x$')
kz=$(keyname "$Z1\$")
like "reshard: the three keys to move" '^sl:.+ sl:.+ sl:.+$' "$kb $mxa $kz"
eq "reshard: SCRIPT FLUSH on the target" OK "$(rcli "$P2" SCRIPT FLUSH)"
eq "reshard: MIGRATE three keys" OK \
  "$(rcli "$P1" MIGRATE 127.0.0.1 "$P2" "" 0 5000 KEYS "$kb" "$mxa" "$kz")"
job kb 2 k b
step "b moved: ASK, NOSCRIPT" "$D2"
in_range "reshard: the target answered NOSCRIPT" 1 1000 \
  $(($(errstat "$P2" NOSCRIPT) - noscript2))
job ka 1 k a
job kb 1 k b
step "a here, b moved, in one call" "$D3"
# m x: its two keys are now on two nodes: TRYAGAIN until the second moves
# (the request waits, within --redis-timeout).
# load_tryagain WHAT PORT DAEMON — the jobs queued so far, the last a
# request whose keys are on two nodes, as a background load through
# DAEMON (fl_bg_pid; its summary in $tmp/bg.sum, the store failures
# before it in bg_f0): node PORT answers it TRYAGAIN, and again (it is
# tried again, within its deadline).
load_tryagain() {
  _lt_port=$2
  _lt_try=$(errstat "$_lt_port" TRYAGAIN)
  bg_f0=$(store_failures)
  mv "$tmp/jobs" "$tmp/bg.jobs"
  : >"$tmp/jobs"
  fl_load_bg "$tmp/bg.sum" --resp "$3" --threads 1 "$tmp/bg.jobs"
  _lt_tried() { [ $(($(errstat "$_lt_port" TRYAGAIN) - _lt_try)) -ge 2 ]; }
  waitfor 30 _lt_tried
  in_range "reshard: $1 got TRYAGAIN (and tried again)" \
    2 100000 $(($(errstat "$_lt_port" TRYAGAIN) - _lt_try))
}
job mx 1 m x
load_tryagain "m x, split over two nodes," "$P1" "$D1"
if kill -0 "$fl_bg_pid" 2>/dev/null; then pass; else
  fail "reshard: m x was answered while its keys were on two nodes: $(cat "$tmp/bg.sum")"
fi
# The sync thread's call for the moved ad-hoc key meets NOSCRIPT too (the
# peeks wait for it: they would load the script themselves).
noscript2b=$(errstat "$P2" NOSCRIPT)
eq "reshard: SCRIPT FLUSH on the target again" OK "$(rcli "$P2" SCRIPT FLUSH)"
noscript_again() { [ "$(errstat "$P2" NOSCRIPT)" -gt "$noscript2b" ]; }
zstep "partly migrated" waitfor 30 noscript_again
in_range "reshard: approximate: the target answered the sync NOSCRIPT" 1 1000 \
  $(($(errstat "$P2" NOSCRIPT) - noscript2b))
# The rest of the slot, ten keys to a MIGRATE as redis-cli does.
i=0
while [ $i -lt 20 ]; do
  ks=$(rcli "$P1" CLUSTER GETKEYSINSLOT "$S" 10)
  [ -n "$ks" ] || break
  # (word splitting: the names have no spaces)
  eq "reshard: MIGRATE the rest" OK "$(rcli "$P1" MIGRATE 127.0.0.1 "$P2" "" 0 5000 KEYS $ks)"
  i=$((i + 1))
done
eq "reshard: nothing left on the source" 0 "$(rcli "$P1" CLUSTER COUNTKEYSINSLOT "$S")"
bg_done() { ! kill -0 "$fl_bg_pid" 2>/dev/null; }
waitfor 100 bg_done
eq "reshard: m x, once its keys were together again: answered by Redis" \
  "0 1 0" "$(fl_get ALL errors "$tmp/bg.sum") $(fl_get ALL requests "$tmp/bg.sum") $(($(store_failures) - bg_f0))"
grep -v '^ALL\|^ERR' "$tmp/bg.sum" >>"$tmp/ledger"

# 4. Every key on the target; the slot still the source's: ASK for all.
# m y is new: the target, asked, has none of its keys: TRYAGAIN until the
# slot is the target's.
job ka 1 k a
job kb 1 k b
job kc 2 k c
job kd 1 k d
job ke 2 k e
job mx 1 m x
step "all moved"
job my 1 m y
load_tryagain "m y, new, from the target," "$P2" "$D2"
zstep "all moved"
eq "reshard: while importing, the target never answered MOVED (ASKING before every resend)" \
  0 $(($(errstat "$P2" MOVED) - moved2))

# 5. SETSLOT NODE: the target first, then the source and the third master.
for p in $P2 $P1 $P3; do
  eq "reshard: SETSLOT NODE on $p" OK "$(rcli "$p" CLUSTER SETSLOT "$S" NODE "$ID2")"
done
waitfor 100 bg_done
eq "reshard: m y, once the slot was the target's: answered by Redis" \
  "0 1 0" "$(fl_get ALL errors "$tmp/bg.sum") $(fl_get ALL requests "$tmp/bg.sum") $(($(store_failures) - bg_f0))"
grep -v '^ALL\|^ERR' "$tmp/bg.sum" >>"$tmp/ledger"
moved1=$(errstat "$P1" MOVED)
for k in a b c d e; do job "k$k" 12 k "$k"; done
job mx 12 m x
job my 12 m y
step "the target's"
zstep "the target's"
# MOVED updates each client's map: the source answers MOVED at most about
# once per client (3 x 2 workers, the sync thread) and per request in
# flight when the slot moved (6 load clients), not once per request (98).
moved1=$(($(errstat "$P1" MOVED) - moved1))
in_range "reshard: MOVED from the source, then the slot map was updated" \
  1 16 "$moved1"
eq "reshard: the slot's keys, all on the target" "0 12" \
  "$(rcli "$P1" CLUSTER COUNTKEYSINSLOT "$S") $(rcli "$P2" CLUSTER COUNTKEYSINSLOT "$S")"
eq "reshard: a's key EXISTS on the target" 1 "$(rcli "$P2" EXISTS "$(rcli "$P2" CLUSTER GETKEYSINSLOT "$S" 100 | tr ' ' '\n' | grep 'k.a$')")"

# 6. The slot moves on, in one go, to the fourth master, which no daemon
# knows: MOVED names a new node.
ID4=$(rcli "$P4" CLUSTER MYID)
eq "reshard: to the fourth: IMPORTING, MIGRATING" "OK OK" \
  "$(rcli "$P4" CLUSTER SETSLOT "$S" IMPORTING "$ID2") $(rcli "$P2" CLUSTER SETSLOT "$S" MIGRATING "$ID4")"
eq "reshard: to the fourth: MIGRATE every key" OK \
  "$(rcli "$P2" MIGRATE 127.0.0.1 "$P4" "" 0 5000 KEYS $(rcli "$P2" CLUSTER GETKEYSINSLOT "$S" 100))"
for p in $P4 $P2 $P1 $P3; do
  eq "reshard: to the fourth: SETSLOT NODE on $p" OK "$(rcli "$p" CLUSTER SETSLOT "$S" NODE "$ID4")"
done
# Every key is at its limit: Redis denies them all (the state moved whole).
for k in a b c d e; do job "k$k" 2 k "$k"; done
job mx 2 m x
job my 2 m y
step "on a new node"
zstep "on a new node"
eq "reshard: the slot's keys, all on the fourth master" "0 12" \
  "$(rcli "$P2" CLUSTER COUNTKEYSINSLOT "$S") $(rcli "$P4" CLUSTER COUNTKEYSINSLOT "$S")"

# Each key: exactly its limit, over the whole run.
eq "reshard: each key allowed exactly its limit over the run (a-e, m x, m y)" \
  "ka=12 kb=12 kc=12 kd=12 ke=12 mx=12 my=12" \
  "$(awk '{ split($2, kv, "="); n[$1] += kv[2] }
    END { for (k in n) printf "%s=%d\n", k, n[k] }' "$tmp/ledger" | sort | paste -sd' ' -)"
# m's limit b (24) was charged once per allowed request, retries or not.
sv_use d1
post "$URL/v1/check" "{\"domain\":\"shard\",\"descriptors\":[{\"entries\":[{\"key\":\"t\",\"value\":\"$T\"},{\"key\":\"m\",\"value\":\"x\"}],\"hits_addend\":0}]}"
eq "reshard: m x charged 12 on each limit (remaining a, b)" "0 12" \
  "$(rl_item ratelimit a | sed 's/.*;r=\([0-9]*\);.*/\1/') $(rl_item ratelimit b | sed 's/.*;r=\([0-9]*\);.*/\1/')"
sv_use z
snap "$tmp/m"
# Every push went through in its own round: none failed, none had to go
# again with a later round, none is unconfirmed or lost.
eq "reshard: approximate: sync calls (errors; cost retried, unconfirmed, lost)" \
  "0 0 0 0" "$(metric sluice_sync_errors_total "$tmp/m") $(metric sluice_sync_retried_cost_total "$tmp/m") $(metric sluice_sync_unconfirmed_cost_total "$tmp/m") $(metric sluice_sync_lost_cost_total "$tmp/m")"
say "reshard: slot $S moved under load in $(($(now_ms) - t0)) ms; source: ASK $(($(errstat "$P1" ASK) - ask1)), TRYAGAIN $(($(errstat "$P1" TRYAGAIN) - try1_0)); target: TRYAGAIN $(($(errstat "$P2" TRYAGAIN) - try2)), NOSCRIPT $(($(errstat "$P2" NOSCRIPT) - noscript2)); source, after: MOVED $moved1"

# --- failover: a replica of the third master takes its place --------------
# A fifth node joins as the third master's replica. The exact daemons take
# requests on keys in 30 slots of that master (and the approximate one on
# a key of its own there), before, during and after a CLUSTER FAILOVER on
# the replica (the manual one: the master holds its clients until the
# replica has all it wrote, so nothing acknowledged is lost). The old
# master then answers MOVED for its former slots: a client learns the
# slot named and reads the whole map again (CLUSTER SLOTS), so the other
# slots need no MOVED of their own: fewer MOVED in all than slots. Every
# key's total allowed over the three phases is its limit exactly (no
# charge lost or counted twice), no decision falls back, and the
# approximate daemon's charges reach the new master.
t0=$(now_ms)
P5=$(free_port)
rs_start c5 "$P5" --cluster-enabled yes \
  --cluster-config-file "$tmp/nodes-5.conf" --cluster-port "$(free_port)" \
  --cluster-node-timeout 5000 || lib_finish
eq "failover: MEET the fifth" OK "$(rcli "$P1" CLUSTER MEET 127.0.0.1 "$P5" "$(bus "$P5")")"
knows3() {
  timeout 10 redis-cli -h 127.0.0.1 -p "$P5" CLUSTER NODES </dev/null |
    grep -q "^$ID3 "
}
waitfor 200 knows3
# (a full sync at once, not after the 5 s Redis waits for more replicas)
eq "failover: the fifth replicates the third master" "OK OK" \
  "$(rcli "$P3" CONFIG SET repl-diskless-sync-delay 0) $(rcli "$P5" CLUSTER REPLICATE "$ID3")"
# Synced, and a replica of the third in every master's eyes (their votes
# elect it: a master that still sees it as a master refuses).
ID5=$(rcli "$P5" CLUSTER MYID)
replicating() {
  rcli "$P5" INFO replication | grep -q 'master_link_status:up' || return 1
  for _p in $P1 $P2 $P3 $P4; do
    timeout 10 redis-cli -h 127.0.0.1 -p "$_p" CLUSTER NODES </dev/null |
      grep "^$ID5 " | grep -q " slave $ID3 " || return 1
  done
}
if waitfor 200 replicating; then pass; else
  fail "failover: the replica never synced: $(rcli "$P5" INFO replication)"
fi
# The keys: ad-hoc ones under $ZP, 30 distinct slots of the third master's
# range (and z's own one there).
# find_in_range LO HI PREFIX N [V] — N values V0, V1, ... (V: f) whose key
# PREFIX value is in N distinct slots of LO-HI, one a line.
find_in_range() {
  "$PY" -c "$crc_py
lo, hi, pre, n = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3].encode(), int(sys.argv[4])
vp = (sys.argv[5] if len(sys.argv) > 5 else 'f').encode()
c0, i, seen = crc(pre), 0, set()
while len(seen) < n and i < 2000000:
    v = b'%s%d' % (vp, i)
    s = crc(v, c0) & 16383
    if lo <= s <= hi and s not in seen:
        seen.add(s)
        print(v.decode())
    i += 1" "$@"
}
fkeys=$(find_in_range 10923 16383 "${zname%zprobe}" 31 | paste -sd' ' -)
set -- $fkeys
FZ=$1
shift
fkeys=$*
in_range "failover: keys in distinct slots of the third master" 30 30 "$(echo $fkeys | wc -w)"
: >"$tmp/ledger"
fjobs() {
  : >"$tmp/jobs"
  for _f in $fkeys; do
    printf '%s\t%s\tresp\tSL.THROTTLE\t%s\t%s\n' "$_f" "$1" "$_f" "$ZP" >>"$tmp/jobs"
  done
}
# fstep NAME — $tmp/jobs over d1-d3: no error, no Redis error, no
# fallback; the outcomes to the ledger.
fstep() {
  _f0=$(store_failures)
  fl_load --resp "$d_resp" --threads 6 "$tmp/jobs" >"$tmp/sum"
  eq "failover, $1: no request failed, no Redis error, no fallback ($(grep '^ERR' "$tmp/sum" | head -n 1))" \
    "0 0" "$(fl_get ALL errors "$tmp/sum") $(($(store_failures) - _f0))"
  grep -v '^ALL\|^ERR' "$tmp/sum" >>"$tmp/ledger"
}
fjobs 4
fstep "before"
zkeys=$FZ
zcharged=0
zphase=failover
zstep "before"
sv_use z
snap "$tmp/z0"
moved3=$(errstat "$P3" MOVED)
f0=$(store_failures)
# During: a paced load until the failover is done.
fjobs 4
rm -f "$tmp/fstop"
fl_load_bg "$tmp/bg.sum" --resp "$d_resp" --threads 6 --rate 300 \
  --until "$tmp/fstop" "$tmp/jobs"
sleep 0.3
t1=$(now_ms)
eq "failover: CLUSTER FAILOVER on the replica" OK "$(rcli "$P5" CLUSTER FAILOVER)"
promoted() {
  rcli "$P5" ROLE | grep -q '^master' && rcli "$P3" ROLE | grep -q '^slave' &&
    rcli "$P1" CLUSTER SLOTS | grep -q " $P5 "
}
if waitfor 100 promoted; then pass; else
  fail "failover: the replica was never promoted: $(rcli "$P5" ROLE) / $(rcli "$P3" ROLE)"
fi
say "failover: the replica took over in $(($(now_ms) - t1)) ms"
sleep 0.5
touch "$tmp/fstop"
waitfor 100 bg_done
eq "failover, during: no request failed ($(grep '^ERR' "$tmp/bg.sum" | head -n 1))" 0 \
  "$(fl_get ALL errors "$tmp/bg.sum")"
grep -v '^ALL\|^ERR' "$tmp/bg.sum" >>"$tmp/ledger"
fjobs 12
fstep "after"
zstep "after"
eq "failover: no Redis error, no fallback, over the three phases" 0 \
  $(($(store_failures) - f0))
eq "failover: each key allowed exactly its limit over the three phases" "" \
  "$(awk '{ split($2, kv, "="); n[$1] += kv[2] }
    END { for (k in n) if (n[k] != 12) printf "%s=%d ", k, n[k] }' "$tmp/ledger")"
eq "failover: the new master holds every key" 31 \
  "$(timeout 10 redis-cli -h 127.0.0.1 -p "$P5" --scan --pattern "${zname%zprobe}f*" </dev/null | grep -c '')"
moved3=$(($(errstat "$P3" MOVED) - moved3))
in_range "failover: MOVED from the old master, fewer than the slots (the map read whole)" \
  1 29 "$moved3"
sv_use z
snap "$tmp/m"
eq "failover: approximate: sync errors; cost retried, unconfirmed, lost" \
  "0 0 0 0" "$(mdelta sluice_sync_errors_total "$tmp/z0" "$tmp/m") $(mdelta sluice_sync_retried_cost_total "$tmp/z0" "$tmp/m") $(mdelta sluice_sync_unconfirmed_cost_total "$tmp/z0" "$tmp/m") $(mdelta sluice_sync_lost_cost_total "$tmp/z0" "$tmp/m")"
say "failover: $(($(now_ms) - t0)) ms; MOVED from the old master: $moved3 (30 slots, 6 clients and a sync thread)"

for i in 1 2 3; do
  sv_use "d$i"
  snap "$tmp/m"
  eq "d$i: every decision was Redis's (errors, refused, fallbacks)" "0 0 0" \
    "$(metric sluice_redis_errors_total "$tmp/m") $(metric sluice_redis_refused_total "$tmp/m") $(metric sluice_store_fallbacks_total "$tmp/m")"
done

# --- a master dies: its replica takes over by itself -----------------------
# The fifth node (the third master's slots since the failover above, the
# third node its replica) is killed (-9) while the exact daemons take a
# paced load on keys in 20 of its slots. The cluster promotes the replica
# by itself (cluster-node-timeout 1000 ms for this phase: the death is
# noticed after it, then an election). A dead master answers nothing, not
# even a MOVED: each client learns the new master by reading the map
# (CLUSTER SLOTS) from another node when its calls there fail, and again
# while they are refused, at most once a second. The load's limit is out of
# reach, so its denials are on_store_error's (deny here) and nothing else.
# Checks: before the kill every decision is Redis's; during the outage the
# requests are answered, denied, each a fallback; within a few seconds of
# the promotion (CLUSTER INFO ok, the replica a master) every decision is
# Redis's again; then fresh keys of those slots are exact (each allowed its
# limit, no fallback), no node answered MOVED, and the approximate daemon's
# charges made during the outage (carried) reach the new master.
t0=$(now_ms)
for p in $P1 $P2 $P3 $P4 $P5; do
  eq "dead master: cluster-node-timeout 1000 on $p" OK \
    "$(rcli "$p" CONFIG SET cluster-node-timeout 1000)"
done
replica_of5() {
  rcli "$P3" INFO replication | grep -q 'master_link_status:up' || return 1
  for _p in $P1 $P2 $P4; do
    timeout 10 redis-cli -h 127.0.0.1 -p "$_p" CLUSTER NODES </dev/null |
      grep "^$ID3 " | grep -q " slave $ID5 " || return 1
  done
}
if waitfor 100 replica_of5; then pass; else
  fail "dead master: the third node is not the fifth's replica: $(rcli "$P3" INFO replication)"
fi
# The load's keys: an ad-hoc policy out of reach (a Redis decision always
# allows), 20 values in distinct slots of the fifth's range.
DP=fixed_window:1000000/h
rcli "$D1" SL.THROTTLE dprobe "$DP" >/dev/null
dname=$(keys_of '*dprobe' | awk '{ print $2; exit }')
like "dead master: the load's key name in Redis" '^sl:\{\}a[0-9]+:.*dprobe$' "$dname"
: >"$tmp/djobs"
for _k in $(find_in_range 10923 16383 "${dname%dprobe}" 20 d); do
  printf '%s\t1\tresp\tSL.THROTTLE\t%s\t%s\n' "$_k" "$_k" "$DP" >>"$tmp/djobs"
done
eq "dead master: the load's keys" 20 "$(grep -c '' "$tmp/djobs")"
# fallbacks — on_store_error's answers, d1-d3 together.
fallbacks() {
  for _i in 1 2 3; do
    sv_use "d$_i"
    snap "$tmp/m"
    metric sluice_store_fallbacks_total "$tmp/m"
  done | awk '{ n += $1 } END { print n }'
}
# moved_all — MOVED answered by the surviving nodes, together.
moved_all() {
  for _p in $P1 $P2 $P3 $P4; do errstat "$_p" MOVED; done |
    awk '{ n += $1 } END { print n + 0 }'
}
# slots_asked — CLUSTER SLOTS calls on the surviving nodes, together.
slots_asked() {
  for _p in $P1 $P2 $P3 $P4; do
    rcli "$_p" INFO commandstats | tr ' ' '\n' |
      sed -n 's/^cmdstat_cluster|slots:calls=\([0-9]*\).*/\1/p'
  done | awk '{ n += $1 } END { print n + 0 }'
}
sv_use z
snap "$tmp/z0"
fb0=$(fallbacks)
moved0=$(moved_all)
asked0=$(slots_asked)
rm -f "$tmp/dstop"
fl_load_bg "$tmp/dead.sum" --resp "$d_resp" --threads 12 --rate 300 \
  --until "$tmp/dstop" --log "$tmp/dead.log" "$tmp/djobs"
sleep 1
t_kill=$(now_ms)
rs_kill c5 9
# The approximate daemon charges its key there now: its sync finds the node
# gone; the charges are carried (pushed again with each round, 10 s at most).
printf '%s\t2\tresp\tSL.THROTTLE\t%s\t%s\n' "$FZ" "$FZ" "$ZP" >"$tmp/zjobs"
fl_load --resp "$Z" --threads 1 "$tmp/zjobs" >"$tmp/zsum"
eq "dead master: approximate: allowed locally while the master is dead" \
  "2 0" "$(fl_get "$FZ" allowed "$tmp/zsum") $(fl_get ALL errors "$tmp/zsum")"
zcharged=$((zcharged + 2))
promoted_alone() {
  rcli "$P3" ROLE | grep -q '^master' &&
    rcli "$P1" CLUSTER INFO | grep -q 'cluster_state:ok'
}
if waitfor 150 promoted_alone; then pass; else
  fail "dead master: the replica was never promoted: $(rcli "$P3" ROLE) / $(rcli "$P1" CLUSTER INFO | head -c 200)"
fi
t_prom=$(now_ms)
say "dead master: the replica promoted itself $((t_prom - t_kill)) ms after the kill"
# The load goes on 4 s past the promotion: a client learns it at its next
# read of the map, a second at most after its last one.
sleep 4
touch "$tmp/dstop"
waitfor 100 bg_done
fb1=$(fallbacks)
eq "dead master, under load: every request answered ($(grep '^ERR' "$tmp/dead.sum" | head -n 1))" \
  0 "$(fl_get ALL errors "$tmp/dead.sum")"
# The log: start_ms daemon tag outcome lat_ms; D = a fallback (deny).
awk -v k="$t_kill" -v p="$t_prom" '
  $4 == "D" && $1 + $5 < k { before++ }
  $4 == "D" && $1 + $5 >= k { during++; e = $1 + $5; if (e > last) last = e }
  $4 == "D" && $1 >= p + 3000 { late++ }
  $4 == "A" && $1 >= p + 3000 { after++ }
  END { printf "%d %d %d %d %d\n", before, during, late, after, last ? last - k : -1 }
' "$tmp/dead.log" >"$tmp/dead.fig"
read -r d_before d_during d_late d_after d_exact <"$tmp/dead.fig"
eq "dead master: before the kill, every decision Redis's (no denial)" 0 "$d_before"
in_range "dead master: during the outage, requests denied (on_store_error: deny)" \
  1 100000 "$d_during"
eq "dead master: each denial an on_store_error answer (fallbacks, d1-d3)" \
  "$d_during" $((fb1 - fb0))
eq "dead master: from 3 s after the promotion, no fallback" 0 "$d_late"
in_range "dead master: from 3 s after the promotion, Redis's decisions" \
  100 100000 "$d_after"
say "dead master: exact again $d_exact ms after the kill, $((d_exact + t_kill - t_prom)) ms after the promotion ($d_during of $(fl_get ALL requests "$tmp/dead.sum") requests answered per on_store_error)"
# A worker that had no call for the dead master in the outage still holds
# the old map: its first call there finds the node dead (answered per
# on_store_error) and has the map read. Loads from many connections until
# one is all Redis's.
: >"$tmp/djobs3"
for _i in 1 2 3; do cat "$tmp/djobs" >>"$tmp/djobs3"; done
settled() {
  fl_load --resp "$d_resp" --threads 24 "$tmp/djobs3" >"$tmp/sum"
  [ "$(fl_get ALL errors "$tmp/sum")" = 0 ] &&
    [ -z "$(awk '$1 != "ALL" && $1 != "ERR" && $3 != "denied=0"' "$tmp/sum")" ]
}
settle=1
until settled; do
  settle=$((settle + 1))
  [ $settle -le 5 ] || break
done
in_range "dead master: every worker on the new map (loads of 24 clients until one has no fallback)" \
  1 5 "$settle"
say "dead master: loads of 24 clients until one had no fallback: $settle"
# Fresh keys of those slots: exact, every decision Redis's.
fb2=$(fallbacks)
fkeys=$(find_in_range 10923 16383 "${zname%zprobe}" 20 g | paste -sd' ' -)
fjobs 15
fl_load --resp "$d_resp" --threads 6 "$tmp/jobs" >"$tmp/sum"
eq "dead master, after: no request failed ($(grep '^ERR' "$tmp/sum" | head -n 1))" \
  0 "$(fl_get ALL errors "$tmp/sum")"
eq "dead master, after: 20 fresh keys, each allowed exactly its limit" "" \
  "$(awk '$1 != "ALL" && $1 != "ERR" && $2 != "allowed=12" { printf "%s %s ", $1, $2 }' "$tmp/sum")"
eq "dead master, after: no fallback" 0 $(($(fallbacks) - fb2))
eq "dead master, after: the new master holds the fresh keys" 20 \
  "$(timeout 10 redis-cli -h 127.0.0.1 -p "$P3" --scan --pattern "${zname%zprobe}g*" </dev/null | grep -c '')"
eq "dead master: no node answered MOVED (the map read instead)" 0 \
  $(($(moved_all) - moved0))
in_range "dead master: the surviving nodes were asked CLUSTER SLOTS" \
  1 100000 $(($(slots_asked) - asked0))
# The approximate daemon's charges, made while the master was dead, reach
# the new master: the fleet's level there, through an exact daemon.
zkeys=$FZ
zwant="$((12 - zcharged)) "
waitfor 100 zin_redis
eq "dead master: approximate: the fleet's level in Redis (charges made in the outage)" \
  "$zwant" "$(zlevels "$D1")"
sv_use z
snap "$tmp/m"
in_range "dead master: approximate: the charges were carried (retried cost)" \
  2 100000 "$(mdelta sluice_sync_retried_cost_total "$tmp/z0" "$tmp/m")"
eq "dead master: approximate: cost unconfirmed, lost" "0 0" \
  "$(mdelta sluice_sync_unconfirmed_cost_total "$tmp/z0" "$tmp/m") $(mdelta sluice_sync_lost_cost_total "$tmp/z0" "$tmp/m")"
say "dead master: $(($(now_ms) - t0)) ms"

sv_stop z
for i in 1 2 3; do sv_stop "d$i"; done
say "$(($(now_ms) - t_start)) ms in all"
lib_finish
