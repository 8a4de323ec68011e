#!/usr/bin/env python3
"""h2_flood.py — a client that sends and never reads, for grpc_rls.sh.

    python3 h2_flood.py PORT SECONDS FRAMES

Opens one HTTP/2 connection (prior knowledge), never acknowledges the
server's SETTINGS and never reads, and sends up to FRAMES HEADERS frames
on new streams that never end (each one the server refuses or keeps
open: an answer or an RST_STREAM it has to queue), for at most SECONDS.
Prints how many frames went out. The server must stop reading rather
than queue without bound.
"""
import errno
import socket
import struct
import sys
import time


def frame(ftype, flags, sid, payload=b""):
    return struct.pack(">I", len(payload))[1:] + bytes([ftype, flags]) + \
        struct.pack(">I", sid) + payload


def main():
    port, secs, frames = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
    s = socket.create_connection(("127.0.0.1", port))
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + frame(4, 0, 0))
    s.setblocking(False)
    # :method POST, :scheme http, :path / (HPACK's static table)
    block = b"\x83\x86\x84"
    end = time.monotonic() + secs
    sent, sid, pending = 0, 1, b""
    while sent < frames and time.monotonic() < end:
        if not pending:
            pending = b"".join(frame(1, 4, sid + 2 * i, block)
                               for i in range(256))
            sid += 512
        try:
            n = s.send(pending)
        except OSError as e:
            if e.errno in (errno.EAGAIN, errno.EWOULDBLOCK):
                time.sleep(0.01)
                continue
            break  # the server closed it: fine too
        pending = pending[n:]
        if not pending:
            sent += 256
    print(sent)
    s.close()


main()
