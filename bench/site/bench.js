// One measurement per page load, chosen by the query string; the result is POSTed to the
// orchestrator (bench/run.mjs), which launched this browser without any automation protocol
// attached (DevTools slows fetch and IndexedDB noticeably).
//
//   ?m=append-serial|append-burst|drain|memory &variant=ours|baseline &n=N &gateway=URL &report=URL &tag=T
import init, { SyncClient } from "/pkg/celeriant_sync.js";

const q = new URLSearchParams(location.search);
const m = q.get("m");
const variant = q.get("variant");
const n = Number(q.get("n"));
const gateway = q.get("gateway");
const tag = q.get("tag");
const NOWHERE = "http://127.0.0.1:9"; // nothing syncs while appending is measured
const AGGREGATES = 10;

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
  await client.flush();
  const ms = performance.now() - t0;
  await client.close();
  return { ms, eventsPerSecond: (n / ms) * 1000 };
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

const runs = { "append-serial": appendSerial, "append-burst": appendBurst, drain, memory };
try {
  const result = await runs[m]();
  await post({ ok: true, m, variant, n, ...result });
} catch (e) {
  await post({ ok: false, m, variant, n, error: String(e && e.stack || e) });
}
document.getElementById("state").textContent = "done";
