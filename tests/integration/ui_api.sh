#!/bin/sh
# ui_api.sh — the endpoints of the page at /ui/ (docs/ui.md), without a
# browser (tests/integration/ui.sh drives the page itself):
#   POST /v1/sim         the scenario language, answered as JSON; the same
#                        figures as `sluice sim`; hostile scenarios (huge,
#                        deep, NUL bytes, bad UTF-8, absurd counts and times)
#                        get a clear 4xx and the daemon stays up
#   GET  /v1/sim/examples, /v1/stats (the figures of /metrics as JSON, and
#                        the top keys as /v1/top counts them, named only for
#                        an admin client; off with --top-keys 0)
#   GET  /ui/ and its files: Content-Type, Cache-Control, a strict CSP
#   --ui off             all of them 404
#
#   SLUICE=build/sluice sh tests/integration/ui_api.sh      (make integration)

. "$(dirname "$0")/serve_lib.sh"
lib_init ui_api

sv_start u --resp off || lib_finish
U=$URL

# sim TEXT-FILE [QUERY] — POSTs the file as the scenario.
sim() { http POST "$U/v1/sim${2:-}" -H 'content-type: text/plain' --data-binary "@$1"; }

# ---- the page's files -----------------------------------------------------
for f in /ui/:text/html /ui/ui.js:text/javascript /ui/ui.css:text/css; do
  path=${f%%:*} type=${f#*:}
  get "$U$path"
  want_code "GET $path" 200
  want_hdr "$path: Content-Type" content-type "$type; charset=utf-8"
  want_hdr "$path: Cache-Control" cache-control no-store
  want_hdr "$path: nosniff" x-content-type-options nosniff
  want_hdr_like "$path: a strict CSP" content-security-policy "^default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'"
  eq "$path: one Cache-Control" 1 "$(hdr_count cache-control)"
done
get "$U/ui/"
like "the page loads its script from a file (no inline code)" 1 "$(grep -c '<script src="ui.js" defer></script>' "$tmp/b")"
eq "the page has no inline script" 0 "$(grep -c '<script>' "$tmp/b")"
get "$U/ui"
want_code "/ui redirects" 308
want_hdr "/ui redirects to /ui/" location /ui/
get "$U/ui/nope.js"
want_code "an unknown file" 404

# ---- POST /v1/sim: the same figures as sluice sim ------------------------
for ex in boundary-burst idle-burst smoothing retry-storm fleet-quiz store-down; do
  "$SLUICE" sim --example "$ex" --print >"$tmp/$ex.sim"
  sim "$tmp/$ex.sim"
  want_code "example $ex" 200
  want_hdr "example $ex: JSON" content-type application/json
  "$SLUICE" sim --summary-only --example "$ex" >"$tmp/$ex.sum"
  "$PY" -c 'import json,sys; print("\n".join(s["line"] for s in json.load(open(sys.argv[1]))["summary"]))' "$tmp/b" >"$tmp/$ex.got" 2>&1
  if cmp -s "$tmp/$ex.sum" "$tmp/$ex.got"; then pass; else
    fail "example $ex: /v1/sim's summary differs from sluice sim's: $(diff "$tmp/$ex.sum" "$tmp/$ex.got" | head -n 4)"
  fi
  # and the document is sluice sim --json's, byte for byte
  "$SLUICE" sim --json --example "$ex" >"$tmp/$ex.json"
  if cmp -s "$tmp/$ex.json" "$tmp/b"; then pass; else fail "example $ex: /v1/sim and sluice sim --json differ"; fi
done
printf 'policy g gcra:1/s\nretry after jitter 1s max 5\nburst 3\n' >"$tmp/seed.sim"
sim "$tmp/seed.sim" '?seed=7'
want_code "a seed" 200
"$SLUICE" sim --json --seed 7 "$tmp/seed.sim" >"$tmp/seed.json"
if cmp -s "$tmp/seed.json" "$tmp/b"; then pass; else fail "?seed=7 is sluice sim --seed 7"; fi
sim "$tmp/seed.sim" '?seed=-1'
want_code "a bad seed" 400

get "$U/v1/sim/examples"
want_code "the examples" 200
# The page's examples are `sluice sim`'s, in its order: one list.
want=$("$SLUICE" sim --list-examples | awk '{ printf "%s\"%s\"", (NR > 1 ? "," : "["), $1 } END { print "]" }')
eq "the examples, by name, as sluice sim --list-examples" "$want" "$(jv '[e["name"] for e in d]')"
get "$U/v1/sim"
want_code "GET /v1/sim" 405

# ---- hostile scenarios: a clear error, never a crash ----------------------
# bad_sim NAME CODE ERE — the last answer's status and its error message.
bad_sim() {
  want_code "$1" "$2"
  like "$1 (message)" "$3" "$(jv 'd["error"]')"
}
printf 'policy f fixed_window:10/s\nburst 20\nfrobnicate\n' >"$tmp/s"
sim "$tmp/s"
bad_sim "an unknown command" 400 "^\"line 3: unknown command 'frobnicate'"
eq "an unknown command: its line" 3 "$(jv 'd["line"]')"
printf 'policy f bogus:1/s\n' >"$tmp/s"
sim "$tmp/s"
bad_sim "a bad policy" 400 "line 1: policy f: "
: >"$tmp/s"
sim "$tmp/s"
bad_sim "an empty body" 400 "must be a scenario"
# Over the page's caps: 64 KiB of text, 100000 decisions per policy.
{ echo 'policy f fixed_window:10/s'; awk 'BEGIN { for (i = 0; i < 7000; i++) print "request k" i }'; } >"$tmp/s"
sim "$tmp/s"
bad_sim "a scenario over 64 KiB" 413 "larger than 65536 bytes"
printf 'policy f fixed_window:10/s\nburst 100001\n' >"$tmp/s"
sim "$tmp/s"
bad_sim "more than 100000 decisions" 400 "line 2: too many requests: .*100000 decisions"
printf 'policy f fixed_window:10/s\nretry immediate max 1000\nburst 101\n' >"$tmp/s"
sim "$tmp/s"
bad_sim "decisions counting retries" 400 "line 3: too many requests"
printf 'policy f fixed_window:10/s\nevery 1ms for 100d\n' >"$tmp/s"
sim "$tmp/s"
bad_sim "an absurd stream" 400 "line 2: too many requests"
printf 'policy f fixed_window:10/s\nat 99999999d\n' >"$tmp/s"
sim "$tmp/s"
bad_sim "an absurd time" 400 "line 2: at: "
printf 'policy f fixed_window:10/s\nburst 99999999999999999999999\n' >"$tmp/s"
sim "$tmp/s"
bad_sim "an absurd count" 400 "line 2: burst "
printf 'policy f fixed_window:10/s\nrequest a\0b\n' >"$tmp/s"
sim "$tmp/s"
bad_sim "a NUL byte" 400 "line 2: contains a NUL byte"
printf 'policy f fixed_window:10/s\nfrob\377\376\n' >"$tmp/s"
sim "$tmp/s"
want_code "bad UTF-8 in a command" 400
like "bad UTF-8: the answer is still JSON" '^"line 2: ' "$(jv 'd["error"]')"
printf 'policy f fixed_window:10/s\nrequest \377\376\n' >"$tmp/s"
sim "$tmp/s"
want_code "bad UTF-8 in a key: decided" 200
like "bad UTF-8 in a key: escaped in the JSON" '\\u00ff' "$(cat "$tmp/b")"
"$PY" -c 'print("policy f fixed_window:10/s\n" + "a" * 5000)' >"$tmp/s"
sim "$tmp/s"
bad_sim "a line too long" 400 "line 2: longer than 4096 bytes"
"$PY" -c 'print("policy f fixed_window:10/s\nrequest " + " ".join(["x"] * 40))' >"$tmp/s"
sim "$tmp/s"
bad_sim "too many words (deep)" 400 "line 2: more than 16 words"
printf 'fleet 65\n' >"$tmp/s"
sim "$tmp/s"
bad_sim "a fleet too big" 400 "line 1: fleet: the number of nodes must be 1 to 64"
printf 'policy f fixed_window:10/s\n' >"$tmp/s"
code=$(curl -s -o "$tmp/b" -w '%{http_code}' --max-time 10 -H 'content-length: 99999999' --data-binary "@$tmp/s" "$U/v1/sim")
want_code "a body declared huge" 413
get "$U/healthz"
want_code "the daemon is still up after the hostile ones" 200

# ---- GET /v1/stats: /metrics' figures as JSON -----------------------------
for i in 1 2 3; do get "$U/v1/throttle?key=stats&policy=gcra:2/m:burst=2"; done
get "$U/v1/stats"
want_code "/v1/stats" 200
want_hdr "/v1/stats: JSON" content-type application/json
snap "$tmp/m"
eq "/v1/stats: allowed as in /metrics" \
  "$(metric 'sluice_decisions_total{kind="throttle",result="allowed"}' "$tmp/m")" \
  "$(jv '[m["value"] for m in d["metrics"] if m["name"] == "sluice_decisions_total" and m.get("labels") == "kind=\"throttle\",result=\"allowed\""][0]')"
eq "/v1/stats: denied as in /metrics" \
  "$(metric 'sluice_decisions_total{kind="throttle",result="denied"}' "$tmp/m")" \
  "$(jv '[m["value"] for m in d["metrics"] if m["name"] == "sluice_decisions_total" and m.get("labels") == "kind=\"throttle\",result=\"denied\""][0]')"
eq "/v1/stats: the store's cap" "$(metric sluice_store_max_bytes "$tmp/m")" \
  "$(jv '[m["value"] for m in d["metrics"] if m["name"] == "sluice_store_max_bytes"][0]')"
like "/v1/stats: the latency histogram" '^[0-9]+$' "$(jv '[m["count"] for m in d["metrics"] if m["name"] == "sluice_decision_duration_seconds"][0]')"
eq "/v1/stats: the series" '"default"' "$(jv 'd["series"][0]["domain"]')"

# ---- GET /v1/stats: the top keys, as GET /v1/top counts them --------------
# One key floods an ad-hoc rule, three others ask a little; the page's
# "top" must rank it first, with the same counts and shares as /v1/top.
R='gcra:5/m'
for i in 1 2 3 4 5 6 7 8 9 10 11 12; do get "$U/v1/throttle?key=flood&policy=$R"; done
for k in a b c; do get "$U/v1/throttle?key=$k&policy=$R"; done
get "$U/v1/stats"
cp "$tmp/b" "$tmp/stats.json"
eq "/v1/stats: top keys on" true "$(jv 'd["top"]["enabled"]')"
eq "/v1/stats: top keys' values as --denial-log-values" '"plain"' "$(jv 'd["top"]["values"]')"
eq "/v1/stats: keys named for a loopback client (no --admin-token)" true "$(jv 'd["top"]["keys_shown"]')"
eq "/v1/stats: the flooding key first by decisions" '"flood"' \
  "$(jv '[r for r in d["top"]["rules"] if r["rule"] == "adhoc:gcra:5/m"][0]["by_decisions"][0]["key"]')"
eq "/v1/stats: the flooding key first by denials" '"flood"' \
  "$(jv '[r for r in d["top"]["rules"] if r["rule"] == "adhoc:gcra:5/m"][0]["by_denials"][0]["key"]')"
eq "/v1/stats: at most 5 keys per list" 4 \
  "$(jv 'len([r for r in d["top"]["rules"] if r["rule"] == "adhoc:gcra:5/m"][0]["by_decisions"])')"
get "$U/v1/top?rule=adhoc:gcra:5/m&n=5"
want_code "/v1/top for the same rule" 200
cp "$tmp/b" "$tmp/top.json"
eq "/v1/stats' top keys are /v1/top's (keys, ids, counts, shares)" OK "$("$PY" -S - "$tmp/stats.json" "$tmp/top.json" <<'EOF2'
import json, sys
s = json.load(open(sys.argv[1]))["top"]
t = json.load(open(sys.argv[2]))
r = [x for x in s["rules"] if x["rule"] == t["rule"]][0]
ok = all(r[f] == t[f] for f in ("decisions", "denials", "error_bound", "by_decisions", "by_denials"))
ok = ok and s["counters"] == t["counters"] and s["window_seconds"] == t["window_seconds"]
print("OK" if ok else "DIFFER: %r %r" % (r, t))
EOF2
)"
snap "$tmp/m"
eq "/v1/stats: the heaviest key's share as sluice_top_key_share" \
  "$(metric 'sluice_top_key_share{rule="adhoc:gcra:5/m"}' "$tmp/m")" \
  "$("$PY" -S -c 'import json,sys; r=[r for r in json.load(open(sys.argv[1]))["top"]["rules"] if r["rule"] == "adhoc:gcra:5/m"][0]; print("%.6f" % r["by_decisions"][0]["share"])' "$tmp/stats.json")"
sv_stop u

# ---- the top keys' privacy: as /v1/top's --------------------------------
# With --admin-token, /v1/stats (open to all) names no key unless the token
# comes with the request; --denial-log-values hash applies as in /v1/top.
sv_start tok --resp off --admin-token s3cret --denial-log-values hash || lib_finish
for i in 1 2 3 4; do get "$URL/v1/throttle?key=secret-user&policy=gcra:1/m"; done
get "$URL/v1/stats"
want_code "/v1/stats without the token" 200
eq "/v1/stats without the token: keys not named" false "$(jv 'd["top"]["keys_shown"]')"
eq "/v1/stats without the token: no key field" '[]' "$(jv '[i for r in d["top"]["rules"] for i in r["by_decisions"] + r["by_denials"] if "key" in i]')"
eq "/v1/stats without the token: no raw key anywhere" 0 "$(grep -c secret-user "$tmp/b")"
eq "/v1/stats without the token: the share is still there" 1.0 "$(jv 'd["top"]["rules"][0]["by_decisions"][0]["share"]')"
ID=$(jv 'd["top"]["rules"][0]["by_decisions"][0]["id"]')
get "$URL/v1/stats" -H 'authorization: Bearer s3cret'
eq "/v1/stats with the token: keys named" true "$(jv 'd["top"]["keys_shown"]')"
eq "/v1/stats with the token: values as --denial-log-values hash" '"hash"' "$(jv 'd["top"]["values"]')"
eq "/v1/stats with the token: the value hashed" 0 "$(grep -c secret-user "$tmp/b")"
K=$(jv 'd["top"]["rules"][0]["by_decisions"][0]["key"]')
eq "/v1/stats with the token: the same id" "$ID" "$(jv 'd["top"]["rules"][0]["by_decisions"][0]["id"]')"
get "$URL/v1/top?rule=adhoc:gcra:1/m" -H 'authorization: Bearer s3cret'
eq "/v1/top names the key as /v1/stats does" "$K" "$(jv 'd["by_decisions"][0]["key"]')"
sv_stop tok
sv_start notop --resp off --top-keys 0 || lib_finish
get "$URL/v1/stats"
eq "--top-keys 0: /v1/stats says top keys are off" '{"enabled":false}' "$(jv 'd["top"]')"
sv_stop notop

# ---- --ui off -------------------------------------------------------------
sv_start off --resp off --ui off || lib_finish
for path in /ui/ /ui/ui.js /v1/stats /v1/sim/examples; do
  get "$URL$path"
  want_code "--ui off: $path" 404
done
http POST "$URL/v1/sim" --data-binary 'policy f gcra:1/s'
want_code "--ui off: POST /v1/sim" 404
like "--ui off: says why" 'ui off' "$(jv 'd["error"]')"
sv_stop off

lib_finish
