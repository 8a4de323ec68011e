#!/usr/bin/env python3
"""resp_hostile.py — hostile RESP clients for hardening_resp.sh, with the
daemon's memory measured while they run.

    python3 resp_hostile.py flood PORT PID N MB [PASSWORD]
        N connections at once, each sending one command of MB megabytes:
        "*1024" and then bulks of 64 KiB (every argument within the
        parser's fixed limits: only a bound on the whole command can refuse
        it), after "AUTH PASSWORD" when one is given. Meanwhile the
        daemon's VmRSS (/proc/PID/status) is read every 20 ms. Prints
        "rss_start_kb=A rss_max_kb=B closed=C/N sent_max_kb=S" and the
        distinct first error replies, one per line ("reply COUNT x TEXT").
        Bounded: a sender stops at MB, when the server closes, after 30 s,
        or once RSS has grown by 512 MB (so an unbounded daemon is shown
        without taking the machine's memory).

    python3 resp_hostile.py stall PORT N KB SECONDS
        N connections, each sending the first KB kilobytes (in bulks of
        60 KiB) of a COMMAND of 16 such bulks (a command within
        --max-command-bytes), then waiting; after SECONDS prints
        "closed=C/N" (how many the server closed).

    python3 resp_hostile.py busy PORT SECONDS EVERY
        One connection sending PING every EVERY seconds for SECONDS; prints
        "OPEN" if every PING got +PONG, else "CLOSED after S s".

    python3 resp_hostile.py noread PORT PID N SECONDS
        N connections (each with a small receive buffer) sending PING as
        fast as the daemon takes it for SECONDS, never reading a reply,
        while the daemon's VmRSS is read every 20 ms. Prints
        "rss_start_kb=A rss_max_kb=B closed=C/N sent_kb=S". Bounded: stops
        early once RSS has grown by 512 MB.

Why Python: these need exact bytes, many sockets at once and a view of the
server closing them, which redis-cli and redis-benchmark do not give.
"""
import socket
import sys
import threading
import time

BULK = 65536


def rss_kb(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def read_reply(s):
    """The first reply line, or '' (closed without one)."""
    s.settimeout(5)
    buf = b""
    try:
        while b"\r\n" not in buf:
            chunk = s.recv(4096)
            if not chunk:
                break
            buf += chunk
    except OSError:
        pass
    return buf.split(b"\r\n")[0].decode("latin-1")


def flood(port, pid, n, mb, password):
    start = rss_kb(pid)
    state = {"max": start, "stop": False}
    results = [None] * n
    deadline = time.time() + 30

    def sample():
        while not state["done"]:
            r = rss_kb(pid)
            state["max"] = max(state["max"], r)
            if r - start > 512 * 1024:
                state["stop"] = True
            time.sleep(0.02)

    def send(k):
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        sent, closed, reply = 0, False, ""
        try:
            if password:
                s.sendall(b"AUTH %s\r\n" % password.encode())
                reply = read_reply(s)
                s.settimeout(10)
            s.sendall(b"*1024\r\n")
            chunk = b"$%d\r\n" % BULK + b"x" * BULK + b"\r\n"
            while sent < mb << 20 and not state["stop"] and \
                    time.time() < deadline:
                s.sendall(chunk)
                sent += len(chunk)
        except OSError:
            closed = True
        reply = read_reply(s)
        if not closed:
            try:
                s.settimeout(2)
                closed = s.recv(1) == b""
            except OSError:
                closed = True
        s.close()
        results[k] = (closed, sent, reply)

    state["done"] = False
    sampler = threading.Thread(target=sample)
    sampler.start()
    threads = [threading.Thread(target=send, args=(k,)) for k in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    time.sleep(0.2)  # the last closes: what they freed
    state["done"] = True
    sampler.join()
    done = [r for r in results if r]
    print("rss_start_kb=%d rss_max_kb=%d closed=%d/%d sent_max_kb=%d" % (
        start, state["max"], sum(1 for r in done if r[0]), n,
        max([r[1] for r in done] or [0]) >> 10))
    counts = {}
    for r in done:
        counts[r[2]] = counts.get(r[2], 0) + 1
    for text, c in sorted(counts.items(), key=lambda kv: -kv[1]):
        print("reply %d x %s" % (c, text))


def stall(port, n, kb, secs):
    socks = []
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        s.sendall(b"*17\r\n$7\r\nCOMMAND\r\n")
        bulk = b"$61440\r\n" + b"y" * 61440 + b"\r\n"
        s.sendall(bulk * ((kb << 10) // len(bulk)))
        socks.append(s)
    time.sleep(secs)
    closed = 0
    for s in socks:
        s.setblocking(False)
        try:
            s.recv(4096)  # the end, or an error reply: it is closing
            closed += 1
        except BlockingIOError:
            pass
        except OSError:
            closed += 1
        s.close()
    print("closed=%d/%d" % (closed, n))


def busy(port, secs, every):
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    t0 = time.time()
    while time.time() - t0 < secs:
        try:
            s.sendall(b"PING\r\n")
            if read_reply(s) != "+PONG":
                raise OSError
        except OSError:
            print("CLOSED after %.1f s" % (time.time() - t0))
            return
        time.sleep(every)
    print("OPEN")


def noread(port, pid, n, secs):
    start = rss_kb(pid)
    peak = [start]
    socks = []
    for _ in range(n):
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.connect(("127.0.0.1", port))
        s.setblocking(False)
        socks.append(s)
    chunk = b"PING\r\n" * 10000
    sent = 0
    closed = set()
    end = time.time() + secs
    while time.time() < end and peak[0] - start < 512 * 1024:
        for i, s in enumerate(socks):
            if i in closed:
                continue
            try:
                sent += s.send(chunk)
            except BlockingIOError:
                pass
            except OSError:
                closed.add(i)
        peak[0] = max(peak[0], rss_kb(pid))
        time.sleep(0.02)
    peak[0] = max(peak[0], rss_kb(pid))
    for s in socks:
        s.close()
    print("rss_start_kb=%d rss_max_kb=%d closed=%d/%d sent_kb=%d"
          % (start, peak[0], len(closed), n, sent // 1024))


def main():
    mode, port = sys.argv[1], int(sys.argv[2])
    if mode == "flood":
        flood(port, int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]),
              sys.argv[6] if len(sys.argv) > 6 else None)
    elif mode == "stall":
        stall(port, int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5]))
    elif mode == "busy":
        busy(port, float(sys.argv[3]), float(sys.argv[4]))
    elif mode == "noread":
        noread(port, int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5]))
    else:
        sys.exit("usage: resp_hostile.py flood|stall|busy PORT ...")


if __name__ == "__main__":
    main()
