// Feature/difference probe: one page, reports what each API does in this engine.
const q = new URLSearchParams(location.search);
const post = (body) => fetch(q.get("report"), { method: "POST", body: JSON.stringify(body) });
const out = { ua: navigator.userAgent };
const within = (p, ms) => Promise.race([p.then((v) => ({ value: v }), (e) => ({ error: describe(e) })), new Promise((r) => setTimeout(() => r({ pending: `no answer within ${ms} ms` }), ms))]);
const describe = (e) => e && typeof e === "object" ? `${e.constructor?.name}/${e.name}: ${e.message}` : String(e);
async function step(name, f) {
  const t0 = performance.now();
  try { out[name] = await f(); } catch (e) { out[name] = { threw: describe(e) }; }
  if (out[name] && typeof out[name] === "object") out[name].ms = Math.round(performance.now() - t0);
}
const req = (r) => new Promise((res, rej) => { r.onsuccess = () => res(r.result); r.onerror = () => rej(r.error); });
const openDb = (name, version, upgrade) => new Promise((res, rej) => {
  const r = version ? indexedDB.open(name, version) : indexedDB.open(name);
  r.onupgradeneeded = () => upgrade && upgrade(r.result, r);
  r.onsuccess = () => res(r.result);
  r.onerror = () => rej(r.error);
  r.onblocked = () => (out.blockedSeen = true);
});
const txDone = (tx) => new Promise((res) => { tx.oncomplete = () => res({ done: "complete" }); tx.onabort = () => res({ done: "abort", error: tx.error ? describe(tx.error) : null }); });

await step("storage", async () => ({
  persisted: await within(navigator.storage.persisted(), 2000),
  persist: await within(navigator.storage.persist(), 3000),
  estimate: navigator.storage ? await within(navigator.storage.estimate(), 2000) : "no navigator.storage",
}));
await step("idbApi", async () => ({
  commit: "commit" in IDBTransaction.prototype,
  durabilityProp: "durability" in IDBTransaction.prototype,
  databases: "databases" in IDBFactory.prototype,
  getAllRecords: "getAllRecords" in IDBObjectStore.prototype,
}));
const name = `features-${Date.now()}`;
const db = await openDb(name, 1, (d) => { const s = d.createObjectStore("s", { keyPath: "k" }); s.createIndex("u", "u", { unique: true }); d.createObjectStore("o"); });
await step("durability", async () => {
  const r = {};
  for (const d of ["strict", "relaxed", "default", "bogus"]) {
    try { const tx = db.transaction("o", "readwrite", { durability: d }); r[d] = tx.durability; tx.abort(); } catch (e) { r[d] = describe(e); }
  }
  return r;
});
await step("constraintAdd", async () => {
  const tx = db.transaction("s", "readwrite");
  const st = tx.objectStore("s");
  st.add({ k: 1, u: "a" });
  const r = st.add({ k: 1, u: "b" });
  const e = await req(r).then(() => null, (e) => describe(e));
  return { request: e, tx: await txDone(tx) };
});
await step("constraintUniqueIndex", async () => {
  const tx = db.transaction("s", "readwrite");
  const st = tx.objectStore("s");
  st.put({ k: 2, u: "x" });
  const r = st.put({ k: 3, u: "x" });
  const e = await req(r).then(() => null, (e) => describe(e));
  return { request: e, tx: await txDone(tx) };
});
await step("dataError", async () => { try { db.transaction("o", "readwrite").objectStore("o").put(1, {}); return { threw: null }; } catch (e) { return { threw: describe(e) }; } });
await step("inactive", async () => {
  const tx = db.transaction("o", "readwrite");
  await new Promise((r) => setTimeout(r, 10));
  try { tx.objectStore("o").put(1, 1); return { threw: null }; } catch (e) { return { threw: describe(e) }; }
});
await step("abortError", async () => {
  const tx = db.transaction("o", "readwrite");
  const r = tx.objectStore("o").put(1, 1);
  tx.abort();
  return { request: await req(r).then(() => null, (e) => describe(e)), txError: tx.error, done: await txDone(tx) };
});
await step("versionError", async () => {
  const d = await openDb(`${name}-v`, 3);
  d.close();
  return { open: await openDb(`${name}-v`, 2).then(() => null, (e) => describe(e)) };
});
await step("closedDb", async () => {
  const d = await openDb(`${name}-c`, 1, (d) => d.createObjectStore("o"));
  d.close();
  try { d.transaction("o"); return { threw: null }; } catch (e) { return { threw: describe(e) }; }
});
await step("versionchange", async () => {
  const events = [];
  const d = await openDb(`${name}-vc`, 1, (d) => d.createObjectStore("o"));
  d.onversionchange = (e) => { events.push(`versionchange ${e.oldVersion}->${e.newVersion}`); d.close(); };
  const d2 = await openDb(`${name}-vc`, 2, (x) => x.createObjectStore("p"));
  d2.close();
  return { events, blocked: !!out.blockedSeen };
});
await step("fetchNetworkError", async () => {
  try { await fetch("http://127.0.0.1:9/v1/write", { method: "POST", body: "{}" }); return { threw: null }; } catch (e) { return { threw: describe(e) }; }
});
await step("fetchAbort", async () => {
  const c = new AbortController();
  const p = fetch(q.get("report").replace("/result", "/slow"), { signal: c.signal });
  setTimeout(() => c.abort(), 50);
  try { await p; return { threw: null }; } catch (e) { return { threw: describe(e) }; }
});
await step("abortSignalTimeout", async () => {
  try { await fetch(q.get("report").replace("/result", "/slow"), { signal: AbortSignal.timeout(50) }); return { threw: null }; } catch (e) { return { threw: describe(e) }; }
});
await step("locks", async () => {
  if (!navigator.locks) return { supported: false };
  const r = { supported: true };
  let release;
  const held = navigator.locks.request("L", () => new Promise((res) => (release = res))).then((v) => "released", (e) => `holder rejected: ${describe(e)}`);
  await new Promise((x) => setTimeout(x, 20));
  r.queryHeld = JSON.stringify(await navigator.locks.query());
  r.ifAvailable = await navigator.locks.request("L", { ifAvailable: true }, (l) => (l === null ? "null (not available)" : "granted"));
  r.steal = await navigator.locks.request("L", { steal: true }, () => "stolen");
  r.holderAfterSteal = await within(held, 500);
  release && release();
  return r;
});
await step("broadcastChannel", async () => {
  const a = new BroadcastChannel("bc"), b = new BroadcastChannel("bc");
  const got = new Promise((res) => (b.onmessage = (e) => res(e.data)));
  const t0 = performance.now();
  a.postMessage({ hello: new Uint8Array([1, 2]) });
  const v = await within(got, 1000);
  const ms = performance.now() - t0;
  a.close(); b.close();
  return { received: JSON.stringify(v), latencyMs: ms };
});
await step("online", async () => ({ onLine: navigator.onLine, ownProp: Object.getOwnPropertyDescriptor(navigator, "onLine") !== undefined, protoProp: !!Object.getOwnPropertyDescriptor(Navigator.prototype, "onLine") }));
await step("timers", async () => {
  const t0 = performance.now();
  for (let i = 0; i < 10; i++) await new Promise((r) => setTimeout(r, 0));
  const nested = (performance.now() - t0) / 10;
  return { setTimeout0Ms: nested, now: performance.now() > 0, timeOrigin: performance.timeOrigin > 0 };
});
await step("workers", async () => {
  const src = `onmessage = async () => { const r = {}; r.idb = typeof indexedDB; r.locks = typeof navigator.locks; r.bc = typeof BroadcastChannel; r.onLine = navigator.onLine; postMessage(r); };`;
  const url = URL.createObjectURL(new Blob([src], { type: "text/javascript" }));
  const w = new Worker(url, { type: "module" });
  const v = await within(new Promise((res) => { w.onmessage = (e) => res(e.data); w.onerror = (e) => res({ error: e.message }); w.postMessage(1); }), 3000);
  w.terminate();
  return v;
});
await step("serviceWorker", async () => ({ supported: "serviceWorker" in navigator, secure: isSecureContext }));
await step("quota", async () => {
  if (q.get("quota") !== "1") return { skipped: true };
  const d = await openDb(`${name}-q`, 1, (d) => d.createObjectStore("o"));
  const chunk = new Uint8Array(10 * 1024 * 1024);
  crypto.getRandomValues(chunk.subarray(0, 65536));
  let written = 0;
  for (let i = 0; i < Number(q.get("quotaMb") || 1500) / 10; i++) {
    const tx = d.transaction("o", "readwrite");
    const r = tx.objectStore("o").put(chunk.slice(), i);
    const reqErr = req(r).then(() => null, (e) => describe(e));
    const done = await txDone(tx);
    if (done.done !== "complete") return { writtenMb: written, requestError: await reqErr, tx: done, estimate: navigator.storage ? await within(navigator.storage.estimate(), 2000) : "no navigator.storage" };
    written += 10;
  }
  return { writtenMb: written, noError: true, estimate: navigator.storage ? await within(navigator.storage.estimate(), 2000) : "no navigator.storage" };
});
await post({ ok: true, ...out });
document.getElementById("state").textContent = "done";
