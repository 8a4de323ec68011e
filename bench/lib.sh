#!/bin/sh
# lib.sh — what the bench scripts share (POSIX sh, sourced): their
# temporary directory and the processes they started (stopped on exit),
# free ports, a daemon's ports from its ready file, polling, CPU
# accounting, waiting for a quiet machine, and the rounds of runs. The
# caller sets BENCH (its name, for messages) and NOISE first; TCK, tmp
# and pids are set here.

tmp=$(mktemp -d)
pids=""
cleanup() {
  for p in $pids; do kill "$p" 2>/dev/null || true; done
  for p in $pids; do # up to 5 s for a graceful exit, then SIGKILL
    i=0
    while kill -0 "$p" 2>/dev/null && [ $i -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
    kill -9 "$p" 2>/dev/null || true
  done
  wait 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT
# (PIPE too: a reader that stops early, as `| head`, must not leave the
# servers running)
trap 'exit 130' INT TERM HUP PIPE

die() { echo "$BENCH: $*" >&2; exit 1; }
# need TOOL... — each must be on PATH (make $BENCH installs them).
need() {
  for tool in "$@"; do
    command -v "$tool" >/dev/null 2>&1 || die "$tool not found (make $BENCH installs it)"
  done
}

# A TCP port no socket uses, below the ephemeral range (where the kernel
# picks the local ports of outgoing connections, the clients' included).
free_port() {
  lo=$(awk '{ print $1 }' /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768)
  [ "$lo" -gt 12000 ] || lo=32768
  p=$(( $(od -An -N2 -tu2 /dev/urandom) % (lo - 11000) + 10000 ))
  while command -v ss >/dev/null 2>&1 && [ -n "$(ss -Htan "sport = :$p" 2>/dev/null)" ]; do
    p=$((p + 1))
  done
  echo $p
}
# ready_port FILE NAME — the port of listener NAME (http, resp) in the file
# `sluice serve --ready-file FILE` writes once it listens:
#   {"pid": N, "http": "127.0.0.1:PORT", "resp": "127.0.0.1:PORT"}
ready_port() {
  sed -n "s/.*\"$2\": \"[^\"]*:\([0-9]*\)\".*/\1/p" "$1"
}
# Polls COMMAND... up to WAIT_TENTHS tenths of a second (default 100).
wait_for() {
  i=0
  until "$@" >/dev/null 2>&1; do
    i=$((i + 1)); [ $i -lt "${WAIT_TENTHS:-100}" ] || return 1; sleep 0.1
  done
}
now() { date +%s.%N; }
# CPU clock ticks used so far by the given processes (all threads).
cpu_ticks() {
  for p in "$@"; do cat /proc/"$p"/stat 2>/dev/null; done |
    sed 's/.*) //' | awk '{ s += $12 + $13 } END { print s + 0 }'
}
TCK=$(getconf CLK_TCK)
# worker_ticks PID...: CPU ticks (user + system) of sluice's worker
# threads alone (named sluice-wN), the threads that serve requests: what
# a daemon's throughput follows where its helper threads (the denial
# log's writer, top keys' counter) have cores of their own. 0 for
# servers without them.
worker_ticks() {
  for p in "$@"; do
    for t in /proc/"$p"/task/*; do
      case $(cat "$t/comm" 2>/dev/null) in
        sluice-w[0-9]*) cat "$t/stat" 2>/dev/null ;;
      esac
    done
  done | sed 's/.*) //' | awk '{ s += $12 + $13 } END { print s + 0 }'
}

# start_redis NAME — a redis-server of its own, no persistence, in
# $tmp/NAME: its pid and port in NAME_pid and NAME_port.
start_redis() {
  mkdir -p "$tmp/$1"
  for try in 1 2 3; do # another port if this one was taken meanwhile
    port=$(free_port)
    redis-server --bind 127.0.0.1 --port "$port" --dir "$tmp/$1" --save '' \
      --appendonly no --logfile "$tmp/$1/log" --daemonize no &
    pid=$!
    if wait_for sh -c "redis-cli -p $port info server | tr -d '\\r' | grep -qx process_id:$pid"; then
      pids="$pids $pid"
      eval "${1}_pid=$pid ${1}_port=$port"
      return 0
    fi
    kill $pid 2>/dev/null || true; wait $pid 2>/dev/null || true
  done
  die "redis-server did not start: $(tail -3 "$tmp/$1/log")"
}

# The machine-wide CPU ticks (busy, softirq) so far.
cpu_fields() { awk '/^cpu / { print $2 + $3 + $4 + $9, $7 + $8 }' /proc/stat; }
child_ticks() { # from `times` output in FILE: children's user + system
  sed -n 2p "$1" | awk -v t="$TCK" '{
    s = 0; for (i = 1; i <= 2; i++) { v = $i; sub(/s$/, "", v); split(v, a, "m"); s += a[1] * 60 + a[2] }
    printf "%.0f\n", s * t }'
}
patience() { cat "$tmp/patience"; }
spend() { echo $(( $(patience) - $1 )) >"$tmp/patience"; }
wait_quiet() {
  while :; do
    set -- $(cpu_fields); sleep 0.5; set -- "$@" $(cpu_fields)
    awk -v a="$1" -v b="$3" -v i="$2" -v j="$4" -v t="$TCK" -v noise="$NOISE" \
      'BEGIN { exit !(((b - a) + (j - i)) / t / 0.5 <= noise) }' && return 0
    [ "$(patience)" -gt 0 ] || return 0
    sleep 1; spend 2
  done
}

# run_rounds WARMUP_WHAT — the measuring: a warm-up round (round 0, whose
# runs are not counted; WARMUP_WHAT says what it is for), then rounds 1
# to $R, each running every configuration of $tmp/configs once, in order,
# with the caller's run_config LINE (which reads ROUND), after waiting for
# a quiet machine; a run marked noisy is run again (3 tries, while the
# patience lasts). Every run's line is printed and kept in $tmp/runs.txt;
# the caller's check_alive runs after each round.
run_rounds() {
  echo "$PATIENCE" >"$tmp/patience"
  : >"$tmp/runs.txt"
  ROUND=0
  while [ $ROUND -le "$R" ]; do
    [ $ROUND -eq 0 ] && echo "# warm-up ($1; not counted)" || echo "# round $ROUND of $R"
    # (no pipeline here: a signal's trap runs as soon as the current run ends)
    while IFS= read -r cfg; do
      try=1
      while :; do
        wait_quiet
        out=$(run_config "$cfg")
        echo "$out"
        echo "$out" >>"$tmp/runs.txt"
        case "$out" in *" noisy"*) ;; *) break ;; esac
        [ $ROUND -gt 0 ] && [ $try -lt 3 ] && [ "$(patience)" -gt 0 ] || break
        spend "$S"
        try=$((try + 1))
      done
    done <"$tmp/configs"
    ROUND=$((ROUND + 1))
    check_alive
  done
}
