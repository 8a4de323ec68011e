#!/usr/bin/env python3
"""wait_resp.py — pipelined RESP commands and when each reply came, for
serve_wait.sh's checks of SL.THROTTLE ... WAIT.

    python3 wait_resp.py PORT TIMEOUT [CLOSE_AFTER] < COMMANDS

Reads one command a line from stdin (arguments separated by spaces),
sends them all in one write on one connection, and prints one line per
reply as it arrives: the milliseconds since the send, then the reply in
resp_raw.py's canonical form. Stops when every command is answered, or
TIMEOUT seconds pass (prints "TIMEOUT"), or, with CLOSE_AFTER, closes the
connection that many seconds after the send (prints "CLOSED").
"""
import os
import socket
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from resp_raw import parse  # noqa: E402


def encode(args):
    out = b"*%d\r\n" % len(args)
    for a in args:
        b = a.encode()
        out += b"$%d\r\n%s\r\n" % (len(b), b)
    return out


def main():
    port, timeout = int(sys.argv[1]), float(sys.argv[2])
    close_after = float(sys.argv[3]) if len(sys.argv) > 3 else None
    cmds = [line.split() for line in sys.stdin if line.strip()]
    s = socket.create_connection(("127.0.0.1", port))
    t0 = time.monotonic()
    s.sendall(b"".join(encode(c) for c in cmds))
    buf, i, n = b"", 0, 0
    end = t0 + (close_after if close_after is not None else timeout)
    while n < len(cmds):
        left = end - time.monotonic()
        if left <= 0:
            break
        s.settimeout(left)
        try:
            data = s.recv(65536)
        except socket.timeout:
            break
        if not data:
            print("EOF")
            return
        buf += data
        now = (time.monotonic() - t0) * 1000
        while True:
            r = parse(buf, i)
            if r is None:
                break
            text, i = r
            n += 1
            print("%.0f %s" % (now, text), flush=True)
    if n < len(cmds):
        print("CLOSED" if close_after is not None else "TIMEOUT", flush=True)
    s.close()


if __name__ == "__main__":
    main()
