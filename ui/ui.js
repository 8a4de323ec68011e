/*
 * ui.js — the page at /ui/ of sluice serve: the simulator and the live view.
 *
 * The simulator never decides anything itself: it writes a scenario in
 * `sluice sim`'s language (the text area holds it, the buttons append to
 * it), sends it to POST /v1/sim, and draws the answer, so the page and
 * the CLI cannot disagree. The live view polls GET /v1/stats (the figures
 * of /metrics as JSON) and keeps the last five minutes in memory.
 * Plain JavaScript and SVG, no library; no inline code (the page's
 * Content-Security-Policy forbids it).
 */
"use strict";

const SVGNS = "http://www.w3.org/2000/svg";
const $ = (id) => document.getElementById(id);

/* The six algorithms, with a default spec and a sentence for newcomers. */
const ALGOS = [
  ["fixed", "fixed_window:100/m", "Counts requests in windows that start on the clock (every whole minute); the count starts afresh at each boundary."],
  ["sliding", "sliding_window:100/m", "Weighs the previous window's count by how much of it still overlaps the last minute: close to exact, two counters of state."],
  ["log", "sliding_log:100/m", "Remembers every allowed request of the last minute: exact, but its memory grows with the limit."],
  ["bucket", "token_bucket:100/m:burst=100", "A bucket of tokens refilling steadily; each request takes one. Unused capacity is banked, up to the burst."],
  ["leaky", "leaky_bucket:100/m:burst=100", "A queue draining at the rate: requests wait their turn (delayed) instead of being refused, until the queue is full."],
  ["gcra", "gcra:100/m:burst=100", "Decides like the token bucket, with a single timestamp of state per key (the 'theoretical arrival time')."],
];

/* Marks: allowed = filled circle (green), delayed = triangle (orange,
   hatched), denied = cross (red); bars use the same patterns, so the
   kinds read apart in greyscale too. */
const KIND = [
  { name: "allowed", fill: "url(#p-ok)", stroke: "#1b7a33" },
  { name: "delayed (waits in the queue)", fill: "url(#p-delay)", stroke: "#b36b00" },
  { name: "denied (429)", fill: "url(#p-deny)", stroke: "#c0262d" },
];

let examples = [];
let storeDown = false;
let lastRun = null;
let inflight = 0;

function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "text") e.textContent = v; else e.setAttribute(k, v);
  }
  for (const k of kids) e.append(k);
  return e;
}

function svg(tag, attrs, text) {
  const e = document.createElementNS(SVGNS, tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text;
  return e;
}

/* ms as the simulator writes durations: 59.9s, 1m, 250ms. */
function fmtTime(ms) {
  if (ms === 0) return "0s";
  if (ms < 1000) return `${+ms.toFixed(3)}ms`;
  const s = ms / 1000;
  if (s < 60) return `${+s.toFixed(3)}s`;
  const m = Math.floor(s / 60), r = +(s - m * 60).toFixed(3);
  return r ? `${m}m${r}s` : `${m}m`;
}

function parseDuration(text) {
  const re = /(\d+(?:\.\d+)?)(ms|s|m|h|d)/y;
  const unit = { ms: 1, s: 1e3, m: 6e4, h: 36e5, d: 864e5 };
  let total = 0, m, at = 0;
  text = text.trim();
  if (!text) return NaN;
  re.lastIndex = 0;
  while (at < text.length && (m = re.exec(text))) { total += parseFloat(m[1]) * unit[m[2]]; at = re.lastIndex; }
  return at === text.length ? total : NaN;
}

/* ---- the scenario text ---------------------------------------------- */

function scenarioLines() { return $("scenario").value.split("\n"); }

/* The policy and fleet lines the controls describe. */
function headerLines() {
  const out = [];
  if ($("fleet-on").checked) {
    let f = `fleet ${$("fleet-nodes").value} lb ${$("fleet-lb").value} store ${$("fleet-store").value}`;
    if ($("fleet-store").value === "sync") f += ` ${$("fleet-sync").value.trim() || "1s"}`;
    out.push(f + ` on_store_error ${$("fleet-onerr").value}`);
  }
  for (const [name] of ALGOS)
    if ($(`use-${name}`).checked) out.push(`policy ${name} ${$(`spec-${name}`).value.trim()}`);
  return out;
}

/* Replaces the scenario's policy and fleet lines with the controls'. */
function rewriteHeader() {
  const rest = scenarioLines().filter((l) => !/^\s*(policy|fleet)\b/.test(l) && !/^\s*#/.test(l));
  while (rest.length && rest[0].trim() === "") rest.shift();
  $("scenario").value = [...headerLines(), ...rest].join("\n");
}

/* Sets the controls from a scenario's policy and fleet lines. */
function controlsFromText(text) {
  for (const [name, def] of ALGOS) { $(`use-${name}`).checked = false; $(`spec-${name}`).value = def; }
  $("fleet-on").checked = false;
  for (const line of text.split("\n")) {
    const w = line.trim().split(/\s+/);
    if (w[0] === "policy" && w.length === 3) {
      const algo = w[2].split(":")[0];
      const map = { fixed_window: "fixed", sliding_window: "sliding", sliding_log: "log", token_bucket: "bucket", leaky_bucket: "leaky", gcra: "gcra" };
      const name = map[algo];
      if (name && !$(`use-${name}`).checked) { $(`use-${name}`).checked = true; $(`spec-${name}`).value = w[2]; }
    } else if (w[0] === "fleet") {
      $("fleet-on").checked = true;
      $("fleet-nodes").value = w[1] || "1";
      for (let i = 2; i + 1 < w.length; i += 2) {
        if (w[i] === "lb") $("fleet-lb").value = w[i + 1];
        if (w[i] === "store") { $("fleet-store").value = w[i + 1]; if (w[i + 1] === "sync") { $("fleet-sync").value = w[i + 2]; i++; } }
        if (w[i] === "on_store_error") $("fleet-onerr").value = w[i + 1];
      }
    }
  }
  storeDown = false;
  updateStoreButton();
}

/* The clock after the scenario's commands so far (the page's own reading
   of 'at' and 'advance': the engine is the judge of everything else). */
function clockOf(text) {
  let now = 0;
  for (const line of text.split("\n")) {
    const w = line.trim().split(/\s+/);
    if (w[0] === "at" && w[1]) now = parseDuration(w[1]) || now;
    if (w[0] === "advance" && w[1]) now += parseDuration(w[1]) || 0;
    if (w[0] === "store" && w[1]) storeDown = w[1] === "down";
  }
  return now;
}

function append(line) {
  const t = $("scenario").value.replace(/\s+$/, "");
  $("scenario").value = (t ? t + "\n" : "") + line;
  run();
}

/* ---- running it ------------------------------------------------------ */

async function run() {
  const text = $("scenario").value;
  $("clock").textContent = fmtTime(clockOf(text));
  updateStoreButton();
  if (!/^\s*policy\b/m.test(text)) {
    showError("Choose at least one algorithm (or load an example).");
    clearResults();
    return;
  }
  inflight++;
  document.body.dataset.busy = "1";
  try {
    const r = await fetch("/v1/sim", { method: "POST", body: text, headers: { "content-type": "text/plain" } });
    const doc = await r.json();
    if (!r.ok) { showError(doc.error || `error ${r.status}`); clearResults(); return; }
    hideError();
    lastRun = doc;
    render(doc);
  } catch (e) {
    showError(`The daemon did not answer: ${e.message}`);
  } finally {
    if (--inflight === 0) delete document.body.dataset.busy;
    document.body.dataset.runs = String(+(document.body.dataset.runs || 0) + 1);
  }
}

function showError(msg) { const e = $("error"); e.textContent = msg; e.hidden = false; }
function hideError() { $("error").hidden = true; $("error").textContent = ""; }
function clearResults() { $("lanes").replaceChildren(); $("figures").tBodies[0].replaceChildren(); $("log").replaceChildren(); }

/* ---- drawing --------------------------------------------------------- */

function patterns() {
  const defs = svg("defs");
  const mk = (id, color, path) => {
    const p = svg("pattern", { id, width: 6, height: 6, patternUnits: "userSpaceOnUse" });
    p.append(svg("rect", { width: 6, height: 6, fill: color, "fill-opacity": id === "p-ok" ? 1 : 0.25 }));
    if (path) p.append(svg("path", { d: path, stroke: color, "stroke-width": 1.6 }));
    return p;
  };
  defs.append(mk("p-ok", "#1b7a33"), mk("p-delay", "#b36b00", "M0,6 L6,0"), mk("p-deny", "#c0262d", "M0,0 L6,6 M6,0 L0,6"));
  return defs;
}

function legend() {
  const box = $("legend");
  box.replaceChildren();
  KIND.forEach((k, i) => {
    const s = svg("svg", { width: 22, height: 14 });
    s.append(patterns(), svg("rect", { x: 1, y: 1, width: 20, height: 12, fill: k.fill, stroke: k.stroke }));
    box.append(el("span", {}, s, ` ${i === 0 ? "bar up: allowed" : i === 1 ? "hatched bar up: delayed (waits in the queue)" : "cross-hatched bar down: denied (429)"}`));
  });
  const s = svg("svg", { width: 26, height: 14 });
  s.append(svg("path", { d: "M1,10 L8,10 L8,4 L25,4", stroke: "#1f4fbf", "stroke-width": 2, fill: "none" }));
  box.append(el("span", {}, s, " line: the limiter's state (tokens left, queue, or count in the window)"));
  const b = svg("svg", { width: 14, height: 14 });
  b.append(svg("line", { x1: 7, y1: 0, x2: 7, y2: 14, stroke: "#5f6368", "stroke-dasharray": "3 2" }));
  box.append(el("span", {}, b, " dashed: a window boundary"));
}

function niceTicks(lo, hi, n) {
  const span = hi - lo, raw = span / n;
  const steps = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1e3, 2e3, 5e3, 1e4, 2e4, 3e4, 6e4, 12e4, 3e5, 6e5, 18e5, 36e5, 72e5, 216e5, 432e5, 864e5];
  const step = steps.find((s) => s >= raw) || raw;
  const out = [];
  for (let t = Math.ceil(lo / step) * step; t <= hi; t += step) out.push(t);
  return out;
}

function verdict(s) {
  if (s.max_in_window > s.limit) {
    const x = (s.max_in_window / s.limit);
    return { text: `over the limit: ${s.max_in_window} in one window, ${x >= 10 ? Math.round(x) : x.toFixed(1)}× the limit`, cls: "over" };
  }
  return { text: "kept the limit", cls: "within" };
}

/* What the fleet is, in words, above the lanes. */
function fleetBanner(doc) {
  const b = $("fleet-banner");
  if (!doc.fleet) { b.hidden = true; return; }
  const f = doc.fleet;
  const how = { local: "each node counts on its own, so the fleet lets up to N times the limit through",
    exact: "every node counts in one shared store, so the fleet holds the limit while the store is up",
    sync: `each node counts on its own and syncs with the store every ${fmtTime(f.sync_ms)}, so the fleet can overshoot between syncs` }[f.store];
  b.textContent = `A fleet of ${f.nodes} daemons behind a ${f.lb} load balancer: ${how}. While the store is down, on_store_error ${f.on_store_error} decides.`;
  b.hidden = false;
}

function render(doc) {
  legend();
  fleetBanner(doc);
  const lanes = $("lanes");
  lanes.replaceChildren();
  const ev = doc.events;
  let lo = Infinity, hi = -Infinity;
  for (const e of ev) { lo = Math.min(lo, e[0]); hi = Math.max(hi, e[0]); }
  for (const s of doc.store) { lo = Math.min(lo, s[0]); hi = Math.max(hi, s[0]); }
  if (!isFinite(lo)) { lo = 0; hi = 1000; }
  let pad = (hi - lo) / 20 || 1000;
  lo = Math.max(0, lo - pad); hi += pad;
  const W = 1000, H = 150, L = 52, R = 12, top = 14, mid = 92, bottom = 128;
  const X = (t) => L + (t - lo) / (hi - lo) * (W - L - R);
  const nb = 100, bw = (W - L - R) / nb;
  doc.policies.forEach((pol, p) => {
    const sum = doc.summary[p];
    const mine = ev.filter((e) => e[1] === p);
    const bins = Array.from({ length: nb }, () => [0, 0, 0]);
    for (const e of mine) bins[Math.min(nb - 1, Math.floor((e[0] - lo) / (hi - lo) * nb))][e[4]]++;
    const peak = Math.max(1, ...bins.map((b) => Math.max(b[0] + b[1], b[2])));
    const s = svg("svg", { viewBox: `0 0 ${W} ${H}`, role: "img" });
    const v = verdict(sum);
    s.setAttribute("aria-label", `${pol.name}, ${pol.spec}: ${sum.allowed} allowed, ${sum.denied} denied, ${sum.delayed} delayed; at most ${sum.max_in_window} in one window against a limit of ${sum.limit}: ${v.text}.`);
    s.append(patterns());
    /* the store's down time, shaded */
    let downAt = null;
    for (const [t, what] of [...doc.store, [hi, "up"]]) {
      if (what === "down" && downAt === null) downAt = t;
      if (what === "up" && downAt !== null) {
        s.append(svg("rect", { x: X(downAt), y: top, width: Math.max(2, X(t) - X(downAt)), height: bottom - top, fill: "#000", "fill-opacity": 0.07 }));
        s.append(svg("text", { x: X(downAt) + 4, y: top + 11, "font-size": 11, fill: "#333" }, "store down"));
        downAt = null;
      }
    }
    /* window boundaries */
    if (pol.algorithm === "fixed_window" || pol.algorithm === "sliding_window") {
      const P = pol.period_ms;
      if ((hi - lo) / P < 60)
        for (let t = Math.ceil(lo / P) * P; t <= hi; t += P) {
          s.append(svg("line", { x1: X(t), x2: X(t), y1: top, y2: bottom, stroke: "#5f6368", "stroke-dasharray": "4 3" }));
          const right = X(t) > W - 160;
          s.append(svg("text", { x: X(t) + (right ? -4 : 4), y: bottom - 4, "font-size": 11, "text-anchor": right ? "end" : "start", fill: "#333" }, `a new window starts at ${fmtTime(t)}`));
        }
    }
    /* axis */
    s.append(svg("line", { x1: L, x2: W - R, y1: mid, y2: mid, stroke: "#999" }));
    for (const t of niceTicks(lo, hi, 6)) {
      s.append(svg("line", { x1: X(t), x2: X(t), y1: bottom, y2: bottom + 4, stroke: "#999" }));
      s.append(svg("text", { x: X(t), y: bottom + 16, "font-size": 11, "text-anchor": "middle", fill: "#444" }, fmtTime(t)));
    }
    s.append(svg("text", { x: 4, y: mid - 4, "font-size": 10, fill: "#444" }, "allowed ↑"));
    s.append(svg("text", { x: 4, y: mid + 12, "font-size": 10, fill: "#444" }, "denied ↓"));
    /* bars: allowed and delayed up from the axis, denied down */
    const up = (mid - top - 4) / peak, down = (bottom - mid - 4) / peak;
    bins.forEach((b, i) => {
      const x = L + i * bw + 0.5, w = Math.max(1, bw - 1);
      if (b[0]) s.append(svg("rect", { x, y: mid - b[0] * up, width: w, height: b[0] * up, fill: KIND[0].fill, stroke: KIND[0].stroke, "stroke-width": 0.5 }));
      if (b[1]) s.append(svg("rect", { x, y: mid - (b[0] + b[1]) * up, width: w, height: b[1] * up, fill: KIND[1].fill, stroke: KIND[1].stroke, "stroke-width": 0.8 }));
      if (b[2]) s.append(svg("rect", { x, y: mid, width: w, height: b[2] * down, fill: KIND[2].fill, stroke: KIND[2].stroke, "stroke-width": 0.8 }));
      const lab = (n, y) => s.append(svg("text", { x: x + w / 2, y, "font-size": 10, "text-anchor": "middle", fill: "#222" }, String(n)));
      if (b[0] + b[1]) lab(b[0] + b[1], mid - (b[0] + b[1]) * up - 3);
      if (b[2]) lab(b[2], mid + b[2] * down + 10);
    });
    /* the state of the first key (node 0 when nodes count apart) */
    const shared = !doc.fleet || doc.fleet.store === "exact";
    const pts = mine.filter((e) => e[2] === 0 && (shared || e[3] === 0));
    if (pts.length) {
      const cap = Math.max(pol.capacity, ...pts.map((e) => e[5]), 1);
      const Y = (lv) => mid - Math.max(0, lv) / cap * (mid - top - 4);
      let d = `M${X(pts[0][0])},${Y(pts[0][5])}`;
      for (const e of pts.slice(1)) d += ` H${X(e[0])} V${Y(e[5])}`;
      s.append(svg("path", { d, fill: "none", stroke: "#1f4fbf", "stroke-width": 2 }));
      s.append(svg("line", { x1: L, x2: W - R, y1: Y(pol.capacity), y2: Y(pol.capacity), stroke: "#1f4fbf", "stroke-dasharray": "2 3" }));
      const whose = shared ? "" : "node 0's ";
      s.append(svg("text", { x: (L + W - R) / 2, y: Y(pol.capacity) - 4, "font-size": 11, "text-anchor": "middle", fill: "#1f4fbf" }, `line: ${whose}${pol.level} (${pol.level === "tokens" ? "full at" : "limit"} ${pol.capacity})`));
    }
    const lane = el("div", { class: "lane", "data-policy": pol.name });
    lane.append(el("h4", {}, `${pol.name} `, el("code", { text: pol.spec })));
    const note = el("p", { class: "note" });
    note.append(`${sum.allowed} allowed, ${sum.denied} denied${sum.delayed ? `, ${sum.delayed} delayed (up to ${fmtTime(sum.max_delay_ms)})` : ""}; most in any ${fmtTime(pol.period_ms)}: ${sum.max_in_window} against a limit of ${sum.limit} — `, el("span", { class: v.cls, text: v.text }));
    lane.append(note, s);
    lanes.append(lane);
  });
  figures(doc);
  log(doc);
}

function figures(doc) {
  const body = $("figures").tBodies[0];
  body.replaceChildren();
  doc.summary.forEach((s, p) => {
    const v = verdict(s);
    const tr = el("tr", { "data-policy": s.policy });
    const cells = [[s.policy, "policy"], [s.allowed, "allowed"], [s.denied, "denied"], [s.delayed, "delayed"], [s.max_in_window, "max_in_window"], [`${s.limit} per ${fmtTime(s.period_ms)}`, "limit"]];
    for (const [val, f] of cells) tr.append(el("td", { "data-field": f, class: f === "policy" || f === "limit" ? "text" : "", text: String(val) }));
    tr.append(el("td", { class: `text ${v.cls}`, text: v.text }));
    body.append(tr);
    void p;
  });
}

function log(doc) {
  const ol = $("log"), ev = doc.events, keep = 300;
  ol.replaceChildren();
  const first = Math.max(0, ev.length - keep);
  ol.setAttribute("start", String(first + 1));
  const via = ["", " (store down: allowed uncounted)", " (store down: denied)", " (store down: node's own count)"];
  const result = ["allowed", "delayed", "DENIED"];
  for (const e of ev.slice(first)) {
    const pol = doc.policies[e[1]];
    let t = `${fmtTime(e[0]).padStart(9)}  ${pol.name.padEnd(8)} key ${doc.keys[e[2]]}`;
    if (doc.fleet) t += ` node ${e[3]}`;
    t += `  ${result[e[4]]}`;
    if (e[4] === 1) t += ` waits ${fmtTime(e[6])}`;
    if (e[4] === 2 && e[6]) t += ` retry after ${fmtTime(e[6])}`;
    t += `  ${pol.level} ${e[5]}${via[e[7]]}`;
    ol.append(el("li", { text: t }));
  }
  $("log-note").textContent = ev.length > keep ? `The last ${keep} of ${ev.length} decisions.` : `${ev.length} decisions.`;
}

/* ---- controls -------------------------------------------------------- */

function updateStoreButton() {
  const b = $("store-toggle");
  b.textContent = storeDown ? "Bring the store back" : "Take the store down";
  b.setAttribute("aria-pressed", storeDown ? "true" : "false");
  b.disabled = !$("fleet-on").checked;
}

function buildPolicyRows() {
  const box = $("policy-rows");
  for (const [name, def, what] of ALGOS) {
    const row = el("div", { class: "policy-row" });
    const cb = el("input", { type: "checkbox", id: `use-${name}` });
    const spec = el("input", { type: "text", id: `spec-${name}`, value: def, "aria-label": `${name}: policy`, spellcheck: "false" });
    row.append(el("label", { for: `use-${name}` }, cb, ` ${name}`), spec, el("span", { class: "what", text: what }));
    box.append(row);
    cb.addEventListener("change", () => { rewriteHeader(); run(); });
    spec.addEventListener("change", () => { if (cb.checked) { rewriteHeader(); run(); } });
  }
}

async function loadExamples() {
  const r = await fetch("/v1/sim/examples");
  examples = await r.json();
  const box = $("examples");
  for (const ex of examples) {
    const b = el("button", { type: "button", id: `ex-${ex.name}` }, ex.name, el("small", { text: ex.what }));
    b.addEventListener("click", () => loadScenario(ex.text));
    box.append(b);
  }
}

function loadScenario(text) {
  $("scenario").value = text;
  controlsFromText(text);
  run();
}

function reset() {
  const rest = headerLines();
  storeDown = false;
  $("scenario").value = rest.join("\n");
  run();
}

function wire() {
  $("btn-request").addEventListener("click", () => append(`request ${keyWord()}`));
  $("btn-burst").addEventListener("click", () => {
    const n = parseInt($("burst-n").value, 10);
    if (!(n >= 1)) { showError("BURST needs a number of requests, 1 or more."); return; }
    append(`burst ${n} ${keyWord()}`);
  });
  $("btn-advance").addEventListener("click", () => {
    const by = $("advance-by").value.trim();
    if (isNaN(parseDuration(by))) { showError(`ADVANCE TIME: '${by}' is not a duration (e.g. 100ms, 1s, 1m30s).`); return; }
    append(`advance ${by}`);
  });
  $("btn-reset").addEventListener("click", reset);
  $("btn-run").addEventListener("click", () => { controlsFromText($("scenario").value); run(); });
  for (const id of ["fleet-on", "fleet-nodes", "fleet-lb", "fleet-store", "fleet-sync", "fleet-onerr"])
    $(id).addEventListener("change", () => { rewriteHeader(); updateStoreButton(); run(); });
  $("store-toggle").addEventListener("click", () => append(`store ${storeDown ? "up" : "down"}`));
  $("quiz").addEventListener("click", () => {
    const ex = examples.find((e) => e.name === "fleet-quiz");
    if (ex) loadScenario(ex.text);
  });
  $("tab-sim").addEventListener("click", () => view("sim"));
  $("tab-live").addEventListener("click", () => view("live"));
}

function keyWord() {
  const k = $("key").value.trim() || "client";
  return /^\S+$/.test(k) ? k : k.replace(/\s+/g, "_");
}

function view(which) {
  for (const v of ["sim", "live"]) {
    $(v).hidden = v !== which;
    $(`tab-${v}`).setAttribute("aria-pressed", v === which ? "true" : "false");
  }
  if (which === "live") startLive(); else stopLive();
  history.replaceState(null, "", which === "live" ? "#live" : "#sim");
}

/* ---- the live view --------------------------------------------------- */

const HISTORY = 150; /* samples, 2 s apart: 5 minutes */
let samples = [];
let timer = null;

function startLive() {
  if (timer) return;
  poll();
  timer = setInterval(poll, 2000);
}
function stopLive() { clearInterval(timer); timer = null; }

function metric(doc, name, labels) {
  return doc.metrics.find((m) => m.name === name && (labels === undefined || m.labels === labels));
}

async function poll() {
  try {
    const r = await fetch("/v1/stats", { cache: "no-store" });
    const doc = await r.json();
    samples.push({ t: Date.now(), doc });
    if (samples.length > HISTORY) samples.shift();
    drawLive();
    $("live-status").textContent = `Updated ${new Date().toLocaleTimeString()}; ${samples.length} samples kept.`;
  } catch (e) {
    $("live-status").textContent = `The daemon did not answer: ${e.message}`;
  }
}

function total(doc, result) {
  return doc.metrics.filter((m) => m.name === "sluice_decisions_total" && (m.labels || "").includes(`result="${result}"`))
    .reduce((a, m) => a + m.value, 0);
}

function rate(a, b, f) { const dt = (b.t - a.t) / 1000; return dt > 0 ? Math.max(0, (f(b.doc) - f(a.doc)) / dt) : 0; }

function card(title, big, small, meter) {
  const c = el("div", { class: "card" }, el("div", { class: "small", text: title }), el("div", { class: "big", text: big }));
  if (meter !== undefined) { const m = el("div", { class: "meter", role: "presentation" }); const bar = el("span"); bar.style.width = `${Math.min(100, meter * 100).toFixed(1)}%`; m.append(bar); c.append(m); }
  if (small) c.append(el("div", { class: "small", text: small }));
  return c;
}

function bytes(n) {
  const u = ["B", "KiB", "MiB", "GiB"]; let i = 0;
  while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; }
  return `${+n.toFixed(1)} ${u[i]}`;
}

function latency(a, b) {
  const h0 = metric(a.doc, "sluice_decision_duration_seconds"), h1 = metric(b.doc, "sluice_decision_duration_seconds");
  if (!h0 || !h1) return null;
  const n = h1.count - h0.count;
  if (n <= 0) return null;
  const mean = (h1.sum_ns - h0.sum_ns) / n;
  let p99 = null;
  for (let i = 0; i < h1.buckets.length; i++) {
    if (h1.buckets[i][1] - h0.buckets[i][1] >= 0.99 * n) { p99 = h1.buckets[i][0]; break; }
  }
  return { mean, p99 };
}

function ns(v) { return v === null ? "over 10 ms" : v < 1000 ? `${Math.round(v)} ns` : v < 1e6 ? `${+(v / 1000).toFixed(1)} µs` : `${+(v / 1e6).toFixed(2)} ms`; }

function drawLive() {
  const last = samples[samples.length - 1], prev = samples[samples.length - 2] || last;
  const doc = last.doc;
  const cards = $("live-cards");
  cards.replaceChildren();
  const al = rate(prev, last, (d) => total(d, "allowed")), de = rate(prev, last, (d) => total(d, "denied"));
  cards.append(card("allowed per second", al.toFixed(1), `${total(doc, "allowed")} since start`));
  cards.append(card("denied per second", de.toFixed(1), `${total(doc, "denied")} since start`));
  const lat = latency(prev, last);
  cards.append(card("decision latency (last 2 s)", lat ? ns(lat.mean) : "—", lat ? `mean; 99% within ${ns(lat.p99)}` : "no decisions in the last 2 s"));
  const keys = metric(doc, "sluice_store_keys"), by = metric(doc, "sluice_store_bytes"), cap = metric(doc, "sluice_store_max_bytes");
  if (keys && by && cap)
    cards.append(card("store: memory used of its cap", `${bytes(by.value)}`, `${keys.value} keys; cap ${bytes(cap.value)} (${(by.value / Math.max(1, cap.value) * 100).toFixed(2)}%)`, by.value / Math.max(1, cap.value)));
  const fb = metric(doc, "sluice_store_fallback_active");
  if (fb) cards.append(card("Redis store", fb.value ? "DOWN: falling back" : "reachable", fb.value ? "decisions follow each rule's on_store_error" : `${(metric(doc, "sluice_store_fallbacks_total") || { value: 0 }).value} fallback decisions since start`));
  else cards.append(card("store", "memory", "no Redis: nothing to fall back from"));
  /* the chart: allowed and denied per second over the samples */
  const pts = [];
  for (let i = 1; i < samples.length; i++) pts.push([samples[i].t, rate(samples[i - 1], samples[i], (d) => total(d, "allowed")), rate(samples[i - 1], samples[i], (d) => total(d, "denied"))]);
  const W = 1000, H = 180, L = 50, B = 150, T = 12;
  const s = svg("svg", { viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": `Decisions per second over the last ${Math.round((last.t - samples[0].t) / 1000)} s: now ${al.toFixed(1)} allowed and ${de.toFixed(1)} denied per second.` });
  s.append(patterns());
  const peak = Math.max(1, ...pts.map((p) => Math.max(p[1], p[2])));
  const t0 = last.t - HISTORY * 2000;
  const X = (t) => L + (t - t0) / (last.t - t0) * (W - L - 10), Y = (v) => B - v / peak * (B - T);
  s.append(svg("line", { x1: L, x2: W - 10, y1: B, y2: B, stroke: "#999" }));
  for (const v of [0, peak / 2, peak]) s.append(svg("text", { x: L - 6, y: Y(v) + 4, "font-size": 11, "text-anchor": "end", fill: "#444" }, v.toFixed(v < 10 ? 1 : 0)));
  for (const m of [5, 4, 3, 2, 1, 0]) s.append(svg("text", { x: X(last.t - m * 60000), y: B + 16, "font-size": 11, "text-anchor": "middle", fill: "#444" }, m ? `-${m} min` : "now"));
  const line = (k, dash, color, label) => {
    if (!pts.length) return;
    let d = `M${X(pts[0][0])},${Y(pts[0][k])}`;
    for (const p of pts.slice(1)) d += ` L${X(p[0])},${Y(p[k])}`;
    s.append(svg("path", { d, fill: "none", stroke: color, "stroke-width": 2.2, "stroke-dasharray": dash }));
    const lp = pts[pts.length - 1];
    s.append(svg("text", { x: X(lp[0]) - 4, y: Y(lp[k]) - 5, "font-size": 11, "text-anchor": "end", fill: color }, label));
  };
  line(1, "", "#1b7a33", "allowed (solid)");
  line(2, "6 4", "#c0262d", "denied (dashed)");
  $("live-chart").replaceChildren(s);
  /* per rule */
  const body = $("live-rules").tBodies[0];
  body.replaceChildren();
  const before = new Map((prev.doc.series || []).map((r) => [`${r.domain}\u0000${r.rule}`, r]));
  const dt = Math.max(0.001, (last.t - prev.t) / 1000);
  for (const r of doc.series) {
    const p = before.get(`${r.domain}\u0000${r.rule}`) || r;
    const tr = el("tr");
    for (const [v, cls] of [[r.domain, "text"], [r.rule, "text"], [((r.allowed - p.allowed) / dt).toFixed(1)], [((r.denied - p.denied) / dt).toFixed(1)], [((r.near_limit - p.near_limit) / dt).toFixed(1)], [r.allowed], [r.denied]])
      tr.append(el("td", { class: cls || "", text: String(v) }));
    body.append(tr);
  }
  if (!doc.series.length) body.append(el("tr", {}, el("td", { colspan: 7, class: "text", text: "No rule has decided anything yet." })));
  drawTop(doc.top);
}

/* ---- the live view's top keys (GET /v1/stats' "top", docs/ui.md) ------ */

const TOP_RULES_SHOWN = 8;
const DOMINANT = 0.5; /* a key with at least this share "dominates" */

function pct(v) { return `${(v * 100).toFixed(v < 0.1 ? 1 : 0)}%`; }

/* A key as the daemon gave it, or its id when it named none. */
function keyName(item) { return item.key !== undefined ? item.key : `#${item.id}`; }

function topTable(caption, items, what) {
  const t = el("table", {}, el("caption", { text: caption }));
  t.append(el("thead", {}, el("tr", {}, el("th", { scope: "col", text: "key" }), el("th", { scope: "col", text: what }), el("th", { scope: "col", text: "share (at least)" }))));
  const body = el("tbody");
  for (const it of items)
    body.append(el("tr", {}, el("td", { class: "text key", text: keyName(it) }), el("td", { text: String(it.count) }), el("td", { text: pct(it.share) })));
  if (!items.length) body.append(el("tr", {}, el("td", { colspan: 3, class: "text", text: `no ${what} in the window` })));
  t.append(body);
  return t;
}

function topRule(r, win) {
  const box = el("div", { class: "toprule" }, el("h4", { text: `rule ${r.rule}` }));
  const first = r.by_decisions[0];
  if (first) {
    const share = first.share, hot = share >= DOMINANT;
    const words = `${keyName(first)} made at least ${pct(share)} of this rule's ${r.decisions} decisions in the last ${win}` +
      (r.by_denials[0] ? `; ${keyName(r.by_denials[0])} has ${pct(r.by_denials[0].share)} of its ${r.denials} denials.` : "; no denials.");
    const m = el("div", { class: hot ? "meter hot" : "meter", role: "img", "aria-label": `heaviest key's share: ${pct(share)}` });
    const bar = el("span"); bar.style.width = `${Math.min(100, share * 100).toFixed(1)}%`; m.append(bar);
    box.append(el("p", { class: "dominant" }, el("b", { text: hot ? "One key dominates: " : "Heaviest key: " }), words), m);
  }
  box.append(topTable("by decisions", r.by_decisions, "decisions"), topTable("by denials", r.by_denials, "denials"));
  return box;
}

function drawTop(top) {
  const note = $("live-top-note"), list = $("live-topkeys");
  list.replaceChildren();
  if (!top || !top.enabled) {
    note.textContent = "Top keys are off on this daemon (--top-keys 0): it does not count its busiest keys. /admin/inspect still shows one key's state.";
    return;
  }
  const win = `${top.window_seconds}–${2 * top.window_seconds} s`;
  note.textContent = `Per rule, the heaviest keys by decisions and by denials over the last ${win} (${top.counters} counters per rule: a count is high by at most decisions / ${top.counters}; a share is a lower bound). ` +
    (top.keys_shown ? `Keys are shown as --denial-log-values ${top.values} shows them.` :
      "Keys are named only for an admin client (loopback, or the --admin-token): here each is its id, the same as GET /v1/top's.");
  const rules = top.rules.slice().sort((a, b) => b.decisions - a.decisions || (a.rule < b.rule ? -1 : 1));
  if (!rules.length) { list.append(el("p", { text: "No rule has decided anything in the window." })); return; }
  const grid = el("div", { class: "topkeys" });
  for (const r of rules.slice(0, TOP_RULES_SHOWN)) grid.append(topRule(r, win));
  list.append(grid);
  if (rules.length > TOP_RULES_SHOWN) list.append(el("p", { class: "hint", text: `and ${rules.length - TOP_RULES_SHOWN} more rules: GET /v1/top lists them all.` }));
}

/* ---- start ----------------------------------------------------------- */

document.addEventListener("DOMContentLoaded", async () => {
  buildPolicyRows();
  wire();
  updateStoreButton();
  await loadExamples();
  if (location.hash === "#live") view("live");
  loadScenario(examples.length ? examples[0].text : "policy fixed fixed_window:100/m\nburst 100");
  document.body.dataset.ready = "1";
});
