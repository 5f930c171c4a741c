// Where a measurement's time goes, without DevTools attached: `&trace=1` on a bench page loads
// this before the client, and it wraps the platform's prototypes (`fetch`, `Response` bodies,
// large `JSON.parse`s, IndexedDB transactions and their requests) to note when each began and
// ended. The wrappers cost a little, on both sides alike; a traced run is for the breakdown in
// docs/benchmarks.md, not a benchmark result. `BENCH_TRACE=1 BENCH_DEBUG=1 npm run bench --
// --only catchup` prints each run's trace (bench/run.mjs).
const log = [];
let t0 = 0;
const now = () => performance.now() - t0;
const note = (what, start, end = start) => log.push([Math.round(start * 10) / 10, what, Math.round((end - start) * 10) / 10]);

export function install() {
  const realFetch = globalThis.fetch;
  globalThis.fetch = function (input, init) {
    const url = String(input && input.url ? input.url : input);
    const path = url.replace(/^https?:\/\/[^/]+/, "").replace(/[0-9a-f-]{36}/g, "…");
    const start = now();
    const p = realFetch.call(this, input, init);
    p.then(() => note(`fetch ${(init && init.method) || "GET"} ${path} (headers)`, start, now()), () => {});
    return p;
  };
  for (const name of ["text", "json"]) {
    const real = Response.prototype[name];
    Response.prototype[name] = function () {
      const start = now();
      const p = real.call(this);
      p.then(() => note(`body ${name}()`, start, now()), () => {});
      return p;
    };
  }
  const realParse = JSON.parse;
  JSON.parse = function (text, reviver) {
    if (typeof text !== "string" || text.length < 100_000) return realParse(text, reviver);
    const start = now();
    const v = realParse(text, reviver);
    note(`JSON.parse ${(text.length / 1048576).toFixed(2)} MiB`, start, now());
    return v;
  };
  let next = 1;
  const txs = new WeakMap();
  const realTx = IDBDatabase.prototype.transaction;
  IDBDatabase.prototype.transaction = function (stores, mode, options) {
    const tx = realTx.call(this, stores, mode, options);
    const t = { id: next++, stores: [].concat(stores).join("+"), mode: mode || "readonly", begun: now(), puts: 0, putMs: 0, firstPut: null, lastPut: null, reqs: [], commit: null };
    txs.set(tx, t);
    const end = (how) => () => {
      const r = t.reqs.map(([k, a, b]) => `${k}@${a.toFixed(1)}→${b === null ? "?" : b.toFixed(1)}`).join(" ");
      note(`tx#${t.id} ${t.mode} ${t.stores} ${how}; ${t.puts} puts ${t.putMs.toFixed(1)} ms sync` +
        (t.firstPut === null ? "" : ` from ${t.firstPut.toFixed(1)} to ${t.lastPut.toFixed(1)}`) +
        (t.commit === null ? "" : `; commit() at ${t.commit.toFixed(1)}`) + (r ? `; ${r}` : ""), t.begun, now());
    };
    tx.addEventListener("complete", end("complete"));
    tx.addEventListener("abort", end("abort"));
    return tx;
  };
  const realCommit = IDBTransaction.prototype.commit;
  if (realCommit) {
    IDBTransaction.prototype.commit = function () {
      const t = txs.get(this);
      if (t) t.commit = now();
      return realCommit.call(this);
    };
  }
  const realPut = IDBObjectStore.prototype.put;
  IDBObjectStore.prototype.put = function (value, key) {
    const t = txs.get(this.transaction);
    const start = now();
    const r = key === undefined ? realPut.call(this, value) : realPut.call(this, value, key);
    const end = now();
    if (t) {
      t.puts += 1;
      t.putMs += end - start;
      if (t.firstPut === null) t.firstPut = start;
      t.lastPut = end;
    }
    return r;
  };
  for (const name of ["get", "getAll", "getAllKeys", "count", "delete"]) {
    const real = IDBObjectStore.prototype[name];
    IDBObjectStore.prototype[name] = function (...args) {
      const t = txs.get(this.transaction);
      const r = real.apply(this, args);
      if (t) {
        const entry = [`${name}(${this.name})`, now(), null];
        t.reqs.push(entry);
        r.addEventListener("success", () => (entry[2] = now()));
      }
      return r;
    };
  }
}

/** The measured interval starts now. */
export function start() {
  t0 = performance.now();
  log.length = 0;
}

/** What happened since `start`, in order: `[ms from start, what, ms it took]`. */
export function entries() {
  return log.filter((e) => e[0] >= 0).sort((a, b) => a[0] - b[0]);
}
