// The demo's encryption switch (www/, as `npm start` serves it): switched on, the page re-opens
// its client with the device's AES-GCM key (www/keys.js) and what it appends reaches the gateway
// as ciphertext — read back through the gateway's HTTP read API with the operator credential, as
// an audit tool would: `iv` a 12-byte nonce, `data` no JSON and none of the plaintext — while the
// page's balance (a projection) and live view show the decrypted values. The key survives a
// reload (kept in IndexedDB); switched off, the encrypted event is counted as "cannot decrypt",
// never folded as a wrong number, and a new append is plain JSON on the gateway again.
import { join } from "node:path";
import { Gateway, launchBrowser, sleep, ROOT } from "./lib.mjs";

// The demo's type and second account (www/app.js).
const TYPE_ID = "5e0d9e1a-7c41-4b8e-9f2a-0c6b3d1e2f01";
const ACCOUNT_B = "b0b00000-0000-4000-8000-00000000000b";

function assert(condition, message) {
  if (!condition) throw new Error(message);
}

async function waitFor(what, ms, check, shown = async () => "") {
  const t0 = Date.now();
  for (;;) {
    if (await check()) return;
    if (Date.now() - t0 > ms) throw new Error(`timed out after ${ms} ms waiting for ${what}; ${await shown()}`);
    await sleep(25);
  }
}

const bytes = (b64) => Buffer.from(b64, "base64");

export async function demoEncrypted() {
  const gateway = new Gateway({ www: join(ROOT, "www"), policy: join(ROOT, "scripts/demo-policy.toml") });
  await gateway.start();
  const context = await launchBrowser();
  const errors = [];
  try {
    const page = await context.newPage();
    page.on("pageerror", (e) => errors.push(e.message));
    const loaded = () => page.waitForFunction(() => document.getElementById("clientId").textContent.length === 36, null, { timeout: 15_000 });
    const state = () => page.textContent("#encryptionState");
    const cell = (cls) => page.textContent(`#balanceRows tr[data-account="${ACCOUNT_B}"] .${cls}`);
    const row = async () => JSON.stringify(await page.$$eval(`#balanceRows tr[data-account="${ACCOUNT_B}"] td`, (tds) => tds.map((td) => td.textContent)));
    const toggle = async () => {
      await Promise.all([page.waitForEvent("load"), page.click("#encrypt")]);
      await loaded();
    };
    const appendToB = async (amount) => {
      await page.selectOption("#aggregate", ACCOUNT_B);
      await page.fill("#amount", String(amount));
      await page.click("[data-append='1']");
    };

    await page.goto(`${gateway.base}/`);
    await loaded();
    assert((await state()).startsWith("off"), `the switch starts off: ${await state()}`);

    // 1. On: the page reloads, its client opened with the key.
    await toggle();
    assert(await page.isChecked("#encrypt"), "the switch is on after its reload");
    assert((await state()).startsWith("on"), `the page says: ${await state()}`);
    await appendToB(7);
    await waitFor("the balance 7, confirmed", 15_000, async () => (await cell("balance")) === "7" && (await cell("confirmed")).startsWith("7 "), row);
    await page.waitForFunction(() => document.getElementById("pending").textContent === "0", null, { timeout: 15_000 });

    // 2. The gateway holds ciphertext: a 12-byte iv, data that is no JSON and holds none of the
    //    plaintext's words.
    const stored = await gateway.readAll(TYPE_ID, ACCOUNT_B);
    assert(stored.length === 1, `the gateway holds ${stored.length} events of account B`);
    const [secret] = stored;
    assert(secret.iv && bytes(secret.iv).length === 12, `iv: ${secret.iv}`);
    const data = bytes(secret.data);
    const text = data.toString("latin1");
    assert(!/demo event|amount|device/.test(text), `the stored data holds plaintext: ${text}`);
    let parsed = true;
    try { JSON.parse(data.toString("utf8")); } catch { parsed = false; }
    assert(!parsed, "the stored data parses as JSON");
    // The page decrypted it: the live view shows the note, marked encrypted on the server.
    const live = await page.textContent(`#liveAggregates .aggregate[data-aggregate="${ACCOUNT_B}"] .events`);
    assert(live.includes("demo event 1 of 1 (encrypted on the server)"), `the live view shows: ${live}`);
    await waitFor("the server panel's encrypted count", 10_000, async () =>
      (await page.$$eval("#serverRows tr", (trs) => trs.map((tr) => [...tr.children].map((td) => td.textContent)))).some((r) => r[0] === "Account B" && r[1] === "1" && r[4] === "1"));

    // 3. Reloaded: the key is the one kept in IndexedDB, the event still reads.
    await page.reload();
    await loaded();
    assert(await page.isChecked("#encrypt"), "the switch is remembered");
    await waitFor("the balance 7 after a reload", 15_000, async () => (await cell("balance")) === "7" && (await cell("unreadable")) === "0", row);

    // 4. Off: the client has no key, the encrypted event is counted apart; a new append is plain.
    await toggle();
    assert((await state()).startsWith("off"), `the page says: ${await state()}`);
    await waitFor("the encrypted event counted unreadable", 15_000, async () => (await cell("unreadable")) === "1" && (await cell("balance")) === "0", row);
    await appendToB(3);
    await waitFor("the balance 3, confirmed", 15_000, async () => (await cell("balance")) === "3" && (await cell("confirmed")).startsWith("3 "), row);
    const after = await gateway.readAll(TYPE_ID, ACCOUNT_B);
    assert(after.length === 2, `the gateway holds ${after.length} events of account B`);
    assert(after[1].iv === null, `the plain event has iv ${after[1].iv}`);
    assert(JSON.parse(bytes(after[1].data).toString("utf8")).amount === 3, "the plain event is the JSON appended");

    // 5. On again: the encrypted event reads, and the plain one is flagged NOT_ENCRYPTED by the
    // client (clear data where the aggregate has a key): counted, and shown as in the clear.
    await toggle();
    assert((await state()).startsWith("on"), `the page says: ${await state()}`);
    await waitFor("the balance 10 with one event in the clear", 15_000, async () => (await cell("balance")) === "10" && (await cell("clear")) === "1" && (await cell("unreadable")) === "0", row);
    assert(errors.length === 0, `page errors: ${errors.join("; ")}`);
    return { ciphertextBytes: data.length, ivBytes: bytes(secret.iv).length, balanceOn: 7, unreadableOff: 1, plainAfter: 3, clearFlagged: 1 };
  } finally {
    await context.cleanup();
    await gateway.stop();
    gateway.cleanup();
  }
}
