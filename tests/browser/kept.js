// Helpers of tests/browser_read_kept.rs: the view a catch-up builds from the pages it just stored
// (src/browser/idb/kept.rs) against one read back from IndexedDB.

import { trim } from "./support.js";

/** Cuts the gateway's event pages to at most `n` batches each (`next` pointing at the first
 *  batch cut), so a few batches make a catch-up of several pages, as a gateway with a smaller
 *  `--read-page-bytes` would send. With `trimAt` ({ gateway, secret, typeId, id, before }), the
 *  first cut page served is followed, before it is answered, by a trim of the aggregate on the
 *  server: the next page of that catch-up gets 410. Returns { pages, restore() }. */
export function smallPages(n, trimAt) {
  const real = globalThis.fetch;
  const log = { pages: 0 };
  globalThis.fetch = async (input, init) => {
    const url = input instanceof Request ? input.url : String(input);
    const response = await real(input, init);
    if (!url.includes("/events?") || url.includes("limit=") || response.status !== 200) return response;
    const page = await response.json();
    if (page.batches.length > n) {
      page.batches = page.batches.slice(0, n);
      page.next = page.batches[n - 1].version + 1;
    }
    log.pages += 1;
    if (trimAt && log.pages === 1) {
      await trim(trimAt.gateway, trimAt.secret, trimAt.typeId, trimAt.id, trimAt.before);
    }
    return new Response(JSON.stringify(page), { status: 200, headers: { "content-type": "application/json" } });
  };
  log.restore = () => { globalThis.fetch = real; };
  return log;
}

/** Counts the `log` batches IndexedDB hands back to `getAll` (what a view reads back) until
 *  `restore()`. Returns { batches, restore() }. */
export function countLogReads() {
  const real = IDBObjectStore.prototype.getAll;
  const log = { batches: 0 };
  IDBObjectStore.prototype.getAll = function (...args) {
    const request = real.apply(this, args);
    if (this.name === "log") {
      request.addEventListener("success", () => { log.batches += request.result.length; });
    }
    return request;
  };
  log.restore = () => { IDBObjectStore.prototype.getAll = real; };
  return log;
}

/** Another writer of the database, just before the next view's snapshot: when the next
 *  read-only transaction over `log` and `cursors` begins, a read-write one begun first (so the
 *  snapshot sees it) rewrites every cursor record as it is, without the tag the last page store
 *  wrote, and moves every log batch's `serverTimestamp` by +1 — the log is not what this
 *  context stored any more. Returns { fired, restore() }. */
export function interfereBeforeSnapshot() {
  const real = IDBDatabase.prototype.transaction;
  const log = { fired: 0 };
  IDBDatabase.prototype.transaction = function (stores, mode, options) {
    const names = Array.isArray(stores) ? stores : [stores];
    if (log.fired === 0 && (mode ?? "readonly") === "readonly" && names.includes("log") && names.includes("cursors")) {
      log.fired = 1;
      const tx = real.call(this, ["log", "cursors"], "readwrite");
      const rewrite = (store, change) => {
        tx.objectStore(store).openCursor().onsuccess = (e) => {
          const c = e.target.result;
          if (!c) return;
          const v = { ...c.value };
          change(v);
          c.update(v);
          c.continue();
        };
      };
      rewrite("cursors", (v) => { delete v.r; });
      rewrite("log", (v) => { v.serverTimestamp += 1; });
      tx.oncomplete = () => { log.fired = 2; };
    }
    return real.call(this, stores, mode, options);
  };
  log.restore = () => { IDBDatabase.prototype.transaction = real; };
  return log;
}

/** A view as comparable text: its version, pending count and every event's fields (bytes as
 *  arrays), in order. */
export function viewDigest(view) {
  const bytes = (b) => (b == null ? b : Array.from(b));
  return JSON.stringify({
    version: view.version,
    pending: view.pending,
    events: view.events.map((e) => ({ ...e, data: bytes(e.data), iv: bytes(e.iv) })),
  });
}

/** The `serverTimestamp` of each of a view's events. */
export function serverTimestamps(view) {
  return view.events.map((e) => e.serverTimestamp ?? null);
}
