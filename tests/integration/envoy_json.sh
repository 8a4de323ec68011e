#!/bin/sh
# envoy_json.sh — envoyproxy/ratelimit's HTTP endpoints on the HTTP port,
# as its README and server_impl_test.go use them (POSIX sh; curl, python3,
# redis-server):
#
#   POST /json   a RateLimitRequest in proto3 JSON (either field spelling,
#                64-bit numbers as strings) answered with the
#                RateLimitResponse in proto3 JSON: 200 when OK, 429 when
#                OVER_LIMIT; a body that is no request: 400, "Bad
#                Request\n" in text/plain, why in Sluice-Error;
#   GET /healthcheck  "OK".
#
# In memory mode, then in exact fleet mode on a real Redis (the decision
# waits for Redis there, and the answer comes from its callback; a long
# --redis-timeout: a loaded machine must not turn it into a fallback).

. "$(dirname "$0")/serve_lib.sh"
. "$(dirname "$0")/fleet_lib.sh"
lib_init envoy_json

cat >"$tmp/rules.yaml" <<'YAML'
domain: dummy
descriptors:
  - key: one_per_day
    rate_limit: {unit: day, requests_per_unit: 1}
  - key: two_per_day
    value: something
    rate_limit: {unit: day, requests_per_unit: 2}
YAML

README='{"domain": "dummy", "descriptors": [{"entries": [{"key": "one_per_day", "value": "something"}]}, {"entries": [{"key": "two_per_day", "value": "something"}]}]}'

# bad NAME BODY ERE — 400, envoy's plain "Bad Request\n", why matching ERE.
bad() {
  post "$URL/json" "$2"
  want_code "$1" 400
  eq "$1: envoy's body" "Bad Request" "$(cat "$tmp/b")"
  want_hdr "$1: envoy's type" content-type "text/plain; charset=utf-8"
  want_hdr_like "$1: why" sluice-error "$3"
}

run() {
  mode=$1
  # Both limits are per day (UTC): not too close to its turn, checked for
  # each mode (the exact run starts after a daemon, Redis and another).
  clear_of_turn 86400 30
  post "$URL/json" "$README"
  want_code "$mode: README's request allowed" 200
  want_hdr "$mode: JSON" content-type application/json
  want_jv "$mode: overall" 'd["overallCode"]' '"OK"'
  want_jv "$mode: the day's limit" 'd["statuses"][0]["currentLimit"]' \
    '{"requestsPerUnit":1,"unit":"DAY"}'
  want_jv "$mode: nothing left of it (a default: left out)" \
    '"limitRemaining" in d["statuses"][0]' false
  want_jv "$mode: the other limit, one left" \
    '[d["statuses"][1]["currentLimit"], d["statuses"][1]["limitRemaining"]]' \
    '[{"requestsPerUnit":2,"unit":"DAY"},1]'
  want_jv "$mode: a duration as protojson writes it" \
    'd["statuses"][1]["durationUntilReset"][-1] == "s" and 0 < int(d["statuses"][1]["durationUntilReset"][:-1]) <= 86400' \
    true
  post "$URL/json" "$README"
  want_code "$mode: again: over the day's limit" 429
  want_jv "$mode: over limit, per descriptor" \
    '[d["overallCode"], d["statuses"][0]["code"], d["statuses"][1]["code"]]' \
    '["OVER_LIMIT","OVER_LIMIT","OK"]'
  # Charged together or not at all: the day's second is still there.
  post "$URL/json" '{"domain":"dummy","descriptors":[{"entries":[{"key":"two_per_day","value":"something"}]}],"hits_addend":1}'
  want_jv "$mode: all or nothing" '[d["overallCode"], d["statuses"][0].get("limitRemaining", 0)]' '["OK",0]'
  # The other spelling, a wrapper as a string, the descriptor's own limit.
  post "$URL/json" '{"domain":"dummy","descriptors":[{"entries":[{"key":"k","value":"v"}],"hitsAddend":"2","limit":{"requests_per_unit":3,"unit":"SECOND"}}]}'
  want_jv "$mode: an override, hits as a string" \
    '[d["overallCode"], d["statuses"][0]["currentLimit"], d["statuses"][0]["limitRemaining"]]' \
    '["OK",{"requestsPerUnit":3,"unit":"SECOND"},1]'
  post "$URL/json" '{"domain":"nowhere","descriptors":[{"entries":[{"key":"one_per_day"}]}]}'
  want_code "$mode: an unknown domain: OK" 200
  eq "$mode: ... with no limit" '{"overallCode":"OK","statuses":[{"code":"OK"}]}' \
    "$(cat "$tmp/b")"
  bad "$mode: no body" '' 'no body'
  bad "$mode: not JSON" '}' 'not JSON'
  bad "$mode: no descriptors" '{"domain": "foo"}' 'descriptor'
  bad "$mode: a field requests do not have" '{"domain":"dummy","quota":1}' \
    '^quota: .* has no such field'
  bad "$mode: where a value is wrong" \
    '{"domain":"dummy","descriptors":[{"entries":[{"key":"a"},{"key":7}]}]}' \
    '^descriptors\[0\]\.entries\[1\]\.key: not a string'
  bad "$mode: a number out of range" \
    '{"domain":"dummy","descriptors":[{"entries":[{"key":"a"}]}],"hits_addend":4294967296}' \
    'out of range'
  bad "$mode: an empty key" \
    '{"domain":"dummy","descriptors":[{"entries":[{"key":""}]}]}' 'empty key'
  get "$URL/healthcheck"
  want_code "$mode: healthcheck" 200
  eq "$mode: healthcheck says OK" OK "$(cat "$tmp/b")"
}

sv_start mem --grpc off --config "$tmp/rules.yaml" || lib_finish
run memory
sv_stop mem

RP=$(free_port)
if rs_start main "$RP"; then
  sv_start exact --grpc off --config "$tmp/rules.yaml" \
    --store "redis://127.0.0.1:$RP" --redis-timeout 5000 || lib_finish
  run exact
  in_range "exact: the decisions went to Redis" 1 1000 \
    "$(rcli "$RP" INFO commandstats | tr -d '\r' | tr ' ' '\n' |
      sed -n 's/^cmdstat_evalsha:calls=\([0-9]*\).*/\1/p')"
  # A client that leaves while its decision waits for a stalled Redis:
  # the answer that comes later has nobody to go to, and is dropped.
  rs_kill main STOP
  post "$URL/json" "$README" --max-time 1
  eq "exact: the client gave up on a stalled Redis" 000 "$code"
  rs_kill main CONT
  get "$URL/healthcheck"
  want_code "exact: the daemon lives on" 200
  sv_stop exact
fi
lib_finish
