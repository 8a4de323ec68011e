#!/bin/sh
# shedding.sh — load shedding by priority class (docs/shedding.md) against
# real daemons (POSIX sh; helpers in serve_lib.sh and fleet_lib.sh):
#
#   1. worker utilisation over HTTP: a report of 70% sheds sheddable only,
#      95% default too, critical never; the class from the query's
#      priority entry, the X-Sluice-Priority header, a JSON body's
#      "priority"; a shed answer is 503 with Retry-After and says why;
#   2. the same over RESP (SL.UTILISATION, SL.CHECK ... PRIORITY);
#   3. a stale report expires (ttl_ms); a second source's report combines;
#   4. shadow mode: nothing shed, X-Sluice-Shed: shadow, counted;
#   5. metrics per class, and the source table's bound (refusals counted);
#   6. bad input: an unknown class, a utilisation that is no level, a
#      domain that sheds nothing, a config whose thresholds rise;
#   7. fleet usage shared by two daemons on one Redis: what one admitted
#      counts against the other's capacity;
#   8. the simulator: the shedding example keeps critical traffic whole
#      while sheddable absorbs the cut; its shedder and class lines'
#      errors.
#
#   SLUICE=build/sluice sh tests/integration/shedding.sh   (make integration)

. "$(dirname "$0")/serve_lib.sh"
. "$(dirname "$0")/fleet_lib.sh"
lib_init shedding

cat >"$tmp/api.yaml" <<'EOF'
domain: api
shedding:
  classes:
    - {name: critical, threshold: never}
    - {name: default, threshold: 90%}
    - {name: sheddable, threshold: 60%}
  max_sources: 2
  retry_after: 3s
descriptors:
  - key: user
    rate_limit: {policy: "gcra:1000/s"}
EOF
cat >"$tmp/shadow.yaml" <<'EOF'
domain: shadowed
shedding: {shadow: true}
descriptors:
  - key: user
    rate_limit: {policy: "gcra:1000/s"}
EOF
cat >"$tmp/plain.yaml" <<'EOF'
domain: plain
descriptors:
  - key: user
    rate_limit: {policy: "gcra:1000/s"}
EOF
mkdir -p "$tmp/conf"
cp "$tmp/api.yaml" "$tmp/shadow.yaml" "$tmp/plain.yaml" "$tmp/conf/"

# rc ARGS... — redis-cli's raw replies on one line.
rc() {
  timeout 10 redis-cli -h 127.0.0.1 -p "$RESP" "$@" </dev/null 2>&1 |
    paste -sd' ' -
}

# expect_status WHAT WANT METHOD URL [CURL-ARGS...]
expect_status() {
  _what=$1
  _want=$2
  shift 2
  http "$@"
  if [ "$code" = "$_want" ]; then pass; else fail "$_what: $code, not $_want: $(cat "$tmp/b")"; fi
}

report() { # report DOMAIN LEVEL [EXTRA-QUERY]
  http POST "$URL/v1/utilisation?domain=$1&utilisation=$2$3"
  [ "$code" = 200 ] || fail "report $1 $2: $code $(cat "$tmp/b")"
}

# ---- 8. the simulator (no daemon) ----
"$SLUICE" sim --example shedding --summary-only >"$tmp/sim" 2>&1
shed_of() { sed -n "s/^shed policy=api class=$1 .*$2=\([0-9]*\).*/\1/p" "$tmp/sim"; }
[ "$(shed_of critical served)" = "$(shed_of critical requests)" ] && [ "$(shed_of critical shed)" = 0 ] &&
  pass || fail "sim: critical not whole: $(cat "$tmp/sim")"
[ "$(shed_of default shed)" = 0 ] && pass || fail "sim: default shed"
[ "$(shed_of sheddable shed)" -gt 150 ] && pass || fail "sim: sheddable did not absorb the cut"
sim_err() { # WHAT EXPECTED-TEXT SCENARIO
  printf '%s\n' "$3" >"$tmp/sc"
  "$SLUICE" sim "$tmp/sc" >"$tmp/sim" 2>&1
  grep -q "$2" "$tmp/sim" && pass || fail "sim $1: $(cat "$tmp/sim")"
}
sim_err "class without shedder" "class needs a shedder line first" "policy p gcra:1/s
class critical
request"
sim_err "rising thresholds" "class 1's threshold is above class 0's" "shedder 10/s a:50% b:80%
policy p gcra:1/s"
sim_err "bad capacity" "the capacity must be requests per period" "shedder lots a:50%
policy p gcra:1/s"
sim_err "unknown class" "one of the shedder's classes" "shedder 10/s a:never b:50%
policy p gcra:1/s
class c"
sim_err "shedder after traffic" "one shedder, before the first request" "policy p gcra:1/s
request
shedder 10/s a:never"

sv_start one -t 2 --config "$tmp/conf" || lib_finish

# ---- 1. utilisation over HTTP ----
C="$URL/v1/check?domain=api&user=u1"
expect_status "nothing reported: sheddable" 200 GET "$C&priority=sheddable"
report api 0.7
expect_status "70%: sheddable shed" 503 GET "$C&priority=sheddable"
[ "$(hdr retry-after)" = 3 ] && pass || fail "shed: Retry-After '$(hdr retry-after)', not 3"
case "$(hdr x-sluice-shed)" in
"shed; class=sheddable; signal=utilisation") pass ;;
*) fail "X-Sluice-Shed: '$(hdr x-sluice-shed)'" ;;
esac
grep -q '"shed":{"shadow":false,"class":"sheddable","signal":"utilisation","level":0.700,"threshold":0.600' "$tmp/b" &&
  pass || fail "shed JSON: $(cat "$tmp/b")"
expect_status "70%: default kept" 200 GET "$C&priority=default"
expect_status "70%: no class is default" 200 GET "$C"
expect_status "70%: class by number (2)" 503 GET "$C&priority=2"
expect_status "70%: class by header" 503 GET "$C" -H 'X-Sluice-Priority: sheddable'
post "$URL/v1/check" '{"domain":"api","priority":"sheddable","descriptors":[{"entries":[{"key":"user","value":"u1"}]}]}'
[ "$code" = 503 ] && pass || fail "class by JSON body: $code"
report api 95%25 # (a percent sign, URL-encoded)
expect_status "95%: default shed" 503 GET "$C&priority=default"
expect_status "95%: critical kept" 200 GET "$C&priority=critical"
grep -q '"rule":"api.user"' "$tmp/b" && pass || fail "critical: the rule still decides: $(cat "$tmp/b")"
report api 0.1
expect_status "10%: sheddable back" 200 GET "$C&priority=sheddable"

# ---- 2. over RESP ----
[ "$(rc SL.UTILISATION api 0.7)" = "0.700" ] && pass || fail "SL.UTILISATION: $(rc SL.UTILISATION api 0.7)"
[ "$(rc SL.CHECK api user u2 PRIORITY sheddable)" = "0 -1 -1 3000 0 shed:sheddable" ] &&
  pass || fail "RESP sheddable: $(rc SL.CHECK api user u2 PRIORITY sheddable)"
case "$(rc SL.CHECK api user u2 PRIORITY default)" in "1 1000 "*) pass ;; *) fail "RESP default: $(rc SL.CHECK api user u2 PRIORITY default)" ;; esac
rc SL.UTILISATION api 95% >/dev/null
[ "$(rc SL.CHECK api user u2 PRIORITY default HITS 1)" = "0 -1 -1 3000 0 shed:default" ] &&
  pass || fail "RESP default at 95%: $(rc SL.CHECK api user u2 PRIORITY default HITS 1)"
case "$(rc SL.CHECK api user u2 PRIORITY critical)" in "1 1000 "*) pass ;; *) fail "RESP critical: $(rc SL.CHECK api user u2 PRIORITY critical)" ;; esac
case "$(rc SL.CHECK api user u2 PRIORITY nope)" in *"unknown priority class 'nope'"*) pass ;; *) fail "RESP bad class: $(rc SL.CHECK api user u2 PRIORITY nope)" ;; esac
case "$(rc SL.UTILISATION api lots)" in *"utilisation must be"*) pass ;; *) fail "RESP bad level" ;; esac

# ---- 3. expiry, sources ----
rc SL.UTILISATION api 0.1 >/dev/null
report api 0.99 "&source=w1&ttl_ms=400"
expect_status "fresh 99%: default shed" 503 GET "$C&priority=default"
sleep 0.6
expect_status "stale 99% expired: default kept" 200 GET "$C&priority=default"
expect_status "the other source's 10% holds: sheddable kept" 200 GET "$C&priority=sheddable"
report api 0.65 "&source=w2"
expect_status "max over sources (65%)" 503 GET "$C&priority=sheddable"
http POST "$URL/v1/utilisation?domain=api&utilisation=0.1&source=w3"
[ "$code" = 429 ] && pass || fail "a third fresh source over max_sources 2: $code"

# ---- 4. shadow mode ----
report shadowed 0.99
S="$URL/v1/check?domain=shadowed&user=u1&priority=sheddable"
expect_status "shadow: nothing shed" 200 GET "$S"
[ "$(hdr x-sluice-shed)" = "shadow; class=sheddable; signal=utilisation" ] &&
  pass || fail "shadow header: '$(hdr x-sluice-shed)'"
http GET "$S"

# ---- 5. metrics ----
http GET "$URL/metrics"
metric() { grep -F "$1" "$tmp/b" | awk '{ print $2 }'; }
[ "$(metric 'sluice_shed_requests_total{domain="api",class="sheddable",result="shed"}')" = 6 ] &&
  pass || fail "sheddable shed count: $(metric 'sluice_shed_requests_total{domain="api",class="sheddable",result="shed"}')"
[ "$(metric 'sluice_shed_requests_total{domain="api",class="critical",result="shed"}')" = 0 ] && pass || fail "critical shed count"
[ "$(metric 'sluice_shed_requests_total{domain="shadowed",class="sheddable",result="shadow_shed"}')" = 2 ] &&
  pass || fail "shadow count: $(grep shadowed "$tmp/b")"
[ "$(metric 'sluice_shed_sources_refused_total{domain="api"}')" = 1 ] && pass || fail "refused count"
[ "$(metric 'sluice_shed_sources{domain="api"}')" = 2 ] && pass || fail "sources gauge"
[ "$(metric 'sluice_shed_utilisation_ratio{domain="api"}')" = 0.650 ] && pass || fail "utilisation gauge"
http GET "$URL/v1/shedding?domain=api"
grep -q '"name":"sheddable","threshold":0.600,"shed_now":true' "$tmp/b" && pass || fail "GET /v1/shedding: $(cat "$tmp/b")"

# ---- 6. bad input ----
expect_status "unknown class" 400 GET "$C&priority=urgent"
grep -q "unknown priority class 'urgent' (expected critical, default, sheddable, or 0..2)" "$tmp/b" && pass || fail "message: $(cat "$tmp/b")"
expect_status "a level that is none" 400 POST "$URL/v1/utilisation?domain=api&utilisation=abc"
expect_status "a domain that sheds nothing" 404 POST "$URL/v1/utilisation?domain=plain&utilisation=0.5"
expect_status "plain domains ignore priority" 200 GET "$URL/v1/check?domain=plain&user=u&priority=x"
printf 'domain: bad\nshedding:\n  classes:\n    - {name: a, threshold: 50%%}\n    - {name: b, threshold: 80%%}\ndescriptors: []\n' >"$tmp/bad.yaml"
"$SLUICE" check-config "$tmp/bad.yaml" >"$tmp/out" 2>&1
grep -q "class 1's threshold is above class 0's" "$tmp/out" && pass || fail "rising thresholds: $(cat "$tmp/out")"
sv_stop one

# ---- 7. fleet usage through one Redis ----
RP=$(free_port)
rs_start main "$RP" || lib_finish
cat >"$tmp/fleet.yaml" <<'EOF'
domain: fleet
shedding:
  capacity: 40/m
  classes:
    - {name: critical, threshold: never}
    - {name: sheddable, threshold: 50%}
descriptors:
  - key: user
    rate_limit: {policy: "gcra:1000/s"}
EOF
sv_start a -t 1 --config "$tmp/fleet.yaml" --store "redis://127.0.0.1:$RP" || lib_finish
UA=$URL
sv_start b -t 1 --config "$tmp/fleet.yaml" --store "redis://127.0.0.1:$RP" || lib_finish
UB=$URL
# The windows are whole minutes of the clock: start well inside one, so
# that no boundary passes while a's and b's requests run (a boundary
# would weigh a's 15 down as the next window goes on, and let b admit
# more than the one extra the bound below allows for).
sec=$(date +%S)
sec=${sec#0}
[ "$sec" -lt 40 ] || sleep $((61 - sec))
i=0
while [ $i -lt 15 ]; do
  http GET "$UA/v1/check?domain=fleet&user=x&priority=critical"
  i=$((i + 1))
done
sleep 0.6 # a's round pushes, then b's reads (every 100 ms)
ok=0
i=0
while [ $i -lt 20 ]; do
  http GET "$UB/v1/check?domain=fleet&user=y&priority=sheddable"
  [ "$code" = 200 ] && ok=$((ok + 1))
  i=$((i + 1))
done
say "daemon b admitted $ok sheddable of 20 after daemon a admitted 15 critical (capacity 40, sheddable to 50%: 5 alone would be 20)"
# 20 of 40 for sheddable, 15 used by a: 5 (6 when a minute boundary
# passed between: the previous window's count is weighted down).
[ $ok -ge 5 ] && [ $ok -le 6 ] && pass || fail "fleet usage not shared: b admitted $ok"
rcli "$RP" --scan --pattern 'sluice:shed:*' >"$tmp/keys"
grep -q 'sluice:shed:{fleet}:' "$tmp/keys" && pass || fail "no window key in Redis: $(cat "$tmp/keys")"
sv_stop a
sv_stop b
lib_finish
