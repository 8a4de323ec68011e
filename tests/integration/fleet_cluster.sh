#!/bin/sh
# fleet_cluster.sh — fleet mode on a real Redis Cluster: three masters on
# loopback, three `sluice serve` daemons given one seed each (the rest is
# discovered), requests sprayed round robin over the daemons (POSIX sh;
# helpers in serve_lib.sh and fleet_lib.sh).
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
#     descriptors).

. "$(dirname "$0")/serve_lib.sh"
. "$(dirname "$0")/fleet_lib.sh"
lib_init fleet_cluster

t_start=$(now_ms)
# --- the cluster: three masters, slots split in three ------------------------
P1=$(free_port)
P2=$(free_port)
P3=$(free_port)
for i in 1 2 3; do
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
cluster_ok() {
  for _p in $P1 $P2 $P3; do
    rcli "$_p" CLUSTER INFO | grep -q 'cluster_state:ok' || return 1
    rcli "$_p" CLUSTER INFO | grep -q 'cluster_known_nodes:3' || return 1
  done
}
if waitfor 200 cluster_ok; then pass; else
  fail "cluster: CLUSTER INFO never said cluster_state:ok on all three: $(rcli "$P1" CLUSTER INFO)"
  lib_finish
fi
say "cluster: 3 masters ok in $(($(now_ms) - t_start)) ms"

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
mkdir "$tmp/conf"
cp "$tmp/cluster.yaml" "$tmp/tagged.yaml" "$tmp/conf/"
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
for i in 1 2 3; do
  sv_use "d$i"
  snap "$tmp/m"
  eq "d$i: every decision was Redis's (errors, refused, fallbacks)" "0 0 0" \
    "$(metric sluice_redis_errors_total "$tmp/m") $(metric sluice_redis_refused_total "$tmp/m") $(metric sluice_store_fallbacks_total "$tmp/m")"
done
for i in 1 2 3; do sv_stop "d$i"; done
say "$(($(now_ms) - t_start)) ms in all"
lib_finish
