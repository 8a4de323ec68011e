#!/bin/sh
# fleet_split.sh — a hot limit split into sub-counters (a rate limit's
# `split`) on a real Redis Cluster: three masters on loopback (slots in
# three even ranges), two exact `sluice serve` daemons, requests sprayed
# round robin over them (POSIX sh; helpers in serve_lib.sh and
# fleet_lib.sh).
#
#   SLUICE=build/sluice sh tests/integration/fleet_split.sh   (make integration)
#
#   - load spread: one hot key (one descriptor every request shares), split
#     3 ways in turn: each master serves 20%..47% of that rule's EVALSHA
#     calls (INFO commandstats per node, after CONFIG RESETSTAT), where
#     without the split one master serves them all;
#   - split by a client key: 30 clients spread over the three masters
#     alike;
#   - accuracy: split 3 ways in turn, sliding_log:30/h lets exactly 30
#     through; split by client, one client alone gets its sub-counter's
#     share (10), and many clients together exactly 30;
#   - several rules on one request, in a hash_tag domain, where the split
#     rule's sub-counter lives in another slot than the request's other
#     rule: check-then-commit, neither rule ever lets more than its limit
#     through;
#   - a reset of the hot key drops every sub-counter on every master.

. "$(dirname "$0")/serve_lib.sh"
. "$(dirname "$0")/fleet_lib.sh"
lib_init fleet_split

# --- the cluster: three masters, slots split in three ------------------------
P1=$(free_port)
P2=$(free_port)
P3=$(free_port)
for i in 1 2 3; do
  eval "p=\$P$i"
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

# --- the daemons -----------------------------------------------------------
mkdir "$tmp/conf"
cat >"$tmp/conf/hot.yaml" <<'EOF'
domain: hot
descriptors:
  - key: tier
    value: rotate
    rate_limit:
      policy: "token_bucket:1000000/s"
      split: {counters: 3, rotate: true}
  - key: tier
    value: whole
    rate_limit: {policy: "token_bucket:1000000/s"}
  - key: tier
    value: byclient
    rate_limit:
      policy: "token_bucket:1000000/s"
      split: {counters: 3, by: client}
  - key: tier
    value: exact
    rate_limit:
      policy: "sliding_log:30/h"
      split: {counters: 3, rotate: true}
  - key: tier
    value: exactby
    rate_limit:
      policy: "sliding_log:30/h"
      split: {counters: 3, by: client}
  - key: client
    rate_limit: {unlimited: true}
EOF
cat >"$tmp/conf/tagged.yaml" <<'EOF'
domain: tagged
hash_tag: user
descriptors:
  - key: user
    rate_limit: {policy: "sliding_log:4/h"}
  - key: tier
    rate_limit:
      policy: "sliding_log:30/h"
      split: {counters: 3, rotate: true}
EOF
for i in 1 2; do
  sv_start "d$i" -t 2 --store "redis-cluster://127.0.0.1:$P1" \
    --redis-timeout 5000 --on-store-error deny --config "$tmp/conf" || lib_finish
done
d_resp=""
for i in 1 2; do
  sv_use "d$i"
  d_resp=$d_resp${d_resp:+,}$RESP
done

# calls PORT — the EVALSHA calls a master has served since its RESETSTAT.
calls() {
  rcli "$1" INFO commandstats | tr ' ' '\n' |
    sed -n 's/^cmdstat_evalsha:calls=\([0-9]*\),.*/\1/p' | head -n 1
}
resetstat() { for _p in $P1 $P2 $P3; do rcli "$_p" CONFIG RESETSTAT >/dev/null; done; }

# spread NAME OPTION PORTS JOBFILE — drives the jobs (OPTION --resp or
# --http, to PORTS) and checks each master's share of the EVALSHA calls:
# 20%..47% each.
spread() {
  resetstat
  fl_load "$2" "$3" --threads 6 "$4" >"$tmp/sum"
  eq "$1: no request failed ($(grep '^ERR' "$tmp/sum" | head -n 1))" 0 \
    "$(fl_get ALL errors "$tmp/sum")"
  c1=$(calls "$P1")
  c2=$(calls "$P2")
  c3=$(calls "$P3")
  c1=${c1:-0} c2=${c2:-0} c3=${c3:-0}
  total=$((c1 + c2 + c3))
  say "$1: EVALSHA calls per master $c1 / $c2 / $c3"
  for c in $c1 $c2 $c3; do
    in_range "$1: a master's share of the calls, in %" 20 47 \
      "$((total > 0 ? 100 * c / total : 0))"
  done
}

# --- load spread -------------------------------------------------------------
printf 'hot\t3000\tresp\tSL.CHECK\thot\ttier\trotate\n' >"$tmp/jobs"
spread "rotate, 3 counters" --resp "$d_resp" "$tmp/jobs"
eq "rotate: every request allowed" 3000 "$(fl_get hot allowed "$tmp/sum")"

# The same hot key unsplit: one master serves every call.
resetstat
printf 'hot\t600\tresp\tSL.CHECK\thot\ttier\twhole\n' >"$tmp/jobs"
fl_load --resp "$d_resp" --threads 6 "$tmp/jobs" >"$tmp/sum"
c1=$(calls "$P1")
c2=$(calls "$P2")
c3=$(calls "$P3")
say "unsplit: EVALSHA calls per master ${c1:-0} / ${c2:-0} / ${c3:-0}"
busy=0
for c in ${c1:-0} ${c2:-0} ${c3:-0}; do [ "$c" -eq 0 ] || busy=$((busy + 1)); done
eq "unsplit: one master serves the hot key" 1 "$busy"

# Split by client: 30 clients, 100 requests each, the client in a
# descriptor of its own (which no limit counts: only the tier's calls).
# body TIER CLIENT — POST /v1/check's JSON for (tier) and (client).
body() {
  printf '{"domain":"hot","descriptors":[{"entries":[{"key":"tier","value":"%s"}]},{"entries":[{"key":"client","value":"%s"}]}]}' "$1" "$2"
}
d_http=""
for i in 1 2; do
  sv_use "d$i"
  d_http=$d_http${d_http:+,}$HTTP
done
: >"$tmp/jobs"
i=0
while [ $i -lt 30 ]; do
  printf 'c%s\t100\tpost\t/v1/check\t%s\n' $i "$(body byclient "u-$i")" >>"$tmp/jobs"
  i=$((i + 1))
done
spread "by client, 3 counters" --http "$d_http" "$tmp/jobs"

# --- accuracy ----------------------------------------------------------------
printf 'ex\t60\tresp\tSL.CHECK\thot\ttier\texact\n' >"$tmp/jobs"
fl_load --resp "$d_resp" --threads 6 "$tmp/jobs" >"$tmp/sum"
eq "rotate: sliding_log:30/h split 3 ways lets exactly 30 through" 30 \
  "$(fl_get ex allowed "$tmp/sum")"

printf 'alice\t40\tpost\t/v1/check\t%s\n' "$(body exactby alice)" >"$tmp/jobs"
fl_load --http "$d_http" --threads 6 "$tmp/jobs" >"$tmp/sum"
eq "by client: one client alone gets its sub-counter's share, 10 of 30" 10 \
  "$(fl_get alice allowed "$tmp/sum")"
: >"$tmp/jobs"
i=0
while [ $i -lt 60 ]; do
  printf 'm%s\t3\tpost\t/v1/check\t%s\n' $i "$(body exactby "m$i")" >>"$tmp/jobs"
  i=$((i + 1))
done
fl_load --http "$d_http" --threads 6 "$tmp/jobs" >"$tmp/sum"
many=$(awk '$1 ~ /^m/ { split($2, a, "="); s += a[2] } END { print s + 0 }' "$tmp/sum")
eq "by client: alice and 60 others together take exactly the 30" 20 "$many"

# --- several rules, one request, two slots -----------------------------------
# user (4/h, in the tag's slot) and tier (30/h split 3: each sub-counter in
# a slot of its own): 12 users, 6 requests each.
: >"$tmp/jobs"
i=0
while [ $i -lt 12 ]; do
  printf 'u%s\t6\tpost\t/v1/check\t{"domain":"tagged","descriptors":[{"entries":[{"key":"user","value":"u%s"}]},{"entries":[{"key":"tier","value":"t"}]}]}\n' $i $i >>"$tmp/jobs"
  i=$((i + 1))
done
fl_load --http "$d_http" --threads 6 "$tmp/jobs" >"$tmp/sum"
eq "tagged: no request failed ($(grep '^ERR' "$tmp/sum" | head -n 1))" 0 \
  "$(fl_get ALL errors "$tmp/sum")"
over=$(awk '$1 ~ /^u/ { split($2, a, "="); if (a[2] > 4) print $1 }' "$tmp/sum" | head -n 3)
eq "tagged: no user over its 4" "" "$over"
total=$(awk '$1 ~ /^u/ { split($2, a, "="); s += a[2] } END { print s + 0 }' "$tmp/sum")
in_range "tagged: the split tier's total, at most its 30" 1 30 "$total"
say "tagged: 72 requests, 12 users of 4, tier 30 split 3: $total allowed"

# --- a reset drops every sub-counter ------------------------------------------
keys_of() {
  for _p in $P1 $P2 $P3; do
    timeout 10 redis-cli -h 127.0.0.1 -p "$_p" --scan --pattern "$1" </dev/null |
      sed "s/^/$_p /"
  done
}
n=$(keys_of '*hot.tier_exact|*' | grep -c '')
eq "reset: the 3 sub-counters of (tier=exact) are keys in Redis" 3 "$n"
n=$(keys_of '*hot.tier_exact|*' | awk '{ print $1 }' | sort -u | grep -c '')
eq "reset: ... on 3 masters" 3 "$n"
sv_use d1
http POST "$URL/admin/reset?domain=hot&tier=exact"
eq "reset: /admin/reset of the descriptor drops 3 states" '{"reset":3}' \
  "$(cat "$tmp/b")"
eq "reset: none left in Redis" 0 "$(keys_of '*hot.tier_exact|*' | grep -c '')"

for i in 1 2; do sv_stop "d$i"; done
lib_finish
