#!/usr/bin/env node
// Where a drain's IndexedDB time goes, per operation, in one engine (issue 13's diagnosis tool;
// not part of `npm run bench`). Needs `npm run build` (pkg/) and the release gateway
// (`cargo build --release -p celeriant-gateway`).
//
//   node bench/idb-probe.mjs [--browser chromium|firefox|webkit|webkit-disk] [--mode drain|plain|features]
//                            [--n 20000] [--k 2500] [--layout A|B|C|D|O|S|G] [--budget 600]
//
//   drain     bench/site/probe.js wraps IDBObjectStore/IDBIndex methods and
//             IDBDatabase.transaction before the client loads, fills an outbox with n events
//             offline (like the bench's fill), then drains the first k (0: all) against a fresh
//             gateway, timing every request and transaction; prints mean ms per call, by
//             operation, before and after the first batch landed.
//   plain     the same layout in plain JavaScript, no client (--layout: A today's index on the
//             events store; B event ids in their own store, deleted per record at each settle;
//             C the same store, not deleted at settle; D no index, no id store; O like C with
//             out-of-line keys and {s, e, w} values, as the client stores them; S like O with
//             each value one string, the event id then the wire encoding; G like O with one record
//             per 100 events, as a record per appended group would store them).
//   features  what the engine's APIs do (errors, durability, storage, locks, channels, …), as JSON.
// Engines as in bench/browsers.mjs; `webkit` is a WebDriver session (in-memory IndexedDB),
// `webkit-disk` a MiniBrowser on an on-disk profile (SQLite).
import { spawn } from "node:child_process";
import { createServer } from "node:http";
import { readFileSync, existsSync, statSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, extname, resolve } from "node:path";
import * as browsers from "./browsers.mjs";

const ROOT = resolve(new URL("..", import.meta.url).pathname);
const arg = (name, fallback) => {
  const at = process.argv.indexOf(`--${name}`);
  return at >= 0 ? process.argv[at + 1] : fallback;
};
const engine = arg("browser", "webkit");
const mode = arg("mode", "drain");
const n = Number(arg("n", 20000));
const k = Number(arg("k", 2500));
const query = new URLSearchParams({ mode, n, k, layout: arg("layout", "A"), budget: arg("budget", 600), bucket: n, tag: `p${Date.now()}`, timeline: process.argv.includes("--timeline") ? "1" : "0", flush: process.argv.includes("--flush") ? "1" : "0", timelineEvents: arg("timeline-events", 1) });
const TMP = mkdtempSync(join(process.env.TMPDIR || tmpdir(), "idb-probe-"));
const TYPES = { ".html": "text/html", ".js": "text/javascript", ".wasm": "application/wasm" };

let report;
const result = new Promise((r) => (report = r));
const server = createServer((req, res) => {
  const path = new URL(req.url, "http://x").pathname;
  if (req.method === "POST") {
    let body = "";
    req.on("data", (d) => (body += d));
    req.on("end", () => { res.end("ok"); report(JSON.parse(body)); });
    return;
  }
  if (path === "/slow") return void setTimeout(() => res.end("late"), 5000); // for the fetch-abort checks
  const file = path.startsWith("/pkg/") ? join(ROOT, path) : join(ROOT, "bench/site", path);
  if (!existsSync(file) || !statSync(file).isFile()) { res.statusCode = 404; return res.end(); }
  res.setHeader("content-type", TYPES[extname(file)] || "application/octet-stream");
  res.end(readFileSync(file));
});
await new Promise((r) => server.listen(0, "127.0.0.1", r));
const site = `http://127.0.0.1:${server.address().port}`;

let gateway = null;
if (mode === "drain") {
  const portFile = join(TMP, "gateway.port");
  gateway = spawn(join(ROOT, "target/release/celeriant-gateway"), ["--listen", "127.0.0.1:0", "--port-file", portFile, "--data-dir", join(TMP, "gateway")], { stdio: "ignore", env: { ...process.env, RUST_LOG: "warn" } });
  for (let i = 0; i < 200 && !(existsSync(portFile) && readFileSync(portFile, "utf8")); i++) await new Promise((r) => setTimeout(r, 25));
  query.set("gateway", `http://${readFileSync(portFile, "utf8").trim()}`);
}
query.set("report", `${site}/result`);
const url = `${site}/${mode === "features" ? "features" : "probe"}.html?${query}`;

let stop;
if (engine === "chromium") {
  const profile = join(TMP, "chromium");
  const b = spawn("chromium", ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage", `--user-data-dir=${profile}`, url], { stdio: "ignore", detached: true });
  const exited = new Promise((r) => b.once("exit", r));
  stop = async () => { try { process.kill(-b.pid, "SIGKILL"); } catch {} await exited; };
} else {
  const firefoxPrefs = JSON.parse(readFileSync(join(ROOT, "webdriver.json"), "utf8"))["moz:firefoxOptions"]?.prefs ?? {};
  const b = await browsers.open(engine, url, { tmp: TMP, firefoxPrefs });
  console.error(b.version);
  stop = () => b.stop();
}
const r = await result;
await stop();
if (gateway) { gateway.kill("SIGTERM"); await new Promise((res) => gateway.once("exit", res)); }
server.close();
rmSync(TMP, { recursive: true, force: true });

if (mode === "features" || !r.ok) {
  console.log(JSON.stringify(r, null, 1));
  process.exit(r.ok ? 0 : 1);
}
console.log(`${engine} ${mode}${mode === "plain" ? ` layout ${r.layout}` : ""}: backlog ${n}, drained ${r.synced} in ${Math.round(r.ms)} ms = ${Math.round(r.eventsPerSecond)} events/s${r.fillMs ? ` (fill ${Math.round(r.fillMs)} ms)` : ""}`);
if (r.timeline) console.log("until the first batch landed (ms from open):\n  " + r.timeline.join("\n  "));
if (r.batches) console.log("batches (events, ms): " + r.batches.map((b) => `${b.events}:${b.ms.toFixed(1)}`).join(" "));
console.log(`mean ms per call × calls: before the first batch landed | after`);
for (const op of [...new Set(r.stats.map((s) => s.op))].sort()) {
  const cell = (b) => { const s = r.stats.find((x) => x.op === op && (b ? x.bucket >= n : x.bucket < n)); return s ? `${(s.ms / s.count).toFixed(2)} × ${s.count}` : "-"; };
  console.log(`  ${op.padEnd(40)} ${cell(true).padStart(14)} | ${cell(false)}`);
}
