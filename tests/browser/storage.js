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
