#!/bin/sh
# serve_nginx.sh — sluice behind nginx's auth_request (POSIX sh; nginx,
# curl; helpers in serve_lib.sh).
#
#   SLUICE=build/sluice sh tests/integration/serve_nginx.sh  (make integration)
#
# nginx runs as an unprivileged foreground process with its own prefix,
# config, temp and log files in a temp directory, on a free loopback port.
# Before a static location it asks sluice (--deny-status 403: auth_request
# passes 2xx, returns 401/403 as they are, and turns any other status into
# a 500) whether the client may proceed, keyed by the client's address.
# The clients see 200s, then 403s; the RateLimit headers reach them; a
# second location turns the 403 into a 429 with error_page.
#
# The nginx snippet (the whole config is written below):
#
#   location / {
#     auth_request /_ratelimit;
#     auth_request_set $rl  $upstream_http_ratelimit;
#     auth_request_set $rlp $upstream_http_ratelimit_policy;
#     auth_request_set $ra  $upstream_http_retry_after;
#     add_header RateLimit $rl always;
#     add_header RateLimit-Policy $rlp always;
#     add_header Retry-After $ra always;
#   }
#   location = /_ratelimit {
#     internal;
#     proxy_pass http://sluice/v1/check?domain=edge&remote_address=$remote_addr;
#     proxy_pass_request_body off;
#     proxy_set_header Content-Length "";
#     proxy_http_version 1.1;            # keep-alive to sluice (upstream
#     proxy_set_header Connection "";    # block with `keepalive`)
#   }
#   # 403 -> 429 for the clients:
#   location /api/ {
#     auth_request /_ratelimit_api;  (auth_request_set, add_header as above)
#     error_page 403 =429 /_too_many;
#   }
#   location = /_too_many {
#     internal;
#     add_header RateLimit $rl always;  add_header Retry-After $ra always;
#     return 429 '{"error":"too many requests"}';
#   }

. "$(dirname "$0")/serve_lib.sh"
lib_init serve_nginx
NGINX=${NGINX:-$(command -v nginx || echo /usr/sbin/nginx)}
if [ ! -x "$NGINX" ]; then
  echo "serve_nginx: nginx is missing (scripts/deps.sh test installs it)" >&2
  exit 1
fi

# One rule for the site, one for the API: each client address its own
# counter.
cat >"$tmp/edge.yaml" <<'EOF'
domain: edge
descriptors:
  - key: remote_address
    rate_limit: {policy: "sliding_log:3/h"}
  - key: route
    value: api
    descriptors:
      - key: remote_address
        rate_limit: {policy: "sliding_log:2/h"}
EOF
sv_start s -t 2 --config "$tmp/edge.yaml" --deny-status 403 || lib_finish
SPORT=$HTTP

ng=$tmp/nginx
mkdir -p "$ng/html/api" "$ng/tmp" "$ng/logs"
echo 'hello' >"$ng/html/index.html"
echo 'api' >"$ng/html/api/index.html"

# nginx_conf PORT — the whole config.
nginx_conf() {
  cat >"$ng/nginx.conf" <<EOF
daemon off;
master_process off;
worker_processes 1;
error_log $ng/logs/error.log info;
pid $ng/nginx.pid;
events { worker_connections 64; }
http {
  access_log $ng/logs/access.log;
  client_body_temp_path $ng/tmp/body;
  proxy_temp_path $ng/tmp/proxy;
  fastcgi_temp_path $ng/tmp/fastcgi;
  uwsgi_temp_path $ng/tmp/uwsgi;
  scgi_temp_path $ng/tmp/scgi;
  default_type text/plain;
  upstream sluice {
    server 127.0.0.1:$SPORT;
    keepalive 4;
  }
  server {
    listen 127.0.0.1:$1;
    root $ng/html;
    location = /ping { return 200 "pong\n"; }
    location / {
      auth_request /_ratelimit;
      auth_request_set \$rl \$upstream_http_ratelimit;
      auth_request_set \$rlp \$upstream_http_ratelimit_policy;
      auth_request_set \$ra \$upstream_http_retry_after;
      add_header RateLimit \$rl always;
      add_header RateLimit-Policy \$rlp always;
      add_header Retry-After \$ra always;
    }
    location /api/ {
      auth_request /_ratelimit_api;
      auth_request_set \$rl \$upstream_http_ratelimit;
      auth_request_set \$ra \$upstream_http_retry_after;
      add_header RateLimit \$rl always;
      add_header Retry-After \$ra always;
      error_page 403 =429 /_too_many;
    }
    location = /_too_many {
      internal;
      default_type application/json;
      add_header RateLimit \$rl always;
      add_header Retry-After \$ra always;
      return 429 '{"error":"too many requests"}';
    }
    location = /_ratelimit {
      internal;
      proxy_pass http://sluice/v1/check?domain=edge&remote_address=\$remote_addr;
      proxy_pass_request_body off;
      proxy_set_header Content-Length "";
      proxy_http_version 1.1;
      proxy_set_header Connection "";
    }
    location = /_ratelimit_api {
      internal;
      proxy_pass http://sluice/v1/check?domain=edge&route=api&remote_address=\$remote_addr;
      proxy_pass_request_body off;
      proxy_set_header Content-Length "";
      proxy_http_version 1.1;
      proxy_set_header Connection "";
    }
  }
}
EOF
}

# A free port: the kernel picks one, nginx binds it; another process may
# take it in between, then nginx fails to bind and we try another.
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
if [ -z "$ngpid" ]; then
  fail "nginx did not start; its error log:"
  tail -n 20 "$ng/logs/error.log" | sed 's/^/    /' >&2
  lib_finish
fi
NG=http://127.0.0.1:$NGPORT

# sliding_log:3/h for 127.0.0.1: three 200s (remaining 2, 1, 0), then 403.
i=1
for r in 2 1 0; do
  get "$NG/index.html"
  want_code "nginx: request $i is served" 200
  eq "nginx: request $i: the page" hello "$(cat "$tmp/b")"
  want_hdr "nginx: request $i: RateLimit reaches the client" RateLimit \
    "\"edge.remote_address\";r=$r;t=3600"
  want_hdr "nginx: request $i: RateLimit-Policy reaches the client" \
    RateLimit-Policy '"edge.remote_address";q=3;w=3600'
  no_hdr "nginx: request $i: no Retry-After" Retry-After
  i=$((i + 1))
done
for i in 4 5; do
  get "$NG/index.html"
  want_code "nginx: request $i is forbidden by sluice's 403" 403
  like "nginx: request $i: not the page" '403 Forbidden' "$(cat "$tmp/b")"
  want_hdr_like "nginx: request $i: RateLimit on the denial" RateLimit \
    '^"edge.remote_address";r=0;t=[0-9]+$'
  want_hdr_like "nginx: request $i: Retry-After on the denial" Retry-After \
    '^[0-9]+$'
  in_range "nginx: request $i: Retry-After within the hour" 3000 3600 \
    "$(hdr Retry-After)"
done

# /api/: its own rule (2/h), and the 403 becomes a 429 for the client.
for i in 1 2; do
  get "$NG/api/index.html"
  want_code "nginx /api/: request $i is served" 200
  eq "nginx /api/: request $i: the page" api "$(cat "$tmp/b")"
  want_hdr "nginx /api/: request $i: RateLimit" RateLimit \
    "\"edge.route_api.remote_address\";r=$((2 - i));t=3600"
done
get "$NG/api/index.html"
want_code "nginx /api/: request 3: error_page 403 =429" 429
eq "nginx /api/: the 429 body" '{"error":"too many requests"}' "$(cat "$tmp/b")"
want_hdr_like "nginx /api/: RateLimit on the 429" RateLimit \
  '^"edge.route_api.remote_address";r=0;t=[0-9]+$'
want_hdr_like "nginx /api/: Retry-After on the 429" Retry-After '^[0-9]+$'
get "$NG/ping"
want_code "nginx: a location without auth_request is not limited" 200

# sluice saw every decision, keyed by nginx's $remote_addr.
URL=http://127.0.0.1:$SPORT
r='sluice_rule_decisions_total{domain="edge",rule="edge.remote_address",result='
eq "sluice: 3 allowed through nginx" 3 "$(metric "$r\"allowed\"}")"
eq "sluice: 2 denied through nginx" 2 "$(metric "$r\"denied\"}")"
get "$URL/admin/inspect?domain=edge&remote_address=127.0.0.1"
want_jv "sluice: the key is nginx's \$remote_addr" \
  '[d["statuses"][0]["rule"], d["statuses"][0]["limit_remaining"]]' \
  '["edge.remote_address",0]'
if grep -E '\[(error|crit|alert|emerg)\]' "$ng/logs/error.log" >"$tmp/ngerr"; then
  fail "nginx: errors in its log: $(head -n 2 "$tmp/ngerr" | tr '\n' ' ')"
else
  pass
fi

kill -TERM "$ngpid"
waitfor 100 sh -c "! kill -0 $ngpid 2>/dev/null"
wait "$ngpid"
eq "nginx: exit status after SIGTERM" 0 $?
sv_stop s
lib_finish
