#!/bin/sh
# serve_protocol.sh — how sluice serve behaves on the wire beyond single
# answers: connections stay alive whatever the status (a forward-auth proxy
# asks on every request, 429s included), a port another process holds is
# refused, SL.CHECK names an unlimited rule, a skipped descriptor keeps its
# place in the statuses, and an oversized body gets sluice's JSON 413.
. "$(dirname "$0")/serve_lib.sh"
lib_init serve_protocol

cat >"$tmp/api.yaml" <<'EOT'
domain: api
descriptors:
  - key: path
    value: /healthz
    rate_limit: {unlimited: true}
  - key: ip
    rate_limit: {unit: hour, requests_per_unit: 2}
EOT
sv_start one --config "$tmp/api.yaml" || lib_finish

# Keep-alive through 200, 200, 429 and 404: one connection for all four.
u="$URL/v1/check?domain=api&ip=10.0.0.1"
curl -sv -o /dev/null -o /dev/null -o /dev/null -o /dev/null --max-time 10 \
  "$u" "$u" "$u" "$URL/nope" 2>"$tmp/v"
n=$(grep -c 'Re-using existing connection' "$tmp/v")
eq "four answers (200, 200, 429, 404) on one connection" "$n" 3
eq "the third one was a denial" \
  "$(grep -c '^< HTTP/1.1 429' "$tmp/v")" 1
eq "no answer asks to close" "$(grep -ci '^< connection: close' "$tmp/v")" 0

# A second daemon on the first one's port: "address in use", exit 1 —
# SO_REUSEPORT must not let two daemons share (and split) one port.
"$SLUICE" serve --http "127.0.0.1:$HTTP" --resp off >"$tmp/second.out" \
  2>"$tmp/second.log" </dev/null &
second=$!
lib_track "$second"
waitfor 100 sh -c "! kill -0 $second 2>/dev/null"
wait "$second"
eq "a second daemon on a busy port exits 1" "$?" 1
if grep -q 'address in use' "$tmp/second.log"; then pass; else
  fail "busy port: no 'address in use' in: $(cat "$tmp/second.log")"
fi

# SL.CHECK names an unlimited rule; no rule: an empty name.
r=$(redis-cli -p "$RESP" SL.CHECK api path /healthz | tr '\n' ' ')
eq "SL.CHECK on an unlimited rule" "$r" "1 -1 -1 0 0 api.path_/healthz "
r=$(redis-cli -p "$RESP" SL.CHECK api nothing here | tr '\n' ' ')
eq "SL.CHECK with no rule" "$r" "1 -1 -1 0 0  "

# A descriptor naming a missing header is skipped but keeps its place.
post "$URL/v1/check" \
  '{"domain":"api","descriptors":[{"entries":[{"key":"ip","value":"$http_x_missing"}]},{"entries":[{"key":"path","value":"/healthz"}]}]}'
want_code "skipped descriptor: status" 200
want_jv "skipped descriptor: first status" 'd["statuses"][0]' \
  '{"code":"OK","skipped":true}'
want_jv "skipped descriptor: second status is the second descriptor's" \
  'd["statuses"][1]["rule"]' '"api.path_/healthz"'

# A body far over --max-body gets h2o's 413, in sluice's JSON. With
# `Expect: 100-continue` the 413 comes before any of the body is sent.
# Without it (curl asks only from 1 MiB on) curl sends the body at once,
# and h2o's close after its 413 races the upload: the reset can reach
# curl before it reads the answer (CI saw HTTP 000 once, under ASan).
head -c 300000 /dev/zero | tr '\0' a >"$tmp/big"
http POST "$URL/v1/check" -H 'Expect: 100-continue' --data-binary "@$tmp/big"
want_code "300 KB body" 413
want_jv "300 KB body: JSON error" 'd["error"]' '"body larger than 65536 bytes"'

sv_stop one
lib_finish
