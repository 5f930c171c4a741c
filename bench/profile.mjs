#!/usr/bin/env node
// Where the time goes: runs one bench measurement under the DevTools CPU profiler (which slows
// everything, so its numbers are not benchmark results) and prints the functions with the most
// self time. Usage: node bench/profile.mjs <site-dir-with-pkg> <m> <variant> <n> [gateway]
import { createServer } from "node:http";
import { readFileSync, existsSync, statSync, mkdtempSync, rmSync } from "node:fs";
import { join, extname } from "node:path";
import { tmpdir } from "node:os";
import { execFileSync } from "node:child_process";
import { chromium } from "playwright-core";

const [site, m, variant, n, gateway = "http://127.0.0.1:9"] = process.argv.slice(2);
const TYPES = { ".html": "text/html", ".js": "text/javascript", ".wasm": "application/wasm" };
let done;
const finished = new Promise((r) => (done = r));
const server = createServer((req, res) => {
  if (req.method === "POST") {
    let b = "";
    req.on("data", (d) => (b += d));
    req.on("end", () => { res.end(); done(JSON.parse(b)); });
    return;
  }
  const path = new URL(req.url, "http://x").pathname;
  const file = join(site, path === "/" ? "index.html" : path);
  if (!existsSync(file) || !statSync(file).isFile()) { res.statusCode = 404; return res.end(); }
  res.setHeader("content-type", TYPES[extname(file)] || "application/octet-stream");
  res.end(readFileSync(file));
});
await new Promise((r) => server.listen(0, "127.0.0.1", r));
const base = `http://127.0.0.1:${server.address().port}`;
const profileDir = mkdtempSync(join(process.env.TMPDIR || tmpdir(), "prof-"));
const context = await chromium.launchPersistentContext(profileDir, {
  executablePath: execFileSync("sh", ["-c", "command -v chromium"], { encoding: "utf8" }).trim(),
  headless: true, args: ["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking", "--disable-sync"],
});
const page = await context.newPage();
const cdp = await context.newCDPSession(page);
await cdp.send("Profiler.enable");
await cdp.send("Profiler.setSamplingInterval", { interval: 100 });
await cdp.send("Profiler.start");
await page.goto(`${base}/index.html?m=${m}&variant=${variant}&n=${n}&tag=p${Date.now()}&gateway=${encodeURIComponent(gateway)}&report=${encodeURIComponent(base + "/result")}`);
const result = await finished;
const { profile } = await cdp.send("Profiler.stop");
const self = new Map();
const byId = new Map(profile.nodes.map((node) => [node.id, node]));
const dt = profile.timeDeltas;
profile.samples.forEach((id, i) => {
  const node = byId.get(id);
  const name = `${node.callFrame.functionName || "(anonymous)"} ${node.callFrame.url.split("/").pop()}:${node.callFrame.lineNumber}`;
  self.set(name, (self.get(name) || 0) + (dt[i] || 0));
});
const total = [...self.values()].reduce((a, b) => a + b, 0);
console.log(JSON.stringify(result));
for (const [name, us] of [...self.entries()].sort((a, b) => b[1] - a[1]).slice(0, 25)) {
  console.log(`${(us / 1000).toFixed(1).padStart(8)} ms ${(100 * us / total).toFixed(1).padStart(5)}%  ${name}`);
}
await context.close();
rmSync(profileDir, { recursive: true, force: true });
server.close();
