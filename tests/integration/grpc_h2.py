#!/usr/bin/env python3
"""grpc_h2.py — a hand-made HTTP/2 client for grpc_h2.sh: what sluice's
gRPC transport does with frames no gRPC library sends on purpose.

    python3 grpc_h2.py calls PORT URL     the calls the metrics count
    python3 grpc_h2.py linger PORT PID    a graceful stop under a flood

Prints one line per check, "PASS name" or "FAIL name: why", for the shell
script to count. Frames are built by hand (RFC 9113): HPACK literals
without indexing and without Huffman, messages as protobuf's wire format
spells them.
"""
import errno
import os
import signal
import socket
import struct
import sys
import time
import urllib.request

RLS = b"/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, RST_STREAM, SETTINGS, PING, GOAWAY = 0, 1, 3, 4, 6, 7
END_STREAM, END_HEADERS = 1, 4


def check(name, ok, why=""):
    print("PASS %s" % name if ok else "FAIL %s: %s" % (name, why), flush=True)


def frame(ftype, flags, sid, payload=b""):
    return struct.pack(">I", len(payload))[1:] + bytes([ftype, flags]) + \
        struct.pack(">I", sid) + payload


def literal(name, value):
    return b"\x00" + bytes([len(name)]) + name + bytes([len(value)]) + value


def pb(field, data):
    """A protobuf length-delimited field (lengths under 128)."""
    return bytes([field << 3 | 2, len(data)]) + data


def rls_message(key):
    """A RateLimitRequest, domain "default", one descriptor key=KEY, with
    its gRPC prefix."""
    m = pb(1, b"default") + pb(2, pb(1, pb(1, b"key") + pb(2, key)))
    return b"\x00" + struct.pack(">I", len(m)) + m


def call(sid, path=RLS, message=None, port=0):
    """HEADERS (and a DATA frame with MESSAGE) of one call on stream SID,
    ended."""
    block = b"".join(literal(n, v) for n, v in (
        (b":method", b"POST"), (b":scheme", b"http"), (b":path", path),
        (b":authority", b"127.0.0.1:%d" % port),
        (b"content-type", b"application/grpc"), (b"te", b"trailers")))
    if message is None:
        return frame(HEADERS, END_HEADERS | END_STREAM, sid, block)
    return frame(HEADERS, END_HEADERS, sid, block) + \
        frame(DATA, END_STREAM, sid, message)


class Reader:
    """The server's frames as they come: the streams it ended (with their
    trailers), its GOAWAY's last stream id, and how the connection ended
    ("fin", "reset" or None while open)."""

    def __init__(self, sock):
        self.sock, self.buf, self.ended, self.goaway = sock, b"", {}, None
        self.end = None

    def pump(self, wait):
        """Reads what is there (waiting up to WAIT seconds for some)."""
        self.sock.settimeout(wait)
        try:
            b = self.sock.recv(1 << 16)
        except socket.timeout:
            return
        except BlockingIOError:
            return
        except ConnectionResetError:
            self.end = "reset"
            return
        if not b:
            self.end = "fin"
            return
        self.buf += b
        while len(self.buf) >= 9:
            n = int.from_bytes(self.buf[:3], "big")
            if len(self.buf) < 9 + n:
                break
            t, fl = self.buf[3], self.buf[4]
            sid = int.from_bytes(self.buf[5:9], "big") & 0x7fffffff
            body = self.buf[9:9 + n]
            self.buf = self.buf[9 + n:]
            if t == HEADERS and fl & END_STREAM:
                self.ended[sid] = body
            elif t == GOAWAY:
                self.goaway = int.from_bytes(body[:4], "big") & 0x7fffffff
            elif t == SETTINGS and not fl & 1:
                self.sock.sendall(frame(SETTINGS, 1, 0))

    def until(self, done, secs=5):
        end = time.monotonic() + secs
        while not done() and self.end is None and time.monotonic() < end:
            self.pump(0.05)
        return done()


def metric(url, name):
    text = urllib.request.urlopen(url + "/metrics", timeout=5).read().decode()
    for line in text.splitlines():
        if line.startswith(name + " "):
            return int(float(line.split()[1]))
    return 0


def calls(port, url):
    """sluice_grpc_calls_total counts the calls answered, no more: a call
    decided but reset by its client before its answer went out is not
    one; an unknown method and a malformed message are (and errors)."""
    names = ("sluice_grpc_calls_total", "sluice_grpc_errors_total")
    before = [metric(url, n) for n in names]
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    r = Reader(s)
    # One write, so that nghttp2 reads it in one go: the call on stream 1
    # is decided and its answer queued, then the client's RST_STREAM
    # (CANCEL) closes the stream before the answer can be sent.
    s.sendall(PREFACE + frame(SETTINGS, 0, 0) +
              call(1, message=rls_message(b"cancelled"), port=port) +
              frame(RST_STREAM, 0, 1, struct.pack(">I", 8)))
    s.sendall(call(3, path=b"/no.Such/Method", port=port) +
              call(5, message=b"\x00\x00\x00\x00\x02\xff\xff", port=port) +
              call(7, message=rls_message(b"answered"), port=port))
    got = r.until(lambda: all(i in r.ended for i in (3, 5, 7)))
    check("three calls answered (an unknown method, a malformed message, "
          "a good one)", got, "ended: %s, %s" % (sorted(r.ended), r.end))
    check("the reset call got no answer", 1 not in r.ended)
    s.close()
    after = [metric(url, n) for n in names]
    d = [a - b for a, b in zip(after, before)]
    check("sluice_grpc_calls_total +3, sluice_grpc_errors_total +2 "
          "(the reset call counted in neither)", d == [3, 2], "deltas %s" % d)


def linger(port, pid):
    """A client that keeps sending (frames of an unknown type, which the
    server reads and drops) while the daemon stops: it gets the GOAWAY,
    the answer of every call the GOAWAY says was taken, then a FIN; not a
    reset that would throw away what it had not read yet."""
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    r = Reader(s)
    s.sendall(PREFACE + frame(SETTINGS, 0, 0) +
              call(1, message=rls_message(b"before"), port=port))
    check("a call before the stop: answered", r.until(lambda: 1 in r.ended))
    junk = frame(0xfa, 0, 0, b"\0" * 16000) * 4
    s.setblocking(False)
    sent, pending, phase, end = 0, b"", 0, time.monotonic() + 10
    while r.end is None and time.monotonic() < end:
        if not pending:
            # Phase 0: 1 MiB of flood; 1: a call; 2: the stop, and the
            # flood goes on.
            if phase == 1:
                os.kill(pid, signal.SIGTERM)
            pending, phase = junk, phase + (phase < 2)
            if phase == 1 and sent > (1 << 20):
                pending = call(3, message=rls_message(b"late"), port=port)
            elif phase == 1:
                phase = 0
        try:
            n = s.send(pending)
        except BlockingIOError:
            n = 0
        except OSError as e:
            r.end = "reset" if e.errno in (errno.ECONNRESET, errno.EPIPE) \
                else "error %s" % e
            break
        sent, pending = sent + n, pending[n:]
        r.pump(0)
    check("the GOAWAY came", r.goaway is not None)
    if r.goaway is not None:
        want = [i for i in (1, 3) if i <= r.goaway]
        check("every call taken (up to the GOAWAY's %d) answered" % r.goaway,
              all(i in r.ended for i in want),
              "ended %s" % sorted(r.ended))
    check("the connection ended with a FIN, not a reset", r.end == "fin",
          "%s (after %d bytes sent)" % (r.end, sent))
    s.close()


if __name__ == "__main__":
    if sys.argv[1] == "calls":
        calls(int(sys.argv[2]), sys.argv[3])
    else:
        linger(int(sys.argv[2]), int(sys.argv[3]))
