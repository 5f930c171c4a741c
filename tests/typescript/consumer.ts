// A consumer of the built package, type-checked by `npm test` (tsc --noEmit). It uses the API
// as an app would; every `@ts-expect-error` line must fail to type-check, which proves the
// declarations are precise (a public `any` would let them through and break this file).
import init, {
  SyncClient,
  CeleriantSyncError as SyncError,
  isCeleriantSyncError,
  ServerCode,
  type Projection,
  type ProjectionSnapshot,
  type TypedAggregateView,
  type TypedSyncClient,
  type TypedViewEvent,
  type AggregateRef,
  type AggregateView,
  type AtomicWrite,
  type CeleriantSyncError,
  type DecideResult,
  type InspectSnapshot,
  type MemberAccess,
  type Members,
  type ParkedEvent,
  type ReadStatus,
  type Receipt,
  type SyncStatus,
  type ViewEvent,
  type WatchRefusal,
} from "../../pkg/celeriant_sync.js";

export async function example(): Promise<void> {
  await init();
  const client: SyncClient = await SyncClient.open({
    gatewayUrl: "http://127.0.0.1:8080",
    maxBatchEvents: 100,
    auth: async () => "app-token",
    user: "user-42",
  });
  const id: string = client.clientId;
  const account: AggregateRef = { typeId: crypto.randomUUID(), id };
  const receipts: Receipt[] = await client.append(account, [
    { type: 3, data: { amount: 10 } },
    { type: 4, minor: 1, data: new Uint8Array([1, 2, 3]), eventId: crypto.randomUUID() },
  ]);
  const seq: number = receipts[0]!.clientSeq;
  const status: SyncStatus = client.status();
  const state: "idle" | "syncing" | "backoff" | "offline" | "parked" | "unauthorized" | "wrongUser" | "closed" = status.state;
  const publicKey: string = client.publicKey;
  const lastCode: number | null = status.lastError?.code ?? null;
  client.addEventListener("synced", (event) => {
    const ids: string[] = event.detail.eventIds;
    const dup: boolean = event.detail.duplicate;
    console.log(ids, dup, seq, state, lastCode, publicKey);
  });
  client.addEventListener("parked", (event) => {
    const code: number = event.detail.code;
    const maybe: boolean = event.detail.mayHaveLanded;
    console.log(code, maybe);
  });
  client.addEventListener("status", (event) => console.log(event.detail.pending));
  client.addEventListener("storage", (event) => {
    const storageState: "ok" | "reopening" | "lost" = event.detail.state;
    const lostPending: number | undefined = event.detail.lost?.pending;
    console.log(storageState, lostPending, client.storage.lost?.aggregates[0]?.count);
  });
  try {
    await client.flush();
  } catch (e) {
    const error = e as CeleriantSyncError;
    if (error.code === "PARKED") console.log(error.aggregate?.typeId, error.parkCode);
  }
  const parked: ParkedEvent[] = await client.parkedEvents();
  const bytes: Uint8Array = parked[0]!.data;
  const dropped: number = await client.discardParked(account);
  // The network switch: a method and a read-only flag; `offline` at open.
  client.setOffline(true);
  const off: boolean = client.offline;
  // @ts-expect-error the flag is read-only: switch with setOffline
  client.offline = false;
  const quiet: SyncClient = await SyncClient.open({ gatewayUrl: "http://127.0.0.1:8080", offline: off });
  await quiet.close();
  await client.signOut({ discardPending: true });
  await SyncClient.deleteDatabase("celeriant-sync-user-42");
  // @ts-expect-error signOut's only option is discardPending
  await client.signOut({ discard: true });
  await client.close();
  console.log(bytes, dropped);

  // @ts-expect-error gatewayUrl is required
  await SyncClient.open({});
  // @ts-expect-error unknown options are not accepted
  await SyncClient.open({ gatewayUrl: "x", retries: 3 });
  // @ts-expect-error durability is a closed set
  await SyncClient.open({ gatewayUrl: "x", durability: "fast" });
  const aesKey: CryptoKey = await crypto.subtle.generateKey({ name: "AES-GCM", length: 256 }, false, ["encrypt", "decrypt"]);
  await SyncClient.open({ gatewayUrl: "x", encryption: aesKey });
  await SyncClient.open({ gatewayUrl: "x", encryption: { key: async (a) => (a.typeId ? aesKey : null), types: [1, 2] } });
  // @ts-expect-error encrypted types are event type numbers
  await SyncClient.open({ gatewayUrl: "x", encryption: { key: aesKey, types: ["a"] } });
  // @ts-expect-error an aggregate needs both ids
  await client.append({ typeId: "x" }, [{ type: 1, data: 1 }]);
  // @ts-expect-error type is required
  await client.append(account, [{ data: 1 }]);
  const guarded: Receipt[] = await client.append(account, [{ type: 1, data: 1 }], { expectedVersion: 0 });
  // @ts-expect-error expectedVersion is the only append option
  await client.append(account, [{ type: 1, data: 1 }], { expected: 0 });
  const decided: DecideResult = await client.decide(account, (view) =>
    view.version < 3 ? [{ type: 1, data: { n: view.version + 1 } }] : null,
  );
  await client.decide(account, async () => [], { maxAttempts: 3 });
  const attempts: number = decided.attempts;
  // @ts-expect-error decide's only option is maxAttempts
  await client.decide(account, () => null, { retries: 3 });
  // An atomic write: receipts per write; each write names its aggregate, events and guard.
  const moved: Receipt[][] = await client.appendAtomic([
    { aggregate: account, events: [{ type: 1, data: { amount: -5 } }], expectedVersion: 3 },
    { aggregate: { typeId: "t", id: "b" }, events: [{ type: 1, data: { amount: 5 } }] },
  ]);
  const legs: AtomicWrite[] = [{ aggregate: account, events: [] }];
  // @ts-expect-error a write's only fields are aggregate, events and expectedVersion
  await client.appendAtomic([{ aggregate: account, events: [], force: true }]);
  // @ts-expect-error appendAtomic takes an array of writes
  await client.appendAtomic({ aggregate: account, events: [] });
  for (const p of await client.parkedEvents()) {
    const others: AggregateRef[] | undefined = p.atomicWith;
    console.log(others);
  }
  console.log(guarded, attempts, moved, legs);
  try {
    await client.decide(account, () => [{ type: 1, data: 1 }]);
  } catch (e) {
    // A rejection that may still land carries the attempt: track it, never decide again.
    if (isCeleriantSyncError(e) && e.mayHaveLanded === true && e.eventIds) {
      const pending: boolean | undefined = e.pendingBehindPark;
      const range: [number | undefined, number | undefined] = [e.firstSeq, e.lastSeq];
      const tracked: Receipt[] | undefined = e.receipts;
      console.log(pending, range, tracked, e.blockingParkMayHaveLanded);
      await client.whenSynced(e.eventIds[0]!);
    }
  }
  // @ts-expect-error receipts are typed
  receipts[0]!.sequence;
  // @ts-expect-error only known events can be listened to
  client.addEventListener("landed", () => {});
  client.addEventListener("synced", (event) => {
    // @ts-expect-error the detail is typed per event
    event.detail.code;
  });
  client.addEventListener("storage", (event) => {
    // @ts-expect-error the storage state is a closed set
    const bad: "gone" = event.detail.state;
    console.log(bad);
  });
  // @ts-expect-error status is not a promise
  await client.status().then;
  // @ts-expect-error error codes are a closed set
  const code: CeleriantSyncError["code"] = "SOMETHING_ELSE";
  console.log(code);
}

export async function inspecting(client: SyncClient): Promise<void> {
  const snap: InspectSnapshot = await client.inspect();
  const context: "this" | "other" | "none" = snap.drainer.context;
  const holder: string | null = snap.drainer.lockHolder;
  const pinned = snap.pinned;
  if (pinned) {
    const range: [number, number] = [pinned.firstSeq, pinned.lastSeq];
    const attempts: number | null = pinned.attempts;
    const last: "landed" | "duplicate" | "retry" | "unknown" | "unauthorized" | "rejected" | undefined =
      pinned.lastOutcome?.outcome;
    const lastCode: number | null | undefined = pinned.lastOutcome?.code;
    console.log(range, attempts, last, lastCode, pinned.nextAttemptAt);
  }
  const pending: number[] = snap.aggregates.map((a) => a.pending);
  const reasons: string[] = snap.parked.map((p) => `${p.code} ${p.message}`);
  const withPayloads = await client.inspect({ payloads: true });
  console.log(context, holder, pending, reasons, withPayloads.outcomes.length, snap.outcomesKept);
  // @ts-expect-error options are typed
  await client.inspect({ payload: true });
  // @ts-expect-error outcomes are a closed set
  const bad: InspectSnapshot["outcomes"][number]["outcome"] = "maybe";
  console.log(bad);
}

export async function reading(client: SyncClient, aggregate: AggregateRef): Promise<void> {
  const view: AggregateView = await client.read(aggregate);
  const version: number = view.version;
  const cached: boolean = view.fromCache;
  const first: ViewEvent | undefined = view.events[0];
  if (first) {
    const status: "confirmed" | "pending" = first.status;
    const at: number | undefined = first.version;
    const bytes: Uint8Array = first.data;
    const value: unknown = first.json();
    console.log(status, at, bytes.length, value, first.parked?.code);
  }
  const unsubscribe: () => void = client.subscribe(aggregate, (v) => {
    const pending: number = v.pending;
    console.log(pending, v.aggregate.typeId);
  });
  unsubscribe();
  const state: ReadStatus["state"] = client.status().read.state;
  const refusals: WatchRefusal[] = client.status().read.refused;
  const refusedCode: number | undefined = refusals[0]?.code;
  const refusedId: string | undefined = refusals[0]?.aggregate.id;
  console.log(version, cached, state, refusedCode, refusedId);
  // @ts-expect-error a listener gets a view, not events
  client.subscribe(aggregate, (events: ViewEvent[]) => events.length);
  // @ts-expect-error read states are a closed set
  const bad: ReadStatus["state"] = "streaming";
  console.log(bad);
}

export async function sharing(client: SyncClient, aggregate: AggregateRef): Promise<void> {
  const shared: Members = await client.share(aggregate, "user:bob", "readWrite");
  const owner: string = shared.owner;
  const bob: MemberAccess | undefined = shared.members["user:bob"];
  const after: Members = await client.unshare(aggregate, "user:bob");
  const listed: Members = await client.members(aggregate);
  const invited: MemberAccess | undefined = shared.invited["user:bob"];
  const accepted: Members = await client.acceptShare(aggregate);
  console.log(owner, bob, invited, after.members, listed.owner, accepted.members);
  try {
    await client.acceptShare(aggregate);
  } catch (e) {
    const error = e as CeleriantSyncError;
    if (error.code === "NOT_FOUND") console.log(error.serverCode);
  }
  // @ts-expect-error acceptShare takes the aggregate only
  await client.acceptShare(aggregate, "user:bob");
  try {
    await client.share(aggregate, "device:" + client.clientId, "read");
  } catch (e) {
    const error = e as CeleriantSyncError;
    if (error.code === "NOT_OWNER" || error.code === "OFFLINE") console.log(error.serverCode);
  }
  // @ts-expect-error access is "read" or "readWrite"
  await client.share(aggregate, "user:bob", "write");
  // @ts-expect-error unshare takes no access
  await client.unshare(aggregate, "user:bob", "read");
  // @ts-expect-error a grant is a closed set
  const grant: MemberAccess = "admin";
  console.log(grant);
}

// The app's event types, declared once.
interface BankEvents {
  1: { amount: number };
  2: { to: string; amount: number };
}

export async function typedEvents(aggregate: AggregateRef): Promise<void> {
  const client: TypedSyncClient<BankEvents> = await SyncClient.open<BankEvents>({ gatewayUrl: "http://127.0.0.1:8080" });
  await client.append(aggregate, [
    { type: 1, data: { amount: 10 } },
    { type: 2, data: { to: "bob", amount: 3 }, eventId: crypto.randomUUID() },
  ]);
  // @ts-expect-error a type-1 payload has an amount, not a name
  await client.append(aggregate, [{ type: 1, data: { name: "x" } }]);
  // @ts-expect-error a type-2 payload needs `to`
  await client.append(aggregate, [{ type: 2, data: { amount: 3 } }]);
  // @ts-expect-error type 3 is not one of the app's types
  await client.append(aggregate, [{ type: 3, data: {} }]);
  const view: TypedAggregateView<BankEvents> = await client.read(aggregate);
  for (const event of view.events) {
    // `type` narrows `json()`.
    if (event.type === 2) {
      const to: string = event.json().to;
      console.log(to, event.status, event.clientSeq);
    } else {
      const amount: number = event.json().amount;
      // @ts-expect-error a type-1 payload has no `to`
      event.json().to;
      console.log(amount);
    }
  }
  client.subscribe(aggregate, (v) => {
    const first: TypedViewEvent<BankEvents> | undefined = v.events[0];
    console.log(first?.type === 1 ? first.json().amount : 0);
  });
  const balance: Projection<number> = client.project(aggregate, {
    initial: 0,
    apply: (total, event) => (event.type === 1 ? total + event.json().amount : total - event.json().amount),
  });
  const snapshot: ProjectionSnapshot<number> | null = balance.current;
  const now: number = await balance.value();
  const stop: () => void = balance.subscribe((s) => console.log(s.state + 1, s.pending, s.error?.code));
  stop();
  balance.close();
  client.project(aggregate, {
    initial: 0,
    // @ts-expect-error a type-1 payload's amount is a number, not a string
    apply: (total: number, event) => (event.type === 1 ? total + event.json().amount.length : total),
  });
  const parked = await client.parkedEvents();
  const p = parked[0];
  if (p && p.type === 1) console.log(p.json().amount);
  // Everything else of the client is there, untyped.
  console.log(client.status().pending, snapshot, now);
  await client.flush();
}

export async function typedErrors(client: SyncClient, aggregate: AggregateRef): Promise<void> {
  try {
    await client.flush();
  } catch (e) {
    if (e instanceof SyncError) {
      const code: SyncError["code"] = e.code;
      const base: Error = e;
      if (e.code === "PARKED" && e.parkCode === ServerCode.SCHEMA_VALIDATION_FAILED) console.log(e.aggregate?.id);
      console.log(code, base.message, e.cause);
    }
    if (isCeleriantSyncError(e)) {
      const serverCode: number | undefined = e.serverCode;
      console.log(serverCode, e.name);
    }
  }
  // Untyped projections: events are `ViewEvent`s, payloads `unknown`.
  const count: Projection<number> = client.project(aggregate, { initial: 0, apply: (n, event) => n + event.clientSeq });
  const failed: SyncError | null | undefined = count.current?.error;
  if (failed?.code === "PROJECTION_FAILED") console.log(failed.event?.type, failed.cause);
  const parked: ParkedEvent[] = await client.parkedEvents();
  const payload: unknown = parked[0]?.json();
  const conflict: number = ServerCode.OPTIMISTIC_CONCURRENCY_VIOLATION;
  console.log(payload, conflict);
  // @ts-expect-error only the client makes errors
  new SyncError("x");
  // @ts-expect-error a projection needs apply
  client.project(aggregate, { initial: 0 });
  // @ts-expect-error not a server code name
  ServerCode.SOMETHING_ELSE;
}
