// A consumer of the built package, type-checked by `npm test` (tsc --noEmit). It uses the API
// as an app would; every `@ts-expect-error` line must fail to type-check, which proves the
// declarations are precise (a public `any` would let them through and break this file).
import init, {
  SyncClient,
  type AggregateRef,
  type CeleriantSyncError,
  type ParkedEvent,
  type Receipt,
  type SyncStatus,
} from "../../pkg/celeriant_sync.js";

export async function example(): Promise<void> {
  await init();
  const client: SyncClient = await SyncClient.open({
    gatewayUrl: "http://127.0.0.1:8080",
    maxBatchEvents: 100,
    auth: async () => "app-token",
  });
  const id: string = client.clientId;
  const account: AggregateRef = { typeId: crypto.randomUUID(), id };
  const receipts: Receipt[] = await client.append(account, [
    { type: 3, data: { amount: 10 } },
    { type: 4, minor: 1, data: new Uint8Array([1, 2, 3]), eventId: crypto.randomUUID() },
  ]);
  const seq: number = receipts[0]!.clientSeq;
  const status: SyncStatus = client.status();
  const state: "idle" | "syncing" | "backoff" | "offline" | "parked" | "unauthorized" | "closed" = status.state;
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
  try {
    await client.flush();
  } catch (e) {
    const error = e as CeleriantSyncError;
    if (error.code === "PARKED") console.log(error.aggregate?.typeId, error.parkCode);
  }
  const parked: ParkedEvent[] = await client.parkedEvents();
  const bytes: Uint8Array = parked[0]!.data;
  const dropped: number = await client.discardParked(account);
  await client.close();
  console.log(bytes, dropped);

  // @ts-expect-error gatewayUrl is required
  await SyncClient.open({});
  // @ts-expect-error unknown options are not accepted
  await SyncClient.open({ gatewayUrl: "x", retries: 3 });
  // @ts-expect-error durability is a closed set
  await SyncClient.open({ gatewayUrl: "x", durability: "fast" });
  // @ts-expect-error an aggregate needs both ids
  await client.append({ typeId: "x" }, [{ type: 1, data: 1 }]);
  // @ts-expect-error type is required
  await client.append(account, [{ data: 1 }]);
  // @ts-expect-error receipts are typed
  receipts[0]!.sequence;
  // @ts-expect-error only known events can be listened to
  client.addEventListener("landed", () => {});
  client.addEventListener("synced", (event) => {
    // @ts-expect-error the detail is typed per event
    event.detail.code;
  });
  // @ts-expect-error status is not a promise
  await client.status().then;
  // @ts-expect-error error codes are a closed set
  const code: CeleriantSyncError["code"] = "SOMETHING_ELSE";
  console.log(code);
}
