#!/bin/sh
# observe_cg.sh — what the denial log and top keys cost in instructions per
# request, independent of the machine's load (callgrind counts them):
#
#   SLUICE=build/sluice sh bench/server/observe_cg.sh
#   MODES="off on" SLUICE=build/sluice sh bench/server/observe_cg.sh
#
# The daemon (--threads 1) under callgrind, /v1/throttle gcra:1/h, each of
# N keys asked twice (the second is denied: half the requests are
# denials); instructions for N = 1000 and 6000, and their difference
# over the 10000 requests between (start-up and shutdown cancel out).
# Only the threads that serve requests are counted (callgrind
# --separate-threads: the worker, the denial log's writer and the top
# keys' counter; worker_only
# is the worker's share, what a request waits for): the main
# thread's expiry steps and gRPC's pollers run on the wall clock, so
# under callgrind's slowness they add thousands of instructions a request
# that vary from run to run and are not the request's.
# Modes:
#   off      --top-keys 0, no log: the anchor
#   top      top keys only (--top-keys 32, the default): the typical case
#   log      the log only, every denial written (--denial-log-limit far
#            above the rate)
#   flood    top keys and the log, its limiter refusing (a flood past
#            --denial-log-limit: past its first line a denial costs one
#            limiter check and no line)
#   on       top keys and every denial written: the worst case
#   default  top keys and the log at its default --denial-log-limit
#            (1,000 lines a second: under callgrind, slower than that,
#            the same as on)
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
run() { # MODE N -> instructions of the request-serving threads
  mode=$1 n=$2
  rm -f rdy cg.out.$mode.$n*
  case $mode in
  off) args="--top-keys 0" ;;
  top) args="--top-keys 32" ;;
  log) args="--top-keys 0 --denial-log dl-cg.log --denial-log-limit token_bucket:1000000/s" ;;
  flood) args="--top-keys 32 --denial-log dl-cg.log --denial-log-limit token_bucket:1/h" ;;
  default) args="--top-keys 32 --denial-log dl-cg.log" ;;
  on) args="--top-keys 32 --denial-log dl-cg.log --denial-log-limit token_bucket:1000000/s" ;;
  *) echo "observe_cg.sh: unknown mode '$mode'" >&2; exit 2 ;;
  esac
  valgrind --tool=callgrind --separate-threads=yes \
    --callgrind-out-file=cg.out.$mode.$n $S serve --http 127.0.0.1:0 \
    --resp off --threads 1 --ready-file rdy $args 2>vg.$mode.$n.log &
  vp=$!
  i=0; while [ ! -f rdy ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done
  p=$(sed 's/.*"http": "[^:]*:\([0-9]*\)".*/\1/' rdy)
  python3 load.py $p $n 1
  kill -TERM $vp
  rc=0; wait $vp || rc=$?
  if [ $rc -ne 0 ]; then
    echo "observe_cg.sh: the daemon ($mode) exited with status $rc" >&2
    tail -n 5 vg.$mode.$n.log >&2
    exit 1
  fi
  total=0 worker=0
  for f in cg.out.$mode.$n-*; do
    grep -q 'worker_main\|writer_main\|counter_main' "$f" || continue
    ir=$(grep -h "^summary:\|^totals:" "$f" | head -1 | awk '{print $2}')
    total=$((total + ir))
    grep -q 'worker_main' "$f" && worker=$((worker + ir))
  done
  echo "$total $worker"
}
off=""
for mode in ${MODES:-off top log flood on}; do
  set -- $(run $mode 1000) $(run $mode 6000)
  a=$1 b=$3
  per=$(( (b - a) / 10000 )) wper=$(( ($4 - $2) / 10000 ))
  [ $mode = off ] && off=$per
  vs=""
  [ -n "$off" ] && [ $mode != off ] &&
    vs=" vs_off=$(awk -v a=$per -v o=$off 'BEGIN { printf "%+.1f%%", 100 * (a - o) / o }')"
  echo "mode=$mode Ir(1000x2 req)=$a Ir(6000x2 req)=$b per_request=$per$vs worker_only=$wper"
done
