#!/bin/sh
# concurrency.sh — concurrency leases end to end (POSIX sh; serve_lib.sh,
# fleet_lib.sh; python3 for the holders):
#
#   SLUICE=build/sluice sh tests/integration/concurrency.sh  (make integration)
#
#   1. memory mode, RESP: N holders and the N+1th denied; a release frees a
#      slot; a release of an unknown, released or bad lease is a clear,
#      harmless answer; expiry frees; a holder killed mid-request (kill -9
#      of the client holding a lease) frees its slot after the lease's TTL;
#   2. HTTP: /v1/acquire, /v1/release, /v1/renew, and a rule of kind
#      concurrency in /v1/check (the lease in the JSON and Sluice-Lease),
#      charged together with a rate rule or not at all;
#   3. exact fleet mode: three daemons on one redis-server, concurrent
#      holders spread over them never hold more than N at once (counted by
#      the holders and in Redis's sorted set), and a lease taken through one
#      daemon is released through another.

. "$(dirname "$0")/serve_lib.sh"
. "$(dirname "$0")/fleet_lib.sh"
lib_init concurrency

r() { _p=$1; shift; timeout 5 redis-cli -h 127.0.0.1 -p "$_p" --raw "$@" 2>&1; }

# ===========================================================================
# 1. memory mode over RESP
# (The rate is a sliding log: part 2 counts its 3 over a second or more,
# which an hour's fixed window could end in between.)
cat >"$tmp/c.yaml" <<'EOF'
domain: api
descriptors:
  - key: user
    rate_limits:
      - {name: inflight, policy: "concurrency:2:lease=10s"}
      - {name: rate, policy: "sliding_log:3/h"}
EOF
sv_start m --config "$tmp/c.yaml" || lib_finish
P=$RESP
POL=concurrency:2:lease=3s
a1=$(r $P SL.ACQUIRE k $POL | sed -n 4p)
a2=$(r $P SL.ACQUIRE k $POL | sed -n 4p)
like "first lease" '^[0-9a-f]{16}\.concurrency:2:lease=3s$' "$a1"
like "second lease" '^[0-9a-f]{16}\.' "$a2"
out=$(r $P SL.ACQUIRE k $POL | tr '\n' ' ')
like "the third is denied, in flight 2, no lease" '^0 2 2  [0-9]+ $' "$out"
eq "release frees" "1 2 1" "$(r $P SL.RELEASE k "$a1" | tr '\n' ' ' | sed 's/ $//')"
eq "twice: harmless" "0 2 1" "$(r $P SL.RELEASE k "$a1" | tr '\n' ' ' | sed 's/ $//')"
like "a bad lease" '^ERR invalid lease' "$(r $P SL.RELEASE k nonsense)"
like "a rate policy has no leases" '^ERR SL.ACQUIRE takes a concurrency' \
  "$(r $P SL.ACQUIRE k gcra:1/s)"
like "a bad policy" '^ERR invalid policy: limit .0. must be positive' \
  "$(r $P SL.ACQUIRE k concurrency:0)"
eq "renewed" "1" "$(r $P SL.RENEW k "$a2" | head -1)"
a3=$(r $P SL.ACQUIRE k $POL | sed -n 4p)
like "the freed slot" '^[0-9a-f]{16}\.' "$a3"
sleep 3.2
eq "expiry frees both" "1" "$(r $P SL.ACQUIRE k $POL | head -1)"
eq "an expired lease is gone" "0" "$(r $P SL.RELEASE k "$a2" | head -1)"

# A holder killed mid-request: it took the only slot and was killed before
# it released; its slot comes back after the TTL, not before.
cat >"$tmp/holder.py" <<'EOF'
import socket, sys, time
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
def cmd(*a):
    s.sendall(("*%d\r\n" % len(a) + "".join("$%d\r\n%s\r\n" % (len(x), x) for x in a)).encode())
    return s.recv(4096)
print(cmd("SL.ACQUIRE", "killed", "concurrency:1:lease=2s").decode().split("\r\n")[1], flush=True)
time.sleep(60)  # "the request": killed before it ends
EOF
"$PY" "$tmp/holder.py" "$P" >"$tmp/holder.out" &
hp=$!
lib_track $hp
waitfor 50 test -s "$tmp/holder.out"
eq "the holder was allowed" ":1" "$(cat "$tmp/holder.out")"
kill -9 $hp 2>/dev/null
t0=$(now_ms)
eq "killed: still held" "0" "$(r $P SL.ACQUIRE killed concurrency:1:lease=2s | head -1)"
i=0
while [ "$(r $P SL.ACQUIRE killed concurrency:1:lease=2s | head -1)" != 1 ] &&
  [ $i -lt 60 ]; do
  sleep 0.1
  i=$((i + 1))
done
dt=$(($(now_ms) - t0))
in_range "freed after the TTL (ms since the kill)" 1 5000 "$dt"
say "a killed holder's slot came back ${dt} ms after the kill (lease 2 s)"

# ===========================================================================
# 2. HTTP
http POST "$URL/v1/acquire?key=h&policy=concurrency:1"
want_code "acquire" 200
L=$(jv 'd["lease"]' | tr -d '"')
eq "its header" "$L" "$(hdr sluice-lease)"
http POST "$URL/v1/acquire?key=h&policy=concurrency:1"
want_code "the second is denied" 429
want_hdr_like "with Retry-After" retry-after '^[0-9]+$'
http POST "$URL/v1/renew?key=h&lease=$L"
want_jv "renewed" 'd["renewed"]' true
http POST "$URL/v1/release?key=h" -H "Sluice-Lease: $L"
want_jv "released (lease in a header)" 'd["released"]' true
http POST "$URL/v1/release?key=h&lease=$L"
want_code "released twice: 200" 200
want_jv "... released false" 'd["released"]' false
http POST "$URL/v1/release?key=h&lease=zz"
want_code "a bad lease: 400" 400
# a concurrency rule and a rate rule on one descriptor: together or not at all
get "$URL/v1/check?domain=api&user=u"
want_code "check with a concurrency rule" 200
U1=$(jv 'd["lease"]' | tr -d '"')
like "check's lease" '^[0-9a-f]{16}$' "$U1"
eq "check's header" "$U1" "$(hdr sluice-lease)"
get "$URL/v1/check?domain=api&user=u"
U2=$(jv 'd["lease"]' | tr -d '"')
get "$URL/v1/check?domain=api&user=u"
want_code "the concurrency rule denies" 429
http POST "$URL/v1/release?domain=api&user=u&lease=$U1"
want_jv "released by its descriptor" 'd["released"]' true
get "$URL/v1/check?domain=api&user=u"
want_code "the third of the rate" 200
U3=$(jv 'd["lease"]' | tr -d '"')
http POST "$URL/v1/release?domain=api&user=u&lease=$U3"
get "$URL/v1/check?domain=api&user=u"
want_code "the rate denies" 429
body_has "no lease when denied" '"allowed":false'
http POST "$URL/v1/release?domain=api&user=u&lease=$U2"
get "$URL/v1/check?domain=api&user=u"
want_code "the rate still denies (no slot was charged meanwhile)" 429
http POST "$URL/v1/release?domain=api&user=u&lease=$U2"
want_jv "the denied request held no lease: the slot was free" 'd["released"]' false
sv_stop m

# ===========================================================================
# 3. exact fleet mode: three daemons on one Redis
RP=$(free_port)
rs_start main "$RP" || lib_finish
for n in 1 2 3; do
  sv_start f$n -t 2 --store redis://127.0.0.1:$RP --redis-timeout 5000 \
    --on-store-error deny || lib_finish
done
ports=""
for n in 1 2 3; do sv_use f$n; ports="$ports $RESP"; done
cat >"$tmp/fleet_hold.py" <<'EOF'
import socket, sys, threading, time
ports = [int(p) for p in sys.argv[1].split()]
N, THREADS, ROUNDS = 3, 12, 30
POL = "concurrency:%d:lease=30s" % N
lock = threading.Lock()
state = {"in": 0, "most": 0, "ok": 0, "denied": 0, "bad": 0}
def conn(p):
    return socket.create_connection(("127.0.0.1", p), timeout=5)
def cmd(s, *a):
    s.sendall(("*%d\r\n" % len(a) + "".join("$%d\r\n%s\r\n" % (len(x), x) for x in a)).encode())
    buf = b""
    while True:  # an array of simple items: read until its last line
        buf += s.recv(4096)
        lines = buf.split(b"\r\n")
        if lines[0].startswith(b"-"):
            return [lines[0].decode()]
        n = int(lines[0][1:])
        items, i = [], 1
        while len(items) < n and i < len(lines) - 1:
            if lines[i].startswith(b"$") and lines[i] != b"$-1":
                if i + 1 >= len(lines) - 1:
                    break
                items.append(lines[i + 1].decode()); i += 2
            else:
                items.append(lines[i].decode()); i += 1
        if len(items) == n:
            return items
def worker(k):
    cs = [conn(p) for p in ports]
    for i in range(ROUNDS):
        a = cs[(k + i) % 3]
        rep = cmd(a, "SL.ACQUIRE", "hot", POL)
        if rep[0] != ":1" and rep[0] != "1":
            with lock: state["denied"] += 1
            time.sleep(0.002)
            continue
        with lock:
            state["ok"] += 1; state["in"] += 1
            state["most"] = max(state["most"], state["in"])
        time.sleep(0.005)
        with lock: state["in"] -= 1
        b = cs[(k + i + 1) % 3]  # released through another daemon
        if cmd(b, "SL.RELEASE", "hot", rep[3])[0] not in (":1", "1"):
            with lock: state["bad"] += 1
ts = [threading.Thread(target=worker, args=(k,)) for k in range(THREADS)]
[t.start() for t in ts]
[t.join(60) for t in ts]
print("most=%d ok=%d denied=%d bad=%d" % (state["most"], state["ok"], state["denied"], state["bad"]))
EOF
out=$(timeout 120 "$PY" "$tmp/fleet_hold.py" "$ports")
say "three daemons, 12 holders, N=3: $out"
most=$(printf '%s' "$out" | sed -n 's/.*most=\([0-9]*\).*/\1/p')
ok=$(printf '%s' "$out" | sed -n 's/.*ok=\([0-9]*\).*/\1/p')
in_range "never more than N in flight" 1 3 "${most:-99}"
in_range "leases were taken" 1 360 "${ok:-0}"
like "every release (through another daemon) found its lease" 'bad=0' "$out"
zk=$(r "$RP" --scan --pattern '*concurrency*' | head -1)
eq "all released: nothing left in Redis" "0" "$(r "$RP" ZCARD "$zk")"
# N held through three daemons, the next denied on any
sv_use f1
l1=$(r $RESP SL.ACQUIRE z concurrency:2:lease=3s | sed -n 4p)
sv_use f2
l2=$(r $RESP SL.ACQUIRE z concurrency:2:lease=3s | sed -n 4p)
sv_use f3
eq "fleet: the third is denied" "0" "$(r $RESP SL.ACQUIRE z concurrency:2:lease=3s | head -1)"
eq "fleet: release through another daemon" "1" "$(r $RESP SL.RELEASE z "$l1" | head -1)"
eq "fleet: the freed slot" "1" "$(r $RESP SL.ACQUIRE z concurrency:2:lease=3s | head -1)"
zk=$(r "$RP" --scan --pattern '*lease=3s*' | head -1)
in_range "the key has a TTL (ms)" 1 3000 "$(r "$RP" PTTL "$zk")"
sleep 3.2
eq "fleet: expiry frees on Redis's clock" "1" "$(r $RESP SL.ACQUIRE z concurrency:2:lease=3s | head -1)"
eq "fleet: an expired lease is unknown" "0" "$(r $RESP SL.RELEASE z "$l2" | head -1)"
for n in 1 2 3; do sv_stop f$n; done
lib_finish
