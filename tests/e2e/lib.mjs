// Shared pieces of the end-to-end harness: the gateway as a real process (start, kill -9,
// restart on the same data and port), Debian's Chromium through playwright-core with a
// persistent on-disk profile, a seeded random generator, and the gateway's read endpoint.
import { spawn, execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, existsSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { chromium } from "playwright-core";

export const ROOT = resolve(new URL("../..", import.meta.url).pathname);

export function tempDir(prefix) {
  return mkdtempSync(join(process.env.TMPDIR || tmpdir(), `celeriant-e2e-${prefix}-`));
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** mulberry32: a small seeded generator, so a run can be replayed from its seed. */
export function rng(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

export function uuid(random) {
  const hex = [...Array(32)].map(() => Math.floor(random() * 16).toString(16));
  hex[12] = "4";
  hex[16] = ((parseInt(hex[16], 16) & 3) | 8).toString(16);
  const s = hex.join("");
  return `${s.slice(0, 8)}-${s.slice(8, 12)}-${s.slice(12, 16)}-${s.slice(16, 20)}-${s.slice(20)}`;
}

/** The gateway binary built by `npm test` (debug) unless CELERIANT_GATEWAY_BIN says otherwise. */
export function gatewayBinary() {
  const bin = process.env.CELERIANT_GATEWAY_BIN || join(ROOT, "target/debug/celeriant-gateway");
  if (!existsSync(bin)) throw new Error(`no gateway binary at ${bin}; build it with cargo build -p celeriant-gateway`);
  return bin;
}

export class Gateway {
  constructor({ www = join(ROOT, "tests/e2e/site"), flags = [] } = {}) {
    this.dir = tempDir("gateway");
    this.www = www;
    this.flags = flags;
    this.port = 0;
    this.lives = 0;
  }

  async start() {
    const portFile = join(this.dir, "port");
    rmSync(portFile, { force: true });
    const args = [
      "--listen", `127.0.0.1:${this.port}`, "--port-file", portFile, "--data-dir", join(this.dir, "data"),
      "--www", this.www, "--pkg", join(ROOT, "pkg"), "--faults", ...this.flags,
    ];
    this.proc = spawn(gatewayBinary(), args, { stdio: ["ignore", "ignore", "pipe"], env: { ...process.env, RUST_LOG: "warn" } });
    this.stderr = "";
    this.proc.stderr.on("data", (d) => { this.stderr = (this.stderr + d).slice(-4000); });
    for (let i = 0; i < 200 && !existsSync(portFile); i++) await sleep(50);
    let addr = "";
    for (let i = 0; i < 100 && !addr; i++) {
      addr = existsSync(portFile) ? readFileSync(portFile, "utf8").trim() : "";
      if (!addr) await sleep(50);
    }
    if (!addr) throw new Error(`gateway did not start: ${this.stderr}`);
    this.port = Number(addr.split(":")[1]);
    this.base = `http://${addr}`;
    this.lives += 1;
  }

  /** SIGKILL, no goodbye. */
  async kill9() {
    const exited = new Promise((r) => this.proc.once("exit", r));
    this.proc.kill("SIGKILL");
    await exited;
  }

  async stop() {
    if (!this.proc || this.proc.exitCode !== null) return;
    const exited = new Promise((r) => this.proc.once("exit", r));
    this.proc.kill("SIGTERM");
    await exited;
  }

  async setFaults(rates) {
    const r = await fetch(`${this.base}/v1/faults`, { method: "PUT", headers: { "content-type": "application/json" }, body: JSON.stringify(rates) });
    if (!r.ok) throw new Error(`PUT /v1/faults: ${r.status} ${await r.text()}`);
    return r.json();
  }

  async faults() {
    const r = await fetch(`${this.base}/v1/faults`);
    return r.json();
  }

  /** Every event of an aggregate, following `next`. */
  async readAll(typeId, id) {
    const events = [];
    for (let from = 1; ;) {
      const r = await fetch(`${this.base}/v1/aggregates/${typeId}/${id}/events?from=${from}`);
      if (!r.ok) throw new Error(`read ${id}: ${r.status} ${await r.text()}`);
      const page = await r.json();
      for (const b of page.batches) events.push(...b.events);
      if (page.next === null) return events;
      from = page.next;
    }
  }

  cleanup() {
    rmSync(this.dir, { recursive: true, force: true });
  }
}

export function chromiumPath() {
  return execFileSync("sh", ["-c", "command -v chromium"], { encoding: "utf8" }).trim();
}

/** Debian's Chromium, headless, with a persistent on-disk profile (IndexedDB hits the disk). */
export async function launchBrowser(profile = tempDir("profile")) {
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: chromiumPath(),
    headless: true,
    args: [
      "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
      "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage",
    ],
  });
  context.cleanup = async () => {
    await context.close().catch(() => {});
    rmSync(profile, { recursive: true, force: true });
  };
  return context;
}

/** Opens a harness tab with a client on `db`. */
export async function openTab(context, gateway, tab, db, options = {}) {
  const page = await context.newPage();
  page.on("pageerror", (e) => console.error(`[tab ${tab}] ${e.message}`));
  await page.goto(`${gateway.base}/index.html?tab=${tab}`);
  await page.waitForFunction(() => globalThis.harness);
  await page.evaluate(({ db, options }) => harness.open({ databaseName: db, ...options }), { db, options });
  return page;
}

export const decode = (b64) => Buffer.from(b64, "base64").toString("utf8");
