#!/bin/sh
# observe_cg.sh — what the denial log and top keys cost in instructions per
# request, independent of the machine's load (callgrind counts them):
#
#   SLUICE=build/sluice sh bench/server/observe_cg.sh
#
# The daemon (--threads 1) under callgrind, /v1/throttle gcra:1/h, each of
# N keys asked twice (the second is denied: half the requests are
# denials); total instructions for N = 1000 and 6000, and their difference
# over the 10000 requests between (start-up and shutdown cancel out).
# Modes: off (--top-keys 0), top (top keys only), default (top keys and
# the log at its default --denial-log-limit, token_bucket:1000/s: past
# the first lines a denial costs one limiter check), on (top keys and
# every denial written to the log: --denial-log-limit far above the rate).
# Every file it writes is in a temporary directory, removed at the end.
set -eu
S=$(cd "$(dirname "${SLUICE:-build/sluice}")" && pwd)/$(basename "${SLUICE:-build/sluice}")
command -v valgrind >/dev/null || { echo "observe_cg.sh: valgrind is missing" >&2; exit 1; }
dir=$(mktemp -d "${TMPDIR:-/tmp}/sluice-observe-cg.XXXXXX")
trap 'rm -rf "$dir"' EXIT
cd "$dir"
cat > load.py <<'PY'
import http.client, sys
port, n, start = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
for i in range(n):
    k = (start + i * 7919) % 100000
    # each key twice: the second request is denied
    for rep in (0, 1):
        c.request("GET", "/v1/throttle?key=k%d&policy=gcra:1/h" % k)
        r = c.getresponse(); r.read()
PY
run() { # MODE N -> total Ir
  mode=$1 n=$2
  rm -f rdy cg.out.$mode.$n
  if [ $mode = off ]; then args="--top-keys 0"; elif [ $mode = top ]; then args="--top-keys 32"; elif [ $mode = default ]; then args="--top-keys 32 --denial-log dl-cg.log"; else args="--top-keys 32 --denial-log dl-cg.log --denial-log-limit token_bucket:1000000/s"; fi
  valgrind --tool=callgrind --callgrind-out-file=cg.out.$mode.$n $S serve --http 127.0.0.1:0 --resp off --threads 1 --ready-file rdy $args 2>vg.$mode.$n.log &
  vp=$!
  i=0; while [ ! -f rdy ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done
  p=$(sed 's/.*"http": "[^:]*:\([0-9]*\)".*/\1/' rdy)
  python3 load.py $p $n 1
  kill -TERM $vp; wait $vp
  grep -h "^summary:\|^totals:" cg.out.$mode.$n | head -1 | awk '{print $2}'
}
for mode in ${MODES:-off top default on}; do
  a=$(run $mode 1000); b=$(run $mode 6000)
  echo "mode=$mode Ir(1000x2 req)=$a Ir(6000x2 req)=$b per_request=$(( (b - a) / 10000 ))"
done
