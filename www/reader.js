// The demo's own reader session, to show the server's side of each aggregate (reads need a
// session too). A key made for this page, a signed nonce, POST /v1/session; the token is
// reused until the gateway refuses it (it expired, or its secret was rotated), then renewed.
// An app would use the client's own read side instead; this is the protocol, by hand.

const b64 = (bytes) => btoa(String.fromCharCode(...bytes));

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
    if (r.ok) return body.token;
    if (body && typeof body.serverTime === "number") offset = body.serverTime - Date.now();
  }
  throw new Error("no reader session");
}

let token = null;

/** GET `url` on `gateway` under the reader session; renews the session once on a 401. */
export async function read(gateway, url) {
  for (let attempt = 0; attempt < 2; attempt++) {
    token = token ?? openSession(gateway);
    const r = await fetch(url, { headers: { authorization: `Bearer ${await token}` } });
    if (r.status !== 401) return r;
    token = null;
  }
  return null;
}
