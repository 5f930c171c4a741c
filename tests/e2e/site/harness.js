// The page each end-to-end tab loads: one SyncClient on a shared database, driven by
// tests/e2e/*.mjs through `window.harness` and reporting back through exposed bindings.
import init, { SyncClient } from "/pkg/celeriant_sync.js";

const params = new URLSearchParams(location.search);
const report = (kind, data) => globalThis.e2eReport?.({ kind, tab: params.get("tab"), ...data });

await init();

const harness = {
  client: null,
  appending: false,
  appended: 0,

  async open(options) {
    this.client = await SyncClient.open({ gatewayUrl: location.origin, ...options });
    this.client.addEventListener("status", (e) => report("status", { status: e.detail }));
    return this.client.clientId;
  },

  status() {
    return this.client.status();
  },

  async append(aggregate, events) {
    return this.client.append(aggregate, events.map((e) => ({ type: e.type, data: new TextEncoder().encode(e.payload) })));
  },

  /** Appends continuously: random aggregate of `aggregates`, 1–3 events, each with a unique
   *  payload; reports each append before it starts and once it resolved. Runs until `stop()`. */
  startAppending({ typeId, aggregates, loadId, pauseMs = 5 }) {
    this.appending = true;
    let n = 0;
    const run = async () => {
      while (this.appending) {
        const id = aggregates[Math.floor(Math.random() * aggregates.length)];
        const count = 1 + Math.floor(Math.random() * 3);
        const payloads = Array.from({ length: count }, () => `${loadId}:${n++}`);
        // Awaited: the binding's promise resolves only once the test has recorded the payloads,
        // so no event can be appended (and land) without the test knowing it was attempted. A
        // report sent just before a reload is otherwise lost with the old document.
        await report("appending", { id, payloads });
        try {
          const receipts = await this.append({ typeId, id }, payloads.map((payload) => ({ type: 5, payload })));
          this.appended += count;
          report("appended", { id, payloads, receipts });
        } catch (e) {
          report("appendFailed", { id, payloads, code: e.code, message: e.message });
        }
        await new Promise((r) => setTimeout(r, pauseMs));
      }
    };
    this.loop = run();
  },

  async stop() {
    this.appending = false;
    await this.loop;
  },

  /**
   * `client.flush()`, bounded. A number is a fixed window; `{ stallMs, limitMs }` fails only
   * when nothing has landed for `stallMs` (the pending count has not gone down), or after
   * `limitMs` in all: under injected faults a drain's pace is a random walk of backoffs, and
   * what must hold is that it keeps making progress. On a timeout the error carries this
   * context's status and inspect() (the drainer's pinned batch and its last outcomes say why
   * the drain did not finish).
   */
  async flush(bound) {
    const { stallMs, limitMs } = typeof bound === "number" ? { stallMs: bound, limitMs: bound } : bound;
    const started = Date.now();
    let lowest = this.client.status().pending;
    let progressAt = started;
    let timer;
    try {
      await Promise.race([
        this.client.flush(),
        new Promise((_, reject) => {
          timer = setInterval(async () => {
            const now = Date.now();
            const pending = this.client.status().pending;
            if (pending < lowest) [lowest, progressAt] = [pending, now];
            const why = now - started > limitMs ? `after ${limitMs} ms in all`
              : now - progressAt > stallMs ? `with nothing landed for ${stallMs} ms (${pending} pending)` : null;
            if (!why) return;
            clearInterval(timer);
            let detail = "";
            try { detail = JSON.stringify({ status: this.client.status(), inspect: await this.client.inspect() }); } catch (e) { detail = String(e); }
            reject(new Error(`flush timed out ${why} ${detail}`));
          }, 250);
        }),
      ]);
    } finally {
      clearInterval(timer);
    }
    return this.client.status();
  },

  whenSynced(id) {
    return this.client.whenSynced(id);
  },

  /** Events left in this database's outbox, counted directly in IndexedDB: a record's key is
   *  `[t, a, seq]` (one event) or `[t, a, last, n]` (a run of n; src/browser/idb/records.rs). */
  countOutbox(dbName) {
    return new Promise((resolve, reject) => {
      const open = indexedDB.open(dbName);
      open.onerror = () => reject(open.error);
      open.onsuccess = () => {
        const db = open.result;
        const req = db.transaction("outbox", "readonly").objectStore("outbox").getAllKeys();
        req.onsuccess = () => { db.close(); resolve(req.result.reduce((n, k) => n + (k.length > 3 ? k[3] : 1), 0)); };
        req.onerror = () => { db.close(); reject(req.error); };
      };
    });
  },

  close() {
    return this.client.close();
  },

  /** Subscribes to an aggregate, recording every view as keys `clientId:clientSeq:status`. */
  watch(aggregate) {
    this.watched ??= new Map();
    const log = { views: [] };
    log.unsubscribe = this.client.subscribe(aggregate, (view) => {
      log.views.push(view.events.map((e) => `${e.clientId}:${e.clientSeq}:${e.status}`));
    });
    this.watched.set(aggregate.id, log);
  },

  /** The last view recorded for an aggregate, and what is wrong with its history (or null):
   *  an event twice in one view, an event gone after being shown, confirmed then pending. */
  watchReport(id) {
    const { views } = this.watched.get(id);
    const seen = new Map();
    let problem = null;
    for (let i = 0; i < views.length && !problem; i++) {
      const now = new Map();
      for (const key of views[i]) {
        const cut = key.lastIndexOf(":");
        const [event, status] = [key.slice(0, cut), key.slice(cut + 1)];
        if (now.has(event)) problem = `view ${i}: ${event} twice`;
        now.set(event, status);
        if (seen.get(event) === "confirmed" && status === "pending") problem = `view ${i}: ${event} pending again`;
      }
      for (const [event] of seen) if (!now.has(event)) problem ??= `view ${i}: ${event} disappeared`;
      for (const [event, status] of now) seen.set(event, status);
    }
    return { last: views[views.length - 1] ?? null, count: views.length, problem };
  },

  async read(aggregate) {
    const view = await this.client.read(aggregate);
    return { keys: view.events.map((e) => `${e.clientId}:${e.clientSeq}:${e.status}`), pending: view.pending, fromCache: view.fromCache };
  },
};

globalThis.harness = harness;
document.getElementById("state").textContent = "ready";
