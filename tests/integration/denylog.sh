#!/bin/sh
# denylog.sh — who is being limited (issue 17, part 1; POSIX sh, curl,
# redis-cli, python3; helpers in serve_lib.sh):
#
#   SLUICE=build/sluice sh tests/integration/denylog.sh
#
#   - the denial log: every line parses as JSON with the fields the docs
#     list (time, domain, rule, descriptor, client, policy, remaining,
#     retry_after_ms, mode), enforced and shadow denials told apart, an
#     ad-hoc key's line too; SIGUSR1 after a logrotate-style rename opens a
#     new file and the old one keeps what was written before;
#   - the log's own limit (--denial-log-limit) writes at most its burst of
#     a flood and counts the rest as dropped; --log-denials samples;
#   - lines made on the log's writer from the workers' records keep every
#     value byte for byte (quotes, backslashes, control bytes, UTF-8)
#     through a 4 KiB queue that wraps many times; what it cannot hold is
#     dropped and counted, never cut;
#   - --denial-log-values hash shows a keyed hash, the same under the same
#     secret after a restart, and never the value; redact shows none;
#   - top keys: under a mixed load, the flooding key comes first by
#     decisions and by denials (GET /v1/top, SL.TOP) and
#     sluice_top_key_share says its share; bad arguments get a 400.
# Every load is bounded in count; every wait is a bounded poll.

. "$(dirname "$0")/serve_lib.sh"
lib_tools="$lib_tools redis-cli"
lib_init denylog

# Sliding logs over an hour: no window boundary that a slow run could
# cross between a key's requests (a minute's fixed window, crossed, let
# a request through that the checks count as denied).
cat >"$tmp/api.yaml" <<'YAML'
domain: api
descriptors:
  - key: user
    rate_limit: {policy: "sliding_log:3/h"}
  - key: shadow
    shadow_mode: true
    rate_limit: {policy: "sliding_log:1/h"}
YAML

# load URL PATH... — GETs each path on one keep-alive connection; prints
# how many answered 429.
cat >"$tmp/load.py" <<'PY'
import http.client, sys
base = sys.argv[1].replace("http://", "")
host, port = base.split(":")
c = http.client.HTTPConnection(host, int(port), timeout=10)
denied = 0
for path in sys.stdin.read().split():
    c.request("GET", path)
    r = c.getresponse()
    r.read()
    denied += r.status == 429
print(denied)
PY
load() { "$PY" "$tmp/load.py" "$URL"; }

# lines FILE — how many lines FILE has (0 when it is not there).
lines() { if [ -f "$1" ]; then grep -c '' "$1"; else echo 0; fi; }
has_lines() { [ "$(lines "$1")" -ge "$2" ]; }

# metric NAME-WITH-LABELS — its value in /metrics.
metric() {
  curl -s --max-time 10 "$URL/metrics" |
    awk -v m="$1" '$1 == m { print $2; exit }'
}

# checkjson FILE PYTHON-EXPR — every line of FILE is JSON and the
# expression (over `ls`, the parsed lines) holds; prints why not.
checkjson() {
  "$PY" - "$1" "$2" <<'PY'
import json, sys
ls = []
for n, raw in enumerate(open(sys.argv[1]), 1):
    try:
        ls.append(json.loads(raw))
    except ValueError as e:
        print("line %d is not JSON (%s): %r" % (n, e, raw[:200]))
        sys.exit(1)
ok = eval("(" + sys.argv[2].strip() + ")")
if not ok:
    print("does not hold: %s; lines: %s" % (sys.argv[2], ls[:4]))
    sys.exit(1)
PY
}

# ---- the log's lines ----
sv_start plain -c "$tmp/api.yaml" --threads 2 --denial-log "$tmp/d.log"
for i in 1 2 3 4 5; do echo "/v1/check?domain=api&user=alice"; done | load >/dev/null
for i in 1 2; do echo "/v1/check?domain=api&shadow=s1"; done | load >/dev/null
redis-cli -p "$RESP" SL.THROTTLE k1 token_bucket:1/m >/dev/null
redis-cli -p "$RESP" SL.THROTTLE k1 token_bucket:1/m >/dev/null
redis-cli -p "$RESP" SL.CHECK api user carol >/dev/null
if waitfor 50 has_lines "$tmp/d.log" 4; then pass; else
  fail "denial log: 4 lines expected, got: $(cat "$tmp/d.log" 2>&1)"
fi
why=$(checkjson "$tmp/d.log" '
  len(ls) == 4
  and all(set(l) >= {"time", "domain", "rule", "client", "policy",
                     "limit", "remaining", "retry_after_ms", "mode"}
          for l in ls)
  and [l["descriptor"] for l in ls if l["rule"] == "api.user"]
      == [{"user": "alice"}, {"user": "alice"}]
  and all(l["mode"] == "enforced" and l["remaining"] == 0
          and l["retry_after_ms"] > 0 and l["client"] == "127.0.0.1"
          and l["policy"] == "sliding_log:3/h" and l["domain"] == "api"
          and l["time"].endswith("Z")
          for l in ls if l["rule"] == "api.user")
  and [l["mode"] for l in ls if l["rule"] == "api.shadow"] == ["shadow"]
  and [l["key"] for l in ls if l["rule"] is None] == ["k1"]') &&
  pass || fail "denial log lines: $why"

# logrotate: rename, then SIGUSR1; new denials go to a new file.
mv "$tmp/d.log" "$tmp/d.log.1"
sv_signal plain USR1
waitfor 50 test -f "$tmp/d.log" && pass || fail "SIGUSR1: no new $tmp/d.log"
for i in 1 2; do echo "/v1/check?domain=api&user=alice"; done | load >/dev/null
if waitfor 50 has_lines "$tmp/d.log" 2; then pass; else
  fail "after SIGUSR1: 2 lines expected in the new file: $(cat "$tmp/d.log")"
fi
[ "$(lines "$tmp/d.log.1")" -eq 4 ] && pass ||
  fail "after SIGUSR1: the old file changed: $(lines "$tmp/d.log.1") lines"
grep -q 'opened again' "$LOG" && pass || fail "SIGUSR1 was not logged"
# Every thread but the main one blocks SIGHUP, SIGINT, SIGUSR1 and SIGTERM
# (bits 1, 2, 10, 15 of SigBlk: 0x4203), the log's writer included: a
# thread that does not would take such a signal whenever the main thread
# is busy, and its default action ends the daemon (logrotate's SIGUSR1
# killed it). The main thread waits for them in sigtimedwait.
if [ -d "/proc/$PID/task" ]; then
  open=""
  for t in /proc/"$PID"/task/*; do
    [ "${t##*/}" = "$PID" ] && continue
    blk=$(awk '$1 == "SigBlk:" { print $2 }' "$t/status" 2>/dev/null) || continue
    [ -n "$blk" ] || continue
    [ $((0x$blk & 0x4203)) -eq $((0x4203)) ] || open="$open ${t##*/}:$blk"
  done
  [ -z "$open" ] && pass ||
    fail "threads that do not block the daemon's signals:$open"
fi

# ---- top keys under a mixed load ----
# 600 requests: one in three is mallory's, the rest spread over 200 users.
"$PY" -c '
for i in range(600):
    u = "mallory" if i % 3 == 0 else "u%d" % (i * 7 % 200)
    print("/v1/check?domain=api&user=" + u)' | load >/dev/null
get "$URL/v1/top?rule=api.user&n=3"
why=$("$PY" - "$tmp/b" <<'PY'
import json, sys
t = json.load(open(sys.argv[1]))
d, x = t["by_decisions"], t["by_denials"]
ok = (t["rule"] == "api.user" and d[0]["key"] == "user=mallory"
      and d[0]["count"] >= 200 and x[0]["key"] == "user=mallory"
      and len(d) == 3 and t["decisions"] >= 600
      and d[0]["count"] - d[0]["error"] <= 200 + 5 + 2)
print("" if ok else t)
PY
)
[ "$code" = 200 ] && [ -z "$why" ] && pass || fail "GET /v1/top: $code $why"
first=$(redis-cli -p "$RESP" SL.TOP api.user 2 | head -1)
[ "$first" = "user=mallory" ] && pass || fail "SL.TOP: first '$first'"
first=$(redis-cli -p "$RESP" SL.TOP api.user 1 DENIALS | head -1)
[ "$first" = "user=mallory" ] && pass || fail "SL.TOP DENIALS: '$first'"
share=$(metric 'sluice_top_key_share{rule="api.user"}')
awk -v s="${share:-0}" 'BEGIN { exit !(s > 0.25 && s <= 0.4) }' && pass ||
  fail "sluice_top_key_share: '$share', want about 1/3"
get "$URL/v1/top"
grep -q '"rule":"api.user"' "$tmp/b" && pass || fail "GET /v1/top: $(cat "$tmp/b")"
get "$URL/v1/top?rule=api.user&n=0"
[ "$code" = 400 ] && pass || fail "GET /v1/top n=0: $code"
out=$(redis-cli -p "$RESP" SL.TOP api.user x 2>&1)
case "$out" in *"ERR n must be"*) pass ;; *) fail "SL.TOP bad n: $out" ;; esac
sv_stop plain

# ---- the log's own limit, and sampling ----
sv_start limited -c "$tmp/api.yaml" --denial-log "$tmp/l.log" \
  --denial-log-limit token_bucket:5/h
"$PY" -c 'print("/v1/check?domain=api&user=flood\n" * 53)' | load >/dev/null
waitfor 50 has_lines "$tmp/l.log" 5
sleep 0.3
n=$(lines "$tmp/l.log")
[ "$n" -eq 5 ] && pass || fail "--denial-log-limit 5/h: $n lines of 50 denials"
dropped=$(metric 'sluice_denial_log_dropped_total{reason="rate_limited"}')
[ "$dropped" = 45 ] && pass || fail "dropped (rate_limited): '$dropped', want 45"
sv_stop limited
# sliding_log's state lives in a store (the other algorithms' in the log):
# the same bound through that path.
sv_start slog -c "$tmp/api.yaml" --denial-log "$tmp/sl.log" \
  --denial-log-limit sliding_log:3/h
"$PY" -c 'print("/v1/check?domain=api&user=flood\n" * 53)' | load >/dev/null
waitfor 50 has_lines "$tmp/sl.log" 3
sleep 0.3
n=$(lines "$tmp/sl.log")
[ "$n" -eq 3 ] && pass || fail "--denial-log-limit sliding_log:3/h: $n lines of 50 denials"
dropped=$(metric 'sluice_denial_log_dropped_total{reason="rate_limited"}')
[ "$dropped" = 47 ] && pass || fail "sliding_log: dropped '$dropped', want 47"
sv_stop slog

sv_start sampled -c "$tmp/api.yaml" --denial-log "$tmp/s.log" \
  --log-denials 0.2
"$PY" -c 'print("/v1/check?domain=api&user=s\n" * 503)' | load >/dev/null
sleep 0.5
n=$(lines "$tmp/s.log")
# 500 denials at 0.2: 100 expected; 50..150 is over 7 standard deviations.
[ "$n" -ge 50 ] && [ "$n" -le 150 ] && pass || fail "--log-denials 0.2: $n lines of 500"
sv_stop sampled

# ---- the queue: records that wrap, values that need escaping ----
# 100 values of 0 to ~900 bytes with every kind of byte JSON escapes, each
# asked 4 times over RESP (user: 3/h, so one denial each): ~55 KB of
# records through the smallest queue (4 KiB). Each line written is JSON
# whose value is the one sent, byte for byte; the rest are counted as
# dropped for a full queue; none is lost otherwise.
sv_start ring -c "$tmp/api.yaml" --denial-log "$tmp/q.log" \
  --denial-log-buffer 4096 --denial-log-limit token_bucket:1000000/s
cat >"$tmp/ring.py" <<'PY'
import json, socket, sys, time
def value(i):
    return ("x%d \"q\" \\b \x01\x1f\t\n é€ " % i) + "p" * (i * 37 % 900)
if sys.argv[1] == "send":
    # A value at a time (its 4 commands, then their 4 replies), paced, so
    # that the writer keeps up and the records wrap the queue many times.
    s = socket.create_connection(("127.0.0.1", int(sys.argv[2])), timeout=10)
    for i in range(100):
        v = value(i).encode()
        cmd = b"*4\r\n$8\r\nSL.CHECK\r\n$3\r\napi\r\n$4\r\nuser\r\n"
        s.sendall((cmd + b"$%d\r\n%s\r\n" % (len(v), v)) * 4)
        got = b""
        while got.count(b"*") < 4 or not got.endswith(b"\r\n"):
            b = s.recv(1 << 16)
            if not b:
                sys.exit("the connection closed")
            got += b
        time.sleep(0.005)
else:
    sent = {value(i) for i in range(100)}
    n = 0
    for raw in open(sys.argv[2], encoding="utf-8"):
        l = json.loads(raw)
        if l["descriptor"]["user"] not in sent:
            print("a value that was not sent: %r" % l["descriptor"]["user"][:80])
            sys.exit(1)
        n += 1
    print(n)
PY
"$PY" "$tmp/ring.py" send "$RESP"
waitfor 50 sh -c "[ \$(grep -c '' '$tmp/q.log' 2>/dev/null || echo 0) -ge 1 ]"
sleep 0.5
written=$("$PY" "$tmp/ring.py" check "$tmp/q.log") && pass ||
  fail "the queue's lines: $written"
full=$(metric 'sluice_denial_log_dropped_total{reason="queue_full"}')
[ "$((written + full))" -eq 100 ] && pass ||
  fail "100 denials: $written written + $full dropped (queue full)"
[ "$written" -ge 4 ] && pass || fail "only $written lines written"
echo "denylog: a 4 KiB queue: $written lines written, $full dropped"
sv_stop ring

# ---- hashed and redacted values ----
printf 'a secret of more than sixteen bytes\n' >"$tmp/secret"
hashed() { # NAME: one denial of user=alice, its shown value
  sv_start "$1" -c "$tmp/api.yaml" --denial-log "$tmp/$1.log" \
    --denial-log-values hash --denial-log-secret "$tmp/secret"
  for i in 1 2 3 4; do echo "/v1/check?domain=api&user=alice"; done | load >/dev/null
  waitfor 50 has_lines "$tmp/$1.log" 1
  sv_stop "$1"
  "$PY" -c 'import json,sys; print(json.loads(open(sys.argv[1]).readline())["descriptor"]["user"])' "$tmp/$1.log"
}
h1=$(hashed hash1)
h2=$(hashed hash2)
case "$h1" in h:????????????????) pass ;; *) fail "hash: '$h1'" ;; esac
[ "$h1" = "$h2" ] && pass || fail "hash: not stable under one secret: $h1 $h2"
grep -q alice "$tmp/hash1.log" && fail "hash: the value leaked" || pass

sv_start redacted -c "$tmp/api.yaml" --denial-log "$tmp/r.log" \
  --denial-log-values redact
for i in 1 2 3 4; do echo "/v1/check?domain=api&user=alice"; done | load >/dev/null
waitfor 50 has_lines "$tmp/r.log" 1
why=$(checkjson "$tmp/r.log" 'ls[0]["descriptor"] == {"user": "[redacted]"}
  and ls[0]["client"] == "[redacted]"') && pass || fail "redact: $why"
get "$URL/v1/top?rule=api.user"
grep -q alice "$tmp/b" && fail "redact: top keys show the value" || pass
sv_stop redacted

# ---- bad options ----
expect_cmd "--log-denials 2" 2 "not a share from 0 to 1" \
  "$SLUICE" serve --log-denials 2
expect_cmd "--denial-log-values" 2 "expected plain, hash or redact" \
  "$SLUICE" serve --denial-log-values md5
expect_cmd "--denial-log-limit" 1 "denial-log-limit 'nope'" \
  "$SLUICE" serve --http 127.0.0.1:0 --resp off --denial-log-limit nope \
  --denial-log "$tmp/x.log"
lib_finish
