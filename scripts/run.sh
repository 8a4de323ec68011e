#!/bin/sh
# run.sh — `make run`: the daemon on the embedded default config.
#
# Domain "default", descriptor "key": each value gets its own counter at
# sliding_window:100/m. HTTP on 127.0.0.1:8080, the Redis protocol on
# 127.0.0.1:6390 (set SLUICE_HTTP / SLUICE_RESP to move them). Ctrl-C stops.
set -eu
SLUICE=${SLUICE:-build/sluice}
HTTP=${SLUICE_HTTP:-127.0.0.1:8080}
RESP=${SLUICE_RESP:-127.0.0.1:6390}
cat <<EOT
sluice serve: 100 requests per minute per key (sliding window), on the
embedded default config. Try, from another terminal:

  curl -i 'http://$HTTP/v1/check?domain=default&key=alice'
  curl -i 'http://$HTTP/v1/throttle?key=bob&policy=gcra:5/s:burst=10'
  redis-cli -p ${RESP##*:} CL.THROTTLE user1 15 30 60
  curl -s http://$HTTP/metrics | grep sluice_rule

Ctrl-C stops it (in-flight requests finish first).

EOT
exec "$SLUICE" serve --http "$HTTP" --resp "$RESP"
