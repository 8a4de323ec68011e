#!/bin/sh
# evict_flood.sh — a flood of unique keys at the memory cap leaves a key
# that is being limited limited (issue 15, finding 3), through the daemon
# (POSIX sh; redis-cli, redis-benchmark).
#
# A daemon at -m 8M; two keys used up to their limits (a config rule's
# sliding_log:100/h through SL.CHECK, an ad-hoc token_bucket:10/m through
# SL.THROTTLE); then two redis-benchmark floods of random keys (the same
# rule's other values, and `SL.THROTTLE key:__rand_int__ fixed_window:1/d`,
# the issue's), bounded in count and time, while both hot keys are probed.
# The hot keys may get no more than their limits allow (the token bucket
# its refill); the store must have evicted, and counted what it gave back.
# Last, a rule with evict_below: 1 is refused ("store full") rather than
# evict, and new ad-hoc policies still find room in the full store.

. "$(dirname "$0")/serve_lib.sh"
lib_tools="$lib_tools redis-cli redis-benchmark"
lib_init evict_flood

# rc ARGS... — redis-cli's raw reply, one line.
rc() {
  timeout 20 redis-cli -h 127.0.0.1 -p "$RESP" "$@" </dev/null 2>&1 |
    sed '/^$/d' | paste -sd' ' -
}

cat >"$tmp/rules.yaml" <<'EOF'
domain: api
descriptors:
  - key: user
    rate_limit: {policy: "sliding_log:100/h"}
EOF
sv_start flood -t 2 --http 127.0.0.1:0 -m 8M -c "$tmp/rules.yaml" ||
  lib_finish

# The hot keys, at their limits.
like "hot rule key used up" '^1 100 0 ' "$(rc SL.CHECK api user hot HITS 100)"
like "hot ad-hoc key used up" '^1 10 0 ' \
  "$(rc SL.THROTTLE hot token_bucket:10/m 10)"

# A rule with evict_below: 1, added by a reload now (creating a limiter
# takes memory, none is left once the store is full: finding 4), checked
# after the floods; and the ad-hoc flood's policy, made now for the same
# reason.
cat >>"$tmp/rules.yaml" <<'EOF'
  - key: strict
    rate_limit: {policy: "gcra:1000/s", evict_below: 1}
EOF
sv_signal flood HUP
waitfor 100 reloads_are 1
eq "the rule with evict_below is loaded" 0 $?
eq "the flood's ad-hoc policy" '1 1 0 ' \
  "$(rc SL.THROTTLE warmup fixed_window:1/d | cut -c1-6)"

# flood NAME N ARGS... — N random keys of one command in the background,
# at most 60 s; its exit status lands in $tmp/flood.NAME.rc.
flood() {
  _f=$1
  _n=$2
  shift 2
  (
    timeout 60 redis-benchmark -h 127.0.0.1 -p "$RESP" -n "$_n" -c 4 -P 16 \
      -r 100000000 --csv "$@" >"$tmp/flood.$_f" 2>&1
    echo $? >"$tmp/flood.$_f.rc"
  ) &
  lib_track $!
}

# probe_during NAME — probes both hot keys until flood NAME is done (at
# most 70 s), adding their allows to $rule_ok and $adhoc_ok.
rule_ok=0
adhoc_ok=0
probes=0
probe_during() {
  _t=$(now_ms)
  while [ ! -f "$tmp/flood.$1.rc" ] && [ $(($(now_ms) - _t)) -lt 70000 ]; do
    case $(rc SL.CHECK api user hot) in 1\ *) rule_ok=$((rule_ok + 1)) ;; esac
    case $(rc SL.THROTTLE hot token_bucket:10/m) in
    1\ *) adhoc_ok=$((adhoc_ok + 1)) ;;
    esac
    probes=$((probes + 1))
    sleep 0.02
  done
  eq "flood $1: redis-benchmark's exit status" 0 \
    "$(cat "$tmp/flood.$1.rc" 2>/dev/null)"
}

# The issue's two floods, one after the other: other values of the same
# rule (300,000: twice what 8 MB holds), then 600,000 ad-hoc keys.
t0=$(now_ms)
flood same 300000 SL.CHECK api user key:__rand_int__
probe_during same
# New ad-hoc policies in the store the sliding logs filled: their
# limiters have room that keys never take (before, none was made: every
# new one was refused until a restart, finding 4).
made=0
for n in $(seq 1 40); do
  case $(rc SL.THROTTLE after-flood fixed_window:$n/h) in 1\ *) made=$((made + 1)) ;; esac
done
eq "40 new ad-hoc policies in the full store" 40 "$made"
flood adhoc 600000 SL.THROTTLE key:__rand_int__ fixed_window:1/d
probe_during adhoc
elapsed=$(($(now_ms) - t0))
echo "evict_flood: $probes probes of each hot key in $elapsed ms;" \
  "allowed: $rule_ok (rule key), $adhoc_ok (ad-hoc key)"

# sliding_log:100/h used up less than an hour ago: nothing more. (A
# minute's window was too short: under the sanitizers on two cores the
# floods take longer than that, and the hot key's hits rightly expired,
# as did early flood keys', which then gave back no units.) The token
# bucket refills one every 6 s: at most that.
eq "hot rule key: no allow during the flood" 0 "$rule_ok"
in_range "hot ad-hoc key: only its refill ($((elapsed / 6000 + 1)) at most)" \
  0 $((elapsed / 6000 + 1)) "$adhoc_ok"

snap "$tmp/m"
ev=$(metric sluice_store_evictions_total "$tmp/m")
units=$(metric sluice_store_evicted_units_total "$tmp/m")
echo "evict_flood: evictions $ev, evicted units $units," \
  "bytes $(metric sluice_store_bytes "$tmp/m")"
in_range "the flood evicted" 100000 1200000 "$ev"
# Every flood key used 1 unit: had a hot key gone, it would add 10 or 100.
eq "evicted units: 1 per evicted flood key" "$ev" "$units"
in_range "the store stayed under its cap" 1 8388608 \
  "$(metric sluice_store_bytes "$tmp/m")"

# evict_below: 1 — a new key that could only take a used key's room is
# refused, not admitted at another key's expense.
like "evict_below: 1 refuses a new key at the cap" 'store full' \
  "$(rc SL.CHECK api strict newcomer)"
like "a rule without it still gets its new key in" '^1 100 99 ' \
  "$(rc SL.CHECK api user newcomer)"

sv_stop flood
lib_finish
