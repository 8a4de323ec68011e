#!/bin/sh
# run.sh — `make run`: the daemon on the embedded default config.
#
# Domain "default", descriptor "key": each value gets its own counter at
# sliding_window:100/m. HTTP on 127.0.0.1:8080, the Redis protocol on
# 127.0.0.1:6390, envoy's gRPC service on 127.0.0.1:8081, the page at /ui/ (set
# SLUICE_HTTP / SLUICE_RESP to move the first two; port 0 picks
# a free one). Ctrl-C stops.
#
# What to try is printed once the daemon listens, with the addresses it
# bound (its --ready-file), so a daemon that cannot start says why first
# and a port 0 shows as the port it got.
set -eu
SLUICE=${SLUICE:-build/sluice}
HTTP=${SLUICE_HTTP:-127.0.0.1:8080}
RESP=${SLUICE_RESP:-127.0.0.1:6390}
ready=$(mktemp -u "${TMPDIR:-/tmp}/sluice-ready.XXXXXX")

# In the background: wait for the ready file (while the daemon, which this
# shell becomes below, runs), then print what to try.
(
  while [ ! -f "$ready" ]; do
    kill -0 $$ 2>/dev/null || exit 0
    sleep 0.1
  done
  http=$(sed -n 's/.*"http": "\([^"]*\)".*/\1/p' "$ready")
  resp=$(sed -n 's/.*"resp": "[^"]*:\([0-9]*\)".*/\1/p' "$ready")
  grpc=$(sed -n 's/.*"grpc": "\([^"]*\)".*/\1/p' "$ready")
  echo
  echo "sluice serve: 100 requests per minute per key (sliding window), on the"
  echo "embedded default config. Try, from another terminal:"
  echo
  if [ -n "$http" ]; then
    echo "  curl -i 'http://$http/v1/check?domain=default&key=alice'"
    echo "  curl -i 'http://$http/v1/throttle?key=bob&policy=gcra:5/s:burst=10'"
  fi
  [ -z "$resp" ] || echo "  redis-cli -p $resp CL.THROTTLE user1 15 30 60"
  [ -z "$http" ] || echo "  curl -s http://$http/metrics | grep sluice_rule"
  [ -z "$grpc" ] || echo "  (envoy's rate limit service over gRPC: $grpc)"
  if [ -n "$http" ]; then
    echo
    echo "Or open http://$http/ui/ in a browser: the simulator, and a live view"
    echo "of this daemon."
  fi
  echo
  echo "Ctrl-C stops it (in-flight requests finish first)."
  echo
) &
exec "$SLUICE" serve --http "$HTTP" --resp "$RESP" --ready-file "$ready"
