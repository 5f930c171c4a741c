// Helpers of tests/browser_storage.rs: the storage going away under a running client (another
// connection deleting the database, an existence check that creates nothing) and the engine's own
// storage estimate to compare `inspect()` with. Separate from support.js to keep files small.

/** Collects a client's `storage` event details' states (and the last detail). */
export function listenStorage(client) {
  const seen = { states: [], last: null };
  client.addEventListener("storage", (e) => { seen.states.push(e.detail.state); seen.last = e.detail; });
  return seen;
}

/** Deletes a database from another connection, as another tab's `indexedDB.deleteDatabase`
 *  (or the user clearing site data) would; resolves once it is gone. */
export function deleteRaw(dbName) {
  return new Promise((resolve, reject) => {
    const req = indexedDB.deleteDatabase(dbName);
    req.onerror = () => reject(req.error);
    req.onsuccess = () => resolve(true);
  });
}

/** Whether a database exists, without creating it (an open that finds none aborts its
 *  upgrade, which leaves nothing behind). */
export function existsRaw(dbName) {
  return new Promise((resolve, reject) => {
    let created = false;
    const req = indexedDB.open(dbName);
    req.onupgradeneeded = (e) => {
      if (e.oldVersion === 0) { created = true; req.transaction.abort(); }
    };
    req.onerror = () => (created ? resolve(false) : reject(req.error));
    req.onsuccess = () => { req.result.close(); resolve(!created); };
  });
}

/** The engine's own `navigator.storage.estimate()`, or null where it lacks it or refuses. */
export async function engineEstimate() {
  try {
    const e = await navigator.storage.estimate();
    return e && typeof e === "object" ? e : null;
  } catch {
    return null;
  }
}

/** Holds `store` of `dbName` with a read-write transaction of another connection (requests one
 *  after another, up to `ms`) from the moment the next open of `dbName` in this page succeeds:
 *  the client's first transaction on that connection waits. Armed before any transaction runs
 *  (in Firefox a running transaction holds up an open that follows one failing with
 *  `VersionError`, which a reopen after another context's upgrade does). Resolves, once armed,
 *  to `{ held, done }`: promises settled when the hold began and when it ended. Another
 *  context's `versionchange` ends it at once (aborted, connection closed), as a well-behaved tab
 *  would. */
export function holdStoreOnNextOpen(dbName, store, ms) {
  return new Promise((resolve, reject) => {
    const req = indexedDB.open(dbName);
    req.onerror = () => reject(req.error);
    req.onsuccess = () => {
      const db = req.result, open = IDBFactory.prototype.open;
      let tx = null, began, ended;
      const held = new Promise((ok) => { began = ok; });
      const done = new Promise((ok) => { ended = ok; });
      db.onversionchange = () => { try { if (tx) tx.abort(); } catch (_) { /* finished */ } db.close(); if (!tx) ended(false); };
      const hold = () => {
        tx = db.transaction(store, "readwrite");
        const s = tx.objectStore(store), end = Date.now() + ms;
        tx.oncomplete = tx.onabort = () => { db.close(); ended(true); };
        const spin = () => { if (Date.now() < end) s.get("hold").onsuccess = spin; };
        spin();
        began(true);
      };
      IDBFactory.prototype.open = function (name, ...rest) {
        const r = open.call(this, name, ...rest);
        // Ours before the client's own `success` handler: the hold begins before the client's
        // first transaction on the connection does.
        if (name === dbName) {
          r.addEventListener("success", () => {
            if (IDBFactory.prototype.open === open) return;
            IDBFactory.prototype.open = open;
            hold();
          });
        }
        return r;
      };
      resolve({ held, done });
    };
  });
}
