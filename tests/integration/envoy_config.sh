#!/bin/sh
# envoy_config.sh — envoyproxy/ratelimit's later config features and the
# finished HTTP contract, through a real daemon's /v1/check:
#   - share_threshold: every value a wildcard matches shares one counter
#     (envoy's test fixture, test_share_threshold.yaml); without it each
#     value has its own; '*' in the middle of a value;
#   - value_to_metric and detailed_metric names in /metrics, as envoy names
#     its stats; quota_mode; metadata in the check's JSON;
#   - --merge-domains (and MERGE_DOMAIN_CONFIG=true) merging one domain from
#     two files (envoy's merge fixtures), refused without it; check-config
#     likewise;
#   - --charging envoy beside the default: a denied request charges the
#     other rules, and hits above a limit answer 429, not 400;
#   - X-RateLimit-Used = limit - remaining on every X- answer; a 429's
#     "message" ("5 requests per hour. Retry after N seconds."), its
#     template (--deny-message) and '' for none;
#   - a rule that fails open (on_store_error: allow, Redis unreachable)
#     says so: X-RateLimit-Unchecked, "unchecked" in the JSON, and no
#     Remaining/Used/Reset made up.
# Every daemon on 127.0.0.1 port 0; windows of an hour (envoy's `unit:`,
# epoch-aligned), and the script starts a minute or more before one ends,
# so no count races a window's end.
. "$(dirname "$0")/serve_lib.sh"
lib_init envoy_config
# (~7 s in all, plain or under TSan: the counts fit well inside a minute.)
clear_of_turn 3600 60

FX=$(dirname "$0")/../fixtures/envoy

# check DOMAIN K V [K V ...] — POST /v1/check of one descriptor.
check() {
  _dom=$1
  shift
  _e=""
  while [ $# -ge 2 ]; do
    [ -n "$_e" ] && _e="$_e,"
    _e="$_e{\"key\":\"$1\",\"value\":\"$2\"}"
    shift 2
  done
  post "$URL/v1/check" "{\"domain\":\"$_dom\",\"descriptors\":[{\"entries\":[$_e]}]}"
}

# ---- 1. share_threshold, wildcards, metric names -------------------------

mkdir -p "$tmp/cfg"
cp "$FX/test_share_threshold.yaml" "$tmp/cfg/share.yaml"
cat >"$tmp/cfg/ext.yaml" <<'EOF'
domain: ext
descriptors:
  - key: files
    value: files/*
    share_threshold: true
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: files_no_share
    value: files_no_share/*
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: path
    value: /v1/orders/*/items
    share_threshold: true
    rate_limit: {unit: hour, requests_per_unit: 3}
  - key: route
    value_to_metric: true
    descriptors:
      - key: method
        rate_limit: {unit: hour, requests_per_unit: 100}
  - key: user
    detailed_metric: true
    rate_limit: {unit: hour, requests_per_unit: 5}
    metadata: {tier: gold, quota: {n: 5}}
  - key: q1
    quota_mode: true
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: q2
    quota_mode: true
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: two
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: five
    rate_limit: {unit: hour, requests_per_unit: 5}
EOF
"$SLUICE" check-config "$tmp/cfg" >"$tmp/cc" 2>&1
eq "check-config: envoy's share_threshold fixture and ext load" 0 $?
sv_start d -t 1 --config "$tmp/cfg" || lib_finish

for f in a.pdf b.csv c.txt d.md e.js; do
  check ext files "files/$f"
  check ext files "files/$f"
done
want_code "share_threshold: 10 requests over 5 values, all allowed" 200
want_jv "share_threshold: the shared counter is spent" \
  'd["statuses"][0]["limit_remaining"]' 0
check ext files "files/new.txt"
want_code "share_threshold: an 11th value is over the shared limit" 429
for i in 1 2 3 4 5 6 7 8 9 10; do check ext files_no_share files_no_share/a; done
check ext files_no_share files_no_share/a
want_code "no share_threshold: a value's own counter is spent" 429
check ext files_no_share files_no_share/b
want_code "no share_threshold: another value has its own" 200
for o in 1 2 3; do check ext path "/v1/orders/$o/items"; done
want_code "middle '*' with share_threshold: 3 orders, one counter" 200
check ext path "/v1/orders/4/items"
want_code "middle '*': the 4th order is over the shared 3/h" 429
check ext path "/v1/orders/4/other"
want_jv "middle '*': a value without the suffix matches nothing" \
  'd["statuses"][0]' '{"code":"OK"}'
check test-domain files files/x.txt
want_jv "envoy's fixture: files/* at 100/min" \
  '[d["statuses"][0]["current_limit"], d["statuses"][0]["rule"]]' \
  '[{"requests_per_unit":100,"unit":"MINUTE"},"test-domain.files_files/*"]'

check ext route api method GET
check ext user alice
want_jv "metadata: the limit's, in its status" 'd["statuses"][0]["metadata"]' \
  '{"tier":"gold","quota":{"n":5}}'
eq "value_to_metric: the route's value in the series name" 1 \
  "$(metric 'sluice_rule_decisions_total{domain="ext",rule="ext.route_api.method",result="allowed"}')"
eq "detailed_metric: the value in the series name" 1 \
  "$(metric 'sluice_rule_decisions_total{domain="ext",rule="ext.user_alice",result="allowed"}')"
eq "share_threshold: the series names the pattern" 10 \
  "$(metric 'sluice_rule_decisions_total{domain="ext",rule="ext.files_files/*",result="allowed"}')"

# quota_mode: one quota over alone denies nothing; all over denies.
post "$URL/v1/check" '{"domain":"ext","descriptors":[{"entries":[{"key":"q1","value":"x"}]},{"entries":[{"key":"q2","value":"x"}]}]}'
want_code "quota_mode: both quotas have room" 200
post "$URL/v1/check" '{"domain":"ext","descriptors":[{"entries":[{"key":"q1","value":"x"}]},{"entries":[{"key":"q2","value":"y"}]}]}'
want_code "quota_mode: q1 over, q2 has room: allowed" 200
want_jv "quota_mode: q1's own status says OVER_LIMIT" \
  'd["statuses"][0]["code"]' '"OVER_LIMIT"'
post "$URL/v1/check" '{"domain":"ext","descriptors":[{"entries":[{"key":"q1","value":"x"}]},{"entries":[{"key":"q2","value":"x"}]}]}'
want_code "quota_mode: every quota over: denied" 429

# ---- 2. the HTTP contract: Used, message ---------------------------------

check ext two a
want_hdr "X-RateLimit-Used: 1 of 2" x-ratelimit-used 1
want_hdr "X-RateLimit-Remaining beside it" x-ratelimit-remaining 1
check ext two a
want_hdr "X-RateLimit-Used: 2 of 2" x-ratelimit-used 2
check ext two a
want_code "over the limit: 429" 429
want_hdr "429: X-RateLimit-Used is the limit" x-ratelimit-used 2
ra=$(hdr retry-after)
want_jv "429: a human-readable message" 'd["message"]' \
  "\"2 requests per hour. Retry after $ra seconds.\""
check ext five a
want_jv "allowed: no message" '"message" in d' false
sv_stop d

sv_start m -t 1 --config "$tmp/cfg" \
  --deny-message '{rule}: {limit}/{window} ({policy}); wait {retry_after}s {x}' ||
  lib_finish
check ext two b
check ext two b
check ext two b
ra=$(hdr retry-after)
want_jv "--deny-message: the template, filled in" 'd["message"]' \
  "\"ext.two: 2/hour (fixed_window:2/h); wait ${ra}s {x}\""
sv_stop m
sv_start n -t 1 --config "$tmp/cfg" --deny-message '' || lib_finish
check ext two b
check ext two b
check ext two b
want_code "--deny-message '': still 429" 429
want_jv "--deny-message '': no message" '"message" in d' false
sv_stop n

# ---- 3. charging: sluice's default beside envoy's -------------------------

ab='{"domain":"ext","descriptors":[{"entries":[{"key":"two","value":"c"}]},{"entries":[{"key":"five","value":"c"}]}]}'
sv_start s -t 1 --config "$tmp/cfg" || lib_finish
post "$URL/v1/check" "$ab"
post "$URL/v1/check" "$ab"
post "$URL/v1/check" "$ab"
want_code "sluice charging: the third is denied" 429
want_jv "sluice charging: the denied request did not charge five" \
  'd["statuses"][1]["limit_remaining"]' 3
post "$URL/v1/check" '{"domain":"ext","hits_addend":6,"descriptors":[{"entries":[{"key":"five","value":"d"}]}]}'
want_code "sluice charging: hits above the limit: 400" 400
sv_stop s
sv_start e -t 1 --config "$tmp/cfg" --charging envoy || lib_finish
post "$URL/v1/check" "$ab"
post "$URL/v1/check" "$ab"
post "$URL/v1/check" "$ab"
want_code "envoy charging: the third is denied" 429
want_jv "envoy charging: the denied request charged five" \
  'd["statuses"][1]["limit_remaining"]' 2
post "$URL/v1/check" '{"domain":"ext","hits_addend":6,"descriptors":[{"entries":[{"key":"five","value":"d"}]}]}'
want_code "envoy charging: hits above the limit: 429, as OVER_LIMIT" 429
check ext five d
want_code "envoy charging: ... and the window is spent" 429
sv_stop e

# ---- 4. merged domains ----------------------------------------------------

mkdir -p "$tmp/merge"
cp "$FX/test_merge_domain_key1.yaml" "$tmp/merge/1.yaml"
cp "$FX/test_merge_domain_key2.yaml" "$tmp/merge/2.yaml"
"$SLUICE" check-config "$tmp/merge" >"$tmp/cc" 2>&1
eq "check-config: one domain in two files is refused" 1 $?
like "check-config: ... saying where" "2.yaml:[0-9]+:[0-9]+: duplicate domain 'test-domain'" \
  "$(cat "$tmp/cc")"
"$SLUICE" check-config --merge-domains "$tmp/merge" >"$tmp/cc" 2>&1
eq "check-config --merge-domains: merged" \
  "$tmp/merge: OK: 1 domain, 2 rules" "$(cat "$tmp/cc")"
MERGE_DOMAIN_CONFIG=true "$SLUICE" check-config "$tmp/merge" >"$tmp/cc" 2>&1
eq "MERGE_DOMAIN_CONFIG=true: merged" "$tmp/merge: OK: 1 domain, 2 rules" \
  "$(cat "$tmp/cc")"
sv_start g -t 1 --config "$tmp/merge" --merge-domains || lib_finish
check test-domain key1 value1
want_jv "--merge-domains: the first file's rule" \
  'd["statuses"][0]["current_limit"]["requests_per_unit"]' 10
check test-domain key2 value2
want_jv "--merge-domains: the second file's rule" \
  'd["statuses"][0]["current_limit"]["requests_per_unit"]' 20
sv_stop g

# ---- 5. failing open says so ----------------------------------------------

cat >"$tmp/open.yaml" <<'EOF'
domain: open
descriptors:
  - key: k
    on_store_error: allow
    rate_limit: {unit: hour, requests_per_unit: 5}
EOF
# Redis on a port nobody listens on: every decision fails over to
# on_store_error.
sv_start o -t 1 --store "redis://127.0.0.1:1" --redis-timeout 50 \
  --breaker-interval 100 --config "$tmp/open.yaml" || lib_finish
check open k a
want_code "fail open: allowed" 200
want_hdr "fail open: X-RateLimit-Unchecked" x-ratelimit-unchecked store_error
want_hdr "fail open: X-RateLimit-Limit still says the limit" x-ratelimit-limit 5
no_hdr "fail open: no made-up X-RateLimit-Remaining" x-ratelimit-remaining
no_hdr "fail open: no X-RateLimit-Used" x-ratelimit-used
no_hdr "fail open: no RateLimit item without figures" ratelimit
want_jv "fail open: the JSON says so" \
  '[d["unchecked"], d["statuses"][0]["unchecked"], "limit_remaining" in d["statuses"][0]]' \
  '[true,"store_error",false]'
sv_stop o

lib_finish
