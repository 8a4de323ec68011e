#!/bin/sh
# fleet_reconnect.sh — exact fleet mode when Redis (or what stands in
# front of it) closes connections before their first reply (POSIX sh;
# helpers in serve_lib.sh and fleet_lib.sh; python3 for the proxy).
#
#   SLUICE=build/sluice sh tests/integration/fleet_reconnect.sh
#
# A proxy on loopback (python, written below) forwards to a redis-server
# and, told so through a file, closes connections the way CLIENT KILL
# repeated quickly does, but deterministically:
#   1. "kill": it closes every open connection (the daemon's, idle, which
#      had worked), then closes the next new one after reading its first
#      bytes (the reconnection's handshake), then forwards again: the
#      request that made the reconnection is decided by Redis (allowed on
#      a rule whose on_store_error is deny), no fallback, no error, no
#      refused call; the daemon made three connections (docs/fleet.md,
#      When Redis fails; before: the second close opened the breaker and
#      the request got the fallback's deny);
#   2. "drop": it closes every connection after its first bytes (a proxy
#      without its backend): the breaker opens (at the second connection
#      in a row with no reply) and the rule's fallback answers (denied),
#      the next request refused at once without a connection;
#   3. a redis-server at maxclients (one client held): the daemon's
#      connection gets "-ERR max number of clients reached" and is closed;
#      the fallback answers, and the log says why.

. "$(dirname "$0")/serve_lib.sh"
. "$(dirname "$0")/fleet_lib.sh"
lib_init fleet_reconnect

RP=$(free_port)
rs_start main "$RP" || lib_finish
PP=$(free_port)

cat >"$tmp/proxy.py" <<'PYEOF'
# proxy.py LISTEN UPSTREAM DIR: forwards 127.0.0.1:LISTEN to UPSTREAM;
# counts accepted connections in DIR/accepted. DIR/kill (once): closes
# every open connection, then the next new one after its first bytes,
# then forwards again (DIR/killed when the first part is done). DIR/drop
# (while it exists): closes every new connection after its first bytes.
import os, select, socket, sys
listen, up, d = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
ls = socket.socket()
ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
ls.bind(("127.0.0.1", listen))
ls.listen(16)
pairs = {}          # socket -> its peer
fresh_kill = set()  # clients to close after their first bytes
accepted = 0
kill_armed = False
def close(s):
    p = pairs.pop(s, None)
    fresh_kill.discard(s)
    s.close()
    if p is not None:
        pairs.pop(p, None)
        fresh_kill.discard(p)
        p.close()
while True:
    if os.path.exists(d + "/kill") and not kill_armed:
        for s in [s for s in list(pairs) if s in pairs]:
            if s in pairs:
                close(s)
        kill_armed = True
        open(d + "/killed", "w").close()
    r, _, _ = select.select([ls] + list(pairs) + list(fresh_kill), [], [], 0.05)
    for s in r:
        if s is ls:
            c, _ = ls.accept()
            accepted += 1
            with open(d + "/accepted", "w") as f:
                f.write("%d\n" % accepted)
            if os.path.exists(d + "/drop") or (kill_armed and
                                               os.path.exists(d + "/kill")):
                if kill_armed:
                    os.unlink(d + "/kill")
                    kill_armed = False
                fresh_kill.add(c)
                continue
            u = socket.create_connection(("127.0.0.1", up))
            pairs[c] = u
            pairs[u] = c
        elif s in fresh_kill:
            s.recv(65536)
            fresh_kill.discard(s)
            s.close()
        elif s in pairs:
            try:
                b = s.recv(65536)
            except OSError:
                b = b""
            if not b:
                close(s)
            else:
                pairs[s].sendall(b)
PYEOF
mkdir "$tmp/px"
"$PY" "$tmp/proxy.py" "$PP" "$RP" "$tmp/px" &
lib_track $!
waitfor 50 _rs_pong "$PP" || { fail "proxy: never answered PING"; lib_finish; }

cat >"$tmp/conf.yaml" <<'EOF'
domain: h
descriptors:
  - key: d
    on_store_error: deny
    rate_limit: {policy: "token_bucket:1000000/s"}
EOF

# (a breaker of a minute: a fallback after a close could only be the
# breaker's, and no probe hides it)
sv_start x -t 1 --store "redis://127.0.0.1:$PP" --on-store-error deny \
  --redis-timeout 2000 --breaker-interval 60000 --config "$tmp/conf.yaml" ||
  lib_finish
accepted() { cat "$tmp/px/accepted"; }
check() { rcli "$RESP" SL.CHECK h d "$1" | cut -d' ' -f1; }

# ===========================================================================
# 1. the reconnection killed before its first reply
snap "$tmp/m0"
eq "kill: a first request decided by Redis (allowed)" 1 "$(check k)"
a0=$(accepted)
: >"$tmp/px/kill"
waitfor 50 test -f "$tmp/px/killed" || fail "kill: the proxy never closed"
eq "kill: the request after both closes decided by Redis (allowed)" 1 \
  "$(check k)"
eq "kill: another one too" 1 "$(check k)"
snap "$tmp/m1"
eq "kill: two new connections (the fresh one killed, then the third)" \
  2 $(($(accepted) - a0))
for m in sluice_store_fallbacks_total sluice_redis_errors_total \
  sluice_redis_refused_total; do
  eq "kill: $m" 0 "$(mdelta $m "$tmp/m0" "$tmp/m1")"
done
if sv_log_has x 'down for'; then
  fail "kill: the breaker opened: $(grep 'down for' "$tmp/sv.x/log" | head -n 1)"
else pass; fi

# ===========================================================================
# 2. every connection closed before its first reply: the breaker opens
rm -f "$tmp/px/killed"
: >"$tmp/px/drop"
: >"$tmp/px/kill" # (the daemon's working connection closed first)
waitfor 50 test -f "$tmp/px/killed" || fail "drop: the proxy never closed"
snap "$tmp/m0"
eq "drop: the fallback answers (deny: 0)" 0 "$(check k)"
snap "$tmp/m1"
eq "drop: the next request refused at once (deny: 0)" 0 "$(check k)"
snap "$tmp/m2"
eq "drop: one fallback" 1 "$(mdelta sluice_store_fallbacks_total "$tmp/m0" "$tmp/m1")"
eq "drop: then refused without a connection" 1 \
  "$(mdelta sluice_redis_refused_total "$tmp/m1" "$tmp/m2")"
if sv_log_has x 'connection lost; down for 60000 ms'; then pass; else
  fail "drop: the log never said the connection was lost: $(tail -n 3 "$tmp/sv.x/log")"
fi
sv_stop x

# ===========================================================================
# 3. Redis at maxclients: its error, then its close
MP=$(free_port)
rs_start full "$MP" --maxclients 1 || lib_finish
"$PY" -c 'import socket, sys, time
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
time.sleep(120)' "$MP" &
lib_track $!
full() { rcli "$MP" PING | grep -q 'max number of clients'; }
waitfor 50 full || fail "maxclients: a second client was not refused"
sv_start m -t 1 --store "redis://127.0.0.1:$MP" --on-store-error deny \
  --redis-timeout 2000 --breaker-interval 60000 --config "$tmp/conf.yaml" ||
  lib_finish
snap "$tmp/m0"
eq "maxclients: the fallback answers (deny: 0)" 0 "$(check k)"
snap "$tmp/m1"
eq "maxclients: one fallback" 1 "$(mdelta sluice_store_fallbacks_total "$tmp/m0" "$tmp/m1")"
if sv_log_has m 'max number of clients reached; down for'; then pass; else
  fail "maxclients: the log never said why: $(tail -n 3 "$tmp/sv.m/log")"
fi
sv_stop m
lib_finish
