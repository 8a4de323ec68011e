#!/usr/bin/env python3
"""http_raw.py — HTTP/1.1 conversations curl cannot have: around a
daemon's shutdown, for serve_lifecycle.sh (pausing half-way through a
request), and heads with many headers, for hardening_http.sh.

    python3 http_raw.py inflight PORT PID PATH WAIT
        Sends the request line and headers of GET PATH without the final
        empty line, sends SIGTERM to PID, waits WAIT seconds, tries a new
        connection (prints "new connection: refused" or "... accepted"),
        then finishes the request and prints the response's status code
        and body on one line ("503 {...}"), or "no response".

    python3 http_raw.py idle PORT PID BOUND
        Makes one keep-alive request (GET /healthz), then sends SIGTERM to
        PID and waits up to BOUND seconds for the daemon to close the idle
        connection; prints "closed" or "open".

    python3 http_raw.py headers PORT PATH N [PIECES]
        Sends GET PATH with N request headers (Host and N - 1 others), in
        PIECES writes (default 1), and prints the response's status code
        and body on one line, or "no response".
"""
import os
import signal
import socket
import sys
import time


def read_response(s, timeout):
    """(status, body) of one response with Content-Length or chunked
    encoding, or (None, b"") when the connection closes first."""
    s.settimeout(timeout)
    data = b""
    while b"\r\n\r\n" not in data:
        try:
            chunk = s.recv(65536)
        except (socket.timeout, ConnectionResetError):
            return None, b""
        if not chunk:
            return None, b""
        data += chunk
    head, rest = data.split(b"\r\n\r\n", 1)
    lines = head.split(b"\r\n")
    status = int(lines[0].split()[1])
    headers = {}
    for line in lines[1:]:
        k, _, v = line.partition(b":")
        headers[k.strip().lower()] = v.strip()

    def more():
        chunk = s.recv(65536)
        if not chunk:
            raise EOFError
        return chunk

    try:
        if b"content-length" in headers:
            n = int(headers[b"content-length"])
            while len(rest) < n:
                rest += more()
            return status, rest[:n]
        if headers.get(b"transfer-encoding", b"").lower() == b"chunked":
            body = b""
            while True:
                while b"\r\n" not in rest:
                    rest += more()
                size_line, rest = rest.split(b"\r\n", 1)
                size = int(size_line.split(b";")[0], 16)
                while len(rest) < size + 2:
                    rest += more()
                body += rest[:size]
                rest = rest[size + 2:]
                if size == 0:
                    return status, body
        while True:  # until close
            rest += more()
    except (EOFError, socket.timeout, ConnectionResetError):
        return status, rest


def inflight(port, pid, path, wait):
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(("GET %s HTTP/1.1\r\nHost: sluice\r\n" % path).encode())
    time.sleep(0.2)  # let the daemon read the first part
    os.kill(pid, signal.SIGTERM)
    time.sleep(wait)
    try:
        n = socket.create_connection(("127.0.0.1", port), timeout=2)
        n.sendall(b"GET /healthz HTTP/1.1\r\nHost: sluice\r\n\r\n")
        st, _ = read_response(n, 2)
        print("new connection: accepted" if st else "new connection: refused")
        n.close()
    except OSError:
        print("new connection: refused")
    try:
        s.sendall(b"\r\n")
    except OSError:
        print("no response")
        return
    status, body = read_response(s, 10)
    if status is None:
        print("no response")
    else:
        print(status, body.decode("utf-8", "replace").strip())


def idle(port, pid, bound):
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(b"GET /healthz HTTP/1.1\r\nHost: sluice\r\n\r\n")
    status, _ = read_response(s, 10)
    if status != 200:
        print("bad first response %r" % status)
        return
    os.kill(pid, signal.SIGTERM)
    s.settimeout(bound)
    try:
        closed = s.recv(100) == b""
    except ConnectionResetError:
        closed = True
    except socket.timeout:
        closed = False
    print("closed" if closed else "open")


def headers(port, path, n, pieces):
    head = "GET %s HTTP/1.1\r\nHost: x\r\n" % path
    head += "".join("X-H%d: v\r\n" % i for i in range(n - 1)) + "\r\n"
    data = head.encode()
    step = len(data) // pieces + 1
    s = socket.create_connection(("127.0.0.1", port), 5)
    try:
        for i in range(0, len(data), step):
            s.sendall(data[i:i + step])
            time.sleep(0.01)
    except OSError:
        pass  # answered and closed before the rest: read the answer
    status, body = read_response(s, 5)
    s.close()
    if status is None:
        print("no response")
    else:
        print(status, body.decode(errors="replace").strip())


def main():
    mode = sys.argv[1]
    if mode == "inflight":
        inflight(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4],
                 float(sys.argv[5]))
    elif mode == "idle":
        idle(int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]))
    elif mode == "headers":
        headers(int(sys.argv[2]), sys.argv[3], int(sys.argv[4]),
                int(sys.argv[5]) if len(sys.argv) > 5 else 1)
    else:
        sys.exit("usage: http_raw.py inflight|idle|headers ...")


if __name__ == "__main__":
    main()
