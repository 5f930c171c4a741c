// celeriant-sync/react: React hooks over a SyncClient (React >= 18 is a peer dependency).
import type { AggregateRef, SyncClient, SyncStatus } from "./celeriant_sync.js";

/**
 * The client's status, re-rendered on every change (the client's `status` event), on
 * `useSyncExternalStore`. Returns `null` while `client` is `null` or `undefined`.
 */
export function useSyncStatus(client: SyncClient): SyncStatus;
export function useSyncStatus(client: SyncClient | null | undefined): SyncStatus | null;

/** A client that can be subscribed to (the read side: `client.subscribe`). */
export interface SubscribableClient<V> {
  subscribe(aggregate: AggregateRef, listener: (view: V) => void): () => void;
}

/**
 * The live view of `aggregate`: `null` until the client delivered the first one, then the
 * latest. Views are passed through unchanged. Throws when the client has no `subscribe`.
 */
export function useAggregate<V>(
  client: SubscribableClient<V> | null | undefined,
  aggregate: AggregateRef | null | undefined,
): V | null;
