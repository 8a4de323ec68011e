#!/usr/bin/env python3
"""resp_raw.py — raw Redis-protocol conversations for serve_resp.sh.

    python3 resp_raw.py PORT send INPUT-FILE [TIMEOUT]
        Sends the bytes of INPUT-FILE on one connection, then reads until the
        server closes it or TIMEOUT seconds (default 5) pass with nothing
        new. Prints every reply, one per line, in a canonical form:
            +OK   -ERR msg   :12   $hello (bulk)   $nil   *nil
            *3 [ ... ] for arrays, elements separated by ", "
        and, last, "CLOSED" if the server closed the connection or "OPEN".
        Bytes that do not parse as RESP are printed as "GARBAGE <repr>".

    python3 resp_raw.py PORT many N INPUT-FILE
        N clients at once, each sending INPUT-FILE and reading until the
        server closes (the input should end in QUIT); prints, per distinct
        transcript, "COUNT x TRANSCRIPT" (one line; replies joined by " | ").

    python3 resp_raw.py PORT hold SECONDS
        Opens a connection, sends PING, reads +PONG, prints "HELD", then
        holds the connection open for SECONDS (or until the server closes
        it) and prints "CLOSED after S s" or "OPEN".

Why Python: the hostile-input checks need exact bytes on the wire and to
see the server close the connection; redis-cli would fix up or refuse
such input itself.
"""
import socket
import sys
import threading
import time


def parse(buf, i):
    """One reply at buf[i:]: (text, next index), or None when incomplete."""
    if i >= len(buf):
        return None
    end = buf.find(b"\r\n", i)
    if end < 0:
        return None
    t, line = buf[i:i + 1], buf[i + 1:end].decode("latin-1")
    j = end + 2
    if t in (b"+", b"-", b":"):
        return t.decode() + line, j
    if t == b"$":
        n = int(line)
        if n < 0:
            return "$nil", j
        if len(buf) < j + n + 2:
            return None
        return "$" + buf[j:j + n].decode("latin-1"), j + n + 2
    if t == b"*":
        n = int(line)
        if n < 0:
            return "*nil", j
        items = []
        for _ in range(n):
            r = parse(buf, j)
            if r is None:
                return None
            items.append(r[0])
            j = r[1]
        return "*%d [%s]" % (n, ", ".join(items)), j
    raise ValueError("bad type byte %r" % t)


def converse(port, data, timeout):
    """Sends data, reads until close or `timeout` s of silence."""
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    buf = b""
    closed = False
    try:
        s.sendall(data)
    except (BrokenPipeError, ConnectionResetError):
        pass  # the server may close before it has read everything
    s.settimeout(timeout)
    while True:
        try:
            chunk = s.recv(65536)
        except socket.timeout:
            break
        except ConnectionResetError:
            closed = True
            break
        if not chunk:
            closed = True
            break
        buf += chunk
    s.close()
    out, i = [], 0
    while i < len(buf):
        try:
            r = parse(buf, i)
        except (ValueError, UnicodeDecodeError):
            r = None
        if r is None:
            out.append("GARBAGE %r" % buf[i:i + 80])
            break
        out.append(r[0])
        i = r[1]
    out.append("CLOSED" if closed else "OPEN")
    return out


def main():
    port, mode = int(sys.argv[1]), sys.argv[2]
    if mode == "send":
        data = open(sys.argv[3], "rb").read()
        timeout = float(sys.argv[4]) if len(sys.argv) > 4 else 5.0
        for line in converse(port, data, timeout):
            print(line)
    elif mode == "many":
        n = int(sys.argv[3])
        data = open(sys.argv[4], "rb").read()
        results = [None] * n
        barrier = threading.Barrier(n)

        def run(k):
            try:
                barrier.wait(timeout=20)
                results[k] = " | ".join(converse(port, data, 10.0))
            except Exception as e:  # reported as a transcript of its own
                results[k] = "EXCEPTION %s: %s" % (type(e).__name__, e)

        threads = [threading.Thread(target=run, args=(k,)) for k in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        counts = {}
        for r in results:
            counts[r] = counts.get(r, 0) + 1
        for r, c in sorted(counts.items(), key=lambda kv: -kv[1]):
            print("%d x %s" % (c, r))
    elif mode == "hold":
        secs = float(sys.argv[3])
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        s.sendall(b"PING\r\n")
        got = b""
        while not got.endswith(b"\r\n"):
            chunk = s.recv(100)
            if not chunk:
                break
            got += chunk
        if got != b"+PONG\r\n":
            print("BAD %r" % got)
            return
        print("HELD", flush=True)
        t0 = time.time()
        s.settimeout(0.1)
        while time.time() - t0 < secs:
            try:
                chunk = s.recv(100)
            except socket.timeout:
                continue
            except ConnectionResetError:
                chunk = b""
            if not chunk:
                print("CLOSED after %.1f s" % (time.time() - t0))
                return
        print("OPEN")
    else:
        sys.exit("usage: resp_raw.py PORT send|many|hold ...")


if __name__ == "__main__":
    main()
