# fleet_lib.sh — helpers for the fleet-mode integration tests (fleet.sh,
# fleet_cluster.sh): redis-server processes the test owns, and a load
# client that sprays requests over several daemons (POSIX sh; sourced after
# serve_lib.sh, not run).
#
#   free_port                prints a port the kernel picked on 127.0.0.1
#                            (bound and closed at once)
#   rs_start NAME PORT [ARGS...]
#                            starts redis-server on 127.0.0.1:PORT (no
#                            persistence; ARGS added) with its log in
#                            $tmp/redis.NAME.log, tracks its pid (killed on
#                            exit) and waits until it answers PING; its pid
#                            in $tmp/redis.NAME.pid. 0, or a failed check and 1.
#   rs_pid NAME / rs_kill NAME SIGNAL
#   rcli PORT ARGS...        redis-cli's raw output, one line (bounded)
#   fl_load [OPTIONS] JOBFILE
#                            runs the load client (below); its summary on
#                            stdout
#   fl_load_bg OUT [OPTIONS] JOBFILE
#                            the same in the background (with --until), the
#                            summary in OUT, python's pid in $fl_bg_pid
#   fl_get TAG FIELD FILE    one field of a summary's line for TAG
#   fl_pipe PORT JOBFILE     JOBFILE's requests (resp lines only, in
#                            fl_load's order), all written at once on one
#                            connection to PORT, so that the daemon reads
#                            them in one pass (one batched script call when
#                            their keys share a slot); the summary as
#                            fl_load's (fl_load --pipe 1)
#   say TEXT                 prints "NAME: TEXT" (figures worth reading)
#
# The load client (python3, written to $tmp/fleet_load.py): JOBFILE has one
# line per kind of request, fields separated by TABs:
#     TAG  COUNT  resp  WORD...         a RESP command (SL.THROTTLE, SL.CHECK:
#                                       allowed = its reply's first integer
#                                       is 1; CL.THROTTLE: is 0)
#     TAG  COUNT  get   PATH            HTTP GET (allowed = 200, denied = 429)
#     TAG  COUNT  post  PATH  JSON      HTTP POST
# Each line is repeated COUNT times; the lines are interleaved (one of each,
# then again) and the k-th request of a line goes to daemon (k + line) mod N,
# N = how many ports --resp / --http name (each line round robin over the
# fleet),
# from --threads client threads at once, each with its own keep-alive
# connections. Options:
#     --resp P1,P2,..  --http P1,P2,..   the daemons (same order in both)
#     --threads N      concurrent clients (default 6)
#     --until FILE     repeat the job list until FILE exists (background load)
#     --log FILE       one line per request: start_ms daemon tag outcome lat_ms
#     --io-timeout S   a request with no answer after S s is an error (5)
#     --rate R         at most R requests a second in all (paced: the i-th
#                      starts no earlier than i / R s after the first)
#     --pipe 1         every request (resp lines only) written at once on
#                      one connection to the first --resp port, replies
#                      read in order (fl_pipe)
# The summary: one line per TAG,
#     TAG allowed=A denied=D errors=E ra=R maxlat=MS per=A0/A1/...
# (R: denials that carried Retry-After, HTTP only; MS: the slowest answer in
# ms; per: allowed per daemon), then "ALL ... maxlat=MS", and the first few
# errors as "ERR text" lines.

lib_tools="$lib_tools redis-server redis-cli"

# say TEXT — a line of progress (figures worth reading in the output).
say() { echo "$lib_name: $*"; }

free_port() {
  "$PY" -c 'import socket
s = socket.socket()
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])'
}

_rs_pong() { [ "$(timeout 2 redis-cli -h 127.0.0.1 -p "$1" PING 2>/dev/null)" = PONG ]; }

rs_start() {
  _rn=$1
  _rp=$2
  shift 2
  redis-server --port "$_rp" --bind 127.0.0.1 --save "" --appendonly no \
    --dir "$tmp" --logfile "" "$@" </dev/null >>"$tmp/redis.$_rn.log" 2>&1 &
  echo $! >"$tmp/redis.$_rn.pid"
  lib_track $!
  if ! waitfor 100 _rs_pong "$_rp"; then
    fail "rs_start $_rn: redis-server on port $_rp never answered PING; its log:"
    tail -n 20 "$tmp/redis.$_rn.log" | sed 's/^/    /' >&2
    return 1
  fi
  return 0
}

rs_pid() { cat "$tmp/redis.$1.pid"; }
rs_kill() { kill -"$2" "$(rs_pid "$1")" 2>/dev/null; }

rcli() {
  _rp=$1
  shift
  timeout 10 redis-cli -h 127.0.0.1 -p "$_rp" "$@" </dev/null 2>&1 |
    sed '/^$/d' | paste -sd' ' -
}

fl_get() {
  awk -v t="$1" -v f="$2" '$1 == t {
    for (i = 2; i <= NF; i++) { split($i, kv, "="); if (kv[1] == f) print kv[2] }
  }' "$3"
}

fl_load() {
  [ -f "$tmp/fleet_load.py" ] || _fl_write_load
  "$PY" "$tmp/fleet_load.py" "$@"
}

# fl_load_bg OUT [OPTIONS] JOBFILE — fl_load in the background (use
# --until), its summary in OUT; its pid (python's own: killed on exit) in
# $fl_bg_pid.
fl_load_bg() {
  [ -f "$tmp/fleet_load.py" ] || _fl_write_load
  _fo=$1
  shift
  (exec "$PY" "$tmp/fleet_load.py" "$@" >"$_fo") &
  fl_bg_pid=$!
  lib_track $fl_bg_pid
}

fl_pipe() {
  fl_load --resp "$1" --pipe 1 "$2"
}

_fl_write_load() {
  cat >"$tmp/fleet_load.py" <<'EOF'
import os, socket, sys, threading, time

args = sys.argv[1:]
opt = {"--resp": "", "--http": "", "--threads": "6", "--until": "",
       "--log": "", "--io-timeout": "5", "--rate": "0", "--pipe": ""}
while args and args[0].startswith("--"):
    opt[args[0]] = args[1]
    args = args[2:]
jobfile = args[0]
resp_ports = [int(p) for p in opt["--resp"].split(",") if p]
http_ports = [int(p) for p in opt["--http"].split(",") if p]
ndaemons = max(len(resp_ports), len(http_ports))
nthreads = int(opt["--threads"])
io_timeout = float(opt["--io-timeout"])
until = opt["--until"]
rate = float(opt["--rate"])

lines = []
for ln in open(jobfile):
    ln = ln.rstrip("\n")
    if not ln.strip():
        continue
    f = ln.split("\t")
    lines.append((f[0], int(f[1]), f[2], f[3:]))
jobs = []
r = 0
while True:
    added = False
    for li, (tag, count, kind, a) in enumerate(lines):
        if r < count:
            jobs.append((tag, kind, a, (r + li) % max(ndaemons, 1)))
            added = True
    if not added:
        break
    r += 1


def resp_cmd(words):
    out = [b"*%d\r\n" % len(words)]
    for w in words:
        b = w.encode()
        out.append(b"$%d\r\n%s\r\n" % (len(b), b))
    return b"".join(out)


def read_resp(f):
    line = f.readline()
    if not line.endswith(b"\r\n"):
        raise EOFError("connection closed")
    t, v = line[:1], line[1:-2]
    if t == b"+":
        return v.decode()
    if t == b"-":
        return Exception(v.decode())
    if t == b":":
        return int(v)
    if t == b"$":
        n = int(v)
        if n < 0:
            return None
        d = f.read(n + 2)
        if len(d) != n + 2:
            raise EOFError("connection closed")
        return d[:-2]
    if t == b"*":
        n = int(v)
        return None if n < 0 else [read_resp(f) for _ in range(n)]
    raise ValueError("bad RESP type %r" % t)


def read_http(f):
    st = f.readline()
    if not st:
        raise EOFError("connection closed")
    code = int(st.split()[1])
    hdrs = {}
    while True:
        h = f.readline()
        if not h:
            raise EOFError("connection closed")
        if h in (b"\r\n", b"\n"):
            break
        k, _, v = h.decode("latin-1").partition(":")
        hdrs[k.strip().lower()] = v.strip()
    if "content-length" in hdrs:
        f.read(int(hdrs["content-length"]))
    elif hdrs.get("transfer-encoding", "").lower() == "chunked":
        while True:
            n = int(f.readline().split(b";")[0], 16)
            f.read(n + 2)
            if n == 0:
                break
    return code, hdrs


stats = {}
errors = []
lock = threading.Lock()
logf = open(opt["--log"], "a") if opt["--log"] else None
t_base = time.time()
next_job = [0]
issued = [0]


def note(tag, d, outcome, lat, start, ra=False):
    with lock:
        s = stats.setdefault(tag, {"A": 0, "D": 0, "E": 0, "ra": 0,
                                   "max": 0.0, "per": [0] * ndaemons})
        s[outcome] += 1
        if outcome == "A":
            s["per"][d] += 1
        if ra:
            s["ra"] += 1
        s["max"] = max(s["max"], lat)
        if logf:
            logf.write("%d %d %s %s %.1f\n" % (start * 1000, d, tag, outcome, lat))


def resp_outcome(a, rep):
    """A (allowed) or D (denied) from the reply to command a."""
    if not (isinstance(rep, list) and rep and isinstance(rep[0], int)):
        raise ValueError("reply %r" % (rep,))
    # CL.THROTTLE's first is "limited" (redis-cell's reply)
    ok = 0 if a[0].upper() == "CL.THROTTLE" else 1
    return "A" if rep[0] == ok else "D"


def pipe():
    """--pipe: every job (RESP) written at once on one connection to the
    first --resp port, so that the daemon reads them in one pass; the
    replies read in order."""
    start = time.time()
    lost = None
    try:
        s = socket.create_connection(("127.0.0.1", resp_ports[0]),
                                     timeout=io_timeout)
        s.sendall(b"".join(resp_cmd(a) for _, _, a, _ in jobs))
        f = s.makefile("rb")
    except OSError as e:
        lost = e
    for tag, _, a, _ in jobs:
        try:
            if lost:
                raise lost
            outcome = resp_outcome(a, read_resp(f))
            note(tag, 0, outcome, (time.time() - start) * 1000, start)
        except Exception as e:
            note(tag, 0, "E", (time.time() - start) * 1000, start)
            if len(errors) < 5 and e is not lost:
                errors.append("%s: %s: %s" % (tag, type(e).__name__, e))
            if isinstance(e, (EOFError, OSError)):
                lost = e  # the connection is gone: the rest are errors too


def worker():
    conns = {}

    def conn(kind, d):
        key = (kind, d)
        if key not in conns:
            port = resp_ports[d] if kind == "resp" else http_ports[d]
            s = socket.create_connection(("127.0.0.1", port), timeout=io_timeout)
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conns[key] = (s, s.makefile("rb"))
        return conns[key]

    while True:
        with lock:
            i = next_job[0]
            next_job[0] += 1
            seq = issued[0]
            issued[0] += 1
        if rate > 0:
            wait = t_base + seq / rate - time.time()
            if wait > 0:
                time.sleep(wait)
        if i >= len(jobs):
            # (a test that is gone removed the directory: stop too)
            if not until or os.path.exists(until) or \
                    not os.path.isdir(os.path.dirname(until) or "."):
                break
            with lock:
                if next_job[0] > len(jobs):
                    next_job[0] = 0
            continue
        tag, kind, a, d = jobs[i]
        ckind = "resp" if kind == "resp" else "http"
        start = time.time()
        try:
            s, f = conn(ckind, d)
            if kind == "resp":
                s.sendall(resp_cmd(a))
                outcome = resp_outcome(a, read_resp(f))
                ra = False
            else:
                body = a[1].encode() if kind == "post" else b""
                req = "%s %s HTTP/1.1\r\nHost: x\r\n" % (kind.upper(), a[0])
                if kind == "post":
                    req += ("Content-Type: application/json\r\n"
                            "Content-Length: %d\r\n" % len(body))
                s.sendall(req.encode() + b"\r\n" + body)
                code, hdrs = read_http(f)
                if code == 200:
                    outcome = "A"
                elif code == 429:
                    outcome = "D"
                else:
                    raise ValueError("HTTP %d" % code)
                ra = "retry-after" in hdrs
            note(tag, d, outcome, (time.time() - start) * 1000, start, ra)
        except Exception as e:
            note(tag, d, "E", (time.time() - start) * 1000, start)
            with lock:
                if len(errors) < 5:
                    errors.append("%s d%d: %s: %s" % (tag, d, type(e).__name__, e))
            c = conns.pop((ckind, d), None)
            if c:
                c[0].close()


if opt["--pipe"]:
    pipe()
else:
    ts = [threading.Thread(target=worker) for _ in range(nthreads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
allmax = 0.0
for tag in sorted(stats):
    s = stats[tag]
    allmax = max(allmax, s["max"])
    print("%s allowed=%d denied=%d errors=%d ra=%d maxlat=%d per=%s" % (
        tag, s["A"], s["D"], s["E"], s["ra"], s["max"] + 0.999,
        "/".join(str(x) for x in s["per"])))
print("ALL requests=%d errors=%d maxlat=%d" % (
    sum(s["A"] + s["D"] + s["E"] for s in stats.values()),
    sum(s["E"] for s in stats.values()), allmax + 0.999))
for e in errors:
    print("ERR " + e)
EOF
}
