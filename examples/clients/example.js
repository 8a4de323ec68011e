// example.js — a well-behaved HTTP client of `sluice serve` in JavaScript
// (docs/clients.md), node 18+'s built-in fetch: it sends N requests to
// URL, paces itself by the RateLimit header so as to spend the quota
// evenly, and after a 429/503 waits the server's Retry-After (or, with
// nothing remaining, its reset) plus full jitter before it retries.
// Prints one line per response, "elapsed_ms status retry_after_s
// slept_ms", then "done OK DENIED" (tests/integration/clients.sh checks
// them).
//
//   node example.js 'http://127.0.0.1:8080/v1/throttle?key=me&policy=token_bucket:10/s:burst=5' 20

const BASE = 50, CAP = 2000; // backoff, ms: 50, doubling, at most 2 s
const sleep = (ms) => new Promise((done) => setTimeout(done, ms));

// Retry-After (seconds), and the RateLimit field's least r with its t.
function limits(headers) {
  const retryAfter = Number(headers.get("retry-after") || 0);
  let r = null, t = 0;
  for (const m of (headers.get("ratelimit") || "").matchAll(/;r=(\d+);t=(\d+)/g)) {
    if (r === null || Number(m[1]) < r) [r, t] = [Number(m[1]), Number(m[2])];
  }
  return { retryAfter, r, t };
}

async function main(url, n) {
  let ok = 0, denied = 0, attempt = 0;
  const t0 = performance.now();
  while (ok < n) {
    const res = await fetch(url);
    await res.arrayBuffer(); // read the body: the connection is reused
    const { retryAfter, r, t } = limits(res.headers);
    let wait;
    if (res.status === 429 || res.status === 503) {
      denied++;
      const floor = Math.max(retryAfter, r === 0 ? t : 0) * 1000;
      wait = floor + Math.random() * Math.min(CAP, BASE * 2 ** attempt++);
    } else if (res.ok) {
      ok++;
      attempt = 0;
      // Spread what is left until the reset: t / r (all of t at r=0).
      wait = ok === n || r === null ? 0 : (r ? t / r : t) * 1000;
    } else {
      throw new Error(`unexpected status ${res.status}`);
    }
    console.log(Math.floor(performance.now() - t0), res.status, retryAfter,
                Math.floor(wait));
    await sleep(wait);
  }
  console.log("done", ok, denied);
}

main(process.argv[2], Number(process.argv[3]));
