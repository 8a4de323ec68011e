#!/usr/bin/env python3
"""flood.py — bounded floods of connections and bodies for hardening_http.sh
(curl cannot hold hundreds of idle connections, or stop half-way through a
body). Every command has a bound in count and time, uses 127.0.0.1 only,
and closes what it opened when it ends.

    python3 flood.py hold PORT N SECONDS OUT
        Opens N connections and sends nothing. After 0.5 s writes
        "open=A closed=B" to OUT (B: closed by the daemon at once, over a
        budget), then holds the open ones until SECONDS have passed or it
        is killed.

    python3 flood.py idle PORT BOUND
        One HTTP request (GET /healthz) on a keep-alive connection, then
        nothing: prints "closed after S s" when the daemon closes it, or
        "open after BOUND s".

    python3 flood.py declared PORT LENGTH
        POST /v1/check with Content-Length: LENGTH and no body yet: prints
        the status line's code and the body if an answer comes within 2 s
        ("413 {...}"), else "no answer".

    python3 flood.py chunked PORT LIMIT
        POST /v1/check with a chunked body, 4 KiB a chunk, up to LIMIT
        bytes, watching for an answer after each chunk: prints "413 after N
        bytes" (N: body bytes sent when the answer came), or "no answer
        after N bytes".

    python3 flood.py bodies PORT N LENGTH BYTES SECONDS OUT
        N connections each declare Content-Length: LENGTH and send up to
        BYTES of it (as far as the daemon takes it within 5 s), waits up to
        10 s more for the answers not yet in; then writes
        "sent=S answered=A turned_away=T" to OUT (S: body bytes the
        daemon took, A: connections answered with 413, T: those answered
        or closed, a reset having overtaken the answer) and holds them until SECONDS have
        passed or it is killed.
"""
import select
import socket
import sys
import time

HOST = "127.0.0.1"


def connect(port, timeout=5):
    s = socket.create_connection((HOST, port), timeout=timeout)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def readable(s, wait):
    """Whether s has something to read (or an error) within `wait` s
    (poll, not select: a flood's descriptors pass FD_SETSIZE)."""
    p = select.poll()
    p.register(s, select.POLLIN)
    return bool(p.poll(int(wait * 1000)))


def closed_by_peer(s):
    """Whether the daemon closed s (EOF or reset), without blocking."""
    if not readable(s, 0):
        return False
    try:
        return s.recv(4096, socket.MSG_PEEK) == b""
    except OSError:
        return True


def answer(s, wait):
    """The first bytes the daemon sent within `wait` seconds, or b""."""
    s.settimeout(wait)
    try:
        return s.recv(65536)
    except (socket.timeout, OSError):
        return b""


def hold_until(deadline):
    while time.time() < deadline:
        time.sleep(0.2)


def cmd_hold(port, n, seconds, out):
    deadline = time.time() + seconds
    socks = []
    for _ in range(n):
        try:
            socks.append(connect(port))
        except OSError:
            break
    time.sleep(0.5)
    closed = sum(1 for s in socks if closed_by_peer(s))
    with open(out, "w") as f:
        f.write("open=%d closed=%d\n" % (len(socks) - closed, closed))
    hold_until(deadline)


def cmd_idle(port, bound):
    s = connect(port)
    s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    if not answer(s, 5):
        print("no answer")
        return
    t0 = time.time()
    while time.time() - t0 < bound:
        if closed_by_peer(s):
            print("closed after %.1f s" % (time.time() - t0))
            return
        time.sleep(0.05)
    print("open after %g s" % bound)


def head(length, chunked=False):
    te = b"Transfer-Encoding: chunked" if chunked else (
        b"Content-Length: %d" % length)
    return (b"POST /v1/check HTTP/1.1\r\nHost: x\r\n"
            b"Content-Type: application/json\r\n" + te + b"\r\n\r\n")


def status_and_body(data):
    if not data:
        return "no answer"
    first, _, rest = data.partition(b"\r\n")
    body = rest.partition(b"\r\n\r\n")[2]
    return "%s %s" % (first.split()[1].decode(), body.decode(errors="replace").strip())


def cmd_declared(port, length):
    s = connect(port)
    s.sendall(head(length))
    print(status_and_body(answer(s, 2)))


def cmd_chunked(port, limit):
    s = connect(port)
    s.sendall(head(0, chunked=True))
    chunk = b"1000\r\n" + b"a" * 4096 + b"\r\n"
    sent = 0
    while sent < limit:
        try:
            s.sendall(chunk)
        except OSError:
            break
        sent += 4096
        if readable(s, 0.01):
            break
    data = answer(s, 1)
    if data:
        print("%s after %d bytes" % (data.split()[1].decode(), sent))
    else:
        print("no answer after %d bytes" % sent)


def cmd_bodies(port, n, length, nbytes, seconds, out):
    deadline = time.time() + seconds
    socks = []
    for _ in range(n):
        try:
            s = connect(port)
            s.sendall(head(length))
            s.setblocking(False)
            socks.append([s, 0, b""])
        except OSError:
            break
    block = b"a" * 65536
    stop = time.time() + 5
    busy = True
    while busy and time.time() < stop:
        busy = False
        for c in socks:
            if c[1] >= nbytes or c[2]:
                continue
            try:
                k = c[0].send(block[: min(len(block), nbytes - c[1])])
                c[1] += k
                busy = True
            except BlockingIOError:
                busy = True
            except OSError:
                c[2] = b"closed"
            try:
                got = c[0].recv(4096)
                if got:
                    c[2] = got
            except BlockingIOError:
                pass
            except OSError:
                c[2] = c[2] or b"closed"
        if busy:
            time.sleep(0.001)
    # Then up to 10 s more for the answers still on their way (a sanitizer
    # build under load answers 200 connections slowly).
    wait_until = time.time() + 10
    while time.time() < wait_until and any(not c[2] for c in socks):
        for c in socks:
            if c[2]:
                continue
            try:
                c[2] = c[0].recv(4096) or b"closed"
            except BlockingIOError:
                pass
            except OSError:
                c[2] = b"closed"
        time.sleep(0.01)
    answered = sum(1 for c in socks if c[2].startswith(b"HTTP/1.1 413"))
    # (a reset can overtake the 413 while the client is still sending)
    turned = sum(1 for c in socks if c[2]) + sum(
        1 for c in socks if not c[2] and closed_by_peer(c[0]))
    with open(out, "w") as f:
        f.write("sent=%d answered=%d turned_away=%d\n"
                % (sum(c[1] for c in socks), answered, turned))
    hold_until(deadline)


def main():
    a = sys.argv[1:]
    if not a:
        sys.exit(__doc__)
    cmd, port = a[0], int(a[1])
    if cmd == "hold":
        cmd_hold(port, int(a[2]), float(a[3]), a[4])
    elif cmd == "idle":
        cmd_idle(port, float(a[2]))
    elif cmd == "declared":
        cmd_declared(port, int(a[2]))
    elif cmd == "chunked":
        cmd_chunked(port, int(a[2]))
    elif cmd == "bodies":
        cmd_bodies(port, int(a[2]), int(a[3]), int(a[4]), float(a[5]), a[6])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
