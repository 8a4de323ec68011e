#!/bin/sh
# contrib.sh — checks what ships in contrib/ for operators (POSIX sh):
#
#   SLUICE=build/sluice sh tests/integration/contrib.sh    (make integration)
#
#   - contrib/prometheus/alerts.yml: `promtool check rules`, and its unit
#     tests (alerts_test.yml: each alert fires on synthetic series and stays
#     quiet below its threshold) pass under `promtool test rules`;
#   - every metric the alerts and the Grafana dashboard
#     (contrib/grafana/sluice.json) query is one that sluice exports: read
#     from the /metrics of real daemons, one per store mode (memory with a
#     candidate policy, exact and approximate fleet mode on a redis-server
#     of the test's own), so that every family appears. The one exception
#     is listed in `coming` below, with the reason;
#   - contrib/systemd/sluice.service passes `systemd-analyze verify` (when
#     systemd is installed) without a warning, reloads with SIGHUP, and
#     allows the file descriptors its --max-connections needs;
#   - contrib/logrotate/sluice reopens the log with SIGUSR1.
. "$(dirname "$0")/serve_lib.sh"
. "$(dirname "$0")/fleet_lib.sh"
lib_tools="$lib_tools promtool"
lib_init contrib

root=$(cd "$(dirname "$0")/../.." && pwd)
contrib=$root/contrib

# Metrics the files may name before sluice exports them: the denial log's
# top keys (issue 17, part 1) export sluice_top_key_share.
coming="sluice_top_key_share"

# ---- Prometheus rules ----
expect_cmd "promtool check rules" 0 "SUCCESS: 7 rules found" \
  promtool check rules "$contrib/prometheus/alerts.yml"
expect_cmd "promtool test rules" 0 "SUCCESS" \
  sh -c "cd '$contrib/prometheus' && promtool test rules alerts_test.yml"

# A broken threshold must fail the unit tests (they test something).
sed 's/> 0.01$/> 0.05/' "$contrib/prometheus/alerts.yml" >"$tmp/alerts.yml"
sed "s#alerts.yml#$tmp/alerts.yml#" "$contrib/prometheus/alerts_test.yml" \
  >"$tmp/alerts_test.yml"
expect_cmd "promtool test rules fails on a wrong threshold" 1 "FAILED" \
  promtool test rules "$tmp/alerts_test.yml"

# ---- every queried metric is exported ----
cat >"$tmp/rules.yaml" <<'YAML'
domain: ops
descriptors:
  - key: user
    rate_limit: {policy: "fixed_window:2/m", candidate: "fixed_window:1/m"}
YAML
scrape() { # NAME: appends its daemon's /metrics to $tmp/metrics
  sv_use "$1"
  http GET "$URL/v1/check?domain=ops&user=u1"
  http GET "$URL/v1/check?domain=ops&user=u1"
  http GET "$URL/metrics"
  if [ "$code" = 200 ]; then pass; else fail "scrape $1: status $code"; fi
  cat "$tmp/b" >>"$tmp/metrics"
}
: >"$tmp/metrics"
sv_start mem --config "$tmp/rules.yaml" && scrape mem && sv_stop mem
RP=$(free_port)
if rs_start main "$RP"; then
  sv_start exact --config "$tmp/rules.yaml" --store "redis://127.0.0.1:$RP" &&
    scrape exact && sv_stop exact
  sv_start approx --config "$tmp/rules.yaml" --store "redis://127.0.0.1:$RP" \
    --sync 100 && scrape approx && sv_stop approx
fi

"$PY" - "$tmp/metrics" "$coming" "$contrib/prometheus/alerts.yml" \
  "$contrib/grafana/sluice.json" >"$tmp/names.out" 2>&1 <<'PY'
import json, re, sys
scraped, coming, alerts, dash = sys.argv[1], sys.argv[2].split(), sys.argv[3], sys.argv[4]
families, hist = set(), set()
for line in open(scraped):
    m = re.match(r"# TYPE (\S+) (\S+)", line)
    if m:
        families.add(m.group(1))
        if m.group(2) == "histogram":
            hist.add(m.group(1))
def names(expr):
    for n in re.findall(r"\bsluice_[a-z0-9_]+", expr):
        for suf in ("_bucket", "_sum", "_count"):
            if n.endswith(suf) and n[: -len(suf)] in hist:
                n = n[: -len(suf)]
        yield n
exprs = []
text = open(alerts).read()
exprs += [("alerts.yml", e) for e in re.findall(r"expr: \|?\n?((?:.*\n)+?)\s+for:", text)]
d = json.load(open(dash))
for p in d["panels"]:
    for t in p.get("targets", []):
        exprs.append((p["title"], t["expr"]))
for v in d["templating"]["list"]:
    if isinstance(v.get("query"), dict):
        exprs.append((v["name"], v["query"]["query"]))
bad, seen = [], set()
for where, e in exprs:
    for n in names(e):
        seen.add(n)
        if n not in families and n not in coming:
            bad.append(f"{where}: {n}")
print("queried:", len(seen), "families; exported:", len(families))
if len(exprs) < 20 or not seen:
    bad.append(f"only {len(exprs)} expressions found: the parser is wrong")
for b in bad:
    print("unknown metric:", b)
sys.exit(1 if bad else 0)
PY
if [ $? -eq 0 ]; then pass; else fail "queried metrics: $(cat "$tmp/names.out")"; fi
say "$(head -n 1 "$tmp/names.out")"

# ---- systemd and logrotate ----
unit=$contrib/systemd/sluice.service
nofile=$(sed -n 's/^LimitNOFILE=//p' "$unit")
maxconn=$(sed -n 's/^ExecStart=.*--max-connections \([0-9]*\).*/\1/p' "$unit")
# listen.c: max-connections + 32 + 8 per worker; 256 workers at most.
if [ -n "$nofile" ] && [ -n "$maxconn" ] &&
  [ "$nofile" -ge $((maxconn + 32 + 8 * 256)) ]; then pass; else
  fail "LimitNOFILE=$nofile does not cover --max-connections $maxconn"
fi
for want in DynamicUser=yes NoNewPrivileges=yes ProtectSystem=strict \
  'ExecReload=/bin/kill -HUP $MAINPID' StateDirectory=sluice; do
  if grep -qxF "$want" "$unit"; then pass; else fail "sluice.service: no '$want'"; fi
done
if grep -q "SIGUSR1" "$contrib/logrotate/sluice"; then pass; else
  fail "logrotate: no SIGUSR1 in postrotate"; fi
if command -v systemd-analyze >/dev/null 2>&1; then
  sed "s#/usr/local/bin/sluice#$(cd "$(dirname "$SLUICE")" && pwd)/$(basename "$SLUICE")#" \
    "$unit" >"$tmp/sluice.service"
  systemd-analyze verify --man=no "$tmp/sluice.service" >"$tmp/verify" 2>&1
  if [ $? -eq 0 ] && [ ! -s "$tmp/verify" ]; then pass; else
    fail "systemd-analyze verify: $(head -c 600 "$tmp/verify")"; fi
else
  say "systemd-analyze is not installed: the unit was not verified"
fi
lib_finish
