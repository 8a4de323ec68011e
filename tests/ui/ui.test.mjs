// ui.test.mjs — drives the page at /ui/ of a running `sluice serve` in the
// system's headless Chromium (puppeteer-core, pinned in package.json), and
// checks that what the page shows is what `sluice sim` computes.
//
//   SLUICE=build/sluice URL=http://127.0.0.1:PORT node tests/ui/ui.test.mjs
//   (tests/integration/ui.sh starts the daemon and runs this)
//
// With SHOTS=DIR it also writes the screenshots of `make screenshots`.
// Prints one line per check and "N passed, M failed" at the end; exits 1
// if any check failed.
import { execFileSync } from "node:child_process";
import puppeteer from "puppeteer-core";

const URL = process.env.URL;
const SLUICE = process.env.SLUICE || "build/sluice";
const CHROMIUM = process.env.CHROMIUM || "/usr/bin/chromium";
const SHOTS = process.env.SHOTS || "";
let passed = 0, failed = 0;

function check(name, ok, why) {
  if (ok) { passed++; console.log(`ok: ${name}`); }
  else { failed++; console.log(`FAIL: ${name}: ${why || ""}`); }
}

/* `sluice sim --summary-only` of a scenario text: {policy: {allowed,
   denied, max_in_window}}. */
function cliSummary(text, example) {
  const args = example ? ["sim", "--summary-only", "--example", example] : ["sim", "--summary-only", "-"];
  const out = execFileSync(SLUICE, args, example ? { encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] } : { input: text, encoding: "utf8" });
  const res = {};
  for (const line of out.split("\n")) {
    const m = /^summary policy=(\S+) allowed=(\d+) denied=(\d+) max_in_window=(\d+)$/.exec(line);
    if (m) res[m[1]] = { allowed: +m[2], denied: +m[3], max_in_window: +m[4] };
  }
  return res;
}

async function pageFigures(page) {
  return page.$$eval("#figures tbody tr", (rows) => {
    const res = {};
    for (const r of rows) {
      const f = (n) => r.querySelector(`[data-field="${n}"]`).textContent;
      res[f("policy")] = { allowed: +f("allowed"), denied: +f("denied"), max_in_window: +f("max_in_window") };
    }
    return res;
  });
}

/* Runs action, then waits until the page finished one more run. */
async function andWait(page, action) {
  const before = await page.$eval("body", (b) => +(b.dataset.runs || 0));
  await action();
  await page.waitForFunction((n) => +(document.body.dataset.runs || 0) > n && !document.body.dataset.busy, { timeout: 10000 }, before);
}

async function sameAsCli(page, name, example) {
  const text = await page.$eval("#scenario", (t) => t.value);
  const want = cliSummary(text, example);
  const got = await pageFigures(page);
  check(`${name}: the page's figures equal sluice sim's`, JSON.stringify(got) === JSON.stringify(want) && Object.keys(want).length > 0,
    `page ${JSON.stringify(got)} vs sluice sim ${JSON.stringify(want)}`);
  return got;
}

async function setValue(page, sel, value) {
  await page.$eval(sel, (e, v) => { e.value = v; e.dispatchEvent(new Event("change")); }, value);
}

const browser = await puppeteer.launch({
  executablePath: CHROMIUM, headless: true,
  args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run"],
});
let exitCode = 1;
try {
  const page = await browser.newPage();
  await page.setViewport({ width: 1280, height: 900 });
  const consoleErrors = [], failedRequests = [];
  let requests = 0, responses = 0;
  page.on("console", (m) => { if (m.type() === "error") consoleErrors.push(m.text()); });
  page.on("pageerror", (e) => consoleErrors.push(`page error: ${e.message}`));
  page.on("request", () => requests++);
  page.on("response", () => responses++);
  page.on("requestfailed", (r) => failedRequests.push(`${r.url()}: ${r.failure()?.errorText}`));

  await page.goto(`${URL}/ui/`, { waitUntil: "load", timeout: 20000 });
  await page.waitForSelector("body[data-ready]", { timeout: 10000 });
  // (data-ready comes as the first scenario is sent; its run answers
  // later, seconds later from a sanitizer-built daemon: wait for it)
  await page.waitForFunction(() => +(document.body.dataset.runs || 0) >= 1 && !document.body.dataset.busy, { timeout: 20000 })
    .catch(() => {});
  check("the page loads and runs its first scenario", (await page.$$("#lanes .lane")).length > 0);

  // The built-in example, one click.
  await andWait(page, () => page.click("#ex-boundary-burst"));
  const ex = await sameAsCli(page, "boundary-burst example", "boundary-burst");
  check("boundary burst: the fixed window lets 2x through", ex.fixed?.max_in_window === 200, JSON.stringify(ex));
  check("three lanes, one per policy", (await page.$$("#lanes .lane")).length === 3);
  if (SHOTS) await page.screenshot({ path: `${SHOTS}/ui-simulator.png`, clip: { x: 0, y: 0, width: 1280, height: 1320 }, captureBeyondViewport: true });

  // The same, pressed: reset, advance 59.9s, burst 100, advance 100ms, burst 100.
  await andWait(page, () => page.click("#btn-reset"));
  await page.$eval("#advance-by", (e) => { e.value = "59.9s"; });
  await andWait(page, () => page.click("#btn-advance"));
  await page.$eval("#burst-n", (e) => { e.value = "100"; });
  await andWait(page, () => page.click("#btn-burst"));
  await page.$eval("#advance-by", (e) => { e.value = "100ms"; });
  await andWait(page, () => page.click("#btn-advance"));
  await andWait(page, () => page.click("#btn-burst"));
  const pressed = await sameAsCli(page, "boundary burst by the buttons");
  check("boundary burst by the buttons: same figures as the example", JSON.stringify(pressed) === JSON.stringify(ex), `${JSON.stringify(pressed)} vs ${JSON.stringify(ex)}`);
  check("the clock reads 1m", (await page.$eval("#clock", (e) => e.textContent)) === "1m");

  // Switch algorithms: the log out, the token bucket and gcra in.
  await andWait(page, () => page.click("#use-log"));
  await andWait(page, () => page.click("#use-bucket"));
  await andWait(page, () => page.click("#use-gcra"));
  const sw = await sameAsCli(page, "switched algorithms");
  check("switched algorithms: lanes fixed, sliding, bucket, gcra", JSON.stringify(Object.keys(sw)) === JSON.stringify(["fixed", "sliding", "bucket", "gcra"]), JSON.stringify(Object.keys(sw)));
  check("four lanes", (await page.$$("#lanes .lane")).length === 4);

  // A bad policy: the server's message, inline, with its line.
  await setValue(page, "#spec-gcra", "gcra:0/s");
  await page.waitForFunction(() => !document.getElementById("error").hidden, { timeout: 10000 });
  const err = await page.$eval("#error", (e) => e.textContent);
  check("a bad policy shows the engine's error inline", /^line \d+: policy gcra: /.test(err), err);
  await andWait(page, () => setValue(page, "#spec-gcra", "gcra:100/m:burst=100"));
  check("fixing it clears the error", await page.$eval("#error", (e) => e.hidden));

  // The fleet quiz.
  await andWait(page, () => page.click("#quiz"));
  const quiz = await sameAsCli(page, "fleet quiz", "fleet-quiz");
  check("fleet quiz: 10 nodes let 2000 through against 100 a minute", quiz.fixed?.max_in_window === 2000, JSON.stringify(quiz));
  check("the fleet controls follow the quiz", await page.$eval("#fleet-on", (e) => e.checked) && (await page.$eval("#fleet-nodes", (e) => e.value)) === "10");
  if (SHOTS) await page.screenshot({ path: `${SHOTS}/ui-fleet.png`, clip: { x: 0, y: 0, width: 1280, height: 1080 }, captureBeyondViewport: true });

  // One shared store, exact: 200; then the store goes down, deny.
  await andWait(page, () => setValue(page, "#fleet-store", "exact"));
  const exact = await sameAsCli(page, "fleet quiz, exact store");
  check("a shared exact store holds the fleet to 200", exact.fixed?.max_in_window === 200, JSON.stringify(exact));
  await andWait(page, () => setValue(page, "#fleet-onerr", "deny"));
  await andWait(page, () => page.click("#btn-reset"));
  await page.$eval("#burst-n", (e) => { e.value = "10"; });
  await andWait(page, () => page.click("#btn-burst"));
  await andWait(page, () => page.click("#store-toggle"));
  check("the store toggle says the store is down", (await page.$eval("#store-toggle", (e) => e.getAttribute("aria-pressed"))) === "true");
  await andWait(page, () => page.click("#btn-burst"));
  const down = await sameAsCli(page, "store down, deny");
  check("store down with deny: the second burst is all denied", down.fixed?.allowed === 10 && down.fixed?.denied === 10, JSON.stringify(down));
  check("the log says why", (await page.$eval("#log", (e) => e.textContent)).includes("store down: denied"));

  // Accessibility: every control has a name, and is reachable by keyboard.
  const unnamed = await page.$$eval("button, input, select, textarea", (els) => els.filter((e) => {
    if (e.closest("[hidden]")) return false;
    const named = (e.labels && e.labels.length) || e.getAttribute("aria-label") || (e.tagName === "BUTTON" && e.textContent.trim());
    return !named;
  }).map((e) => e.id || e.outerHTML.slice(0, 60)));
  check("every control has a label", unnamed.length === 0, unnamed.join(", "));
  await page.focus("#btn-request");
  await andWait(page, () => page.keyboard.press("Enter"));
  check("REQUEST works from the keyboard", (await page.$eval("#scenario", (t) => t.value)).trim().endsWith("request client"));
  const alt = await page.$$eval("#lanes svg[role=img]", (s) => s.every((x) => /allowed.*denied.*limit/.test(x.getAttribute("aria-label"))));
  check("every lane's chart has a text alternative with its figures", alt);

  // The live view: some decisions, then the figures the page draws.
  await page.click("#tab-live");
  for (let i = 0; i < 30; i++) await fetch(`${URL}/v1/throttle?key=ui-test&policy=gcra:10/m`);
  await page.waitForFunction(() => document.querySelectorAll("#live-cards .card").length >= 4, { timeout: 10000 });
  await new Promise((r) => setTimeout(r, 4500));
  for (let i = 0; i < 30; i++) await fetch(`${URL}/v1/throttle?key=ui-test&policy=gcra:10/m`);
  // a mixed load: ten other keys ask once each beside the flooding one
  for (let i = 0; i < 10; i++) await fetch(`${URL}/v1/throttle?key=other-${i}&policy=gcra:10/m`);
  await new Promise((r) => setTimeout(r, 2500));
  if (SHOTS) { // a minute of traffic to draw: a client over its limit, on and off
    const until = Date.now() + 40000;
    for (let i = 0; Date.now() < until; i++) {
      await fetch(`${URL}/v1/throttle?key=shot&policy=gcra:5/s`);
      if (Math.floor(i / 100) % 2) await fetch(`${URL}/v1/check?domain=default&key=k${i % 7}`);
      await new Promise((r) => setTimeout(r, 60));
    }
  }
  const cards = await page.$eval("#live-cards", (e) => e.textContent);
  check("the live view shows decisions since start", /\d+ since start/.test(cards) && cards.includes("denied per second"), cards.slice(0, 200));
  check("the live view shows the store against its cap", /keys; cap/.test(cards), cards.slice(0, 300));
  const top = await page.$$eval("#live-topkeys .toprule", (rules) => rules.map((r) => ({
    rule: r.querySelector("h4").textContent,
    first: r.querySelector("td.key") ? r.querySelector("td.key").textContent : "",
    firstDenied: r.querySelectorAll("table")[1].querySelector("td.key") ? r.querySelectorAll("table")[1].querySelector("td.key").textContent : "",
    dominant: r.querySelector(".dominant") ? r.querySelector(".dominant").textContent : "",
    meter: r.querySelector(".meter[role=img]") ? r.querySelector(".meter[role=img]").getAttribute("aria-label") : "",
  })));
  const flood = top.find((r) => r.rule === "rule adhoc:gcra:10/m");
  check("the live view lists the flooding key first, by decisions and by denials", flood && flood.first === "ui-test" && flood.firstDenied === "ui-test", JSON.stringify(top));
  check("the heaviest key's share has a text alternative", flood && /^One key dominates: ui-test made at least \d+% of this rule's \d+ decisions/.test(flood.dominant) && /heaviest key's share: \d+%/.test(flood.meter), JSON.stringify(flood));
  check("the top keys say how keys are shown", /--denial-log-values plain/.test(await page.$eval("#live-top-note", (e) => e.textContent)));
  check("the live chart has a text alternative", /Decisions per second/.test(await page.$eval("#live-chart svg", (s) => s.getAttribute("aria-label"))));
  if (SHOTS) await page.screenshot({ path: `${SHOTS}/ui-live.png`, clip: { x: 0, y: 0, width: 1280, height: await page.evaluate(() => Math.min(2400, document.body.scrollHeight)) }, captureBeyondViewport: true });

  // (the bad policy's 400 is the one Chromium logs for the page's fetch)
  const expected = consoleErrors.filter((m) => /status of 400/.test(m));
  const unexpected = consoleErrors.filter((m) => !/status of 400/.test(m));
  check("no console errors", unexpected.length === 0 && expected.length === 1, consoleErrors.join(" | "));
  check("no failed requests", failedRequests.length === 0, failedRequests.join(" | "));
  check("every request answered", requests === responses, `${requests} requests, ${responses} responses`);
  exitCode = failed ? 1 : 0;
} catch (e) {
  check("the run finished", false, e.stack);
} finally {
  await browser.close();
}
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : exitCode);
