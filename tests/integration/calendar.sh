#!/bin/sh
# calendar.sh — calendar quotas through HTTP headers (POSIX sh):
#
#   SLUICE=build/sluice sh tests/integration/calendar.sh  (make integration)
#
# The daemon runs with --clock-skew so that its clock stands 10 seconds
# before the next UTC midnight. A `calendar: day` quota of 1 then says, in
# RateLimit and Retry-After, that it resets within 10 s (not at the next 24 h
# of the epoch... which is the same instant for a UTC day: so a day in
# +05:30 and a month are checked too, against Python's own calendar), and
# gives a fresh request once the day has turned; `unit: month` stays 30
# days from the epoch. In memory mode, then in exact fleet mode (a
# redis-server of the test's own), where the script counts in the window
# the daemon sends it; then with the Redis module loaded, once the daemon
# sends SL.DECIDE (its probe answered), where no SL.DECIDE may fail.
. "$(dirname "$0")/serve_lib.sh"
. "$(dirname "$0")/fleet_lib.sh"
lib_init calendar

cat >"$tmp/rules.yaml" <<'YAML'
domain: cal
descriptors:
  - key: day
    rate_limit: {calendar: day, requests_per_unit: 1}
  - key: india
    rate_limit: {calendar: day, requests_per_unit: 1, tz: "+05:30"}
  - key: month
    rate_limit: {calendar: month, requests_per_unit: 1, tz: Europe/Berlin}
  - key: envoy
    rate_limit: {unit: month, requests_per_unit: 1}
YAML

# t_of FIELD: the RateLimit header's t= (seconds to reset).
t_of() { hdr RateLimit | sed -n 's/.*;t=\([0-9]*\).*/\1/p'; }
# expect NAME WANT GOT [SLACK]: GOT within WANT-SLACK..WANT (default 2 s:
# the requests take time, and reset rounds up).
expect() {
  _s=${4:-2}
  if [ -n "$3" ] && [ "$3" -le "$2" ] && [ "$3" -ge $(($2 - _s)) ]; then pass
  else fail "$1: $3, want $2 (-$_s) (status $code: $(head -c 200 "$tmp/b"))"; fi
}

run() { # NAME: the checks on daemon NAME, whose clock is $skew ms ahead
  sv_use "$1"
  now=$(( $(date +%s) + skew / 1000 ))
  "$PY" - "$now" >"$tmp/want" <<'PY'
import sys, datetime as dt
from zoneinfo import ZoneInfo
now = int(sys.argv[1])
t = dt.datetime.fromtimestamp(now, dt.timezone.utc)
def next_midnight(tz):
    l = t.astimezone(tz)
    d = (l + dt.timedelta(days=1)).date()
    return int(dt.datetime(d.year, d.month, d.day, tzinfo=tz).timestamp())
def next_month(tz):
    l = t.astimezone(tz)
    y, m = (l.year + 1, 1) if l.month == 12 else (l.year, l.month + 1)
    nxt = dt.datetime(y, m, 1, tzinfo=tz)
    first = dt.datetime(l.year, l.month, 1, tzinfo=tz)
    return int(nxt.timestamp()), int(nxt.timestamp() - first.timestamp())
ist = dt.timezone(dt.timedelta(hours=5, minutes=30))
nm, nw = next_month(ZoneInfo("Europe/Berlin"))
W = 30 * 86400
print(next_midnight(dt.timezone.utc) - now, next_midnight(ist) - now,
      nm - now, nw, W - now % W)
PY
  read -r w_day w_india w_month w_month_len w_envoy <"$tmp/want"
  http GET "$URL/v1/check?domain=cal&day=a"
  if [ "$code" = 200 ]; then pass; else fail "$1 day: status $code"; fi
  expect "$1 day: RateLimit t" "$w_day" "$(t_of)" 6
  case "$(hdr RateLimit-Policy)" in *";w=86400"*) pass ;;
    *) fail "$1 day: RateLimit-Policy $(hdr RateLimit-Policy)" ;; esac
  http GET "$URL/v1/check?domain=cal&day=a"
  if [ "$code" = 429 ]; then pass; else fail "$1 day again: status $code"; fi
  expect "$1 day: Retry-After" "$w_day" "$(hdr Retry-After)" 6
  http GET "$URL/v1/check?domain=cal&india=a"
  expect "$1 +05:30: RateLimit t" "$w_india" "$(t_of)" 6
  http GET "$URL/v1/check?domain=cal&month=a"
  expect "$1 month: RateLimit t" "$w_month" "$(t_of)" 6
  case "$(hdr RateLimit-Policy)" in *";w=$w_month_len"*) pass ;;
    *) fail "$1 month: RateLimit-Policy $(hdr RateLimit-Policy), want w=$w_month_len" ;; esac
  http GET "$URL/v1/check?domain=cal&envoy=a"
  expect "$1 unit: month (30 days from the epoch)" "$w_envoy" "$(t_of)" 6
  [ "$1" = mem ] || return 0 # (exact mode decides on Redis's clock)
  # The day turns: a fresh quota.
  sleep $((w_day + 1))
  http GET "$URL/v1/check?domain=cal&day=a"
  if [ "$code" = 200 ]; then pass; else fail "$1 day after midnight: status $code"; fi
  expect "$1 the next day: RateLimit t" 86400 "$(t_of)" 8
}

# The daemon's clock: 10 s before the next UTC midnight.
skew=$(( (86400 - $(date +%s) % 86400 - 10) * 1000 ))
sv_start mem --config "$tmp/rules.yaml" --clock-skew "$skew" &&
  run mem && sv_stop mem

# Where windows are counted on the epoch's grid (envoy's forced charges,
# the approximate mode's sync), a calendar limit would silently count in
# the wrong window: the daemon refuses the config, naming the rule.
expect_cmd "--charging envoy refuses a calendar limit" 1 \
  "rules.yaml:[0-9]*:[0-9]*: cal.day: calendar windows are not supported with --charging envoy" \
  timeout 10 "$SLUICE" serve --config "$tmp/rules.yaml" --charging envoy \
  --http 127.0.0.1:0 --resp off --grpc off
# Exact mode decides on Redis's clock (--clock-skew cannot move it): the
# windows the daemon sends are checked at the real time, the turn of the
# day in memory mode above and in tests/unit/test_calendar.c. Then with
# the Redis module loaded (SL.DECIDE instead of the script), when built.
RP=$(free_port)
if rs_start main "$RP"; then
  skew=0
  # (Too close to a UTC midnight, the day could turn mid-check.)
  if [ $((86400 - $(date +%s) % 86400)) -lt 30 ]; then sleep 31; fi
  sv_start exact --config "$tmp/rules.yaml" --store "redis://127.0.0.1:$RP" &&
    run exact && sv_stop exact
fi
# The same where Redis has sluice's module: SL.DECIDE reads the window too.
# sl_decide FIELD: INFO commandstats's FIELD (calls, failed_calls) of
# SL.DECIDE on the module's Redis, 0 before its first call.
sl_decide() {
  _v=$(rcli "$MP" INFO commandstats | tr -d '\r' | tr ' ' '\n' |
    sed -n 's/^cmdstat_sl\.decide://p' | tr ',' '\n' | sed -n "s/^$1=//p")
  echo "${_v:-0}"
}
MODULE=${MODULE:-$(dirname "$SLUICE")/sluice-redis.so}
MP=$(free_port)
if [ -f "$MODULE" ] && rs_start mod "$MP" --loadmodule "$(cd "$(dirname "$MODULE")" && pwd)/$(basename "$MODULE")"; then
  if [ $((86400 - $(date +%s) % 86400)) -lt 30 ]; then sleep 31; fi
  if sv_start module --config "$tmp/rules.yaml" --store "redis://127.0.0.1:$MP"
  then
    # A connection sends EVALSHA until its probe finds the module: first
    # requests (on keys of their own) until one went by SL.DECIDE, so
    # that the checks below do not depend on when the probe answered.
    sv_use module
    i=0
    while [ "$(sl_decide calls)" = 0 ] && [ $i -lt 50 ]; do
      http GET "$URL/v1/check?domain=cal&day=warm$i"
      i=$((i + 1))
      sleep 0.1
    done
    before=$(sl_decide calls)
    run module
    sv_stop module
    # Every window (each with a phase) decided inside Redis, none failed.
    if [ "$(sl_decide calls)" -gt "$before" ]; then pass
    else fail "module: SL.DECIDE was not used ($(sl_decide calls) calls)"; fi
    if [ "$(sl_decide failed_calls)" = 0 ]; then pass
    else fail "module: SL.DECIDE failed: $(rcli "$MP" INFO errorstats)"; fi
  fi
fi
lib_finish
