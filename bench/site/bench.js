// One measurement per page load, chosen by the query string; the result is POSTed to the
// orchestrator (bench/run.mjs), which launched this browser without any automation protocol
// attached (DevTools slows fetch and IndexedDB noticeably).
//
//   ?m=append-serial|append-burst|drain|memory|catchup|proof|projection &variant=ours|baseline &n=N &gateway=URL &report=URL &tag=T
//   (catchup and projection also: &typeId=T &id=I, the aggregate bench/run.mjs seeded with n
//   confirmed events; projection also &reps=R, new events per kind)
import init, { SyncClient } from "/pkg/celeriant_sync.js";

const q = new URLSearchParams(location.search);
const m = q.get("m");
const variant = q.get("variant");
const n = Number(q.get("n"));
const gateway = q.get("gateway");
const tag = q.get("tag");
const NOWHERE = "http://127.0.0.1:9"; // nothing syncs while appending is measured
const AGGREGATES = 10;

// `&trace=1`: where the time goes (bench/site/trace.js), catch-up only.
const trace = q.get("trace") ? await import("./trace.js") : null;
trace?.install();

const post = (body) => fetch(q.get("report"), { method: "POST", body: JSON.stringify(body) });

function randomBytes(size) {
  const a = new Uint8Array(size);
  crypto.getRandomValues(a);
  return a;
}

const uuid = () => crypto.randomUUID();
const typeId = uuid();
const ids = Array.from({ length: AGGREGATES }, uuid);
const payloads = Array.from({ length: 256 }, () => randomBytes(200));

// ---- the plain-JavaScript baseline: the same records, the same stores, no library ----
function openPlain(name) {
  return new Promise((resolve, reject) => {
    const r = indexedDB.open(name, 1);
    r.onupgradeneeded = () => {
      const events = r.result.createObjectStore("events", { keyPath: ["t", "a", "s"] });
      // variant=baseline-indexed: the same event-id index the client keeps (for whenSynced).
      if (variant === "baseline-indexed") events.createIndex("eventId", "e");
      r.result.createObjectStore("counters", { keyPath: ["t", "a"] });
    };
    r.onsuccess = () => resolve(r.result);
    r.onerror = () => reject(r.error);
  });
}

/** One readwrite transaction: read the counter, put `count` events, bump the counter. */
function plainAppend(db, a, events) {
  return new Promise((resolve, reject) => {
    const tx = db.transaction(["events", "counters"], "readwrite", { durability: "strict" });
    const counters = tx.objectStore("counters");
    const store = tx.objectStore("events");
    const get = counters.get([typeId, a]);
    get.onsuccess = () => {
      let s = get.result ? get.result.last : 0;
      for (const data of events) {
        s += 1;
        store.add({ t: typeId, a, s, e: uuid(), ts: Date.now(), ty: 1, mi: 0, d: data, iv: null });
      }
      counters.put({ t: typeId, a, last: s });
    };
    tx.oncomplete = () => resolve();
    tx.onerror = () => reject(tx.error);
    tx.onabort = () => reject(tx.error);
  });
}

async function appendSerial() {
  if (variant.startsWith("baseline")) {
    const db = await openPlain(`plain-${tag}`);
    const t0 = performance.now();
    for (let i = 0; i < n; i++) await plainAppend(db, ids[0], [payloads[i % 256]]);
    return { ms: performance.now() - t0 };
  }
  await init();
  const client = await SyncClient.open({ gatewayUrl: NOWHERE, databaseName: `ours-${tag}` });
  const t0 = performance.now();
  for (let i = 0; i < n; i++) await client.append({ typeId, id: ids[0] }, [{ type: 1, data: payloads[i % 256] }]);
  const ms = performance.now() - t0;
  await client.close();
  return { ms };
}

async function appendBurst() {
  if (variant === "baseline") {
    const db = await openPlain(`plain-${tag}`);
    const t0 = performance.now();
    for (let i = 0; i < n; i += 100) {
      const chunk = Array.from({ length: Math.min(100, n - i) }, (_, k) => payloads[(i + k) % 256]);
      await plainAppend(db, ids[(i / 100) % AGGREGATES], chunk);
    }
    const ms = performance.now() - t0;
    return { ms, eventsPerSecond: (n / ms) * 1000 };
  }
  await init();
  const client = await SyncClient.open({ gatewayUrl: NOWHERE, databaseName: `ours-${tag}` });
  const t0 = performance.now();
  const all = [];
  for (let i = 0; i < n; i++) all.push(client.append({ typeId, id: ids[i % AGGREGATES] }, [{ type: 1, data: payloads[i % 256] }]));
  await Promise.all(all);
  const ms = performance.now() - t0;
  await client.close();
  return { ms, eventsPerSecond: (n / ms) * 1000 };
}

/** Fills an outbox with `n` events over 10 aggregates while nothing syncs. */
async function fill(name, count) {
  const client = await SyncClient.open({ gatewayUrl: NOWHERE, databaseName: name, durability: "relaxed" });
  for (let i = 0; i < count; i += 100) {
    const events = Array.from({ length: Math.min(100, count - i) }, (_, k) => ({ type: 1, data: payloads[(i + k) % 256] }));
    await client.append({ typeId, id: ids[(i / 100) % AGGREGATES] }, events);
  }
  await client.close();
}

function b64(bytes) {
  let s = "";
  for (let i = 0; i < bytes.length; i++) s += String.fromCharCode(bytes[i]);
  return btoa(s);
}

async function drain() {
  const perAggregate = n / AGGREGATES;
  const batch = 500; // the client's default maxBatchEvents
  if (variant === "baseline") {
    // The same requests the client sends: one aggregate each, 500 events, built beforehand.
    const clientId = uuid();
    const bodies = [];
    for (const id of ids) {
      for (let first = 1; first <= perAggregate; first += batch) {
        const events = [];
        for (let s = first; s < first + batch && s <= perAggregate; s++) {
          events.push({ clientSeq: s, eventId: uuid(), timestamp: Date.now(), type: 1, minor: 0, data: b64(payloads[s % 256]), iv: null });
        }
        bodies.push(JSON.stringify({ clientId, writes: [{ aggregate: { typeId, id }, allowCreate: true, events }] }));
      }
    }
    const t0 = performance.now();
    for (const body of bodies) {
      const r = await fetch(`${gateway}/v1/write`, { method: "POST", headers: { "content-type": "application/json" }, body });
      const answer = await r.json();
      if (answer.outcome !== "landed") throw new Error(JSON.stringify(answer));
    }
    const ms = performance.now() - t0;
    return { ms, eventsPerSecond: (n / ms) * 1000, requests: bodies.length };
  }
  await init();
  const name = `ours-${tag}`;
  await fill(name, n);
  const t0 = performance.now();
  const client = await SyncClient.open({ gatewayUrl: gateway, databaseName: name });
  // Where the time goes (printed with BENCH_DEBUG=1): opening, then until the first batch landed.
  const openMs = performance.now() - t0;
  let firstMs = 0, lastMs = 0;
  const batches = [];
  client.addEventListener("synced", (e) => {
    const now = performance.now() - t0;
    batches.push(`${e.detail.eventIds.length}:${(now - lastMs).toFixed(1)}`);
    lastMs = now;
    firstMs ||= now;
  });
  await client.flush();
  const ms = performance.now() - t0;
  await client.close();
  return { ms, eventsPerSecond: (n / ms) * 1000, openMs, firstMs, lastMs, batches: batches.join(" ") };
}

async function memory() {
  const wasm = await init();
  const name = `ours-${tag}`;
  await fill(name, n);
  const samples = { wasm: 0, heap: 0 };
  const sample = () => {
    samples.wasm = Math.max(samples.wasm, wasm.memory.buffer.byteLength);
    samples.heap = Math.max(samples.heap, performance.memory ? performance.memory.usedJSHeapSize : 0);
  };
  sample();
  const before = { ...samples };
  const timer = setInterval(sample, 20);
  const t0 = performance.now();
  const client = await SyncClient.open({ gatewayUrl: gateway, databaseName: name });
  await client.flush();
  const ms = performance.now() - t0;
  clearInterval(timer);
  sample();
  await client.close();
  return { ms, peakWasmBytes: samples.wasm, peakHeapBytes: samples.heap, wasmBytesBefore: before.wasm };
}

/** Catch-up: n confirmed events of one aggregate (seeded on the gateway by bench/run.mjs) into
 *  an empty local log. Ours: a fresh client's `read(aggregate)`, timed from the call to its
 *  resolution (it opens a session, reads every page into IndexedDB and builds the view);
 *  the view must hold all n events, confirmed, not from cache. Baseline: plain JS following
 *  `next` page by page, each page's batches put into an object store with the cursor, one
 *  transaction per page, at the durability the client's log uses (`relaxed`: a cache). */
async function catchup() {
  const aggregate = { typeId: q.get("typeId"), id: q.get("id") };
  if (variant === "baseline") {
    const db = await new Promise((resolve, reject) => {
      const r = indexedDB.open(`plain-${tag}`, 1);
      r.onupgradeneeded = () => {
        r.result.createObjectStore("log");
        r.result.createObjectStore("cursors");
      };
      r.onsuccess = () => resolve(r.result);
      r.onerror = () => reject(r.error);
    });
    trace?.start();
    const t0 = performance.now();
    let events = 0;
    let pages = 0;
    for (let from = 1; ;) {
      const r = await fetch(`${gateway}/v1/aggregates/${aggregate.typeId}/${aggregate.id}/events?from=${from}`);
      if (!r.ok) throw new Error(`read: ${r.status} ${await r.text()}`);
      const page = await r.json();
      await new Promise((resolve, reject) => {
        const tx = db.transaction(["log", "cursors"], "readwrite", { durability: "relaxed" });
        const log = tx.objectStore("log");
        let version = 0;
        for (const b of page.batches) {
          log.put(b, [aggregate.typeId, aggregate.id, b.version]);
          events += b.events.length;
          version = b.version;
        }
        tx.objectStore("cursors").put({ version }, [aggregate.typeId, aggregate.id]);
        tx.oncomplete = () => resolve();
        tx.onerror = () => reject(tx.error);
        tx.onabort = () => reject(tx.error);
      });
      pages += 1;
      if (page.next === null) break;
      from = page.next;
    }
    const ms = performance.now() - t0;
    if (events !== n) throw new Error(`baseline stored ${events} events, expected ${n}`);
    return { ms, eventsPerSecond: (n / ms) * 1000, pages, trace: trace?.entries() };
  }
  await init();
  const client = await SyncClient.open({ gatewayUrl: gateway, databaseName: `ours-${tag}` });
  // Timed once this context drains (holds the device's drain lock, so it does the catch-up
  // itself): the line measures catching up, not the lock election (see docs/benchmarks.md).
  for (const t = performance.now(); client.status().role !== "drainer"; ) {
    if (performance.now() - t > 10_000) throw new Error("the client never became the drainer");
    await new Promise((r) => setTimeout(r, 5));
  }
  trace?.start();
  const t0 = performance.now();
  const view = await client.read(aggregate);
  const ms = performance.now() - t0;
  const traced = trace?.entries();
  const confirmed = view.events.filter((e) => e.status === "confirmed").length;
  const status = client.status();
  await client.close();
  if (view.fromCache || confirmed !== n) {
    throw new Error(`read answered after ${Math.round(ms)} ms with ${confirmed} confirmed events of ${n} (fromCache ${view.fromCache}); status ${JSON.stringify(status)}`);
  }
  return { ms, eventsPerSecond: (n / ms) * 1000, trace: traced };
}

/** The request proof's cost (docs/protocol.md, "Request proofs"): n sequential reads of one
 *  (empty) aggregate under a session of a fresh non-extractable device key. Ours: each read
 *  with a fresh DPoP proof, signed as the client signs it (src/browser/glue.js, makeProof:
 *  SHA-256 of the token and body, RSASSA-PKCS1-v1_5 over the JWS), against a gateway that
 *  requires proofs; also the signing alone, n times. Baseline: the same reads with the token
 *  only, against a gateway started with --proofs off. */
async function proof() {
  const subtle = crypto.subtle;
  const utf8 = (t) => new TextEncoder().encode(t);
  const b64url = (bytes) => b64(bytes).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
  const keyPair = await subtle.generateKey(
    { name: "RSASSA-PKCS1-v1_5", modulusLength: 2048, publicExponent: new Uint8Array([1, 0, 1]), hash: "SHA-256" },
    false, ["sign", "verify"]);
  const publicKey = b64(new Uint8Array(await subtle.exportKey("spki", keyPair.publicKey)));
  const nonce = String(Date.now());
  const signature = b64(new Uint8Array(await subtle.sign("RSASSA-PKCS1-v1_5", keyPair.privateKey, utf8(nonce))));
  const opened = await fetch(`${gateway}/v1/session`, {
    method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ publicKey, nonce, signature }),
  });
  if (!opened.ok) throw new Error(`session: ${opened.status} ${await opened.text()}`);
  const { token } = await opened.json();
  const { n: modulus, e } = await subtle.exportKey("jwk", keyPair.publicKey);
  const head = b64url(utf8(JSON.stringify({ typ: "dpop+jwt", alg: "RS256", jwk: { kty: "RSA", n: modulus, e } })));
  const hash = async (t) => b64url(new Uint8Array(await subtle.digest("SHA-256", utf8(t))));
  const makeProof = async (method, url, body) => {
    const target = new URL(url);
    const claims = {
      jti: b64url(crypto.getRandomValues(new Uint8Array(16))), htm: method, htu: target.pathname + target.search,
      iat: Math.floor(Date.now() / 1000), ath: await hash(token), bh: await hash(body),
    };
    const input = `${head}.${b64url(utf8(JSON.stringify(claims)))}`;
    return `${input}.${b64url(new Uint8Array(await subtle.sign("RSASSA-PKCS1-v1_5", keyPair.privateKey, utf8(input))))}`;
  };
  const url = `${gateway}/v1/aggregates/${crypto.randomUUID()}/${crypto.randomUUID()}/events?from=1`;
  const read = async () => {
    const headers = { authorization: `Bearer ${token}` };
    if (variant === "ours") headers.dpop = await makeProof("GET", url, "");
    const r = await fetch(url, { headers });
    if (!r.ok) throw new Error(`read: ${r.status} ${await r.text()}`);
    await r.json();
  };
  for (let i = 0; i < 5; i++) await read(); // warm-up: connection, key, code paths
  const t0 = performance.now();
  for (let i = 0; i < n; i++) await read();
  const ms = performance.now() - t0;
  let signMs = null;
  let p256Ms = null;
  if (variant === "ours") {
    const t1 = performance.now();
    for (let i = 0; i < n; i++) await makeProof("GET", url, "");
    signMs = (performance.now() - t1) / n;
    // The alternative not taken: a per-session P-256 key, signing an input of the same size.
    const ec = await subtle.generateKey({ name: "ECDSA", namedCurve: "P-256" }, false, ["sign"]);
    const input = utf8(`${head}.${"x".repeat(200)}`);
    const t2 = performance.now();
    for (let i = 0; i < n; i++) await subtle.sign({ name: "ECDSA", hash: "SHA-256" }, ec.privateKey, input);
    p256Ms = (performance.now() - t2) / n;
  }
  return { ms, perRequestMs: ms / n, signMs, p256Ms };
}

/** A JSON payload of about 200 bytes: `{"amount":1,"note":"<180 hex digits>"}`. */
function amountPayload() {
  const note = Array.from(randomBytes(90), (b) => b.toString(16).padStart(2, "0")).join("");
  return new TextEncoder().encode(JSON.stringify({ amount: 1, note }));
}

/** One new event on an aggregate of n confirmed events (seeded by bench/run.mjs, nothing else
 *  written to it, each `{"amount":1,…}`), folded by a live projection (`client.project`): a
 *  balance whose `apply` parses each event's JSON and counts its calls.
 *  After the first fold (all n confirmed, `apply` called n times), `reps` times each (after one
 *  untimed event of another device):
 *  - another device's event: the page POSTs one event to `/v1/write` under another client id;
 *    timed from the POST until the subscriber gets the snapshot holding it (confirmed), which
 *    includes the gateway's write, its change-stream notice, the client's catch-up read of the
 *    new page into IndexedDB, the view's refresh and the fold;
 *  - this device's append: `client.append` of one event, timed until the subscriber sees it
 *    pending, then until it is confirmed (drained, landed, read back).
 *  `apply`'s calls are counted per new event, 100 ms after its last snapshot, so a late extra
 *  refresh would be counted too. Medians over the reps; the apply counts as their maximum. */
async function projection() {
  const aggregate = { typeId: q.get("typeId"), id: q.get("id") };
  const reps = Number(q.get("reps"));
  await init();
  const client = await SyncClient.open({ gatewayUrl: gateway, databaseName: `ours-${tag}` });
  for (const t = performance.now(); client.status().role !== "drainer"; ) {
    if (performance.now() - t > 10_000) throw new Error("the client never became the drainer");
    await new Promise((r) => setTimeout(r, 5));
  }
  // A balance, as an app would fold one (the demo's www/balances.js): each event's JSON
  // `amount` (1 in every event here, so the state is also the count), and a counter of calls.
  let applied = 0;
  const p = client.project(aggregate, { initial: 0, apply: (balance, e) => { applied += 1; return balance + e.json().amount; } });
  let latest = null;
  let waiter = null;
  p.subscribe((s) => {
    latest = s;
    if (waiter && (s.error || waiter.pred(s))) {
      const w = waiter;
      waiter = null;
      if (s.error) w.reject(s.error);
      else w.resolve(performance.now());
    }
  });
  /** When the subscriber first sees a snapshot `pred` accepts (now, if the latest does). */
  const until = (pred, what) => new Promise((resolve, reject) => {
    if (latest && pred(latest)) return resolve(performance.now());
    const timer = setTimeout(() => reject(new Error(`timed out waiting for ${what}; latest ${JSON.stringify(latest)}`)), 30_000);
    waiter = { pred, resolve: (t) => { clearTimeout(timer); resolve(t); }, reject: (e) => { clearTimeout(timer); reject(e); } };
  });
  const settle = () => new Promise((r) => setTimeout(r, 100));
  const t0 = performance.now();
  await until((s) => s.state === n && s.pending === 0, `the first fold of ${n} events`);
  const firstFoldMs = performance.now() - t0;
  await settle();
  const initialApplies = applied;
  let count = n;
  // Another device's events, one per write; the first (not timed) warms the page's connection
  // to the gateway and the code paths.
  const otherDevice = uuid();
  const remote = [];
  for (let i = 0; i <= reps; i++) {
    applied = 0;
    count += 1;
    const expected = count;
    const event = { clientSeq: i + 1, eventId: uuid(), timestamp: Date.now(), type: 1, minor: 0, data: b64(amountPayload()), iv: null };
    const body = JSON.stringify({ clientId: otherDevice, writes: [{ aggregate, allowCreate: false, events: [event] }] });
    const start = performance.now();
    const seen = until((s) => s.state === expected && s.pending === 0, `another device's event ${i}`);
    const r = await fetch(`${gateway}/v1/write`, { method: "POST", headers: { "content-type": "application/json" }, body });
    const answer = await r.json();
    if (answer.outcome !== "landed") throw new Error(`write: ${r.status} ${JSON.stringify(answer)}`);
    const ms = (await seen) - start;
    await settle();
    if (i > 0) remote.push({ ms, applies: applied });
  }
  // This device's appends.
  const local = [];
  for (let i = 1; i <= reps; i++) {
    applied = 0;
    count += 1;
    const expected = count;
    const start = performance.now();
    const pending = until((s) => s.state === expected && s.pending === 1, `this device's event ${i} pending`);
    const appended = client.append(aggregate, [{ type: 1, data: amountPayload() }]);
    const pendingAt = await pending;
    const pendingApplies = applied;
    const confirmedAt = await until((s) => s.state === expected && s.pending === 0, `this device's event ${i} confirmed`);
    await appended;
    await settle();
    local.push({ pendingMs: pendingAt - start, confirmedMs: confirmedAt - start, pendingApplies, applies: applied });
  }
  p.close();
  await client.close();
  const med = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
  return {
    firstFoldMs, initialApplies,
    remoteMs: med(remote.map((r) => r.ms)), remoteMinMs: Math.min(...remote.map((r) => r.ms)),
    remoteApplies: Math.max(...remote.map((r) => r.applies)),
    pendingMs: med(local.map((r) => r.pendingMs)), confirmedMs: med(local.map((r) => r.confirmedMs)),
    pendingApplies: Math.max(...local.map((r) => r.pendingApplies)), localApplies: Math.max(...local.map((r) => r.applies)),
    remoteAll: remote.map((r) => Math.round(r.ms)).join(" "),
  };
}

const runs = { "append-serial": appendSerial, "append-burst": appendBurst, drain, memory, catchup, proof, projection };
try {
  const result = await runs[m]();
  await post({ ok: true, m, variant, n, ...result });
} catch (e) {
  await post({ ok: false, m, variant, n, error: String(e && e.stack || e) });
}
document.getElementById("state").textContent = "done";
