#!/bin/sh
# grpc_h2.sh — sluice's gRPC transport (src/server/grpc_conn.c) under what
# a gRPC library never sends on purpose, with grpc_h2.py's hand-made
# HTTP/2 frames: the calls the metrics count (a call reset by its client
# before its answer went out is not answered), and a graceful stop while
# the client keeps sending (the GOAWAY and the answers arrive, then a FIN,
# not a reset); the kernel memory a client that never reads makes the
# daemon's side of its connection hold.
#
#   SLUICE=build/sluice sh tests/integration/grpc_h2.sh   (make integration)

. "$(dirname "$0")/serve_lib.sh"
lib_tools="$lib_tools ss"
lib_init grpc_h2

PYH="$PY $(dirname "$0")/grpc_h2.py"

# run_py ARGS... — runs grpc_h2.py; every line it prints is a check.
run_py() {
  timeout 60 $PYH "$@" >"$tmp/py.out" 2>"$tmp/py.err"
  _rc=$?
  while IFS= read -r _l; do
    case "$_l" in
      PASS*) pass ;;
      FAIL*) fail "grpc_h2 $1: ${_l#FAIL }" ;;
    esac
  done <"$tmp/py.out"
  if [ $_rc -ne 0 ]; then
    fail "grpc_h2 $1: the client exited $_rc: $(tail -n 5 "$tmp/py.err")"
  fi
}

# 1. sluice_grpc_calls_total and sluice_grpc_errors_total count the calls
#    answered: not one reset by its client before its answer was sent.
sv_start c -t 1 || lib_finish
run_py calls "$GRPC" "$URL"
sv_stop c

# 2. SIGTERM while a client floods its connection: the daemon shuts its
#    side (FIN) once the GOAWAY and the answers are written, and reads
#    what still comes for a while before it closes (a close with unread
#    bytes would send a reset, which can destroy them at the client).
sv_start l -t 1 --shutdown-grace 5000 || lib_finish
run_py linger "$GRPC" "$PID"
sv_wait_exit l
eq "the daemon stopped (exit status 0)" 0 "$sv_rc"

# 3. A client that sends and never reads: the daemon stops reading it,
#    and the socket's buffers hold at most what LISTEN_SOCK_BUFFER asks
#    (128 KiB each way, doubled by the kernel), where Linux would grow
#    them to tcp_rmem's and tcp_wmem's maximum (MiBs) otherwise. ss(8)
#    shows the daemon's side: rb and tb, the receive and send buffers.
sv_start f -t 1 || lib_finish
"$PY" "$(dirname "$0")/h2_flood.py" "$GRPC" 4 1000000 >"$tmp/flood.n" &
flood=$!
lib_track $flood
set -- $(sock_buffers "$GRPC" $flood)
wait $flood
in_range "never reading: the daemon's socket rb at most 256 KiB" 1 262144 "$1"
in_range "never reading: the daemon's socket tb at most 256 KiB" 1 262144 "$2"
sv_stop f

lib_finish
