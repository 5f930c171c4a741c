// The fleet: three gateway replicas (one session secret, one operator credential, the Celeriant
// backend) over a fake three-node Celeriant cluster (the `fake-celeriant` binary), behind
// Debian's nginx with TLS (a certificate made here, the repository's
// deploy/nginx/celeriant-gateway.conf with one `server` line per replica). Tabs of one Chromium
// profile append a few thousand events over https and one tab watches every aggregate; mid-drain
// the replica holding the change stream is killed with SIGKILL (the stream must reconnect through
// nginx to another replica before it comes back) and restarted; leadership moves twice, each time
// with writes in flight on the old leader (committed and never answered, then refused with 2011).
// At the end: every appended event once, in sequence, none lost (read through a replica, and in
// the cluster's own store), every outbox empty, every view equal to the log.
import { spawn, execFileSync } from "node:child_process";
import { createInterface } from "node:readline";
import { chmodSync, existsSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { randomBytes } from "node:crypto";
import { join } from "node:path";
import { ROOT, decode, gatewayBinary, launchBrowser, openTab, rng, sleep, tempDir, uuid } from "./lib.mjs";

const HOST = "gateway.test";

function assert(condition, message) {
  if (!condition) throw new Error(message);
}

async function waitFor(what, ms, check) {
  const t0 = Date.now();
  for (;;) {
    if (await check()) return Date.now() - t0;
    if (Date.now() - t0 > ms) throw new Error(`timed out after ${ms} ms waiting for ${what}`);
    await sleep(50);
  }
}

function freePort() {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address();
      server.close(() => resolve(port));
    });
  });
}

const children = new Set();
process.on("exit", () => {
  for (const c of children) {
    try { c.kill("SIGKILL"); } catch { /* gone */ }
  }
});

/** The fake cluster as a process: one JSON line per command (testkit/fake-celeriant/src/main.rs).
 *  Also used by tests/e2e/celeriant_encrypted.mjs (one node). */
export class Cluster {
  async start({ nodes = 3 } = {}) {
    const bin = join(ROOT, "target/debug/fake-celeriant");
    if (!existsSync(bin)) throw new Error(`no ${bin}; build it with cargo build -p fake-celeriant`);
    this.proc = spawn(bin, ["--nodes", String(nodes)], { stdio: ["pipe", "pipe", "inherit"] });
    children.add(this.proc);
    this.waiting = [];
    createInterface({ input: this.proc.stdout }).on("line", (line) => this.waiting.shift()?.(JSON.parse(line)));
    const hello = await new Promise((resolve) => this.waiting.push(resolve));
    this.nodes = hello.nodes;
    return this;
  }

  async send(command) {
    const answer = new Promise((resolve) => this.waiting.push(resolve));
    this.proc.stdin.write(`${command}\n`);
    const json = await answer;
    if (json.error) throw new Error(`fake-celeriant ${command}: ${json.error}`);
    return json;
  }

  async stop() {
    const exited = new Promise((r) => this.proc.once("exit", r));
    this.proc.stdin.end();
    await exited;
    children.delete(this.proc);
  }
}

/** One replica: the gateway over the cluster, on a fixed port once started (a restart keeps it). */
class Replica {
  constructor(index, shared, nodes) {
    this.index = index;
    this.dir = tempDir(`replica${index}`);
    this.shared = shared;
    this.nodes = nodes;
    this.port = 0;
    this.lives = 0;
  }

  async start() {
    this.metricsPort ??= await freePort();
    const portFile = join(this.dir, "port");
    rmSync(portFile, { force: true });
    const args = [
      "--listen", `127.0.0.1:${this.port}`, "--port-file", portFile, "--data-dir", join(this.dir, "data"),
      "--www", join(ROOT, "tests/e2e/site"), "--pkg", join(ROOT, "pkg"),
      "--backend", "celeriant", "--celeriant-addr", this.nodes.join(","),
      "--session-secret-file", this.shared.sessionSecret, "--operator-token-file", this.shared.operatorToken,
      "--trusted-proxy", "127.0.0.1", "--public-host", HOST,
      "--metrics-listen", `127.0.0.1:${this.metricsPort}`,
      // Every tab opens its sessions from nginx's one address.
      "--session-rate-per-minute", "0",
    ];
    this.proc = spawn(gatewayBinary(), args, { stdio: ["ignore", "ignore", "pipe"], env: { ...process.env, RUST_LOG: "warn" } });
    children.add(this.proc);
    this.stderr = "";
    this.proc.stderr.on("data", (d) => { this.stderr = (this.stderr + d).slice(-4000); });
    let addr = "";
    for (let i = 0; i < 400 && !addr; i++) {
      addr = existsSync(portFile) ? readFileSync(portFile, "utf8").trim() : "";
      if (!addr) await sleep(50);
    }
    if (!addr) throw new Error(`replica ${this.index} did not start: ${this.stderr}`);
    this.port = Number(addr.split(":")[1]);
    this.addr = addr;
    this.base = `http://${addr}`;
    this.lives += 1;
  }

  async kill9() {
    const exited = new Promise((r) => this.proc.once("exit", r));
    this.proc.kill("SIGKILL");
    await exited;
    children.delete(this.proc);
  }

  async stop() {
    if (!this.proc || this.proc.exitCode !== null) return;
    const exited = new Promise((r) => this.proc.once("exit", r));
    this.proc.kill("SIGTERM");
    await exited;
    children.delete(this.proc);
  }

  /** A gauge, or the sum of a counter's series whose labels include every one of `labels`,
   *  on /metrics (0 when absent or down). */
  async metric(name, labels = []) {
    try {
      const text = await (await fetch(`http://127.0.0.1:${this.metricsPort}/metrics`)).text();
      return text.split("\n").filter((l) => l.startsWith(`${name} `) || l.startsWith(`${name}{`))
        .filter((l) => labels.every((label) => l.includes(label)))
        .reduce((sum, l) => sum + Number(l.slice(l.lastIndexOf(" ") + 1)), 0);
    } catch {
      return 0;
    }
  }

  cleanup() {
    rmSync(this.dir, { recursive: true, force: true });
  }
}

/** Debian's nginx with the repository's server file, one `server` line per replica. */
class Nginx {
  async start(replicas) {
    this.dir = tempDir("nginx");
    const d = this.dir;
    const [cert, key] = [join(d, "cert.pem"), join(d, "key.pem")];
    execFileSync("openssl", [
      "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-days", "1",
      "-subj", `/CN=${HOST}`, "-addext", `subjectAltName=DNS:${HOST}`, "-keyout", key, "-out", cert,
    ], { stdio: "ignore" });
    this.port = await freePort();
    const template = readFileSync(join(ROOT, "deploy/nginx/celeriant-gateway.conf"), "utf8");
    const line = "    server @UPSTREAM@;\n";
    assert(template.includes(line), "the nginx file has no `server @UPSTREAM@;` line");
    const server = template
      .replace(line, replicas.map((r) => line.replace("@UPSTREAM@", r.addr)).join(""))
      .replaceAll("@LISTEN@", `127.0.0.1:${this.port}`).replaceAll("@SERVER_NAME@", HOST)
      .replaceAll("@CERT@", cert).replaceAll("@KEY@", key)
      // The header comment names the placeholder too.
      .replaceAll("@UPSTREAM@", replicas.map((r) => r.addr).join(" "));
    assert(!server.includes("@"), `a placeholder is left in the nginx file:\n${server}`);
    writeFileSync(join(d, "celeriant-gateway.conf"), server);
    this.upstreamBlock = server.slice(server.indexOf("upstream "), server.indexOf("}", server.indexOf("upstream ")) + 1);
    // Run as root (the CI container), nginx gives its workers to `nobody`.
    const root = process.getuid?.() === 0;
    if (root) chmodSync(d, 0o755);
    writeFileSync(join(d, "nginx.conf"), [
      root ? "user nobody nogroup;" : "", "daemon off;", "worker_processes 1;", `pid ${d}/nginx.pid;`,
      `error_log ${d}/error.log warn;`, "events { worker_connections 512; }", "http {",
      // Which replica served each request (the last one tried, when nginx moved on).
      "  log_format fleet '$upstream_addr $status $request_method $uri';",
      `  access_log ${d}/access.log fleet;`,
      `  client_body_temp_path ${d}/body; proxy_temp_path ${d}/proxy; fastcgi_temp_path ${d}/fastcgi;`,
      `  uwsgi_temp_path ${d}/uwsgi; scgi_temp_path ${d}/scgi;`,
      `  include ${d}/celeriant-gateway.conf;`, "}", "",
    ].join("\n"));
    const nginx = existsSync("/usr/sbin/nginx") ? "/usr/sbin/nginx" : "nginx";
    this.proc = spawn(nginx, ["-p", d, "-c", join(d, "nginx.conf"), "-e", join(d, "error.log")], { stdio: "ignore" });
    children.add(this.proc);
    await waitFor("nginx to listen", 10_000, () => fetch(`http://127.0.0.1:${this.port}/`).then(() => true, () => false));
    this.base = `https://${HOST}:${this.port}`;
  }

  /** Requests per replica (by the address nginx last tried), and nginx's own 502 answers. */
  figures(replicas) {
    const lines = readFileSync(join(this.dir, "access.log"), "utf8").split("\n").filter(Boolean)
      .map((l) => l.match(/^(.*) (\d{3}) (\S+) (\S+)$/)).filter(Boolean)
      .map(([, upstream, status]) => ({ upstream: upstream.split(", ").pop(), status }));
    const perReplica = replicas.map((r) => lines.filter((l) => l.upstream === r.addr).length);
    return { requests: lines.length, perReplica, status502: lines.filter((l) => l.status === "502").length };
  }

  async stop() {
    if (!this.proc) return;
    const exited = new Promise((r) => this.proc.once("exit", r));
    this.proc.kill("SIGQUIT");
    await Promise.race([exited, sleep(5000)]);
    this.proc.kill("SIGKILL");
    children.delete(this.proc);
    rmSync(this.dir, { recursive: true, force: true });
  }
}

/** Reads an aggregate through `replica` with the operator credential. */
async function readAll(replica, secret, typeId, id) {
  const events = [];
  const batches = [];
  for (let from = 1; ;) {
    const r = await fetch(`${replica.base}/v1/aggregates/${typeId}/${id}/events?from=${from}`, { headers: { authorization: `Operator ${secret}` } });
    if (!r.ok) throw new Error(`read ${id}: ${r.status} ${await r.text()}`);
    const page = await r.json();
    for (const b of page.batches) {
      batches.push(b);
      events.push(...b.events.map((e) => ({ ...e, clientId: b.clientId })));
    }
    if (page.next === null) return events;
    from = page.next;
  }
}

export async function fleet({ events = 2000, tabs = 3, aggregates = 16, seed = Date.now() % 1e9, log = console.log } = {}) {
  const started = Date.now();
  const random = rng(seed);
  log(`fleet: seed ${seed}, ${events} events, ${tabs} tabs, ${aggregates} aggregates, 3 replicas, 3 Celeriant nodes`);
  const shared = { dir: tempDir("fleet-shared") };
  shared.sessionSecret = join(shared.dir, "session-secret");
  shared.operatorToken = join(shared.dir, "operator-token");
  const operatorSecret = `fleet-operator-${randomBytes(24).toString("hex")}`;
  writeFileSync(shared.sessionSecret, randomBytes(48).toString("hex"), { mode: 0o600 });
  writeFileSync(shared.operatorToken, operatorSecret, { mode: 0o600 });

  const cluster = await new Cluster().start();
  const replicas = [0, 1, 2].map((i) => new Replica(i, shared, cluster.nodes));
  const nginx = new Nginx();
  let context = null;
  try {
    for (const r of replicas) await r.start();
    await nginx.start(replicas);
    context = await launchBrowser(undefined, {
      ignoreHTTPSErrors: true,
      args: [`--host-resolver-rules=MAP ${HOST} 127.0.0.1`],
    });
    return await run({ events, tabs, aggregates, seed, log, random, started, cluster, replicas, nginx, context, operatorSecret });
  } finally {
    if (context) await context.cleanup();
    for (const r of replicas) {
      await r.stop();
      r.cleanup();
    }
    await nginx.stop().catch(() => {});
    await cluster.stop();
    rmSync(shared.dir, { recursive: true, force: true });
  }
}

async function run({ events, tabs, aggregates, seed, log, random, started, cluster, replicas, nginx, context, operatorSecret }) {
  const db = `fleet-${seed}`;
  const typeId = uuid(random);
  const ids = Array.from({ length: aggregates }, () => uuid(random));
  const attempted = new Map(); // payload -> aggregate id
  const reported = new Map(); // payload -> { id, seq, eventId }
  const figures = { kills: 0, leaderChanges: 0, heldWrites: [], appendFailures: 0 };
  await context.exposeBinding("e2eReport", (_source, msg) => {
    if (msg.kind === "appending") for (const p of msg.payloads) attempted.set(p, msg.id);
    if (msg.kind === "appended") {
      msg.payloads.forEach((p, i) => reported.set(p, { id: msg.id, seq: msg.receipts[i].clientSeq, eventId: msg.receipts[i].eventId }));
    }
    if (msg.kind === "appendFailed") figures.appendFailures += 1;
  });
  const options = { requestTimeoutMs: 5000, maxBatchEvents: 50, maxBackoffMs: 1000 };
  const site = { base: nginx.base };
  const pages = [];
  for (let i = 0; i < tabs; i++) pages.push(await openTab(context, site, i, db, options));
  // Tab 0 watches every aggregate: one change stream through nginx.
  for (const id of ids) await pages[0].evaluate((a) => harness.watch(a), { typeId, id });
  const streams = () => Promise.all(replicas.map((r) => r.metric("celeriant_gateway_watch_streams_open")));
  await waitFor("the change stream to open", 20_000, async () => (await streams()).some((n) => n > 0));
  for (const [i, page] of pages.entries()) {
    await page.evaluate((a) => harness.startAppending(a), { typeId, aggregates: ids, loadId: `${seed}.${i}` });
  }

  let leader = 0;
  const changeLeader = async (settle) => {
    await cluster.send("hold");
    // Wait for writes to be in flight on the leader (they are held, unanswered, until the change).
    await waitFor("a write in flight on the leader", 10_000, async () => (await cluster.send("held")).held > 0).catch(() => {});
    const { held } = await cluster.send("held");
    leader = (leader + 1) % 3;
    await cluster.send(`leader ${leader} ${settle}`);
    figures.leaderChanges += 1;
    figures.heldWrites.push({ settle, held });
    log(`  ${reported.size} events: leader -> node ${leader}, ${held} writes in flight ${settle === "applied drop" ? "committed, unanswered, connections dropped" : "refused (2011)"}`);
  };
  const plan = [
    { at: 0.25, action: "kill" },
    { at: 0.5, action: "leader", settle: "applied drop" },
    { at: 0.75, action: "leader", settle: "refused" },
  ];
  const limit = Date.now() + 150_000;
  while (reported.size < events) {
    assert(Date.now() < limit, `only ${reported.size} of ${events} events appended in 150 s`);
    await sleep(100);
    const progress = reported.size / events;
    while (plan.length && progress >= plan[0].at) {
      const step = plan.shift();
      if (step.action === "kill") {
        const before = await streams();
        const victim = replicas[before.findIndex((n) => n > 0)];
        assert(victim, `no replica holds the change stream: ${before}`);
        log(`  ${reported.size} events: kill -9 replica ${victim.index} (it holds the change stream)`);
        await victim.kill9();
        figures.kills += 1;
        // The stream reconnects through nginx to a replica that is up, before the victim is back.
        figures.streamReconnectMs = await waitFor("the change stream on another replica", 30_000, async () => {
          const now = await streams();
          return now.some((n, i) => n > 0 && i !== victim.index);
        });
        figures.streamMovedTo = (await streams()).findIndex((n, i) => n > 0 && i !== victim.index);
        await victim.start();
        log(`  ${reported.size} events: replica ${victim.index} restarted; the stream moved to replica ${figures.streamMovedTo} in ${figures.streamReconnectMs} ms`);
      } else {
        await changeLeader(step.settle);
      }
    }
  }

  await Promise.all(pages.map((p) => p.evaluate(() => harness.stop())));
  for (const page of pages) await page.evaluate((b) => harness.flush(b), { stallMs: 30_000, limitMs: 90_000 });
  let outboxes = [];
  for (let waited = 0; waited <= 30_000; waited += 250) {
    outboxes = await Promise.all(pages.map((p) => p.evaluate((db) => harness.countOutbox(db), db)));
    if (outboxes.every((n) => n === 0)) break;
    await sleep(250);
  }

  // The log, read through a replica with the operator credential.
  const problems = [];
  const seen = new Map();
  const logs = new Map();
  let total = 0;
  let duplicates = 0;
  for (const id of ids) {
    const landed = await readAll(replicas[1], operatorSecret, typeId, id);
    logs.set(id, landed.map((e) => `${e.clientId}:${e.clientSeq}:confirmed`));
    total += landed.length;
    landed.forEach((e, i) => {
      if (e.clientSeq !== i + 1) problems.push(`aggregate ${id}: position ${i + 1} holds sequence ${e.clientSeq}`);
      const payload = decode(e.data);
      if (seen.has(payload)) duplicates += 1;
      seen.set(payload, { id, seq: e.clientSeq, eventId: e.eventId });
      if (attempted.get(payload) !== id) problems.push(`aggregate ${id}: unexpected event ${payload}`);
    });
  }
  let losses = 0;
  for (const [payload, want] of reported) {
    const got = seen.get(payload);
    if (!got) {
      losses += 1;
      problems.push(`lost: ${payload}`);
    } else if (got.id !== want.id || got.seq !== want.seq || got.eventId !== want.eventId) {
      problems.push(`${payload}: appended as ${JSON.stringify(want)}, landed as ${JSON.stringify(got)}`);
    }
  }
  if (duplicates) problems.push(`${duplicates} duplicates`);
  if (outboxes.some((n) => n !== 0)) problems.push(`outboxes not empty: ${outboxes}`);

  // The cluster's own store: the same events, each (client, sequence) once.
  const { aggregates: stored } = await cluster.send("dump");
  const keys = new Set();
  let storedEvents = 0;
  for (const a of stored) {
    for (const b of a.batches) {
      for (const [seq] of b.events) {
        storedEvents += 1;
        const key = `${a.id}:${b.clientId}:${seq}`;
        if (keys.has(key)) problems.push(`stored twice: ${key}`);
        keys.add(key);
      }
    }
  }
  // Access records live in the store too (one per aggregate, reserved type): count ours only.
  const ours = stored.filter((a) => a.type === typeId).reduce((n, a) => n + a.batches.reduce((m, b) => m + b.events.length, 0), 0);
  if (ours !== total) problems.push(`the cluster stores ${ours} events of the test's type, the gateway reads ${total}`);

  // Every view of the watching tab converges on the log, and no view ever showed an event
  // twice, lost one, or turned a confirmed one pending.
  let viewsConverged = 0;
  for (const id of ids) {
    const want = JSON.stringify(logs.get(id));
    try {
      await waitFor(`the view of ${id}`, 30_000, async () => {
        const r = await pages[0].evaluate((id) => harness.watchReport(id), id);
        return r.last && JSON.stringify(r.last) === want;
      });
      viewsConverged += 1;
    } catch (e) {
      problems.push(String(e.message));
    }
    const r = await pages[0].evaluate((id) => harness.watchReport(id), id);
    if (r.problem) problems.push(`view of ${id}: ${r.problem}`);
  }

  const stats = await cluster.send("stats");
  // What the replicas answered (counted since each one's last start).
  const answers = async (labels) => (await Promise.all(replicas.map((r) => r.metric("celeriant_gateway_requests_total", labels)))).reduce((a, b) => a + b, 0);
  const gatewayAnswers = {
    writesLanded: await answers(['route="write"', 'outcome="landed"']),
    writesUnknown: await answers(['route="write"', 'outcome="unknown"']),
    // A landed answer with an upstream code is Celeriant's 2002 (the metrics label every
    // Celeriant code "upstream").
    writesDuplicate2002: await answers(['route="write"', 'outcome="landed"', 'code="upstream"']),
    writesRetry: await answers(['route="write"', 'outcome="retry"']),
  };
  const proxy = nginx.figures(replicas);
  const result = {
    seed, events: total, appendsReported: reported.size, appendedButUnreported: total - reported.size,
    storedEvents, replicas: replicas.length, nodes: cluster.nodes.length,
    kills: figures.kills, streamReconnectMs: figures.streamReconnectMs, streamMovedTo: figures.streamMovedTo,
    leaderChanges: stats.changes, heldWrites: figures.heldWrites.map((h) => h.held),
    notLeaderAnswers: stats.notLeaderPerNode.reduce((a, b) => a + b, 0), writesPerNode: stats.writesPerNode,
    requests: proxy.requests, requestsPerReplica: proxy.perReplica, proxy502: proxy.status502, gatewayAnswers,
    appendFailures: figures.appendFailures, viewsConverged, views: ids.length,
    duplicates, losses, elapsedSeconds: Number(((Date.now() - started) / 1000).toFixed(1)),
  };
  log(`fleet figures: ${JSON.stringify(result)}`);
  assert(figures.leaderChanges === 2 && stats.changes === 2, `leader changes: ${stats.changes}`);
  assert(figures.heldWrites.some((h) => h.settle === "applied drop" && h.held > 0), "no write was in flight at the first leader change");
  // The write committed but unanswered was answered `unknown`, and its resend was a 2002.
  assert(gatewayAnswers.writesUnknown >= 1 && gatewayAnswers.writesDuplicate2002 >= 1, `answers: ${JSON.stringify(gatewayAnswers)}`);
  if (problems.length) throw new Error(`${problems.length} problems:\n  ${problems.slice(0, 20).join("\n  ")}`);
  return result;
}
