# serve_lib.sh — helpers for the integration tests of `sluice serve`
# (POSIX sh; sourced, not run: the serve_*.sh scripts start with
#   . "$(dirname "$0")/serve_lib.sh"; lib_init NAME ).
#
# What it gives a test script:
#   - check_lib.sh's: a temporary directory $tmp (mktemp -d), removed on
#     exit; a check counter: pass, fail "name: why", lib_finish (prints
#     the totals, exits 1 if any check failed);
#   - daemons: sv_start NAME ARGS... starts "$SLUICE serve" on ports the
#     kernel picks (127.0.0.1:0, so two test runs, or a developer's own
#     daemon, can never share a port: sluice binds with SO_REUSEPORT, and a
#     port chosen by hand could be silently shared with another sluice),
#     reads the ports from the file --ready-file writes once it listens,
#     and waits until /healthz answers;
#     sv_stop NAME sends SIGTERM and checks the exit status;
#   - every process a test starts (daemons, nginx, background load) is
#     killed on exit, whatever happens; every wait has a bound.
#
# After sv_start / sv_use NAME: $PID, $HTTP, $RESP and $GRPC (ports; empty when
# that listener is off), $URL (http://127.0.0.1:$HTTP), $LOG (its stderr).
#
# HTTP: http METHOD URL [CURL-ARGS...] leaves the status in $code (000 when
# the connection failed), the headers in $tmp/h (no CR), the body in
# $tmp/b; hdr NAME prints a header's value (first one, name case-blind).

. "$(dirname "$0")/check_lib.sh"
# Debian's python3 (scripts/deps.sh test) first: a version manager's shim
# in PATH can cost 100+ ms a call, and the checks call it often.
if [ -z "${PY:-}" ]; then
  if [ -x /usr/bin/python3 ]; then PY=/usr/bin/python3; else PY=python3; fi
fi
# Bounds, in tenths of a second; generous, since sanitizer builds are slow.
SV_START_TENTHS=${SV_START_TENTHS:-300}
SV_STOP_TENTHS=${SV_STOP_TENTHS:-300}

lib_tools="curl $PY"
sv_names=""
lib_pids=""

# Kills whatever is still running (daemons, tracked pids), removes $tmp
# (check_lib.sh's lib_cleanup, redefined).
lib_cleanup() {
  for _p in $lib_pids; do
    kill -TERM "$_p" 2>/dev/null
  done
  for _n in $sv_names; do
    _d=$tmp/sv.$_n
    if [ -f "$_d/pid" ] && [ ! -f "$_d/rc" ]; then
      kill -TERM "$(cat "$_d/pid")" 2>/dev/null
    fi
  done
  for _n in $sv_names; do
    _d=$tmp/sv.$_n
    [ -f "$_d/pid" ] || continue
    _i=0
    while [ ! -f "$_d/rc" ] && [ $_i -lt 50 ]; do
      sleep 0.1
      _i=$((_i + 1))
    done
    [ -f "$_d/rc" ] || kill -KILL "$(cat "$_d/pid")" 2>/dev/null
  done
  for _p in $lib_pids; do
    kill -KILL "$_p" 2>/dev/null
  done
  wait 2>/dev/null
  rm -rf "$tmp"
}

# lib_track PID — kills PID (SIGTERM, then SIGKILL) on exit.
lib_track() { lib_pids="$lib_pids $1"; }

# waitfor TENTHS COMMAND... — runs COMMAND every 0.1 s until it succeeds;
# 1 if it never did within TENTHS tenths of a second.
waitfor() {
  _wt=$1
  shift
  while ! "$@"; do
    [ "$_wt" -gt 0 ] || return 1
    sleep 0.1
    _wt=$((_wt - 1))
  done
  return 0
}

# now_ms — wall-clock milliseconds since the epoch (the daemon's clock).
now_ms() { date +%s%3N; }

# in_window SECONDS FUNCTION — runs FUNCTION ATTEMPT (1, 2, ...) until one
# run lies wholly inside one window of SECONDS aligned to the epoch, as the
# daemon's fixed windows are (it reads this machine's clock), so counting
# checks never straddle a window boundary; FUNCTION must use keys of its
# own per attempt. The checks of a straddling run are dropped. A run is not
# started in the last quarter of a window or its last 3 s, whichever is
# shorter: it waits for the next window. At most 5 attempts.
in_window() {
  _iw=$(($1 * 1000))
  _ia=0
  while [ $_ia -lt 5 ]; do
    _ia=$((_ia + 1))
    _left=$((_iw - $(now_ms) % _iw))
    _guard=$((_iw / 4))
    [ $_guard -le 3000 ] || _guard=3000
    if [ $_left -lt $_guard ]; then
      sleep "$(awk -v ms=$_left 'BEGIN { printf "%.3f", ms / 1000 + 0.02 }')"
    fi
    : >"$tmp/deferred"
    defer=1
    _i0=$(now_ms)
    "$2" "$_ia"
    _i1=$(now_ms)
    defer=""
    if [ $((_i0 / _iw)) -eq $((_i1 / _iw)) ]; then
      checks=$((checks + $(grep -c '' "$tmp/deferred")))
      fails=$((fails + $(grep -c '^FAIL' "$tmp/deferred")))
      grep '^FAIL' "$tmp/deferred" >&2
      return 0
    fi
  done
  fail "in_window $1 $2: no attempt ran inside one window"
  return 1
}

# clear_of_turn SECONDS MARGIN — returns once at least MARGIN seconds are
# left of the running window of SECONDS aligned to the epoch (a fixed
# window's, an envoy unit's, a UTC day's), sleeping into the next window
# when fewer are: for counts that span a part of a script too long, or
# too entangled with daemons' starts, for in_window's retries.
clear_of_turn() {
  _ct=$(($1 * 1000))
  _cl=$((_ct - $(now_ms) % _ct))
  if [ $_cl -lt $(($2 * 1000)) ]; then
    sleep "$(awk -v ms=$_cl 'BEGIN { printf "%.3f", ms / 1000 + 0.05 }')"
  fi
}

# sock_buffers PORT PID — while process PID (a client that sends and never
# reads) runs, polls ss(8) for the established connections on local port
# PORT (the daemon's side) and prints the largest receive and send
# buffers seen ("RB TB", ss's rb and tb; "0 0" when none was seen): the
# most the kernel held for them, wherever the run was when it peaked.
# (A process that has ended but was not waited for yet is a zombie, Z in
# its stat: ended too. At most 60 s.)
sock_buffers() {
  _sb_rb=0 _sb_tb=0 _sb_n=0
  while [ $_sb_n -lt 300 ] && kill -0 "$2" 2>/dev/null &&
    [ "$(sed 's/.*) //' "/proc/$2/stat" 2>/dev/null | cut -c1)" != Z ]; do
    _sb_n=$((_sb_n + 1))
    set -- "$1" "$2" $(ss -tmHn state established "sport = :$1" 2>/dev/null |
      awk '{ while (match($0, /[(,](rb|tb)[0-9]+/)) {
               f = substr($0, RSTART + 1, RLENGTH - 1); $0 = substr($0, RSTART + RLENGTH)
               v = substr(f, 3) + 0
               if (f ~ /^rb/ && v > rb) rb = v; if (f ~ /^tb/ && v > tb) tb = v } }
           END { print rb + 0, tb + 0 }')
    [ "$3" -gt "$_sb_rb" ] && _sb_rb=$3
    [ "$4" -gt "$_sb_tb" ] && _sb_tb=$4
    sleep 0.2
  done
  echo "$_sb_rb $_sb_tb"
}

# ---------------------------------------------------------------------------
# daemons

# ready_port FILE NAME — the port of listener NAME (http, resp) in a file
# --ready-file wrote ({"pid": N, "http": "ADDR:PORT", "resp": null});
# empty when that listener is off.
ready_port() {
  sed -n "s/.*\"$2\": \"[^\"]*:\([0-9]*\)\".*/\1/p" "$1" 2>/dev/null
}

# sv_use NAME — points $PID, $HTTP, $RESP, $URL, $LOG at daemon NAME (the
# ports as its ready file said, kept by sv_start: the daemon removes the
# file when it stops).
sv_use() {
  _d=$tmp/sv.$1
  LOG=$_d/log
  PID=$(cat "$_d/pid" 2>/dev/null)
  HTTP=$(ready_port "$_d/addrs" http)
  RESP=$(ready_port "$_d/addrs" resp)
  GRPC=$(ready_port "$_d/addrs" grpc)
  URL=http://127.0.0.1:$HTTP
}

_sv_up() { [ -f "$1/ready" ] || [ -f "$1/rc" ]; }
_sv_healthy() {
  [ "$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 "$URL/healthz")" = 200 ]
}

# sv_start NAME [ARGS...] — starts "$SLUICE serve --http 127.0.0.1:0
# --resp 127.0.0.1:0 --grpc 127.0.0.1:0 --ready-file $tmp/sv.NAME/ready
# ARGS..." (ARGS may override any listener) with its stderr in $tmp/sv.NAME/log, and waits
# until it listens (the ready file is there) and /healthz answers. 0 when
# it is up (then sv_use NAME is in effect); otherwise a failed check with
# the daemon's log, and 1.
sv_start() {
  _n=$1
  shift
  _d=$tmp/sv.$_n
  rm -rf "$_d"
  mkdir -p "$_d"
  case " $sv_names " in *" $_n "*) ;; *) sv_names="$sv_names $_n" ;; esac
  # The inner sh records its own pid and becomes the daemon (exec); the
  # subshell records the daemon's exit status once it is over.
  (
    sh -c 'echo $$ >"$0.tmp" && mv "$0.tmp" "$0" && exec "$@"' "$_d/pid" \
      "$SLUICE" serve --http 127.0.0.1:0 --resp 127.0.0.1:0 \
      --grpc 127.0.0.1:0 --ready-file "$_d/ready" "$@" \
      </dev/null >"$_d/out" 2>"$_d/log"
    echo $? >"$_d/rc.tmp"
    mv "$_d/rc.tmp" "$_d/rc"
  ) &
  if ! waitfor "$SV_START_TENTHS" _sv_up "$_d" || [ -f "$_d/rc" ]; then
    fail "sv_start $_n: the daemon did not start (exit status" \
      "$(cat "$_d/rc" 2>/dev/null || echo none)); its log:"
    sed 's/^/    /' "$_d/log" >&2
    return 1
  fi
  cp "$_d/ready" "$_d/addrs"
  if [ "$(sed -n 's/.*"pid": \([0-9]*\).*/\1/p' "$_d/addrs")" != "$(cat "$_d/pid")" ]; then
    fail "sv_start $_n: the ready file is not this daemon's: $(cat "$_d/addrs")"
    return 1
  fi
  sv_use "$_n"
  if [ -n "$HTTP" ] && ! waitfor "$SV_START_TENTHS" _sv_healthy; then
    fail "sv_start $_n: /healthz never answered 200 on $URL; its log:"
    sed 's/^/    /' "$_d/log" >&2
    return 1
  fi
  return 0
}

# sv_running NAME — whether daemon NAME is still running.
sv_running() { [ -f "$tmp/sv.$1/pid" ] && [ ! -f "$tmp/sv.$1/rc" ]; }

# sv_signal NAME SIGNAL — sends SIGNAL (HUP, TERM, ...) to daemon NAME.
sv_signal() { kill -"$2" "$(cat "$tmp/sv.$1/pid")"; }

# sv_wait_exit NAME [TENTHS] — waits for daemon NAME to exit; its status in
# $sv_rc ("none" if it is still running after the bound).
sv_wait_exit() {
  _d=$tmp/sv.$1
  waitfor "${2:-$SV_STOP_TENTHS}" test -f "$_d/rc"
  sv_rc=$(cat "$_d/rc" 2>/dev/null || echo none)
}

# sv_threads PID — what a daemon that does not stop is doing, for the
# failure's report: each thread's state (R: running, a spin; S: asleep, a
# wait or a deadlock), its kernel wait channel and CPU ticks, then, where
# gdb is installed, every thread's stack.
sv_threads() {
  for _t in /proc/"$1"/task/*; do
    [ -r "$_t/stat" ] || continue
    awk -v w="$(cat "$_t/wchan" 2>/dev/null)" '{
      sub(/^[0-9]+ \(/, ""); split($0, f, /\) /); split(f[2], g, " ")
      printf "    thread %s: state %s, wchan %s, utime %s, stime %s\n",
        f[1], g[1], w, g[12], g[13]
    }' "$_t/stat"
  done
  if command -v gdb >/dev/null 2>&1; then
    timeout 30 gdb -p "$1" -batch -ex 'thread apply all bt' 2>&1 |
      grep -E '^(Thread|#)' | sed 's/^/    /'
  fi
}

# sv_stop NAME [WANT] — SIGTERM, then the exit status must be WANT (0) and
# the log must say "stopped"; a daemon that does not stop within the bound
# is killed and fails the check (what its threads were doing printed).
sv_stop() {
  _d=$tmp/sv.$1
  if ! sv_running "$1"; then
    fail "sv_stop $1: the daemon is not running (exit status $(cat "$_d/rc" 2>/dev/null)); its log:"
    tail -n 20 "$_d/log" | sed 's/^/    /' >&2
    return 1
  fi
  kill -TERM "$(cat "$_d/pid")"
  sv_wait_exit "$1"
  if [ "$sv_rc" = none ]; then
    fail "sv_stop $1: still running $((SV_STOP_TENTHS / 10)) s after SIGTERM (killed); its threads and log:"
    sv_threads "$(cat "$_d/pid")" >&2
    tail -n 20 "$_d/log" | sed 's/^/    /' >&2
    kill -KILL "$(cat "$_d/pid")" 2>/dev/null
    return 1
  fi
  if [ "$sv_rc" != "${2:-0}" ]; then
    fail "sv_stop $1: exit status $sv_rc after SIGTERM, want ${2:-0}; its log:"
    tail -n 20 "$_d/log" | sed 's/^/    /' >&2
    return 1
  fi
  if ! grep -q 'info: stopped$' "$_d/log"; then
    fail "sv_stop $1: the log does not say 'stopped': $(tail -n 1 "$_d/log")"
    return 1
  fi
  pass
  return 0
}

# sv_log_has NAME ERE — the daemon's log matches ERE.
sv_log_has() { grep -Eq -- "$2" "$tmp/sv.$1/log"; }

# ---------------------------------------------------------------------------
# HTTP

# http METHOD URL [CURL-ARGS...] — see the top.
http() {
  _m=$1
  _u=$2
  shift 2
  rm -f "$tmp/b" "$tmp/h.raw"
  if [ "$_m" = HEAD ]; then
    code=$(curl -s -g -I -o /dev/null -D "$tmp/h.raw" -w '%{http_code}' \
      --max-time 10 "$@" "$_u")
    : >"$tmp/b"
  else
    code=$(curl -s -g -X "$_m" -o "$tmp/b" -D "$tmp/h.raw" -w '%{http_code}' \
      --max-time 10 "$@" "$_u")
  fi
  [ -n "$code" ] || code=000
  [ -f "$tmp/b" ] || : >"$tmp/b"
  tr -d '\r' <"$tmp/h.raw" >"$tmp/h" 2>/dev/null || : >"$tmp/h"
}

# get URL [CURL-ARGS...] / post URL JSON [CURL-ARGS...]
get() { http GET "$@"; }
post() {
  _u=$1
  printf '%s' "$2" >"$tmp/req.json"
  shift 2
  http POST "$_u" -H 'content-type: application/json' \
    --data-binary "@$tmp/req.json" "$@"
}

# hdr NAME — the value of the first header NAME of the last response.
hdr() {
  awk -v n="$(printf '%s' "$1" | tr 'A-Z' 'a-z')" '
    { i = index($0, ":"); if (i && tolower(substr($0, 1, i - 1)) == n) {
        v = substr($0, i + 1); sub(/^[ \t]*/, "", v); print v; exit } }' \
    "$tmp/h"
}

# hdr_count NAME — how many headers NAME the last response has.
hdr_count() {
  awk -v n="$(printf '%s' "$1" | tr 'A-Z' 'a-z')" '
    { i = index($0, ":"); if (i && tolower(substr($0, 1, i - 1)) == n) c++ }
    END { print c + 0 }' "$tmp/h"
}

# jv EXPR — evaluates a Python expression over the last body, parsed as
# JSON into `d`; prints the result as JSON (so strings come quoted, true is
# true). Prints "ERROR: ..." when the body is not JSON.
jv() {
  "$PY" -S - "$tmp/b" "$1" <<'EOF'
import json, sys
try:
    d = json.load(open(sys.argv[1]))
    print(json.dumps(eval(sys.argv[2], {"d": d}), separators=(",", ":")))
except Exception as e:
    print("ERROR: %s: %s" % (type(e).__name__, e))
EOF
}

# metric NAME{LABELS} [FILE] — the value of one sample of $URL/metrics, or
# of a scrape saved in FILE by snap (empty when the series is not there).
metric() {
  if [ $# -ge 2 ]; then cat "$2"; else curl -s --max-time 10 "$URL/metrics"; fi |
    awk -v s="$1" 'substr($0, 1, length(s) + 1) == s " " { print $2; exit }'
}

# reloads_are N — whether N config reloads have succeeded (for waitfor,
# which must scrape again on each try).
reloads_are() {
  [ "$(metric 'sluice_config_reloads_total{result="success"}')" = "$1" ]
}

# reload_away NAME CONFIG — rewrites CONFIG (the file daemon NAME was
# started with) to another domain's rules, so that a reload frees the old
# ones, and reloads NAME: checks its first reload succeeded.
reload_away() {
  cat >"$2" <<'EOF_AWAY'
domain: other
descriptors:
  - key: user
    rate_limit: {policy: "gcra:1/s"}
EOF_AWAY
  sv_signal "$1" HUP
  waitfor 100 reloads_are 1
  eq "reload while held: the reload succeeded" 0 $?
}

# snap FILE — saves a scrape of $URL/metrics in FILE.
snap() { curl -s --max-time 10 "$URL/metrics" >"$1"; }

# mdelta NAME{LABELS} BEFORE AFTER — how much a sample moved between two snaps.
mdelta() { echo $(($(metric "$1" "$3") - $(metric "$1" "$2"))); }

# ---------------------------------------------------------------------------
# checks

# eq NAME WANT GOT
eq() {
  if [ "$2" = "$3" ]; then pass; else fail "$1: got '$3', want '$2'"; fi
}

# like NAME ERE GOT
like() {
  if printf '%s\n' "$3" | grep -Eq -- "$2"; then pass; else
    fail "$1: '$3' does not match /$2/"
  fi
}

# want_code NAME CODE — the last response's status.
want_code() {
  if [ "$code" = "$2" ]; then pass; else
    fail "$1: HTTP $code, want $2 (body: $(head -c 300 "$tmp/b"))"
  fi
}

# want_hdr NAME HEADER VALUE — the header is there with exactly VALUE.
want_hdr() {
  _v=$(hdr "$2")
  if [ "$(hdr_count "$2")" -ge 1 ] && [ "$_v" = "$3" ]; then pass; else
    fail "$1: header $2 is '$_v' ($(hdr_count "$2") of them), want '$3'"
  fi
}

# want_hdr_like NAME HEADER ERE
want_hdr_like() {
  _v=$(hdr "$2")
  if [ "$(hdr_count "$2")" -ge 1 ] && printf '%s\n' "$_v" | grep -Eq -- "$3"; then
    pass
  else
    fail "$1: header $2 is '$_v' ($(hdr_count "$2") of them), want /$3/"
  fi
}

# no_hdr NAME HEADER — the last response has no such header.
no_hdr() {
  if [ "$(hdr_count "$2")" -eq 0 ]; then pass; else
    fail "$1: unexpected header $2: $(hdr "$2")"
  fi
}

# body_has NAME STRING — the last body contains STRING (fixed string).
body_has() {
  if grep -qF -- "$2" "$tmp/b"; then pass; else
    fail "$1: body lacks '$2' (body: $(head -c 300 "$tmp/b"))"
  fi
}

# want_jv NAME EXPR WANT — jv EXPR prints WANT.
want_jv() {
  _v=$(jv "$2")
  if [ "$_v" = "$3" ]; then pass; else
    fail "$1: $2 = $_v, want $3 (body: $(head -c 300 "$tmp/b"))"
  fi
}

# in_range NAME LO HI VALUE — LO <= VALUE <= HI (integers).
in_range() {
  if [ -n "$4" ] && [ "$4" -ge "$2" ] 2>/dev/null && [ "$4" -le "$3" ]; then
    pass
  else
    fail "$1: '$4' is not in $2..$3"
  fi
}

# rl_item HEADER NAME — the item for NAME in a RateLimit or RateLimit-Policy
# header of the last response ('"NAME";r=R;t=T').
rl_item() {
  hdr "$1" | tr ',' '\n' | sed 's/^ *//' | grep -F "\"$2\";" | head -n 1
}

# want_error NAME CODE — an error response: CODE, JSON {"error": "..."}.
want_error() {
  want_code "$1" "$2"
  # The whole body: {"error":"..."} (a JSON string: escapes, no raw quote).
  if [ "$(grep -c '' "$tmp/b")" -eq 1 ] &&
    grep -Eq '^\{"error":"([^"\\]|\\.)+"\}$' "$tmp/b"; then
    pass
  else
    fail "$1: body is not {\"error\": \"...\"}: $(head -c 300 "$tmp/b")"
  fi
  want_hdr_like "$1 (content type)" content-type '^application/json'
}
