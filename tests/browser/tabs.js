// Helpers of tests/browser_tabs.rs: the drainer closed while its reader's page store is under
// way, with the drain lock held by the test so that no other context catches the page up.

/** Requests the drain lock `name` (queued behind its holder); returns { granted, release() }:
 *  `granted` resolves once the test holds it, `release()` lets it go. */
export function holdLock(name) {
  let release;
  const held = new Promise((resolve) => (release = resolve));
  let granted;
  const grantedPromise = new Promise((resolve) => (granted = resolve));
  navigator.locks.request(name, () => {
    granted();
    return held;
  });
  return { granted: grantedPromise, release: () => release() };
}

/** Closes `client` as its reader's next page store begins: the first read-write transaction
 *  of database `db` over exactly the stores `log`, `cursors` and `counters` (the page and its
 *  cursor, src/browser/idb/log.rs) is created, then `client.close()` is called from a
 *  microtask, before that transaction can commit. Returns { closed }: a promise of the close,
 *  resolved once it ended. The patch of `IDBDatabase.prototype.transaction` goes at once. */
export function closeAsPageStoreBegins(client, db) {
  const real = IDBDatabase.prototype.transaction;
  let fire;
  const closed = new Promise((resolve) => (fire = resolve));
  IDBDatabase.prototype.transaction = function (names, mode, options) {
    const tx = real.call(this, names, mode, options);
    const scope = Array.from(typeof names === "string" ? [names] : names).sort().join(",");
    if (this.name === db && mode === "readwrite" && scope === "counters,cursors,log") {
      IDBDatabase.prototype.transaction = real;
      queueMicrotask(() => fire(client.close()));
    }
    return tx;
  };
  return { closed };
}
