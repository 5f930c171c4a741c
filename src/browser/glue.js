// The JavaScript the client needs besides what js-sys and web-sys bind: a few functions that are
// simpler, or only possible, in JavaScript. All of it is in this one module on purpose: the page
// (or the bundler) loads one file instead of one per Rust module (each `inline_js` block becomes a
// module of its own, and every extra module is one more request before the client can start).
// Each section names the Rust module that imports it.

// ---- IndexedDB requests and transactions as promises (browser/idb/request.rs)

export function requested(r) {
  return new Promise((ok, fail) => { r.onsuccess = () => ok(r.result); r.onerror = () => fail(r.error); });
}
// A transaction's outcome. Its error is the failed request's where the engine leaves tx.error
// empty (WebKit reports a full disk on the request that hit it, after an early commit()).
export function finished(tx) {
  return new Promise((ok, fail) => {
    let first = null;
    tx.onerror = (e) => { first = first || e.target.error; };
    tx.oncomplete = () => ok();
    tx.onabort = () => fail(tx.error || first);
  });
}
export function record(s, e, w) { return { s, e, w }; }
// How many events above `above` the outbox records with these keys hold: a key is `[t, a, seq]`
// (one event) or `[t, a, last, n]` (browser/idb/records.rs). One call per chunk of keys, not
// several per key.
export function eventsAbove(keys, above) {
  let n = 0;
  for (const k of keys) {
    const last = k[2], first = k.length > 3 ? last - k[3] + 1 : last;
    if (last > above) n += last - Math.max(first, above + 1) + 1;
  }
  return n;
}
export function begin(db, stores, mode, options) { return db.transaction(stores, mode, options); }
// Catching: `commit()` throws whenever the transaction is not active (between its events, or
// once it committed on its own or aborted; it then commits on its own, its outcome is
// `finished`'s either way), and a JS exception must
// never cross the module's frames: with `panic = "abort"` nothing releases the borrows the
// polling task holds, and its next wake-up panics ("RefCell already borrowed", seen once in
// WebKit in browser_atomic).
export function commit(tx) {
  try {
    if (tx.commit) tx.commit();
  } catch (_) {
    // not active any more: nothing to hurry
  }
}

// Whether a transaction committed explicitly still aborts, whole, when one of its requests fails
// after the commit() (browser/idb/db.rs, Db::early_commit_is_atomic): true, false (the engine
// commits the other requests), or null (could not tell). Nothing is left in `store` either way.
export function earlyCommitIsAtomic(db, store) {
  return new Promise((resolve) => {
    try {
      const tx = db.transaction(store, "readwrite", { durability: "relaxed" });
      const s = tx.objectStore(store);
      s.put(true, "commitProbe");
      s.add(true, "commitProbe");
      s.delete("commitProbe");
      tx.oncomplete = () => resolve(false);
      tx.onabort = () => resolve(!tx.error || tx.error.name === "ConstraintError" ? true : null);
      commit(tx);
    } catch (e) {
      resolve(null);
    }
  });
}

// ---- Opening the database (browser/idb/db.rs, `open_at`)

// Makes an open request harmless once its Rust future is dropped (a drain's operation dropped on
// close() or a takeover, mid-reopen). The request still runs: its upgrade would commit (a reopen
// that must not create the database would create an empty one) and its success would leave a
// connection nobody closes and no `versionchange` handler closes either, which blocks
// deleteDatabase and other contexts' upgrades for the page's lifetime. These listeners are our
// own, independent of the handlers Rust sets. Returns `abandon()`: from then on the upgrade is
// aborted and the connection closed, also one that opened before the call and Rust never took.
export function guardOpen(req) {
  let abandoned = false, opened = false;
  const close = () => { try { req.result.close(); } catch (_) { /* not open */ } };
  req.addEventListener("upgradeneeded", () => {
    if (abandoned) try { req.transaction.abort(); } catch (_) { /* already finished */ }
  });
  req.addEventListener("success", () => { opened = true; if (abandoned) close(); });
  return () => {
    if (abandoned) return;
    abandoned = true;
    // Rust's upgrade handler is dropped with the future: calling it would only throw.
    req.onupgradeneeded = null;
    if (opened) close();
  };
}

// ---- Migrating a version-1 database inside its upgrade transaction (browser/idb/schema.rs)

export function migrateV1(db, tx) {
  const outbox = tx.objectStore("outbox"), ids = tx.objectStore("ids");
  const cursor = tx.objectStore("events").openCursor();
  cursor.onsuccess = () => {
    const c = cursor.result;
    if (!c) { db.deleteObjectStore("events"); return; }
    const v = c.value;
    outbox.add({ s: v.s, e: v.e, w: v.w }, [v.t, v.a, v.s]);
    ids.put([v.t, v.a, v.s], v.e);
    c.continue();
  };
}

// ---- The device key, through WebCrypto (browser/identity.rs)

const RSA = { name: "RSASSA-PKCS1-v1_5", modulusLength: 2048, publicExponent: new Uint8Array([1, 0, 1]), hash: "SHA-256" };
export function subtle() { return globalThis.crypto && globalThis.crypto.subtle; }
export function generateDeviceKey() { return globalThis.crypto.subtle.generateKey(RSA, false, ["sign", "verify"]); }
export async function exportSpki(keyPair) { return new Uint8Array(await globalThis.crypto.subtle.exportKey("spki", keyPair.publicKey)); }
export async function sha256(bytes) { return new Uint8Array(await globalThis.crypto.subtle.digest("SHA-256", bytes)); }
export async function signText(keyPair, text) {
  const data = new TextEncoder().encode(text);
  return new Uint8Array(await globalThis.crypto.subtle.sign("RSASSA-PKCS1-v1_5", keyPair.privateKey, data));
}

// ---- Request proofs, DPoP-style (browser/proof.rs)

// The JWS header per device key (its public half as a JWK), made once per key.
const proofHeads = new WeakMap();
function b64url(bytes) {
  let s = "";
  for (let i = 0; i < bytes.length; i++) s += String.fromCharCode(bytes[i]);
  return btoa(s).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}
const utf8 = (text) => new TextEncoder().encode(text);
async function hashB64(bytes) { return b64url(new Uint8Array(await globalThis.crypto.subtle.digest("SHA-256", bytes))); }
// A compact JWS (RS256, typ dpop+jwt) over this request, signed by the device's private key,
// which cannot be exported: only this key pair can make it.
export async function makeProof(keyPair, method, url, body, token, nowMs) {
  const subtle = globalThis.crypto.subtle;
  let head = proofHeads.get(keyPair.publicKey);
  if (!head) {
    const { n, e } = await subtle.exportKey("jwk", keyPair.publicKey);
    head = b64url(utf8(JSON.stringify({ typ: "dpop+jwt", alg: "RS256", jwk: { kty: "RSA", n, e } })));
    proofHeads.set(keyPair.publicKey, head);
  }
  const target = new URL(url, globalThis.location ? globalThis.location.href : undefined);
  const claims = {
    jti: b64url(globalThis.crypto.getRandomValues(new Uint8Array(16))),
    htm: method,
    htu: target.pathname + target.search,
    iat: Math.floor(nowMs / 1000),
    ath: await hashB64(utf8(token)),
    bh: await hashB64(utf8(body)),
  };
  const input = head + "." + b64url(utf8(JSON.stringify(claims)));
  return input + "." + b64url(new Uint8Array(await subtle.sign("RSASSA-PKCS1-v1_5", keyPair.privateKey, utf8(input))));
}

// ---- The change stream over fetch (browser/stream.rs)

export function openWatch(url, token, proof, body, silenceMs, onChunk, onEnd) {
  const controller = new AbortController();
  let timer = 0;
  let ended = false;
  const finish = (status, why) => {
    if (ended) return;
    ended = true;
    clearTimeout(timer);
    controller.abort();
    onEnd(status, why);
  };
  const arm = () => {
    clearTimeout(timer);
    timer = setTimeout(() => finish(0, "no byte for " + silenceMs + " ms"), silenceMs);
  };
  arm();
  (async () => {
    const headers = { "Content-Type": "application/json", "Accept": "text/event-stream" };
    if (token) headers["Authorization"] = "Bearer " + token;
    if (proof) headers["DPoP"] = proof;
    const response = await fetch(url, {
      method: "POST", body, headers, signal: controller.signal, cache: "no-store",
    });
    if (!response.ok || !response.body) {
      let text = "";
      try { text = (await response.text()).slice(0, 300); } catch (_) {}
      finish(response.status, "HTTP " + response.status + (text ? ": " + text : ""));
      return;
    }
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    for (;;) {
      const { value, done } = await reader.read();
      if (ended) return;
      if (done) { finish(0, "the gateway ended the stream"); return; }
      arm();
      const text = decoder.decode(value, { stream: true });
      if (text && !onChunk(text)) { finish(0, "the stream sent something unreadable"); return; }
    }
  })().catch((e) => finish(0, (e && e.name ? e.name + ": " : "") + (e && e.message ? e.message : String(e))));
  return () => { ended = true; clearTimeout(timer); controller.abort(); };
}

// ---- A catch-up page's events checked before they are stored (browser/idb/log.rs)

// The highest clientSeq of a batch's events, or -1 if one is not an object, lacks a field a
// view needs or has one of the wrong kind (integers from 0 to 2^53 - 1, the batch's
// `serverTimestamp` an integer ≥ 0, not necessarily below 2^53: Celeriant does not state its
// unit, and one in nanoseconds must not stop every catch-up; `eventId` absent, null or a string; `data` null or standard base64,
// `iv` absent, null or standard base64, as engine::read::log::is_base64). One
// call per batch instead of about ten per event across the wasm boundary, and no copy of each
// payload into the module (issue 28). It never throws (a hostile page is only refused, -1): an
// exception through the module would skip the transaction's abort.
const safe = (v) => Number.isSafeInteger(v) && v >= 0;
// Groups of four, padding only in the last one: what `bytes` below decodes in every engine
// (Uint8Array.fromBase64 throws on a non-string or misplaced `=`; atob coerces non-strings).
const BASE64 = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/;
const b64 = (v) => typeof v === "string" && BASE64.test(v);
export function checkEvents(events, serverTimestamp) {
  try {
    if (!(Number.isInteger(serverTimestamp) && serverTimestamp >= 0)) return -1;
    let max = 0;
    for (const e of events) {
      if (e === null || typeof e !== "object" || Array.isArray(e)) return -1;
      if (!safe(e.clientSeq) || !safe(e.type) || !safe(e.minor) || !safe(e.timestamp)) return -1;
      if (e.eventId != null && typeof e.eventId !== "string") return -1;
      if (e.data !== null && !b64(e.data)) return -1;
      if (e.iv != null && !b64(e.iv)) return -1;
      if (e.clientSeq > max) max = e.clientSeq;
    }
    return max;
  } catch (_) {
    // A getter or proxy cannot come from JSON.parse, but nothing may escape (see above).
    return -1;
  }
}

// ---- View events built from stored batches and outbox records (browser/views.rs)

// An event that could not be decrypted (api/encryption.rs) throws its `decryptError` from json().
const proto = {
  json() {
    if (this.decryptError) throw this.decryptError;
    return JSON.parse(new TextDecoder().decode(this.data));
  },
};
// Uint8Array.fromBase64 where the engine has it (Chromium 140, Firefox 133, Safari 18.2):
// cheaper than atob and a copy loop for each event of a view (issue 28: 10,000 payloads of
// 200 bytes in Chromium 156, warm, 19-26 ms against 40-92 ms).
const native64 = typeof Uint8Array.fromBase64 === "function";
function bytes(b64) {
  if (b64 == null) return new Uint8Array(0);
  if (native64) return Uint8Array.fromBase64(b64);
  const s = atob(b64);
  const out = new Uint8Array(s.length);
  for (let i = 0; i < s.length; i++) out[i] = s.charCodeAt(i);
  return out;
}
function make(e, clientId, status, version) {
  const v = Object.create(proto);
  v.eventId = e.eventId ?? null;
  v.clientId = clientId;
  v.clientSeq = e.clientSeq;
  v.type = e.type;
  v.minor = e.minor;
  v.timestamp = e.timestamp;
  v.data = bytes(e.data);
  v.iv = e.iv == null ? null : bytes(e.iv);
  v.status = status;
  if (version !== undefined) v.version = version;
  return v;
}
export function pushConfirmed(out, batches) {
  for (const b of batches) {
    for (const e of b.events) {
      const v = make(e, b.clientId, "confirmed", b.version);
      v.serverTimestamp = b.serverTimestamp;
      out.push(v);
    }
  }
}
// `records` are outbox records (browser/idb/records.rs): `{ s, e, w }` holds one event,
// `{ s, e: [ids], w: [wires] }` the run from sequence `s`; a conditional append's records keep
// their wires under `gw` instead of `w`, an atomic write's under `aw`. Only sequences above
// `above` are shown.
export function pushPending(out, records, above, clientId, parkedFrom, parkedCode, parkedMessage) {
  const push = (s, w) => {
    if (s <= above) return;
    const v = make(JSON.parse(w), clientId, "pending");
    if (parkedFrom > 0 && s >= parkedFrom) v.parked = { code: parkedCode, message: parkedMessage };
    out.push(v);
  };
  for (const r of records) {
    const w = r.w ?? r.gw ?? r.aw;
    if (typeof w === "string") push(r.s, w);
    else for (let i = 0; i < w.length; i++) push(r.s + i, w[i]);
  }
}

// ---- Event bytes for parkedEvents() (api/output.rs)

// A parked event: a plain object with the view events' `json()`.
export function withJson() { return Object.create(proto); }

export function bytesOf(b64) { return typeof b64 === 'string' ? Uint8Array.from(atob(b64), (c) => c.charCodeAt(0)) : null; }

// --- What an app passes in, copied so that Rust never reads it again (docs/architecture.md,
// "Values crossing to JS"). None of these throws: a JavaScript exception must not cross the
// module's frames.

// A fresh array of at most `cap` of `v`'s elements, with `v`'s length: `[copy, length]`;
// `undefined` when `v` is not an array, `null` when reading it threw (a revoked Proxy, an
// element getter). The copy's elements are plain data properties.
export function ownArray(v, cap) {
  try {
    if (!Array.isArray(v)) return undefined;
    const n = v.length;
    if (typeof n !== "number" || !(n >= 0)) return null;
    const k = Math.min(n, cap);
    const out = new Array(k);
    for (let i = 0; i < k; i++) out[i] = v[i];
    return [out, n];
  } catch (_) {
    return null;
  }
}

const typedArrayTag = Object.getOwnPropertyDescriptor(
  Object.getPrototypeOf(Uint8Array.prototype),
  Symbol.toStringTag,
).get;
const arrayBufferLength = Object.getOwnPropertyDescriptor(ArrayBuffer.prototype, "byteLength").get;
const typedArrayByteLength = Object.getOwnPropertyDescriptor(
  Object.getPrototypeOf(Uint8Array.prototype),
  "byteLength",
).get;
// Larger than any event a gateway takes, and small enough that the copy's length crosses to
// Rust as itself (js-sys reads a typed array's length as a u32: 2^32 bytes read as 0).
const MAX_OWN_BYTES = 2 ** 30;

// What a thrown value says, as a string of at most 500 characters: `name: message` for an
// Error (`message` alone with `named` false), the value itself for a string, else a fixed text.
// Read here, catching: an app's error may have getters that throw, a `message` that is no
// string, or be a Proxy (js-sys' `name()`/`message()` read them without catching).
export function errorText(e, named) {
  try {
    if (typeof e === "string") return e.slice(0, 500);
    if (e instanceof Error) {
      const message = e.message;
      const text = typeof message === "string" ? message : "";
      if (!named) return text.slice(0, 500);
      const name = e.name;
      return `${typeof name === "string" ? name : "Error"}: ${text}`.slice(0, 500);
    }
  } catch (_) {
    // fall through
  }
  return named ? "an unknown error" : "an error that is not an Error";
}

// `isCeleriantSyncError`: an instance of the class (`proto` is its prototype), or an Error
// named `name` with a string `code` (another copy of the package made it). Never throws (a
// revoked Proxy, a throwing `getPrototypeOf` trap or getter is just not one).
export function isSyncError(v, proto, name) {
  try {
    if (v === null || typeof v !== "object") return false;
    if (Object.prototype.isPrototypeOf.call(proto, v)) return true;
    return v instanceof Error && v.name === name && typeof v.code === "string";
  } catch (_) {
    return false;
  }
}

const dispatchEvent = EventTarget.prototype.dispatchEvent;

// Dispatches `event` on the client's own target with the platform's `dispatchEvent`: listeners
// can reach the target (`e.currentTarget`) and replace its method; what they throw is reported
// by the platform, and nothing of theirs is read back.
export function dispatchOn(target, event) {
  try {
    dispatchEvent.call(target, event);
  } catch (_) {
    // a listener's exception is reported by the platform, not here
  }
}

// `Object.keys(o)` as the module may copy it: at most `cap` keys, each cut to `maxLen`
// characters and marked "…" when longer (so it matches no known key), or `null` when reading
// threw. The callers check an app's object for unknown keys, and every known set is far
// smaller than `cap`: one past it is among the first `cap`. Before, a key of 2^28 characters
// was copied whole into the module, whose memory is never given back.
const objectKeys = Object.keys;
const stringSlice = String.prototype.slice;
export function ownKeys(o, cap, maxLen) {
  try {
    const keys = objectKeys(o);
    const n = Math.min(keys.length, cap);
    const out = new Array(n);
    for (let i = 0; i < n; i++) out[i] = cut(keys[i], maxLen);
    return out;
  } catch (_) {
    return null;
  }
}

// A string cut to its first `max` UTF-16 units, marked "…" when it was longer (for messages:
// what the module copies stays small whatever the app gave).
export function cut(s, max) {
  return s.length > max ? `${stringSlice.call(s, 0, max)}…` : s;
}

// The UTF-8 length of a string (what Rust's copy of it takes; a lone surrogate becomes
// U+FFFD, three bytes), counted without copying it; it stops once past `cap` (the caller
// only asks whether it fits), and is `Infinity` if counting threw (refused, never thrown
// through the module).
const charCodeAt = String.prototype.charCodeAt;
export function utf8Length(s, cap) {
  try {
    let n = 0;
    for (let i = 0; i < s.length && n <= cap; i++) {
      const c = charCodeAt.call(s, i);
      if (c < 0x80) n += 1;
      else if (c < 0x800) n += 2;
      else if (c >= 0xd800 && c < 0xdc00 && i + 1 < s.length
        && (charCodeAt.call(s, i + 1) & 0xfc00) === 0xdc00) { n += 4; i++; }
      else n += 3;
    }
    return n;
  } catch (_) {
    return Infinity;
  }
}

// An app's value as its JSON text cut to `max` units, for a message; `undefined` when it has
// none or `JSON.stringify` threw (a cycle, a BigInt, a throwing `toJSON`).
const jsonStringify = JSON.stringify;
export function jsonCut(v, max) {
  try {
    const t = jsonStringify(v);
    return typeof t === "string" ? cut(t, max) : undefined;
  } catch (_) {
    return undefined;
  }
}

// A string argument of at most `max` UTF-16 units, else `undefined`: a longer one is refused
// before it is copied into the module.
export function shortString(v, max) {
  return typeof v === "string" && v.length <= max ? v : undefined;
}

// The platform's own getters of `CryptoKey` (an own accessor an app defines on a key is never
// run), taken once; `undefined` where the realm has no `CryptoKey`.
const keyGetter = (name) =>
  typeof CryptoKey === "function"
    ? Object.getOwnPropertyDescriptor(CryptoKey.prototype, name)?.get
    : undefined;
const keyAlgorithm = keyGetter("algorithm");
const keyUsages = keyGetter("usages");

// Whether `key` (a CryptoKey) is an AES-GCM key that may encrypt and decrypt, read by the
// platform's getters: `true`, `false`, or `null` when reading threw.
export function aesGcmKeyUsable(key) {
  try {
    const name = keyAlgorithm.call(key).name;
    const usages = keyUsages.call(key);
    let encrypt = false;
    let decrypt = false;
    for (let i = 0; i < usages.length && i < 8; i++) {
      encrypt ||= usages[i] === "encrypt";
      decrypt ||= usages[i] === "decrypt";
    }
    return name === "AES-GCM" && encrypt && decrypt;
  } catch (_) {
    return null;
  }
}

// A fresh copy of a `Uint8Array`'s or an `ArrayBuffer`'s bytes, told apart and read by their
// internal slots, not by `instanceof` and an own `length` (a subclass or an accessor can lie:
// a length read twice with two answers made js-sys' `to_vec` write past its buffer);
// `undefined` when `v` is neither, `null` when it cannot be read (a detached buffer) or holds
// more than 2^30 bytes; its byte length (a number) when it holds more than `max`, without
// copying anything. (Assumes the realm's own built-ins are unpatched: a page that patches
// them can reach the module's memory anyway, through `WebAssembly.Memory.prototype.buffer`.)
export function ownBytes(v, max) {
  try {
    const tag = typedArrayTag.call(v);
    if (tag === "Uint8Array") {
      const n = typedArrayByteLength.call(v);
      if (n > max) return n; // over the caller's bound: its length, nothing copied
      if (n > MAX_OWN_BYTES) return null;
      // Measured again on the copy: a view on a growable SharedArrayBuffer can grow (another
      // thread) between the length read and the copy, which takes the length then.
      const copy = new Uint8Array(v);
      const got = typedArrayByteLength.call(copy);
      return got > max ? got : got > MAX_OWN_BYTES ? null : copy;
    }
    if (tag !== undefined) return undefined;
  } catch (_) {
    return null;
  }
  let length;
  try {
    length = arrayBufferLength.call(v);
  } catch (_) {
    return undefined;
  }
  if (length > max) return length;
  try {
    return length > MAX_OWN_BYTES ? null : new Uint8Array(new Uint8Array(v));
  } catch (_) {
    return null;
  }
}

// A promise of what an app's callback returned, with the built-in `then`: `Promise.resolve`
// would return a promise given to it as it is (its own `then` called by the future, and a
// throwing `constructor` getter thrown at once); a thenable's `then` that throws becomes a
// rejection here.
export function adopt(v) {
  return new Promise((resolve) => resolve(v));
}
