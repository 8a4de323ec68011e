#!/bin/sh
# hardening_sockets.sh — what the kernel may hold for one connection of a
# client that sends and never reads (POSIX sh; python3 for the client,
# ss(8) from iproute2 to read the daemon's side; helpers in serve_lib.sh).
#
#   SLUICE=build/sluice sh tests/integration/hardening_sockets.sh
#
# Over HTTP and RESP (gRPC: grpc_h2.sh §3), a client writes pipelined
# requests for 2.5 s and never reads an answer: the daemon stops reading
# it once its answers back up, and the connection's receive and send
# buffers (ss's rb and tb, the daemon's side) stay within what every
# listening socket asks for its connections (LISTEN_SOCK_BUFFER: 128 KiB
# each way, doubled by the kernel), where Linux would grow them to
# tcp_rmem's and tcp_wmem's maximum (MiBs) otherwise. The daemon still
# answers others meanwhile, and the client's requests were decided.

. "$(dirname "$0")/serve_lib.sh"
lib_tools="$lib_tools ss redis-cli"
lib_init hardening_sockets

sv_start s -t 1 || lib_finish
for proto in resp http; do
  if [ $proto = resp ]; then port=$RESP; else port=$HTTP; fi
  "$PY" "$(dirname "$0")/sock_flood.py" "$port" $proto 2.5 >"$tmp/$proto.n" &
  flood=$!
  lib_track $flood
  sock_buffers "$port" $flood >"$tmp/$proto.max" &
  watch=$!
  sleep 1
  # (others are still answered while it floods)
  out=$(redis-cli -p "$RESP" SL.THROTTLE other gcra:10/s 1 | head -n 1)
  eq "$proto: another client answered meanwhile (allowed)" 1 "$out"
  wait $flood
  wait $watch
  set -- $(cat "$tmp/$proto.max")
  in_range "$proto: never reading: the daemon's socket rb at most 256 KiB" 1 262144 "$1"
  in_range "$proto: never reading: the daemon's socket tb at most 256 KiB" 1 262144 "$2"
  in_range "$proto: the client got requests written" 100000 1000000000000 \
    "$(cat "$tmp/$proto.n")"
done
sv_stop s
lib_finish
