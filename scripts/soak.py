#!/usr/bin/env python3
"""make soak: every attack of docs/hardening.md at once, on loopback.

Starts one `sluice serve` at a small store cap, then, together and for a
bounded time: two unique-key floods (redis-benchmark spraying SL.CHECK
values of a config rule and SL.THROTTLE keys of an ad-hoc policy), two hot
keys at their limits, idle connection floods on both listeners (the RESP
one past its listener's budget, the HTTP one within HTTP's reserve), slow
(byte-a-second) requests on both, oversized RESP commands, and a probe
request every 20 ms. It samples the daemon's RSS and prints, at the end,
the figures docs/hardening.md quotes: RSS, the store's bytes against its
cap, the probe's latency percentiles, the extra admissions of the hot keys,
and what the daemon refused or closed (from /metrics).

Everything runs on 127.0.0.1, every load is bounded in count and time
(--seconds, default 60; the whole run stays under five minutes), and every
process and socket it opens is closed before it exits. It exits non-zero
when the daemon dies, the store passes its cap, RSS passes --max-rss, the
probe fails more than 1% of the time, or a hot key gets more than 1% over
its limit.
"""
import argparse
import json
import os
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

CONFIG = """domain: soak
descriptors:
  - key: user
    rate_limit:
      policy: "sliding_log:100/m"
"""

HOT_RULE_LIMIT = 100        # sliding_log:100/m on user=hot
HOT_ADHOC = "token_bucket:10/m"
HOT_ADHOC_BURST = 10


def resp_cmd(*args):
    """One RESP multibulk command, as bytes."""
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)


def read_reply(f):
    """Reads one RESP reply from a buffered socket file; ints and arrays."""
    line = f.readline()
    if not line:
        raise ConnectionError("closed")
    t, rest = line[:1], line[1:-2]
    if t == b":":
        return int(rest)
    if t in (b"+", b"-"):
        return rest.decode(errors="replace") if t == b"+" else \
            RuntimeError(rest.decode(errors="replace"))
    if t == b"$":
        n = int(rest)
        return None if n < 0 else f.read(n + 2)[:-2]
    if t == b"*":
        return [read_reply(f) for _ in range(int(rest))]
    raise ConnectionError("bad reply %r" % line)


class Soak:
    def __init__(self, a):
        self.a = a
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.figures = {}
        self.socks = []
        self.procs = []
        self.rss_max = 0
        self.rss_samples = []

    # ---- the daemon ----

    def start(self):
        self.dir = tempfile.mkdtemp(prefix="sluice-soak-")
        cfg = os.path.join(self.dir, "soak.yaml")
        with open(cfg, "w") as f:
            f.write(CONFIG)
        ready = os.path.join(self.dir, "ready.json")
        self.log = open(os.path.join(self.dir, "sluice.log"), "w")
        cmd = [self.a.sluice, "serve", "-c", cfg, "--http", "127.0.0.1:0",
               "--resp", "127.0.0.1:0", "--grpc", "127.0.0.1:0",
               "--max-memory", self.a.max_memory,
               "--max-connections", str(self.a.max_connections),
               "--ready-file", ready] + self.a.extra
        self.daemon = subprocess.Popen(cmd, stdout=self.log,
                                       stderr=subprocess.STDOUT)
        deadline = time.time() + 10
        while not os.path.exists(ready):
            if time.time() > deadline or self.daemon.poll() is not None:
                sys.exit("soak: sluice did not start; see %s" %
                         self.log.name)
            time.sleep(0.05)
        info = json.load(open(ready))
        self.http = int(info["http"].rsplit(":", 1)[1])
        self.resp = int(info["resp"].rsplit(":", 1)[1])
        print("soak: sluice pid %d, http :%d, resp :%d, cap %s, %d s" %
              (self.daemon.pid, self.http, self.resp, self.a.max_memory,
               self.a.seconds))

    def metrics(self):
        url = "http://127.0.0.1:%d/metrics" % self.http
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                text = r.read().decode()
        except OSError as e:
            return {"error": str(e)}
        out = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                name, _, value = line.rpartition(" ")
                out[name] = float(value)
        return out

    # ---- loads ----

    def spawn(self, argv):
        p = subprocess.Popen(argv, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
        self.procs.append(p)
        return p

    def floods(self):
        n = str(self.a.flood_requests)
        base = ["redis-benchmark", "-h", "127.0.0.1", "-p", str(self.resp),
                "-c", "4", "-n", n, "-r", "100000000", "-P", "16", "-q"]
        self.spawn(base + ["SL.CHECK", "soak", "user", "__rand_int__"])
        self.spawn(base + ["SL.THROTTLE", "key:__rand_int__",
                           "fixed_window:1/d"])

    def hot_key(self, name, cmd, limit, burst, rate):
        """Sends cmd every 20 ms and measures the allows beyond what an exact
        limiter would have given at the same times: for a window of `limit`
        per 1/`rate` seconds (burst 0), more than `limit` in any window; for
        a bucket, more than `burst` + `rate` x t in any span of t seconds."""
        sent = allowed = 0
        times = []
        try:
            s = socket.create_connection(("127.0.0.1", self.resp), 5)
            f = s.makefile("rb")
            while not self.stop.is_set():
                s.sendall(cmd)
                r = read_reply(f)
                sent += 1
                if isinstance(r, list) and r and r[0] == 1:
                    allowed += 1
                    times.append(time.monotonic())
                time.sleep(0.02)
            s.close()
        except (OSError, ConnectionError) as e:
            with self.lock:
                self.figures[name + " error"] = str(e)
        worst = 0
        if burst:
            # excess(i..j) = (j - i + 1) - burst - rate (t_j - t_i): keep the
            # best start seen so far.
            best = float("-inf")
            for j, t in enumerate(times):
                best = max(best, rate * t - j)
                worst = max(worst, j + 1 - rate * t + best - burst)
        else:
            i = 0
            for j, t in enumerate(times):
                while times[i] <= t - 1 / rate:
                    i += 1
                worst = max(worst, j - i + 1 - limit)
        with self.lock:
            self.figures[name] = (sent, allowed, int(worst), limit)

    def idle(self, port, n, label):
        """Opens n connections that never send; counts those refused at
        connect and those the daemon closed within a second (over a
        budget)."""
        mine = []
        refused = 0
        for _ in range(n):
            if self.stop.is_set():
                break
            try:
                mine.append(socket.create_connection(("127.0.0.1", port), 2))
            except OSError:
                refused += 1
        with self.lock:
            self.socks.extend(mine)
        time.sleep(1)
        closed = 0
        for s in mine:
            s.setblocking(False)
            try:
                if s.recv(1) == b"":
                    closed += 1
            except BlockingIOError:
                pass
            except OSError:
                closed += 1
        with self.lock:
            self.figures["idle " + label] = (len(mine), refused, closed)

    def slow(self, port, n, payload, label):
        """n connections each sending payload one byte a second."""
        conns = []
        for _ in range(n):
            try:
                conns.append(socket.create_connection(("127.0.0.1", port), 2))
            except OSError:
                pass
        cut = 0
        i = 0
        while not self.stop.is_set() and i < len(payload) and conns:
            for s in list(conns):
                try:
                    s.sendall(payload[i:i + 1])
                except OSError:
                    conns.remove(s)
                    s.close()
                    cut += 1
            i += 1
            self.stop.wait(1)
        for s in conns:
            s.close()
        with self.lock:
            self.figures["slow " + label] = (n, cut)

    def oversized(self, n):
        """n connections sending a 1,024 x 64 KiB command as fast as the
        daemon reads it; counts the bytes it took before closing."""
        chunk = b"$65536\r\n" + b"x" * 65536 + b"\r\n"
        taken = []

        def one():
            sent = 0
            try:
                s = socket.create_connection(("127.0.0.1", self.resp), 2)
                s.settimeout(2)
                s.sendall(b"*1024\r\n$11\r\nSL.THROTTLE\r\n")
                for _ in range(1023):
                    if self.stop.is_set():
                        break
                    s.sendall(chunk)
                    sent += len(chunk)
                s.close()
            except OSError:
                pass
            taken.append(sent)
        ts = [threading.Thread(target=one) for _ in range(n)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        with self.lock:
            self.figures["oversized"] = (n, max(taken) if taken else 0)

    def probe(self):
        lat = []
        fails = 0
        path = "/v1/check?domain=soak&user=probe"
        while not self.stop.is_set():
            t0 = time.monotonic()
            try:
                with urllib.request.urlopen(
                        "http://127.0.0.1:%d%s" % (self.http, path),
                        timeout=2) as r:
                    r.read()
                lat.append(time.monotonic() - t0)
            except urllib.error.HTTPError as e:
                if e.code == 429:
                    lat.append(time.monotonic() - t0)
                else:
                    fails += 1
            except OSError:
                fails += 1
            time.sleep(0.02)
        with self.lock:
            self.figures["probe"] = (lat, fails)

    def sample_rss(self):
        while not self.stop.is_set():
            try:
                for line in open("/proc/%d/status" % self.daemon.pid):
                    if line.startswith("VmRSS:"):
                        kb = int(line.split()[1])
                        self.rss_max = max(self.rss_max, kb)
                        self.rss_samples.append(kb)
            except OSError:
                pass
            self.stop.wait(0.5)

    # ---- the run ----

    def run(self):
        self.start()
        limit = resource.getrlimit(resource.RLIMIT_NOFILE)
        want = min(limit[1], 65536)
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, limit[1]))
        jobs = [
            (self.sample_rss, ()),
            (self.probe, ()),
            (self.hot_key, ("hot config key",
                            resp_cmd("SL.CHECK", "soak", "user", "hot"),
                            HOT_RULE_LIMIT, 0, 1 / 60)),
            (self.hot_key, ("hot ad-hoc key",
                            resp_cmd("SL.THROTTLE", "hot", HOT_ADHOC),
                            HOT_ADHOC_BURST, HOT_ADHOC_BURST,
                            HOT_ADHOC_BURST / 60)),
            (self.idle, (self.resp, self.a.idle, "resp")),
            (self.idle, (self.http, self.a.idle // 8, "http")),
            (self.slow, (self.http, 100,
                         b"GET /v1/check?domain=soak&user=s HTTP/1.1\r\n"
                         b"X-Slow: " + b"a" * 200 + b"\r\n\r\n", "http")),
            (self.slow, (self.resp, 100,
                         resp_cmd("SL.CHECK", "soak", "user", "s" * 200),
                         "resp")),
            (self.oversized, (20,)),
        ]
        threads = [threading.Thread(target=f, args=a) for f, a in jobs]
        for t in threads:
            t.start()
        self.floods()
        self.stop.wait(self.a.seconds)
        before = self.metrics()
        self.stop.set()
        for p in self.procs:
            p.terminate()
        for t in threads:
            t.join(30)
        for p in self.procs:
            p.wait(10)
        for s in self.socks:
            s.close()
        alive = self.daemon.poll() is None
        after = self.metrics() if alive else {}
        self.daemon.send_signal(signal.SIGTERM)
        try:
            self.daemon.wait(15)
        except subprocess.TimeoutExpired:
            self.daemon.kill()
            self.daemon.wait()
        return self.report(alive, before, after)

    def report(self, alive, m, after):
        ok = True

        def check(cond, what):
            nonlocal ok
            print("  %s %s" % ("ok  " if cond else "FAIL", what))
            ok = ok and cond

        print("\nsoak figures (%d s, cap %s):" % (self.a.seconds,
                                                  self.a.max_memory))
        check(alive, "the daemon survived")
        print("  RSS max %.1f MiB" % (self.rss_max / 1024))
        check(self.rss_max <= self.a.max_rss * 1024,
              "RSS at most %d MiB" % self.a.max_rss)
        cap = m.get("sluice_store_max_bytes", 0)
        used = m.get("sluice_store_bytes", 0)
        print("  store %.1f MiB of %.1f MiB cap, %d keys, %d evictions" %
              (used / 2**20, cap / 2**20, m.get("sluice_store_keys", 0),
               m.get("sluice_store_evictions_total", 0)))
        check(cap > 0 and used <= cap, "store within its cap")
        lat, fails = self.figures.get("probe", ([], 1))
        lat.sort()
        if lat:
            pct = lambda q: lat[min(len(lat) - 1, int(q * len(lat)))] * 1e3
            print("  probe: %d requests, p50 %.2f ms, p99 %.2f ms, "
                  "max %.2f ms, %d failed" %
                  (len(lat), pct(0.5), pct(0.99), lat[-1] * 1e3, fails))
        check(lat and fails <= len(lat) // 100, "probe failed at most 1%")
        for name in ("hot config key", "hot ad-hoc key"):
            sent, allowed, extra, limit = self.figures.get(name, (0, 0, 0, 1))
            print("  %s: %d sent, %d allowed, %d over its limit of %d" %
                  (name, sent, allowed, extra, limit))
            check(sent > 0 and extra <= max(1, limit // 100),
                  "%s at most 1%% over its limit" % name)
            if name + " error" in self.figures:
                print("    (%s)" % self.figures[name + " error"])
        for label in ("resp", "http"):
            o, r, c = self.figures.get("idle " + label, (0, 0, 0))
            print("  idle %s: %d opened, %d refused at connect, %d closed "
                  "by the daemon within 1 s" % (label, o, r, c))
            n, cut = self.figures.get("slow " + label, (0, 0))
            print("  slow %s: %d connections, %d cut off" % (label, n, cut))
        n, most = self.figures.get("oversized", (0, 0))
        print("  oversized: %d connections, at most %.1f MiB sent on one "
              "before it was cut" % (n, most / 2**20))
        print("  from /metrics, during the attack:")
        words = ("reject", "refus", "closed", "evict", "buffer", "timeout",
                 "auth", "given", "adhoc", "connections")
        for k in sorted(m):
            if any(w in k for w in words) and m[k]:
                print("    %s %g" % (k, m[k]))
        self.log.close()
        if ok:
            shutil.rmtree(self.dir, ignore_errors=True)
            print("soak: passed")
        else:
            print("soak: FAILED (the daemon's log: %s)" % self.log.name)
        return 0 if ok else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sluice", default="build/sluice")
    ap.add_argument("--seconds", type=int, default=60)
    ap.add_argument("--max-memory", default="8M")
    ap.add_argument("--max-rss", type=int, default=256,
                    help="MiB of RSS the daemon may reach")
    ap.add_argument("--idle", type=int, default=4000,
                    help="idle RESP connections (an eighth as many HTTP: "
                    "within the fifth of --max-connections that HTTP keeps)")
    ap.add_argument("--max-connections", type=int, default=4000,
                    help="the daemon's --max-connections: by default the "
                    "idle RESP flood alone passes RESP's budget (80%%), and "
                    "HTTP must still answer")
    ap.add_argument("--flood-requests", type=int, default=50000000)
    ap.add_argument("extra", nargs="*", help="more `sluice serve` options")
    a = ap.parse_args()
    if not 1 <= a.seconds <= 240:
        sys.exit("soak: --seconds must be 1..240 (the run stays under "
                 "five minutes)")
    sys.exit(Soak(a).run())


if __name__ == "__main__":
    main()
