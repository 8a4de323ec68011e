#!/bin/sh
# bench_cli.sh — `sluice bench` as a command (POSIX sh): the line it
# prints per configuration, and a clear error for a bad option value. Its
# figures are make bench's business, not a test's: nothing here is timed.
#
#   SLUICE=build/sluice sh tests/integration/bench_cli.sh   (make integration)

. "$(dirname "$0")/check_lib.sh"
lib_init bench_cli

# run NAME WANT_STATUS PATTERN ARGS... — sluice bench ARGS: its status
# must be WANT_STATUS and its output (stdout and stderr) match PATTERN.
run() {
  _n=$1 _w=$2 _p=$3
  shift 3
  expect_cmd "$_n" "$_w" "$_p" timeout 60 "$SLUICE" bench "$@"
}

run "one configuration: its line" 0 \
  '^algo=gcra keys=1000 threads=1 decisions_per_s=[0-9]* ns_per_decision=[0-9.]* bytes_per_key=[0-9.]*' \
  --algo gcra --keys 1000 --seconds 1
run "two thread counts: a line each" 0 'threads=2' \
  --algo gcra --keys 1000 --threads 1,2 --seconds 1
run "a bad thread count names itself" 2 "threads 'x' is not a number in 1..256" \
  --algo gcra --keys 1000 --threads 1,x --seconds 1
run "a thread count out of range names itself" 2 "threads '0' is not a number" \
  --algo gcra --keys 1000 --threads 0 --seconds 1
run "a bad --keys: an error" 2 "bad value 'lots'" --keys lots

lib_finish
