// Shared pieces of the end-to-end harness: the gateway as a real process (start, kill -9,
// restart on the same data and port), Debian's Chromium through playwright-core with a
// persistent on-disk profile, a seeded random generator, the gateway's read endpoint, and the
// device handshake (POST /v1/session) with WebCrypto, as the client does it.
import { spawn, execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, existsSync, rmSync, writeFileSync } from "node:fs";
import { randomBytes } from "node:crypto";
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

/** A device key pair as the client makes one: RSASSA-PKCS1-v1_5, 2048 bits, SHA-256, with a
 *  non-extractable private key. */
export function deviceKey() {
  return crypto.subtle.generateKey(
    { name: "RSASSA-PKCS1-v1_5", modulusLength: 2048, publicExponent: new Uint8Array([1, 0, 1]), hash: "SHA-256" },
    false,
    ["sign", "verify"],
  );
}

const b64 = (bytes) => Buffer.from(bytes).toString("base64");

/** The client id Celeriant derives from an SPKI (bytes): the first 16 bytes of its SHA-256 read
 *  as a little-endian u128, written as a UUID. */
export async function clientIdOf(spki) {
  const hash = new Uint8Array(await crypto.subtle.digest("SHA-256", spki)).slice(0, 16);
  const hex = [...hash].reverse().map((b) => b.toString(16).padStart(2, "0")).join("");
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}

/** Opens a session on the gateway at `base` (POST /v1/session) with `keyPair` (default: a new
 *  device key), sending `appToken` as `Authorization: Bearer` when given. A nonce refused as out
 *  of window (40111) or replayed (40112) is signed again once, corrected with the answer's
 *  `serverTime`. Resolves with { clientId, token, expiresAt, serverTime, publicKey, keyPair,
 *  clockOffsetMs }; rejects with the gateway's answer otherwise. */
export async function openSession(base, { keyPair, appToken, clockOffsetMs = 0 } = {}) {
  keyPair = keyPair ?? (await deviceKey());
  const publicKey = b64(await crypto.subtle.exportKey("spki", keyPair.publicKey));
  let offset = clockOffsetMs;
  for (let attempt = 0; ; attempt++) {
    const nonce = String(Math.round(Date.now() + offset) + attempt);
    const signature = b64(await crypto.subtle.sign("RSASSA-PKCS1-v1_5", keyPair.privateKey, new TextEncoder().encode(nonce)));
    const headers = { "content-type": "application/json" };
    if (appToken) headers.authorization = `Bearer ${appToken}`;
    const r = await fetch(`${base}/v1/session`, { method: "POST", headers, body: JSON.stringify({ publicKey, nonce, signature }) });
    const body = await r.json().catch(() => null);
    if (r.ok) return { ...body, publicKey, keyPair, clockOffsetMs: offset };
    if (attempt === 0 && body && (body.code === 40111 || body.code === 40112) && typeof body.serverTime === "number") {
      offset = body.serverTime - Date.now();
      continue;
    }
    throw new Error(`POST /v1/session: ${r.status} ${JSON.stringify(body)}`);
  }
}

// Gateways still running when this process exits (a scenario that failed half-way, after a
// kill -9 and restart among others) are killed with it, not left behind on 127.0.0.1.
const liveGateways = new Set();
process.on("exit", () => {
  for (const g of liveGateways) {
    try { g.proc.kill("SIGKILL"); } catch { /* already gone */ }
  }
});

export class Gateway {
  /** `auth`: "none" starts the gateway with --auth none; "device" with device identity on (the
   *  gateway's default), in which case readAll reads with the operator credential (the
   *  gateway gets an --operator-token-file: the checker reads every device's aggregates, as an
   *  audit tool would). `policy`: a --policy file, or a preset every type gets (a policy file
   *  `default = "<preset>"` written here); without it the gateway's default, `owner`. */
  constructor({ www = join(ROOT, "tests/e2e/site"), flags = [], auth = "device", policy } = {}) {
    this.dir = tempDir("gateway");
    this.www = www;
    this.flags = flags;
    this.auth = auth;
    this.operatorSecret = `e2e-operator-${randomBytes(24).toString("hex")}`;
    this.policyFlags = [];
    if (auth !== "none") {
      const operatorFile = join(this.dir, "operator-token");
      writeFileSync(operatorFile, this.operatorSecret, { mode: 0o600 });
      this.policyFlags.push("--operator-token-file", operatorFile);
      if (policy && policy.includes("/")) {
        this.policyFlags.push("--policy", policy);
      } else if (policy) {
        const policyFile = join(this.dir, "policy.toml");
        writeFileSync(policyFile, `default = "${policy}"\n`);
        this.policyFlags.push("--policy", policyFile);
      }
    }
    this.port = 0;
    this.lives = 0;
  }

  async start() {
    const portFile = join(this.dir, "port");
    const secretFile = join(this.dir, "faults-secret");
    rmSync(portFile, { force: true });
    const args = [
      "--listen", `127.0.0.1:${this.port}`, "--port-file", portFile, "--data-dir", join(this.dir, "data"),
      "--www", this.www, "--pkg", join(ROOT, "pkg"), "--faults", "--faults-secret-out", secretFile, ...this.flags,
      // Many tabs, reloads and restarts open many sessions from one address: no per-address limit.
      ...(this.auth === "none" ? ["--auth", "none"] : ["--session-rate-per-minute", "0"]),
      ...this.policyFlags,
    ];
    this.proc = spawn(gatewayBinary(), args, { stdio: ["ignore", "ignore", "pipe"], env: { ...process.env, RUST_LOG: "warn" } });
    liveGateways.add(this);
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
    // Generated at each start, written before the port file.
    this.faultsSecret = readFileSync(secretFile, "utf8").trim();
    this.lives += 1;
  }

  /** Deletes the session secret the gateway generated into its data directory, so its next
   *  start makes a new one: every token issued before is refused (401) from then on. */
  rotateSecret() {
    rmSync(join(this.dir, "data", "session-secret"), { force: true });
    this.reader = null;
  }

  /** SIGKILL, no goodbye. */
  async kill9() {
    const exited = new Promise((r) => this.proc.once("exit", r));
    this.proc.kill("SIGKILL");
    await exited;
  }

  async stop() {
    liveGateways.delete(this);
    if (!this.proc || this.proc.exitCode !== null) return;
    const exited = new Promise((r) => this.proc.once("exit", r));
    this.proc.kill("SIGTERM");
    await exited;
  }

  async setFaults(rates) {
    const r = await fetch(`${this.base}/v1/faults`, {
      method: "PUT", headers: { "content-type": "application/json", "celeriant-faults-secret": this.faultsSecret }, body: JSON.stringify(rates),
    });
    if (!r.ok) throw new Error(`PUT /v1/faults: ${r.status} ${await r.text()}`);
    return r.json();
  }

  async faults() {
    const r = await fetch(`${this.base}/v1/faults`, { headers: { "celeriant-faults-secret": this.faultsSecret } });
    if (!r.ok) throw new Error(`GET /v1/faults: ${r.status} ${await r.text()}`);
    return r.json();
  }

  /** A session token for reading (opened once, and again with `renew`, e.g. after the gateway
   *  was restarted with another secret). */
  token({ renew = false } = {}) {
    if (renew || !this.reader) {
      this.reader = openSession(this.base).then((s) => s.token);
      this.reader.catch(() => { this.reader = null; });
    }
    return this.reader;
  }

  /** GET `url` as the checker: the operator credential with auth on, nothing without. */
  read(url) {
    if (this.auth === "none") return fetch(url);
    return fetch(url, { headers: { authorization: `Operator ${this.operatorSecret}` } });
  }

  /** Every event of an aggregate, following `next`, read with the operator credential (with
   *  auth on): whichever device owns it. */
  async readAll(typeId, id) {
    const events = [];
    for (let from = 1; ;) {
      const url = `${this.base}/v1/aggregates/${typeId}/${id}/events?from=${from}`;
      const r = await this.read(url);
      if (!r.ok) throw new Error(`read ${id}: ${r.status} ${await r.text()}`);
      const page = await r.json();
      // Each event with the version of its batch (a transfer's leg is one batch).
      for (const b of page.batches) events.push(...b.events.map((e) => ({ ...e, version: b.version })));
      if (page.next === null) return events;
      from = page.next;
    }
  }

  /** Every event of an aggregate as `clientId:clientSeq:confirmed` keys, in server order. */
  async readAllBatches(typeId, id) {
    const keys = [];
    for (let from = 1; ;) {
      const url = `${this.base}/v1/aggregates/${typeId}/${id}/events?from=${from}`;
      const r = await this.read(url);
      if (!r.ok) throw new Error(`read ${id}: ${r.status} ${await r.text()}`);
      const page = await r.json();
      for (const b of page.batches) for (const e of b.events) keys.push(`${b.clientId}:${e.clientSeq}:confirmed`);
      if (page.next === null) return keys;
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

/** Debian's Chromium, headless, with a persistent on-disk profile (IndexedDB hits the disk).
 *  `ignoreHTTPSErrors` (a certificate the test made) and extra Chromium `args` (say, a
 *  --host-resolver-rules mapping) for the runs behind nginx with TLS. */
export async function launchBrowser(profile = tempDir("profile"), { ignoreHTTPSErrors = false, args = [] } = {}) {
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: chromiumPath(),
    headless: true,
    ignoreHTTPSErrors,
    args: [
      "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
      "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage", ...args,
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
