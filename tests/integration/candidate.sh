#!/bin/sh
# candidate.sh — a rule's candidate policy end to end (POSIX sh):
#
#   SLUICE=build/sluice sh tests/integration/candidate.sh  (make integration)
#
#   - `sluice replay --policy A --candidate B TRACE` prints exactly the
#     requests where B disagrees with A, and the summary (requests each way,
#     distinct clients newly rejected / let through), derived by hand;
#   - the daemon, through GET /v1/check and /metrics, counts the same
#     trace's divergences exactly, in memory mode and in exact fleet mode
#     (a redis-server of the test's own), without ever enforcing B.
. "$(dirname "$0")/serve_lib.sh"
. "$(dirname "$0")/fleet_lib.sh"
lib_init candidate

# ---- replay ----
# Windows of 60 s from 0 (epoch-aligned). A is fixed_window:3/m, B 2/m:
# a's 3rd request (B full) would be denied; its 4th both deny (agree);
# b and c each see their 3rd request newly denied; at 60 s all is fresh.
cat >"$tmp/trace" <<'T'
# t key
1000 a
1001 a
1002 a
1003 a
1004 b
1005 b
1006 b
1007 c
1008 c
1009 c
61000 a
T
cat >"$tmp/want" <<'W'
1002 a would_deny remaining=0 candidate_remaining=0
1006 b would_deny remaining=0 candidate_remaining=0
1009 c would_deny remaining=0 candidate_remaining=0
summary requests=11 would_deny=3 would_allow=0 clients_newly_denied=3 clients_newly_allowed=0
W
"$SLUICE" replay --policy fixed_window:3/m --candidate fixed_window:2/m \
  "$tmp/trace" >"$tmp/out" 2>"$tmp/err"
if [ $? -eq 0 ] && cmp -s "$tmp/want" "$tmp/out"; then pass; else
  fail "replay --candidate: $(diff "$tmp/want" "$tmp/out" | head -5) $(head -c 200 "$tmp/err")"
fi
# The other way round: B lets through what A denies. a: 1001..1003 (B
# has room: a denial does not charge it, so it keeps room), b: 1005, 1006,
# c: 1008, 1009.
"$SLUICE" replay -p fixed_window:1/m -c fixed_window:3/m "$tmp/trace" \
  >"$tmp/out" 2>"$tmp/err"
if tail -n 1 "$tmp/out" | grep -qx "summary requests=11 would_deny=0 would_allow=7 clients_newly_denied=0 clients_newly_allowed=3"
then pass; else fail "replay --candidate (looser): $(tail -n 1 "$tmp/out")"; fi
expect_cmd "replay --candidate with a bad policy" 2 "candidate" \
  "$SLUICE" replay -p fixed_window:1/m -c nope:1/m "$tmp/trace"

# ---- the daemon ----
cat >"$tmp/rules.yaml" <<'YAML'
domain: ops
descriptors:
  - key: user
    rate_limit: {policy: "fixed_window:3/h", candidate: "fixed_window:2/h"}
  - key: ip
    rate_limit: {policy: "fixed_window:1/h", candidate: "fixed_window:3/h"}
YAML
# run NAME: the trace's requests (one hour window: no boundary inside a
# test run, unless it starts in the last minute of an hour) and the counts.
run() {
  sv_use "$1"
  st=""
  for k in a a a a b b b c c c; do
    http GET "$URL/v1/check?domain=ops&user=$k"
    st="$st$code "
  done
  for k in x x x; do
    http GET "$URL/v1/check?domain=ops&ip=$k"
    st="$st$code "
  done
  want="200 200 200 429 200 200 200 200 200 200 200 429 429 "
  if [ "$st" = "$want" ]; then pass; else fail "$1: statuses '$st', want '$want'"; fi
  http GET "$URL/metrics"
  for pair in 'user would_deny 3' 'user would_allow 0' 'ip would_deny 0' \
    'ip would_allow 2'; do
    set -- $pair
    line="sluice_rule_candidate_divergences_total{domain=\"ops\",rule=\"ops.$1\",direction=\"$2\"} $3"
    if grep -qxF "$line" "$tmp/b"; then pass; else
      fail "$1 $2: want '$line', got: $(grep "rule=\"ops.$1\",direction=\"$2\"" "$tmp/b")"
    fi
  done
}
# Too close to the end of an hour, the trace could straddle two windows.
if [ $(( $(date +%s) % 3600 )) -gt 3540 ]; then sleep 61; fi
sv_start mem --config "$tmp/rules.yaml" && run mem && sv_stop mem
RP=$(free_port)
if rs_start main "$RP"; then
  sv_start exact --config "$tmp/rules.yaml" --store "redis://127.0.0.1:$RP" &&
    run exact && sv_stop exact
fi
lib_finish
