#!/bin/sh
# run.sh — `make bench-server`: the daemon's throughput and latency beside
# its anchors, all measured in this one run on this machine (127.0.0.1
# only), and the targets of issue #3 as ratios.
#
#   RESP  redis-benchmark -c 50 -r 100000, -P 1 and -P 16 (--threads: a
#         quarter of the cores, at most 4; BENCH_CLIENT_THREADS):
#         anchor  redis-server, INCR key:__rand_int__
#         anchor  redis-server, EVALSHA of a token bucket in Lua
#                 (tokenbucket.lua; a second redis-server, same keys)
#         sluice  SL.THROTTLE key:__rand_int__ gcra:1000/h 1
#         leases (issue 16): SL.ACQUIRE then SL.RELEASE of its lease, a
#                 pair, against two SL.THROTTLE in a row on the same keys,
#                 by the same pipelined client (tests/tools/resp_pairs.c,
#                 $RESP_PAIRS: redis-benchmark cannot pass a lease on):
#                 50 connections, 16 pairs in flight on each, a random
#                 key among 100000 per pair. Target: >= 0.8x the pairs/s.
#   HTTP  wrk -t1 -c50 --latency, a random key among 100000 per request
#         (keys.lua, the same generator and seed for every server):
#         anchor  nginx limit_req keyed on $arg_key, /limit?key=K
#         anchor  nginx return 200, /plain?key=K
#         sluice  /v1/throttle?key=K&policy=gcra:1000/h
#         sluice  /v1/check?domain=bench&key=K (the config's rule)
#   gRPC  h2load -t1 -c50 -m1 (HTTP/2, one stream per connection, as wrk's
#         one request per connection), envoy's ShouldRateLimit with one
#         descriptor: h2load posts the same body every time, so this is
#         ONE key (domain bench, key=one), against /v1/check's 100000;
#         p50/p99 from h2load's per-request log. Target: >= 0.8x the
#         requests/s of /v1/check over HTTP/1.1, p99 within 2x.
#
# sluice runs with --threads 1 and 2 (and 4 on 8 cores or more;
# BENCH_THREADS), nginx with as many workers (redis is
# single-threaded); each target is judged on the better of each. Every
# figure is the best of BENCH_REPEAT runs (default 3) of about
# BENCH_SECONDS (default 3) each, the configurations interleaved round by
# round, after one warm-up run each that fills the key tables: on a shared
# machine, noise only ever slows a run down. The policy (1000 per hour,
# burst 1000, on every server) keeps every key live for the whole run and
# allows every request; the end of the run says how many were denied.
#
# Each run prints one line, with where the CPU went (see meter_end; runs
# during which other jobs took the CPU are marked noisy and retried). The
# load generator shares the machine's cores with the server, so a server
# that needs more CPU per request leaves less to the client: requests per
# server core-second is printed too. Verdict lines: `name=value targetOP ok|MISS`; the exit
# status is 0 either way (a benchmark reports, a test asserts).
# BENCH_ONLY=ERE runs only the configurations whose line matches. Everything
# started here is stopped on exit, and the temporary directory removed.
set -eu
SLUICE=${SLUICE:-build/sluice}
RESP_PAIRS=${RESP_PAIRS:-build/tests/tools/resp_pairs}
S=${BENCH_SECONDS:-3}
R=${BENCH_REPEAT:-3}
CORES=$(nproc)
# sluice's worker threads: 1 and 2 on a small machine (the client shares
# its cores); with cores to spare, 4 too.
if [ "$CORES" -ge 8 ]; then THREADS=${BENCH_THREADS:-1 2 4}; else THREADS=${BENCH_THREADS:-1 2}; fi
# redis-benchmark's threads (its --threads), the same for every RESP run,
# INCR and SL.THROTTLE alike: one thread is the client's ceiling at -P 16
# (about a core's worth), so with cores to spare the client gets a quarter
# of them (at most 4), and the servers, not the client, set the pace.
CLIENT_THREADS=${BENCH_CLIENT_THREADS:-$(( CORES / 4 > 4 ? 4 : CORES / 4 > 0 ? CORES / 4 : 1 ))}
NOISE=${BENCH_NOISE:-0.25}
PATIENCE=${BENCH_PATIENCE:-300}
KEYS=100000
POLICY=gcra:1000/h
here=$(cd "$(dirname "$0")" && pwd)
SLUICE=$(cd "$(dirname "$SLUICE")" && pwd)/$(basename "$SLUICE")

BENCH=bench-server
. "$here/../lib.sh"
chmod 755 "$tmp" # nginx's workers may run as another user

need redis-server redis-cli redis-benchmark nginx wrk h2load
[ -x "$SLUICE" ] || die "$SLUICE not built"

# A process and its children (nginx's master and workers).
family() {
  out=$1
  for f in /proc/[0-9]*/stat; do
    line=$(sed 's/.*) //' "$f" 2>/dev/null) || continue
    set -- $line
    [ "${2:-}" = "${out%% *}" ] || continue
    f=${f#/proc/}; out="$out ${f%/stat}"
  done
  echo "$out"
}

echo "# machine: $(nproc) cores, $(uname -m); $(date -u +%Y-%m-%dT%H:%M:%SZ)"
echo "# $(redis-server --version | cut -d' ' -f1-3), $(nginx -v 2>&1 | sed 's/.*: //'), $(wrk -v 2>&1 | head -1 | cut -d' ' -f1-2), $("$SLUICE" --version 2>/dev/null || echo 'sluice ?')"

# ---- servers ----
# The rule /v1/check and ShouldRateLimit decide: a limit no run reaches
# (every request allowed, as for the other configurations).
cat >"$tmp/bench.yaml" <<EOF
domain: bench
descriptors:
  - key: key
    rate_limit: {policy: "fixed_window:2000000000/h"}
EOF
# ShouldRateLimit's request, gRPC-framed (a 0 byte, the length as 4 bytes
# big-endian, the message): RateLimitRequest{domain: "bench",
# descriptors: [{entries: [{key: "key", value: "one"}]}]}, 21 bytes.
printf '\000\000\000\000\025\012\005bench\022\014\012\012\012\003key\022\003one' \
  >"$tmp/rls.body"
start_sluice() { # THREADS
  log=$tmp/sluice-t$1.log
  ready=$tmp/sluice-t$1.ready
  "$SLUICE" serve --http 127.0.0.1:0 --resp 127.0.0.1:0 --grpc 127.0.0.1:0 \
    --threads "$1" -c "$tmp/bench.yaml" \
    --shutdown-grace 100 --ready-file "$ready" 2>"$log" &
  pids="$pids $!"
  eval "sluice_t${1}_pid=$!"
  wait_for test -f "$ready" || die "sluice did not start: $(cat "$log")"
  eval "sluice_t${1}_http=$(ready_port "$ready" http)"
  eval "sluice_t${1}_resp=$(ready_port "$ready" resp)"
  eval "sluice_t${1}_grpc=$(ready_port "$ready" grpc)"
}
# The denial log and top keys' cost (docs/operations.md): one daemon with
# both off, one with both on (every denial written: the log's limit far
# above the rate), --threads 1, on a policy that denies nearly every
# request (gcra:1/h: a key's second request is denied).
start_sluice_obs() { # NAME ARGS...
  name=$1; shift
  log=$tmp/sluice-$name.log
  ready=$tmp/sluice-$name.ready
  "$SLUICE" serve --http 127.0.0.1:0 --resp 127.0.0.1:0 --grpc off --threads 1 \
    --shutdown-grace 100 --ready-file "$ready" "$@" 2>"$log" &
  pids="$pids $!"
  eval "sluice_${name}_pid=$!"
  wait_for test -f "$ready" || die "sluice did not start: $(cat "$log")"
  eval "sluice_${name}_http=$(ready_port "$ready" http)"
  eval "sluice_${name}_resp=$(ready_port "$ready" resp)"
}
start_nginx() { # WORKERS
  d=$tmp/nginx-w$1
  mkdir -p "$d"
  for try in 1 2 3; do # another port if this one was taken meanwhile
    port=$(free_port)
    sed -e "s|@PREFIX@|$d|g" -e "s|@PORT@|$port|" -e "s|@WORKERS@|$1|" \
      "$here/nginx.conf" >"$d/nginx.conf"
    nginx -p "$d" -e "$d/nginx-error.log" -c "$d/nginx.conf" 2>>"$d/nginx-error.log" &
    master=$!
    wait_for test -s "$d/nginx.pid" && break
    kill $master 2>/dev/null || true; wait $master 2>/dev/null || true
    master=""
  done
  [ -n "$master" ] || die "nginx did not start: $(tail -3 "$d/nginx-error.log")"
  pids="$pids $master"
  i=0 # its workers
  while [ "$(family $master | wc -w)" -le "$1" ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
  eval "nginx_w${1}_pids='$(family $master)' nginx_w${1}_port=$port"
}

start_redis redis
start_redis redislua
sha=$(redis-cli -p "$redislua_port" SCRIPT LOAD "$(cat "$here/tokenbucket.lua")")
for t in $THREADS; do start_sluice "$t"; done
for t in $THREADS; do start_nginx "$t"; done
OBS_POLICY=gcra:1/h
start_sluice_obs obsoff --top-keys 0
start_sluice_obs obson --top-keys 32 --denial-log "$tmp/denials.log" \
  --denial-log-limit token_bucket:1000000/s
# The token bucket: capacity 1000, 1000 per 3600000 ms (= gcra:1000/h).
TB_ARGS="1000 1000 3600000 1"

# ---- one run ----
# Where the machine's CPU went during a run, in cores (CPU seconds per
# wall second): the server (all its threads or processes), the client (this
# shell's children: the load generator), the kernel's softirqs (loopback
# TCP for both sides: part of the work, charged to no process), and
# everything else (others_cores: other jobs on the machine, a VM's steal
# time). This machine may be shared: before each run the script waits for
# it to be quiet (busy under BENCH_NOISE cores, default 0.25), and a run
# during which others took more than that is marked noisy and run again (3
# tries). Waiting and retrying draw on one budget, BENCH_PATIENCE seconds
# (default 300), so the whole stays bounded; once it is spent, runs count as
# they come. Best-of ignores noisy runs where a configuration has others.
meter_start() { # SERVER_PIDS
  times >"$tmp/times0"
  m_s0=$(cpu_ticks $1) m_w0=$(worker_ticks $1) m_b0=$(cpu_fields) m_t0=$(now)
}
meter_end() { # SERVER_PIDS: prints "server_cores=... worker_cores=... client_cores=... softirq_cores=... others_cores=..."
  m_t1=$(now) m_b1=$(cpu_fields) m_s1=$(cpu_ticks $1) m_w1=$(worker_ticks $1)
  times >"$tmp/times1"
  echo "$m_t0 $m_t1 $((m_s1 - m_s0)) $m_b0 $m_b1 $(child_ticks "$tmp/times0") $(child_ticks "$tmp/times1") $((m_w1 - m_w0))" |
    awk -v t="$TCK" -v noise="$NOISE" '{
      w = ($2 - $1) * t; srv = $3 / w; cli = ($9 - $8) / w; sirq = ($7 - $5) / w
      oth = ($6 - $4) / w - srv - cli
      if (oth < 0) oth = 0
      printf "server_cores=%.2f worker_cores=%.2f client_cores=%.2f softirq_cores=%.2f others_cores=%.2f%s\n",
        srv, $10 / w, cli, sirq, oth, (oth > noise ? " noisy" : "") }'
}

# resp_run LABEL PORT PIDS PIPELINE N RUN COMMAND...: one redis-benchmark
# run; prints "LABEL pipeline=P run=RUN requests_per_s=... p50_ms=...
# p99_ms=... server_cores=..." (or FAILED with its error).
resp_run() {
  label=$1 port=$2 spids=$3 pl=$4 n=$5 run=$6; shift 6
  rc=0
  meter_start "$spids"
  ct=""
  [ "$CLIENT_THREADS" -gt 1 ] && ct="--threads $CLIENT_THREADS"
  # shellcheck disable=SC2086 # $ct: nothing, or two words
  timeout $((S * 10 + 30)) redis-benchmark -h 127.0.0.1 -p "$port" -c 50 -n "$n" \
    -r $KEYS -P "$pl" $ct --csv "$@" >"$tmp/rb.out" 2>"$tmp/rb.err" || rc=$?
  meter_end "$spids" >"$tmp/cores" # not in $(...): `times` must see the client
  cores=$(cat "$tmp/cores")
  err=$(grep -v 'Could not fetch server CONFIG' "$tmp/rb.err" | tr '\n' ' ' || true)
  line=$(tail -1 "$tmp/rb.out" | tr -d '"')
  case "$line" in
    test,*) line="" ;;
  esac
  if [ $rc -ne 0 ] || [ -z "$line" ] || [ -n "$err" ]; then
    echo "$label pipeline=$pl run=$run FAILED rc=$rc ${err:-no result}"
    return 0
  fi
  echo "$line" | awk -F, -v l="$label pipeline=$pl run=$run" -v c="$cores" '
    { printf "%s requests_per_s=%.0f p50_ms=%s p99_ms=%s %s\n", l, $2, $5, $7, c }'
}
# http_run LABEL PORT PIDS SECONDS RUN PREFIX [SUFFIX]: one wrk run.
http_run() {
  label=$1 port=$2 spids=$3 secs=$4 run=$5 prefix=$6 suffix=${7:-}
  rc=0
  meter_start "$spids"
  timeout $((secs + 30)) wrk -t1 -c50 -d"${secs}s" --latency -s "$here/keys.lua" \
    "http://127.0.0.1:$port" -- "$prefix" "$suffix" $KEYS >"$tmp/wrk.out" 2>&1 || rc=$?
  meter_end "$spids" >"$tmp/cores" # not in $(...): `times` must see the client
  cores=$(cat "$tmp/cores")
  line=$(sed -n 's/^wrk: //p' "$tmp/wrk.out")
  if [ $rc -ne 0 ] || [ -z "$line" ]; then
    echo "$label run=$run FAILED rc=$rc $(tail -2 "$tmp/wrk.out" | tr '\n' ' ')"
    return 0
  fi
  echo "$label run=$run $line $cores"
}

# grpc_run LABEL PORT PIDS SECONDS RUN: one h2load run of ShouldRateLimit;
# prints the line http_run prints (requests/s, p50 and p99 from h2load's
# per-request log: its third column is each request's microseconds).
grpc_run() {
  label=$1 port=$2 spids=$3 secs=$4 run=$5
  rc=0
  rm -f "$tmp/h2.log"
  meter_start "$spids"
  timeout $((secs + 30)) h2load -t1 -c50 -m1 -D "$secs" -d "$tmp/rls.body" \
    -H 'content-type: application/grpc' -H 'te: trailers' \
    --log-file "$tmp/h2.log" \
    "http://127.0.0.1:$port/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit" \
    >"$tmp/h2.out" 2>&1 || rc=$?
  meter_end "$spids" >"$tmp/cores"
  cores=$(cat "$tmp/cores")
  rps=$(sed -n 's/^finished in .*, \([0-9.]*\) req\/s.*/\1/p' "$tmp/h2.out")
  if [ $rc -ne 0 ] || [ -z "$rps" ] || [ ! -s "$tmp/h2.log" ]; then
    echo "$label run=$run FAILED rc=$rc $(tail -2 "$tmp/h2.out" | tr '\n' ' ')"
    return 0
  fi
  sort -n -k3,3 "$tmp/h2.log" | awk -v rps="$rps" '
    { t[NR] = $3; if ($2 != 200) bad++ }
    END { printf "requests=%d requests_per_s=%.0f p50_ms=%.3f p99_ms=%.3f errors=0 non_2xx=%d",
      NR, rps, t[int(NR * 0.5) + 1] / 1000, t[int(NR * 0.99) + 1] / 1000, bad }' >"$tmp/h2.sum"
  echo "$label run=$run $(cat "$tmp/h2.sum") $cores"
}

# pairs_run LABEL PORT PIDS MODE RUN: one resp_pairs run (MODE lease or
# throttle); prints "LABEL run=RUN pairs=... requests_per_s=PAIRS/S ...".
pairs_run() {
  label=$1 port=$2 spids=$3 mode=$4 run=$5
  rc=0
  meter_start "$spids"
  timeout $((S + 30)) "$RESP_PAIRS" "$port" "$mode" 50 16 "$S" $KEYS \
    >"$tmp/pairs.out" 2>&1 || rc=$?
  meter_end "$spids" >"$tmp/cores"
  cores=$(cat "$tmp/cores")
  if [ $rc -ne 0 ]; then
    echo "$label run=$run FAILED rc=$rc $(tail -2 "$tmp/pairs.out" | tr '\n' ' ')"
    return 0
  fi
  echo "$label run=$run $(tail -1 "$tmp/pairs.out") $cores"
}

# ---- the configurations ----
# One per line: KIND LABEL PORT PIDS PIPELINE COMMAND (RESP) or
# KIND LABEL PORT PIDS PREFIX SUFFIX (HTTP); label words joined by '+'.
{
  for pl in 1 16; do
    echo "resp server=redis+cmd=INCR $redis_port $redis_pid $pl INCR key:__rand_int__"
    echo "resp server=redis+cmd=EVALSHA_token_bucket $redislua_port $redislua_pid $pl EVALSHA $sha 1 key:__rand_int__ $TB_ARGS"
    for t in $THREADS; do
      eval "p=\$sluice_t${t}_resp pid=\$sluice_t${t}_pid"
      echo "resp server=sluice+threads=$t+cmd=SL.THROTTLE $p $pid $pl SL.THROTTLE key:__rand_int__ $POLICY 1"
    done
  done
  if [ -x "$RESP_PAIRS" ]; then
    for t in $THREADS; do
      eval "p=\$sluice_t${t}_resp pid=\$sluice_t${t}_pid"
      echo "pairs server=sluice+threads=$t+pairs=acquire_release $p $pid lease"
      echo "pairs server=sluice+threads=$t+pairs=throttle_throttle $p $pid throttle"
    done
  fi
  for t in $THREADS; do
    eval "p=\$nginx_w${t}_port pid=\$nginx_w${t}_pids"
    pid=$(echo $pid | tr ' ' ,)
    echo "http server=nginx+workers=$t+path=/limit $p $pid /limit?key= -"
    echo "http server=nginx+workers=$t+path=/plain $p $pid /plain?key= -"
  done
  for t in $THREADS; do
    eval "p=\$sluice_t${t}_http pid=\$sluice_t${t}_pid"
    echo "http server=sluice+threads=$t+path=/v1/throttle $p $pid /v1/throttle?key= &policy=$POLICY"
    echo "http server=sluice+threads=$t+path=/v1/check $p $pid /v1/check?domain=bench&key= -"
    eval "g=\$sluice_t${t}_grpc"
    echo "grpc server=sluice+threads=$t+rpc=ShouldRateLimit $g $pid"
  done
  for o in off on; do
    eval "p=\$sluice_obs${o}_http r=\$sluice_obs${o}_resp pid=\$sluice_obs${o}_pid"
    echo "http server=sluice+threads=1+observe=$o+path=/v1/throttle $p $pid /v1/throttle?key= &policy=$OBS_POLICY"
    echo "resp server=sluice+threads=1+observe=$o+cmd=SL.THROTTLE $r $pid 16 SL.THROTTLE key:__rand_int__ $OBS_POLICY 1"
  done
} >"$tmp/configs.all"
# BENCH_ONLY=ERE: only the configurations whose line matches (e.g.
# 'pairs=' for the lease pairs alone); the other verdicts say n/a.
grep -E -- "${BENCH_ONLY:-.}" "$tmp/configs.all" >"$tmp/configs" || true

# run_config LINE: one run of a configuration in round ROUND (0: the
# warm-up, which fills the key tables and, for RESP, sizes the runs to
# about S seconds from its requests/s).
run_config() {
  set -f; set -- $1; set +f
  kind=$1 label=$(echo "$2" | tr + ' ') port=$3 spids=$(echo "$4" | tr , ' ')
  shift 4
  for p in $spids; do # redis-benchmark waits forever for a server that is gone
    kill -0 "$p" 2>/dev/null || { echo "$label run=$ROUND FAILED: the server is gone"; return 0; }
  done
  if [ "$kind" = pairs ]; then
    if [ "$ROUND" -eq 0 ]; then
      echo "# warm-up: $(pairs_run "$label" "$port" "$spids" "$1" warmup)"
    else
      pairs_run "$label" "$port" "$spids" "$1" "$ROUND"
    fi
  elif [ "$kind" = grpc ]; then
    if [ "$ROUND" -eq 0 ]; then
      echo "# warm-up: $(grpc_run "$label" "$port" "$spids" "$S" warmup)"
    else
      grpc_run "$label" "$port" "$spids" "$S" "$ROUND"
    fi
  elif [ "$kind" = resp ]; then
    pl=$1; shift
    key=$(echo "$label p$pl" | tr -c 'a-zA-Z0-9\n' _)
    if [ "$ROUND" -eq 0 ]; then
      resp_run "$label" "$port" "$spids" "$pl" $KEYS warmup "$@" >"$tmp/warm.out"
      rps=$(sed -n 's/.*requests_per_s=\([0-9]*\).*/\1/p' "$tmp/warm.out")
      n=$(( ${rps:-20000} * S ))
      [ $n -ge 20000 ] || n=20000
      echo "$n" >"$tmp/n.$key"
      echo "# warm-up: $(cat "$tmp/warm.out")"
    else
      resp_run "$label" "$port" "$spids" "$pl" "$(cat "$tmp/n.$key")" "$ROUND" "$@"
    fi
  else
    suffix=$2; [ "$suffix" != - ] || suffix=""
    if [ "$ROUND" -eq 0 ]; then
      echo "# warm-up: $(http_run "$label" "$port" "$spids" "$S" warmup "$1" "$suffix")"
    else
      http_run "$label" "$port" "$spids" "$S" "$ROUND" "$1" "$suffix"
    fi
  fi
}

# A server that is gone (crashed, or killed by someone else) is reported
# with its exit status and the end of its log; its runs say FAILED.
check_alive() {
  for t in $THREADS; do
    eval "pid=\$sluice_t${t}_pid"
    [ -n "$pid" ] || continue
    kill -0 "$pid" 2>/dev/null && continue
    st=0; wait "$pid" 2>/dev/null || st=$?
    echo "# sluice --threads $t (pid $pid) is gone: exit status $st$([ $st -gt 128 ] && echo " (signal $((st - 128)))"); its log ends:"
    tail -5 "$tmp/sluice-t$t.log" | sed 's/^/#   /'
    eval "sluice_t${t}_pid="
  done
  for name in redis redislua; do
    eval "pid=\$${name}_pid"
    [ -n "$pid" ] || continue
    kill -0 "$pid" 2>/dev/null && continue
    st=0; wait "$pid" 2>/dev/null || st=$?
    echo "# redis-server ($name, pid $pid) is gone: exit status $st"
    eval "${name}_pid="
  done
}

echo "# RESP: redis-benchmark -c 50 -r $KEYS --threads $CLIENT_THREADS; HTTP: wrk -t1 -c50, $KEYS keys; policy $POLICY; best of $R"
run_rounds "fills the key tables"

echo "# noise: $(grep -v '^#' "$tmp/runs.txt" | grep -c ' noisy$' || true) of $(grep -vc '^#' "$tmp/runs.txt" || true) measured runs noisy; waiting budget left $(patience) of $PATIENCE s"
echo "# denials (the policy keeps every key live and never full: there should be none)"
echo "nginx: non_2xx= on its lines (limit_req answers 503 when it rejects); Redis's INCR"
echo "never refuses, and the token bucket (capacity 1000) sees far fewer requests per key"
for t in $THREADS; do
  eval "p=\$sluice_t${t}_http"
  if command -v curl >/dev/null 2>&1; then
    curl -s "http://127.0.0.1:$p/metrics" |
      awk -v t="$t" '/^sluice_decisions_total\{kind="throttle"/ {
          sub(/.*result="/, ""); sub(/"\}/, ""); s = s " " $1 "=" $2 }
        /^sluice_store_keys / { k = $2 }
        END { printf "sluice threads=%s decisions:%s store_keys=%s\n", t, s, k }'
  else
    echo "sluice threads=$t: (install curl to read its /metrics)"
  fi
done

echo "# best of $R per configuration (noisy runs left out unless a configuration has no other)"
grep -v FAILED "$tmp/runs.txt" | grep -v '^#' | awk '
  function val(k,   i) { for (i = 1; i <= NF; i++) if (index($i, k "=") == 1) return substr($i, length(k) + 2); return "" }
  {
    cfg = $0; sub(/ run=.*/, "", cfg)
    if (!(cfg in seen)) { seen[cfg] = 1; order[++n] = cfg }
    q = / noisy$/ ? "noisy" : "clean"; k = cfg SUBSEP q
    r = val("requests_per_s") + 0; p = val("p99_ms") + 0; c = val("server_cores") + 0
    wc = val("worker_cores") + 0
    if (!(k in best) || r > best[k]) { best[k] = r; cores[k] = c }
    # Requests per second of CPU time of the worker threads (what
    # throughput follows when the workers have cores of their own): the
    # best run.
    if (wc > 0 && (!(k in wbest) || r / wc > wbest[k])) wbest[k] = r / wc
    if (!(k in p99) || p < p99[k]) p99[k] = p
  }
  END {
    for (i = 1; i <= n; i++) {
      k = order[i] SUBSEP "clean"; note = ""
      if (!(k in best)) { k = order[i] SUBSEP "noisy"; note = " (noisy runs only)" }
      printf "best %s requests_per_s=%.0f p99_ms=%.3f server_cores=%.2f per_server_core_s=%.0f%s%s\n",
        order[i], best[k], p99[k], cores[k], (cores[k] > 0 ? best[k] / cores[k] : 0),
        (k in wbest ? sprintf(" per_worker_core_s=%.0f", wbest[k]) : ""), note
    }
  }' | tee "$tmp/best.txt"

# ---- verdicts ----
# sluice at its better --threads and nginx at its better worker count, per
# target (the configuration with the most requests/s; its best p99).
echo "# verdicts"
awk '
  function val(k,   i) { for (i = 1; i <= NF; i++) if (index($i, k "=") == 1) return substr($i, length(k) + 2); return "" }
  function verdict(name, a, b, op, target, nz,   v) {
    if (a == "" || b == "" || b == 0) { printf "%s=n/a target%s%s MISS (no result)\n", name, op, target; return }
    v = a / b
    printf "%s=%.3f target%s%s %s%s\n", name, v, op, target, ((op == ">=" ? v >= target : v <= target) ? "ok" : "MISS"),
      (nz ? " (noisy: the machine was busy; run it again)" : "")
  }
  function info(name, a, b) { if (a != "" && b != "" && b > 0) printf "%s=%.2f (for comparison)\n", name, a / b }
  # keep the configuration with the most requests/s under NAME
  function keep(name,   r, nz) {
    r = val("requests_per_s") + 0; nz = / \(noisy runs only\)$/
    if (!(name in rps) || (!nz && noisy[name]) || (nz == noisy[name] && r > rps[name])) {
      rps[name] = r; p99[name] = val("p99_ms"); core[name] = val("per_server_core_s"); noisy[name] = nz
      wcore[name] = val("per_worker_core_s")
      who[name] = val("threads") != "" ? "threads=" val("threads") : val("workers") != "" ? "workers=" val("workers") : ""
    }
  }
  /^best / {
    pl = val("pipeline")
    if (/observe=off .*path=/) keep("obsoff_http")
    else if (/observe=on .*path=/) keep("obson_http")
    else if (/observe=off .*cmd=/) keep("obsoff_resp")
    else if (/observe=on .*cmd=/) keep("obson_resp")
    else if (/pairs=acquire_release/) keep("lpair")
    else if (/pairs=throttle_throttle/) keep("tpair")
    else if (/server=redis cmd=INCR /) keep("incr" pl)
    else if (/server=redis cmd=EVALSHA/) keep("lua" pl)
    else if (/server=sluice .*cmd=SL.THROTTLE/) keep("sl" pl)
    else if (/server=nginx .*path=\/limit/) keep("ngx")
    else if (/server=nginx .*path=\/plain/) keep("plain")
    else if (/server=sluice .*path=\/v1\/throttle/) keep("slh")
    else if (/server=sluice .*path=\/v1\/check/) keep("slc")
    else if (/server=sluice .*rpc=ShouldRateLimit/) keep("slg")
  }
  END {
    printf "# sluice: RESP -P 1 at %s, -P 16 at %s, HTTP at %s; nginx limit_req at %s\n",
      who["sl1"], who["sl16"], who["slh"], who["ngx"]
    verdict("ratio_resp_p1", rps["sl1"], rps["incr1"], ">=", 1, noisy["sl1"] || noisy["incr1"])
    verdict("ratio_resp_p16", rps["sl16"], rps["incr16"], ">=", 1, noisy["sl16"] || noisy["incr16"])
    # Pipelines batched (issue 20): -P 16 at 1.5x INCR.
    verdict("ratio_resp_p16_batched", rps["sl16"], rps["incr16"], ">=", 1.5, noisy["sl16"] || noisy["incr16"])
    verdict("ratio_http", rps["slh"], rps["ngx"], ">=", 1, noisy["slh"] || noisy["ngx"])
    if (p99["slh"] == "" || p99["ngx"] == "") print "p99_http_ms=n/a MISS (no result)"
    else printf "p99_http_ms=%.3f nginx=%.3f %s%s\n", p99["slh"], p99["ngx"], (p99["slh"] + 0 <= p99["ngx"] + 0 ? "ok" : "MISS"),
      (noisy["slh"] || noisy["ngx"] ? " (noisy: the machine was busy; run it again)" : "")
    verdict("ratio_grpc_vs_http_check", rps["slg"], rps["slc"], ">=", 0.8, noisy["slg"] || noisy["slc"])
    if (p99["slg"] == "" || p99["slc"] == "") print "p99_grpc_ms=n/a MISS (no result)"
    else printf "p99_grpc_ms=%.3f http_check=%.3f target<=2x %s%s\n", p99["slg"], p99["slc"],
      (p99["slg"] + 0 <= 2 * p99["slc"] ? "ok" : "MISS"),
      (noisy["slg"] || noisy["slc"] ? " (noisy: the machine was busy; run it again)" : "")
    # The denial log (every denial written) and top keys together cost at
    # most 10% of decision throughput (issue 17).
    verdict("ratio_observe_http", rps["obson_http"], rps["obsoff_http"], ">=", 0.9,
      noisy["obson_http"] || noisy["obsoff_http"])
    verdict("ratio_observe_resp_p16", rps["obson_resp"], rps["obsoff_resp"], ">=", 0.9,
      noisy["obson_resp"] || noisy["obsoff_resp"])
    # The same, per second of CPU time of the worker thread: what the
    # ratio of throughput is where the log writer and the counter have
    # cores of their own (on a machine of few cores they take CPU from the
    # client).
    info("ratio_observe_http_per_worker_core", wcore["obson_http"], wcore["obsoff_http"])
    info("ratio_observe_resp_p16_per_worker_core", wcore["obson_resp"], wcore["obsoff_resp"])
    # SL.ACQUIRE + SL.RELEASE pairs against two SL.THROTTLE (issue 16).
    if ("tpair" in rps)
      verdict("ratio_resp_lease_pairs", rps["lpair"], rps["tpair"], ">=", 0.8,
        noisy["lpair"] || noisy["tpair"])
    else print "ratio_resp_lease_pairs=n/a MISS (no resp_pairs: make bench-server builds it)"
    info("ratio_resp_p1_vs_evalsha", rps["sl1"], rps["lua1"])
    info("ratio_resp_p16_vs_evalsha", rps["sl16"], rps["lua16"])
    info("ratio_http_vs_nginx_return_200", rps["slh"], rps["plain"])
    info("per_server_core_ratio_resp_p1", core["sl1"], core["incr1"])
    info("per_server_core_ratio_resp_lease_pairs", core["lpair"], core["tpair"])
    info("per_server_core_ratio_resp_p16", core["sl16"], core["incr16"])
    info("per_server_core_ratio_http", core["slh"], core["ngx"])
  }' "$tmp/best.txt"
