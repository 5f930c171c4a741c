// The end-to-end scenarios besides the chaos run: real tabs of one browser profile, a real
// gateway process. Each returns figures worth printing, or throws.
import { execFileSync } from "node:child_process";
import { rmSync } from "node:fs";
import { join } from "node:path";
import { Gateway, launchBrowser, openTab, rng, uuid, sleep, tempDir, ROOT } from "./lib.mjs";
import { chaos } from "./chaos.mjs";

function assert(condition, message) {
  if (!condition) throw new Error(message);
}

async function withSetup(options, body) {
  const gateway = new Gateway(options);
  await gateway.start();
  const context = await launchBrowser();
  try {
    return await body(gateway, context);
  } finally {
    await context.cleanup();
    await gateway.stop();
    gateway.cleanup();
  }
}

const role = (page) => page.evaluate(() => harness.status().role);

async function waitFor(what, ms, check) {
  const t0 = Date.now();
  for (;;) {
    if (await check()) return Date.now() - t0;
    if (Date.now() - t0 > ms) throw new Error(`timed out after ${ms} ms waiting for ${what}`);
    await sleep(25);
  }
}

/** Only one tab sends at a time: with three tabs appending under faults (none that hold a
 *  request past the client's timeout), the gateway never sees two requests of the client at
 *  once; every event lands once. */
export async function oneSender({ seed }) {
  const result = await chaos({
    events: 600, tabs: 3, aggregates: 5, seed, reloads: 0, closeDrainer: false, kill9: false,
    faults: { dropAfterCommit: 0.3, timeout: 0, inflight: 0.1, busy: 0.1, resetBeforeCommit: 0.05, delayMs: 1500, retryAfterMs: 300 },
    log: () => {},
    verifyConcurrency: true,
    // Only writes of the outbox here: the conditional part's read-backs and catch-ups are
    // requests of the same client too.
    conditional: false,
  });
  return result;
}

/** Closing the draining tab hands draining to another tab within about a second; an event
 *  appended before a reload is reported synced after it (`whenSynced`). */
export async function takeover({ seed }) {
  return withSetup({}, async (gateway, context) => {
    const random = rng(seed);
    const db = `takeover-${seed}`;
    const pages = [];
    for (let i = 0; i < 3; i++) pages.push(await openTab(context, gateway, i, db));
    await waitFor("a drainer", 3000, async () => (await Promise.all(pages.map(role))).includes("drainer"));
    const roles = await Promise.all(pages.map(role));
    assert(roles.filter((r) => r === "drainer").length === 1, `one drainer: ${roles}`);
    const drainer = pages[roles.indexOf("drainer")];
    const others = pages.filter((p) => p !== drainer);
    // Pending work in a follower, then the drainer goes away.
    await gateway.setFaults({ busy: 1.0, retryAfterMs: 200 });
    const typeId = uuid(random);
    const id = uuid(random);
    const receipts = await others[0].evaluate(({ typeId, id }) => harness.append({ typeId, id }, [{ type: 1, payload: "a" }, { type: 1, payload: "b" }]), { typeId, id });
    await drainer.close();
    const ms = await waitFor("a new drainer", 5000, async () => (await Promise.all(others.map(role))).includes("drainer"));
    assert(ms < 1500, `takeover took ${ms} ms`);
    const nowRoles = await Promise.all(others.map(role));
    assert(nowRoles.filter((r) => r === "drainer").length === 1, `exactly one new drainer: ${nowRoles}`);
    // whenSynced across a reload, in the tab that appended.
    await others[0].reload();
    await others[0].waitForFunction(() => globalThis.harness);
    await others[0].evaluate((db) => harness.open({ databaseName: db }), db);
    await gateway.setFaults({});
    await others[0].evaluate((ids) => Promise.all(ids.map((id) => harness.whenSynced(id))), receipts.map((r) => r.eventId));
    const landed = await gateway.readAll(typeId, id);
    assert(landed.length === 2, `landed ${landed.length}`);
    return { takeoverMs: ms };
  });
}

/** A hung (or frozen) drainer keeps its lock; a follower with pending work that hears nothing
 *  for ten seconds takes draining over, and the revived tab stands down without sending.
 *  The drainer's event loop is blocked for 15 s (DevTools' "frozen" lifecycle state is refused
 *  for visible pages, and a blocked loop is what a frozen or hung tab looks like to others). */
export async function hungDrainer({ seed }) {
  return withSetup({}, async (gateway, context) => {
    const random = rng(seed);
    const db = `hung-${seed}`;
    const a = await openTab(context, gateway, 0, db);
    await waitFor("a to drain", 3000, async () => (await role(a)) === "drainer");
    const b = await openTab(context, gateway, 1, db);
    const typeId = uuid(random);
    const id = uuid(random);
    const hung = a.evaluate(() => {
      const until = Date.now() + 15_000;
      while (Date.now() < until) { /* hung */ }
    });
    await sleep(200);
    await b.evaluate(({ typeId, id }) => harness.append({ typeId, id }, [{ type: 1, payload: "while a hangs" }]), { typeId, id });
    const ms = await waitFor("b to take over", 30_000, async () => (await role(b)) === "drainer");
    await b.evaluate(() => harness.flush(10_000));
    await hung;
    await waitFor("a to stand down", 10_000, async () => (await role(a)) === "follower");
    await a.evaluate(({ typeId, id }) => harness.append({ typeId, id }, [{ type: 1, payload: "after a recovered" }]), { typeId, id });
    await b.evaluate(() => harness.flush(10_000));
    const landed = await gateway.readAll(typeId, id);
    assert(landed.map((e) => e.clientSeq).join() === "1,2", `landed ${landed.map((e) => e.clientSeq)}`);
    return { stealAfterMs: ms };
  });
}

/** A full disk surfaces as QUOTA_EXCEEDED from `append` with nothing half-written. The
 *  browser profile lives on a 96 MiB tmpfs (Chromium's quota override through the DevTools
 *  protocol does not limit IndexedDB writes; a full filesystem does), so this needs root. */
export async function quota({ seed }) {
  const mountPoint = tempDir("quota");
  execFileSync("mount", ["-t", "tmpfs", "-o", "size=96m", "tmpfs", mountPoint]);
  const gateway = new Gateway();
  await gateway.start();
  const context = await launchBrowser(join(mountPoint, "profile"));
  try {
    const random = rng(seed);
    const db = `quota-${seed}`;
    // Nothing syncs (the gateway address is unreachable): the outbox only grows.
    const page = await openTab(context, gateway, 0, db, { gatewayUrl: "http://127.0.0.1:9" });
    const aggregate = { typeId: uuid(random), id: uuid(random) };
    const result = await page.evaluate(async ({ aggregate, db }) => {
      const randomBytes = (n) => {
        const a = new Uint8Array(n);
        for (let k = 0; k < n; k += 65536) crypto.getRandomValues(a.subarray(k, k + 65536));
        return a;
      };
      let stored = 0;
      for (let n = 0; n < 1000; n++) {
        const before = await harness.countOutbox(db);
        try {
          await harness.client.append(aggregate, Array.from({ length: 4 }, () => ({ type: 1, data: randomBytes(256 * 1024) })));
          stored += 4;
        } catch (e) {
          const after = await harness.countOutbox(db);
          return { stored, name: e.name, code: e.code, before, after, isError: e instanceof Error, message: e.message };
        }
      }
      return { stored, code: "none" };
    }, { aggregate, db });
    assert(result.code === "QUOTA_EXCEEDED", `expected QUOTA_EXCEEDED, got ${JSON.stringify(result)}`);
    assert(result.isError && result.name === "CeleriantSyncError", `a real, named Error: ${JSON.stringify(result)}`);
    assert(result.before === result.after && result.after === result.stored, `nothing half-written: ${JSON.stringify(result)}`);
    // The failed append consumed no sequence: the aggregate's counter is still at the last
    // stored event (read straight from IndexedDB).
    const counter = await page.evaluate(({ aggregate, db }) => new Promise((resolve, reject) => {
      const open = indexedDB.open(db);
      open.onerror = () => reject(open.error);
      open.onsuccess = () => {
        const req = open.result.transaction("counters").objectStore("counters").get([aggregate.typeId, aggregate.id]);
        req.onsuccess = () => { open.result.close(); resolve(req.result?.last); };
        req.onerror = () => reject(req.error);
      };
    }), { aggregate, db });
    assert(counter === result.stored, `no sequence consumed by the failed append: counter ${counter}, stored ${result.stored}`);
    return { storedBeforeFull: result.stored, message: result.message };
  } finally {
    await context.cleanup();
    await gateway.stop();
    gateway.cleanup();
    execFileSync("umount", [mountPoint]);
    rmSync(mountPoint, { recursive: true, force: true });
  }
}

// The demo's account type and first account (www/app.js).
const DEMO_TYPE = "5e0d9e1a-7c41-4b8e-9f2a-0c6b3d1e2f01";
const ACCOUNT_A = "a11ce000-0000-4000-8000-00000000000a";

/** The demo page, used as an app would: append, watch the outbox sync, the balance (a
 *  projection) follow. */
export async function demo() {
  // The demo runs with the policy `npm start` ships.
  return withSetup({ www: join(ROOT, "www"), policy: join(ROOT, "scripts/demo-policy.toml") }, async (gateway, context) => {
    const page = await context.newPage();
    const errors = [];
    page.on("pageerror", (e) => errors.push(e.message));
    await page.goto(`${gateway.base}/`);
    await page.waitForFunction(() => document.getElementById("clientId").textContent.length === 36);
    await page.click("[data-append='10']");
    await page.waitForFunction(() => document.getElementById("synced").textContent === "10", null, { timeout: 15_000 });
    await page.waitForFunction(() => document.getElementById("pending").textContent === "0");
    await page.waitForFunction(
      () => [...document.querySelectorAll("#serverRows tr")].some((row) => row.children[1].textContent === "10"),
      null,
      { timeout: 15_000 },
    );
    // The inspector panel shows the landing among the recent outcomes.
    await page.waitForFunction(
      () => [...document.querySelectorAll("#inspectOutcomes li")].some((li) => li.textContent.includes(": landed")),
      null,
      { timeout: 5_000 },
    );
    // The balance is the account's projection (client.project, www/balances.js): ten events of
    // the default amount 10, all confirmed; one more of 5 moves it at once (pending on top),
    // then it is confirmed at the next version.
    const balanceA = (cls) => page.textContent(`#balanceRows tr[data-account="${ACCOUNT_A}"] .${cls}`);
    await waitFor("Account A's balance 100", 10_000, async () => (await balanceA("balance")) === "100" && (await balanceA("confirmed")).startsWith("100 "));
    const versionBefore = Number(/\(v(\d+)\)/.exec(await balanceA("confirmed"))[1]);
    await page.fill("#amount", "5");
    await page.click("[data-append='1']");
    await waitFor("Account A's balance 105", 5_000, async () => (await balanceA("balance")) === "105");
    await waitFor("the 5 confirmed", 15_000, async () => (await balanceA("confirmed")).startsWith("105 ") && (await balanceA("pendingCount")) === "0");
    const versionAfter = Number(/\(v(\d+)\)/.exec(await balanceA("confirmed"))[1]);
    assert(versionAfter > versionBefore, `the projection's version went from ${versionBefore} to ${versionAfter}`);
    const conflict = await demoConflict(page, balanceA, versionAfter, gateway);
    const transfer = await demoTransfer(page, balanceA, gateway);
    // The fault buttons: without the secret `npm start` puts in the fragment they change nothing;
    // with it, Chaos and No faults set the gateway's rates. The secret never travels in a URL.
    const urls = [];
    page.on("request", (r) => urls.push(r.url()));
    const rates = async () => (await gateway.faults()).rates;
    await page.click("#chaos");
    await sleep(500);
    assert((await rates()).dropAfterCommit === 0, "no secret, no faults");
    await page.goto(`${gateway.base}/#faults=${gateway.faultsSecret}`);
    await page.reload(); // afresh, as a user opening the printed URL would
    await page.waitForFunction(() => document.getElementById("clientId").textContent.length === 36);
    await page.click("#chaos");
    await waitFor("the chaos rates", 5_000, async () => (await rates()).dropAfterCommit === 0.3);
    await page.click("#calm");
    await waitFor("the calm rates", 5_000, async () => (await rates()).dropAfterCommit === 0);
    const leaked = urls.filter((u) => u.split("#")[0].includes(gateway.faultsSecret));
    assert(leaked.length === 0, `the secret in a request URL: ${leaked}`);
    assert(errors.length === 0, `page errors: ${errors}`);
    return { synced: 11, balance: 105, versions: [versionBefore, versionAfter], ...conflict, ...transfer };
  });
}

/** The demo's conflict and withdrawals on Account A (at `version`, balance 105, 11 events):
 *  "Provoke a conflict" parks a withdrawal appended with a stale expectedVersion with 2003 and
 *  the server's current version, never counted and never stored; its Discard drops it; then
 *  "Withdraw (decide)" takes 30 (landing at version + 1, balance 75) and refuses 1000 (more
 *  than the balance: nothing written). */
async function demoConflict(page, balanceA, version, gateway) {
  const note = () => page.textContent("#conflictNote");
  const serverAmounts = async () => (await gateway.readAll(DEMO_TYPE, ACCOUNT_A)).map((e) => JSON.parse(Buffer.from(e.data, "base64")).amount);
  await page.fill("#amount", "7");
  await page.click("#conflict");
  await waitFor("the conflict parked", 20_000, async () => (await note()).startsWith("conflict: parked"));
  const text = await note();
  assert(text.includes("parked with 2003") && text.includes(`expectedVersion ${version - 1}`) && text.includes(`currentVersion ${version}`), `conflict note: ${text}`);
  const parkedRow = await page.textContent("#parkedList");
  assert(parkedRow.includes("rejected 2003") && parkedRow.includes(`(currentVersion ${version})`), `parked list: ${parkedRow}`);
  assert((await page.textContent("#parked")) === "1", `parked count ${await page.textContent("#parked")}`);
  assert((await balanceA("balance")) === "105", `a parked withdrawal counted: balance ${await balanceA("balance")}`);
  let amounts = await serverAmounts();
  assert(amounts.length === 11 && !amounts.includes(-7), `the server holds ${amounts}`);
  await page.click("#parkedList button");
  await waitFor("the discard", 10_000, async () => (await page.textContent("#parked")) === "0" && (await page.textContent("#parkedList")) === "");
  const logged = await page.textContent("#events");
  assert(logged.includes("discarded 1 parked event(s) of Account A"), "the discard is not in the page's log");
  // decide: the withdrawal lands at the next version; an overdraft is refused.
  await page.fill("#amount", "30");
  await page.click("#withdraw");
  await waitFor("the withdrawal", 20_000, async () => (await note()).startsWith("withdrew") || (await note()).startsWith("withdraw:"));
  assert((await note()).startsWith(`withdrew 30 from Account A (balance was 105): landed at version ${version + 1} after 1 attempt(s)`), `withdraw note: ${await note()}`);
  await waitFor("balance 75 confirmed", 10_000, async () => (await balanceA("balance")) === "75" && (await balanceA("confirmed")).startsWith(`75 (v${version + 1})`));
  await page.fill("#amount", "1000");
  await page.click("#withdraw");
  await waitFor("the refusal", 20_000, async () => (await note()).startsWith("refused") || (await note()).startsWith("withdraw:"));
  assert((await note()).startsWith("refused: Account A's balance is 75, less than 1000; nothing written"), `overdraft note: ${await note()}`);
  amounts = await serverAmounts();
  assert(amounts.length === 12 && amounts.at(-1) === -30 && !amounts.includes(-7) && !amounts.includes(-1000), `the server holds ${amounts}`);
  return { conflictCurrentVersion: version, withdrawnAtVersion: version + 1, balanceAfterWithdrawal: 75 };
}

/** The demo's transfers (Account A at balance 75, Account B empty): "Transfer" moves 20 from A
 *  to B with appendAtomic, landing on both in one request; "Transfer with a stale guard" is
 *  refused whole (2003): both legs parked, neither counted nor stored, and discarding one leg
 *  discards both. */
async function demoTransfer(page, balanceA, gateway) {
  const ACCOUNT_B = "b0b00000-0000-4000-8000-00000000000b";
  const note = () => page.textContent("#transferNote");
  const balanceB = (cls) => page.textContent(`#balanceRows tr[data-account="${ACCOUNT_B}"] .${cls}`);
  const serverCount = async (id) => (await gateway.readAll(DEMO_TYPE, id)).length;
  const [beforeA, beforeB] = [await serverCount(ACCOUNT_A), await serverCount(ACCOUNT_B)];
  await page.selectOption("#transferTo", ACCOUNT_B);
  await page.fill("#amount", "20");
  await page.click("#transfer");
  await waitFor("the transfer", 20_000, async () => / landed on both|^transfer:/.test(await note()));
  assert((await note()).includes("from Account A to Account B landed on both, in one request"), `transfer note: ${await note()}`);
  await waitFor("balances 55 and 20", 10_000, async () => (await balanceA("balance")) === "55" && (await balanceB("balance")) === "20");
  const [afterA, afterB] = [await serverCount(ACCOUNT_A), await serverCount(ACCOUNT_B)];
  assert(afterA === beforeA + 1 && afterB === beforeB + 1, `the server holds ${afterA} and ${afterB} events`);
  await page.click("#transferStale");
  await waitFor("the stale transfer parked", 20_000, async () => /refused whole|^transfer:/.test(await note()));
  const text = await note();
  assert(text.includes("parked with 2003") && text.includes("of 2 accounts"), `stale transfer note: ${text}`);
  assert((await page.textContent("#parked")) === "2", `parked count ${await page.textContent("#parked")}`);
  assert((await balanceA("balance")) === "55" && (await balanceB("balance")) === "20", "a parked transfer counted");
  await page.click("#parkedList button");
  await waitFor("both legs discarded", 10_000, async () => (await page.textContent("#parked")) === "0" && (await page.textContent("#parkedList")) === "");
  assert((await serverCount(ACCOUNT_A)) === afterA && (await serverCount(ACCOUNT_B)) === afterB, "nothing of the stale transfer stored");
  return { transferredAtomically: 20, staleTransferParkedLegs: 2 };
}

/** The read side across a gateway crash: two devices (two databases in one profile) watch the
 *  same aggregates and append to them; the gateway is killed (SIGKILL) mid-stream and
 *  restarted on the same port; the streams reconnect by themselves and every listener's last
 *  view equals the server's log, with no event ever vanishing, doubling or turning pending
 *  again. After the restart each device holds exactly one stream (once its backoff let it
 *  reopen), never two. */
export async function readRestart({ seed }) {
  const random = rng(seed);
  // Two devices append to the same aggregates: they must share them (`authenticated`).
  return withSetup({ policy: "authenticated" }, async (gateway, context) => {
    const typeId = uuid(random);
    const ids = [uuid(random), uuid(random), uuid(random)];
    const pages = [await openTab(context, gateway, "a", "read-a"), await openTab(context, gateway, "b", "read-b")];
    const clientIds = [];
    for (const page of pages) {
      clientIds.push(await page.evaluate(() => harness.client.clientId));
      for (const id of ids) await page.evaluate((a) => harness.watch(a), { typeId, id });
    }
    let n = 0;
    const round = async () => {
      for (const page of pages) {
        const id = ids[n % ids.length];
        await page.evaluate(([a, p]) => harness.append(a, [{ type: 1, payload: p }]), [{ typeId, id }, `e${n++}`]);
      }
    };
    for (let i = 0; i < 6; i++) { await round(); await sleep(100); }
    await waitFor("both streams", 15_000, async () => {
      const counts = (await gateway.faults()).counts ?? {};
      return (counts.watchStreams ?? 0) >= 2;
    });
    await gateway.kill9();
    for (let i = 0; i < 4; i++) { await round(); await sleep(100); }
    await sleep(1000);
    await gateway.start();
    for (let i = 0; i < 6; i++) { await round(); await sleep(100); }
    for (const page of pages) await page.evaluate(() => harness.flush(60_000));
    let total = 0;
    for (const id of ids) {
      const server = (await gateway.readAllBatches(typeId, id));
      total += server.length;
      for (const [i, page] of pages.entries()) {
        const waited = await waitFor(`device ${i}'s view of ${id}`, 40_000, async () => {
          const r = await page.evaluate((id) => harness.watchReport(id), id);
          return r.last && JSON.stringify(r.last) === JSON.stringify(server);
        });
        const r = await page.evaluate((id) => harness.watchReport(id), id);
        assert(!r.problem, `device ${i}, aggregate ${id}: ${r.problem}`);
        void waited;
      }
    }
    assert(total === n, `the server holds ${total} events, ${n} were appended`);
    // Each device reopens its stream after its own backoff (250 ms doubling, while the gateway
    // was down), which may end after the views converged: wait for it, but never accept a
    // second stream.
    let byClient = {};
    const streamWaitMs = await waitFor("one stream per device after the restart", 40_000, async () => {
      byClient = (await gateway.faults()).counts.watchStreamsByClient ?? {};
      for (const c of clientIds) assert(!(byClient[c] > 1), `device ${c} holds ${byClient[c]} streams after the restart`);
      return clientIds.every((c) => byClient[c] === 1);
    });
    return { events: n, lives: gateway.lives, streamWaitMs };
  });
}

/** The demo's live view with a second device: device 1 (`/`) and device 2 (`/?device=2`, its
 *  own database, so its own client id) append to the same aggregate through the UI; each page's
 *  live view ends up listing both devices' events as confirmed. Device 2 appends once while
 *  (simulated) offline: its live view shows that event pending until it syncs. A rejected
 *  event shows as parked, with the reason. */
export async function demoLive() {
  // The demo runs with the policy `npm start` ships.
  return withSetup({ www: join(ROOT, "www"), policy: join(ROOT, "scripts/demo-policy.toml") }, async (gateway, context) => {
    const errors = [];
    const open = async (query) => {
      const page = await context.newPage();
      page.on("pageerror", (e) => errors.push(`${query || "/"}: ${e.message}`));
      // As `npm start` prints it: the faults secret in the fragment (Apply needs it below).
      await page.goto(`${gateway.base}/${query}#faults=${gateway.faultsSecret}`);
      await page.waitForFunction(() => document.getElementById("clientId").textContent.length === 36);
      return page;
    };
    const [one, two] = [await open(""), await open("?device=2")];
    const ids = [await one.textContent("#clientId"), await two.textContent("#clientId")];
    assert(ids[0] !== ids[1], `two devices, two client ids: ${ids}`);
    assert((await two.textContent("#deviceName")) === "device 2", "the second page says it is device 2");
    const short = ids.map((id) => id.slice(0, 8));
    // The live view's event rows of the first aggregate, as text.
    const rows = (page) => page.$$eval("#liveAggregates .aggregate:first-child .events li", (lis) => lis.map((li) => `${li.className}|${li.textContent}`));
    const writers = (page) => page.$$eval("#liveAggregates .aggregate:first-child .writers li", (lis) => lis.map((li) => li.textContent));
    const waitRows = async (page, what, check, ms = 20_000) => {
      try {
        await waitFor(what, ms, async () => check(await rows(page), await writers(page)));
      } catch (e) {
        throw new Error(`${e.message}; rows: ${JSON.stringify(await rows(page))}; writers: ${JSON.stringify(await writers(page))}`);
      }
    };

    await one.click("[data-append='1']");
    await one.click("[data-append='1']");
    // Device 2 offline: its append is pending (marked so) in its own view until it syncs.
    await two.check("#offline");
    await two.click("[data-append='1']");
    await waitRows(two, "device 2's own event pending", (r) =>
      r.some((t) => t.startsWith("pending|") && t.includes(`${short[1]} (this device) #1`) && t.includes("device 2: demo event 1 of 1")));
    await two.uncheck("#offline");
    await two.click("[data-append='1']");

    // Both views converge: device 1's #1–#2 and device 2's #1–#2, all confirmed, nothing pending.
    const converged = (me, other) => (r, w) =>
      r.length === 4 && r.every((t) => t.startsWith("confirmed|")) &&
      [1, 2].every((s) => r.some((t) => t.includes(`${short[me]} (this device) #${s}`)) && r.some((t) => t.includes(`${short[other]} #${s}`))) &&
      w.includes(`${short[me]} (this device): 2 confirmed`) && w.includes(`${short[other]}: 2 confirmed`);
    await waitRows(one, "device 1's view to show both devices confirmed", converged(0, 1));
    await waitRows(two, "device 2's view to show both devices confirmed", converged(1, 0));
    const heading = await one.textContent("#liveAggregates .aggregate:first-child h3");
    assert(/version \d+, 4 confirmed, 0 pending/.test(heading), `heading: ${heading}`);
    assert(/^v\d+ /.test((await rows(one))[0].split("|")[1]), "confirmed rows carry their version");

    // A rejected event (the gateway refuses type 13 once Apply sends the reject type) is parked,
    // with its reason, in the aggregate it was appended to.
    await one.selectOption("#aggregate", { index: 2 });
    await one.click("#applyFaults");
    await one.click("#poison");
    await waitFor("a parked row", 15_000, async () =>
      (await one.$$eval("#liveAggregates .aggregate:nth-child(3) .events li.parked", (lis) => lis.map((li) => li.textContent)))
        .some((t) => t.includes("parked (") && t.includes(`${short[0]} (this device) #1`)));
    const readState = await one.textContent("#readState");
    assert(errors.length === 0, `page errors: ${errors}`);
    return { devices: 2, events: 4, readState };
  });
}
