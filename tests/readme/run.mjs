#!/usr/bin/env node
// The README's first example, exactly as printed, so it cannot drift from the package:
//   1. type-checked (`tsc --noEmit`, strict) against the built package's .d.ts, with
//      "celeriant-sync" resolved to pkg/;
//   2. run in Debian's Chromium (playwright-core) against a real gateway process with device
//      identity on: the block is transpiled as is, only its placeholder gateway URL is replaced
//      by the real gateway's; what it logs is recorded. Its `status()` comment must have the
//      shape `status()` really has (the same keys, nested), its append must land exactly once,
//      and its `read` and `subscribe` must show the event.
//
//   node tests/readme/run.mjs        (after scripts/build.sh and cargo build -p celeriant-gateway)
// Ends with a cargo-style "test result:" line that `npm test` counts.
import { execFileSync } from "node:child_process";
import { mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import ts from "typescript";
import { Gateway, ROOT, launchBrowser, tempDir } from "../e2e/lib.mjs";

const PLACEHOLDER = "https://gateway.example.com";
const results = [];

async function test(name, body) {
  const t0 = Date.now();
  try {
    const out = await body();
    results.push([name, null]);
    console.log(`test readme::${name} ... ok (${((Date.now() - t0) / 1000).toFixed(1)} s)${out ? ` ${JSON.stringify(out)}` : ""}`);
  } catch (e) {
    results.push([name, e]);
    console.log(`test readme::${name} ... FAILED (${((Date.now() - t0) / 1000).toFixed(1)} s)\n${e.stack || e}`);
  }
}

function assert(condition, message) {
  if (!condition) throw new Error(message);
}

/** The first ```ts block of README.md. */
function firstExample() {
  const readme = readFileSync(join(ROOT, "README.md"), "utf8");
  const block = readme.match(/```ts\n([\s\S]*?)```/);
  assert(block, "README.md has a ts block");
  assert(block[1].includes(PLACEHOLDER), `the example's gateway is ${PLACEHOLDER}`);
  return block[1];
}

/** The object literal in the comment after `console.log(client.status());`, read as JSON. */
function documentedStatus(code) {
  const line = code.split("\n").find((l) => l.startsWith("console.log(client.status());"));
  assert(line, "the example logs client.status()");
  const literal = line.slice(line.indexOf("//") + 2).trim();
  return JSON.parse(literal.replace(/([{,]\s*)([A-Za-z]+):/g, '$1"$2":'));
}

/** Every key path of a plain object: `read.state`, `lastError`, ... */
function shape(value, prefix = "") {
  if (value === null || typeof value !== "object" || Array.isArray(value)) return [];
  return Object.keys(value).flatMap((k) => [`${prefix}${k}`, ...shape(value[k], `${prefix}${k}.`)]).sort();
}

const code = firstExample();
const dir = tempDir("readme");
try {
  await test("first_example_type_checks", () => {
    writeFileSync(join(dir, "example.ts"), code);
    writeFileSync(join(dir, "tsconfig.json"), JSON.stringify({
      compilerOptions: {
        target: "ES2022", module: "ES2022", moduleResolution: "bundler", lib: ["ES2022", "DOM", "ESNext.Disposable"],
        strict: true, noEmit: true, skipLibCheck: false,
        paths: { "celeriant-sync": [join(ROOT, "pkg/celeriant_sync.d.ts")] },
      },
      files: ["example.ts"],
    }));
    try {
      execFileSync(join(ROOT, "node_modules/.bin/tsc"), ["-p", join(dir, "tsconfig.json")], { encoding: "utf8", stdio: "pipe" });
    } catch (e) {
      throw new Error(`tsc refused the README's example:\n${e.stdout}${e.stderr}`);
    }
    return { lines: code.split("\n").length };
  });

  await test("first_example_runs_against_a_real_gateway", async () => {
    // The block, transpiled as it is; the package from the gateway's /pkg, its URL the real one.
    const js = ts.transpileModule(code, { compilerOptions: { target: ts.ScriptTarget.ES2022, module: ts.ModuleKind.ES2022 } }).outputText
      .replace(`from "celeriant-sync"`, `from "/pkg/celeriant_sync.js"`)
      .replace(JSON.stringify(PLACEHOLDER), "location.origin");
    const www = join(dir, "www");
    mkdirSync(www);
    writeFileSync(join(www, "example.js"), `${js}\nglobalThis.readme = { account, receipt, view, status: client.status() };\n`);
    writeFileSync(join(www, "index.html"), `<!doctype html><meta charset="utf-8"><link rel="icon" href="data:,">
<script>
  globalThis.logged = [];
  for (const level of ["log", "warn", "error"]) {
    const real = console[level];
    console[level] = (...args) => { logged.push({ level, args: JSON.parse(JSON.stringify(args)) }); real.apply(console, args); };
  }
  addEventListener("error", (e) => (globalThis.failed = String(e.message)));
</script>
<script type="module" src="example.js"></script>`);
    const gateway = new Gateway({ www });
    await gateway.start();
    const context = await launchBrowser();
    try {
      const page = await context.newPage();
      const errors = [];
      page.on("pageerror", (e) => errors.push(e.message));
      page.on("console", (m) => m.type() === "error" && errors.push(m.text()));
      await page.goto(`${gateway.base}/`);
      await page.waitForFunction(() => globalThis.readme || globalThis.failed, null, { timeout: 30_000 });
      const { readme, logged } = await page.evaluate(() => ({ readme: globalThis.readme, logged: globalThis.logged, failed: globalThis.failed }));
      assert(errors.length === 0 && readme, `the example failed: ${errors.join("; ")}`);
      // status(): the documented shape is the real one.
      const statusLine = logged.find((l) => l.level === "log" && l.args.length === 1 && typeof l.args[0] === "object" && "pending" in l.args[0]);
      assert(statusLine, `the example logged its status: ${JSON.stringify(logged)}`);
      const documented = documentedStatus(code);
      assert(JSON.stringify(shape(statusLine.args[0])) === JSON.stringify(shape(documented)),
        `status() is ${JSON.stringify(statusLine.args[0])}; the README says ${JSON.stringify(documented)}`);
      assert(statusLine.args[0].pending === documented.pending, `pending right after the append: ${statusLine.args[0].pending}`);
      // Right after the append the drain may or may not have started its request yet.
      assert(["idle", "syncing"].includes(statusLine.args[0].state), `state right after the append: ${statusLine.args[0].state}`);
      assert(["idle", "syncing"].includes(documented.state), `the README shows state ${documented.state}`);
      // The receipt, as the comment says.
      assert(readme.receipt.clientSeq === 1, `receipt.clientSeq is ${readme.receipt.clientSeq}`);
      assert(/^[0-9a-f-]{36}$/.test(readme.receipt.eventId), `receipt.eventId is ${readme.receipt.eventId}`);
      // Landed exactly once, as appended; the `synced` listener heard it; read and subscribe saw it.
      const landed = await gateway.readAll(readme.account.typeId, readme.account.id);
      assert(landed.length === 1 && landed[0].clientSeq === 1 && landed[0].type === 3, `the gateway holds ${JSON.stringify(landed)}`);
      assert(logged.some((l) => l.args[0] === "landed:" && l.args[1]?.[0] === readme.receipt.eventId), `no "landed:" log: ${JSON.stringify(logged)}`);
      assert(readme.view.events.length === 1, `read() showed ${readme.view.events.length} events`);
      const viewed = logged.filter((l) => l.args.length === 3 && (l.args[0] === "pending" || l.args[0] === "confirmed"));
      assert(viewed.length >= 1 && viewed.every((l) => l.args[2]?.amount === 10), `subscribe's listener logged ${JSON.stringify(viewed)}`);
      assert(logged.some((l) => l.args.length === 2 && /^[0-9a-f-]{36}$/.test(l.args[0]) && l.args[1].length > 300), "the example logged clientId and publicKey");
      return { status: statusLine.args[0], logged: logged.length };
    } finally {
      await context.cleanup();
      await gateway.stop();
      gateway.cleanup();
    }
  });
} finally {
  rmSync(dir, { recursive: true, force: true });
}

const failed = results.filter(([, e]) => e).length;
console.log(`\ntest result: ${failed ? "FAILED" : "ok"}. ${results.length - failed} passed; ${failed} failed`);
process.exit(failed ? 1 : 0);
