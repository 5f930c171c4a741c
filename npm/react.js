// celeriant-sync/react: React hooks over a SyncClient, built on useSyncExternalStore so they
// are correct under concurrent rendering. React is a peer dependency: this file imports it and
// nothing is bundled. Types: react.d.ts.
import { useCallback, useMemo, useSyncExternalStore } from "react";

// One cached status snapshot per client. `status()` builds a new object on every call; React
// compares snapshots with Object.is and re-renders (or loops) when the identity changes, so the
// snapshot changes identity only when a field changes.
const statusCache = new WeakMap();

function sameFailure(a, b) {
  if (a === b) return true;
  if (!a || !b) return false;
  return a.code === b.code && a.message === b.message && a.at === b.at;
}

function sameStatus(a, b) {
  if (Object.keys(a).length !== Object.keys(b).length) return false;
  for (const key of Object.keys(a)) {
    if (key === "lastError") {
      if (!sameFailure(a.lastError, b.lastError)) return false;
    } else if (typeof a[key] === "object" && a[key] !== null) {
      // Nested objects added later (e.g. the read side's `read`): compare as JSON.
      if (JSON.stringify(a[key]) !== JSON.stringify(b[key])) return false;
    } else if (!Object.is(a[key], b[key])) {
      return false;
    }
  }
  return true;
}

function statusSnapshot(client) {
  const next = client.status();
  const cached = statusCache.get(client);
  if (cached && sameStatus(cached, next)) return cached;
  statusCache.set(client, next);
  return next;
}

/**
 * The client's status ({ state, role, pending, parked, lastError, read }), re-rendering when it
 * changes (the client's `status` event). `client` may be null/undefined (not open yet): then
 * the hook returns null.
 */
export function useSyncStatus(client) {
  const subscribe = useCallback(
    (notify) => {
      if (!client) return () => {};
      client.addEventListener("status", notify);
      return () => client.removeEventListener("status", notify);
    },
    [client],
  );
  const getSnapshot = useCallback(() => (client ? statusSnapshot(client) : null), [client]);
  return useSyncExternalStore(subscribe, getSnapshot, getSnapshot);
}

function aggregateKey(aggregate) {
  return aggregate ? `${aggregate.typeId}/${aggregate.id}` : "";
}

/**
 * The live view of one aggregate (`client.subscribe`, the read side): null until the first
 * view arrives, then the latest view the client delivered. Views are passed through as they
 * are. Throws if handed something without `subscribe` (not a celeriant-sync `SyncClient`).
 */
export function useAggregate(client, aggregate) {
  if (client && typeof client.subscribe !== "function") {
    throw new Error(
      "useAggregate: this SyncClient has no subscribe(aggregate, listener); pass a celeriant-sync SyncClient (or an object with the same subscribe)",
    );
  }
  const key = aggregateKey(aggregate);
  // The latest view, per (client, aggregate): a new pair starts from null.
  const current = useMemo(() => ({ view: null }), [client, key]);
  const typeId = aggregate ? aggregate.typeId : undefined;
  const id = aggregate ? aggregate.id : undefined;
  const subscribe = useCallback(
    (notify) => {
      if (!client || typeId === undefined) return () => {};
      const unsubscribe = client.subscribe({ typeId, id }, (view) => {
        current.view = view;
        notify();
      });
      return () => unsubscribe();
    },
    // `current` changes exactly when client or aggregate do.
    [client, typeId, id, current],
  );
  const getSnapshot = useCallback(() => current.view, [current]);
  return useSyncExternalStore(subscribe, getSnapshot, getSnapshot);
}

/**
 * A live projection of one aggregate (`client.project(aggregate, projection)`): null until the
 * first fold, then the latest snapshot `{ state, version, pending, fromCache, error }`. The
 * projection is made when the component subscribes and closed when it unsubscribes; a new
 * client, aggregate or `projection` object starts a new one, so keep `projection` stable
 * (defined outside the component, or memoized). Throws if handed something without `project`.
 */
export function useProjection(client, aggregate, projection) {
  if (client && typeof client.project !== "function") {
    throw new Error(
      "useProjection: this SyncClient has no project(aggregate, projection); pass a celeriant-sync SyncClient",
    );
  }
  const key = aggregateKey(aggregate);
  const current = useMemo(() => ({ snapshot: null }), [client, key, projection]);
  const typeId = aggregate ? aggregate.typeId : undefined;
  const id = aggregate ? aggregate.id : undefined;
  const subscribe = useCallback(
    (notify) => {
      if (!client || typeId === undefined || !projection) return () => {};
      const live = client.project({ typeId, id }, projection);
      const unsubscribe = live.subscribe((snapshot) => {
        current.snapshot = snapshot;
        notify();
      });
      return () => {
        unsubscribe();
        live.close();
      };
    },
    [client, typeId, id, projection, current],
  );
  const getSnapshot = useCallback(() => current.snapshot, [current]);
  return useSyncExternalStore(subscribe, getSnapshot, getSnapshot);
}
