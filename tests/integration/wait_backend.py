#!/usr/bin/env python3
"""wait_backend.py - the test backend of serve_wait.sh: records when each
request arrives (time.monotonic, one line per request, appended to FILE)
and answers 200. Serves until killed, at most LIFETIME seconds.

usage: wait_backend.py PORTFILE FILE [LIFETIME]
"""
import http.server
import sys
import threading
import time


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self):
        t = time.monotonic()
        with LOCK:
            OUT.write("%.6f\n" % t)
            OUT.flush()
        body = b"ok\n"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


LOCK = threading.Lock()
OUT = open(sys.argv[2], "a")
srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
srv.daemon_threads = True
with open(sys.argv[1] + ".tmp", "w") as f:
    f.write(str(srv.server_address[1]))
import os
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
threading.Timer(float(sys.argv[3]) if len(sys.argv) > 3 else 120,
                lambda: os._exit(0)).start()
srv.serve_forever()
