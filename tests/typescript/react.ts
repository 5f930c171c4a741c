// A consumer of `celeriant-sync/react`'s declarations (pkg/react.d.ts), type-checked by
// `npm test` with the main consumer. Hooks are only called here for their types.
import type { AggregateRef, SyncClient, SyncStatus } from "../../pkg/celeriant_sync.js";
import { useAggregate, useSyncStatus, type SubscribableClient } from "../../pkg/react.js";

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
