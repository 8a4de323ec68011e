#!/bin/sh
# serve_state.sh — state across time (POSIX sh; curl, redis-cli; helpers in
# serve_lib.sh), the checks of issue 15's findings 4, 8 and 9:
#
#   SLUICE=build/sluice sh tests/integration/serve_state.sh
#
#   - --state-file: a key at 5 of 5 per day stays denied across a SIGTERM
#     and a restart, across a kill -9 after one --state-interval, and across
#     a config change that keeps its rule (and the rule that changed starts
#     fresh); a damaged file is reported with its offset, and the daemon
#     starts anyway; fleet mode refuses the option;
#   - the watcher: a config file rewritten in two parts 1.5 s apart is not
#     loaded half-way (the key keeps its state); --watch off never reloads;
#   - ad-hoc policies: 1,100 distinct ones pipelined, then new ones are
#     served again once the keyless ones are reclaimed (and the metric says
#     how many are in use).
# Every wait is a bounded poll. The checks that need no new option come
# first, so that a daemon without them fails them rather than its start.

. "$(dirname "$0")/serve_lib.sh"
lib_tools="$lib_tools redis-cli"
lib_init serve_state
# `day` is a fixed window of a UTC day whose state the checks below carry
# across restarts for many seconds (~20 under TSan): not near its turn.
clear_of_turn 86400 120

# conf FILE [EXTRA-POLICY] — `day` at 5 a day; `other` at EXTRA-POLICY when
# given (a second rule whose change must not touch day's state).
conf() {
  {
    echo 'domain: st'
    echo 'descriptors:'
    echo '  - key: day'
    echo '    rate_limit: {policy: "fixed_window:5/d"}'
    echo '  - key: log'
    echo '    rate_limit: {policy: "sliding_log:5/d"}'
    if [ -n "${2:-}" ]; then
      echo '  - key: other'
      echo "    rate_limit: {policy: \"$2\"}"
    fi
  } >"$1"
}

# status KEY — the HTTP status of one check of descriptor KEY=u.
status() {
  get "$URL/v1/check?domain=st&$1=u"
  echo "$code"
}

# exhaust KEY — five allowed checks, the sixth denied.
exhaust() {
  _ok=0
  for _i in 1 2 3 4 5; do [ "$(status "$1")" = 200 ] && _ok=$((_ok + 1)); done
  eq "$1: 5 of 5 allowed" 5 "$_ok"
  eq "$1: the sixth denied" 429 "$(status "$1")"
}

# ---- finding 4: ad-hoc policies are freed once their keys are gone ----
sv_start p || lib_finish
i=1
while [ $i -le 1100 ]; do
  echo "SL.THROTTLE k$i fixed_window:$i/s"
  i=$((i + 1))
done | redis-cli -p "$RESP" >"$tmp/p.out" 2>&1
grep -q "too many distinct ad-hoc policies (max 1024)" "$tmp/p.out" && pass ||
  fail "1,100 policies: the cap never refused one"
# Their keys are back to fresh after a second (+ the grace), then freed.
ok=0
for _t in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20; do
  sleep 0.5
  r=$(redis-cli -p "$RESP" SL.THROTTLE fresh fixed_window:99999/s 2>&1)
  case "$r" in *"too many"*) ;; *) ok=1; break ;; esac
done
eq "a new ad-hoc policy after the others' keys went" 1 "$ok"
r=$(redis-cli -p "$RESP" CL.THROTTLE ck 5 7 60 1 2>&1)
case "$r" in *"unknown error"*) fail "CL.THROTTLE: $r" ;; *) pass ;; esac
in_use=$(curl -s "$URL/metrics" | sed -n 's/^sluice_adhoc_policies \([0-9]*\)/\1/p')
[ -n "$in_use" ] && [ "$in_use" -lt 1024 ] && pass ||
  fail "sluice_adhoc_policies is '$in_use', want < 1024"
sv_stop p


# ---- finding 8: a file written in two parts is not loaded half-way ----
conf "$tmp/w.yaml"
sv_start w -c "$tmp/w.yaml" || lib_finish
exhaust day
# The first half has no `day` rule; the rest comes 1.5 s later.
head -n 2 "$tmp/w.yaml" >"$tmp/half"
conf "$tmp/full"
cat "$tmp/half" >"$tmp/w.yaml"
sleep 1.5
cat "$tmp/full" >"$tmp/w.yaml"
waitfor 80 sv_log_has w "config reloaded" && pass || fail "the whole file was never reloaded"
eq "a file written in parts: day still denied" 429 "$(status day)"
eq "one reload, of the whole file" 1 "$(grep -c 'config reloaded' "$tmp/sv.w/log")"
sv_stop w

S=$tmp/state
conf "$tmp/c.yaml"

# ---- finding 9: SIGTERM, restart ----
sv_start a -c "$tmp/c.yaml" --state-file "$S" --state-interval 60000 || lib_finish
exhaust day
exhaust log
sv_stop a
sv_log_has a "state file .*: 2 keys saved" && pass || fail "no save at SIGTERM: $(tail -n 3 "$tmp/sv.a/log")"
sv_start b -c "$tmp/c.yaml" --state-file "$S" --state-interval 300 || lib_finish
sv_log_has b "2 keys restored" && pass || fail "restore not logged: $(grep 'state file' "$tmp/sv.b/log")"
eq "after SIGTERM and restart: day still denied" 429 "$(status day)"
eq "after SIGTERM and restart: log still denied" 429 "$(status log)"

# ---- a link planted at the temporary file's name is not followed ----
echo precious >"$tmp/victim"
ln -s "$tmp/victim" "$S.$PID.tmp"
saves=$(metric 'sluice_state_saves_total{result="success"}')
waitfor 50 sh -c "[ \$(curl -s $URL/metrics | sed -n 's/^sluice_state_saves_total{result=\"success\"} \([0-9]*\)/\1/p') -gt ${saves:-0} ]" \
  && pass || fail "no periodic save"
eq "a link at PATH.PID.tmp: its target is left alone" precious \
  "$(cat "$tmp/victim")"

# ---- kill -9 after one interval ----
get "$URL/v1/check?domain=st&day=v"
sleep 0.8 # more than one --state-interval (300 ms) for the save
waitfor 50 sh -c "[ \$(curl -s $URL/metrics | sed -n 's/^sluice_state_saved_keys \\([0-9]*\\)/\\1/p') -ge 3 ]" \
  && pass || fail "no periodic save with the third key"
sv_signal b KILL
sv_wait_exit b
sv_start c -c "$tmp/c.yaml" --state-file "$S" || lib_finish
eq "after kill -9 and restart: day still denied" 429 "$(status day)"
eq "after kill -9: log still denied" 429 "$(status log)"

# ---- a config change that keeps the rule keeps its state ----
sv_stop c
conf "$tmp/c.yaml" "fixed_window:1/d"
sed -i 's|sliding_log:5/d|sliding_log:6/d|' "$tmp/c.yaml"
sv_start d -c "$tmp/c.yaml" --state-file "$S" || lib_finish
eq "changed config, same rule: day still denied" 429 "$(status day)"
eq "changed config, the rule whose limit changed starts fresh" 200 "$(status log)"
sv_stop d

# ---- a damaged file: an error with the offset, a start without state ----
head -c 100 "$S" >"$tmp/trunc"
cp "$tmp/trunc" "$S"
sv_start e -c "$tmp/c.yaml" --state-file "$S" || lib_finish
sv_log_has e "error: state file .*: offset [0-9]+: truncated" && pass ||
  fail "truncated file not reported: $(grep 'state file' "$tmp/sv.e/log")"
[ -f "$S.bad" ] && pass || fail "the damaged file was not kept as $S.bad"
eq "after a damaged file: fresh" 200 "$(status day)"
sv_stop e

# ---- fleet mode refuses the option ----
"$SLUICE" serve --grpc off --store redis://127.0.0.1:1 --state-file "$S" \
  >/dev/null 2>"$tmp/fleet.err"
eq "fleet mode: --state-file refused" 2 "$?"
grep -q "memory mode" "$tmp/fleet.err" && pass || fail "no reason given: $(cat "$tmp/fleet.err")"

# ---- CL.THROTTLE's one state per key survives a restart ----
sv_start cs --state-file "$tmp/cell.state" || lib_finish
eq "CL.THROTTLE before the restart: allowed" "0 1 0 -1 3600" \
  "$(redis-cli -p "$RESP" CL.THROTTLE cs 0 1 3600 | paste -sd' ' -)"
sv_stop cs
sv_start cr --state-file "$tmp/cell.state" || lib_finish
r=$(redis-cli -p "$RESP" CL.THROTTLE cs 0 1 3600 | paste -sd' ' -)
case "$r" in "1 1 0 3"*) pass ;; *) fail "CL.THROTTLE after the restart: '$r'" ;; esac
sv_stop cr

# ---- --watch off ----
sv_start x -c "$tmp/w.yaml" --watch off || lib_finish
echo "# touched" >>"$tmp/w.yaml"
sleep 2.5
sv_log_has x "config changed on disk" && fail "--watch off reloaded" || pass
sv_stop x

lib_finish
