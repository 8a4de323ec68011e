#!/usr/bin/env python3
"""spray.py — the overshoot client of `make bench-fleet` (bench/fleet/run.sh).

    spray.py MODE KEY POLICY SECONDS SYNC_MS PORT [PORT...]

Sends `SL.THROTTLE KEY POLICY 1` round-robin over the daemons' RESP ports
(one connection each: one request to every daemon, then the replies read,
then the next round) for SECONDS, and counts the allowed answers. Prints
one line:

    overshoot mode=MODE daemons=N policy=P seconds=D requests=Q allowed=A
      limit=L burst=B refill=F overshoot=O bound=X

refill is what the policy refills over the run (limit x D / period), the
overshoot what was allowed beyond burst + refill (the burst is the limit
unless the policy sets one: what one limiter would have allowed), and the
bound the one
src/fleet/sync.c states for approximate mode: (N - 1) x (burst + the refill
of one SYNC_MS interval); 0 for exact mode (SYNC_MS 0). Only the token
bucket's and the windows' `LIMIT/UNIT[:burst=B]` forms are understood.
"""
import re
import socket
import sys
import time

UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}


def policy_figures(policy):
    m = re.match(r"^[a-z_]+:(\d+)/(\d*)(ms|s|m|h|d)(?::burst=(\d+))?$", policy)
    if not m:
        sys.exit("spray.py: cannot read policy %r" % policy)
    limit = int(m.group(1))
    period = (int(m.group(2)) if m.group(2) else 1) * UNITS[m.group(3)]
    burst = int(m.group(4)) if m.group(4) else limit
    return limit, period, burst


def command(*args):
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        a = a.encode()
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)


def read_reply(f):
    """The first element of an array reply (allowed: 1 or 0)."""
    line = f.readline()
    if not line.startswith(b"*"):
        raise RuntimeError("unexpected reply %r" % line)
    n = int(line[1:])
    first = None
    for i in range(n):
        v = f.readline()
        if i == 0:
            first = int(v[1:])
    return first


def main():
    mode, key, policy, seconds, sync_ms = sys.argv[1:6]
    ports = [int(p) for p in sys.argv[6:]]
    seconds, sync_ms = float(seconds), float(sync_ms)
    limit, period, burst = policy_figures(policy)
    conns = []
    for p in ports:
        s = socket.create_connection(("127.0.0.1", p), timeout=5)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conns.append((s, s.makefile("rb")))
    req = command("SL.THROTTLE", key, policy, "1")
    requests = allowed = 0
    t0 = time.monotonic()
    end = t0 + seconds
    while time.monotonic() < end:
        for s, _ in conns:
            s.sendall(req)
        for _, f in conns:
            allowed += read_reply(f)
            requests += 1
    d = time.monotonic() - t0
    n = len(ports)
    refill = limit * d / period
    bound = (n - 1) * (burst + limit * sync_ms / 1000.0 / period) if sync_ms > 0 else 0
    print("overshoot mode=%s daemons=%d policy=%s seconds=%.2f requests=%d allowed=%d "
          "limit=%d burst=%d refill=%.2f overshoot=%.2f bound=%.2f"
          % (mode, n, policy, d, requests, allowed, limit, burst, refill,
             allowed - (burst + refill), bound))


if __name__ == "__main__":
    main()
