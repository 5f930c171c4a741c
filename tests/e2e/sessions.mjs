// The device handshake helpers (lib.mjs and tests/browser/support.js, run here in Node 20,
// which has WebCrypto and fetch) against real gateway processes: a session's client id is the
// derivation from its public key, its token writes and reads (with a request proof; without
// one it is refused), readAll works with auth on and off, and a skewed clock is corrected with
// serverTime. No browser needed.
import { Gateway, clientIdOf, openSession, uuid, rng } from "./lib.mjs";
import * as browser from "../browser/support.js";

function check(ok, what) {
  if (!ok) throw new Error(`failed: ${what}`);
}

/** A write under `session`: with its token and, unless `proof` is false, a fresh DPoP proof. */
async function write(gateway, session, typeId, id, seq, { proof = true } = {}) {
  const url = `${gateway.base}/v1/write`;
  const body = JSON.stringify({
    clientId: session.clientId,
    writes: [{ aggregate: { typeId, id }, events: [{ clientSeq: seq, timestamp: Date.now(), type: 1, data: "AQID" }] }],
  });
  const headers = { "content-type": "application/json" };
  if (session.token) headers.authorization = `Bearer ${session.token}`;
  if (session.token && proof) headers.dpop = await browser.proofFor(session, "POST", url, body);
  const r = await fetch(url, { method: "POST", headers, body });
  return { status: r.status, body: await r.json() };
}

export async function sessions({ seed }) {
  const random = rng(seed);
  const typeId = uuid(random);
  const id = uuid(random);
  const figures = {};

  // authenticated-read, as the browser tests' gateway (tests/browser/policy.toml): the browser
  // helpers read back through a reader session of their own, another device.
  const on = new Gateway({ auth: "device", policy: "authenticated-read" });
  try {
    await on.start();
    const s = await openSession(on.base);
    const spki = Buffer.from(s.publicKey, "base64");
    check(s.clientId === (await clientIdOf(spki)), `clientId ${s.clientId} is the derivation of its SPKI`);
    check(s.expiresAt > s.serverTime && Math.abs(s.serverTime - Date.now()) < 5000, "expiresAt and serverTime");
    const tokenOnly = await write(on, s, typeId, id, 1, { proof: false });
    check(tokenOnly.status === 401 && tokenOnly.body.code === 40130, "the token without its proof: 401, 40130");
    check((await write(on, s, typeId, id, 1)).body.outcome === "landed", "a write with the token and its proof lands");
    const unauthenticated = await write(on, { clientId: s.clientId }, typeId, id, 2);
    check(unauthenticated.status === 401 && unauthenticated.body.code === 40100, "no token: 401, 40100");
    const bare = await fetch(`${on.base}/v1/aggregates/${typeId}/${id}/events`);
    check(bare.status === 401, "a read without a token is 401");
    check((await on.readAll(typeId, id)).length === 1, "Gateway.readAll reads with the operator credential");

    // The same key is the same id; a new key another.
    const again = await openSession(on.base, { keyPair: s.keyPair });
    check(again.clientId === s.clientId, "one key, one client id");
    check((await openSession(on.base)).clientId !== s.clientId, "another key, another id");

    // A device clock 10 minutes slow: refused once (40111), corrected with serverTime.
    const skewed = await openSession(on.base, { clockOffsetMs: -600_000 });
    check(Math.abs(skewed.clockOffsetMs) < 5000, `corrected offset ${skewed.clockOffsetMs}`);
    figures.correctedOffsetMs = skewed.clockOffsetMs;

    // The browser helpers, same gateway.
    const b = await browser.openSession(on.base);
    check(b.clientId === (await browser.clientIdOf(Buffer.from(b.publicKey, "base64"))), "browser helper: derivation");
    check(b.keyPair.privateKey.extractable === false, "the private key is not extractable");
    check((await browser.readAll(on.base, typeId, id)).length === 1, "browser readAll opens a reader session on 401");
    check((await browser.readAll(on.base, typeId, id, b)).length === 1, "browser readAll with a session (token and proofs)");
    const refused = await browser.readAll(on.base, typeId, id, { ...b, token: "forged" }).catch((e) => e);
    check(refused instanceof Error && /401/.test(refused.message), "an explicit bad token is not replaced");
  } finally {
    await on.stop();
    on.cleanup();
  }

  // With --auth none (local experiments only): no token needed, sessions still answered.
  const off = new Gateway({ auth: "none" });
  try {
    await off.start();
    const s = await openSession(off.base);
    check((await write(off, { clientId: s.clientId }, typeId, id, 1)).body.outcome === "landed", "auth none: no token needed");
    check((await off.readAll(typeId, id)).length === 1, "auth none: Gateway.readAll");
    check((await browser.readAll(off.base, typeId, id)).length === 1, "auth none: browser readAll");
  } finally {
    await off.stop();
    off.cleanup();
  }
  return figures;
}
