// The demo's own reader session, to show the server's side of each aggregate (reads need a
// session too). A key made for this page, a signed nonce, POST /v1/session; the token is
// reused until the gateway refuses it (it expired, or its secret was rotated), then renewed.
// Every read carries a DPoP proof signed by the same key (docs/protocol.md, 14.7).
// An app would use the client's own read side instead; this is the protocol, by hand.

const b64 = (bytes) => btoa(String.fromCharCode(...bytes));
const b64url = (bytes) => b64(bytes).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
const utf8 = (text) => new TextEncoder().encode(text);
const sha = async (text) => b64url(new Uint8Array(await crypto.subtle.digest("SHA-256", utf8(text))));

/** A proof for `GET url` under `session`: the key's public half, the request, the token's and
 *  the (empty) body's hashes, the time on the gateway's clock, a random id. */
async function proof(session, url) {
  const { n, e } = await crypto.subtle.exportKey("jwk", session.keyPair.publicKey);
  const head = b64url(utf8(JSON.stringify({ typ: "dpop+jwt", alg: "RS256", jwk: { kty: "RSA", n, e } })));
  const target = new URL(url, location.href);
  const claims = {
    jti: b64url(crypto.getRandomValues(new Uint8Array(16))), htm: "GET", htu: target.pathname + target.search,
    iat: Math.floor((Date.now() + session.offset) / 1000), ath: await sha(session.token), bh: await sha(""),
  };
  const input = `${head}.${b64url(utf8(JSON.stringify(claims)))}`;
  const signature = await crypto.subtle.sign("RSASSA-PKCS1-v1_5", session.keyPair.privateKey, utf8(input));
  return `${input}.${b64url(new Uint8Array(signature))}`;
}

async function openSession(gateway) {
  const keyPair = await crypto.subtle.generateKey(
    { name: "RSASSA-PKCS1-v1_5", modulusLength: 2048, publicExponent: new Uint8Array([1, 0, 1]), hash: "SHA-256" },
    false, ["sign", "verify"],
  );
  const publicKey = b64(new Uint8Array(await crypto.subtle.exportKey("spki", keyPair.publicKey)));
  let offset = 0;
  for (let attempt = 0; attempt < 2; attempt++) {
    const nonce = String(Math.round(Date.now() + offset) + attempt);
    const signature = new Uint8Array(await crypto.subtle.sign("RSASSA-PKCS1-v1_5", keyPair.privateKey, new TextEncoder().encode(nonce)));
    const r = await fetch(`${gateway}/v1/session`, {
      method: "POST", headers: { "content-type": "application/json" },
      body: JSON.stringify({ publicKey, nonce, signature: b64(signature) }),
    });
    const body = await r.json().catch(() => null);
    if (r.ok) return { token: body.token, keyPair, offset: body.serverTime - Date.now() };
    if (body && typeof body.serverTime === "number") offset = body.serverTime - Date.now();
  }
  throw new Error("no reader session");
}

let session = null;

/** GET `url` on `gateway` under the reader session, with a fresh proof; renews the session
 *  once on a 401. */
export async function read(gateway, url) {
  for (let attempt = 0; attempt < 2; attempt++) {
    session = session ?? openSession(gateway);
    const s = await session;
    const r = await fetch(url, { headers: { authorization: `Bearer ${s.token}`, dpop: await proof(s, url) } });
    if (r.status !== 401) return r;
    session = null;
  }
  return null;
}
