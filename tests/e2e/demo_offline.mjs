// The demo page as a newcomer uses it (www/, as `npm start` serves it): it loads with no error
// in the console; its "Offline" switch (client.setOffline) really stops the client's traffic;
// reloaded while the gateway is down it loads from its service worker, still offline, and
// takes more appends; the balance (a projection) counts the events appended offline at once
// and the same once they are confirmed; back online every event lands exactly once; and "Append a rejected
// event" parks its aggregate on the first click, with the gateway started with `npm start`'s
// own reject flag (read from scripts/start.sh, so the two cannot drift), and leaves the balance
// as it was.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { Gateway, launchBrowser, sleep, ROOT } from "./lib.mjs";

// The demo's type and first aggregate (www/app.js).
const TYPE_ID = "5e0d9e1a-7c41-4b8e-9f2a-0c6b3d1e2f01";
const ACCOUNT_A = "a11ce000-0000-4000-8000-00000000000a";

function assert(condition, message) {
  if (!condition) throw new Error(message);
}

/** The type `npm start` tells the gateway to reject (`--fault-reject-type N` in scripts/start.sh). */
function startRejectType() {
  const script = readFileSync(join(ROOT, "scripts/start.sh"), "utf8");
  const found = /--fault-reject-type\s+(\d+)/.exec(script);
  assert(found, "scripts/start.sh passes --fault-reject-type");
  return Number(found[1]);
}

const text = (page, id) => page.evaluate((id) => document.getElementById(id).textContent, id);
const waitText = (page, id, want, timeout = 15_000) =>
  page.waitForFunction(([id, want]) => document.getElementById(id).textContent === want, [id, want], { timeout });

export async function demoOffline() {
  const rejectType = startRejectType();
  // `npm start`'s own policy too: the page's server view reads the accounts with a reader key of
  // its own, which the default `owner` policy would answer with empty pages.
  const gateway = new Gateway({
    www: join(ROOT, "www"),
    policy: join(ROOT, "scripts/demo-policy.toml"),
    flags: ["--fault-reject-type", String(rejectType)],
  });
  await gateway.start();
  const context = await launchBrowser();
  const problems = [];
  try {
    const page = await context.newPage();
    page.on("console", (m) => { if (m.type() === "error" || m.type() === "warning") problems.push(`console ${m.type()}: ${m.text()}`); });
    page.on("pageerror", (e) => problems.push(`page error: ${e.message}`));
    page.on("response", (r) => { if (r.status() >= 400) problems.push(`${r.status()} ${r.url()}`); });
    page.on("requestfailed", (r) => problems.push(`request failed: ${r.url()} (${r.failure()?.errorText})`));

    // 1. Loads with no console error (the first polls of the gateway included).
    await page.goto(`${gateway.base}/`);
    await page.waitForFunction(() => document.getElementById("clientId").textContent.length === 36);
    await page.waitForFunction(() => navigator.serviceWorker.controller !== null, null, { timeout: 15_000 });
    await sleep(3_500);
    assert(problems.length === 0, `loading the demo: ${problems.join("; ")}`);

    // 2. Offline with the page's switch: stored, not sent.
    await page.check("#offline");
    await page.click("[data-append='10']");
    await waitText(page, "pending", "10");
    await waitText(page, "state", "offline", 5_000);
    await sleep(1_000);
    assert((await gateway.readAll(TYPE_ID, ACCOUNT_A)).length === 0, "an event landed while the page said offline");
    // The balance (a projection: this device's pending events folded on top) moved at once.
    const balance = (cls) => page.textContent(`#balanceRows tr[data-account="${ACCOUNT_A}"] .${cls}`);
    assert((await balance("balance")) === "100" && (await balance("pendingCount")) === "10" && (await balance("confirmed")).startsWith("0 "),
      `offline, account A's balance row reads ${await balance("balance")}, ${await balance("pendingCount")} pending, confirmed ${await balance("confirmed")}`);

    // 3. Reloaded with no network at all (the gateway is down): the service worker serves the
    //    page and the package; it comes back offline, with its outbox, and takes more appends.
    await gateway.stop();
    const reloaded = await page.reload();
    assert(reloaded?.fromServiceWorker(), "the reloaded page did not come from the service worker");
    await page.waitForFunction(() => document.getElementById("clientId").textContent.length === 36, null, { timeout: 15_000 });
    assert(await page.isChecked("#offline"), "the switch is still on after the reload");
    assert(await page.evaluate(() => window.client.offline), "the client opened switched off");
    await waitText(page, "pending", "10");
    await page.click("[data-append='1']");
    await waitText(page, "pending", "11");

    // 4. Back online: everything lands, once each, in order.
    await gateway.start();
    await page.uncheck("#offline");
    await waitText(page, "pending", "0", 30_000);
    const landed = await gateway.readAll(TYPE_ID, ACCOUNT_A);
    const seqs = landed.map((e) => e.clientSeq).join();
    const want = Array.from({ length: 11 }, (_, i) => i + 1).join();
    assert(seqs === want, `the gateway holds sequences ${seqs}, expected ${want}`);
    await page.waitForFunction(
      () => [...document.querySelectorAll("#serverRows tr")].some((row) => row.children[1].textContent === "11" && row.children[3].textContent === "0"),
      null,
      { timeout: 15_000 },
    );

    await page.waitForFunction(
      (a) => document.querySelector(`#balanceRows tr[data-account="${a}"] .confirmed`)?.textContent.startsWith("110 "),
      ACCOUNT_A,
      { timeout: 15_000 },
    );

    // 5. "Append a rejected event" parks on the first click.
    await page.click("#poison");
    await waitText(page, "parked", "1", 15_000);
    try {
      await page.waitForFunction((t) => document.getElementById("parkedList").textContent.includes(`(type ${t}) rejected 2022`), rejectType, { timeout: 5_000 });
    } catch {
      throw new Error(`the parked list says: ${await text(page, "parkedList")}`);
    }
    assert((await gateway.readAll(TYPE_ID, ACCOUNT_A)).length === 11, "the rejected event landed");
    // A parked event never counts in the balance.
    await sleep(500);
    assert((await balance("balance")) === "110", `with the parked event, account A's balance reads ${await balance("balance")}`);

    const pageErrors = problems.filter((p) => p.startsWith("page error"));
    assert(pageErrors.length === 0, pageErrors.join("; "));
    return { landed: landed.length, reloadedFromServiceWorker: true, parked: 1, reportedAfterLoad: problems.length };
  } catch (e) {
    throw new Error(`${e.message}\n  what the page reported: ${problems.join("; ") || "nothing"}`, { cause: e });
  } finally {
    await context.cleanup();
    await gateway.stop();
    gateway.cleanup();
  }
}
