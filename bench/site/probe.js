// IndexedDB probe: wraps IDB methods before the client loads, fills an outbox offline, then
// drains against a real gateway while timing every IndexedDB request and transaction, bucketed
// by the number of events still in the store.
//   ?mode=drain|plain &n=N &k=K (events to drain, 0 = all) &gateway=URL &report=URL &tag=T
const q = new URLSearchParams(location.search);
const mode = q.get("mode") || "drain";
const n = Number(q.get("n"));
const k = Number(q.get("k") || 0);
const gateway = q.get("gateway");
const tag = q.get("tag") || String(Date.now());
const bucketSize = Number(q.get("bucket") || 5000);
const post = (body) => fetch(q.get("report"), { method: "POST", body: JSON.stringify(body) });

let probing = false;
let remaining = n;
// With ?timeline=1: when each transaction and fetch began and ended, until the first batch landed.
const timeline = q.get("timeline") === "1" ? [] : null;
let origin = 0;
function span(label, t0) {
  if (timeline && probing && remaining > n - Number(q.get("timelineEvents") || 1)) timeline.push(`${(t0 - origin).toFixed(1)}..${(performance.now() - origin).toFixed(1)} ${label}`);
}
if (timeline) {
  if (navigator.locks && navigator.locks.query) {
    const realQuery = navigator.locks.query.bind(navigator.locks);
    navigator.locks.query = function () {
      const t0 = performance.now();
      const p = realQuery();
      p.then(() => span("locks.query", t0));
      return p;
    };
  }
  const realFetch = globalThis.fetch;
  globalThis.fetch = function (input, init) {
    const t0 = performance.now();
    const url = String(input && input.url ? input.url : input).replace(/^https?:\/\/[^/]+/, "");
    const p = realFetch.call(this, input, init);
    p.then(() => span(`fetch ${url}`, t0), () => span(`fetch ${url} failed`, t0));
    return p;
  };
}
const stats = new Map(); // "op|bucket" -> {count, ms, max}
function note(op, ms) {
  if (!probing) return;
  const b = Math.floor(remaining / bucketSize) * bucketSize;
  const key = `${op}|${b}`;
  let s = stats.get(key);
  if (!s) stats.set(key, (s = { op, bucket: b, count: 0, ms: 0, max: 0 }));
  s.count += 1;
  s.ms += ms;
  s.max = Math.max(s.max, ms);
}
function wrap(proto, kind, methods) {
  for (const m of methods) {
    const real = proto[m];
    if (!real) continue;
    proto[m] = function (...args) {
      const t0 = performance.now();
      const req = real.apply(this, args);
      const name = kind === "index" ? `${this.objectStore.name}[${this.name}]` : this.name;
      const done = () => note(`${name}.${m}`, performance.now() - t0);
      req.addEventListener("success", done);
      req.addEventListener("error", done);
      return req;
    };
  }
}
const METHODS = ["get", "getKey", "getAll", "getAllKeys", "count", "openCursor", "openKeyCursor"];
wrap(IDBObjectStore.prototype, "store", [...METHODS, "delete", "put", "add", "clear"]);
wrap(IDBIndex.prototype, "index", METHODS);
const realTx = IDBDatabase.prototype.transaction;
IDBDatabase.prototype.transaction = function (scope, txMode, options) {
  const t0 = performance.now();
  const tx = realTx.call(this, scope, txMode, options);
  const stores = (Array.isArray(scope) || typeof scope !== "string" ? [...scope] : [scope]).sort().join("+");
  const label = `tx(${stores}, ${txMode || "readonly"}${options && options.durability ? ", " + options.durability : ""})`;
  tx.addEventListener("complete", () => {
    note(label, performance.now() - t0);
    span(label, t0);
  });
  tx.addEventListener("abort", () => note(label + " aborted", performance.now() - t0));
  return tx;
};

const { default: init, SyncClient } = await import("/pkg/celeriant_sync.js");
const NOWHERE = "http://127.0.0.1:9";
const AGGREGATES = Number(q.get("aggregates") || 10);
const uuid = () => crypto.randomUUID();
const typeId = uuid();
const ids = Array.from({ length: AGGREGATES }, uuid);
const payloads = Array.from({ length: 256 }, () => crypto.getRandomValues(new Uint8Array(200)));

async function fill(name, count) {
  const client = await SyncClient.open({ gatewayUrl: NOWHERE, databaseName: name, durability: "relaxed" });
  for (let i = 0; i < count; i += 100) {
    const events = Array.from({ length: Math.min(100, count - i) }, (_, j) => ({ type: 1, data: payloads[(i + j) % 256] }));
    await client.append({ typeId, id: ids[(i / 100) % AGGREGATES] }, events);
  }
  await client.close();
}

async function drain() {
  await init();
  const name = `probe-${tag}`;
  const f0 = performance.now();
  await fill(name, n);
  const fillMs = performance.now() - f0;
  const target = k || n;
  let synced = 0;
  const batches = [];
  probing = true;
  const t0 = performance.now();
  origin = t0;
  let last = t0;
  const client = await SyncClient.open({ gatewayUrl: gateway, databaseName: name });
  // ?flush=1: wait as the bench does, with flush() (its reads are timed too).
  if (q.get("flush") === "1") client.flush();
  const done = new Promise((resolve) => {
    client.addEventListener("synced", (e) => {
      const now = performance.now();
      const c = e.detail.eventIds.length;
      batches.push({ remaining, events: c, ms: now - last });
      last = now;
      synced += c;
      remaining -= c;
      if (synced >= target) resolve();
    });
  });
  const budget = Number(q.get("budget") || 600) * 1000;
  const outcome = await Promise.race([done.then(() => "done"), new Promise((r) => setTimeout(() => r("budget"), budget))]);
  const ms = performance.now() - t0;
  probing = false;
  await client.close();
  return { fillMs, ms, synced, outcome, eventsPerSecond: (synced / ms) * 1000, batches };
}

// Plain-JS layouts (no client): n events over 10 aggregates keyed [t,a,s], drained in batches
// of 500 by getAll(range, 500) + the layout's settle, relaxed durability, one transaction per batch.
//   layout=A  index "eventId" on the events store (today's client); settle = delete(range)
//   layout=B  no index; event ids in their own store keyed by id; settle = delete(range) + 500 delete(id)
//   layout=C  like B, but the id records are left for later (settle = delete(range) only)
//   layout=D  no index, no id store (lower bound): settle = delete(range)
//   layout=O  like C, with the key out of line and the value {s, e, w} (the client's layout since v2)
//   layout=S  like O, but the value one string: the event id, then the wire encoding
//   layout=G  like O, but one record per 100 events of an aggregate (an append of 100): keyed by
//             the first sequence, the value { s, n, e: [ids], w: the wire encodings joined }
async function plain() {
  const layout = q.get("layout") || (q.get("index") === "0" ? "D" : "A");
  const db = await new Promise((resolve, reject) => {
    const r = indexedDB.open(`plain-${tag}`, 1);
    r.onupgradeneeded = () => {
      const outOfLine = layout === "O" || layout === "S" || layout === "G";
      const s = r.result.createObjectStore("events", outOfLine ? undefined : { keyPath: ["t", "a", "s"] });
      if (layout === "A") s.createIndex("eventId", "e");
      if (layout !== "A" && layout !== "D") r.result.createObjectStore("ids");
    };
    r.onsuccess = () => resolve(r.result);
    r.onerror = () => reject(r.error);
  });
  const stores = layout === "A" || layout === "D" ? ["events"] : ["events", "ids"];
  const txDone = (tx) => new Promise((res, rej) => { tx.oncomplete = res; tx.onabort = () => rej(tx.error); });
  const per = n / AGGREGATES;
  for (let i = 0; i < n; i += 1000) {
    const tx = db.transaction(stores, "readwrite", { durability: "relaxed" });
    const st = tx.objectStore("events");
    for (let j = i; layout === "G" && j < Math.min(n, i + 1000); j += 100) {
      const a = ids[Math.floor(j / per)], first = (j % per) + 1, e = Array.from({ length: 100 }, uuid);
      st.put({ s: first, n: 100, e, w: Array.from({ length: 100 }, () => "x".repeat(300)).join(",") }, [typeId, a, first]);
      e.forEach((id, k) => tx.objectStore("ids").put([typeId, a, first + k], id));
    }
    for (let j = i; layout !== "G" && j < Math.min(n, i + 1000); j++) {
      const rec = { t: typeId, a: ids[Math.floor(j / per)], s: (j % per) + 1, e: uuid(), w: "x".repeat(300) };
      if (layout === "O") st.put({ s: rec.s, e: rec.e, w: rec.w }, [rec.t, rec.a, rec.s]);
      else if (layout === "S") st.put(rec.e + rec.w, [rec.t, rec.a, rec.s]);
      else st.put(rec);
      if (stores.length > 1) tx.objectStore("ids").put([rec.t, rec.a, rec.s], rec.e);
    }
    await txDone(tx);
  }
  probing = true;
  const t0 = performance.now();
  origin = t0;
  let last = t0;
  const batches = [];
  const limit = k || n;
  outer: for (const a of ids) {
    for (let s = 1; s <= per; s += 500) {
      const range = IDBKeyRange.bound([typeId, a, s], [typeId, a, s + 499]);
      const tx = db.transaction(layout === "B" ? stores : ["events"], "readwrite", { durability: "relaxed" });
      const st = tx.objectStore("events");
      const got = await new Promise((res) => { const r = st.getAll(range, 500); r.onsuccess = () => res(r.result); });
      st.delete(range);
      if (layout === "B") { const idStore = tx.objectStore("ids"); for (const e of got) idStore.delete(e.e); }
      await txDone(tx);
      remaining -= layout === "G" ? got.reduce((sum, r) => sum + r.n, 0) : got.length;
      const now = performance.now();
      batches.push({ remaining, events: layout === "G" ? got.length * 100 : got.length, ms: now - last });
      last = now;
      if (n - remaining >= limit || now - t0 > Number(q.get("budget") || 600) * 1000) break outer;
    }
  }
  const ms = performance.now() - t0;
  probing = false;
  return { layout, ms, synced: n - remaining, eventsPerSecond: ((n - remaining) / ms) * 1000, batches };
}

try {
  const result = mode === "plain" ? await plain() : await drain();
  await post({ ok: true, mode, n, k, ua: navigator.userAgent, ...result, stats: [...stats.values()], timeline });
} catch (e) {
  await post({ ok: false, mode, n, error: String((e && e.stack) || e), stats: [...stats.values()] });
}
document.getElementById("state").textContent = "done";
