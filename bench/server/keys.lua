-- keys.lua — wrk script for `make bench-server`: every request names a
-- random key among N, the same generator (and seed) for every server.
--
--   wrk ... -s keys.lua URL -- PREFIX [SUFFIX [N]]
--
-- requests PREFIX .. "key:%012d" .. SUFFIX, the number uniform in [0, N)
-- (default 100000; "key:%012d" is the form redis-benchmark's -r gives
-- key:__rand_int__, so both protocols see the same key strings). done()
-- prints one machine-readable line: requests/s, p50/p99 latency, errors.
local prefix, suffix, nkeys = "/?key=", "", 100000

function init(args)
  prefix = args[1] or prefix
  suffix = args[2] or suffix
  nkeys = tonumber(args[3] or nkeys)
  math.randomseed(20261121)
end

function request()
  return wrk.format(nil, prefix .. string.format("key:%012d",
    math.random(0, nkeys - 1)) .. suffix)
end

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    "wrk: requests=%d requests_per_s=%.0f p50_ms=%.3f p99_ms=%.3f " ..
    "errors=%d non_2xx=%d\n",
    summary.requests, summary.requests / (summary.duration / 1e6),
    latency:percentile(50) / 1000, latency:percentile(99) / 1000,
    e.connect + e.read + e.write + e.timeout, e.status))
end
