"""sock_flood.py PORT PROTO SECONDS — a client that sends and never reads.

Connects to 127.0.0.1:PORT and, for SECONDS, writes pipelined requests of
PROTO (resp: SL.THROTTLE commands; http: GET /v1/throttle) as fast as the
socket takes them, without ever reading an answer; then prints the bytes
it got written and exits (closing the connection). The daemon stops
reading such a client once its answers back up: what the kernel holds
for the connection meanwhile is the test's (hardening_sockets.sh).
"""
import socket
import sys
import time

port, proto, seconds = int(sys.argv[1]), sys.argv[2], float(sys.argv[3])
if proto == "resp":
    one = (b"*4\r\n$11\r\nSL.THROTTLE\r\n$4\r\nkey1\r\n$%d\r\n%s\r\n$1\r\n1\r\n"
           % (len(b"gcra:1000000000/s"), b"gcra:1000000000/s"))
else:
    one = (b"GET /v1/throttle?key=k1&policy=gcra:1000000000/s HTTP/1.1\r\n"
           b"Host: x\r\n\r\n")
chunk = one * 256
s = socket.create_connection(("127.0.0.1", port), timeout=5)
s.setblocking(False)
sent = 0
rest = b""  # (what a short write left of the last chunk: sent first)
end = time.monotonic() + seconds
while time.monotonic() < end:
    try:
        buf = rest or chunk
        n = s.send(buf)
        sent += n
        rest = buf[n:]
    except BlockingIOError:
        time.sleep(0.01)
    except OSError as e:
        sys.exit("sock_flood.py: the connection failed: %s" % e)
print(sent)
