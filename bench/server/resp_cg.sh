#!/bin/sh
# resp_cg.sh — what a pipelined SL.THROTTLE costs the daemon in
# instructions, independent of the machine's load (callgrind counts them):
#
#   SLUICE=build/sluice sh bench/server/resp_cg.sh
#   EXTRA="--top-keys 0" SLUICE=build/sluice sh bench/server/resp_cg.sh
#   POLICY=gcra:1/h KEYS=8000 EXTRA="--top-keys 32 --denial-log /tmp/d.log \
#     --denial-log-limit token_bucket:1000000/s" sh bench/server/resp_cg.sh
#
# The daemon (--threads 1, RESP only, EXTRA added) under callgrind; one
# connection sends SL.THROTTLE key:K POLICY 1 (gcra:1000/h; gcra:1/h
# denies every command past a key's first: the observer's worst case)
# in pipelines of 16
# (redis-benchmark -P 16's shape), over KEYS keys (default 1600), waiting
# for each pipeline's 16 replies. Total instructions for 1,600 and 17,600
# commands, and their difference over the 16,000 between: start-up,
# shutdown and the keys' first insertion cancel out (the first 1,600
# commands create every key), so it is the warm per-command cost. Each
# thread is counted apart (--separate-threads): worker_only is the
# worker's share, what a command waits for; writer and counter, the
# denial log's writer's and the top keys' counter's (0: not running).
# Every file it writes is in a temporary directory, removed at the end.
set -eu
S=$(cd "$(dirname "${SLUICE:-build/sluice}")" && pwd)/$(basename "${SLUICE:-build/sluice}")
command -v valgrind >/dev/null || { echo "resp_cg.sh: valgrind is missing" >&2; exit 1; }
dir=$(mktemp -d "${TMPDIR:-/tmp}/sluice-resp-cg.XXXXXX")
trap 'rm -rf "$dir"' EXIT
cd "$dir"
cat >load.py <<'PY'
import socket, sys
port, n, start, keys = (int(a) for a in sys.argv[1:5])
POLICY = sys.argv[5].encode()
s = socket.create_connection(("127.0.0.1", port), timeout=120)
P = 16
def cmd(k):
    a = [b"SL.THROTTLE", b"key:%d" % k, POLICY, b"1"]
    return b"*%d\r\n" % len(a) + b"".join(b"$%d\r\n%s\r\n" % (len(x), x) for x in a)
buf = b""
for i in range(0, n, P):
    s.sendall(b"".join(cmd((start + (i + j) * 7919) % keys) for j in range(P)))
    got = 0
    while got < P:
        d = s.recv(65536)
        if not d:
            sys.exit("resp_cg.sh: the daemon closed the connection")
        buf += d
        while True:  # a reply: "*6", then six integers
            if buf[:1] == b"-":
                sys.exit(buf[:200])
            parts = buf.split(b"\r\n", 7)
            if len(parts) < 8:
                break
            buf = parts[7]
            got += 1
PY
run() { # N -> total Ir
  n=$1
  rm -f rdy
  # shellcheck disable=SC2086 # EXTRA: the daemon's words
  valgrind --tool=callgrind --callgrind-out-file=cg.$n --separate-threads=yes \
    "$S" serve --http off \
    --grpc off --resp 127.0.0.1:0 --threads 1 --ready-file rdy ${EXTRA:-} \
    2>vg.$n.log &
  vp=$!
  i=0; while [ ! -f rdy ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i + 1)); done
  p=$(sed 's/.*"resp": "[^:]*:\([0-9]*\)".*/\1/' rdy)
  python3 load.py "$p" "$n" 1 "${KEYS:-1600}" "${POLICY:-gcra:1000/h}"
  kill -TERM $vp
  wait $vp || true
  # all threads, then the worker's, the writer's, the counter's
  all=0 w=0 wr=0 c=0
  for f in cg.$n-*; do
    ir=$(grep -h "^summary:\|^totals:" "$f" | head -1 | awk '{print $2}')
    all=$((all + ir))
    if grep -q worker_main "$f"; then w=$((w + ir)); fi
    if grep -q writer_main "$f"; then wr=$((wr + ir)); fi
    if grep -q counter_main "$f"; then c=$((c + ir)); fi
  done
  echo "$all $w $wr $c"
}
set -- $(run 1600) $(run 17600)
echo "Ir(1600)=$1 Ir(17600)=$5 per_command=$((($5 - $1) / 16000))" \
  "worker_only=$((($6 - $2) / 16000)) writer=$((($7 - $3) / 16000))" \
  "counter=$((($8 - $4) / 16000))"
