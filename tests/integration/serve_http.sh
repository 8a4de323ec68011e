#!/bin/sh
# serve_http.sh — integration checks for the HTTP side of `sluice serve`
# (POSIX sh, curl; helpers in serve_lib.sh).
#
#   SLUICE=build/sluice sh tests/integration/serve_http.sh   (make integration)
#
# Real daemons on loopback ports the kernel picks; every endpoint, every
# error status, the rate limit headers' exact syntax, the options that shape
# answers (--deny-status, --headers, --admin-token, --max-body,
# --max-header-bytes), envoyproxy/ratelimit's configuration semantics (the
# examples of its README) and sluice's extensions, value references,
# metrics, and `sluice check-config`. Expected figures are derived from the
# policies' definitions (comments beside them), never recorded from the
# binary. Counting uses fresh keys, long periods, and for fixed windows
# (aligned to the epoch) runs that lie inside one window (in_window).
# Every failure prints "FAIL: <check>: <why>"; exit 1 if any.

. "$(dirname "$0")/serve_lib.sh"
lib_init serve_http

# ceil_s MS — milliseconds rounded up to seconds.
ceil_s() { echo $((($1 + 999) / 1000)); }

# ===========================================================================
# 1. The embedded default config: domain "default", key "key",
#    sliding_window:100/m, each value its own counter.
# ===========================================================================
sv_start d -t 2 -m 64M || lib_finish
D=$URL

get "$D/healthz"
want_code "GET /healthz" 200
eq "GET /healthz body" '{"status":"ok"}' "$(cat "$tmp/b")"
want_hdr_like "GET /healthz content type" content-type '^application/json'
http HEAD "$D/healthz"
want_code "HEAD /healthz" 200
get "$D/readyz"
want_code "GET /readyz" 200
eq "GET /readyz body" '{"status":"ok"}' "$(cat "$tmp/b")"

# /metrics: the Prometheus text format, every family the issue names.
get "$D/metrics"
want_code "GET /metrics" 200
want_hdr "GET /metrics content type" content-type \
  'text/plain; version=0.0.4; charset=utf-8'
for m in sluice_rule_decisions_total sluice_rule_near_limit_total \
  sluice_decisions_total sluice_decision_duration_seconds sluice_store_keys \
  sluice_store_bytes sluice_store_max_bytes sluice_store_expirations_total \
  sluice_store_evictions_total sluice_store_evicted_units_total \
  sluice_config_reloads_total \
  sluice_connections; do
  if grep -q "^# TYPE $m " "$tmp/b" && grep -q "^# HELP $m " "$tmp/b"; then
    pass
  else
    fail "/metrics: no # HELP and # TYPE for $m"
  fi
done
bad=$(grep -v '^#' "$tmp/b" |
  grep -Ev '^[a-zA-Z_:][a-zA-Z0-9_:]*(\{([a-zA-Z_][a-zA-Z0-9_]*="([^"\\]|\\.)*",?)*\})? -?[0-9][0-9.e+-]*$' |
  head -n 1)
eq "/metrics: every sample line is NAME{LABELS} VALUE" "" "$bad"
eq "/metrics: sluice_store_max_bytes is --max-memory 64M" 67108864 \
  "$(metric sluice_store_max_bytes)"
eq "/metrics: histogram +Inf bucket equals the count" \
  "$(metric sluice_decision_duration_seconds_count)" \
  "$(metric 'sluice_decision_duration_seconds_bucket{le="+Inf"}')"

# --- /v1/check on the default rule ------------------------------------------
# A sliding window counts across two windows, so the counting runs inside
# one minute. Each value of `key` has its own counter.
default_counts() {
  k=alice$1
  t0=$(now_ms)
  get "$D/v1/check?domain=default&key=$k"
  t1=$(now_ms)
  want_code "check: first request" 200
  want_jv "check: first request figures" \
    '[d["overall_code"], d["allowed"], len(d["statuses"]),
      d["statuses"][0]["code"], d["statuses"][0]["limit"],
      d["statuses"][0]["limit_remaining"], d["statuses"][0]["policy"],
      d["statuses"][0]["rule"], "retry_after_ms" in d["statuses"][0],
      "current_limit" in d["statuses"][0]]' \
    '["OK",true,1,"OK",100,99,"sliding_window:100/m","default.key",false,false]'
  want_jv "check: duration_until_reset is reset_ms in seconds, rounded up" \
    '(d["statuses"][0]["duration_until_reset"] ==
       "%ds" % -(-d["statuses"][0]["reset_ms"] // 1000))' true
  reset=$(jv 'd["statuses"][0]["reset_ms"]')
  want_hdr "check: RateLimit-Policy" RateLimit-Policy \
    '"default.key";q=100;w=60'
  want_hdr "check: RateLimit" RateLimit \
    "\"default.key\";r=99;t=$(ceil_s "$reset")"
  want_hdr "check: X-RateLimit-Limit" X-RateLimit-Limit 100
  want_hdr "check: X-RateLimit-Remaining" X-RateLimit-Remaining 99
  in_range "check: X-RateLimit-Reset is when the window resets (Unix s)" \
    $(((t0 + reset - 1) / 1000)) $(((t1 + reset + 999) / 1000)) \
    "$(hdr X-RateLimit-Reset)"
  no_hdr "check: no Retry-After when allowed" Retry-After
  want_hdr "check: Cache-Control" Cache-Control no-store
  want_hdr_like "check: content type" content-type '^application/json'

  get "$D/v1/check?domain=default&key=$k"
  want_jv "check: same value, same counter" \
    'd["statuses"][0]["limit_remaining"]' 98
  get "$D/v1/check?domain=default&key=bob$1"
  want_jv "check: another value, its own counter" \
    'd["statuses"][0]["limit_remaining"]' 99
  get "$D/v1/check?domain=default&key=$k&hits=5"
  want_jv "check: hits=5 takes 5" 'd["statuses"][0]["limit_remaining"]' 93
  get "$D/v1/check?domain=default&key=$k&hits=0"
  want_code "check: hits=0 peeks" 200
  want_jv "check: hits=0 takes nothing" \
    'd["statuses"][0]["limit_remaining"]' 93
  # 100 > 93 left: denied, and a denial consumes nothing.
  get "$D/v1/check?domain=default&key=$k&hits=100"
  want_code "check: hits=100 with 93 left is denied" 429
  want_jv "check: denial figures" \
    '[d["overall_code"], d["allowed"], d["statuses"][0]["code"],
      d["statuses"][0]["limit_remaining"],
      d["statuses"][0]["retry_after_ms"] > 0]' \
    '["OVER_LIMIT",false,"OVER_LIMIT",93,true]'
  ra=$(jv 'd["statuses"][0]["retry_after_ms"]')
  want_hdr "check: Retry-After is retry_after_ms in seconds, rounded up" \
    Retry-After "$(ceil_s "$ra")"
  want_hdr "check: X-RateLimit-Remaining on a denial" X-RateLimit-Remaining 93
  get "$D/v1/check?domain=default&key=$k"
  want_jv "check: the denied request consumed nothing" \
    'd["statuses"][0]["limit_remaining"]' 92
}
in_window 60 default_counts

get "$D/v1/check?domain=default&key=carol&hits=101"
want_error "check: hits above the limit can never pass: 400" 400

# --- /v1/throttle: ad-hoc policies ------------------------------------------
# gcra:1/h: one request per hour. The first takes the only unit: remaining 0,
# reset exactly 1 h (the theoretical arrival time moves one interval ahead).
t0=$(now_ms)
get "$D/v1/throttle?key=t1&policy=gcra:1/h"
t1=$(now_ms)
want_code "throttle gcra:1/h: first" 200
want_jv "throttle gcra:1/h: first figures" \
  '[d["allowed"], d["limit"], d["remaining"], d["reset_ms"],
    d["retry_after_ms"], d["delay_ms"], d["policy"]]' \
  '[true,1,0,3600000,0,0,"gcra:1/h"]'
want_hdr "throttle: RateLimit-Policy" RateLimit-Policy '"gcra:1/h";q=1;w=3600'
want_hdr "throttle: RateLimit" RateLimit '"gcra:1/h";r=0;t=3600'
want_hdr "throttle: X-RateLimit-Limit" X-RateLimit-Limit 1
want_hdr "throttle: X-RateLimit-Remaining" X-RateLimit-Remaining 0
in_range "throttle: X-RateLimit-Reset" $((t0 / 1000 + 3600)) \
  $((t1 / 1000 + 3601)) "$(hdr X-RateLimit-Reset)"
no_hdr "throttle: no Retry-After when allowed" Retry-After
get "$D/v1/throttle?key=t1&policy=gcra:1/h"
want_code "throttle gcra:1/h: second is denied" 429
want_jv "throttle: denial figures" \
  '[d["allowed"], d["limit"], d["remaining"],
    3500000 < d["retry_after_ms"] <= 3600000,
    d["retry_after_ms"] == d["reset_ms"]]' '[false,1,0,true,true]'
ra=$(jv 'd["retry_after_ms"]')
want_hdr "throttle: Retry-After on a denial" Retry-After "$(ceil_s "$ra")"
want_hdr "throttle: RateLimit on a denial" RateLimit \
  "\"gcra:1/h\";r=0;t=$(ceil_s "$ra")"
want_hdr "throttle: RateLimit-Policy on a denial" RateLimit-Policy \
  '"gcra:1/h";q=1;w=3600'
get "$D/v1/throttle?key=t1&policy=gcra:1/h&cost=0"
want_code "throttle: cost=0 peeks (200)" 200
want_jv "throttle: cost=0 takes nothing" '[d["remaining"], d["reset_ms"] > 0]' \
  '[0,true]'
# A key under two policies keeps two states.
get "$D/v1/throttle?key=t1&policy=gcra:2/h"
want_code "throttle: same key, another policy, another state" 200
want_jv "throttle: gcra:2/h on the same key" '[d["limit"], d["remaining"]]' \
  '[2,1]'
get "$D/v1/throttle?key=t2&policy=sliding_log:3/h&cost=3"
want_jv "throttle: cost=3 takes 3" '[d["allowed"], d["remaining"]]' '[true,0]'
get "$D/v1/throttle?key=t2&policy=sliding_log:3/h&cost=4"
want_error "throttle: cost above the limit can never pass: 400" 400
# Keep-alive: two answers on one connection (curl connects once).
eq "keep-alive: a 200 leaves the connection open" '1 0 ' \
  "$(curl -s -o /dev/null -o /dev/null -w '%{num_connects} ' \
    "$D/v1/throttle?key=ka0&policy=gcra:5/h" "$D/healthz")"
# ... and so do a 429 and a 404 (each 429 to a forward-auth proxy would
# otherwise cost it a new connection).
get "$D/v1/throttle?key=ka1&policy=gcra:1/h"
eq "keep-alive: a 429 leaves the connection open" '1 0 ' \
  "$(curl -s -o /dev/null -o /dev/null -w '%{num_connects} ' \
    "$D/v1/throttle?key=ka1&policy=gcra:1/h" "$D/healthz")"
eq "keep-alive: a 404 leaves the connection open" '1 0 ' \
  "$(curl -s -o /dev/null -o /dev/null -w '%{num_connects} ' \
    "$D/nope" "$D/healthz")"
# leaky_bucket:1/h:burst=3 shapes: the second request waits for the first,
# one interval (1 h, less the few ms between them).
get "$D/v1/throttle?key=t3&policy=leaky_bucket:1/h:burst=3"
want_jv "throttle: leaky bucket, first: no delay" 'd["delay_ms"]' 0
get "$D/v1/throttle?key=t3&policy=leaky_bucket:1/h:burst=3"
want_jv "throttle: leaky bucket, second: queued behind the first" \
  '3590000 <= d["delay_ms"] <= 3600000' true

# --- errors -----------------------------------------------------------------
get "$D/nope"
want_error "unknown endpoint: 404" 404
get "$D/v1/checks?domain=default&key=a"
want_error "unknown endpoint /v1/checks: 404" 404
get "$D/"
want_error "unknown endpoint /: 404" 404
get "$D/v1/check?domain=nosuch&key=a"
want_error "unknown domain: 404" 404
body_has "unknown domain: names it" nosuch
post "$D/v1/check" '{"domain":"nosuch","descriptors":[{"entries":[{"key":"key","value":"a"}]}]}'
want_error "unknown domain (POST): 404" 404

# method_not_allowed METHOD PATH ALLOW
method_not_allowed() {
  http "$1" "$D$2"
  want_error "$1 $2: 405" 405
  want_hdr "$1 $2: Allow" Allow "$3"
}
method_not_allowed PUT /v1/check 'GET, POST'
method_not_allowed DELETE /v1/check 'GET, POST'
method_not_allowed POST '/v1/throttle?key=a&policy=gcra:1/h' GET
method_not_allowed POST /metrics GET
method_not_allowed POST /healthz GET
method_not_allowed PUT /readyz GET
method_not_allowed GET '/admin/reset?key=a' POST
method_not_allowed DELETE '/admin/inspect?key=a&policy=gcra:1/h' 'GET, POST'

# bad_get NAME QUERY-PATH — a 400 with a JSON error.
bad_get() {
  get "$D$2"
  want_error "$1: 400" 400
}
bad_get "check without domain" '/v1/check?key=a'
bad_get "check with an empty domain" '/v1/check?domain=&key=a'
bad_get "check without entries" '/v1/check?domain=default'
bad_get "check with bad percent-encoding" '/v1/check?domain=default&key=%zz'
bad_get "check with a truncated percent-encoding" '/v1/check?domain=default&key=a%2'
bad_get "check with hits=abc" '/v1/check?domain=default&key=a&hits=abc'
bad_get "check with hits=-1" '/v1/check?domain=default&key=a&hits=-1'
bad_get "check with hits=1.5" '/v1/check?domain=default&key=a&hits=1.5'
bad_get "check with an empty key" '/v1/check?domain=default&=a'
q=domain=default
i=0
while [ $i -lt 17 ]; do q="$q&k$i=v"; i=$((i + 1)); done
bad_get "check with 17 entries" "/v1/check?$q"
while [ $i -lt 40 ]; do q="$q&k$i=v"; i=$((i + 1)); done
bad_get "check with 41 query parameters" "/v1/check?$q"
long=$(awk 'BEGIN { while (n++ < 1025) printf "k" }')
bad_get "check with a 1025-byte value" "/v1/check?domain=default&key=$long"
bad_get "check with a 1025-byte key" "/v1/check?domain=default&$long=v"
bad_get "throttle without policy" '/v1/throttle?key=a'
bad_get "throttle without key" '/v1/throttle?policy=gcra:1/h'
bad_get "throttle with an unknown algorithm" '/v1/throttle?key=a&policy=bogus:1/h'
bad_get "throttle with limit 0" '/v1/throttle?key=a&policy=gcra:0/h'
bad_get "throttle with a bad unit" '/v1/throttle?key=a&policy=gcra:1/x'
bad_get "throttle with burst on a window" '/v1/throttle?key=a&policy=fixed_window:1/h:burst=2'
bad_get "throttle with cost=x" '/v1/throttle?key=a&policy=gcra:1/h&cost=x'
bad_get "throttle with cost=-1" '/v1/throttle?key=a&policy=gcra:1/h&cost=-1'
bad_get "throttle with a 1025-byte key" "/v1/throttle?key=$long&policy=gcra:1/h"
get "$D/v1/throttle?key=$(awk 'BEGIN { while (n++ < 1024) printf "k" }')&policy=gcra:1/h"
want_code "throttle with a 1024-byte key (the most)" 200
get "$D/v1/throttle?key=a&policy=bogus:1/h"
body_has "bad policy: the error names the policy" bogus

# bad_post NAME JSON — a 400 with a JSON error.
bad_post() {
  post "$D/v1/check" "$2"
  want_error "POST $1: 400" 400
}
E1='{"entries":[{"key":"key","value":"a"}]}'
bad_post "malformed JSON" '{"domain":"default",'
bad_post "not an object" '["default"]'
bad_post "empty body" ''
bad_post "without domain" "{\"descriptors\":[$E1]}"
bad_post "with a numeric domain" "{\"domain\":5,\"descriptors\":[$E1]}"
bad_post "with an empty domain" "{\"domain\":\"\",\"descriptors\":[$E1]}"
bad_post "without descriptors" '{"domain":"default"}'
bad_post "with no descriptors" '{"domain":"default","descriptors":[]}'
bad_post "with descriptors not a list" "{\"domain\":\"default\",\"descriptors\":$E1}"
many=$E1
i=1
while [ $i -lt 17 ]; do many="$many,$E1"; i=$((i + 1)); done
bad_post "with 17 descriptors" "{\"domain\":\"default\",\"descriptors\":[$many]}"
bad_post "with no entries" '{"domain":"default","descriptors":[{"entries":[]}]}'
bad_post "with an entry without key" '{"domain":"default","descriptors":[{"entries":[{"value":"a"}]}]}'
bad_post "with a numeric value" '{"domain":"default","descriptors":[{"entries":[{"key":"key","value":5}]}]}'
bad_post "with hits_addend -1" "{\"domain\":\"default\",\"hits_addend\":-1,\"descriptors\":[$E1]}"
bad_post "with hits_addend \"x\"" "{\"domain\":\"default\",\"hits_addend\":\"x\",\"descriptors\":[$E1]}"
bad_post "with a descriptor's hits_addend 1.5" '{"domain":"default","descriptors":[{"entries":[{"key":"key","value":"a"}],"hits_addend":1.5}]}'
bad_post "with a duplicate field" "{\"domain\":\"default\",\"domain\":\"x\",\"descriptors\":[$E1]}"
bad_post "with a 1025-byte value" "{\"domain\":\"default\",\"descriptors\":[{\"entries\":[{\"key\":\"key\",\"value\":\"$long\"}]}]}"

# --- POST: Envoy's RateLimitRequest shape -----------------------------------
post "$D/v1/check" '{"domain":"default","descriptors":[{"entries":[{"key":"key","value":"p1"}]}]}'
want_code "POST check" 200
want_jv "POST check figures" \
  '[d["overall_code"], d["statuses"][0]["limit"], d["statuses"][0]["limit_remaining"]]' \
  '["OK",100,99]'
want_hdr "POST check: RateLimit-Policy" RateLimit-Policy \
  '"default.key";q=100;w=60'
# Protobuf's JSON spellings of hits_addend: {"value": n}, a string, camelCase.
post "$D/v1/check" '{"domain":"default","hits_addend":{"value":3},"descriptors":[{"entries":[{"key":"key","value":"p2"}]}]}'
want_jv "POST hits_addend {\"value\": 3}" 'd["statuses"][0]["limit_remaining"]' 97
post "$D/v1/check" '{"domain":"default","hitsAddend":"4","descriptors":[{"entries":[{"key":"key","value":"p3"}]}]}'
want_jv "POST hitsAddend \"4\"" 'd["statuses"][0]["limit_remaining"]' 96

# --- too large -------------------------------------------------------------
sv_start lim -t 1 --max-body 100 --max-header-bytes 600 || lib_finish
L=$URL
# A body of --max-body + 1 bytes (the handler's own check).
body=$(awk 'BEGIN { printf "{\"domain\":\"default\",\"pad\":\""
  for (i = 0; i < 72; i++) printf "x"; printf "\"}" }')
eq "the 413 body is 101 bytes" 101 "${#body}"
post "$L/v1/check" "$body"
want_error "POST a body of --max-body + 1 bytes: 413" 413
post "$L/v1/check" '{"domain":"default","descriptors":[{"entries":[{"key":"key","value":"v"}]}]}'
want_code "POST a body under --max-body 100" 200
# Far over --max-body (up to 1 MiB, h2o's own bound): sluice's JSON 413 too.
head -c 200000 /dev/zero | tr '\0' a >"$tmp/big.body"
http POST "$L/v1/check" --data-binary "@$tmp/big.body"
want_error "POST 200 KB under --max-body 100: 413" 413
get "$L/v1/check?domain=default&key=a" -H "X-Pad: $(awk 'BEGIN { while (n++ < 700) printf "y" }')"
want_error "headers over --max-header-bytes: 431" 431
get "$L/v1/check?domain=default&key=a" -H "X-Pad: $(awk 'BEGIN { while (n++ < 200) printf "y" }')"
want_code "headers under --max-header-bytes" 200
get "$D/v1/check?domain=default&key=a" -H "X-Pad: $(awk 'BEGIN { while (n++ < 9000) printf "y" }')"
want_error "headers over the default 8K: 431" 431
sv_stop lim

# ===========================================================================
# 2. Options that shape the answers: --deny-status, --headers, admin token.
# ===========================================================================
sv_start x -t 1 --headers x || lib_finish
X=$URL
sv_start ietf -t 1 --headers ietf || lib_finish
I=$URL
sv_start none -t 1 --headers none || lib_finish
N=$URL
sv_start f -t 1 --deny-status 403 --admin-token s3cret || lib_finish
F=$URL

get "$X/v1/throttle?key=h&policy=gcra:1/h"
want_hdr "--headers x: X-RateLimit-Limit" X-RateLimit-Limit 1
want_hdr "--headers x: X-RateLimit-Remaining" X-RateLimit-Remaining 0
want_hdr_like "--headers x: X-RateLimit-Reset" X-RateLimit-Reset '^[0-9]{10}$'
no_hdr "--headers x: no RateLimit" RateLimit
no_hdr "--headers x: no RateLimit-Policy" RateLimit-Policy
get "$X/v1/throttle?key=h&policy=gcra:1/h"
want_code "--headers x: denied" 429
want_hdr_like "--headers x: Retry-After" Retry-After '^[0-9]+$'
no_hdr "--headers x: no RateLimit on a denial" RateLimit

get "$I/v1/throttle?key=h&policy=gcra:1/h"
want_hdr "--headers ietf: RateLimit" RateLimit '"gcra:1/h";r=0;t=3600'
want_hdr "--headers ietf: RateLimit-Policy" RateLimit-Policy '"gcra:1/h";q=1;w=3600'
no_hdr "--headers ietf: no X-RateLimit-Limit" X-RateLimit-Limit
no_hdr "--headers ietf: no X-RateLimit-Remaining" X-RateLimit-Remaining
no_hdr "--headers ietf: no X-RateLimit-Reset" X-RateLimit-Reset
get "$I/v1/throttle?key=h&policy=gcra:1/h"
want_code "--headers ietf: denied" 429
want_hdr_like "--headers ietf: Retry-After" Retry-After '^[0-9]+$'

get "$N/v1/throttle?key=h&policy=gcra:1/h"
want_code "--headers none: allowed" 200
for h in RateLimit RateLimit-Policy X-RateLimit-Limit X-RateLimit-Remaining \
  X-RateLimit-Reset; do
  no_hdr "--headers none: no $h" "$h"
done
get "$N/v1/throttle?key=h&policy=gcra:1/h"
want_code "--headers none: denied" 429
no_hdr "--headers none: no RateLimit on a denial" RateLimit
want_hdr "--headers none: a denial still has Retry-After (plain HTTP)" \
  Retry-After 3600

get "$F/v1/throttle?key=h&policy=gcra:1/h"
want_code "--deny-status 403: allowed is 200" 200
get "$F/v1/throttle?key=h&policy=gcra:1/h"
want_code "--deny-status 403: denied is 403" 403
want_jv "--deny-status 403: the decision body" '[d["allowed"], d["remaining"]]' \
  '[false,0]'
want_hdr_like "--deny-status 403: Retry-After" Retry-After '^[0-9]+$'
want_hdr "--deny-status 403: RateLimit" RateLimit \
  "\"gcra:1/h\";r=0;t=$(ceil_s "$(jv 'd["reset_ms"]')")"
get "$F/v1/check?domain=default&key=k&hits=100"
get "$F/v1/check?domain=default&key=k"
want_code "--deny-status 403: /v1/check denial" 403
want_jv "--deny-status 403: /v1/check body" 'd["overall_code"]' '"OVER_LIMIT"'

# --- admin endpoints ---------------------------------------------------------
# Without --admin-token: loopback clients may use them.
get "$D/v1/throttle?key=adm&policy=gcra:1/h"
get "$D/v1/throttle?key=adm&policy=gcra:1/h"
want_code "admin: the key is exhausted" 429
get "$D/admin/inspect?key=adm&policy=gcra:1/h"
want_code "admin inspect (loopback, no token): 200 even when exhausted" 200
want_jv "admin inspect: the figures, nothing charged" \
  '[d["limit"], d["remaining"], d["reset_ms"] > 0]' '[1,0,true]'
http POST "$D/admin/reset?key=adm"
want_code "admin reset (loopback, no token)" 200
eq "admin reset: one state dropped" '{"reset":1}' "$(cat "$tmp/b")"
get "$D/v1/throttle?key=adm&policy=gcra:1/h"
want_code "admin reset: the key starts afresh" 200
http POST "$D/admin/reset?key=never-seen"
eq "admin reset of an unknown key" '{"reset":0}' "$(cat "$tmp/b")"
http POST "$D/admin/reset"
want_error "admin reset without key= or domain=: 400" 400
# ?key=K&policy=SPEC: only that policy's state.
get "$D/v1/throttle?key=adm2&policy=gcra:1/h"
get "$D/v1/throttle?key=adm2&policy=gcra:2/h"
http POST "$D/admin/reset?key=adm2&policy=gcra:1/h"
eq "admin reset of a key under one policy" '{"reset":1}' "$(cat "$tmp/b")"
get "$D/admin/inspect?key=adm2&policy=gcra:2/h"
want_jv "admin reset under one policy: the other keeps its count" \
  'd["remaining"]' 1
http POST "$D/admin/reset?key=adm2&policy=bogus"
want_error "admin reset under a bad policy: 400" 400
# ?domain=D&K=V forgets a config descriptor's state under every rule it
# matches.
get "$D/v1/check?domain=default&key=rst"
get "$D/v1/check?domain=default&key=rst"
want_jv "admin reset by descriptor: two taken" \
  'd["statuses"][0]["limit_remaining"]' 98
http POST "$D/admin/reset?domain=default&key=rst"
want_code "admin reset by descriptor" 200
eq "admin reset by descriptor: one state dropped" '{"reset":1}' "$(cat "$tmp/b")"
get "$D/admin/inspect?domain=default&key=rst"
want_jv "admin reset by descriptor: the key starts afresh" \
  'd["statuses"][0]["limit_remaining"]' 100
http POST "$D/admin/reset?domain=nosuch&key=rst"
want_error "admin reset by descriptor, unknown domain: 404" 404
http POST "$D/admin/reset?domain=default"
want_error "admin reset by descriptor without entries: 400" 400
# No query, a JSON body (/v1/check's shape): its descriptors.
get "$D/v1/check?domain=default&key=rj1"
get "$D/v1/check?domain=default&key=rj2"
post "$D/admin/reset" '{"domain":"default","descriptors":[{"entries":[{"key":"key","value":"rj1"}]},{"entries":[{"key":"key","value":"rj2"}]},{"entries":[{"key":"key","value":"rj3"}]}]}'
want_code "admin reset by a JSON body" 200
eq "admin reset by a JSON body: two states dropped" '{"reset":2}' "$(cat "$tmp/b")"
get "$D/admin/inspect?domain=default&key=rj2"
want_jv "admin reset by a JSON body: the key starts afresh" \
  'd["statuses"][0]["limit_remaining"]' 100
post "$D/admin/reset" '{"domain":"default","descriptors":[]}'
want_error "admin reset by a JSON body without descriptors: 400" 400
post "$D/admin/reset" '{"domain":"nosuch","descriptors":[{"entries":[{"key":"key","value":"x"}]}]}'
want_error "admin reset by a JSON body, unknown domain: 404" 404
# inspect charges nothing: /v1/check and POST forms too.
get "$D/admin/inspect?domain=default&key=insp"
want_jv "admin inspect (GET check): a fresh key" \
  'd["statuses"][0]["limit_remaining"]' 100
post "$D/admin/inspect" '{"domain":"default","descriptors":[{"entries":[{"key":"key","value":"insp"}]}]}'
want_code "admin inspect (POST check)" 200
want_jv "admin inspect (POST check): a fresh key" \
  'd["statuses"][0]["limit_remaining"]' 100
get "$D/v1/check?domain=default&key=insp"
want_jv "admin inspect charged nothing" 'd["statuses"][0]["limit_remaining"]' 99

# With --admin-token: a bearer token, 401 otherwise.
http POST "$F/admin/reset?key=h"
want_error "admin with a token configured, none given: 401" 401
want_hdr "admin 401: WWW-Authenticate" WWW-Authenticate 'Bearer realm="sluice"'
http POST "$F/admin/reset?key=h" -H 'Authorization: Bearer wrong'
want_error "admin with a wrong token: 401" 401
http POST "$F/admin/reset?key=h" -H 'Authorization: Bearer s3cret2'
want_error "admin with a longer wrong token: 401" 401
http POST "$F/admin/reset?key=h" -H 'Authorization: Basic s3cret'
want_error "admin with a Basic credential: 401" 401
get "$F/admin/inspect?key=h&policy=gcra:1/h"
want_error "admin inspect without the token: 401" 401
get "$F/admin/inspect?key=h&policy=gcra:1/h" -H 'Authorization: Bearer s3cret'
want_code "admin inspect with the token" 200
want_jv "admin inspect with the token: figures" '[d["limit"], d["remaining"]]' \
  '[1,0]'
http POST "$F/admin/reset?key=h" -H 'Authorization: Bearer s3cret'
want_code "admin reset with the token" 200
eq "admin reset with the token: one state dropped" '{"reset":1}' \
  "$(cat "$tmp/b")"
get "$F/v1/throttle?key=h&policy=gcra:1/h"
want_code "admin reset with the token: the key starts afresh" 200

sv_stop x
sv_stop ietf
sv_stop none
sv_stop f

# ===========================================================================
# 3. envoyproxy/ratelimit configs: its README's examples (units of
#    "second" turned into hours or days where requests are counted, so
#    counting never races a window), and sluice's extensions.
# ===========================================================================
mkdir -p "$tmp/conf"
fx=$(dirname "$0")/../fixtures
# README examples 2 (nested descriptors; a key without value = a counter
# per value), 5 (unlimited) and 8 (detailed_metric) as they are: their
# windows are a day or a minute.
cp "$fx/envoy/example2.yaml" "$tmp/conf/messaging.yaml"
cp "$fx/envoy/example5.yaml" "$tmp/conf/internal.yaml"
cp "$fx/envoy/example8.yaml" "$tmp/conf/example8.yaml"
# Examples 3, 4, 6, 7 and 9 with longer windows, sluice's extensions
# (ext.yaml) and value references (refs.yaml).
cp "$fx"/served/*.yaml "$tmp/conf/"

"$SLUICE" check-config "$tmp/conf" >"$tmp/cc.out" 2>"$tmp/cc.err"
eq "check-config on the test configs: exit status" 0 $?
eq "check-config on the test configs: summary" \
  "$tmp/conf: OK: 10 domains, 27 rules" "$(cat "$tmp/cc.out")"

sv_start e -t 2 --config "$tmp/conf" || lib_finish
E=$URL

# status_of I FIELDS — the JSON list of FIELDS of statuses[I].
st() { jv "[d[\"statuses\"][$1].get(f) for f in $2]"; }
FIG='["code","limit","limit_remaining","rule"]'

# --- example 2: messaging (fixed windows of a day) ---------------------------
messaging() {
  n=206111$1
  two="{\"entries\":[{\"key\":\"message_type\",\"value\":\"marketing\"},{\"key\":\"to_number\",\"value\":\"$n\"}]}"
  one="{\"entries\":[{\"key\":\"to_number\",\"value\":\"$n\"}]}"
  t0=$(now_ms)
  post "$E/v1/check" "{\"domain\":\"messaging\",\"descriptors\":[$two,$one]}"
  t1=$(now_ms)
  want_code "messaging: both descriptors" 200
  eq "messaging: nested marketing rule" \
    '["OK",5,4,"messaging.message_type_marketing.to_number"]' "$(st 0 "$FIG")"
  eq "messaging: per-number rule" '["OK",100,99,"messaging.to_number"]' \
    "$(st 1 "$FIG")"
  want_jv "messaging: fixed window by default, envoy's unit in current_limit" \
    '[s["policy"] for s in d["statuses"]] + [d["statuses"][0]["current_limit"]]' \
    '["fixed_window:5/d","fixed_window:100/d",{"requests_per_unit":5,"unit":"DAY"}]'
  xr=$(hdr X-RateLimit-Reset)
  eq "messaging: the day window ends at a multiple of 86400 s" 0 $((xr % 86400))
  in_range "messaging: ... the next one" $((t0 / 1000)) $((t1 / 1000 + 86400)) "$xr"
  want_hdr "messaging: RateLimit-Policy lists both, the tightest first" \
    RateLimit-Policy \
    '"messaging.message_type_marketing.to_number";q=5;w=86400, "messaging.to_number";q=100;w=86400'
  # hits_addend 3 for the request, 10 for the second descriptor.
  post "$E/v1/check" "{\"domain\":\"messaging\",\"hits_addend\":3,\"descriptors\":[$two,{\"entries\":[{\"key\":\"to_number\",\"value\":\"$n\"}],\"hits_addend\":10}]}"
  want_code "messaging: hits_addend" 200
  eq "messaging: request hits_addend 3" \
    '["OK",5,1,"messaging.message_type_marketing.to_number"]' "$(st 0 "$FIG")"
  eq "messaging: descriptor hits_addend 10" \
    '["OK",100,89,"messaging.to_number"]' "$(st 1 "$FIG")"
  # Envoy: a request hits_addend of 0 means 1; a descriptor's 0 is a peek.
  post "$E/v1/check" "{\"domain\":\"messaging\",\"hits_addend\":0,\"descriptors\":[$two,{\"entries\":[{\"key\":\"to_number\",\"value\":\"$n\"}],\"hits_addend\":0}]}"
  eq "messaging: request hits_addend 0 counts as 1" \
    '["OK",5,0,"messaging.message_type_marketing.to_number"]' "$(st 0 "$FIG")"
  eq "messaging: descriptor hits_addend 0 peeks" \
    '["OK",100,89,"messaging.to_number"]' "$(st 1 "$FIG")"
  # The marketing rule is exhausted: the request is denied as a whole and
  # charges neither rule.
  post "$E/v1/check" "{\"domain\":\"messaging\",\"descriptors\":[$two,$one]}"
  want_code "messaging: over the marketing limit" 429
  want_jv "messaging: overall OVER_LIMIT" 'd["overall_code"]' '"OVER_LIMIT"'
  eq "messaging: the marketing status is OVER_LIMIT" \
    '["OVER_LIMIT",5,0,"messaging.message_type_marketing.to_number"]' \
    "$(st 0 "$FIG")"
  eq "messaging: the number's status is OK and uncharged" \
    '["OK",100,89,"messaging.to_number"]' "$(st 1 "$FIG")"
  want_jv "messaging: retry_after_ms only on the denied status" \
    '["retry_after_ms" in s for s in d["statuses"]]' '[true,false]'
  want_hdr_like "messaging: Retry-After" Retry-After '^[0-9]+$'
  get "$E/v1/check?domain=messaging&to_number=$n"
  eq "messaging: the number alone shares its counter" \
    '["OK",100,88,"messaging.to_number"]' "$(st 0 "$FIG")"
  get "$E/v1/check?domain=messaging&message_type=marketing&to_number=${n}9"
  eq "messaging: another number, its own marketing counter" \
    '["OK",5,4,"messaging.message_type_marketing.to_number"]' "$(st 0 "$FIG")"
}
in_window 86400 messaging

# A rule that allowed a request another rule denied is not counted as
# denied (messaging.to_number had 89 left): /metrics blames the rule that
# was over, as envoyproxy/ratelimit's over_limit does.
eq "metrics: a rule that allowed is not counted as denied" 0 \
  "$(metric 'sluice_rule_decisions_total{domain="messaging",rule="messaging.to_number",result="denied"}')"

# --- example 3: exact value beats key only; 0 blocks -------------------------
edge() {
  get "$E/v1/check?domain=edge_proxy_per_ip&remote_address=50.0.0.$1"
  eq "edge: any address, 10 an hour" \
    '["OK",10,9,"edge_proxy_per_ip.remote_address"]' "$(st 0 "$FIG")"
  get "$E/v1/check?domain=edge_proxy_per_ip&remote_address=50.0.0.$1"
  eq "edge: same address, same counter" \
    '["OK",10,8,"edge_proxy_per_ip.remote_address"]' "$(st 0 "$FIG")"
  get "$E/v1/check?domain=edge_proxy_per_ip&remote_address=50.0.1.$1"
  eq "edge: another address, its own counter" \
    '["OK",10,9,"edge_proxy_per_ip.remote_address"]' "$(st 0 "$FIG")"
}
in_window 3600 edge
for i in 1 2; do
  get "$E/v1/check?domain=edge_proxy_per_ip&remote_address=50.0.0.5"
  want_code "edge: the blocked address is denied ($i)" 429
  eq "edge: the blocked address's rule ($i)" \
    '["OVER_LIMIT",0,0,"edge_proxy_per_ip.remote_address_50.0.0.5"]' \
    "$(st 0 "$FIG")"
done
want_jv "edge: blocked: never (retry_after_ms -1), policy blocked" \
  '[d["statuses"][0]["retry_after_ms"], d["statuses"][0]["policy"]]' \
  '[-1,"blocked"]'
no_hdr "edge: blocked: no Retry-After (never)" Retry-After
want_hdr "edge: blocked: RateLimit-Policy has no window" RateLimit-Policy \
  '"edge_proxy_per_ip.remote_address_50.0.0.5";q=0'

# --- example 4: depth mismatch = no limit ------------------------------------
get "$E/v1/check?domain=example4&key=value&subkey=subvalue"
want_code "example4: two entries vs a one-level rule: allowed" 200
want_jv "example4: no limit applies" 'd["statuses"]' '[{"code":"OK"}]'
no_hdr "example4: no limit, no RateLimit" RateLimit
no_hdr "example4: no limit, no X-RateLimit-Limit" X-RateLimit-Limit
get "$E/v1/check?domain=example4&nested=value&subkey=subvalue"
eq "example4: two entries vs a two-level rule" \
  '["OK",300,299,"example4.nested_value.subkey"]' "$(st 0 "$FIG")"
get "$E/v1/check?domain=example4&nested=value"
want_jv "example4: one entry vs a two-level rule: no limit" 'd["statuses"]' \
  '[{"code":"OK"}]'
get "$E/v1/check?domain=example4&nested=other&subkey=subvalue"
want_jv "example4: no matching value: no limit" 'd["statuses"]' '[{"code":"OK"}]'

# --- example 5: unlimited ----------------------------------------------------
get "$E/v1/check?domain=internal&ldap=x"
want_code "unlimited: allowed" 200
want_jv "unlimited: OK with LimitRemaining = MaxUint32" \
  '[d["statuses"][0][f] for f in ("code", "unlimited", "limit_remaining", "rule")]' \
  '["OK",true,4294967295,"internal.ldap"]'
no_hdr "unlimited: no RateLimit header" RateLimit
get "$E/v1/check?domain=internal&azure=x"
eq "unlimited: the other key is limited" '["OK",100,99,"internal.azure"]' \
  "$(st 0 "$FIG")"

# --- example 6: shadow mode ---------------------------------------------------
shadow() {
  for i in 1 2 3; do
    get "$E/v1/check?domain=example6&service=s$1&user=user-a"
    want_code "shadow: user-a request $i is allowed" 200
  done
  want_jv "shadow: the third is over the limit, reported, not enforced" \
    '[d["overall_code"], d["statuses"][0]["code"], d["statuses"][0]["shadow"],
      d["statuses"][0]["limit_remaining"], "retry_after_ms" in d["statuses"][0]]' \
    '["OK","OK",true,0,true]'
  for i in 1 2; do
    get "$E/v1/check?domain=example6&service=s$1&user=user-b"
    want_code "shadow: user-b request $i is allowed" 200
  done
  get "$E/v1/check?domain=example6&service=s$1&user=user-b"
  want_code "shadow: user-b's third is denied" 429
}
in_window 3600 shadow
a='sluice_rule_decisions_total{domain="example6",rule="example6.service.user_user-a"'
eq "shadow: /metrics counts two allowed" 2 "$(metric "$a,result=\"allowed\"}")"
eq "shadow: /metrics counts one shadow_denied" 1 \
  "$(metric "$a,result=\"shadow_denied\"}")"
eq "shadow: /metrics counts no denied" 0 "$(metric "$a,result=\"denied\"}")"
b='sluice_rule_decisions_total{domain="example6",rule="example6.service.user_user-b"'
eq "shadow: user-b denied once" 1 "$(metric "$b,result=\"denied\"}")"

# --- example 7: replaces ------------------------------------------------------
replaces() {
  d1="{\"entries\":[{\"key\":\"key_1\",\"value\":\"value_1\"},{\"key\":\"user\",\"value\":\"bkthomps$1\"}]}"
  d2="{\"entries\":[{\"key\":\"key_2\",\"value\":\"value_2\"},{\"key\":\"user\",\"value\":\"bkthomps$1\"}]}"
  post "$E/v1/check" "{\"domain\":\"example7\",\"descriptors\":[$d1,$d2]}"
  want_code "replaces: both descriptors" 200
  want_jv "replaces: the replaced limit does not apply" 'd["statuses"][0]' \
    '{"code":"OK"}'
  eq "replaces: the replacing limit applies" \
    '["OK",10,9,"example7.key_2_value_2.user"]' "$(st 1 "$FIG")"
  post "$E/v1/check" "{\"domain\":\"example7\",\"descriptors\":[$d1]}"
  eq "replaces: alone, the replaced limit applies, uncharged before" \
    '["OK",5,4,"example7.key_1_value_1.user"]' "$(st 0 "$FIG")"
}
in_window 3600 replaces

# --- example 8: detailed_metric -------------------------------------------------
get "$E/v1/check?domain=example8&key1=foo"
eq "detailed_metric: key only" '["OK",10,9,"example8.key1"]' "$(st 0 "$FIG")"
get "$E/v1/check?domain=example8&key1=value1"
eq "detailed_metric: the value" '["OK",20,19,"example8.key1_value1"]' \
  "$(st 0 "$FIG")"
eq "detailed_metric: a series per value" 1 \
  "$(metric 'sluice_rule_decisions_total{domain="example8",rule="example8.key1_foo",result="allowed"}')"

# --- example 9: wildcard --------------------------------------------------------
wildcard() {
  get "$E/v1/check?domain=example9&key1=value_$1"
  eq "wildcard: value* matches value_N" '["OK",20,19,"example9.key1_value*"]' \
    "$(st 0 "$FIG")"
  get "$E/v1/check?domain=example9&key1=value_$1"
  eq "wildcard: same value, same counter" '["OK",20,18,"example9.key1_value*"]' \
    "$(st 0 "$FIG")"
  get "$E/v1/check?domain=example9&key1=value"
  want_jv "wildcard: the bare prefix matches" 'd["statuses"][0]["rule"]' \
    '"example9.key1_value*"'
}
in_window 3600 wildcard
get "$E/v1/check?domain=example9&key1=valu"
want_jv "wildcard: a shorter value does not match" 'd["statuses"]' '[{"code":"OK"}]'
get "$E/v1/check?domain=example9&key1=xvalue_1"
want_jv "wildcard: a prefix, not a substring" 'd["statuses"]' '[{"code":"OK"}]'

# --- extensions ------------------------------------------------------------------
get "$E/v1/check?domain=ext&pol=a"
eq "policy: sliding_log:3/h" '["OK",3,2,"ext.pol"]' "$(st 0 "$FIG")"
want_jv "policy: no envoy unit, no current_limit" \
  '[d["statuses"][0]["policy"], "current_limit" in d["statuses"][0]]' \
  '["sliding_log:3/h",false]'
want_hdr "policy: RateLimit-Policy" RateLimit-Policy '"ext.pol";q=3;w=3600'
get "$E/v1/check?domain=ext&pol=a"
get "$E/v1/check?domain=ext&pol=a"
eq "policy: the third" '["OK",3,0,"ext.pol"]' "$(st 0 "$FIG")"
get "$E/v1/check?domain=ext&pol=a"
want_code "policy: the fourth is denied" 429

period() {
  for i in 1 2 3 4; do get "$E/v1/check?domain=ext&per=a$1"; done
  eq "period 30s: four allowed" '["OK",4,0,"ext.per"]' "$(st 0 "$FIG")"
  want_jv "period 30s: a fixed window of 30 s" 'd["statuses"][0]["policy"]' \
    '"fixed_window:4/30s"'
  want_hdr "period 30s: RateLimit-Policy" RateLimit-Policy '"ext.per";q=4;w=30'
  eq "period 30s: windows aligned to the epoch" 0 \
    $(($(hdr X-RateLimit-Reset) % 30))
  get "$E/v1/check?domain=ext&per=a$1"
  want_code "period 30s: the fifth is denied" 429
}
in_window 30 period

get "$E/v1/check?domain=ext&alg=a"
eq "algorithm/burst: token bucket, capacity 4" '["OK",4,3,"ext.alg"]' \
  "$(st 0 "$FIG")"
want_jv "algorithm/burst: the policy and envoy's unit" \
  '[d["statuses"][0]["policy"], d["statuses"][0]["current_limit"]]' \
  '["token_bucket:2/h:burst=4",{"requests_per_unit":2,"unit":"HOUR"}]'
want_hdr "algorithm/burst: RateLimit-Policy w = a full refill (2 h)" \
  RateLimit-Policy '"ext.alg";q=4;w=7200'

# rate_limits: 2 per second and 5 per day on one descriptor. Three requests
# in one second: the third is denied by the per-second limit and must not
# consume the daily one; the next second a request sees 3 - 1 = 2 left.
# Only the three requests must fit in one second (in_window), the checks
# of the third's answer come after: under a sanitizer the checks' own
# python calls made most attempts straddle a second.
multi() {
  multi_key=m$1
  for i in 1 2 3; do get "$E/v1/check?domain=ext&multi=m$1"; done
}
if in_window 1 multi; then
  want_code "rate_limits: the third in one second is denied" 429
  eq "rate_limits: denied by the per-second limit" \
    '["OVER_LIMIT",2,0,"ext.multi#0"]' "$(st 0 "$FIG")"
  eq "rate_limits: the daily limit: 2 taken, not the denied one" \
    '"daily";r=3' "$(rl_item RateLimit daily | sed 's/;t=.*//')"
  eq "rate_limits: both policies in RateLimit-Policy" \
    '"ext.multi#0";q=2;w=1, "daily";q=5;w=86400' "$(hdr RateLimit-Policy)"
fi
sleep 1
get "$E/v1/check?domain=ext&multi=$multi_key"
want_code "rate_limits: next second, allowed again" 200
eq "rate_limits: the next second, the daily limit has 2 left" \
  '"daily";r=2' "$(rl_item RateLimit daily | sed 's/;t=.*//')"

# --- value references ----------------------------------------------------------
get "$E/v1/check?domain=refs&ip=\$remote_addr"
eq "\$remote_addr: the peer's address" '["OK",50,49,"refs.ip_127.0.0.1"]' \
  "$(st 0 "$FIG")"
get "$E/v1/check?domain=refs&ip=\$remote_addr" \
  -H 'X-Forwarded-For: 10.9.8.7, 127.0.0.1'
eq "\$remote_addr: X-Forwarded-For's first address from a loopback peer" \
  '["OK",40,39,"refs.ip_10.9.8.7"]' "$(st 0 "$FIG")"
get "$E/v1/check?domain=refs&ip=\$remote_addr" -H 'X-Real-IP: 10.1.1.1'
eq "\$remote_addr: X-Real-IP" '["OK",41,40,"refs.ip_10.1.1.1"]' \
  "$(st 0 "$FIG")"
get "$E/v1/check?domain=refs&ip=%24%24remote_addr"
eq "\$\$remote_addr: the literal \$remote_addr" \
  '["OK",30,29,"refs.ip_$remote_addr"]' "$(st 0 "$FIG")"
get "$E/v1/check?domain=refs&api_key=\$http_x_api_key" -H 'X-Api-Key: abc'
eq "\$http_x_api_key: the header's value" '["OK",20,19,"refs.api_key_abc"]' \
  "$(st 0 "$FIG")"
get "$E/v1/check?domain=refs&api_key=\$http_x_api_key" -H 'x-api-key: zzz'
eq "\$http_x_api_key: another value, the key-only rule" \
  '["OK",10,9,"refs.api_key"]' "$(st 0 "$FIG")"
post "$E/v1/check" '{"domain":"refs","descriptors":[{"entries":[{"key":"api_key","value":"$http_x_api_key"}]}]}' \
  -H 'X-Api-Key: abc'
eq "\$http_x_api_key in a POST" '["OK",20,18,"refs.api_key_abc"]' \
  "$(st 0 "$FIG")"
get "$E/v1/check?domain=refs&api_key=\$http_x_api_key"
want_code "\$http_x_api_key without the header: allowed" 200
no_hdr "\$http_x_api_key without the header: no limit, no RateLimit" RateLimit
# A skipped descriptor keeps its place in "statuses" (statuses[i] answers
# descriptors[i], as in Envoy's RLS), marked skipped.
get "$E/v1/check?domain=refs&api_key=\$http_x_api_key"
want_jv "GET: a skipped descriptor keeps its place" 'd["statuses"]' \
  '[{"code":"OK","skipped":true}]'
post "$E/v1/check" '{"domain":"refs","descriptors":[{"entries":[{"key":"api_key","value":"$http_x_api_key"}]},{"entries":[{"key":"ip","value":"10.0.0.1"}]}]}'
want_jv "POST: a skipped descriptor keeps its place" \
  '[len(d["statuses"]), d["statuses"][0], d["statuses"][1].get("rule")]' \
  '[2,{"code":"OK","skipped":true},"refs.ip"]'

# --- metrics move as expected -----------------------------------------------------
snap "$tmp/m0"
get "$E/v1/check?domain=ext&pol=b" # 2 left: allowed
get "$E/v1/check?domain=ext&pol=b" # 1 left: allowed
get "$E/v1/check?domain=ext&pol=b" # 0 left: allowed, near the limit
get "$E/v1/check?domain=ext&pol=b" # denied
get "$E/v1/throttle?key=mt&policy=gcra:1/h"
get "$E/v1/throttle?key=mt&policy=gcra:1/h"
get "$E/nope"
snap "$tmp/m1"
md() { mdelta "$1" "$tmp/m0" "$tmp/m1"; }
eq "metrics: check allowed +3" 3 \
  "$(md 'sluice_decisions_total{kind="check",result="allowed"}')"
eq "metrics: check denied +1" 1 \
  "$(md 'sluice_decisions_total{kind="check",result="denied"}')"
eq "metrics: throttle allowed +1" 1 \
  "$(md 'sluice_decisions_total{kind="throttle",result="allowed"}')"
eq "metrics: throttle denied +1" 1 \
  "$(md 'sluice_decisions_total{kind="throttle",result="denied"}')"
r='sluice_rule_decisions_total{domain="ext",rule="ext.pol",result='
eq "metrics: the rule's allowed +3" 3 "$(md "$r\"allowed\"}")"
eq "metrics: the rule's denied +1" 1 "$(md "$r\"denied\"}")"
eq "metrics: the rule's shadow_denied +0" 0 "$(md "$r\"shadow_denied\"}")"
# near limit: allowed with remaining * 5 < limit, i.e. remaining 0 of 3.
eq "metrics: near_limit +1" 1 \
  "$(md 'sluice_rule_near_limit_total{domain="ext",rule="ext.pol"}')"
# 7 requests and the second scrape (which counts itself).
eq "metrics: http requests +8" 8 "$(md 'sluice_requests_total{protocol="http"}')"
eq "metrics: http errors +1 (the 404)" 1 \
  "$(md 'sluice_request_errors_total{protocol="http"}')"
eq "metrics: a latency sample per decision (+6)" 6 \
  "$(md sluice_decision_duration_seconds_count)"
eq "metrics: histogram +Inf bucket equals the count" \
  "$(metric sluice_decision_duration_seconds_count "$tmp/m1")" \
  "$(metric 'sluice_decision_duration_seconds_bucket{le="+Inf"}' "$tmp/m1")"
in_range "metrics: store keys" 1 100000 "$(metric sluice_store_keys)"
in_range "metrics: store bytes" 1 134217728 "$(metric sluice_store_bytes)"
in_range "metrics: open http connections (this scrape's at least)" 1 100 \
  "$(metric 'sluice_connections{protocol="http"}')"
eq "metrics: no reloads yet" 0 \
  "$(metric 'sluice_config_reloads_total{result="success"}')"

sv_stop e
sv_stop d

# ===========================================================================
# 4. sluice check-config
# ===========================================================================
# cc NAME FILE WANT-RC — runs check-config on FILE; stdout in $tmp/cc.out,
# stderr in $tmp/cc.err.
cc() {
  "$SLUICE" check-config "$2" >"$tmp/cc.out" 2>"$tmp/cc.err"
  eq "check-config $1: exit status" "$3" $?
}
cc "a good file" "$tmp/conf/ext.yaml" 0
eq "check-config a good file: the summary" "$tmp/conf/ext.yaml: OK: 1 domain, 5 rules" \
  "$(cat "$tmp/cc.out")"
eq "check-config a good file: nothing on stderr" "" "$(cat "$tmp/cc.err")"
cc "a good directory" "$tmp/conf" 0

mkdir -p "$tmp/bad"
cat >"$tmp/bad/unit.yaml" <<'EOF'
domain: d
descriptors:
  - key: a
    rate_limit:
      unit: fortnight
      requests_per_unit: 5
  - key: b
    rate_limit:
      policy: "gcra:0/s"
EOF
cc "two errors" "$tmp/bad/unit.yaml" 1
eq "check-config two errors: nothing on stdout" "" "$(cat "$tmp/cc.out")"
eq "check-config two errors: two lines" 2 "$(grep -c '' "$tmp/cc.err")"
like "check-config: a bad unit at its value (5:13)" \
  "^$tmp/bad/unit.yaml:5:13: .*fortnight" "$(sed -n 1p "$tmp/cc.err")"
like "check-config: a bad policy at its value (9:15)" \
  "^$tmp/bad/unit.yaml:9:15: .*'0'" "$(sed -n 2p "$tmp/cc.err")"

printf 'domain: d\ndescriptors:\n  - key: a\n   value: x\n' >"$tmp/bad/syntax.yaml"
cc "a YAML syntax error" "$tmp/bad/syntax.yaml" 1
like "check-config: a YAML syntax error with its position" \
  "^$tmp/bad/syntax.yaml:4:4: [a-z]" "$(cat "$tmp/cc.err")"

cat >"$tmp/bad/dup.yaml" <<'EOF'
domain: d
descriptors:
  - key: a
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: a
    rate_limit: {unit: hour, requests_per_unit: 2}
EOF
cc "a duplicate descriptor" "$tmp/bad/dup.yaml" 1
like "check-config: a duplicate descriptor" \
  "^$tmp/bad/dup.yaml:5:5: duplicate" "$(cat "$tmp/cc.err")"

cat >"$tmp/bad/both.yaml" <<'EOF'
domain: d
descriptors:
  - key: a
    rate_limit:
      unit: hour
      period: 30s
      requests_per_unit: 1
EOF
cc "unit and period" "$tmp/bad/both.yaml" 1
like "check-config: unit and period" "^$tmp/bad/both.yaml:6:15: .*period" \
  "$(cat "$tmp/cc.err")"

printf 'descriptors:\n  - key: a\n' >"$tmp/bad/nodomain.yaml"
cc "no domain" "$tmp/bad/nodomain.yaml" 1
like "check-config: no domain" "^$tmp/bad/nodomain.yaml:1:1: .*domain" \
  "$(cat "$tmp/cc.err")"

# One error, one line: the valid limit after it is not reported.
cat >"$tmp/bad/unknown.yaml" <<'EOF'
domain: d
descriptors:
  - key: a
    bogus: 1
  - key: b
    rate_limit: {unit: second, requests_per_unit: 1}
EOF
cc "an unknown key" "$tmp/bad/unknown.yaml" 1
eq "check-config: an unknown key, and nothing else: one line" 1 \
  "$(grep -c '' "$tmp/cc.err")"
like "check-config: an unknown key, at the key" \
  "^$tmp/bad/unknown.yaml:4:5: unknown key 'bogus'" "$(cat "$tmp/cc.err")"

cc "a directory with bad files" "$tmp/bad" 1
eq "check-config a directory: every bad file reported" 7 \
  "$(grep -c "^$tmp/bad/[a-z]*\.yaml:[0-9]*:[0-9]*: " "$tmp/cc.err")"

cc "a missing file" "$tmp/no-such.yaml" 1
like "check-config a missing file: names it" "no-such\.yaml" "$(cat "$tmp/cc.err")"
mkdir -p "$tmp/empty"
cc "an empty directory" "$tmp/empty" 1
"$SLUICE" check-config >/dev/null 2>&1
eq "check-config without a path: exit status" 2 $?
"$SLUICE" check-config --help >"$tmp/cc.out" 2>&1
eq "check-config --help: exit status" 0 $?
like "check-config --help: usage" "usage: sluice check-config" "$(cat "$tmp/cc.out")"

# serve refuses to start on a bad config, with the same messages.
"$SLUICE" serve --http 127.0.0.1:0 --resp off --config "$tmp/bad/unit.yaml" \
  >/dev/null 2>"$tmp/serve.err" </dev/null
eq "serve on a bad config: exit status" 1 $?
if grep -q "$tmp/bad/unit.yaml:5:13: " "$tmp/serve.err"; then pass; else
  fail "serve on a bad config: no file:line:col in its log: $(head -c 300 "$tmp/serve.err")"
fi

lib_finish
