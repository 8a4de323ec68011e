#!/bin/sh
# serve_resp.sh — integration checks for the Redis-protocol side of
# `sluice serve` (POSIX sh; redis-cli, redis-benchmark, and resp_raw.py for
# exact bytes on the wire; helpers in serve_lib.sh).
#
#   SLUICE=build/sluice sh tests/integration/serve_resp.sh   (make integration)
#
# Every command and its errors through redis-cli, the AUTH flow,
# CL.THROTTLE against redis-cell's documented figures, SL.THROTTLE and
# SL.CHECK figures, pipelining, redis-benchmark, hostile input (each
# malformed request gets its "-ERR Protocol error" and the connection is
# closed, as Redis does; the daemon serves others afterwards), and many
# clients at once. Figures come from the policies' definitions (comments
# beside them), never recorded from the binary.

. "$(dirname "$0")/serve_lib.sh"
lib_init serve_resp
RAW="$PY $(dirname "$0")/resp_raw.py"
for t in redis-cli redis-benchmark; do
  if ! command -v $t >/dev/null 2>&1; then
    echo "serve_resp: '$t' is missing (scripts/deps.sh test installs it)" >&2
    exit 1
  fi
done

# rc ARGS... — redis-cli's raw replies, one line (fields separated by one
# space); rcn ARGS... — its typed replies ("(integer) 1", "(error) ERR ..."),
# one line, fields separated by " | ".
rc() {
  timeout 20 redis-cli -h 127.0.0.1 -p "$RESP" "$@" </dev/null 2>&1 |
    sed '/^$/d' | paste -sd' ' -
}
rcn() {
  timeout 20 redis-cli -h 127.0.0.1 -p "$RESP" --no-raw "$@" </dev/null 2>&1 |
    sed 's/^ *[0-9]*) //' | paste -sd'|' - | sed 's/|/ | /g'
}
# raw NAME BYTES(printf format) — sends the bytes on one connection; the
# replies, one per line, then CLOSED or OPEN, in $tmp/raw.
raw() {
  printf "$2" >"$tmp/raw.in"
  $RAW "$RESP" send "$tmp/raw.in" "${3:-3}" >"$tmp/raw"
}
raw_is() {
  _got=$(paste -sd'|' "$tmp/raw")
  if [ "$_got" = "$2" ]; then pass; else fail "$1: got '$_got', want '$2'"; fi
}

cat >"$tmp/api.yaml" <<'EOF'
domain: api
descriptors:
  - key: user
    rate_limit: {policy: "sliding_log:5/h"}
  - key: user
    value: banned
    rate_limit: {unit: hour, requests_per_unit: 0}
  - key: tenant
    descriptors:
      - key: user
        rate_limit: {policy: "sliding_log:3/h"}
  - key: free
    rate_limit: {unlimited: true}
EOF
sv_start r -t 2 --config "$tmp/api.yaml" || lib_finish
RPID=$PID

# --- the plain commands -----------------------------------------------------
eq "PING" PONG "$(rc PING)"
eq "PING msg" 'hello world' "$(rc PING 'hello world')"
eq "PING with two arguments" \
  "(error) ERR wrong number of arguments for 'ping' command" "$(rcn PING a b)"
eq "ECHO" 'a b c' "$(rc ECHO 'a b c')"
eq "ECHO an empty string" '""' "$(rcn ECHO '')"
eq "ECHO without argument" \
  "(error) ERR wrong number of arguments for 'echo' command" "$(rcn ECHO)"
eq "SELECT 0" OK "$(rc SELECT 0)"
eq "SELECT 3: one database, as Redis with databases 1" \
  "(error) ERR DB index is out of range" "$(rcn SELECT 3)"
like "COMMAND COUNT (for clients that ask)" '^\(integer\) [0-9]+$' \
  "$(rcn COMMAND COUNT)"
eq "CONFIG GET (for redis-benchmark)" '(empty array)' "$(rcn CONFIG GET save)"
eq "CLIENT SETNAME" OK "$(rc CLIENT SETNAME me)"
like "an unknown command" "^\(error\) ERR unknown command 'FLUSHALL'" \
  "$(rcn FLUSHALL now)"
like "an unknown command, lower case" "^\(error\) ERR unknown command 'get'" \
  "$(rcn get k)"
eq "commands are case-blind" PONG "$(rc pInG)"
eq "AUTH without a password configured" \
  '(error) ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?' \
  "$(rcn AUTH x)"
timeout 20 redis-cli -h 127.0.0.1 -p "$RESP" INFO </dev/null | tr -d '\r' >"$tmp/info"
for l in "process_id:$RPID" "tcp_port:$RESP" "redis_version:7.0.0" \
  '# Server' '# Clients' '# Memory' '# Stats' '# Keyspace'; do
  if grep -qxF "$l" "$tmp/info"; then pass; else
    fail "INFO: no line '$l' (this daemon's pid and port)"
  fi
done
like "INFO: sluice_version" '^sluice_version:[0-9]+\.[0-9]+\.[0-9]+$' \
  "$(grep '^sluice_version:' "$tmp/info")"
like "INFO: maxmemory" '^maxmemory:134217728$' "$(grep '^maxmemory:' "$tmp/info")"
raw "QUIT" 'PING\r\nQUIT\r\nPING\r\n'
raw_is "QUIT: +OK, then the connection is closed" '+PONG|+OK|CLOSED'

# --- CL.THROTTLE: redis-cell's reply, exactly ------------------------------
# redis-cell's README: CL.THROTTLE user123 15 30 60 -> [0, 16, 15, -1, 2]:
# allowed, limit = max_burst + 1, remaining, retry_after -1, reset 2 s (one
# emission interval, 60 s / 30). GCRA: request i (at t ~ 0) leaves 16 - i
# and moves the theoretical arrival time to 2i s: reset 2i. The 17th is
# limited: retry after 2 s (whole seconds, +1 when >= 1 ms is left over),
# reset 32. All 17 in one connection; valid while they span < 1 s.
cell() {
  k=user123-$1
  t0=$(now_ms)
  i=0
  while [ $i -lt 17 ]; do echo "CL.THROTTLE $k 15 30 60"; i=$((i + 1)); done |
    timeout 20 redis-cli -h 127.0.0.1 -p "$RESP" | paste -sd' ' - >"$tmp/cell"
  t1=$(now_ms)
  [ $((t1 - t0)) -lt 900 ] || return 1
  want=$(awk 'BEGIN { for (i = 1; i <= 16; i++) printf "0 16 %d -1 %d ", 16 - i, 2 * i
                      printf "1 16 0 2 32" }')
  eq "CL.THROTTLE user123 15 30 60, 17 times (redis-cell's figures)" "$want" \
    "$(cat "$tmp/cell")"
}
cell 1 || cell 2 || cell 3 || fail "CL.THROTTLE: 17 requests never fit in 0.9 s"
eq "CL.THROTTLE: a fresh key" '0 16 15 -1 2' "$(rc CL.THROTTLE fresh 15 30 60)"
eq "CL.THROTTLE: explicit quantity 1" '0 16 15 -1 2' \
  "$(rc CL.THROTTLE fresh2 15 30 60 1)"
eq "CL.THROTTLE: quantity 16 takes the whole burst" '0 16 0 -1 32' \
  "$(rc CL.THROTTLE q16 15 30 60 16)"
like "CL.THROTTLE: quantity 17 can never pass: limited, retry -1" \
  '^1 16 [0-9]+ -1 [0-9]+$' "$(rc CL.THROTTLE q17 15 30 60 17)"
eq "CL.THROTTLE: max_burst 0, 1 per 1 s" '0 1 0 -1 1' "$(rc CL.THROTTLE b0 0 1 1)"
like "CL.THROTTLE: max_burst 0, again" '^1 1 0 1 1$' "$(rc CL.THROTTLE b0 0 1 1)"
# redis-cell's errors, byte for byte: its module prefixes each with "Cell
# error: ", and parses numbers as Rust's i64 does.
eq "CL.THROTTLE: too few arguments" \
  '(error) Cell error: Store error: Usage: cl.throttle <key> <max_burst> <count per period> <period> [<quantity>]' \
  "$(rcn CL.THROTTLE k 1 1)"
like "CL.THROTTLE: too many arguments" '^\(error\) Cell error: Store error: Usage: ' \
  "$(rcn CL.THROTTLE k 1 1 1 1 1)"
eq "CL.THROTTLE: not a number" \
  "(error) Cell error: Store error: Couldn't parse as integer: x" "$(rcn CL.THROTTLE k x 1 1)"
eq "CL.THROTTLE: a leading space is not a number" \
  "(error) Cell error: Store error: Couldn't parse as integer:  1" "$(rcn CL.THROTTLE k ' 1' 1 1)"
eq "CL.THROTTLE: past 64 bits is not a number" \
  "(error) Cell error: Store error: Couldn't parse as integer: 9223372036854775808" \
  "$(rcn CL.THROTTLE k 9223372036854775808 1 1)"
like "CL.THROTTLE: a sign is a number (as Rust reads one)" '^0 2 ' \
  "$(rc CL.THROTTLE plus +1 1 1)"
eq "CL.THROTTLE: a zero rate" '(error) Cell error: Store error: Zero rates are not supported' \
  "$(rcn CL.THROTTLE k 1 0 1)"
eq "CL.THROTTLE: a zero period" '(error) Cell error: Store error: Zero rates are not supported' \
  "$(rcn CL.THROTTLE k 1 1 0)"
like "CL.THROTTLE: a negative burst" '^\(error\) Cell error: Store error: max_burst' \
  "$(rcn CL.THROTTLE k -1 1 1)"
like "CL.THROTTLE: a negative quantity" '^\(error\) Cell error: Store error: quantity' \
  "$(rcn CL.THROTTLE k 1 1 1 -1)"

# --- SL.THROTTLE: [allowed, limit, remaining, retry_after_ms, reset_ms,
# delay_ms] --------------------------------------------------------------------
# gcra:1/h: the first takes the only unit, reset exactly 1 h; the second is
# denied, retry after the same (1 h less the ms between them).
eq "SL.THROTTLE gcra:1/h: first" '1 1 0 0 3600000 0' "$(rc SL.THROTTLE s1 gcra:1/h)"
set -- $(rc SL.THROTTLE s1 gcra:1/h)
eq "SL.THROTTLE gcra:1/h: second is denied" '0 1 0 0' "$1 $2 $3 $6"
in_range "SL.THROTTLE: retry_after_ms" 3500000 3600000 "$4"
eq "SL.THROTTLE: retry_after_ms = reset_ms" "$4" "$5"
like "SL.THROTTLE: cost 0 peeks" '^1 1 0 0 [0-9]+ 0$' "$(rc SL.THROTTLE s1 gcra:1/h 0)"
eq "SL.THROTTLE: same key, another policy, another state" '1 2 1 0 1800000 0' \
  "$(rc SL.THROTTLE s1 gcra:2/h)"
eq "SL.THROTTLE: cost 3 of 5" '1 5 2 0 3600000 0' \
  "$(rc SL.THROTTLE s2 sliding_log:5/h 3)"
set -- $(rc SL.THROTTLE lb leaky_bucket:1/h:burst=3)
eq "SL.THROTTLE leaky_bucket: first, no delay" '1 3 2 0' "$1 $2 $3 $6"
set -- $(rc SL.THROTTLE lb leaky_bucket:1/h:burst=3)
in_range "SL.THROTTLE leaky_bucket: second waits one interval" 3590000 3600000 "$6"
like "SL.THROTTLE: a bad policy" "^\(error\) ERR invalid policy: .*bogus" \
  "$(rcn SL.THROTTLE k bogus)"
like "SL.THROTTLE: limit 0" "^\(error\) ERR invalid policy" \
  "$(rcn SL.THROTTLE k gcra:0/s)"
like "SL.THROTTLE: cost x" '^\(error\) ERR cost' "$(rcn SL.THROTTLE k gcra:1/h x)"
like "SL.THROTTLE: cost -1" '^\(error\) ERR cost' "$(rcn SL.THROTTLE k gcra:1/h -1)"
like "SL.THROTTLE: cost above the capacity" '^\(error\) ERR cost 2 can never' \
  "$(rcn SL.THROTTLE k gcra:1/h 2)"
like "SL.THROTTLE: too few arguments" '^\(error\) ERR wrong number' \
  "$(rcn SL.THROTTLE k)"
like "SL.THROTTLE: a 1025-byte key" '^\(error\) ERR key' \
  "$(rcn SL.THROTTLE "$(awk 'BEGIN { while (n++ < 1025) printf "k" }')" gcra:1/h)"

# SL.RESET forgets a key under every ad-hoc policy.
eq "SL.RESET: the states of s1 (gcra:1/h, gcra:2/h)" 2 "$(rc SL.RESET s1)"
eq "SL.RESET: then s1 starts afresh" '1 1 0 0 3600000 0' \
  "$(rc SL.THROTTLE s1 gcra:1/h)"
eq "SL.RESET: an unknown key" 0 "$(rc SL.RESET never-seen)"
like "SL.RESET: without a key" '^\(error\) ERR wrong number' "$(rcn SL.RESET)"
like "SL.RESET: an empty policy is an error, not every policy" '^\(error\) ERR invalid policy: policy is empty' "$(rcn SL.RESET s1 "")"
like "SL.RESET: too many arguments" '^\(error\) ERR wrong number' \
  "$(rcn SL.RESET s1 gcra:1/h x)"
# SL.RESET key policy: only that policy's state (spelled any way that
# parses to it).
rc SL.THROTTLE s2 gcra:1/h >/dev/null
rc SL.THROTTLE s2 gcra:2/h >/dev/null
eq "SL.RESET key policy: the state under that policy" 1 \
  "$(rc SL.RESET s2 gcra:1/3600s)"
eq "SL.RESET key policy: that policy starts afresh" '1 1 0 0 3600000 0' \
  "$(rc SL.THROTTLE s2 gcra:1/h)"
like "SL.RESET key policy: the other keeps its count (remaining 1 of 2)" \
  '^1 2 1 0 [0-9]+ 0$' "$(rc SL.THROTTLE s2 gcra:2/h 0)"
eq "SL.RESET key policy: a policy never used" 0 "$(rc SL.RESET s2 gcra:9/h)"
like "SL.RESET key policy: a bad policy" '^\(error\) ERR invalid policy: .*bogus' \
  "$(rcn SL.RESET s2 bogus)"
like "DBSIZE: the keys held" '^[0-9]+$' "$(rc DBSIZE)"

# --- SL.CHECK: [allowed, limit, remaining, retry_after_ms, reset_ms, rule] -----
eq "SL.CHECK: first" '1 5 4 0 3600000 api.user' "$(rc SL.CHECK api user u1)"
set -- $(rc SL.CHECK api user u1 HITS 4)
eq "SL.CHECK HITS 4" '1 5 0 0 api.user' "$1 $2 $3 $4 $6"
set -- $(rc SL.CHECK api user u1)
eq "SL.CHECK: denied" '0 5 0 api.user' "$1 $2 $3 $6"
in_range "SL.CHECK: retry_after_ms" 3500000 3600000 "$4"
set -- $(rc SL.CHECK api user u1 HITS 0)
eq "SL.CHECK HITS 0 peeks" '1 5 0 0 api.user' "$1 $2 $3 $4 $6"
eq "SL.CHECK: another value, its own counter" '1 5 4 0 3600000 api.user' \
  "$(rc SL.CHECK api user u2)"
get "$URL/v1/check?domain=api&user=u2"
want_jv "SL.CHECK and HTTP share the counters" \
  'd["statuses"][0]["limit_remaining"]' 3
set -- $(rc SL.CHECK api user banned)
eq "SL.CHECK: requests_per_unit 0 blocks, never (retry -1)" \
  '0 0 0 -1 api.user_banned' "$1 $2 $3 $4 $6"
eq "SL.CHECK: nested" '1 3 2 0 3600000 api.tenant.user' \
  "$(rc SL.CHECK api tenant t1 user u1)"
# An unlimited rule: no limit, but named (no rule at all: "", below).
eq "SL.CHECK: unlimited: allowed, no limit, the rule named" \
  '(integer) 1 | (integer) -1 | (integer) -1 | (integer) 0 | (integer) 0 | "api.free"' \
  "$(rcn SL.CHECK api free x)"
eq "SL.CHECK: no rule matched: limit -1, rule empty" \
  '(integer) 1 | (integer) -1 | (integer) -1 | (integer) 0 | (integer) 0 | ""' \
  "$(rcn SL.CHECK api nothing x)"
eq "SL.CHECK: depth mismatch: no rule" '1 -1 -1 0 0' \
  "$(rc SL.CHECK api tenant t1)"
like "SL.CHECK: hits above the limit" '^\(error\) ERR cost 6 can never' \
  "$(rcn SL.CHECK api user u3 HITS 6)"
eq "SL.CHECK: an unknown domain" "(error) ERR unknown domain 'nodomain'" \
  "$(rcn SL.CHECK nodomain k v)"
like "SL.CHECK: a key without value" '^\(error\) ERR wrong number' \
  "$(rcn SL.CHECK api user)"
like "SL.CHECK: HITS x" '^\(error\) ERR HITS' "$(rcn SL.CHECK api user u1 HITS x)"
like "SL.CHECK: 17 pairs" '^\(error\) ERR at most 16' \
  "$(rcn SL.CHECK api $(awk 'BEGIN { for (i = 0; i < 17; i++) printf "k%d v ", i }'))"

# --- AUTH (--password, $SLUICE_PASSWORD) ------------------------------------------
sv_start p -t 1 --http off --password hunter2 || lib_finish
eq "NOAUTH before AUTH" '(error) NOAUTH Authentication required.' "$(rcn PING)"
eq "NOAUTH for the rate limit commands too" \
  '(error) NOAUTH Authentication required.' "$(rcn SL.THROTTLE k gcra:1/h)"
eq "WRONGPASS" \
  '(error) WRONGPASS invalid username-password pair or user is disabled.' \
  "$(rcn AUTH wrong)"
eq "AUTH default user, wrong user name" \
  '(error) WRONGPASS invalid username-password pair or user is disabled.' \
  "$(rcn AUTH bob hunter2)"
eq "AUTH with the password" OK "$(rc AUTH hunter2)"
eq "AUTH default PASSWORD" OK "$(rc AUTH default hunter2)"
like "AUTH with no argument" '^\(error\) ERR wrong number' "$(rcn AUTH)"
eq "redis-cli -a" PONG "$(rc -a hunter2 --no-auth-warning PING)"
eq "redis-cli --user default --pass" PONG \
  "$(rc --user default --pass hunter2 --no-auth-warning PING)"
eq "after AUTH, the commands work" '1 1 0 0 3600000 0' \
  "$(rc -a hunter2 --no-auth-warning SL.THROTTLE k gcra:1/h)"
raw "the AUTH flow on one connection" \
  'PING\r\nAUTH nope\r\nPING\r\nAUTH hunter2\r\nPING\r\nQUIT\r\n'
raw_is "the AUTH flow on one connection" \
  '-NOAUTH Authentication required.|-WRONGPASS invalid username-password pair or user is disabled.|-NOAUTH Authentication required.|+OK|+PONG|+OK|CLOSED'
raw "QUIT before AUTH" 'QUIT\r\n'
raw_is "QUIT before AUTH" '+OK|CLOSED'
sv_stop p
SLUICE_PASSWORD=frompw sv_start pe -t 1 --http off || lib_finish
eq "\$SLUICE_PASSWORD: NOAUTH" '(error) NOAUTH Authentication required.' "$(rcn PING)"
eq "\$SLUICE_PASSWORD: AUTH" PONG "$(rc -a frompw --no-auth-warning PING)"
sv_stop pe
sv_use r

# --- pipelining ----------------------------------------------------------------
# 100 rounds of PING (inline), ECHO (multibulk, a space inside) and
# SL.THROTTLE on one key, in one write; every reply in order, remaining
# counting down 99..0.
awk 'BEGIN { for (i = 1; i <= 100; i++) {
    printf "PING\r\n"
    m = "msg " i
    printf "*2\r\n$4\r\nECHO\r\n$%d\r\n%s\r\n", length(m), m
    printf "*3\r\n$11\r\nSL.THROTTLE\r\n$4\r\npipe\r\n$17\r\nsliding_log:100/h\r\n"
  }
  printf "QUIT\r\n" }' >"$tmp/pipe.in"
$RAW "$RESP" send "$tmp/pipe.in" 10 | sed 's/^\(\*6 \[:1, :100, :[0-9]*, :0, :\)[0-9]*/\1R/' >"$tmp/pipe.out"
awk 'BEGIN { for (i = 1; i <= 100; i++) {
    print "+PONG"; print "$msg " i; printf "*6 [:1, :100, :%d, :0, :R, :0]\n", 100 - i }
  print "+OK"; print "CLOSED" }' >"$tmp/pipe.want"
if cmp -s "$tmp/pipe.want" "$tmp/pipe.out"; then pass; else
  fail "pipelining: 301 replies not as expected (< want, > got):"
  diff "$tmp/pipe.want" "$tmp/pipe.out" | head -n 10 | sed 's/^/    /' >&2
fi
# redis-cli --pipe: 1000 commands in the protocol, all answered, no error.
awk 'BEGIN { for (i = 0; i < 1000; i++)
  printf "*3\r\n$11\r\nSL.THROTTLE\r\n$5\r\npipe2\r\n$8\r\ngcra:9/s\r\n" }' |
  timeout 60 redis-cli -h 127.0.0.1 -p "$RESP" --pipe >"$tmp/pipe2" 2>&1
eq "redis-cli --pipe: exit status" 0 $?
if grep -q '^errors: 0, replies: 1000$' "$tmp/pipe2"; then pass; else
  fail "redis-cli --pipe: $(tail -n 1 "$tmp/pipe2")"
fi

# --- redis-benchmark ---------------------------------------------------------------
# bench NAME ARGS... — must finish, exit 0, print no error, and report a rate.
bench() {
  _n=$1
  shift
  timeout 120 redis-benchmark -h 127.0.0.1 -p "$RESP" -n 5000 -c 20 -P 16 \
    --csv "$@" >"$tmp/bench" 2>&1
  eq "redis-benchmark $_n: exit status" 0 $?
  if grep -qi 'error' "$tmp/bench"; then
    fail "redis-benchmark $_n: $(grep -i error "$tmp/bench" | head -n 1)"
  else
    pass
  fi
  like "redis-benchmark $_n: a rate" '^"[^"]+","[0-9]+\.[0-9]+"' \
    "$(grep -v '^"test"' "$tmp/bench" | grep '^"' | tail -n 1)"
}
bench PING -t ping
bench SL.THROTTLE -r 1000 SL.THROTTLE key:__rand_int__ gcra:100/s
bench CL.THROTTLE -r 1000 CL.THROTTLE key:__rand_int__ 15 30 60
eq "after redis-benchmark: still serving" PONG "$(rc PING)"

# --- the memory cap ---------------------------------------------------------------
# 100 000 distinct keys into a 1 MiB store: it evicts, stays under its cap,
# and keeps answering.
sv_start cap -t 2 --http 127.0.0.1:0 -m 1M || lib_finish
timeout 120 redis-benchmark -h 127.0.0.1 -p "$RESP" -n 100000 -c 20 -P 16 \
  -r 100000000 --csv SL.THROTTLE key:__rand_int__ sliding_log:100/h \
  >"$tmp/bench" 2>&1
eq "-m 1M flood: redis-benchmark's exit status" 0 $?
if grep -qi error "$tmp/bench"; then fail "-m 1M flood: $(grep -i error "$tmp/bench" | head -n 1)"; else pass; fi
eq "-m 1M flood: sluice_store_max_bytes" 1048576 "$(metric sluice_store_max_bytes)"
in_range "-m 1M flood: sluice_store_bytes stays under the cap" 1 1048576 \
  "$(metric sluice_store_bytes)"
in_range "-m 1M flood: live keys were evicted" 1 100000 \
  "$(metric sluice_store_evictions_total)"
eq "-m 1M flood: a new key is still decided" '1 100 99 0 3600000 0' \
  "$(rc SL.THROTTLE after-flood sliding_log:100/h)"
sv_stop cap
sv_use r

# --- hostile input: "-ERR Protocol error: ..." and the connection closed --------
hostile() {
  raw "$1" "$2"
  raw_is "hostile: $1" "$3"
}
hostile "a multibulk length of 3000000000" '*3000000000\r\n' \
  '-ERR Protocol error: invalid multibulk length|CLOSED'
hostile "1025 arguments (max 1024)" '*1025\r\n' \
  '-ERR Protocol error: invalid multibulk length|CLOSED'
hostile "a multibulk length that is not a number" '*abc\r\n' \
  '-ERR Protocol error: invalid multibulk length|CLOSED'
hostile "binary garbage after '*'" '*\377\376\001\r\n' \
  '-ERR Protocol error: invalid multibulk length|CLOSED'
hostile "a bulk length of -5" '*1\r\n$-5\r\n' \
  '-ERR Protocol error: invalid bulk length|CLOSED'
hostile "a bulk of 1000000 bytes (max 64 KiB)" '*1\r\n$1000000\r\n' \
  '-ERR Protocol error: invalid bulk length|CLOSED'
hostile "a bulk of 65537 bytes" '*1\r\n$65537\r\n' \
  '-ERR Protocol error: invalid bulk length|CLOSED'
hostile "an integer where a bulk is expected" '*2\r\n$4\r\nECHO\r\n:5\r\n' \
  "-ERR Protocol error: expected '\$', got ':'|CLOSED"
hostile "a bulk without its CRLF" '*1\r\n$4\r\nPINGxx' \
  '-ERR Protocol error: bulk string not terminated by CRLF|CLOSED'
hostile "replies before the error are sent first" 'PING\r\n*3000000000\r\nPING\r\n' \
  '+PONG|-ERR Protocol error: invalid multibulk length|CLOSED'
awk 'BEGIN { while (n++ < 70000) printf "a" }' >"$tmp/raw.in"
$RAW "$RESP" send "$tmp/raw.in" 3 >"$tmp/raw"
raw_is "hostile: 70000 bytes without a newline (inline max 64 KiB)" \
  '-ERR Protocol error: too big inline request|CLOSED'
# At the limits: fine.
awk 'BEGIN { printf "*2\r\n$4\r\nECHO\r\n$65536\r\n"; while (n++ < 65536) printf "b"
             printf "\r\nQUIT\r\n" }' >"$tmp/raw.in"
$RAW "$RESP" send "$tmp/raw.in" 3 | cut -c1-12 >"$tmp/raw"
raw_is "a bulk of 64 KiB exactly" '$bbbbbbbbbbb|+OK|CLOSED'
awk 'BEGIN { printf "*1024\r\n$4\r\nECHO\r\n"; for (i = 1; i < 1024; i++) printf "$1\r\nx\r\n"
             printf "PING\r\nQUIT\r\n" }' >"$tmp/raw.in"
$RAW "$RESP" send "$tmp/raw.in" 3 >"$tmp/raw"
raw_is "1024 arguments exactly: a command error, the connection stays" \
  "-ERR wrong number of arguments for 'echo' command|+PONG|+OK|CLOSED"
awk 'BEGIN { printf "ECHO "; while (n++ < 65000) printf "c"; printf "\r\nQUIT\r\n" }' \
  >"$tmp/raw.in"
$RAW "$RESP" send "$tmp/raw.in" 3 | cut -c1-12 >"$tmp/raw"
raw_is "an inline command of 65000 bytes" '$ccccccccccc|+OK|CLOSED'
# Binary garbage: 100 KB of random bytes. Lines are inline commands (unknown
# ones) until one is malformed — an unbalanced quote or a bad multibulk
# header — which is a protocol error, then the connection is closed (as
# redis-server 7 does).
"$PY" -S -c 'import random, sys
r = random.Random(1)
sys.stdout.buffer.write(bytes(r.randrange(256) for _ in range(100000)))' \
  >"$tmp/raw.in"
$RAW "$RESP" send "$tmp/raw.in" 3 >"$tmp/raw"
eq "random bytes: errors only" "" "$(grep -av '^-ERR ' "$tmp/raw" | grep -vx CLOSED)"
like "random bytes: ends with a protocol error, closed" \
  '^-ERR Protocol error: [^|]*\|CLOSED$' "$(tail -n 2 "$tmp/raw" | paste -sd'|' -)"
# Inline commands honour quotes as Redis's sdssplitargs does: ECHO "a b" is
# one argument, and an unbalanced quote is "Protocol error: unbalanced
# quotes in request", which closes the connection.
raw "inline quotes" 'ECHO "a b"\r\nQUIT\r\n'
raw_is "inline quotes group an argument, as in Redis" '$a b|+OK|CLOSED'
raw "inline unbalanced quotes" 'ECHO "abc\r\nPING\r\n'
raw_is "an unbalanced quote is a protocol error, as in Redis" \
  '-ERR Protocol error: unbalanced quotes in request|CLOSED'
hostile "an empty inline line is ignored" '\r\n\r\nPING\r\nQUIT\r\n' '+PONG|+OK|CLOSED'
# A request trickling in byte by byte.
printf '*2\r\n$4\r\nECHO\r\n$5\r\nslow!\r\nQUIT\r\n' >"$tmp/raw.in"
"$PY" -S - "$RESP" "$tmp/raw.in" >"$tmp/raw" <<'EOF'
import socket, sys, time
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=10)
for b in open(sys.argv[2], "rb").read():
    s.sendall(bytes([b]))
    time.sleep(0.002)
data = b""
while True:
    c = s.recv(1000)
    if not c:
        break
    data += c
print("OK" if data == b"$5\r\nslow!\r\n+OK\r\n" else repr(data))
EOF
eq "a request sent one byte at a time" OK "$(cat "$tmp/raw")"
eq "after the hostile input: still serving" PONG "$(rc PING)"
if sv_log_has r 'error|ERROR'; then
  fail "hostile input: errors in the daemon's log: $(grep -i error "$LOG" | head -n 1)"
else
  pass
fi

# --- many clients at once ------------------------------------------------------------
printf 'PING\r\n*2\r\n$4\r\nECHO\r\n$5\r\nhello\r\nQUIT\r\n' >"$tmp/many.in"
$RAW "$RESP" many 64 "$tmp/many.in" >"$tmp/many"
eq "64 clients at once: the same replies each" '64 x +PONG | $hello | +OK | CLOSED' \
  "$(cat "$tmp/many")"
# 64 clients, one key at sliding_log:40/h: exactly 40 allowed in all.
printf '*3\r\n$11\r\nSL.THROTTLE\r\n$6\r\nshared\r\n$16\r\nsliding_log:40/h\r\nQUIT\r\n' \
  >"$tmp/many.in"
$RAW "$RESP" many 64 "$tmp/many.in" >"$tmp/many"
eq "64 clients, one key, limit 40: allowed" 40 \
  "$(awk '$3 ~ /^\*6/ && $4 == "[:1," { n += $1 } END { print n + 0 }' "$tmp/many")"
eq "64 clients, one key, limit 40: denied" 24 \
  "$(awk '$3 ~ /^\*6/ && $4 == "[:0," { n += $1 } END { print n + 0 }' "$tmp/many")"
# An open connection shows in the gauge.
$RAW "$RESP" hold 20 >"$tmp/hold" &
holder=$!
lib_track $holder
waitfor 100 grep -qs HELD "$tmp/hold"
in_range "sluice_connections{protocol=\"resp\"} counts an open connection" 1 10 \
  "$(metric 'sluice_connections{protocol="resp"}')"
kill $holder 2>/dev/null
wait $holder 2>/dev/null

# --- pipelined throttle commands: batched, and byte for byte as alone ----
# The same trace twice on one connection each: as RESP arrays in one write
# (consecutive SL.THROTTLE / CL.THROTTLE commands are decided together,
# src/server/resp_batch.c) and as inline commands (never batched: their
# arguments are unquoted into the parser's scratch). Distinct key prefixes
# start both from fresh states; the replies must be the same, in order.
# (CL.THROTTLE answers in whole seconds, the SL.THROTTLE steps are errors,
# peeks of fresh keys and denials of costs above the burst: no figure of
# the trace moves with the few microseconds between the two.)
$PY - "$tmp" <<'PYEOF'
import sys
trace = [
    "CL.THROTTLE {p}c 4 1 60", "CL.THROTTLE {p}c 4 1 60",
    "CL.THROTTLE {p}c 1 2 60", "PING", "CL.THROTTLE {p}c 4 1 60 6",
    "SL.THROTTLE {p}s gcra:10/h 0", "SL.THROTTLE {p}s bogus",
    "SL.THROTTLE {p}s token_bucket:2/h 3", "CL.THROTTLE {p}c 0 0 60",
    "CL.THROTTLE {p}d 0 3 1", "CL.THROTTLE {p}d 0 3 1",
    "SL.THROTTLE {p}s gcra:10/h x", "CL.THROTTLE {p}c 4 1 60 0",
] * 3 + ["CL.THROTTLE {p}e 99 1 3600"] * 20 + ["QUIT"]
with open(sys.argv[1] + "/batch.in", "wb") as f:
    for line in trace:
        w = line.format(p="a:").split()
        f.write(b"*%d\r\n" % len(w))
        for x in w:
            f.write(b"$%d\r\n%s\r\n" % (len(x), x.encode()))
with open(sys.argv[1] + "/alone.in", "wb") as f:
    for line in trace:
        f.write(line.format(p="b:").encode() + b"\r\n")
PYEOF
$RAW "$RESP" send "$tmp/batch.in" 5 >"$tmp/batch.out"
$RAW "$RESP" send "$tmp/alone.in" 5 >"$tmp/alone.out"
eq "pipelined: 60 replies and the close" 61 "$(grep -c . "$tmp/batch.out")"
eq "pipelined: batched replies equal one-at-a-time ones" \
  "$(paste -sd'|' "$tmp/alone.out")" "$(paste -sd'|' "$tmp/batch.out")"
eq "pipelined: a key's 20th CL.THROTTLE of 100 (in order)" \
  "*5 [:0, :100, :80, :-1, :72000]" "$(sed -n 59p "$tmp/batch.out")"

# --- the ad-hoc policies' bound -------------------------------------------------------
# CL.THROTTLE with 2,000 distinct rates on one key and on 2,000 keys: one
# state per key, as redis-cell keeps (algo/cell.h), so no rate costs an
# ad-hoc policy and none is refused.
seq 1 2000 | sed 's/.*/CL.THROTTLE adhoc 10 & 3600/' |
  timeout 60 redis-cli -h 127.0.0.1 -p "$RESP" >"$tmp/adhoc" 2>&1
seq 1 2000 | sed 's/.*/CL.THROTTLE adhoc& 10 & 3600/' |
  timeout 60 redis-cli -h 127.0.0.1 -p "$RESP" >>"$tmp/adhoc" 2>&1
eq "CL.THROTTLE: 4,000 calls at 2,000 distinct rates, no error" 0 \
  "$(grep -c ERR "$tmp/adhoc")"
eq "CL.THROTTLE: 4,000 calls, 4,000 replies of 5" 20000 \
  "$(grep -c . "$tmp/adhoc")"
# SL.THROTTLE with 1,100 distinct policies: past the 1,024 ad-hoc policies
# a daemon keeps, the command says why it failed (it once said "unknown
# error"). Last in this script: the daemon has no room for new ones after.
seq 1 1100 | sed 's/.*/SL.THROTTLE adhoc gcra:&\/h:burst=11/' |
  timeout 60 redis-cli -h 127.0.0.1 -p "$RESP" >"$tmp/adhoc" 2>&1
eq "SL.THROTTLE past 1024 distinct policies: the reason" \
  "ERR too many distinct ad-hoc policies (max 1024)" \
  "$(grep ERR "$tmp/adhoc" | tail -n 1)"

sv_stop r
lib_finish
