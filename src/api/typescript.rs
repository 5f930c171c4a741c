//! The TypeScript declarations of everything the API takes and returns, in one place.
//!
//! wasm-bindgen writes the class; the shapes it takes and returns are declared here and named
//! in `unchecked_param_type` / `unchecked_return_type`, so nothing public is `any`. The
//! `SyncClient` interface below merges with the generated class to give `addEventListener` its
//! per-event types.

use wasm_bindgen::prelude::*;

#[wasm_bindgen(typescript_custom_section)]
const TS: &'static str = r#"
/** Options of `SyncClient.open`. Unknown keys are refused. */
export interface SyncClientOptions {
    /** The gateway's base URL, e.g. `"http://127.0.0.1:8080"`. */
    gatewayUrl: string;
    /** IndexedDB database name (default `"celeriant-sync"`). One outbox, one client id per name. */
    databaseName?: string;
    /** Per-request timeout in milliseconds (default 10000, 100..600000). */
    requestTimeoutMs?: number;
    /** Most events per request (default 500, 1..10000). */
    maxBatchEvents?: number;
    /** Largest request body in bytes (default 1048576, 4096..4194304); a larger single event goes alone. */
    maxBatchBytes?: number;
    /**
     * Longest wait between two attempts, in milliseconds (default 30000, 1000..3600000): resends
     * of a batch, session requests and the read side's reopening back off exponentially from
     * 250 ms, with full jitter, up to this; a server's `Retry-After` may ask for longer.
     */
    maxBackoffMs?: number;
    /** IndexedDB durability of writes (default `"strict"`: an append resolves once on disk). */
    durability?: "strict" | "relaxed" | "default";
    /** Ask for persistent storage (`navigator.storage.persist()`) at open; see `persisted`. */
    persist?: boolean;
    /** Start with the network switched off, as after `setOffline(true)`: nothing is sent until
     * `setOffline(false)` (e.g. a page reloaded while the user keeps it offline). */
    offline?: boolean;
    /**
     * The app's own authentication, when the gateway checks one: called before each session is
     * opened (and again when the gateway says the app token expired); its token is sent as
     * `Authorization: Bearer` on `POST /v1/session` only. Resolve with `null` for none.
     */
    auth?: () => Promise<string | null>;
    /**
     * The signed-in user: the `sub` of the app tokens `auth` returns. The database is bound to
     * this user at open (rejects with `WRONG_USER` if it is another user's); without it, to the
     * first session's user. Either way nothing in it is ever sent under another user's session
     * (`status().state === "wrongUser"`). Pattern: one database per user,
     * `{ databaseName: "app-" + userId, user: userId }`.
     */
    user?: string;
    /**
     * End-to-end encryption of `data` (AES-GCM through WebCrypto, Celeriant's layout: `iv` the
     * 12-byte nonce, `data` ciphertext + 16-byte tag): a key, a per-aggregate key function
     * (`null`: that aggregate is not encrypted), or `{ key, types }` to encrypt only those event
     * types (1 to 1,024 of them). Views and projections decrypt; what does not decrypt has `decryptError`.
     */
    encryption?: EncryptionKey | { key: EncryptionKey; types?: number[] };
}

/** An AES-GCM `CryptoKey` (usages `encrypt` and `decrypt`), or a function giving one per
 * aggregate (`null`/`undefined`: the aggregate is not encrypted). */
export type EncryptionKey =
    | CryptoKey
    | ((aggregate: AggregateRef) => CryptoKey | null | undefined | Promise<CryptoKey | null | undefined>);

/** An aggregate: its type id and id, both UUID strings. */
export interface AggregateRef {
    typeId: string;
    id: string;
}

/** One event to append. */
export interface EventInput {
    /** Event type, an integer >= 1. */
    type: number;
    /** Minor type, an integer >= 0 (default 0). */
    minor?: number;
    /** The payload: bytes as they are, or any value `JSON.stringify` encodes (stored as UTF-8 JSON). */
    data: Uint8Array | ArrayBuffer | unknown;
    /** The event's id (a UUID); a random v4 UUID when omitted. */
    eventId?: string;
    /** AES-GCM nonce (exactly 12 bytes) when `data` is encrypted. */
    iv?: Uint8Array;
}

/** `append`'s options. */
export interface AppendOptions {
    /** A conditional append: its events land, all together and alone (one request), only if the
     * aggregate is then at exactly this version (an `AggregateView`'s `version`; `0`: only if it
     * does not exist yet). Otherwise they are parked with code 2003
     * (`ServerCode.OPTIMISTIC_CONCURRENCY_VIOLATION`) and `currentVersion`, and nothing of them
     * is stored at the server. An integer 0 … 2^53 − 1; anything else is `INVALID_OPTIONS`. */
    expectedVersion?: number;
}

/** One write of `appendAtomic`: an aggregate (each at most once per call), its events, and
 * optionally a version guard (as `AppendOptions.expectedVersion`) on that aggregate. */
export interface AtomicWrite {
    aggregate: AggregateRef;
    events: EventInput[];
    expectedVersion?: number;
}

/** `decide`'s options. */
export interface DecideOptions {
    /** How many conflicts (2003) to go through before rejecting with `CONTENTION`: an integer 1 … 100, default 5. */
    maxAttempts?: number;
}

/** What `decide` resolves with. */
export interface DecideResult {
    /** The attempt that settled it (1: no conflict). */
    attempts: number;
    /** The aggregate's version after the write (the view's, when there was nothing to do). */
    version: number;
    /** The written events' receipts (empty: `decide` returned nothing to do). */
    receipts: Receipt[];
}

/** `signOut`'s options. */
export interface SignOutOptions {
    /** Delete pending and parked events unsent. Without it `signOut` rejects with `PENDING_EVENTS` while there are any. */
    discardPending?: boolean;
}

/** What `append` resolves with, per event, once the events are stored. */
export interface Receipt {
    eventId: string;
    /** The event's sequence within its aggregate (>= 1, never reused). */
    clientSeq: number;
}

/** The drain loop's state. */
export type SyncState =
    | "idle"
    | "syncing"
    | "backoff"
    | "offline"
    | "parked"
    /** The gateway refused a session (or could not be asked): the events wait, nothing is dropped. */
    | "unauthorized"
    /** The session the `auth` callback led to is another user's than the one this database is bound to: nothing is sent; the events wait for their user, or `signOut({ discardPending: true })`. */
    | "wrongUser"
    | "closed";

/** The most recent failure since the last success. */
export interface SyncFailure {
    /** The protocol code (Celeriant's or the gateway's), or null for network failures. */
    code: number | null;
    message: string;
    /** Unix milliseconds. */
    at: number;
}

/** `status()` and the `status` event's detail. */
export interface SyncStatus {
    state: SyncState;
    /** Whether this context runs the device's drain loop, or mirrors the one another tab or worker runs. */
    role: "drainer" | "follower";
    /** Events waiting to sync (parked ones not included). */
    pending: number;
    /** Events parked after a permanent rejection. */
    parked: number;
    lastError: SyncFailure | null;
    /** The read side (the change stream and catch-up, run by the draining context). */
    read: ReadStatus;
}

/** The read side's state. */
export interface ReadStatus {
    /** `idle`: nothing watched; `connecting`: the change stream is being (re)opened;
     * `connected`: open, and every watched aggregate caught up; `catchingUp`: pages are being
     * read into the local log; `offline`: views answer from the local log. */
    state: "idle" | "connecting" | "connected" | "catchingUp" | "offline";
    /** Aggregates the gateway refused to watch (the last change stream's answer): another
     * user's aggregate this one may not read is `code` 40302. Their views stay as the local log
     * has them; nothing of theirs is notified. Empty when nothing was refused. */
    refused: WatchRefusal[];
}

/** One aggregate a change stream was refused, with the gateway's code. */
export interface WatchRefusal {
    aggregate: AggregateRef;
    code: number;
}

/** One event of an `AggregateView`. */
export interface ViewEvent {
    eventId: string | null;
    clientId: string;
    clientSeq: number;
    type: number;
    minor: number;
    /** The device's time of the append, Unix milliseconds. */
    timestamp: number;
    data: Uint8Array;
    /** `confirmed`: in the server's log (with its `version`); `pending`: this device's, not confirmed yet. */
    status: "confirmed" | "pending";
    /** The aggregate version of the batch that holds it (confirmed events). */
    version?: number;
    /** The server's time of the write (confirmed events). */
    serverTimestamp?: number;
    /** Why it cannot sync (pending events of a parked aggregate) until discarded. */
    parked?: { code: number; message: string };
    /** The AES-GCM nonce when `data` was stored encrypted (`null` otherwise). */
    iv: Uint8Array | null;
    /** With `encryption`: why this event of an encrypted type could not be decrypted (`code`
     * `DECRYPT_FAILED` or `KEY_UNAVAILABLE`), or why its clear `data` is not to be trusted
     * (`NOT_ENCRYPTED`: no `iv` although its aggregate has a key); its `data` is then as
     * stored and `json()` throws this error. Absent when it decrypted (or its type or
     * aggregate is not encrypted). */
    decryptError?: CeleriantSyncError;
    /** `data` decoded as UTF-8 JSON (for events appended with a JSON value). */
    json(): unknown;
}

/** One converged view of an aggregate: confirmed events in server order, then this device's pending ones in sequence order. */
export interface AggregateView {
    aggregate: AggregateRef;
    /** The highest confirmed version in the local log. */
    version: number;
    events: ViewEvent[];
    /** How many of `events` are pending. */
    pending: number;
    /** The local log may be behind the server (offline, or not caught up). */
    fromCache: boolean;
}

/** The `synced` event's detail: events that landed. */
export interface SyncedDetail {
    aggregate: AggregateRef;
    firstSeq: number;
    lastSeq: number;
    eventIds: string[];
    /** The gateway answered 2002: an earlier attempt had already landed. */
    duplicate: boolean;
}

/** The `parked` event's detail: an aggregate stopped by a permanent rejection. */
export interface ParkedDetail {
    aggregate: AggregateRef;
    firstSeq: number;
    lastSeq: number;
    count: number;
    /** Celeriant's or the gateway's code, or the client's own: 0, the server contradicted itself (also a 2002 short of a conditional batch's last event, or missing it: a guarded write lands whole or not at all); 1, pinned when the database moved to its device key, may have landed under the old client id; 2 (`MISGUARDED`), a conditional batch whose stored guard does not match its events, never sent. */
    code: number;
    message: string;
    parkedAt: number;
    /** These events may have landed before the rejection: an earlier attempt had an unknown outcome; or the batch was misguarded (code 2); or, for a conditional append's 2003, reading the aggregate back was refused, found the version trimmed, kept lagging the 2003, or the 2003 named another aggregate; or a 2002 fell short of a conditional batch (code 0). `false` only when none of these holds. */
    mayHaveLanded: boolean;
    /** For a conditional append refused by its version guard (code 2003, confirmed by reading the aggregate back): the aggregate's version the server reported. */
    currentVersion?: number;
    /** Part of an atomic write (`appendAtomic`): its other aggregates, each parked with the same code (one `parked` event each). Discarding any of them discards the whole write. */
    atomicWith?: AggregateRef[];
}

/** One element of `parkedEvents()`. */
export interface ParkedEvent {
    aggregate: AggregateRef;
    clientSeq: number;
    eventId: string;
    type: number;
    minor: number;
    data: Uint8Array;
    iv: Uint8Array | null;
    timestamp: number;
    code: number;
    message: string;
    parkedAt: number;
    mayHaveLanded: boolean;
    /** As `ParkedDetail.currentVersion`. */
    currentVersion?: number;
    /** Part of an atomic write (`appendAtomic`): its other aggregates, parked with it for the
     * same reason. Discarding any of them discards the whole write. */
    atomicWith?: AggregateRef[];
    /** As `ViewEvent.decryptError`. */
    decryptError?: CeleriantSyncError;
    /** `data` decoded as UTF-8 JSON (for events appended with a JSON value). */
    json(): unknown;
}

/** The events a `SyncClient` dispatches. */
export interface SyncClientEventMap {
    status: CustomEvent<SyncStatus>;
    synced: CustomEvent<SyncedDetail>;
    parked: CustomEvent<ParkedDetail>;
    /** The IndexedDB connection closed under the client or the database was lost. */
    storage: CustomEvent<StorageState>;
}

/** Stable codes of `CeleriantSyncError`. */
export type SyncErrorCode =
    | "INVALID_OPTIONS"
    | "INVALID_AGGREGATE"
    | "INVALID_WRITES"
    | "INVALID_EVENTS"
    | "EMPTY_EVENTS"
    | "TOO_MANY_EVENTS"
    | "INVALID_EVENT"
    | "INVALID_EVENT_TYPE"
    | "INVALID_MINOR"
    | "INVALID_EVENT_ID"
    | "INVALID_IV"
    | "DATA_NOT_SERIALIZABLE"
    | "EVENT_TOO_LARGE"
    | "BUSY"
    | "QUOTA_EXCEEDED"
    | "STORAGE_FAILED"
    | "STORAGE_LOST"
    | "PARKED"
    | "DISCARDED"
    | "CLOSED"
    | "UNSUPPORTED"
    | "PENDING_EVENTS"
    | "WRONG_USER"
    | "OFFLINE"
    | "NOT_FOUND"
    | "NOT_OWNER"
    | "MEMBERS_NOT_ALLOWED"
    | "TOO_MANY_MEMBERS"
    | "INVALID_PRINCIPAL"
    | "INVALID_ACCESS"
    | "TYPE_FORBIDDEN"
    | "UNAUTHORIZED"
    | "REQUEST_FAILED"
    | "PROJECTION_FAILED"
    | "ENCRYPTION_FAILED"
    | "IV_NOT_ALLOWED"
    | "DECRYPT_FAILED"
    | "KEY_UNAVAILABLE"
    | "NOT_ENCRYPTED"
    | "CONTENTION";

/**
 * Everything the client throws or rejects with is an instance of this class
 * (`e instanceof CeleriantSyncError`), an `Error` named `"CeleriantSyncError"` with a stable
 * `code`. Only the client makes them.
 */
export class CeleriantSyncError extends Error {
    private constructor();
    name: "CeleriantSyncError";
    code: SyncErrorCode;
    /** For event errors: the index of the offending event in the `append` call. */
    index?: number;
    /** For `PARKED`: the parked aggregate and its rejection code. */
    aggregate?: AggregateRef;
    parkCode?: number;
    /** For `PARKED` (as `ParkedDetail.mayHaveLanded`), and for `decide`'s rejections while
     * its write was pending: `true` when that write may still land (it waits behind another
     * parked append, or the client closed or storage failed after it was stored). Never decide
     * again then: track the write (`whenSynced` on `eventIds`). */
    mayHaveLanded?: boolean;
    /** For `decide`'s `PARKED`: its write is still pending behind another append's park (whose
     * code is `parkCode`); it will be sent once that park is discarded. */
    pendingBehindPark?: boolean;
    /** With `pendingBehindPark`: the blocking park's own `mayHaveLanded`. */
    blockingParkMayHaveLanded?: boolean;
    /** For `decide`'s rejections after it appended its write: that write's receipts, event ids
     * and sequence range, so the app can track it. */
    receipts?: Receipt[];
    eventIds?: string[];
    firstSeq?: number;
    lastSeq?: number;
    /** For `CONTENTION`: how many attempts were made. */
    attempts?: number;
    /** For `PROJECTION_FAILED`: the event `apply` threw on. */
    event?: ViewEvent;
    /** For `share`, `unshare`, `acceptShare`, `members`: the gateway's code, when it answered
     * with one. */
    serverCode?: number;
    /** The platform's error behind it (a `DOMException` from IndexedDB), or, for
     * `PROJECTION_FAILED`, what `apply` threw. */
    cause?: unknown;
}

/** Whether `value` is a `CeleriantSyncError` (also one from another copy of this package: an
 * `Error` named `"CeleriantSyncError"` with a string `code`). */
export function isCeleriantSyncError(value: unknown): value is CeleriantSyncError;

/** What a member may do: `read` (read and watch) or `readWrite` (also append). */
export type MemberAccess = "read" | "readWrite";

/** An aggregate's owner, members and invitations (`share`, `unshare`, `acceptShare`,
 * `members`). Principals are `user:<subject>` (with app tokens) or `device:<clientId>`. */
export interface Members {
    owner: string;
    /** For the owner every member; for a member only its own grant. */
    members: Record<string, MemberAccess>;
    /** Shares not accepted yet (they give nothing until `acceptShare`): for the owner every
     * one; for an invited user only its own. */
    invited: Record<string, MemberAccess>;
}

/** What `project` folds: `apply(state, event)` returns the next state and must not change
 * the state it is given (the kept confirmed state is reused under every pending fold). */
export interface ProjectionOptions<S, V = ViewEvent> {
    /** The state before any event. */
    initial: S;
    apply: (state: S, event: V) => S;
}

/** A projection's state now, with the view it was folded from. */
export interface ProjectionSnapshot<S> {
    /** `apply` folded over the confirmed events, then the pending ones (the last good state
     * when `error` is set). */
    state: S;
    /** The view's confirmed version. */
    version: number;
    /** How many of the folded events are pending. */
    pending: number;
    fromCache: boolean;
    /** `PROJECTION_FAILED` (its `cause` what `apply` threw, its `event` the event) when
     * `apply` threw on this view; it folds again at the next change. */
    error: CeleriantSyncError | null;
}

/** A live projection (`client.project`). */
export interface Projection<S> {
    /** The latest snapshot; `null` until the first view was folded. */
    readonly current: ProjectionSnapshot<S> | null;
    /** The current state once there is one. Rejects with `PROJECTION_FAILED` while the latest
     * fold failed, `CLOSED` if closed first. */
    value(): Promise<S>;
    /** Calls `listener` with the current snapshot at once (if any), then at every change.
     * Returns the function that unsubscribes. */
    subscribe(listener: (snapshot: ProjectionSnapshot<S>) => void): () => void;
    /** Stops it (its listeners are dropped; the aggregate stays watched while others watch it). */
    close(): void;
}

/**
 * An app's event types, declared once: a map from event type number to the JSON payload of
 * that type, e.g. `interface BankEvents { 1: { amount: number }; 2: { to: string } }`. Given to
 * `SyncClient.open<BankEvents>(...)` (or as `TypedSyncClient<BankEvents>`), it types `append`,
 * views (`read`, `subscribe`, `json()` narrowed by `type`), `parkedEvents` and `project`.
 */
export type EventTypes = object;

/** One event to append, of one of the app's types. */
export type TypedEventInput<E extends EventTypes> = {
    [K in keyof E & number]: Omit<EventInput, "type" | "data"> & { type: K; data: E[K] };
}[keyof E & number];

/** A view event of one of the app's types: `json()` is that type's payload. */
export type TypedViewEvent<E extends EventTypes> = {
    [K in keyof E & number]: Omit<ViewEvent, "type" | "json"> & { type: K; json(): E[K] };
}[keyof E & number];

/** A parked event of one of the app's types. */
export type TypedParkedEvent<E extends EventTypes> = {
    [K in keyof E & number]: Omit<ParkedEvent, "type" | "json"> & { type: K; json(): E[K] };
}[keyof E & number];

/** An `AggregateView` of the app's event types. */
export interface TypedAggregateView<E extends EventTypes> extends Omit<AggregateView, "events"> {
    events: TypedViewEvent<E>[];
}

/** A `SyncClient` whose events are the app's types (what `SyncClient.open<E>` resolves with). */
export interface TypedSyncClient<E extends EventTypes>
    extends Omit<SyncClient, "append" | "read" | "subscribe" | "parkedEvents" | "project"> {
    append(aggregate: AggregateRef, events: TypedEventInput<E>[], options?: AppendOptions): Promise<Receipt[]>;
    read(aggregate: AggregateRef): Promise<TypedAggregateView<E>>;
    subscribe(aggregate: AggregateRef, listener: (view: TypedAggregateView<E>) => void): () => void;
    parkedEvents(): Promise<TypedParkedEvent<E>[]>;
    project<S>(aggregate: AggregateRef, projection: ProjectionOptions<S, TypedViewEvent<E>>): Projection<S>;
}

export declare namespace SyncClient {
    /**
     * Opens (or creates) the outbox database and starts draining it to the gateway: a
     * non-empty outbox from an earlier session is drained at once, its pinned batch first.
     * With a type argument (`SyncClient.open<BankEvents>(...)`), the client's events are typed.
     */
    function open(options: SyncClientOptions): Promise<SyncClient>;
    function open<E extends EventTypes>(options: SyncClientOptions): Promise<TypedSyncClient<E>>;
}

export interface SyncClient {
    /** `decide` with the default options. */
    decide(
        aggregate: AggregateRef,
        decide: (view: AggregateView) => EventInput[] | null | undefined | Promise<EventInput[] | null | undefined>,
    ): Promise<DecideResult>;
    /** `append` without options (an unconditional append). */
    append(aggregate: AggregateRef, events: EventInput[]): Promise<Receipt[]>;
    /**
     * A live projection of the aggregate: `projection.apply(state, event)` folded over its
     * view from `projection.initial` — the confirmed events once (a new page folds only its
     * new events), the pending ones again on top at each change, all of it again after a reset.
     */
    project<S>(aggregate: AggregateRef, projection: ProjectionOptions<S>): Projection<S>;
    addEventListener<K extends keyof SyncClientEventMap>(
        type: K,
        listener: (event: SyncClientEventMap[K]) => void,
        options?: boolean | AddEventListenerOptions,
    ): void;
    removeEventListener<K extends keyof SyncClientEventMap>(
        type: K,
        listener: (event: SyncClientEventMap[K]) => void,
    ): void;
}
"#;
