#!/usr/bin/env node
// The package used the way apps use it: `npm pack` of pkg/, installed from the tarball into this
// app's own node_modules (not a path import of pkg/), built with Vite (production build),
// served by a static server on 127.0.0.1 (another origin than the gateway's, as in
// production), and run in headless Chromium against a real gateway process with device
// identity on. Each page appends while offline, the React status hook shows the events pending,
// then landing; the gateway holds them. Once with `init()` (the .wasm where Vite put it), once
// with the module's bytes handed to `init`. `useAggregate`'s live view over the real
// `client.subscribe` is asserted too, and over a stand-in the test drives by hand (src/fake.jsx);
// so is `useProjection`'s fold over the real `client.project` (App.jsx's EventCount): 0 at
// first, the pending events folded while offline, all confirmed once landed, and one more
// append online re-rendered.
//
//   node tests/vite-app/run.mjs            (after scripts/build.sh and cargo build -p celeriant-gateway)
// Ends with a cargo-style "test result:" line that `npm test` counts.
import { execFileSync } from "node:child_process";
import { createServer } from "node:http";
import { readFileSync, readdirSync, rmSync, statSync } from "node:fs";
import { extname, join, normalize, resolve } from "node:path";
import { gzipSync } from "node:zlib";
import { Gateway, ROOT, launchBrowser, sleep, tempDir } from "../e2e/lib.mjs";

const APP = resolve(new URL(".", import.meta.url).pathname);
const DIST = join(APP, "dist");
const results = [];
let figures = {};

async function test(name, body) {
  const t0 = Date.now();
  try {
    const out = await body();
    results.push([name, null]);
    console.log(`test vite_app::${name} ... ok (${((Date.now() - t0) / 1000).toFixed(1)} s)${out ? ` ${JSON.stringify(out)}` : ""}`);
    return true;
  } catch (e) {
    results.push([name, e]);
    console.log(`test vite_app::${name} ... FAILED (${((Date.now() - t0) / 1000).toFixed(1)} s)\n${e.stack || e}`);
    return false;
  }
}

function assert(condition, message) {
  if (!condition) throw new Error(message);
}

const run = (cmd, args, cwd) => execFileSync(cmd, args, { cwd, encoding: "utf8", stdio: ["ignore", "pipe", "inherit"] });

function build() {
  const packDir = tempDir("pack");
  try {
    const [packed] = JSON.parse(run("npm", ["pack", join(ROOT, "pkg"), "--json", "--pack-destination", packDir, "--ignore-scripts"], ROOT));
    const tarball = join(packDir, packed.filename);
    // Pinned versions from the committed lock; from npm's cache after the first run.
    run("npm", ["ci", "--prefer-offline", "--no-audit", "--no-fund"], APP);
    // The tarball as an app would install a release, without touching package.json or the lock.
    run("npm", ["install", "--no-save", "--prefer-offline", "--no-audit", "--no-fund", tarball], APP);
  } finally {
    rmSync(packDir, { recursive: true, force: true });
  }
  const installed = JSON.parse(readFileSync(join(APP, "node_modules/celeriant-sync/package.json"), "utf8"));
  assert(installed.exports?.["./react"], "the installed package has no ./react export");
  rmSync(DIST, { recursive: true, force: true });
  run(join(APP, "node_modules/.bin/vite"), ["build", "--logLevel", "warn"], APP);
  const assets = readdirSync(join(DIST, "assets"));
  const wasm = assets.filter((f) => f.endsWith(".wasm"));
  const js = assets.filter((f) => f.endsWith(".js"));
  assert(wasm.length === 1, `expected one .wasm asset, found ${assets}`);
  const size = (files) => files.reduce((s, f) => s + statSync(join(DIST, "assets", f)).size, 0);
  const gzip = (files) => files.reduce((s, f) => s + gzipSync(readFileSync(join(DIST, "assets", f)), { level: 9 }).length, 0);
  // The bundle refers to the .wasm Vite emitted (hashed name), not to the package's file.
  const bundle = js.map((f) => readFileSync(join(DIST, "assets", f), "utf8")).join("\n");
  assert(bundle.includes(wasm[0]), `the bundle does not reference ${wasm[0]}`);
  figures = {
    jsBytes: size(js),
    jsGzip: gzip(js),
    wasmBytes: size(wasm),
    wasmGzip: gzip(wasm),
  };
  return { version: installed.version, ...figures };
}

const TYPES = { ".html": "text/html", ".js": "text/javascript", ".wasm": "application/wasm", ".css": "text/css", ".svg": "image/svg+xml" };

function serve() {
  const server = createServer((req, res) => {
    const path = normalize(decodeURIComponent(new URL(req.url, "http://x").pathname)).replace(/^(\.\.[/\\])+/, "");
    const file = join(DIST, path === "/" ? "index.html" : path);
    try {
      const body = readFileSync(file);
      res.writeHead(200, { "content-type": TYPES[extname(file)] || "application/octet-stream" });
      res.end(body);
    } catch {
      res.writeHead(404).end();
    }
  });
  return new Promise((r) => server.listen(0, "127.0.0.1", () => r(server)));
}

const outputText = (page) => page.evaluate(() => document.querySelector("output")?.textContent ?? "");

/** Waits until the element `id` reads exactly `want`; the error says what it read instead. */
async function waitForId(page, id, want, ms) {
  try {
    await page.waitForFunction(([id, want]) => document.getElementById(id)?.textContent === want, [id, want], { timeout: ms });
  } catch {
    const shown = await page.evaluate((id) => document.getElementById(id)?.textContent ?? "(no element)", id);
    throw new Error(`timed out after ${ms} ms waiting for #${id} to read "${want}"; it reads "${shown}"`);
  }
  return want;
}

async function waitForText(page, what, ms, check) {
  const t0 = Date.now();
  let last = "";
  for (;;) {
    last = await outputText(page);
    if (check(last)) return last;
    if (Date.now() - t0 > ms) throw new Error(`timed out after ${ms} ms waiting for ${what}; the page shows "${last}"`);
    await sleep(25);
  }
}

/** One page of the built app: N appends while offline (the hook shows them pending), then
 *  online (the hook shows 0 pending and N landed); the gateway holds the N events. */
async function appRun(context, gateway, site, mode, n = 5) {
  const aggregate = { typeId: crypto.randomUUID(), id: crypto.randomUUID() };
  const page = await context.newPage();
  const errors = [];
  page.on("pageerror", (e) => errors.push(e.message));
  try {
    const query = new URLSearchParams({ gateway: gateway.base, ...aggregate, init: mode });
    await page.goto(`${site}/index.html?${query}`);
    await page.waitForFunction(() => window.app || window.appError, null, { timeout: 20_000 });
    const appError = await page.evaluate(() => window.appError);
    assert(!appError, `the app failed to start: ${appError}`);
    await waitForText(page, "the first render", 10_000, (t) => /0 pending, 0 landed/.test(t));
    // useProjection (App.jsx's EventCount over the real client.project): the empty fold first.
    const projected = [await waitForId(page, "projection", "projected 0 events, 0 confirmed", 10_000)];
    // Every text the hook rendered, from now on.
    await page.evaluate(() => {
      window.rendered = [];
      const output = document.querySelector("output");
      new MutationObserver(() => window.rendered.push(output.textContent)).observe(output, { childList: true, subtree: true, characterData: true });
    });
    await context.setOffline(true);
    for (let i = 0; i < n; i++) await page.click("button");
    const offline = await waitForText(page, `${n} pending`, 10_000, (t) => t.includes(`${n} pending, 0 landed`));
    // The projection folds this device's pending events on top of the (empty) confirmed part.
    projected.push(await waitForId(page, "projection", `projected ${n} events, 0 confirmed`, 10_000));
    await context.setOffline(false);
    const done = await waitForText(page, `0 pending, ${n} landed`, 30_000, (t) => t === `idle: 0 pending, ${n} landed`);
    const rendered = await page.evaluate(() => window.rendered);
    const pendings = rendered.map((t) => Number(/(\d+) pending/.exec(t)?.[1]));
    for (let k = 1; k <= n; k++) assert(pendings.includes(k), `the hook never rendered ${k} pending: ${JSON.stringify(rendered)}`);
    // The gateway has them, in order, under this device's client id.
    const clientId = await page.evaluate(() => window.app.client.clientId);
    const landed = await gateway.readAll(aggregate.typeId, aggregate.id);
    assert(landed.length === n, `the gateway holds ${landed.length} events, expected ${n}`);
    landed.forEach((e, i) => {
      assert(e.clientSeq === i + 1, `position ${i + 1} holds sequence ${e.clientSeq}`);
      if (e.clientId !== undefined) assert(e.clientId === clientId, `event ${i + 1} has client id ${e.clientId}, the device is ${clientId}`);
    });
    // useAggregate over the stand-in subscribe (src/fake.jsx): the first view
    // arrives, a change re-renders, switching aggregates re-subscribes and starts from that
    // aggregate's view, one subscription is left; a client without subscribe throws clearly.
    await page.waitForFunction((id) => document.getElementById("fakeView")?.textContent === `version 0 of ${id}`, aggregate.id, { timeout: 5_000 });
    await page.click("#fakeChange");
    await page.waitForFunction((id) => document.getElementById("fakeView").textContent === `version 1 of ${id}`, aggregate.id, { timeout: 5_000 });
    await page.click("#fakeSwitch");
    await page.waitForFunction(() => document.getElementById("fakeView").textContent === "version 1 of other", null, { timeout: 5_000 });
    const fake = await page.evaluate(() => ({ active: window.app.reader.active(), subscribed: window.app.reader.subscribed }));
    assert(fake.active === 1, `useAggregate left ${fake.active} subscriptions (of ${fake.subscribed})`);
    const noSubscribe = await page.evaluate(() => document.getElementById("noSubscribe")?.textContent ?? "");
    assert(/useAggregate: this SyncClient has no subscribe/.test(noSubscribe), `a client without subscribe: "${noSubscribe}"`);
    // The read side's live view over the real client.subscribe.
    assert(await page.evaluate(() => window.app.subscribe), "the client has no subscribe");
    await page.waitForFunction(
      (n) => document.getElementById("view")?.textContent.endsWith(`${n} events, ${n} confirmed`),
      n,
      { timeout: 15_000 },
    );
    const view = await page.evaluate(() => document.getElementById("view").textContent);
    // useProjection: the same events, folded, now confirmed; one more append (online) updates
    // the rendered fold, and it lands.
    projected.push(await waitForId(page, "projection", `projected ${n} events, ${n} confirmed`, 15_000));
    await page.click("button");
    projected.push(await waitForId(page, "projection", `projected ${n + 1} events, ${n + 1} confirmed`, 15_000));
    assert(errors.length === 0, `page errors: ${errors.join("; ")}`);
    return { offline, done, renders: rendered.length, landed: landed.length, fakeSubscribe: fake, useAggregate: view, useProjection: projected };
  } finally {
    await context.setOffline(false); // a failure while offline must not fail the next test too
    await page.close();
  }
}

const built = await test("npm_pack_install_vite_build", build);
if (built) {
  const gateway = new Gateway();
  const server = await serve();
  const site = `http://127.0.0.1:${server.address().port}`;
  let context;
  try {
    await gateway.start();
    context = await launchBrowser();
    await test("react_status_hook_default_init", () => appRun(context, gateway, site, "default"));
    await test("react_status_hook_init_with_bytes", () => appRun(context, gateway, site, "bytes"));
  } catch (e) {
    results.push(["setup", e]);
    console.log(`test vite_app::setup ... FAILED\n${e.stack || e}`);
  } finally {
    if (context) await context.cleanup();
    server.close();
    await gateway.stop();
    gateway.cleanup();
  }
}
const failed = results.filter(([, e]) => e).length;
console.log(`\ntest result: ${failed ? "FAILED" : "ok"}. ${results.length - failed} passed; ${failed} failed`);
process.exit(failed ? 1 : 0);
