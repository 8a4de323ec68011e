#!/bin/sh
# serve_wait.sh — the wait mode (docs/server.md, "Wait mode"): a leaky
# bucket that smooths behind a reverse proxy (POSIX sh; nginx, curl,
# python3; helpers in serve_lib.sh).
#
#   SLUICE=build/sluice sh tests/integration/serve_wait.sh  (make integration)
#
# The proof of the issue: 100 requests sent at once through nginx's
# auth_request, whose subrequest asks /v1/check?...&wait=1 under
# leaky_bucket:10/s:burst=100, reach the backend (a Python server that
# records arrival times) 100 ms apart: the median gap within 2%, 80% of
# arrivals within 10 ms of a 100 ms grid, 75% of the gaps within
# ±10%, the whole span 9.9 s within 5%. Then the bounds: max_wait denies
# with Retry-After and charges nothing; --max-waiting refuses with 503;
# a client that leaves frees its place; /metrics counts it all.

. "$(dirname "$0")/serve_lib.sh"
lib_init serve_wait
NGINX=${NGINX:-$(command -v nginx || echo /usr/sbin/nginx)}
if [ ! -x "$NGINX" ]; then
  echo "serve_wait: nginx is missing (scripts/deps.sh test installs it)" >&2
  exit 1
fi
here=$(dirname "$0")

cat >"$tmp/edge.yaml" <<'EOF2'
domain: edge
descriptors:
  - key: remote_address
    rate_limit: {policy: "leaky_bucket:10/s:burst=100", max_wait: 15s}
  - key: route
    value: short
    rate_limit: {policy: "leaky_bucket:1/m:burst=100", max_wait: 10s}
  - key: slow
    rate_limit: {policy: "leaky_bucket:1/s:burst=5", max_wait: 15s}
EOF2
sv_start s -t 2 --config "$tmp/edge.yaml" --max-wait 20000 \
  --http-timeout 30000 --deny-status 403 || lib_finish
SPORT=$HTTP

# The backend: arrival times, one per line.
"$PY" "$here/wait_backend.py" "$tmp/bport" "$tmp/arrivals" 120 &
lib_track $!
waitfor 100 test -f "$tmp/bport" || { fail "the backend did not start"; lib_finish; }
BPORT=$(cat "$tmp/bport")

ng=$tmp/nginx
mkdir -p "$ng/tmp" "$ng/logs"
nginx_conf() {
  cat >"$ng/nginx.conf" <<EOF2
daemon off;
master_process off;
worker_processes 1;
error_log $ng/logs/error.log info;
pid $ng/nginx.pid;
events { worker_connections 1024; }
http {
  access_log off;
  client_body_temp_path $ng/tmp/body;
  proxy_temp_path $ng/tmp/proxy;
  fastcgi_temp_path $ng/tmp/fastcgi;
  uwsgi_temp_path $ng/tmp/uwsgi;
  scgi_temp_path $ng/tmp/scgi;
  upstream sluice { server 127.0.0.1:$SPORT; keepalive 16; }
  server {
    listen 127.0.0.1:$1;
    location = /ping { return 200 "pong\n"; }
    location / {
      auth_request /_ratelimit;
      proxy_pass http://127.0.0.1:$BPORT;
    }
    location = /_ratelimit {
      internal;
      proxy_pass http://sluice/v1/check?domain=edge&remote_address=\$remote_addr&wait=1;
      proxy_pass_request_body off;
      proxy_set_header Content-Length "";
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_read_timeout 60s;
    }
  }
}
EOF2
}
_ng_up() {
  [ "$(curl -s --max-time 2 "http://127.0.0.1:$NGPORT/ping")" = pong ]
}
ngpid=""
for attempt in 1 2 3 4 5; do
  NGPORT=$("$PY" -S -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  nginx_conf "$NGPORT"
  "$NGINX" -p "$ng" -c "$ng/nginx.conf" -e "$ng/logs/error.log" \
    </dev/null >"$ng/logs/stdout" 2>&1 &
  ngpid=$!
  lib_track $ngpid
  if waitfor 100 _ng_up; then break; fi
  kill "$ngpid" 2>/dev/null
  wait "$ngpid" 2>/dev/null
  ngpid=""
done
[ -n "$ngpid" ] || { fail "nginx did not start"; lib_finish; }

# 100 at once through nginx.
"$PY" "$here/wait_burst.py" "http://127.0.0.1:$NGPORT/x" 100 40 >"$tmp/codes"
eq "nginx+wait: all 100 are served" 100 "$(grep -c '^200$' "$tmp/codes")"
# The spacing, robustly: a machine under load may stall one arrival,
# which spoils two gaps but only that arrival's place on the grid. So:
# the median gap, the arrivals within 10 ms (10% of the spacing) of a
# 100 ms grid (placed by the median offset), most gaps, and the span.
"$PY" - "$tmp/arrivals" >"$tmp/spacing" 2>"$tmp/gaps" <<'EOF2'
import sys
t = sorted(float(x) * 1000 for x in open(sys.argv[1]))
gaps = [b - a for a, b in zip(t, t[1:])]
off = sorted(x - 100 * i for i, x in enumerate(t))[len(t) // 2]
on_grid = sum(1 for i, x in enumerate(t) if abs(x - off - 100 * i) <= 10)
within = sum(1 for g in gaps if 90 <= g <= 110)
print(len(t), on_grid, within, "%.0f" % (t[-1] - t[0]),
      "%.0f" % (sorted(gaps)[len(gaps) // 2] * 10))
print(" ".join("%.0f" % g for g in gaps), file=sys.stderr)
EOF2
read -r n on_grid within span median10 <"$tmp/spacing"
echo "    arrivals $n; on the 100 ms grid (±10 ms): $on_grid; gaps within" \
  "100 ms ±10%: $within of 99; span $span ms; median gap $median10/10 ms"
echo "    gaps (ms): $(cat "$tmp/gaps")"
eq "nginx+wait: the backend saw 100" 100 "$n"
in_range "nginx+wait: the median gap is 100 ms (±2%)" 980 1020 "$median10"
in_range "nginx+wait: >= 80% of arrivals on the grid (±10 ms; load may stall a few)" \
  80 100 "$on_grid"
in_range "nginx+wait: >= 75% of the gaps within ±10% (load may stall a few)" \
  75 99 "$within"
in_range "nginx+wait: the span is 9.9 s (±5%)" 9405 10395 "$span"

URL=http://127.0.0.1:$SPORT
# waiting_is N — whether sluice_waiting is N now (for waitfor, which must
# scrape again each try).
waiting_is() { [ "$(metric 'sluice_waiting')" = "$1" ]; }
eq "metrics: 99 answers were held" 99 "$(metric 'sluice_waits_total{result="served"}')"
eq "metrics: nothing is held now" 0 "$(metric 'sluice_waiting')"

# max_wait: 10 s for route=short (1/m), below --max-wait's 20 s. Three
# requests that do not wait take the slots at 0, 60 and 120 s (answered at
# once, as without wait mode); a 4th that waits would wait 180 s: denied
# with Retry-After (170 s: when the queue is short enough), charging
# nothing.
for i in 1 2 3; do
  get "$URL/v1/check?domain=edge&route=short"
done
get "$URL/v1/check?domain=edge&route=short&wait=1"
want_code "max_wait: a delay above it is denied" 403
in_range "max_wait: Retry-After is the excess" 165 171 "$(hdr Retry-After)"
get "$URL/admin/inspect?domain=edge&route=short"
want_jv "max_wait: the denied request charged nothing (3 queued)" \
  'd["statuses"][0]["limit_remaining"]' 97

# An ad-hoc request's own cap, and a bad one.
get "$URL/v1/throttle?key=c&policy=leaky_bucket:1/m:burst=5&wait=1"
want_code "throttle wait: the first goes at once" 200
get "$URL/v1/throttle?key=c&policy=leaky_bucket:1/m:burst=5&max_wait=200ms"
want_code "throttle max_wait: a 60 s delay is denied" 403
want_jv "throttle max_wait: retry_after is the excess" \
  '59000 <= d["retry_after_ms"] <= 59800' true
get "$URL/v1/throttle?key=c&policy=leaky_bucket:1/m:burst=5&wait=maybe"
want_code "wait=maybe is a 400" 400
get "$URL/v1/throttle?key=c&policy=leaky_bucket:1/m:burst=5&max_wait=soon"
want_code "max_wait=soon is a 400" 400
http GET "$URL/v1/throttle?key=d&policy=leaky_bucket:1/s:burst=5" -H 'Sluice-Wait: 1'
want_code "Sluice-Wait: 1 works as wait=1" 200

# A reload while an answer is held: it names the rule of its decision,
# whose configuration the reload frees (the answer is rendered when the
# hold starts; under ASan one rendered at its end read freed memory).
get "$URL/v1/check?domain=edge&slow=s"
curl -s -o "$tmp/held.json" --max-time 20 \
  "$URL/v1/check?domain=edge&slow=s&wait=1" &
held_pid=$!
# Held first, then the reload (a fixed sleep let a slow curl start arrive
# after the reload, at a domain no longer there: a 404, not the check).
waitfor 50 waiting_is 1
reload_away s "$tmp/edge.yaml"
wait $held_pid
cp "$tmp/held.json" "$tmp/b"
want_jv "reload while held: the held answer names its rule" \
  '[d["allowed"], d["statuses"][0]["rule"]]' '[true,"edge.slow"]'
sv_stop s

# --max-waiting: 2 held at most; the 3rd is refused with 503 at once. The
# holders' clients give up (curl --max-time 3) before their answers are
# due (4 and 8 s): h2o sees a closed connection only when it writes, so
# their places come back when the answers come due, within the cap.
sv_start m -t 1 --max-waiting 2 --max-wait 600000 || lib_finish
URL=http://127.0.0.1:$HTTP
P='key=m&policy=leaky_bucket:1/4s:burst=10&wait=1'
get "$URL/v1/throttle?$P"
curl -s -o /dev/null --max-time 3 "$URL/v1/throttle?$P" &
c1=$!
curl -s -o /dev/null --max-time 3 "$URL/v1/throttle?$P" &
c2=$!
waitfor 20 waiting_is 2
eq "max-waiting: 2 held" 2 "$(metric 'sluice_waiting')"
get "$URL/v1/throttle?$P"
want_code "max-waiting: the 3rd is refused" 503
want_hdr "max-waiting: with Retry-After" Retry-After 1
eq "max-waiting: counted as full" 1 "$(metric 'sluice_waits_total{result="full"}')"
wait "$c1" "$c2" # (not a bare wait: nginx and the backend run on)
waitfor 150 waiting_is 0
eq "max-waiting: the places come back when the answers are due" 0 \
  "$(metric 'sluice_waiting')"
sv_stop m
lib_finish
