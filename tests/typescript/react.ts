// A consumer of `celeriant-sync/react`'s declarations (pkg/react.d.ts), type-checked by
// `npm test` with the main consumer. Hooks are only called here for their types.
import type {
  AggregateRef,
  ProjectionSnapshot,
  SyncClient,
  SyncStatus,
  TypedAggregateView,
  TypedSyncClient,
} from "../../pkg/celeriant_sync.js";
import { useAggregate, useProjection, useSyncStatus, type SubscribableClient } from "../../pkg/react.js";

interface View {
  version: number;
  events: unknown[];
}

export function hooks(client: SyncClient, reader: SubscribableClient<View>, aggregate: AggregateRef): void {
  const status: SyncStatus = useSyncStatus(client);
  const maybe: SyncStatus | null = useSyncStatus(null);
  const view: View | null = useAggregate(reader, aggregate);
  const none: View | null = useAggregate(reader, null);
  console.log(status.pending, maybe?.state, view?.version, none);
  // @ts-expect-error the status is not nullable for a client
  const wrong: null = useSyncStatus(client);
  // @ts-expect-error the view is the subscriber's type
  const bad: string | null = useAggregate(reader, aggregate);
  console.log(wrong, bad);
}

interface Events {
  1: { amount: number };
  2: { note: string };
}

const total = {
  initial: 0,
  apply: (sum: number, event: { type: number; json(): unknown }) => sum + event.type,
};

export function typedHooks(client: TypedSyncClient<Events>, plain: SyncClient, aggregate: AggregateRef): void {
  const view: TypedAggregateView<Events> | null = useAggregate(client, aggregate);
  const first = view?.events[0];
  if (first?.type === 2) console.log(first.json().note);
  const sum: ProjectionSnapshot<number> | null = useProjection(plain, aggregate, total);
  const amounts: ProjectionSnapshot<number> | null = useProjection(client, aggregate, {
    initial: 0,
    apply: (n, event) => (event.type === 1 ? n + event.json().amount : n),
  });
  console.log(sum?.state, amounts?.state, amounts?.error?.code);
  // @ts-expect-error the state is the projection's type
  const wrong: ProjectionSnapshot<string> | null = useProjection(plain, aggregate, total);
  console.log(wrong);
}
