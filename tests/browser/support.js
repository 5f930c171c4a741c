// JavaScript helpers for the browser tests (tests/browser_*.rs): talking to the real gateway's
// control, session and read endpoints, observing the client's requests, and simulating
// connectivity. Plain ES module with no browser-only top level, so Node (tests/e2e/sessions.mjs)
// tests the session helpers against a real gateway too.

/** Wraps the global fetch: every request still goes to the real gateway, and each write's body
 *  and start time are recorded in order, with the most writes ever in flight at once.
 *  Returns { bodies: string[], times: number[], maxConcurrent, restore() }. */
export function recordWrites() {
  const real = globalThis.fetch;
  const log = { bodies: [], times: [], maxConcurrent: 0, inFlight: 0 };
  globalThis.fetch = async (input, init) => {
    if (!(input instanceof Request && input.url.endsWith("/v1/write"))) return real(input, init);
    log.bodies.push(await input.clone().text());
    log.times.push(performance.now());
    log.inFlight += 1;
    log.maxConcurrent = Math.max(log.maxConcurrent, log.inFlight);
    try {
      const response = await real(input, init);
      await response.clone().arrayBuffer().catch(() => {});
      return response;
    } finally {
      log.inFlight -= 1;
    }
  };
  log.restore = () => { globalThis.fetch = real; };
  return log;
}

/** Replaces the global fetch for writes with a scripted one: each call shifts the next step
 *  from `script` ({status, body, retryAfter} | {network: true} | {hang: true} | {real: true} |
 *  {realThen: {status, body}}: sent to the real gateway, which handles it, then answered with
 *  the scripted reply instead); when the script is empty, requests go to the real gateway.
 *  Records bodies, their bearer tokens, and counts session openings (POST /v1/session). */
export function scriptWrites(script) {
  const real = globalThis.fetch;
  const bodies = [];
  const times = [];
  const tokens = [];
  const log = { bodies, times, tokens, script, sessions: 0 };
  globalThis.fetch = async (input, init) => {
    if (input instanceof Request && input.url.endsWith("/v1/session")) {
      log.sessions += 1;
      return real(input, init);
    }
    if (!(input instanceof Request && input.url.endsWith("/v1/write"))) return real(input, init);
    bodies.push(await input.clone().text());
    times.push(performance.now());
    tokens.push(input.headers.get("authorization"));
    const step = script.shift();
    if (!step || step.real) return real(input, init);
    if (step.realThen) {
      const handled = await real(input, init);
      await handled.arrayBuffer().catch(() => {});
      return new Response(JSON.stringify(step.realThen.body), {
        status: step.realThen.status, headers: { "content-type": "application/json" },
      });
    }
    if (step.network) throw new TypeError("Failed to fetch (scripted)");
    if (step.hang) {
      return new Promise((_, reject) => {
        input.signal.addEventListener("abort", () => reject(new DOMException("aborted", "AbortError")));
      });
    }
    const headers = { "content-type": "application/json" };
    if (step.retryAfter !== undefined) headers["retry-after"] = String(step.retryAfter);
    return new Response(step.body === undefined ? "" : JSON.stringify(step.body), { status: step.status, headers });
  };
  log.restore = () => { globalThis.fetch = real; };
  return log;
}

/** Counts this page's `BroadcastChannel` posts by the message's `kind` (every client in the page
 *  posts through the same prototype). Returns { kinds: { [kind]: count }, appended: sum of the
 *  `n` of "appended" posts, times: { [kind]: number[] }, restore() }. */
export function countPosts() {
  const real = BroadcastChannel.prototype.postMessage;
  const log = { kinds: {}, appended: 0, times: {} };
  BroadcastChannel.prototype.postMessage = function (message) {
    const kind = message && typeof message === "object" ? String(message.kind) : typeof message;
    log.kinds[kind] = (log.kinds[kind] || 0) + 1;
    (log.times[kind] ||= []).push(performance.now());
    if (kind === "appended") log.appended += Number(message.n);
    return real.call(this, message);
  };
  log.restore = () => { BroadcastChannel.prototype.postMessage = real; };
  return log;
}

/** Shifts this page's `Date.now()` by `ms` (a device whose clock is off); returns
 *  { restore() }. `performance.now()` and timers are untouched. */
export function skewClock(ms) {
  const real = Date.now;
  Date.now = () => real.call(Date) + ms;
  return { restore: () => { Date.now = real; } };
}

/** Sets the gateway's fault rates (PUT /v1/faults, with the faults secret); resolves with the
 *  report. */
export async function setFaults(gateway, secret, rates) {
  const r = await fetch(`${gateway}/v1/faults`, {
    method: "PUT",
    headers: { "content-type": "application/json", "celeriant-faults-secret": secret },
    body: JSON.stringify(rates),
  });
  if (!r.ok) throw new Error(`PUT /v1/faults: ${r.status} ${await r.text()}`);
  return r.json();
}

/** A device key pair as the client makes one: RSASSA-PKCS1-v1_5, 2048 bits, SHA-256, with a
 *  non-extractable private key. */
export function deviceKey() {
  return crypto.subtle.generateKey(
    { name: "RSASSA-PKCS1-v1_5", modulusLength: 2048, publicExponent: new Uint8Array([1, 0, 1]), hash: "SHA-256" },
    false,
    ["sign", "verify"],
  );
}

/** The client id Celeriant derives from an SPKI (bytes): the first 16 bytes of its SHA-256 read
 *  as a little-endian u128, written as a UUID (Rust's `Uuid::from_u128`). */
export async function clientIdOf(spki) {
  const hash = new Uint8Array(await crypto.subtle.digest("SHA-256", spki)).slice(0, 16);
  const hex = [...hash].reverse().map((b) => b.toString(16).padStart(2, "0")).join("");
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}

/** Opens a session on `gateway` (POST /v1/session) with `keyPair` (default: a new device key),
 *  sending `appToken` as `Authorization: Bearer` when given. A nonce refused as out of window
 *  (40111) or replayed (40112) is signed again once, corrected with the answer's `serverTime`.
 *  Resolves with { clientId, token, expiresAt, serverTime, publicKey, keyPair, clockOffsetMs };
 *  rejects with the gateway's answer otherwise. */
export async function openSession(gateway, { keyPair, appToken, clockOffsetMs = 0 } = {}) {
  keyPair = keyPair ?? (await deviceKey());
  const publicKey = base64(new Uint8Array(await crypto.subtle.exportKey("spki", keyPair.publicKey)));
  let offset = clockOffsetMs;
  for (let attempt = 0; ; attempt++) {
    const nonce = String(Math.round(Date.now() + offset) + attempt);
    const signed = await crypto.subtle.sign("RSASSA-PKCS1-v1_5", keyPair.privateKey, new TextEncoder().encode(nonce));
    const headers = { "content-type": "application/json" };
    if (appToken) headers.authorization = `Bearer ${appToken}`;
    const r = await fetch(`${gateway}/v1/session`, {
      method: "POST", headers, body: JSON.stringify({ publicKey, nonce, signature: base64(new Uint8Array(signed)) }),
    });
    const body = await r.json().catch(() => null);
    if (r.ok) return { ...body, publicKey, keyPair, clockOffsetMs: offset };
    if (attempt === 0 && body && (body.code === 40111 || body.code === 40112) && typeof body.serverTime === "number") {
      offset = body.serverTime - Date.now();
      continue;
    }
    throw new Error(`POST /v1/session: ${r.status} ${JSON.stringify(body)}`);
  }
}

/** A DPoP request proof (docs/protocol.md, "Request proofs") for `method url` with `body`
 *  under `session` (from openSession: its token, keyPair and clock offset). Written here
 *  independently of the client's own (src/browser/glue.js), so each checks the other against
 *  the gateway. */
export async function proofFor(session, method, url, body = "") {
  const b64url = (bytes) => base64(bytes).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
  const utf8 = (t) => new TextEncoder().encode(t);
  const sha = async (t) => b64url(new Uint8Array(await crypto.subtle.digest("SHA-256", utf8(t))));
  const { n, e } = await crypto.subtle.exportKey("jwk", session.keyPair.publicKey);
  const head = b64url(utf8(JSON.stringify({ typ: "dpop+jwt", alg: "RS256", jwk: { kty: "RSA", n, e } })));
  const target = new URL(url, globalThis.location ? globalThis.location.href : undefined);
  const claims = {
    jti: b64url(crypto.getRandomValues(new Uint8Array(16))), htm: method,
    htu: target.pathname + target.search, iat: Math.floor((Date.now() + (session.clockOffsetMs || 0)) / 1000),
    ath: await sha(session.token), bh: await sha(body),
  };
  const input = `${head}.${b64url(utf8(JSON.stringify(claims)))}`;
  const signed = await crypto.subtle.sign("RSASSA-PKCS1-v1_5", session.keyPair.privateKey, utf8(input));
  return `${input}.${b64url(new Uint8Array(signed))}`;
}

// One reader session per gateway, opened the first time a read is refused with 401.
const readers = new Map();
function readerSession(gateway, renew) {
  if (renew || !readers.has(gateway)) {
    const session = openSession(gateway);
    session.catch(() => readers.delete(gateway));
    readers.set(gateway, session);
  }
  return readers.get(gateway);
}

/** Every event of an aggregate, through the gateway's read endpoint, following `next`. With
 *  `session` (from openSession), reads with it, each request with its proof; without, reads
 *  without one and, if the gateway answers 401 (auth on), with a reader session of its own
 *  (renewed once if that is refused too). */
export async function readAll(gateway, typeId, id, session) {
  const events = [];
  let from = 1;
  let auth = session;
  for (;;) {
    const url = `${gateway}/v1/aggregates/${typeId}/${id}/events?from=${from}`;
    const get = async (s) => fetch(url, s
      ? { headers: { authorization: `Bearer ${s.token}`, dpop: await proofFor(s, "GET", url) } }
      : undefined);
    let r = await get(auth);
    if (r.status === 401 && session === undefined) {
      const renew = auth !== undefined;
      auth = await readerSession(gateway, renew);
      r = await get(auth);
    }
    if (r.status === 410) {
      // Trimmed below `from`: the log starts at minVersion now.
      from = (await r.json()).minVersion;
      continue;
    }
    if (!r.ok) throw new Error(`read: ${r.status} ${await r.text()}`);
    const page = await r.json();
    for (const batch of page.batches) {
      events.push(...batch.events.map((e) => ({ ...e, version: batch.version, clientId: batch.clientId })));
    }
    if (page.next === null) return events;
    from = page.next;
  }
}

/** Pretends the platform is offline (navigator.onLine = false) or back online (and fires
 *  the `online` event, as the browser does). */
export function setOnline(online) {
  Object.defineProperty(globalThis.navigator, "onLine", { configurable: true, get: () => online });
  if (online) globalThis.dispatchEvent(new Event("online"));
}

export function sleep(ms) {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** Resolves with the rejection of `promise`, or rejects if it fulfils. */
export async function rejection(promise) {
  try {
    await promise;
  } catch (e) {
    return e;
  }
  throw new Error("expected a rejection");
}

/** Counts the records of an IndexedDB store directly (bypassing the client). */
export function countStore(dbName, store) {
  return new Promise((resolve, reject) => {
    const open = indexedDB.open(dbName);
    open.onerror = () => reject(open.error);
    open.onsuccess = () => {
      const db = open.result;
      const req = db.transaction(store, "readonly").objectStore(store).count();
      req.onsuccess = () => { db.close(); resolve(req.result); };
      req.onerror = () => { db.close(); reject(req.error); };
    };
  });
}

/** Counts the events the `outbox` store holds directly (bypassing the client): a record's key
 *  is `[t, a, seq]` (one event) or `[t, a, last, n]` (a run of n; src/browser/idb/records.rs). */
export function countOutboxEvents(dbName) {
  return new Promise((resolve, reject) => {
    const open = indexedDB.open(dbName);
    open.onerror = () => reject(open.error);
    open.onsuccess = () => {
      const db = open.result;
      const req = db.transaction("outbox", "readonly").objectStore("outbox").getAllKeys();
      req.onsuccess = () => {
        db.close();
        resolve(req.result.reduce((n, k) => n + (k.length > 3 ? k[3] : 1), 0));
      };
      req.onerror = () => { db.close(); reject(req.error); };
    };
  });
}

/** Base64 (standard, padded) of bytes, as the protocol encodes them. */
export function base64(bytes) {
  let s = "";
  for (const b of bytes) s += String.fromCharCode(b);
  return btoa(s);
}

/** Writes a record straight into an IndexedDB store (to set up a corrupt or colliding state). */
export function insertRaw(dbName, store, record, key) {
  return new Promise((resolve, reject) => {
    const open = indexedDB.open(dbName);
    open.onerror = () => reject(open.error);
    open.onsuccess = () => {
      const db = open.result;
      const tx = db.transaction(store, "readwrite");
      if (key === undefined) tx.objectStore(store).put(record);
      else tx.objectStore(store).put(record, key);
      tx.oncomplete = () => { db.close(); resolve(); };
      tx.onerror = () => { db.close(); reject(tx.error); };
    };
  });
}

/** Reads one record of an IndexedDB store directly (bypassing the client). */
export function getRaw(dbName, store, key) {
  return new Promise((resolve, reject) => {
    const open = indexedDB.open(dbName);
    open.onerror = () => reject(open.error);
    open.onsuccess = () => {
      const db = open.result;
      const req = db.transaction(store, "readonly").objectStore(store).get(key);
      req.onsuccess = () => { db.close(); resolve(req.result ?? null); };
      req.onerror = () => { db.close(); reject(req.error); };
    };
  });
}

/** Collects a client's `status`, `synced` and `parked` event details. */
export function listen(client) {
  const seen = { status: [], synced: [], parked: [], syncedAt: [] };
  client.addEventListener("status", (e) => seen.status.push(e.detail));
  client.addEventListener("synced", (e) => { seen.synced.push(e.detail); seen.syncedAt.push(performance.now()); });
  client.addEventListener("parked", (e) => seen.parked.push(e.detail));
  return seen;
}

/** Resolves with `promise`'s value, or rejects after `ms` with a message naming `what`. */
export function within(promise, ms, what) {
  return Promise.race([
    promise,
    new Promise((_, reject) => setTimeout(() => reject(new Error(`timed out after ${ms} ms: ${what}`)), ms)),
  ]);
}

/** Upgrades a database to its next version the way a newer tab would (adding a store);
 *  resolves with { version, blocked } once the upgrade finished. */
export function upgradeRaw(dbName) {
  return new Promise((resolve, reject) => {
    const probe = indexedDB.open(dbName);
    probe.onerror = () => reject(probe.error);
    probe.onsuccess = () => {
      const version = probe.result.version + 1;
      probe.result.close();
      let blocked = false;
      const up = indexedDB.open(dbName, version);
      up.onupgradeneeded = () => up.result.createObjectStore(`added-in-${version}`);
      up.onblocked = () => { blocked = true; };
      up.onerror = () => reject(up.error);
      up.onsuccess = () => { up.result.close(); resolve({ version, blocked }); };
    };
  });
}

/** Creates a database exactly as version 1 of the client laid it out (store `events` keyed
 *  ["t","a","s"] with an `eventId` index), holding `events` ({t, a, s, e, w}), `counters`
 *  ({t, a, last}), the client id and, optionally, a pin ({t, a, first, last, count}). */
export function createV1(dbName, { clientId, events, counters, pin }) {
  return new Promise((resolve, reject) => {
    const open = indexedDB.open(dbName, 1);
    open.onupgradeneeded = () => {
      const db = open.result;
      const store = db.createObjectStore("events", { keyPath: ["t", "a", "s"] });
      store.createIndex("eventId", "e");
      db.createObjectStore("counters", { keyPath: ["t", "a"] });
      db.createObjectStore("parked", { keyPath: ["t", "a"] });
      db.createObjectStore("meta");
      db.createObjectStore("discarded");
    };
    open.onerror = () => reject(open.error);
    open.onsuccess = () => {
      const db = open.result;
      const tx = db.transaction(["events", "counters", "meta"], "readwrite");
      for (const e of events) tx.objectStore("events").add(e);
      for (const c of counters) tx.objectStore("counters").put(c);
      tx.objectStore("meta").put(clientId, "clientId");
      if (pin) tx.objectStore("meta").put(pin, "pin");
      tx.oncomplete = () => { db.close(); resolve(); };
      tx.onerror = () => { db.close(); reject(tx.error); };
    };
  });
}

/** The names of a database's object stores. */
export function storeNames(dbName) {
  return new Promise((resolve, reject) => {
    const open = indexedDB.open(dbName);
    open.onerror = () => reject(open.error);
    open.onsuccess = () => { const names = [...open.result.objectStoreNames]; open.result.close(); resolve(names); };
  });
}

/** Cuts single devices off the network, whatever the others do: a device's session requests
 *  (told apart by the public key they carry) and every request with a token the gateway gave
 *  it fail as a network error would, and its open change streams are aborted.
 *  Returns { cut(publicKey), heal(publicKey), restore() }. */
export function cutOff() {
  const real = globalThis.fetch;
  const keys = new Set();
  const tokens = new Map();
  const streams = [];
  globalThis.fetch = async (input, init) => {
    const request = input instanceof Request ? input : new Request(input, init);
    const url = request.url;
    if (url.endsWith("/v1/session")) {
      const key = JSON.parse(await request.clone().text()).publicKey;
      if (keys.has(key)) throw new TypeError("Failed to fetch (cut off)");
      const response = await real(input, init);
      try {
        const { token } = await response.clone().json();
        if (token) tokens.set(token, key);
      } catch (_) { /* a refusal */ }
      return response;
    }
    const auth = request.headers.get("authorization");
    const key = auth ? tokens.get(auth.slice("Bearer ".length)) : undefined;
    if (key !== undefined && keys.has(key)) throw new TypeError("Failed to fetch (cut off)");
    if (key !== undefined && url.endsWith("/v1/watch")) {
      const controller = new AbortController();
      const signal = init && init.signal;
      if (signal) signal.addEventListener("abort", () => controller.abort());
      streams.push({ key, controller });
      return real(input, { ...init, signal: controller.signal });
    }
    return real(input, init);
  };
  return {
    cut(key) {
      keys.add(key);
      for (const s of streams) if (s.key === key) s.controller.abort();
    },
    heal(key) { keys.delete(key); },
    restore() { globalThis.fetch = real; },
  };
}

/** Subscribes to an aggregate and records every view the listener gets, as keys
 *  `clientId:clientSeq:status`. Returns { views: string[][], last, unsubscribe }. */
export function recordViews(client, aggregate) {
  const log = { views: [], last: null };
  log.unsubscribe = client.subscribe(aggregate, (view) => {
    log.last = view;
    log.views.push(view.events.map((e) => `${e.clientId}:${e.clientSeq}:${e.status}`));
  });
  return log;
}

/** What is wrong with a listener's history, or null: an event shown twice in one view, an
 *  event that disappeared after being shown, or a confirmed event shown as pending again. */
export function flicker(views) {
  const seen = new Map(); // event -> "pending" | "confirmed"
  for (let i = 0; i < views.length; i++) {
    const now = new Map();
    for (const key of views[i]) {
      const cut = key.lastIndexOf(":");
      const [event, status] = [key.slice(0, cut), key.slice(cut + 1)];
      if (now.has(event)) return `view ${i}: ${event} twice`;
      now.set(event, status);
      if (seen.get(event) === "confirmed" && status === "pending") {
        return `view ${i}: ${event} confirmed before, pending again`;
      }
    }
    for (const [event] of seen) {
      if (!now.has(event)) return `view ${i}: ${event} disappeared`;
    }
    for (const [event, status] of now) seen.set(event, status);
  }
  return null;
}

/** The events of an aggregate as the server holds them, as keys `clientId:clientSeq:confirmed`. */
export async function serverKeys(gateway, typeId, id) {
  const events = await readAll(gateway, typeId, id);
  return events.map((e) => `${e.clientId}:${e.clientSeq}:confirmed`);
}

/** A view's events as keys `clientId:clientSeq:status`. */
export function viewKeys(view) {
  return view.events.map((e) => `${e.clientId}:${e.clientSeq}:${e.status}`);
}

/** The gateway's fault report (GET /v1/faults), with its counts. */
export async function faultReport(gateway, secret) {
  const r = await fetch(`${gateway}/v1/faults`, { headers: { "celeriant-faults-secret": secret } });
  if (!r.ok) throw new Error(`GET /v1/faults: ${r.status} ${await r.text()}`);
  return r.json();
}

/** Trims an aggregate below `before` (the gateway's test hook). */
export async function trim(gateway, secret, typeId, id, before) {
  const r = await fetch(`${gateway}/v1/faults/trim`, {
    method: "POST", headers: { "content-type": "application/json", "celeriant-faults-secret": secret },
    body: JSON.stringify({ typeId, id, before }),
  });
  if (!r.ok) throw new Error(`POST /v1/faults/trim: ${r.status} ${await r.text()}`);
}

/** Makes the gateway's event pages hostile until `restore()`: every batch's events get a
 *  non-base64 `data` and a version gap is introduced. Counts the pages it spoiled. */
export function spoilPages() {
  const real = globalThis.fetch;
  const log = { spoiled: 0 };
  globalThis.fetch = async (input, init) => {
    const url = input instanceof Request ? input.url : String(input);
    const response = await real(input, init);
    if (!url.includes("/events?") || response.status !== 200) return response;
    const page = await response.json();
    for (const b of page.batches) {
      b.version += 5;
      for (const e of b.events) e.data = "!!not base64!!";
    }
    log.spoiled += 1;
    return new Response(JSON.stringify(page), { status: 200, headers: { "content-type": "application/json" } });
  };
  log.restore = () => { globalThis.fetch = real; };
  return log;
}

/** From now on every page of aggregate `id` (`GET …/events?`) is answered as the gateway answers
 *  a deleted aggregate, `{"batches":[],"next":null,"tip":0}`, and no `reset` comes on the
 *  change stream (as when the stream was down while it was deleted); `restore()` puts the real
 *  `fetch` back, `answered` counts the pages faked. */
export function deletedPages(id) {
  const real = globalThis.fetch;
  const log = { answered: 0 };
  globalThis.fetch = async (input, init) => {
    const url = input instanceof Request ? input.url : String(input);
    if (!url.includes(`/${id}/events?`)) return real(input, init);
    log.answered += 1;
    const body = JSON.stringify({ batches: [], next: null, tip: 0 });
    return new Response(body, { status: 200, headers: { "content-type": "application/json" } });
  };
  log.restore = () => { globalThis.fetch = real; };
  return log;
}

/** Counts every `fetch` of this context from now on, by path (`/v1/write`, `/v1/session`,
 *  `/v1/watch`, `/v1/aggregates/…`), and how many change streams (`/v1/watch`) are still open
 *  (their request not aborted); `restore()` puts the real `fetch` back. */
export function countFetches() {
  const real = globalThis.fetch;
  const log = { total: 0, paths: {}, openStreams: 0 };
  globalThis.fetch = (input, init) => {
    const url = new URL(input instanceof Request ? input.url : String(input), location.href);
    const path = url.pathname.startsWith("/v1/aggregates/") ? "/v1/aggregates" : url.pathname;
    log.total += 1;
    log.paths[path] = (log.paths[path] || 0) + 1;
    const signal = (init && init.signal) || (input instanceof Request ? input.signal : null);
    if (path === "/v1/watch" && signal && !signal.aborted) {
      log.openStreams += 1;
      signal.addEventListener("abort", () => { log.openStreams -= 1; }, { once: true });
    }
    return real(input, init);
  };
  log.restore = () => { globalThis.fetch = real; };
  return log;
}

/** An HS256 app token (JWT) for `sub`, as an app's sign-in would mint it, signed with `secret`
 *  (the gateway's `--app-token-key-file`), issuer and audience "celeriant-test", valid 10 min. */
export async function appToken(secret, sub) {
  const b64url = (bytes) => btoa(String.fromCharCode(...bytes)).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
  const text = (o) => b64url(new TextEncoder().encode(JSON.stringify(o)));
  const now = Math.floor(Date.now() / 1000);
  const input = `${text({ alg: "HS256", typ: "JWT" })}.${text({ sub, iss: "celeriant-test", aud: "celeriant-test", iat: now, exp: now + 600 })}`;
  const key = await crypto.subtle.importKey("raw", new TextEncoder().encode(secret), { name: "HMAC", hash: "SHA-256" }, false, ["sign"]);
  const mac = await crypto.subtle.sign("HMAC", key, new TextEncoder().encode(input));
  return `${input}.${b64url(new Uint8Array(mac))}`;
}

/** A switchable sign-in: `{ user, calls, auth }`, where `auth()` resolves with an app token for
 *  the current `user` (the app's `auth` callback), counting its calls. */
export function signIn(secret, user) {
  const s = { user, calls: 0 };
  s.auth = async () => {
    s.calls += 1;
    return appToken(secret, s.user);
  };
  return s;
}

/** Wraps the global fetch to count requests to a members endpoint (`…/members`,
 *  `…/members/accept`), which still go to the real gateway. Returns { count, restore() }. */
export function countMembersRequests() {
  const real = globalThis.fetch;
  const log = { count: 0 };
  globalThis.fetch = (input, init) => {
    if (input instanceof Request && (input.url.endsWith("/members") || input.url.endsWith("/members/accept"))) log.count += 1;
    return real(input, init);
  };
  log.restore = () => { globalThis.fetch = real; };
  return log;
}

/** Wraps the global fetch and records every request to the gateway's API (except sessions):
 *  { method, url, authorization, dpop, body }; requests still go to the real gateway.
 *  Returns { requests, restore() }. */
export function captureRequests() {
  const real = globalThis.fetch;
  const log = { requests: [] };
  globalThis.fetch = async (input, init) => {
    const request = input instanceof Request ? input : new Request(input, init);
    if (request.url.includes("/v1/") && !request.url.endsWith("/v1/session")) {
      log.requests.push({
        method: request.method, url: request.url,
        authorization: request.headers.get("authorization"), dpop: request.headers.get("dpop"),
        body: request.method === "GET" ? "" : await request.clone().text(),
      });
    }
    return real(input, init);
  };
  log.restore = () => { globalThis.fetch = real; };
  return log;
}

/** `POST {gateway}{path}` with the operator credential and a JSON body (revocations); resolves
 *  with { status, body } (the body parsed). */
export async function asOperator(gateway, secret, path, body) {
  const r = await fetch(`${gateway}${path}`, {
    method: "POST",
    headers: { authorization: `Operator ${secret}`, "content-type": "application/json" },
    body: JSON.stringify(body),
  });
  return { status: r.status, body: await r.json() };
}

/** Sends `method url` from outside the client with exactly these headers and body (no proof
 *  is added); resolves with { status, code }. */
export async function sendRaw(method, url, headers, body) {
  const init = { method, headers: { ...headers } };
  if (method !== "GET") {
    init.body = body;
    init.headers["content-type"] = "application/json";
  }
  const r = await fetch(url, init);
  const json = await r.json().catch(() => null);
  return { status: r.status, code: json && json.code };
}

/** A proof for `method url` with `body` under `token`, signed by a key the page never had
 *  (a thief's own). */
export async function foreignProof(token, method, url, body) {
  return proofFor({ token, keyPair: await deviceKey(), clockOffsetMs: 0 }, method, url, body);
}
