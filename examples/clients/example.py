"""example.py — a well-behaved HTTP client of `sluice serve` in Python
(docs/clients.md), standard library only: it sends N requests to URL,
paces itself by the RateLimit header so as to spend the quota evenly, and
after a 429/503 waits the server's Retry-After (or, with nothing
remaining, its reset) plus full jitter before it retries. Prints one line
per response, "elapsed_ms status retry_after_s slept_ms", then
"done OK DENIED" (tests/integration/clients.sh checks them).

    python3 example.py 'http://127.0.0.1:8080/v1/throttle?key=me&policy=token_bucket:10/s:burst=5' 20
"""
import random
import re
import sys
import time
import urllib.error
import urllib.request

BASE, CAP = 0.05, 2.0  # backoff: 50 ms, doubling, at most 2 s


def get(url):
    """The status and headers of GET url (an error status is no exception)."""
    try:
        with urllib.request.urlopen(url) as resp:
            return resp.status, resp.headers
    except urllib.error.HTTPError as err:
        return err.code, err.headers


def limits(headers):
    """Retry-After (seconds), and the RateLimit field's least r with its t."""
    retry_after = int(headers.get("Retry-After", "0") or 0)
    items = re.findall(r";r=(\d+);t=(\d+)", headers.get("RateLimit", ""))
    r, t = min((int(r), int(t)) for r, t in items) if items else (None, 0)
    return retry_after, r, t


def main(url, n):
    ok = denied = attempt = 0
    t0 = time.monotonic()
    while ok < n:
        status, headers = get(url)
        retry_after, r, t = limits(headers)
        if status in (429, 503):
            denied += 1
            floor = max(retry_after, t if r == 0 else 0)
            wait = floor + random.uniform(0, min(CAP, BASE * 2 ** attempt))
            attempt += 1
        elif 200 <= status < 300:
            ok += 1
            attempt = 0
            # Spread what is left until the reset: t / r (all of t at r=0).
            wait = 0 if ok == n or r is None else (t / r if r else t)
        else:
            sys.exit(f"unexpected status {status}")
        print(int((time.monotonic() - t0) * 1000), status, retry_after,
              int(wait * 1000), flush=True)
        time.sleep(wait)
    print("done", ok, denied)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
