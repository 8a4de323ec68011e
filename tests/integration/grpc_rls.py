#!/usr/bin/env python3
"""grpc_rls.py — a real gRPC client (grpcio) against sluice's --grpc, for
grpc_rls.sh.

    python3 grpc_rls.py STUBS GRPC_ADDR HTTP_URL SUITE

STUBS is the directory protoc wrote the messages into (from proto/, at
test time); SUITE one of the functions named in SUITES below. Prints one
line per check, "PASS name" or "FAIL name: why", for the shell script to
count. Expected figures come from the configs' definitions (the comments
beside them), never from the binary; counting uses fresh keys and runs
inside one window (in_window), as serve_http.sh does, whose /v1/check
cases these are.
"""
import os
import sys
import threading
import time
import urllib.request

import grpc

STUBS = sys.argv[1]
sys.path.insert(0, STUBS)
# grpc/health/v1 would shadow grpcio's own package "grpc": load it by path.
sys.path.insert(0, os.path.join(STUBS, "grpc", "health", "v1"))
from envoy.service.ratelimit.v3 import rls_pb2  # noqa: E402
import health_pb2  # noqa: E402

ADDR, URL = sys.argv[2], sys.argv[3]
RLS = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"
R = rls_pb2.RateLimitResponse
UNIQ = "%d%d" % (os.getpid(), int(time.time()))

channel = grpc.insecure_channel(ADDR)
should = channel.unary_unary(
    RLS, request_serializer=rls_pb2.RateLimitRequest.SerializeToString,
    response_deserializer=R.FromString)
raw = channel.unary_unary(RLS)  # bytes in, bytes out
health = channel.unary_unary(
    "/grpc.health.v1.Health/Check",
    request_serializer=health_pb2.HealthCheckRequest.SerializeToString,
    response_deserializer=health_pb2.HealthCheckResponse.FromString)


def check(name, ok, why=""):
    print("PASS %s" % name if ok else "FAIL %s: %s" % (name, why), flush=True)


def eq(name, want, got):
    check(name, want == got, "want %r, got %r" % (want, got))


def req(domain, *descs, hits=0):
    """A request: each desc a list of (key, value) pairs, or a dict with
    entries, hits (the descriptor's hits_addend) and limit (rpu, unit)."""
    r = rls_pb2.RateLimitRequest(domain=domain, hits_addend=hits)
    for d in descs:
        if not isinstance(d, dict):
            d = {"entries": d}
        pd = r.descriptors.add()
        for k, v in d["entries"]:
            e = pd.entries.add()
            e.key, e.value = k, v
        if "hits" in d:
            pd.hits_addend.value = d["hits"]
        if "limit" in d:
            pd.limit.requests_per_unit, pd.limit.unit = d["limit"]
    return r


def call(r, timeout=5):
    return should(r, timeout=timeout)


def code_of(fn):
    """The gRPC status code (and details) fn's call ended with."""
    try:
        fn()
        return grpc.StatusCode.OK, ""
    except grpc.RpcError as e:
        return e.code(), e.details()


def figs(s):
    """A status as [code, requests_per_unit, unit, limit_remaining]."""
    cl = s.current_limit if s.HasField("current_limit") else None
    return [R.Code.Name(s.code), cl.requests_per_unit if cl else None,
            R.RateLimit.Unit.Name(cl.unit) if cl else None, s.limit_remaining]


def headers(resp):
    return {h.key: h.value for h in resp.response_headers_to_add}


def metric(name):
    text = urllib.request.urlopen(URL + "/metrics", timeout=5).read().decode()
    for line in text.splitlines():
        if line.startswith(name + " "):
            return int(float(line.split()[1]))
    return None


def in_window(seconds, fn):
    """Runs fn where it cannot straddle a window boundary (of `seconds`,
    aligned to the epoch): waits out the last few seconds of one."""
    left = seconds - time.time() % seconds
    if left < min(seconds / 4, 3):
        time.sleep(left + 0.02)
    fn()


# ---------------------------------------------------------------------------
# The embedded default config: domain "default", key "key",
# sliding_window:100/m, each value its own counter (serve_http.sh, part 1).
# ---------------------------------------------------------------------------
def default_counts():
    k = "alice" + UNIQ
    r = call(req("default", [("key", k)]))
    eq("first: overall OK, one status", ["OK", 1],
       [R.Code.Name(r.overall_code), len(r.statuses)])
    eq("first: OK, 99 left, no current_limit (a sluice policy)",
       ["OK", None, None, 99], figs(r.statuses[0]))
    d = r.statuses[0].duration_until_reset
    check("first: duration_until_reset within two windows (sliding)",
          0 < d.seconds <= 120 and d.nanos == 0, str(d))
    h = headers(r)
    eq("first: RateLimit-Policy", '"default.key";q=100;w=60',
       h.get("ratelimit-policy"))
    eq("first: RateLimit", '"default.key";r=99;t=%d' % d.seconds,
       h.get("ratelimit"))
    eq("first: X-RateLimit-Limit and -Remaining", ["100", "99"],
       [h.get("x-ratelimit-limit"), h.get("x-ratelimit-remaining")])
    reset = int(h.get("x-ratelimit-reset", "0"))
    check("first: X-RateLimit-Reset is when the window resets (Unix s)",
          time.time() - 1 <= reset <= time.time() + 121, str(reset))
    check("first: no Retry-After when allowed", "retry-after" not in h)
    r = call(req("default", [("key", k)]))
    eq("same value, same counter", 98, r.statuses[0].limit_remaining)
    r = call(req("default", [("key", "bob" + UNIQ)]))
    eq("another value, its own counter", 99, r.statuses[0].limit_remaining)
    r = call(req("default", [("key", k)], hits=5))
    eq("request hits_addend 5 takes 5", 93, r.statuses[0].limit_remaining)
    r = call(req("default", {"entries": [("key", k)], "hits": 0}))
    eq("descriptor hits_addend 0 peeks", ["OK", 93],
       [R.Code.Name(r.overall_code), r.statuses[0].limit_remaining])
    r = call(req("default", [("key", k)], hits=100))
    eq("hits_addend 100 with 93 left is denied, consuming nothing",
       ["OVER_LIMIT", "OVER_LIMIT", 93],
       [R.Code.Name(r.overall_code), R.Code.Name(r.statuses[0].code),
        r.statuses[0].limit_remaining])
    h = headers(r)
    check("denial: Retry-After in seconds", h.get("retry-after", "").isdigit()
          and int(h["retry-after"]) >= 1, str(h))
    eq("denial: X-RateLimit-Remaining", "93", h.get("x-ratelimit-remaining"))
    r = call(req("default", [("key", k)]))
    eq("the denied request consumed nothing", 92,
       r.statuses[0].limit_remaining)
    r = call(req("default", {"entries": [("key", k)], "hits": 7}, hits=2))
    eq("the descriptor's hits_addend beats the request's", 85,
       r.statuses[0].limit_remaining)


def expired_call(key, timeout="1n"):
    """ShouldRateLimit for key on a socket of its own (HTTP/2 frames by
    hand: grpcio will not send a call whose deadline has passed), with
    grpc-timeout `timeout`, its message 50 ms after its headers. Returns
    the bytes the server sent back."""
    import socket
    import struct

    def frame(ftype, flags, sid, payload=b""):
        return struct.pack(">I", len(payload))[1:] + bytes([ftype, flags]) + \
            struct.pack(">I", sid) + payload

    def literal(name, value):  # HPACK: without indexing, no Huffman
        return b"\x00" + bytes([len(name)]) + name + bytes([len(value)]) + \
            value
    host, port = ADDR.rsplit(":", 1)
    block = b"".join(literal(n, v) for n, v in (
        (b":method", b"POST"), (b":scheme", b"http"),
        (b":path", RLS.encode()), (b":authority", ADDR.encode()),
        (b"content-type", b"application/grpc"), (b"te", b"trailers"),
        (b"grpc-timeout", timeout.encode())))
    msg = req("default", [("key", key)]).SerializeToString()
    s = socket.create_connection((host, int(port)), timeout=5)
    s.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + frame(4, 0, 0) +
              frame(1, 4, 1, block))
    time.sleep(0.05)
    s.sendall(frame(0, 1, 1, b"\x00" + struct.pack(">I", len(msg)) + msg))
    got, end = b"", time.monotonic() + 5
    while time.monotonic() < end:
        try:
            b = s.recv(65536)
        except socket.timeout:
            break
        if not b:
            break
        got += b
        # HEADERS with END_STREAM on stream 1: the trailers, the end.
        i = 0
        while i + 9 <= len(got):
            n = int.from_bytes(got[i:i + 3], "big")
            if got[i + 3] == 1 and got[i + 4] & 1 and \
                    int.from_bytes(got[i + 5:i + 9], "big") == 1:
                end = 0
            i += 9 + n
    s.close()
    return got


def expired_deadline():
    """A call whose grpc-timeout passed before its message came is answered
    DEADLINE_EXCEEDED (a gRPC error, counted) and charges nothing."""
    k = "late" + UNIQ
    before = metric("sluice_grpc_errors_total") or 0
    got = expired_call(k)
    check("an expired call: the server answers it", len(got) > 0, repr(got))
    eq("an expired call: a gRPC error", before + 1,
       metric("sluice_grpc_errors_total"))
    r = call(req("default", [("key", k)]))
    eq("an expired call charged nothing: the next has 99 left", 99,
       r.statuses[0].limit_remaining)


def default_suite():
    in_window(60, default_counts)
    in_window(60, expired_deadline)
    c, msg = code_of(lambda: call(req("default", [("key", "carol")],
                                      hits=101)))
    eq("hits above the limit can never pass: INVALID_ARGUMENT (HTTP's 400)",
       grpc.StatusCode.INVALID_ARGUMENT, c)
    check("... saying why", "can never be allowed" in msg, msg)

    # Unknown domain: OK with no limit, as envoyproxy/ratelimit answers;
    # counted.
    before = metric("sluice_grpc_unknown_domain_total") or 0
    r = call(req("nosuch", [("key", "a")], [("b", "c")]))
    eq("unknown domain: OK, a status per descriptor, no limit",
       ["OK", 2, ["OK", None, None, 0]],
       [R.Code.Name(r.overall_code), len(r.statuses), figs(r.statuses[1])])
    eq("unknown domain: no headers", 0, len(r.response_headers_to_add))
    eq("unknown domain: counted", before + 1,
       metric("sluice_grpc_unknown_domain_total"))

    # An empty descriptor (no entries) is OK in place; the others decided.
    k = "dora" + UNIQ
    r = call(req("default", [], [("key", k)]))
    eq("empty descriptor: OK in place, the other decided",
       ["OK", "OK", 99, 0],
       [R.Code.Name(r.statuses[0].code), R.Code.Name(r.statuses[1].code),
        r.statuses[1].limit_remaining, r.statuses[0].limit_remaining])
    r = call(req("default", []))
    eq("only an empty descriptor: OK", ["OK", 1],
       [R.Code.Name(r.overall_code), len(r.statuses)])

    bad = {
        "an empty domain": req("", [("key", "a")]),
        "no descriptors": req("default"),
        "17 descriptors": req("default", *[[("key", "a")]] * 17),
        "17 entries": req("default", [("k%d" % i, "v") for i in range(17)]),
        "an empty key": req("default", [("", "a")]),
        "a 1025-byte value": req("default", [("key", "v" * 1025)]),
        "a 1025-byte key": req("default", [("k" * 1025, "v")]),
    }
    for name, r in bad.items():
        c, msg = code_of(lambda: call(r))
        check("%s: INVALID_ARGUMENT with a message" % name,
              c == grpc.StatusCode.INVALID_ARGUMENT and msg, "%s %r" % (c, msg))

    # Malformed messages: a clear status, never a crash.
    for name, data in {"garbage bytes": b"\xff\xff\xff\xff\x0f",
                       "a truncated field": b"\x0a\x10abc",
                       "a wrong wire type": b"\x0d\x01\x02\x03\x04",
                       "an empty message": b""}.items():
        c, msg = code_of(lambda: raw(data, timeout=5))
        check("malformed (%s): INVALID_ARGUMENT" % name,
              c == grpc.StatusCode.INVALID_ARGUMENT, "%s %r" % (c, msg))
    # Over --max-body (64K): refused by the core before it is decoded.
    big = req("default", [("key", "x" * 1000)] * 1)
    big.descriptors[0].entries[0].value = "x" * 70000
    c, _ = code_of(lambda: call(big))
    eq("a message over --max-body: RESOURCE_EXHAUSTED",
       grpc.StatusCode.RESOURCE_EXHAUSTED, c)
    c, _ = code_of(lambda: channel.unary_unary("/nosuch.Service/Nope")(
        b"", timeout=5))
    eq("an unknown method: UNIMPLEMENTED", grpc.StatusCode.UNIMPLEMENTED, c)

    # Health: the whole server and the rate limit service serve (also by
    # envoyproxy/ratelimit's name for it); another service is NOT_FOUND;
    # Watch is not served.
    for svc in ("", "envoy.service.ratelimit.v3.RateLimitService",
                "ratelimit"):
        a = health(health_pb2.HealthCheckRequest(service=svc), timeout=5)
        eq("health %r: SERVING" % svc, "SERVING",
           health_pb2.HealthCheckResponse.ServingStatus.Name(a.status))
    c, _ = code_of(lambda: health(health_pb2.HealthCheckRequest(
        service="nosuch"), timeout=5))
    eq("health of an unknown service: NOT_FOUND", grpc.StatusCode.NOT_FOUND, c)
    c, _ = code_of(lambda: list(channel.unary_stream(
        "/grpc.health.v1.Health/Watch")(b"", timeout=5)))
    eq("health Watch: UNIMPLEMENTED", grpc.StatusCode.UNIMPLEMENTED, c)

    # Deadlines and cancellation: the caller gets its status, the daemon
    # goes on answering.
    futs = [should.future(req("default", [("key", "cx%d" % i)]), timeout=5)
            for i in range(50)]
    for f in futs:
        f.cancel()
    r = call(req("default", [("key", "after" + UNIQ)]))
    eq("after 50 cancelled calls the daemon answers", 99,
       r.statuses[0].limit_remaining)

    # Many concurrent calls on one connection (more than its 100 streams):
    # every one answered, and exactly the limit allowed.
    k = "many" + UNIQ

    def burst():
        futs = [should.future(req("default", [("key", k)]), timeout=20)
                for _ in range(150)]
        codes = [R.Code.Name(f.result().overall_code) for f in futs]
        eq("150 concurrent calls: 100 allowed, 50 denied", [100, 50],
           [codes.count("OK"), codes.count("OVER_LIMIT")])
    in_window(60, burst)
    calls, errors = metric("sluice_grpc_calls_total"), \
        metric("sluice_grpc_errors_total")
    check("metrics: calls and errors counted",
          calls and calls > 150 and errors and errors >= 12,
          "%s %s" % (calls, errors))


# ---------------------------------------------------------------------------
# envoyproxy/ratelimit's README examples (serve_http.sh, part 3).
# ---------------------------------------------------------------------------
def messaging():
    n = "206111" + UNIQ
    two = [("message_type", "marketing"), ("to_number", n)]
    one = [("to_number", n)]
    r = call(req("messaging", two, one))
    eq("messaging: nested marketing rule, envoy's unit in current_limit",
       ["OK", 5, "DAY", 4], figs(r.statuses[0]))
    eq("messaging: per-number rule", ["OK", 100, "DAY", 99], figs(r.statuses[1]))
    eq("messaging: RateLimit-Policy lists both, the tightest first",
       '"messaging.message_type_marketing.to_number";q=5;w=86400, '
       '"messaging.to_number";q=100;w=86400',
       headers(r).get("ratelimit-policy"))
    left = 86400 - int(time.time()) % 86400
    check("messaging: duration_until_reset is the day's rest",
          abs(r.statuses[0].duration_until_reset.seconds - left) <= 2,
          "%d vs %d" % (r.statuses[0].duration_until_reset.seconds, left))
    r = call(req("messaging", two, {"entries": one, "hits": 10}, hits=3))
    eq("messaging: request hits_addend 3", ["OK", 5, "DAY", 1],
       figs(r.statuses[0]))
    eq("messaging: descriptor hits_addend 10", ["OK", 100, "DAY", 89],
       figs(r.statuses[1]))
    r = call(req("messaging", two, {"entries": one, "hits": 0}, hits=0))
    eq("messaging: request hits_addend 0 counts as 1", ["OK", 5, "DAY", 0],
       figs(r.statuses[0]))
    eq("messaging: descriptor hits_addend 0 peeks", ["OK", 100, "DAY", 89],
       figs(r.statuses[1]))
    r = call(req("messaging", two, one))
    eq("messaging: over the marketing limit: OVER_LIMIT, the number uncharged",
       ["OVER_LIMIT", ["OVER_LIMIT", 5, "DAY", 0], ["OK", 100, "DAY", 89]],
       [R.Code.Name(r.overall_code), figs(r.statuses[0]), figs(r.statuses[1])])
    r = call(req("messaging", one))
    eq("messaging: the number alone shares its counter",
       ["OK", 100, "DAY", 88], figs(r.statuses[0]))


def edge():
    ip = "50.0.%d.%d" % (int(UNIQ) % 200 + 1, os.getpid() % 250 + 1)
    r = call(req("edge_proxy_per_ip", [("remote_address", ip)]))
    eq("edge: any address, 10 an hour", ["OK", 10, "HOUR", 9],
       figs(r.statuses[0]))
    r = call(req("edge_proxy_per_ip", [("remote_address", ip)]))
    eq("edge: same address, same counter", ["OK", 10, "HOUR", 8],
       figs(r.statuses[0]))


def override():
    """A descriptor's own limit (envoy's RateLimitDescriptor.limit):
    requests_per_unit per unit in a fixed window, instead of the rules,
    its counter keyed by the domain and the descriptor."""
    n = [("to_number", "ov" + UNIQ)]
    HOUR = 3
    for left in (2, 1, 0):
        r = call(req("messaging", {"entries": n, "limit": (3, HOUR)}))
        eq("override: 3 an hour, not the rule's 100 a day (%d left)" % left,
           ["OK", 3, "HOUR", left], figs(r.statuses[0]))
    r = call(req("messaging", {"entries": n, "limit": (3, HOUR)}))
    eq("override: the fourth is OVER_LIMIT", ["OVER_LIMIT",
       ["OVER_LIMIT", 3, "HOUR", 0]],
       [R.Code.Name(r.overall_code), figs(r.statuses[0])])
    r = call(req("messaging", n))
    eq("override: the rule's own counter is untouched",
       ["OK", 100, "DAY", 99], figs(r.statuses[0]))
    r = call(req("internal", {"entries": n, "limit": (3, HOUR)}))
    eq("override: another domain, another counter", ["OK", 3, "HOUR", 2],
       figs(r.statuses[0]))
    r = call(req("messaging", {"entries": [("to_number", "ow" + UNIQ)],
                               "limit": (10, HOUR), "hits": 4}))
    eq("override: with hits_addend", ["OK", 10, "HOUR", 6],
       figs(r.statuses[0]))
    r = call(req("messaging", {"entries": n, "limit": (0, HOUR)}))
    eq("override: requests_per_unit 0 blocks", ["OVER_LIMIT", 0, "HOUR", 0],
       figs(r.statuses[0]))
    r = call(req("nosuch", {"entries": n, "limit": (3, HOUR)}))
    eq("override in an unknown domain: OK, no limit", ["OK", None, None, 0],
       figs(r.statuses[0]))
    c, msg = code_of(lambda: call(req("messaging", {"entries": n,
                                                    "limit": (3, 0)})))
    eq("override with unit UNKNOWN: INVALID_ARGUMENT",
       grpc.StatusCode.INVALID_ARGUMENT, c)


def examples_suite():
    in_window(86400, messaging)
    in_window(3600, override)  # (its own limit: 3 an hour)
    in_window(3600, edge)
    r = call(req("edge_proxy_per_ip", [("remote_address", "50.0.0.5")]))
    eq("edge: requests_per_unit 0 blocks", ["OVER_LIMIT",
       ["OVER_LIMIT", 0, "SECOND", 0]],
       [R.Code.Name(r.overall_code), figs(r.statuses[0])])
    r = call(req("example4", [("key", "value"), ("subkey", "subvalue")]))
    eq("example4: depth mismatch, no limit", ["OK", None, None, 0],
       figs(r.statuses[0]))
    check("example4: no limit, no headers", not r.response_headers_to_add)
    r = call(req("internal", [("ldap", "x")]))
    eq("unlimited: OK with limit_remaining 2^32-1", ["OK", None, None,
       4294967295], figs(r.statuses[0]))

    def shadow():
        for _ in range(3):
            r = call(req("example6", [("service", "s" + UNIQ),
                                      ("user", "user-a")]))
        eq("shadow: over the limit, reported OK, not enforced",
           ["OK", ["OK", 2, "HOUR", 0]],
           [R.Code.Name(r.overall_code), figs(r.statuses[0])])

    def replaces():
        u = "bk" + UNIQ
        d1 = [("key_1", "value_1"), ("user", u)]
        d2 = [("key_2", "value_2"), ("user", u)]
        r = call(req("example7", d1, d2))
        eq("replaces: the replaced limit does not apply, the other does",
           [["OK", None, None, 0], ["OK", 10, "HOUR", 9]],
           [figs(r.statuses[0]), figs(r.statuses[1])])
        eq("replaces: current_limit carries the rule's name",
           "specific_limit", call(req("example7", d1)).statuses[0]
           .current_limit.name)

    def wildcard():
        r = call(req("example9", [("key1", "value_" + UNIQ)]))
        eq("wildcard: value* matches", ["OK", 20, "HOUR", 19],
           figs(r.statuses[0]))
    in_window(3600, shadow)
    in_window(3600, replaces)
    in_window(3600, wildcard)
    r = call(req("example9", [("key1", "valu")]))
    eq("wildcard: a shorter value does not match", ["OK", None, None, 0],
       figs(r.statuses[0]))


def noheaders_suite():
    r = call(req("default", [("key", "nh" + UNIQ)]))
    eq("--headers none: no response_headers_to_add", 0,
       len(r.response_headers_to_add))
    r = call(req("default", [("key", "nh" + UNIQ)], hits=100))
    eq("--headers none: a denial still says Retry-After (plain HTTP)",
       ["retry-after"], [h.key for h in r.response_headers_to_add])


def slow_calls_suite():
    """Calls in flight while the daemon is told to stop: each gets an
    answer or a clear status, never a hang."""
    futs = []

    def fire():
        for i in range(200):
            futs.append(should.future(req("default", [("key", "s%d" % i)]),
                                      timeout=10))
    t = threading.Thread(target=fire)
    t.start()
    t.join()
    done = 0
    for f in futs:
        try:
            f.result()
            done += 1
        except grpc.RpcError as e:
            if e.code() not in (grpc.StatusCode.UNAVAILABLE,
                                grpc.StatusCode.CANCELLED):
                check("stop: a clear status", False, str(e.code()))
                return
    check("stop: every call answered or UNAVAILABLE/CANCELLED", True)


def deadline_suite():
    """Exact mode with Redis stopped (SIGSTOP) and --redis-timeout 2000:
    a call whose deadline passes while its decision waits ends with
    DEADLINE_EXCEEDED at the client; the decision's late answer is
    dropped."""
    t0 = time.time()
    c, _ = code_of(lambda: call(req("default", [("key", "dl" + UNIQ)]),
                                timeout=0.3))
    eq("a deadline that passes while Redis is slow: DEADLINE_EXCEEDED",
       grpc.StatusCode.DEADLINE_EXCEEDED, c)
    check("... at the deadline, not at Redis's timeout",
          time.time() - t0 < 1.5, "%.2f s" % (time.time() - t0))
    fut = should.future(req("default", [("key", "cn" + UNIQ)]), timeout=5)
    time.sleep(0.1)
    fut.cancel()
    eq("a call cancelled while its decision waits: cancelled", True,
       fut.cancelled())


def conns_suite():
    """--max-grpc-connections 2: two connections are served, a third is
    closed at once (UNAVAILABLE at the client) and counted."""
    def chan():
        c = grpc.insecure_channel(ADDR, options=[("grpc.use_local_subchannel_pool", 1)])
        return c, c.unary_unary(
            RLS, request_serializer=rls_pb2.RateLimitRequest.SerializeToString,
            response_deserializer=R.FromString)
    held = [chan() for _ in range(2)]
    for i, (_, stub) in enumerate(held):
        r = stub(req("default", [("key", "c%d" % i + UNIQ)]), timeout=5)
        eq("connection %d of 2: served" % (i + 1), "OK",
           R.Code.Name(r.overall_code))
    c3, stub3 = chan()
    code, _ = code_of(lambda: stub3(req("default", [("key", "c3" + UNIQ)]),
                                    timeout=3))
    eq("a third connection over --max-grpc-connections 2: UNAVAILABLE",
       grpc.StatusCode.UNAVAILABLE, code)
    check("... counted in sluice_connections_rejected_total{protocol=grpc}",
          (metric('sluice_connections_rejected_total{protocol="grpc"}') or 0)
          >= 1)
    eq("sluice_connections{protocol=grpc}: the two served", 2,
       metric('sluice_connections{protocol="grpc"}'))
    c3.close()
    # --max-body 1M --max-input-buffer 1M: a 1 MiB message (and its
    # 5-byte prefix) is more than gRPC may hold, all connections together.
    c, msg = code_of(lambda: held[0][0].unary_unary(RLS)(b"\0" * (1 << 20),
                                                         timeout=10))
    check("a message past --max-input-buffer: RESOURCE_EXHAUSTED, saying so",
          c == grpc.StatusCode.RESOURCE_EXHAUSTED and
          "--max-input-buffer" in msg, "%s %r" % (c, msg))
    for c, _ in held:
        c.close()


SUITES = {"conns": conns_suite, "deadline": deadline_suite,
          "default": default_suite, "examples": examples_suite,
          "noheaders": noheaders_suite, "slow": slow_calls_suite}

if __name__ == "__main__":
    SUITES[sys.argv[4]]()
