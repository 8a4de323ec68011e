#!/bin/sh
# fleet_approx_split.sh — approximate fleet mode (--sync) with a limit
# split into sub-counters (a rate limit's `split`; docs/fleet.md, "Hot
# keys split into sub-counters"): two daemons, one redis-server (POSIX
# sh; helpers in serve_lib.sh and fleet_lib.sh; python3 reads Redis's
# keys).
#
#   SLUICE=build/sluice sh tests/integration/fleet_approx_split.sh
#
# fixed_window:60/d split 3 ways (shares 20 each), in turn (rule tier)
# and by client (rule plan), through both daemons (--sync 100): 300
# requests in turn at once, 300 in turn at 100 a second (30 sync
# intervals), 300 of 30 clients at once:
#   - the fleet admits at least the limit (in turn: each sub-counter is
#     offered a third; by client: at least one) and at most the limit +
#     the approximate bound, (N - 1) x (burst + the refill of one
#     interval) = 1 x 60, summed over the sub-counters as it holds for
#     each (docs/fleet.md, Approximate mode);
#   - Redis holds each sub-counter at a key of its own, as documented:
#     sl:{TAG}r<len>:<rule>|fixed_window:20/d#<i>/3<key>, i = 0, 1, 2,
#     TAG's slot start + i x 16384 / 3;
#   - every charge reaches Redis once: within 5 s the counts of the three
#     keys add up to what the fleet admitted;
#   - then every daemon has learned the fleet's level: each of its
#     sub-counters denies.

. "$(dirname "$0")/serve_lib.sh"
. "$(dirname "$0")/fleet_lib.sh"
lib_init fleet_approx_split

RP=$(free_port)
rs_start main "$RP" || lib_finish
SYNC=100

cat >"$tmp/conf.yaml" <<'EOF'
domain: hot
descriptors:
  - key: tier
    rate_limit:
      policy: "fixed_window:60/d"
      split: {counters: 3, rotate: true}
  - key: plan
    rate_limit:
      policy: "fixed_window:60/d"
      split: {counters: 3, by: client}
  - key: client
    rate_limit: {unlimited: true}
EOF
ports=""
hports=""
for i in 1 2; do
  sv_start "a$i" -t 1 --store "redis://127.0.0.1:$RP" --sync $SYNC \
    --redis-timeout 1000 --config "$tmp/conf.yaml" || lib_finish
  ports=$ports${ports:+,}$RESP
  hports=$hports${hports:+,}$HTTP
done

# keys.py PORT VALUE: Redis's sl:* keys of tier VALUE, one line each:
# the key (bytes outside ! to ~ as ?), its tag's slot, its sub-counter "i/N", its window's
# count (fixed_window's state: '<i8I4', start and count).
cat >"$tmp/keys.py" <<'EOF'
import re, socket, struct, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=5)
f = s.makefile("rb")
def cmd(*w):
    s.sendall(b"*%d\r\n" % len(w) + b"".join(
        b"$%d\r\n%s\r\n" % (len(x), x) for x in w))
    return read()
def read():
    l = f.readline()
    t, v = l[:1], l[1:-2]
    if t == b"$":
        n = int(v)
        return None if n < 0 else f.read(n + 2)[:-2]
    if t == b"*":
        return [read() for _ in range(int(v))]
    if t in b"+:":
        return v
    raise SystemExit("redis: %r" % l)
def crc16(b):  # CRC16-CCITT (XMODEM), Redis Cluster's key hash
    c = 0
    for x in b:
        c ^= x << 8
        for _ in range(8):
            c = (c << 1) ^ 0x1021 if c & 0x8000 else c << 1
            c &= 0xFFFF
    return c
keys, cur = [], b"0"
while True:
    cur, got = cmd(b"SCAN", cur, b"MATCH", b"sl:*", b"COUNT", b"1000")
    keys += got
    if cur == b"0":
        break
for k in sorted(keys):
    if not k.endswith(sys.argv[2].encode()):
        continue
    tag = k[4:k.index(b"}")]
    sub = re.search(rb"#(\d+/\d+)", k)
    v = cmd(b"GET", k)
    count = struct.unpack("<qI", v)[1] if v and len(v) == 12 else -1
    print(re.sub(rb"[^!-~]", b"?", k).decode(), crc16(tag) % 16384,
          sub.group(1).decode() if sub else "-", count)
EOF
# The counts below are of a UTC day's fixed window, from the first load to
# the last check (~6 s, more on a loaded machine): not near the day's turn.
clear_of_turn 86400 120
# in turn: 300 requests round robin over the two daemons, at once
# (tier=rot), then paced at 100 a second (tier=paced: 30 sync intervals).
printf 'rot\t300\tresp\tSL.CHECK\thot\ttier\trot\n' >"$tmp/jobs"
printf 'paced\t300\tresp\tSL.CHECK\thot\ttier\tpaced\n' >"$tmp/jobs.paced"
# by client: 30 clients, 10 requests each (HTTP: the client in a
# descriptor of its own, which no limit counts).
: >"$tmp/jobs.by"
i=0
while [ $i -lt 30 ]; do
  printf 'c%s\t10\tpost\t/v1/check\t{"domain":"hot","descriptors":[{"entries":[{"key":"plan","value":"by"}]},{"entries":[{"key":"client","value":"u-%s"}]}]}\n' \
    $i $i >>"$tmp/jobs.by"
  i=$((i + 1))
done

# run TAG JOBS OPTION PORTS — the load, its checks; the fleet's admitted
# count in $adm.
run() {
  _t=$1
  _j=$2
  shift 2
  fl_load "$@" --threads 6 "$_j" >"$tmp/sum.$_t"
  eq "$_t: no request failed ($(grep '^ERR' "$tmp/sum.$_t" | head -n 1))" 0 \
    "$(fl_get ALL errors "$tmp/sum.$_t")"
  adm=$(awk '$1 != "ALL" && $1 != "ERR" { split($2, a, "="); s += a[2] } END { print s + 0 }' "$tmp/sum.$_t")
}
run rot "$tmp/jobs" --resp "$ports"
in_range "rot: allowed, 300 at once over 2 daemons (limit 60 + bound 60)" \
  60 120 "$adm"
rot=$adm
run paced "$tmp/jobs.paced" --resp "$ports" --rate 100
in_range "paced: allowed, 100 a second for 3 s over 2 daemons (limit 60 + bound 60)" \
  60 120 "$adm"
paced=$adm
run by "$tmp/jobs.by" --http "$hports"
in_range "by client: allowed, 300 at once over 2 daemons (at most 60 + bound 60)" \
  20 120 "$adm"
by=$adm
say "allowed of 300 (fixed_window:60/d split 3, 2 daemons, --sync $SYNC):" \
  "in turn at once $rot (per daemon $(fl_get rot per "$tmp/sum.rot")), in" \
  "turn at 100/s $paced (per daemon $(fl_get paced per "$tmp/sum.paced")), by" \
  "client at once $by"

# Within 5 s (three sync intervals, and slack for a loaded machine): every
# charge is in Redis, and both daemons have the fleet's level.
sum_is() {
  [ "$("$PY" "$tmp/keys.py" "$RP" "$1" | awk '{ s += $4 } END { print s + 0 }')" = "$2" ]
}
for t in rot paced by; do
  waitfor 50 sum_is "$t" "$(eval echo \$$t)"
done
for t in rot paced by; do
  "$PY" "$tmp/keys.py" "$RP" "$t" >"$tmp/keys.$t"
  eq "$t: the counts of the sub-counters' keys add up to what was allowed" \
    "$(eval echo \$$t)" "$(awk '{ s += $4 } END { print s + 0 }' "$tmp/keys.$t")"
  eq "$t: three keys in Redis, sub-counters 0/3, 1/3, 2/3" "0/3 1/3 2/3" \
    "$(awk '{ print $3 }' "$tmp/keys.$t" | sort | paste -sd' ' -)"
  bad=$(grep -cvE '^sl:\{[^}]{1,3}\}r[0-9]+:[^ ]*\|fixed_window:20/d#[0-2]/3[?](tier|plan)[?]'"$t"' ' "$tmp/keys.$t")
  eq "$t: each key as documented, sl:{TAG}r<len>:<rule>|fixed_window:20/d#i/3<key> ($(head -n 1 "$tmp/keys.$t"))" \
    0 "$bad"
  # slots: start + i x 16384 / 3 (mod 16384)
  gaps=$(sort -k3 "$tmp/keys.$t" | awk 'NR == 1 { s = $2 } { printf "%s%d", (NR > 1 ? " " : ""), ($2 - s + 16384) % 16384 }')
  eq "$t: the tags' slots 16384/3 apart" "0 5461 10922" "$gaps"
  say "$t: $(awk '{ printf "%s%s count %s (slot %s)", (NR > 1 ? "; " : ""), $3, $4, $2 }' "$tmp/keys.$t")"
done
# Each daemon, three requests in turn (one per sub-counter) and each
# client's: all denied. (-t 1: one worker, the rotation passes every
# sub-counter in three.)
for i in 1 2; do
  sv_use "a$i"
  for t in rot paced; do
    d=0
    for r in 1 2 3; do
      d=$((d + $(rcli "$RESP" SL.CHECK hot tier $t | cut -d' ' -f1)))
    done
    eq "$t: a$i denies on every sub-counter after the sync" 0 "$d"
  done
done
lib_finish
