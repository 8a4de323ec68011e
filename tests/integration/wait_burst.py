#!/usr/bin/env python3
"""wait_burst.py - serve_wait.sh's client: N requests to URL at once (one
thread each, released together by a barrier), each with a timeout.
Prints one status per line.

usage: wait_burst.py URL N TIMEOUT
"""
import sys
import threading
import urllib.error
import urllib.request

url, n, timeout = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
codes = [0] * n
go = threading.Barrier(n)


def one(i):
    go.wait()
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            codes[i] = r.status
    except urllib.error.HTTPError as e:
        codes[i] = e.code
    except Exception:
        codes[i] = 0


ts = [threading.Thread(target=one, args=(i,)) for i in range(n)]
for t in ts:
    t.start()
for t in ts:
    t.join()
for c in codes:
    print(c)
