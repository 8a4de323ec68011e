#!/bin/sh
# run.sh — `make bench-fleet`: fleet mode (state in Redis) beside its
# anchors, all measured in this one run on this machine (127.0.0.1 only),
# and its targets as ratios.
#
# One redis-server (no persistence) serves every configuration; the load is
# redis-benchmark -r 100000 (random keys key:__rand_int__), -c 50 unless
# said otherwise:
#   anchor  EVALSHA of bench/server/tokenbucket.lua (SCRIPT LOAD first)
#           straight at Redis, -P 1 and -P 16: the way rate limiters on
#           Redis usually work
#   exact   sluice serve --store redis://... (a worker thread's decisions
#           of one event-loop pass share EVALSHAs of up to --batch-max
#           (64) decisions each, all of them in one pipeline, written at
#           the end of the pass or up to --batch-window US later):
#           SL.THROTTLE key:__rand_int__ token_bucket:1000/h 1 at its RESP
#           port; --threads 1 and 2 at --batch-window 0 (-c 50 and -c 200
#           at -P 1, -c 50 at -P 16), and --batch-window 200 at the first
#           thread count (-P 1)
#   exact1  the same with --batch-max 1 (one EVALSHA per decision, still
#           pipelined), first thread count, -P 1 and -P 16: what batching
#           several decisions per call brings
#   approx  sluice serve --store redis://... --sync 100 (decisions local;
#           every 100 ms a thread pushes the local charges to Redis and
#           pulls the fleet's remaining back) beside sluice serve --store
#           memory, --threads 1, -P 1 and -P 16
#   overshoot  three --sync 100 daemons on one key, sprayed round-robin for
#           2 s by bench/fleet/spray.py: allowed, against what one limiter
#           allows (burst + refill over the run) and src/fleet/sync.c's
#           bound (N - 1) x (burst + the refill of one interval), with
#           token_bucket:200/m and with token_bucket:100/s:burst=10 (a rate
#           that refills more per interval than its burst); the same spray
#           over the exact-mode daemons, for comparison
#
# Two layouts of the processes on the machine's cores, each configuration
# of -c 50 with --threads 1 measured in both (the others in the first):
#   shared  every process may run on every core (the scheduler places them)
#   pinned  redis-server alone on the last core, sluice and the load
#           generator on the others (taskset): Redis as a fleet runs it, on
#           a machine of its own, so that what it spends is not taken from
#           the daemon measured; memory mode and the anchor in the same
#           places (the anchor's client and Redis then have a core each).
#           Needs 2 cores or more (BENCH_LAYOUTS="shared" leaves it out).
# The verdicts are given for each layout.
#
# Every figure is the best of BENCH_REPEAT runs (default 3) of about
# BENCH_SECONDS (default 2) each, the configurations interleaved round by
# round, after one warm-up run each (50000 requests; it sizes the runs).
# The policy (1000 per hour, burst 1000) allows every request; a key's
# state lives 3.6 s after its last request (in Redis too), so most
# requests create or revive a key, in every configuration alike.
#
# The machine's cores are shared by redis-server, sluice and the load
# generator: each run line says where the CPU went (redis_cores,
# sluice_cores, client_cores, softirq_cores, others_cores; see meter_end;
# sync_thread_cores is the part of sluice's that approximate mode's sync
# thread took), and, from Redis's INFO, the EVALSHAs it ran per second, per
# read (the pipeline depth Redis saw: commands per read(2)), its script
# time per call (script_us) and its CPU per EVALSHA (redis_cpu_us). After
# an approximate-mode run the script waits for its sync thread to finish
# pushing (sync_lag_s), so that the next run has Redis to itself. Runs
# during which other jobs took the CPU are marked noisy and retried. Runs
# during which calls to Redis failed are marked degraded: exact mode's
# (timeouts, the breaker: /metrics' sluice_redis_errors_total and
# _refused_total; those decisions fell back to --on-store-error and were not
# Redis's) and the sync thread's (sync_failures: "warn: sync:" in the
# daemon's log; that round's charges were never pushed). Best-of leaves
# noisy and degraded runs out where a configuration has others. The
# summary gives each component's CPU per decision. Verdict lines:
# `name=value targetOP ok|MISS`; the exit status is 0 either way (a
# benchmark reports, a test asserts). Everything started here is stopped on
# exit, and the temporary directory removed. With the defaults the whole
# run takes about 3 minutes.
#
# Knobs: BENCH_SECONDS, BENCH_REPEAT, BENCH_THREADS ("1 2"), BENCH_WINDOWS
# ("0 200"), BENCH_LAYOUTS ("shared pinned"), BENCH_SYNC (100), BENCH_REDIS_TIMEOUT (the daemon's default),
# BENCH_OVERSHOOT_POLICY, BENCH_OVERSHOOT_FAST_POLICY,
# BENCH_OVERSHOOT_SECONDS (2), BENCH_NOISE (0.25 cores), BENCH_PATIENCE (30 s).
set -eu
SLUICE=${SLUICE:-build/sluice}
S=${BENCH_SECONDS:-2}
R=${BENCH_REPEAT:-3}
THREADS=${BENCH_THREADS:-1 2}
WINDOWS=${BENCH_WINDOWS:-0 200}
LAYOUTS=${BENCH_LAYOUTS:-shared pinned}
SYNC=${BENCH_SYNC:-100}
NOISE=${BENCH_NOISE:-0.25}
PATIENCE=${BENCH_PATIENCE:-30}
OS_POLICY=${BENCH_OVERSHOOT_POLICY:-token_bucket:200/m}
OS_FAST_POLICY=${BENCH_OVERSHOOT_FAST_POLICY:-token_bucket:100/s:burst=10}
REDIS_TIMEOUT=${BENCH_REDIS_TIMEOUT:-}
OS_SECONDS=${BENCH_OVERSHOOT_SECONDS:-2}
OS_DAEMONS=3
KEYS=100000
POLICY=token_bucket:1000/h
here=$(cd "$(dirname "$0")" && pwd)
SLUICE=$(cd "$(dirname "$SLUICE")" && pwd)/$(basename "$SLUICE")

BENCH=bench-fleet
. "$here/../lib.sh"

need redis-server redis-cli redis-benchmark curl taskset
[ -x "$SLUICE" ] || die "$SLUICE not built"


# The cores this script may use (its affinity list, ranges expanded): the
# pinned layout gives the last one to redis-server and the others to
# everything else.
ALL_CPUS=$(taskset -cp $$ | sed 's/.*: //' | tr ',' '\n' |
  awk -F- '{ for (c = $1; c <= ($2 == "" ? $1 : $2); c++) printf "%s%d", (n++ ? "," : ""), c }')
REDIS_CPU=${ALL_CPUS##*,}
REST_CPUS=${ALL_CPUS%,*}
if [ "$REDIS_CPU" = "$ALL_CPUS" ]; then
  echo "# one core only: no pinned layout"
  LAYOUTS=$(echo "$LAYOUTS" | sed 's/pinned//')
fi
echo "# machine: $(nproc) cores, $(uname -m); $(date -u +%Y-%m-%dT%H:%M:%SZ)"
echo "# $(redis-server --version | cut -d' ' -f1-3), $("$SLUICE" --version 2>/dev/null || echo 'sluice ?')"

# ---- servers ----
daemons=""
start_sluice() { # NAME ARGS...: a daemon, its pid, HTTP and RESP ports in NAME_pid, NAME_http, NAME_resp
  name=$1; shift
  log=$tmp/$name.log
  ready=$tmp/$name.ready
  rm -f "$ready"
  "$SLUICE" serve --http 127.0.0.1:0 --resp 127.0.0.1:0 --grpc off --shutdown-grace 100 \
    --ready-file "$ready" "$@" 2>"$log" &
  pids="$pids $!" daemons="$daemons $name"
  eval "${name}_pid=$!"
  wait_for test -f "$ready" || die "sluice $* did not start: $(cat "$log")"
  eval "${name}_http=$(ready_port "$ready" http)"
  eval "${name}_resp=$(ready_port "$ready" resp)"
}

start_redis redis
STORE=redis://127.0.0.1:$redis_port
RT=""; [ -z "$REDIS_TIMEOUT" ] || RT="--redis-timeout $REDIS_TIMEOUT"
sha=$(redis-cli -p "$redis_port" SCRIPT LOAD "$(cat "$here/../server/tokenbucket.lua")")
# The token bucket: capacity 1000, 1000 per 3600000 ms (= token_bucket:1000/h).
TB_ARGS="1000 1000 3600000 1"
T1=${THREADS%% *}    # approximate and memory mode, and batch windows > 0, at this thread count
for t in $THREADS; do
  for w in $WINDOWS; do
    [ "$w" -eq 0 ] || [ "$t" = "$T1" ] || continue
    start_sluice x_t${t}_w$w --threads "$t" --store "$STORE" --batch-window "$w" $RT
  done
done
start_sluice y_t$T1 --threads "$T1" --store "$STORE" --batch-max 1 $RT
start_sluice a_t$T1 --threads "$T1" --store "$STORE" --sync "$SYNC" $RT
start_sluice m_t$T1 --threads "$T1" --store memory
# The approximate-mode daemon's sync thread: started last, so its newest
# task (PID/task/TID: /proc/TID/stat alone would be the whole process's).
eval "a_sync=\$a_t${T1}_pid/task/\$(ls /proc/\$a_t${T1}_pid/task | sort -n | tail -1)"
# sluice's script (src/fleet/decide.lua), as the exact-mode daemons loaded it.
echo "# sluice's Redis script: $(sed -n 's/.*script \([0-9a-f]\{40\}\) loaded.*/\1/p' "$tmp/$(echo $daemons | cut -d' ' -f1).log" | cut -c1-12)"

# ---- one run ----
# Where the machine's CPU went during a run, in cores (CPU seconds per
# wall second): redis-server, sluice (all its threads), the client (this
# shell's children: the load generator), the kernel's softirqs (loopback
# TCP for all sides: part of the work, charged to no process), and
# everything else (others_cores: other jobs on the machine, a VM's steal
# time). This machine may be shared: before each run the script waits for
# it to be quiet (busy under BENCH_NOISE cores, default 0.25), and a run
# during which others took more than that is marked noisy and run again (3
# tries). Waiting and retrying draw on one budget, BENCH_PATIENCE seconds
# (default 30), so the whole stays bounded; once it is spent, runs count as
# they come. Best-of ignores noisy runs where a configuration has others.
meter_start() { # REDIS_PIDS SLUICE_PIDS [SYNC_TID]
  times >"$tmp/times0"
  m_r0=$(cpu_ticks $1) m_s0=$(cpu_ticks $2) m_y0=$(cpu_ticks ${3:-}) m_b0=$(cpu_fields) m_t0=$(now)
}
# REDIS_PIDS SLUICE_PIDS [SYNC_TID]: prints "redis_cores=... sluice_cores=...
# client_cores=... softirq_cores=... others_cores=..." (and sync_thread_cores,
# the part of sluice_cores that approximate mode's sync thread took)
meter_end() {
  m_t1=$(now) m_b1=$(cpu_fields) m_y1=$(cpu_ticks ${3:-}) m_s1=$(cpu_ticks $2) m_r1=$(cpu_ticks $1)
  times >"$tmp/times1"
  echo "$m_t0 $m_t1 $((m_r1 - m_r0)) $((m_s1 - m_s0)) $m_b0 $m_b1 $(child_ticks "$tmp/times0") $(child_ticks "$tmp/times1") $((m_y1 - m_y0))" |
    awk -v t="$TCK" -v noise="$NOISE" -v sy="${3:-}" '{
      w = ($2 - $1) * t; red = $3 / w; srv = $4 / w; cli = ($10 - $9) / w; sirq = ($8 - $6) / w
      oth = ($7 - $5) / w - red - srv - cli
      if (oth < 0) oth = 0
      printf "redis_cores=%.2f sluice_cores=%.2f client_cores=%.2f softirq_cores=%.2f others_cores=%.2f",
        red, srv, cli, sirq, oth
      if (sy != "") printf " sync_thread_cores=%.2f", $11 / w
      printf "%s\n", (oth > noise ? " noisy" : "") }'
}
# The approximate-mode daemon's sync failures so far: they are not in its
# /metrics, only in its log ("warn: sync: redis ...": a call timed out, or
# the connection failed; the round's charges are not pushed).
sync_warnings() {
  cat "$tmp"/a_*.log 2>/dev/null | grep -c 'warn: sync:' || true
}
# Waits (up to 30 s) until Redis runs no more EVALSHAs: approximate mode's
# sync thread may still be pushing the charges of a run that has ended.
# Prints the seconds it took.
drain_sync() {
  d0=$(now) last=$(redis_counters | cut -d' ' -f1)
  i=0
  while [ $i -lt 150 ]; do
    sleep 0.2; cur=$(redis_counters | cut -d' ' -f1)
    [ "$cur" != "$last" ] || break
    last=$cur i=$((i + 1))
  done
  awk -v a="$d0" -v b="$(now)" 'BEGIN { printf "%.1f\n", b - a - 0.2 }'
}
# Redis's counters: EVALSHA calls, their script time (µs), reads done.
redis_counters() {
  redis-cli -p "$redis_port" INFO all 2>/dev/null | tr -d '\r' | awk -F'[:,=]' '
    /^cmdstat_evalsha:/ { c = $3; u = $5 }
    /^total_reads_processed:/ { r = $2 }
    END { print c + 0, u + 0, r + 0 }'
}
# sluice's counters (HTTP_PORT; "-": none): decisions, Redis calls, and
# Redis's failures (errors, calls refused by the open breaker, fallbacks).
sluice_counters() {
  if [ "$1" = - ]; then echo "0 0 0"; return 0; fi
  curl -s -m 5 "http://127.0.0.1:$1/metrics" | awk '
    /^sluice_decisions_total\{kind="throttle"/ { d += $2 }
    /^sluice_redis_calls_total / { c = $2 }
    /^sluice_redis_(errors|refused)_total / || /^sluice_store_fallbacks_total / { f += $2 }
    END { print d + 0, c + 0, f + 0 }'
}

# place LAYOUT SLUICE_PID: puts redis-server and the daemon (-: none) where
# the layout says (every thread: taskset -a), and the load generator's
# cores in CLIENT_CPUS.
place() {
  if [ "$1" = pinned ]; then
    taskset -a -p -c "$REDIS_CPU" "$redis_pid" >/dev/null
    [ "$2" = - ] || taskset -a -p -c "$REST_CPUS" "$2" >/dev/null
    CLIENT_CPUS=$REST_CPUS
  else
    taskset -a -p -c "$ALL_CPUS" "$redis_pid" >/dev/null
    [ "$2" = - ] || taskset -a -p -c "$ALL_CPUS" "$2" >/dev/null
    CLIENT_CPUS=$ALL_CPUS
  fi
}

# resp_run LABEL PORT SLUICE_PIDS SYNC_TID HTTP CLIENTS PIPELINE N RUN
# COMMAND...: one redis-benchmark run; prints "LABEL clients=C pipeline=P
# run=RUN decisions_per_s=... p50_ms=... p99_ms=... redis_cores=... ..." (or
# FAILED with its error).
resp_run() {
  label=$1 port=$2 spids=$3 sync=$4 http=$5 c=$6 pl=$7 n=$8 run=$9; shift 9
  [ "$spids" != - ] || spids=""
  [ "$sync" != - ] || sync=""
  rc=0
  rc0=$(redis_counters) sc0=$(sluice_counters "$http") sw0=$(sync_warnings)
  meter_start "$redis_pid" "$spids" $sync
  timeout $((S * 10 + 30)) taskset -c "$CLIENT_CPUS" redis-benchmark -h 127.0.0.1 -p "$port" -c "$c" -n "$n" \
    -r $KEYS -P "$pl" --csv "$@" >"$tmp/rb.out" 2>"$tmp/rb.err" || rc=$?
  meter_end "$redis_pid" "$spids" $sync >"$tmp/cores" # not in $(...): `times` must see the client
  cores=$(cat "$tmp/cores")
  rc1=$(redis_counters) sc1=$(sluice_counters "$http")
  lag=""; [ -z "$sync" ] || lag=$(drain_sync)
  sw=$(( $(sync_warnings) - sw0 ))
  err=$(grep -v 'Could not fetch server CONFIG' "$tmp/rb.err" | tr '\n' ' ' || true)
  line=$(tail -1 "$tmp/rb.out" | tr -d '"')
  case "$line" in
    test,*) line="" ;;
  esac
  if [ $rc -ne 0 ] || [ -z "$line" ] || [ -n "$err" ]; then
    echo "$label clients=$c pipeline=$pl run=$run FAILED rc=$rc ${err:-no result}"
    return 0
  fi
  # redis: EVALSHAs per second and per read(2) (the pipeline depth Redis
  # saw; INFO's own read is taken off), script µs per call, and Redis's CPU
  # per EVALSHA (µs); sluice: failures (degraded: some decisions were not
  # Redis's), and EVALSHAs per decision in exact mode.
  echo "$line" | awk -F, -v l="$label clients=$c pipeline=$pl run=$run" -v c="$cores" \
    -v w="$m_t0 $m_t1" -v r="$rc0 $rc1" -v s="$sc0 $sc1" -v http="$http" -v lag="$lag" -v sw="$sw" '
    BEGIN { split(w, W, " "); split(r, A, " "); split(s, B, " ") }
    {
      secs = W[2] - W[1]; ev = A[4] - A[1]; us = A[5] - A[2]; rd = A[6] - A[3] - 1
      nz = sub(/ noisy$/, "", c); split(c, C, /[= ]/); rcores = C[2]
      printf "%s decisions_per_s=%.0f p50_ms=%s p99_ms=%s %s", l, $2, $5, $7, c
      if (ev > 0)
        printf " evalsha_per_s=%.0f evalsha_per_read=%.2f script_us=%.2f redis_cpu_us=%.2f",
          ev / secs, (rd > 0 ? ev / rd : 0), us / ev, rcores * secs * 1e6 / ev
      if (http != "-") {
        dec = B[4] - B[1]; fail = B[6] - B[3]
        if (B[5] > B[2] && dec > 0) printf " redis_calls_per_decision=%.2f", (B[5] - B[2]) / dec
        if (lag != "") { printf " sync_lag_s=%s sync_failures=%d", lag, sw; fail += sw }
        printf " store_failures=%d%s", fail, (fail > 0 ? " degraded" : "")
      }
      if (nz) printf " noisy"
      printf "\n"
    }'
}

# ---- the configurations ----
# One per line: LABEL PORT SLUICE_PIDS SYNC_TID HTTP CLIENTS PIPELINE
# COMMAND; label words joined by '+'; "-" for none.
# The first layout runs every configuration; the others those of -c 50
# at --threads 1 (exact mode's at --batch-window 0).
L1=${LAYOUTS%% *}
{
  for lay in $LAYOUTS; do
    for pl in 1 16; do
      echo "mode=anchor+cmd=EVALSHA_token_bucket+layout=$lay $redis_port - - - 50 $pl EVALSHA $sha 1 key:__rand_int__ $TB_ARGS"
    done
    for d in $daemons; do
      eval "p=\$${d}_resp pid=\$${d}_pid http=\$${d}_http"
      sy=-; [ "${d#a_}" = "$d" ] || sy=$a_sync
      case $d in
        x_*) t=${d#x_t}; w=${t#*_w}; t=${t%_w*}
             label="mode=exact+threads=$t+window_us=$w"
             loads="50:1 200:1"; [ "$w" -ne 0 ] || loads="$loads 50:16"
             [ "$lay" = "$L1" ] || { [ "$t" = "$T1" ] && [ "$w" -eq 0 ] && loads="50:1 50:16" || loads=""; } ;;
        y_*) label="mode=exact1+threads=${d#y_t}+window_us=0+batch_max=1"; loads="50:1 50:16"
             [ "$lay" = "$L1" ] || loads="" ;;
        a_*) label="mode=approx+threads=${d#a_t}+sync_ms=$SYNC"; loads="50:1 50:16" ;;
        m_*) label="mode=memory+threads=${d#m_t}"; loads="50:1 50:16" ;;
      esac
      for ld in $loads; do
        echo "$label+layout=$lay $p $pid $sy $http ${ld%:*} ${ld#*:} SL.THROTTLE key:__rand_int__ $POLICY 1"
      done
    done
  done
} >"$tmp/configs"

# run_config LINE: one run of a configuration in round ROUND (0: the
# warm-up, which fills the key tables and sizes the runs to about S
# seconds from its decisions/s).
run_config() {
  set -f; set -- $1; set +f
  label=$(echo "$1" | tr + ' ') port=$2 spid=$3 sync=$4 http=$5 c=$6 pl=$7
  shift 7
  place "$(echo "$label" | sed -n 's/.*layout=\([a-z]*\).*/\1/p')" "$spid"
  for p in $redis_pid $spid; do # redis-benchmark waits forever for a server that is gone
    [ "$p" != - ] || continue
    kill -0 "$p" 2>/dev/null || { echo "$label clients=$c pipeline=$pl run=$ROUND FAILED: the server is gone"; return 0; }
  done
  key=$(echo "$label c$c p$pl" | tr -c 'a-zA-Z0-9\n' _)
  if [ "$ROUND" -eq 0 ]; then
    resp_run "$label" "$port" "$spid" "$sync" "$http" "$c" "$pl" $((KEYS / 2)) warmup "$@" >"$tmp/warm.out"
    rps=$(sed -n 's/.*decisions_per_s=\([0-9]*\).*/\1/p' "$tmp/warm.out")
    # a degraded warm-up ran at fallback speed: size by what Redis decided
    case $(cat "$tmp/warm.out") in
      *" degraded"*) e=$(sed -n 's/.*evalsha_per_s=\([0-9]*\).*/\1/p' "$tmp/warm.out")
                     [ -z "$e" ] || [ "$e" -eq 0 ] || rps=$e ;;
    esac
    n=$(( ${rps:-20000} * S ))
    [ $n -ge 20000 ] || n=20000
    echo "$n" >"$tmp/n.$key"
    echo "# warm-up: $(cat "$tmp/warm.out")"
  else
    resp_run "$label" "$port" "$spid" "$sync" "$http" "$c" "$pl" "$(cat "$tmp/n.$key")" "$ROUND" "$@"
  fi
}

# A server that is gone (crashed, or killed by someone else) is reported
# with its exit status and the end of its log; its runs say FAILED.
check_alive() {
  for d in $daemons; do
    eval "pid=\$${d}_pid"
    [ -n "$pid" ] || continue
    kill -0 "$pid" 2>/dev/null && continue
    st=0; wait "$pid" 2>/dev/null || st=$?
    echo "# sluice $d (pid $pid) is gone: exit status $st$([ $st -gt 128 ] && echo " (signal $((st - 128)))"); its log ends:"
    echo "sluice $d (pid $pid) died during round $ROUND: exit status $st" >>"$tmp/gone.txt"
    tail -5 "$tmp/$d.log" | sed 's/^/#   /'
    eval "${d}_pid="
  done
  if [ -z "${redis_gone:-}" ] && ! kill -0 "$redis_pid" 2>/dev/null; then
    st=0; wait "$redis_pid" 2>/dev/null || st=$?; redis_gone=1
    echo "# redis-server (pid $redis_pid) is gone: exit status $st"
    echo "redis-server (pid $redis_pid) died during round $ROUND: exit status $st" >>"$tmp/gone.txt"
  fi
}

echo "# redis-benchmark -r $KEYS; policy $POLICY; best of $R runs of ~${S} s; one redis-server (port $redis_port)"
: >"$tmp/gone.txt"
run_rounds "sizes the runs"

echo "# noise: $(grep -v '^#' "$tmp/runs.txt" | grep -c ' noisy$' || true) of $(grep -vc '^#' "$tmp/runs.txt" || true) measured runs noisy; $(grep -v '^#' "$tmp/runs.txt" | grep -c ' degraded' || true) degraded; waiting budget left $(patience) of $PATIENCE s"
echo "# denials (the policy keeps every key live and never empty: there should be none)"
for d in $daemons; do
  eval "p=\$${d}_http"
  curl -s -m 5 "http://127.0.0.1:$p/metrics" |
    awk -v d="$d" '/^sluice_decisions_total\{kind="throttle"/ {
        sub(/.*result="/, ""); sub(/"\}/, ""); s = s " " $1 "=" $2 }
      /^sluice_redis_(calls|errors|refused)_total / { r = r " " substr($1, 14) "=" $2 }
      END { printf "sluice %s decisions:%s%s\n", d, s, r }'
done

echo "# approximate mode's sync failures (its log): $(sync_warnings)"
echo "# best of $R per configuration (noisy and degraded runs left out unless a configuration has no other)"
grep -v FAILED "$tmp/runs.txt" | grep -v '^#' | awk '
  function val(k,   i) { for (i = 1; i <= NF; i++) if (index($i, k "=") == 1) return substr($i, length(k) + 2); return "" }
  {
    cfg = $0; sub(/ run=.*/, "", cfg)
    if (!(cfg in seen)) { seen[cfg] = 1; order[++n] = cfg }
    q = / degraded/ ? 2 : / noisy$/ ? 1 : 0; k = cfg SUBSEP q
    r = val("decisions_per_s") + 0; p = val("p99_ms") + 0
    if (!(k in best) || r > best[k]) {
      best[k] = r; line[k] = ""
      nf = split("redis_cores sluice_cores client_cores softirq_cores sync_thread_cores evalsha_per_s evalsha_per_read script_us redis_cpu_us sync_lag_s", f, " ")
      for (j = 1; j <= nf; j++) if (val(f[j]) != "") line[k] = line[k] " " f[j] "=" val(f[j])
    }
    if (!(k in p99) || p < p99[k]) p99[k] = p
  }
  END {
    for (i = 1; i <= n; i++) {
      note = ""
      for (q = 0; q <= 2; q++) { k = order[i] SUBSEP q; if (k in best) break }
      if (q == 1) note = " (noisy runs only)"
      if (q == 2) note = " (degraded runs only: calls to Redis failed)"
      printf "best %s decisions_per_s=%.0f p99_ms=%.3f%s%s\n", order[i], best[k], p99[k], line[k], note
    }
  }' | tee "$tmp/best.txt"

place shared - # what follows starts daemons of its own, on every core

# ---- overshoot ----
# Three --sync daemons of their own on one key, round-robin: with the
# policy of the verdict (BENCH_OVERSHOOT_POLICY), then with a fast one of
# small burst (BENCH_OVERSHOOT_FAST_POLICY), where what the daemons refill
# between rounds outweighs the burst; then the same spray over the
# exact-mode daemons started above (up to three), for comparison. Each key
# is new. spray.py prints allowed, burst + refill over the run (what one
# limiter allows), the overshoot beyond it, and src/fleet/sync.c's bound.
: >"$tmp/overshoot.txt"
if command -v python3 >/dev/null 2>&1; then
  ports=""
  k=1 # (not i: wait_for's)
  while [ $k -le $OS_DAEMONS ]; do
    start_sluice o$k --threads 1 --store "$STORE" --sync "$SYNC" $RT
    eval "ports=\"\$ports \$o${k}_resp\""
    k=$((k + 1))
  done
  xports=""
  n=0
  for d in $daemons; do
    case $d in x_*) ;; *) continue ;; esac
    [ $n -lt $OS_DAEMONS ] || break
    eval "xports=\"\$xports \$${d}_resp\""
    n=$((n + 1))
  done
  echo "# overshoot: $OS_DAEMONS daemons --sync $SYNC (and $n exact-mode ones), one key each time, round-robin for $OS_SECONDS s"
  # Failures during a spray: the sync threads' (their logs), or the exact
  # daemons' (their /metrics: decisions that fell back to --on-store-error,
  # which allows by default, so each one may be an allowed request).
  os_failures() {
    if [ "$1" = exact ]; then
      f=0
      for d in $daemons; do
        case $d in x_*) eval "f=\$((f + \$(sluice_counters \$${d}_http | cut -d' ' -f3)))" ;; esac
      done
      echo $f
    else
      cat "$tmp"/o*.log | grep -c 'warn: sync:' || true
    fi
  }
  for spec in "sync $OS_POLICY $SYNC $ports" "sync_fast $OS_FAST_POLICY $SYNC $ports" "exact $OS_POLICY 0 $xports"; do
    set -- $spec
    m=$1 pol=$2 ms=$3; shift 3
    wait_quiet
    f0=$(os_failures "$m")
    out=$(python3 "$here/spray.py" "$m" "overshoot:$m:$$" "$pol" "$OS_SECONDS" "$ms" "$@" 2>&1) ||
      out="overshoot mode=$m FAILED $out"
    f=$(( $(os_failures "$m") - f0 ))
    echo "$out store_failures=$f$([ "$f" -eq 0 ] || echo " degraded")" >>"$tmp/overshoot.txt"
  done
  cat "$tmp/overshoot.txt"
else
  echo "# overshoot: python3 not found; not measured"
fi

# ---- summary and verdicts ----
# Each target on the best configuration of its kind (the one with the most
# decisions/s; any --threads, --batch-window) at the anchor's -c 50. Where
# the CPU went is given per decision too (µs of each component's CPU per
# decision: redis/sluice/client/softirq), and what one Redis core could
# decide per second at most at that cost (redis_bound_per_s: decisions per
# second of Redis CPU, batched calls counted per decision).
echo "# summary (best of the runs; the CPU split of that run)"
sed 's/^/#   /' "$tmp/gone.txt"
cat "$tmp/best.txt" "$tmp/overshoot.txt" | awk -v layouts="$LAYOUTS" '
  function val(k,   i) { for (i = 1; i <= NF; i++) if (index($i, k "=") == 1) return substr($i, length(k) + 2); return "" }
  # a configuration with degraded runs only has no figure: not all its decisions were Redis ones
  function verdict(name, x, y, op, target,   a, b, nz, v) {
    a = rps[x]; b = rps[y]; nz = bad[x] || bad[y]
    if (deg[x] || deg[y]) { printf "%s=n/a target%s%s MISS (degraded runs only: calls to Redis failed)\n", name, op, target; return }
    if (a == "" || b == "" || b == 0) { printf "%s=n/a target%s%s MISS (no result)\n", name, op, target; return }
    v = a / b
    printf "%s=%.3f target%s%s %s%s\n", name, v, op, target, ((op == ">=" ? v >= target : v <= target) ? "ok" : "MISS"),
      (nz ? " (noisy or degraded runs only: run it again)" : "")
  }
  function info(name, x, y,   a, b, nz) {
    a = rps[x]; b = rps[y]; nz = bad[x] || bad[y]
    if (deg[x] || deg[y]) { printf "%s=n/a (for comparison; degraded runs only: calls to Redis failed)\n", name; return }
    if (a != "" && b != "" && b > 0) printf "%s=%.2f (for comparison)%s\n", name, a / b, (nz ? " (noisy or degraded runs)" : "")
  }
  function us(cores, r) { return r > 0 ? sprintf("%.1f", cores * 1e6 / r) : "-" }
  # keep the configuration with the most decisions/s under NAME
  function keep(name, title,   r, nz) {
    r = val("decisions_per_s") + 0; nz = / \((noisy|degraded) runs only/
    if (!(name in rps) || (!nz && bad[name]) || (nz == bad[name] && r > rps[name])) {
      rps[name] = r; bad[name] = nz; deg[name] = / \(degraded runs only/; t = title
      if (val("threads") != "") t = t " threads=" val("threads")
      if (val("window_us") != "") t = t " window_us=" val("window_us")
      if (/ \(noisy runs only/) t = t " (noisy)"
      if (/ \(degraded runs only/) t = t " (degraded)"
      desc[name] = sprintf("%-58s %7.0f/s  cpu_us_per_decision=%s/%s/%s/%s", t, r,
        us(val("redis_cores"), r), us(val("sluice_cores"), r), us(val("client_cores"), r), us(val("softirq_cores"), r))
      if (val("sync_thread_cores") != "") desc[name] = desc[name] " (sync thread " us(val("sync_thread_cores"), r) ")"
      if (val("evalsha_per_read") != "") {
        desc[name] = desc[name] sprintf(" evalsha_per_s=%s evalsha_per_read=%s script_us=%s redis_bound_per_s=%.0f",
          val("evalsha_per_s"), val("evalsha_per_read"), val("script_us"), (val("redis_cores") > 0 ? r / val("redis_cores") : 0))
      }
    }
  }
  # names in the first layout as they are, in another with "_" LAYOUT
  /^best / {
    c = val("clients"); pl = val("pipeline"); m = val("mode"); lay = val("layout")
    x = (lay == L[1] ? "" : "_" lay); lt = "[" lay "] "
    if (m == "anchor") keep("lua" pl x, lt "anchor tokenbucket.lua -c 50 -P " pl)
    else if (m == "exact") keep("ex" c "_" pl x, lt "exact -c " c " -P " pl)
    else if (m == "exact1") keep("e1_" pl x, lt "exact --batch-max 1 -c 50 -P " pl)
    else if (m == "approx") keep("ap" pl x, lt "approx --sync " val("sync_ms") " -c 50 -P " pl)
    else if (m == "memory") keep("mem" pl x, lt "memory -c 50 -P " pl)
  }
  /^overshoot mode=/ { m = val("mode"); o[m] = val("overshoot"); ob[m] = val("bound"); ol[m] = $0; od[m] = / degraded$/ }
  BEGIN { nl = split(layouts, L, " ") }
  END {
    split("lua1 lua16 ex50_1 ex200_1 ex50_16 e1_1 e1_16 ap1 mem1 ap16 mem16", names, " ")
    for (j = 1; j <= nl; j++) {
      x = (j == 1 ? "" : "_" L[j])
      for (i = 1; i <= 11; i++) if ((names[i] x) in desc) print "#   " desc[names[i] x]
    }
    split("sync sync_fast exact", om, " ")
    for (i = 1; i <= 3; i++) if (om[i] in ol) print "#   " ol[om[i]]
    print "# verdicts (the first layout'"'"'s names bare, the others'"'"' with _LAYOUT)"
    for (j = 1; j <= nl; j++) {
      x = (j == 1 ? "" : "_" L[j])
      verdict("ratio_exact_p1" x, "ex50_1" x, "lua1" x, ">=", 2)
      info("ratio_exact_p1_vs_anchor_p16" x, "ex50_1" x, "lua16" x)
      if (j == 1) {
        info("ratio_exact_p1_c200", "ex200_1", "lua1")
        info("ratio_exact_p1_c200_vs_anchor_p16", "ex200_1", "lua16")
        info("ratio_exact_batch1_p1", "e1_1", "lua1")
        info("ratio_exact_batch1_p16", "e1_16", "lua16")
      }
      info("ratio_exact_p16" x, "ex50_16" x, "lua16" x)
      info("ratio_memory_p1_vs_anchor_p1" x, "mem1" x, "lua1" x)
      verdict("ratio_approx_p1" x, "ap1" x, "mem1" x, ">=", 0.8)
      verdict("ratio_approx_p16" x, "ap16" x, "mem16" x, ">=", 0.8)
    }
    for (i = 1; i <= 2; i++) {
      m = om[i]
      if (m in o) printf "overshoot_%s=%s target<=%s %s%s\n", m, o[m], ob[m], (o[m] + 0 <= ob[m] + 0 ? "ok" : "MISS"),
        (od[m] ? " (degraded: calls to Redis failed during the spray)" : "")
      else printf "overshoot_%s=n/a MISS (no result)\n", m
    }
    if ("exact" in o) printf "overshoot_exact=%s (for comparison: exact mode)%s\n", o["exact"],
      (od["exact"] ? " (degraded: decisions fell back to --on-store-error during the spray)" : "")
  }'
