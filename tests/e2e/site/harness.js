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
    // A duplicate is what a conditional write whose answer was lost settles as, once its
    // resend's 2003 was read back and found to be its own (the trap).
    this.client.addEventListener("synced", (e) => {
      if (e.detail.duplicate) report("duplicateSynced", { id: e.detail.aggregate.id, firstSeq: e.detail.firstSeq });
    });
    return this.client.clientId;
  },

  status() {
    return this.client.status();
  },

  async append(aggregate, events) {
    return this.client.append(aggregate, events.map((e) => ({ type: e.type, data: new TextEncoder().encode(e.payload) })));
  },

  /** Appends continuously: random aggregate of `aggregates`, 1–3 events, each with a unique
   *  payload; reports each append before it starts and once it resolved. With `transferIds`
   *  (two or more aggregates that nothing else writes), a transfer every `transferEveryMs`
   *  besides (`appendAtomic` across two of them, 1–2 events each), reported per leg as appends
   *  are, and as `transferAppended` with its legs. Runs until `stop()`. */
  startAppending({ typeId, aggregates, loadId, pauseMs = 5, transferIds = [], transferEveryMs = 2000 }) {
    this.appending = true;
    let n = 0;
    let nextTransfer = Date.now() + Math.random() * transferEveryMs;
    const pick = (list) => list[Math.floor(Math.random() * list.length)];
    const transfer = async () => {
      const a = pick(transferIds);
      let b = a;
      while (b === a) b = pick(transferIds);
      const legs = [a, b].map((id) => ({ id, payloads: Array.from({ length: 1 + Math.floor(Math.random() * 2) }, () => `${loadId}:${n++}`) }));
      for (const leg of legs) await report("appending", leg);
      try {
        const receipts = await this.client.appendAtomic(legs.map((leg) => ({
          aggregate: { typeId, id: leg.id },
          events: leg.payloads.map((p) => ({ type: 5, data: new TextEncoder().encode(p) })),
        })));
        legs.forEach((leg, i) => {
          this.appended += leg.payloads.length;
          report("appended", { ...leg, receipts: receipts[i] });
        });
        report("transferAppended", { legs });
      } catch (e) {
        report("appendFailed", { id: a, payloads: legs.flatMap((l) => l.payloads), code: e.code, message: e.message });
      }
    };
    const run = async () => {
      while (this.appending) {
        if (transferIds.length >= 2 && Date.now() >= nextTransfer) {
          nextTransfer = Date.now() + transferEveryMs;
          await transfer();
        }
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

  /**
   * Conditional writes alongside `startAppending`, until `stop()`: in turn a conditional append
   * to one of `guarded` (the aggregate's version read first; one time in four a stale guard, one
   * version behind, so conflicts happen in every run) and, with `counter`, a `decide` that
   * appends the counter's next value (`{ n, p }`: the last confirmed `n` + 1). Reports each
   * append before it is stored (awaited, as in startAppending) and what the client said of it:
   * landed (`whenSynced`/`decide` resolved) or not. A parked append (conflict) is reported with
   * its code and `currentVersion`, then discarded (`sweep`): one left behind by a reload would
   * otherwise hold the aggregate's later conditional appends.
   */
  startConditional({ typeId, guarded = [], counter = null, loadId, pauseMs = 50 }) {
    this.conditional = true;
    let n = 0;
    const one = async () => {
      if (guarded.length && (!counter || Math.random() < 0.5)) {
        const aggregate = { typeId, id: guarded[Math.floor(Math.random() * guarded.length)] };
        const view = await this.client.read(aggregate);
        if (view.fromCache) return;
        const stale = view.version > 0 && Math.random() < 0.25;
        const expectedVersion = view.version - (stale ? 1 : 0);
        const count = 1 + Math.floor(Math.random() * 2);
        const payloads = Array.from({ length: count }, () => `${loadId}:c${n++}`);
        await report("condAppending", { id: aggregate.id, payloads, expectedVersion, stale });
        let receipts;
        try {
          receipts = await this.client.append(aggregate, payloads.map((p) => ({ type: 6, data: new TextEncoder().encode(p) })), { expectedVersion });
        } catch (e) {
          report("condFailed", { id: aggregate.id, payloads, code: e.code, message: e.message });
          return;
        }
        try {
          await Promise.all(receipts.map((r) => this.client.whenSynced(r.eventId)));
          report("condLanded", { id: aggregate.id, payloads, expectedVersion, stale });
        } catch (e) {
          report("condNotLanded", { id: aggregate.id, payloads, expectedVersion, stale, code: e.code });
          await this.sweep([aggregate]);
        }
      } else if (counter) {
        // Each attempt its own payload: a conflicting attempt must appear nowhere, the one
        // decide resolved with exactly once.
        const base = `${loadId}:d${n++}`;
        let payload = null;
        let attempt = 0;
        try {
          const result = await this.client.decide(counter, async (view) => {
            const confirmed = view.events.filter((e) => e.status === "confirmed");
            const last = confirmed.length ? confirmed[confirmed.length - 1].json().n : 0;
            payload = `${base}.${++attempt}`;
            await report("decideAttempting", { payload });
            return [{ type: 7, data: { n: last + 1, p: payload } }];
          }, { maxAttempts: 20 });
          report("decided", { payload, attempts: result.attempts, version: result.version });
        } catch (e) {
          report("decideFailed", { payload, attempts: e.attempts, code: e.code, message: e.message });
          // PARKED: an attempt a reload left behind conflicted and holds the counter.
          if (e.code === "PARKED") await this.sweep([counter]);
        }
      }
    };
    const run = async () => {
      while (this.conditional) {
        try {
          await one();
        } catch (e) {
          report("condError", { message: String(e?.message ?? e) });
        }
        await new Promise((r) => setTimeout(r, pauseMs));
      }
    };
    this.conditionalLoop = run();
  },

  /** Reports the parked events of `aggregates` (payload, code, currentVersion, mayHaveLanded),
   *  then discards them. */
  async sweep(aggregates) {
    const parked = await this.client.parkedEvents();
    for (const aggregate of aggregates) {
      const mine = parked.filter((e) => e.aggregate.id === aggregate.id);
      if (!mine.length) continue;
      await report("swept", {
        id: aggregate.id,
        events: mine.map((e) => ({
          payload: e.type === 7 ? e.json().p : new TextDecoder().decode(e.data),
          code: e.code, currentVersion: e.currentVersion ?? null, mayHaveLanded: e.mayHaveLanded,
        })),
      });
      await this.client.discardParked(aggregate);
    }
  },

  /** `flush(bound)` until nothing is pending; a PARKED (a conflict no loop is left to discard)
   *  is swept from `aggregates` and the flush goes again. */
  async drain(bound, aggregates) {
    for (let round = 0; ; round++) {
      try {
        return await this.flush(bound);
      } catch (e) {
        if (e.code !== "PARKED" || round >= 50) throw e;
        await this.sweep(aggregates);
      }
    }
  },

  /** Stops `startAppending`'s loop; `{ conditional: true }` stops `startConditional`'s too. */
  async stop({ conditional = false } = {}) {
    this.appending = false;
    await this.loop;
    if (conditional) {
      this.conditional = false;
      await this.conditionalLoop;
    }
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
