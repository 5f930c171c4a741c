// End-to-end encryption as Celeriant sees it: a real client in Chromium, opened with
// `encryption` (an AES-GCM key made in the page by WebCrypto, non-extractable), appends a JSON
// event holding a distinctive marker through a gateway running the Celeriant backend over the
// fake Celeriant node (the `fake-celeriant` binary, one node, the real 0.3.0 wire protocol).
// The node's own store is then read back byte for byte (`dump data`: each event's `data` and
// `iv` as the node decoded them from the wire and stored them): the marker does not occur in
// it, the `iv` is 12 bytes, `data` is the plaintext's length plus the 16-byte tag, and the
// page's key decrypts `(iv, data)` back to exactly the JSON appended — Celeriant's documented
// layout, which a backend reader with the key decrypts as is. The page's own view decrypts it
// too. (tests/browser_encryption.rs checks the same through the gateway's local store.)
import { Gateway, launchBrowser, rng, sleep, uuid } from "./lib.mjs";
import { Cluster } from "./fleet.mjs";

function assert(condition, message) {
  if (!condition) throw new Error(message);
}

export async function celeriantEncrypted({ seed = Date.now() % 1e9 } = {}) {
  const random = rng(seed);
  const typeId = uuid(random);
  const id = uuid(random);
  const marker = `plaintext-marker-${uuid(random)}`;
  const cluster = await new Cluster().start({ nodes: 1 });
  const gateway = new Gateway({ flags: ["--backend", "celeriant", "--celeriant-addr", cluster.nodes.join(",")] });
  let context = null;
  try {
    await gateway.start();
    context = await launchBrowser();
    const page = await context.newPage();
    const errors = [];
    page.on("pageerror", (e) => errors.push(e.message));
    await page.goto(`${gateway.base}/index.html?tab=0`);
    await page.waitForFunction(() => globalThis.harness);

    // The client opened with the key; the event appended as JSON and flushed to the gateway.
    const appended = await page.evaluate(async ({ db, aggregate, marker }) => {
      globalThis.e2eKey = await crypto.subtle.generateKey({ name: "AES-GCM", length: 256 }, false, ["encrypt", "decrypt"]);
      await harness.open({ databaseName: db, encryption: globalThis.e2eKey });
      const event = { note: marker, amount: 42 };
      const [receipt] = await harness.client.append(aggregate, [{ type: 5, data: event }]);
      await harness.flush(20_000);
      const view = await harness.client.read(aggregate);
      const shown = view.events.map((e) => ({ status: e.status, json: e.json(), decryptError: e.decryptError ?? null }));
      return { plaintext: JSON.stringify(event), receipt, shown };
    }, { db: `celeriant-encrypted-${seed}`, aggregate: { typeId, id }, marker });
    const plainBytes = Buffer.byteLength(appended.plaintext, "utf8");

    // What the node stored, as it received it.
    let stored = [];
    for (let i = 0; i < 100 && stored.length === 0; i++) {
      const { aggregates } = await cluster.send("dump data");
      stored = aggregates.filter((a) => a.type === typeId && a.id === id).flatMap((a) => a.batches.flatMap((b) => b.events));
      if (stored.length === 0) await sleep(50);
    }
    assert(stored.length === 1, `the node stores ${stored.length} events of the aggregate`);
    const [[clientSeq, eventId, dataHex, ivHex]] = stored;
    assert(clientSeq === appended.receipt.clientSeq && eventId === appended.receipt.eventId,
      `the node's event ${clientSeq}/${eventId} is not the one appended ${JSON.stringify(appended.receipt)}`);
    const data = Buffer.from(dataHex, "hex");
    assert(!data.includes(Buffer.from(marker)), `the node received the marker in clear: ${data.toString("latin1")}`);
    assert(!data.includes(Buffer.from("amount")), `the node received plaintext: ${data.toString("latin1")}`);
    assert(ivHex !== null && Buffer.from(ivHex, "hex").length === 12, `the node's iv: ${ivHex}`);
    assert(data.length === plainBytes + 16, `the node's data is ${data.length} bytes, the plaintext ${plainBytes} (+16 expected)`);

    // The page's key (non-extractable: it never leaves the page) decrypts what the node holds.
    const decrypted = await page.evaluate(async ({ ivHex, dataHex }) => {
      const bytes = (hex) => new Uint8Array(hex.match(/../g).map((b) => parseInt(b, 16)));
      const clear = await crypto.subtle.decrypt({ name: "AES-GCM", iv: bytes(ivHex) }, globalThis.e2eKey, bytes(dataHex));
      return new TextDecoder().decode(clear);
    }, { ivHex, dataHex });
    assert(decrypted === appended.plaintext, `decrypted ${decrypted}, appended ${appended.plaintext}`);
    // And the client's own view decrypts it, confirmed.
    const [shown] = appended.shown;
    assert(appended.shown.length === 1 && shown.status === "confirmed" && shown.json?.note === marker && shown.decryptError === null,
      `the page's view: ${JSON.stringify(appended.shown)}`);
    assert(errors.length === 0, `page errors: ${errors.join("; ")}`);
    return { plaintextBytes: plainBytes, nodeDataBytes: data.length, nodeIvBytes: ivHex.length / 2, markerAtNode: false };
  } finally {
    if (context) await context.cleanup();
    await gateway.stop();
    gateway.cleanup();
    await cluster.stop();
  }
}
