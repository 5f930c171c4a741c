// celeriant-sync/react: React hooks over a SyncClient (React >= 18 is a peer dependency).
import type {
  AggregateRef,
  Projection,
  ProjectionOptions,
  ProjectionSnapshot,
  SyncClient,
  SyncStatus,
} from "./celeriant_sync.js";

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

/** A client that can project (`client.project`); `V` is its view events' type. */
export interface ProjectableClient<V> {
  project<S>(aggregate: AggregateRef, projection: ProjectionOptions<S, V>): Projection<S>;
}

/**
 * A live projection of `aggregate` (`client.project`): `null` until the first fold, then the
 * latest snapshot. Made when the component subscribes, closed when it unsubscribes; keep
 * `projection` stable (a new object starts a new projection). With a `TypedSyncClient<E>`,
 * `apply` gets the app's typed events.
 */
export function useProjection<S, V>(
  client: ProjectableClient<V> | null | undefined,
  aggregate: AggregateRef | null | undefined,
  projection: ProjectionOptions<S, V>,
): ProjectionSnapshot<S> | null;
