// The exactly-once proof: several tabs append concurrently to many aggregates while the
// gateway injects faults, tabs reload, the draining tab is closed and the gateway is killed
// with SIGKILL and restarted on the same data. At the end, through the gateway's read
// endpoint: exactly the appended events, each once, per aggregate sequences 1..N with no gap,
// matching what each `append` returned, payloads intact; every outbox empty.
//
// Mixed into the same run (`conditional`, on by default): the tabs make conditional appends
// to aggregates of their own (some with a stale guard) and `decide` the next value of a counter
// that a second device (another database, so another client id) decides too. Checked at the
// end in the gateway's log: every conditional append the client reported landed is there
// exactly once, as one batch at exactly its expectedVersion + 1 (and so is every one whose
// outcome a reload hid: at expectedVersion + 1 or nowhere); every one parked with 2003 is
// nowhere; the counter reads 1..N, each value at its version, each decide that resolved at
// the version it reported.
//
// Also mixed in (`transfers`, on by default): every tab makes a transfer every 2 s, `appendAtomic`
// across two of three accounts (aggregates only transfers write, so the main load's batches are
// not cut around them). Its legs are checked like every append (each event once, at the
// sequence its receipt gave, per aggregate 1..N with no gap), and besides: both legs landed,
// each as exactly one batch of the gateway's log (the write was one request, never split, never
// resent as a part).
import { rmSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { Gateway, launchBrowser, openTab, rng, uuid, sleep, decode, tempDir } from "./lib.mjs";

export const FAULTS = {
  dropAfterCommit: 0.3, timeout: 0.1, inflight: 0.1, busy: 0.1, resetBeforeCommit: 0.05,
  delayMs: 900, retryAfterMs: 300,
};

function faultFlags(f) {
  return [
    "--fault-drop-after-commit", f.dropAfterCommit, "--fault-timeout", f.timeout, "--fault-inflight", f.inflight,
    "--fault-busy", f.busy, "--fault-reset", f.resetBeforeCommit, "--fault-delay-ms", f.delayMs,
    "--fault-retry-after-ms", f.retryAfterMs,
  ].map(String);
}

/**
 * Runs the chaos scenario. Options: events (target), tabs, aggregates, seed, faults, actions
 * (reloads, closeDrainer, kill9), log.
 */
export async function chaos({
  events = 3000, tabs = 3, aggregates = 20, seed = Date.now() % 1e9, faults = FAULTS,
  reloads = 2, closeDrainer = true, kill9 = true, log = console.log, verifyConcurrency = false,
  conditional = true, transfers = true,
} = {}) {
  const started = Date.now();
  const random = rng(seed);
  log(`chaos: seed ${seed}, ${events} events, ${tabs} tabs, ${aggregates} aggregates`);
  const db = `chaos-${seed}`;
  const typeId = uuid(random);
  const ids = Array.from({ length: aggregates }, () => uuid(random));
  const accounts = transfers ? Array.from({ length: 3 }, () => uuid(random)) : [];
  // The conditional part: aggregates of their own (a discarded conflict leaves a gap in this
  // device's sequences there) and a counter, of a type every device may write (the policy's
  // `authenticated`; the rest keeps the default, `owner`), so both devices write to them.
  const condType = uuid(random);
  const guarded = Array.from({ length: 3 }, () => uuid(random));
  const counter = { typeId: condType, id: uuid(random) };
  let policy;
  if (conditional) {
    policy = join(tempDir("policy"), "policy.toml");
    writeFileSync(policy, `default = "owner"\n\n[types]\n"${condType}" = "authenticated"\n`);
  }
  const gateway = new Gateway({ flags: ["--fault-seed", String(seed), ...faultFlags(faults)], policy });
  await gateway.start();
  const context = await launchBrowser();
  const cond = {
    attempted: new Map(), // payload -> { id, expectedVersion, payloads }
    landed: new Set(), // first payload of each append reported landed
    notLanded: 0,
    swept: new Map(), // payload -> { code, currentVersion, mayHaveLanded }
    decideAttempts: new Set(), // payloads
    decided: new Map(), // payload -> version
    decideFailed: {},
    decideDiscarded: new Set(), // attempts decide itself went past (a confirmed conflict)
    errors: [],
    traps: new Set(), // device:aggregate:firstSeq of conditional writes settled as duplicates
  };
  const attempted = new Map(); // payload -> aggregate id
  const transfersAppended = []; // [{ id, payloads }, { id, payloads }]
  const reported = new Map(); // payload -> { id, seq, eventId }
  let drainerChanges = 0;
  let lastDrainer = null;
  const figures = { reloads: 0, takeovers: 0, takeoverMs: [], kills: 0, secretRotations: 0, appendFailures: 0 };

  await context.exposeBinding("e2eReport", (_source, msg) => {
    if (msg.kind === "appending") for (const p of msg.payloads) attempted.set(p, msg.id);
    if (msg.kind === "appended") {
      msg.payloads.forEach((p, i) => reported.set(p, { id: msg.id, seq: msg.receipts[i].clientSeq, eventId: msg.receipts[i].eventId }));
    }
    if (msg.kind === "appendFailed") figures.appendFailures += 1;
    if (msg.kind === "transferAppended") transfersAppended.push(msg.legs);
    if (msg.kind === "condAppending") for (const p of msg.payloads) cond.attempted.set(p, { id: msg.id, expectedVersion: msg.expectedVersion, payloads: msg.payloads, stale: msg.stale });
    if (msg.kind === "condLanded") {
      cond.landed.add(msg.payloads[0]);
      if (msg.stale) cond.errors.push(`${msg.payloads[0]}, appended with a stale guard, was reported landed`);
    }
    if (msg.kind === "condNotLanded") cond.notLanded += 1;
    if (msg.kind === "duplicateSynced" && (msg.id === counter.id || guarded.includes(msg.id))) {
      cond.traps.add(`${msg.tab === "device2" ? 2 : 1}:${msg.id}:${msg.firstSeq}`);
    }
    if (msg.kind === "condFailed" || msg.kind === "condError") cond.errors.push(`${msg.kind} in tab ${msg.tab}: ${msg.code ?? ""} ${msg.message}`);
    if (msg.kind === "swept") for (const e of msg.events) cond.swept.set(e.payload, e);
    if (msg.kind === "decideAttempting") cond.decideAttempts.add(msg.payload);
    // An attempt `<base>.<k>`: decide went on to attempt k + 1 only after a confirmed conflict,
    // and CONTENTION only after its last attempt conflicted too.
    const attemptsBefore = (payload, last) => {
      const cut = payload.lastIndexOf(".");
      const k = Number(payload.slice(cut + 1));
      for (let i = 1; i < k + (last ? 1 : 0); i++) cond.decideDiscarded.add(`${payload.slice(0, cut)}.${i}`);
    };
    if (msg.kind === "decided") {
      cond.decided.set(msg.payload, msg.version);
      attemptsBefore(msg.payload, false);
    }
    // E2E_DEBUG=1 prints each report of the conditional part as it comes (seconds, tab).
    if (process.env.E2E_DEBUG && /^(decide|cond|swept)/.test(msg.kind)) console.log(`${((Date.now() - started) / 1000).toFixed(1)} [${msg.tab}] ${JSON.stringify(msg)}`);
    if (msg.kind === "decideFailed") {
      cond.decideFailed[msg.code] = (cond.decideFailed[msg.code] ?? 0) + 1;
      if (msg.code === "CONTENTION" && msg.payload) attemptsBefore(msg.payload, true);
    }
    // (The second device drains its own database: not a change of this one's drainer.)
    if (msg.kind === "status" && msg.tab !== "device2" && msg.status.role === "drainer" && lastDrainer !== msg.tab) {
      lastDrainer = msg.tab;
      drainerChanges += 1;
    }
  });

  // Batches small enough that the faults meet many requests. With 65 % of requests failing, a
  // batch often fails ten times in a row; under the default 30 s backoff cap one such batch
  // waits minutes, and the flush's length is set by those tails, not by the client's work
  // (a simulation of 40 batches: over 180 s in about a third of the runs). A 2 s cap keeps
  // every fault path and makes more attempts per minute.
  const options = { requestTimeoutMs: 600, maxBatchEvents: 100, maxBackoffMs: 2000 };
  let loads = 0;
  const start = async (page) => {
    const loadId = `${seed}.${loads++}`;
    await page.evaluate((a) => harness.startAppending(a), { typeId, aggregates: ids, loadId, transferIds: accounts });
    if (conditional) await page.evaluate((a) => harness.startConditional(a), { typeId: condType, guarded, counter, loadId, pauseMs: 200 });
  };
  const pages = [];
  for (let i = 0; i < tabs; i++) {
    const page = await openTab(context, gateway, i, db, options);
    await start(page);
    pages.push(page);
  }
  const role = (page) => page.evaluate(() => harness.status().role).catch(() => null);
  // The second device: conditional appends and decides only, never reloaded or closed. Its
  // outbox has no backlog, so it writes far more often than the first device's tabs: it pauses
  // between writes, so as not to take the machine from the run it shares.
  const db2 = `${db}-device2`;
  let device2 = null;
  if (conditional) {
    device2 = await openTab(context, gateway, "device2", db2, options);
    await device2.evaluate((a) => harness.startConditional(a), { typeId: condType, guarded, counter, loadId: `${seed}.device2`, pauseMs: 500 });
  }

  // The chaos timeline, by progress towards the target.
  const plan = [];
  for (let r = 0; r < reloads; r++) plan.push({ at: 0.15 + (0.6 * r) / Math.max(1, reloads), action: "reload" });
  if (closeDrainer) plan.push({ at: 0.4, action: "closeDrainer" });
  if (kill9) plan.push({ at: 0.55, action: "kill9" });
  plan.sort((a, b) => a.at - b.at);
  let tab = tabs;
  while (reported.size < events) {
    await sleep(100);
    const progress = reported.size / events;
    while (plan.length && progress >= plan[0].at) {
      const step = plan.shift();
      if (step.action === "reload") {
        const page = pages[Math.floor(random() * pages.length)];
        log(`  ${reported.size} events: reload a tab (${((Date.now() - started) / 1000).toFixed(1)} s)`);
        await page.reload();
        await page.waitForFunction(() => globalThis.harness);
        await page.evaluate(({ db, options }) => harness.open({ databaseName: db, ...options }), { db, options });
        await start(page);
        figures.reloads += 1;
      } else if (step.action === "closeDrainer") {
        let index = -1;
        for (let i = 0; i < pages.length && index < 0; i++) if ((await role(pages[i])) === "drainer") index = i;
        if (index >= 0) {
          log(`  ${reported.size} events: close the draining tab`);
          const [closing] = pages.splice(index, 1);
          await closing.close();
          const t0 = Date.now();
          for (;;) {
            const roles = await Promise.all(pages.map(role));
            if (roles.includes("drainer")) break;
            if (Date.now() - t0 > 10_000) throw new Error("no tab took over draining within 10 s");
            await sleep(20);
          }
          figures.takeovers += 1;
          figures.takeoverMs.push(Date.now() - t0);
          const page = await openTab(context, gateway, tab++, db, options);
          await start(page);
          pages.push(page);
        }
      } else if (step.action === "kill9") {
        log(`  ${((Date.now() - started) / 1000).toFixed(1)} s ${reported.size} events: kill -9 the gateway, restart it on the same data with a new session secret`);
        const before = await gateway.faults();
        figures.faultsBeforeKill = before.counts;
        const oldToken = gateway.auth === "none" ? null : await gateway.token();
        await gateway.kill9();
        await sleep(1000);
        gateway.rotateSecret();
        await gateway.start();
        figures.kills += 1;
        if (oldToken) {
          // Every session issued before is void now: the tabs must renew theirs.
          const r = await fetch(`${gateway.base}/v1/aggregates/${typeId}/${ids[0]}/events`, { headers: { authorization: `Bearer ${oldToken}` } });
          if (r.status !== 401) throw new Error(`a token from before the rotation was answered ${r.status}`);
          figures.secretRotations += 1;
          // Proofs are required (the gateway's default): a fresh token alone is refused too.
          const fresh = await gateway.token({ renew: true });
          const bare = await fetch(`${gateway.base}/v1/aggregates/${typeId}/${ids[0]}/events`, { headers: { authorization: `Bearer ${fresh}` } });
          const refusal = await bare.json().catch(() => ({}));
          if (bare.status !== 401 || refusal.code !== 40130) throw new Error(`a token without its proof was answered ${bare.status} ${refusal.code}`);
          figures.proofsRequired = true;
        }
      }
    }
  }

  // Stop the app and let every tab drain — under the same faults.
  // The conditional appends and decides go on while the backlog drains (most of the run's
  // time: the appending above fills the outbox faster than the faults let it empty), then stop,
  // and what they left drains too.
  const everyPage = device2 ? [...pages, device2] : pages;
  const at = () => Number(((Date.now() - started) / 1000).toFixed(1));
  const phases = { appended: at() };
  await Promise.all(pages.map((p) => p.evaluate(() => harness.stop())));
  // It must keep landing events: a minute with none is a failure, and so is taking longer
  // than the whole run may (a 2 s backoff cap makes a minute about 30 failed attempts in a row).
  const bound = { stallMs: 60_000, limitMs: Math.max(300_000, events * 100) };
  try {
    // A conflict whose tab was reloaded is still parked: drain() reports and discards it.
    const sweep = [...guarded.map((id) => ({ typeId: condType, id })), counter];
    for (const page of pages) await page.evaluate(({ b, sweep }) => harness.drain(b, sweep), { b: bound, sweep });
    phases.drained = at();
    await Promise.all(everyPage.map((p) => p.evaluate(() => harness.stop({ conditional: true }))));
    phases.conditionalStopped = at();
    for (const page of everyPage) await page.evaluate(({ b, sweep }) => harness.drain(b, sweep), { b: bound, sweep });
    phases.allDrained = at();
  } catch (e) {
    // Every tab's inspect(), the drainer's among them: why the drain did not finish.
    const all = await Promise.all(everyPage.map((p) => p.evaluate(async () => JSON.stringify(await harness.client.inspect())).catch((x) => String(x))));
    throw new Error(`${String(e).slice(0, 200)}\nALL:\n${all.join("\n")}`);
  }
  const report = await gateway.setFaults({});
  const counts = { ...report.counts };
  if (figures.faultsBeforeKill) for (const [k, v] of Object.entries(figures.faultsBeforeKill)) if (k !== "maxInFlightPerClient" && typeof v === "number") counts[k] += v;
  // Landed events are deleted (pruned) in the background once the drain is idle: wait for it.
  let outboxes = [];
  for (let waited = 0; waited <= 30_000; waited += 250) {
    outboxes = await Promise.all(pages.map((p) => p.evaluate((db) => harness.countOutbox(db), db)));
    if (device2) outboxes.push(await device2.evaluate((db) => harness.countOutbox(db), db2));
    if (outboxes.every((n) => n === 0)) break;
    await sleep(250);
  }

  phases.pruned = at();
  // Verify through the read endpoint.
  const problems = [];
  const seen = new Map();
  let total = 0;
  let duplicates = 0;
  for (const id of [...ids, ...accounts]) {
    const landed = await gateway.readAll(typeId, id);
    total += landed.length;
    landed.forEach((e, i) => {
      if (e.clientSeq !== i + 1) problems.push(`aggregate ${id}: position ${i + 1} holds sequence ${e.clientSeq}`);
      const payload = decode(e.data);
      if (seen.has(payload)) duplicates += 1;
      seen.set(payload, { id, seq: e.clientSeq, eventId: e.eventId, version: e.version });
      if (attempted.get(payload) !== id) problems.push(`aggregate ${id}: unexpected event ${payload}`);
    });
  }
  let losses = 0;
  for (const [payload, want] of reported) {
    const got = seen.get(payload);
    if (!got) {
      losses += 1;
      problems.push(`lost: ${payload}`);
    } else if (got.id !== want.id || got.seq !== want.seq || got.eventId !== want.eventId) {
      problems.push(`${payload}: appended as ${JSON.stringify(want)}, landed as ${JSON.stringify(got)}`);
    }
  }
  if (duplicates) problems.push(`${duplicates} duplicates`);
  // Transfers: both legs there, each one batch of its aggregate's log.
  if (transfers && transfersAppended.length === 0) problems.push("no transfer was made");
  for (const legs of transfersAppended) {
    for (const leg of legs) {
      const versions = new Set(leg.payloads.map((p) => seen.get(p)?.version));
      if (versions.has(undefined)) problems.push(`transfer leg ${leg.payloads} on ${leg.id}: not all landed`);
      else if (versions.size !== 1) problems.push(`transfer leg ${leg.payloads} on ${leg.id}: split over versions ${[...versions]}`);
      else {
        const [version] = versions;
        const batch = [...seen.values()].filter((e) => e.id === leg.id && e.version === version).length;
        if (batch !== leg.payloads.length) problems.push(`transfer leg ${leg.payloads} on ${leg.id}: its batch holds ${batch} events`);
      }
    }
  }
  if (outboxes.some((n) => n !== 0)) problems.push(`outboxes not empty: ${outboxes}`);
  if (verifyConcurrency && report.counts.maxInFlightPerClient !== 1) {
    problems.push(`the gateway saw ${report.counts.maxInFlightPerClient} requests of one client at once`);
  }

  const conditionalFigures = conditional ? await checkConditional({ gateway, typeId: condType, guarded, counter, cond, problems }) : null;

  const elapsed = ((Date.now() - started) / 1000).toFixed(1);
  const result = {
    seed, events: total, appendsReported: reported.size, appendedButUnreported: total - reported.size,
    transfers: transfersAppended.length,
    faults: {
      requests: counts.requests, dropAfterCommit: counts.dropAfterCommit, timeout: counts.timeout,
      inflight: counts.inflight, busy: counts.busy, resetBeforeCommit: counts.resetBeforeCommit,
    },
    reloads: figures.reloads, drainerCloses: figures.takeovers, takeoverMs: figures.takeoverMs,
    drainerChanges, gatewayKills: figures.kills, secretRotations: figures.secretRotations, appendFailures: figures.appendFailures,
    proofsRequired: figures.proofsRequired === true,
    maxInFlightPerClient: report.counts.maxInFlightPerClient, duplicates, losses, elapsedSeconds: Number(elapsed),
    ...(conditionalFigures ? { conditional: conditionalFigures } : {}),
    phaseSeconds: phases,
  };
  log(`chaos figures: ${JSON.stringify(result)}`);
  await context.cleanup();
  await gateway.stop();
  gateway.cleanup();
  if (policy) rmSync(dirname(policy), { recursive: true, force: true });
  if (problems.length) throw new Error(`${problems.length} problems:\n  ${problems.slice(0, 20).join("\n  ")}`);
  return result;
}

/** Every batch of an aggregate with its version, read as the checker. */
async function readBatches(gateway, typeId, id) {
  const batches = [];
  for (let from = 1; ;) {
    const r = await gateway.read(`${gateway.base}/v1/aggregates/${typeId}/${id}/events?from=${from}`);
    if (!r.ok) throw new Error(`read ${id}: ${r.status} ${await r.text()}`);
    const page = await r.json();
    batches.push(...page.batches);
    if (page.next === null) return batches;
    from = page.next;
  }
}

/** The conditional appends and the counter against the gateway's log (see the top of this
 *  file); pushes what is wrong to `problems`, returns the figures. */
async function checkConditional({ gateway, typeId, guarded, counter, cond, problems }) {
  const found = new Map(); // payload -> version
  let batchesSeen = 0;
  for (const id of guarded) {
    for (const batch of await readBatches(gateway, typeId, id)) {
      batchesSeen += 1;
      const payloads = batch.events.map((e) => decode(e.data));
      const append = cond.attempted.get(payloads[0]);
      if (!append || append.id !== id) {
        problems.push(`guarded ${id} v${batch.version}: an event no conditional append made there: ${payloads[0]}`);
        continue;
      }
      if (payloads.join() !== append.payloads.join()) {
        problems.push(`guarded ${id} v${batch.version}: batch ${payloads} is not the append ${append.payloads} whole`);
      }
      if (append.stale) problems.push(`guarded ${id}: ${payloads[0]}, appended with a stale guard, landed at v${batch.version}`);
      if (batch.version !== append.expectedVersion + 1) {
        problems.push(`guarded ${id}: ${payloads[0]} expected version ${append.expectedVersion} landed at v${batch.version}`);
      }
      for (const p of payloads) {
        if (found.has(p)) problems.push(`guarded ${id}: ${p} twice (v${found.get(p)} and v${batch.version})`);
        found.set(p, batch.version);
      }
    }
  }
  for (const p of cond.landed) if (!found.has(p)) problems.push(`conditional append ${p} reported landed is not in the log`);
  let parked = 0;
  for (const [p, e] of cond.swept) {
    if (!cond.attempted.has(p) && !cond.decideAttempts.has(p)) continue;
    parked += 1;
    if (e.code !== 2003) problems.push(`${p} parked with ${e.code}, not 2003`);
    if (e.mayHaveLanded) problems.push(`${p}: a 2003 parked as possibly landed`);
    if (typeof e.currentVersion !== "number") problems.push(`${p}: parked 2003 without currentVersion`);
    if (cond.attempted.has(p) && e.currentVersion === cond.attempted.get(p).expectedVersion) {
      problems.push(`${p}: parked 2003 although currentVersion ${e.currentVersion} is its expected version`);
    }
    if (found.has(p)) problems.push(`${p} parked with 2003 is in the log at v${found.get(p)}`);
  }
  const appendsParked = [...cond.swept.keys()].filter((p) => cond.attempted.has(p) && cond.attempted.get(p).payloads[0] === p).length;

  // The counter: one event per batch, value n at version n, every value once.
  const values = [];
  const writers = new Set();
  const counterFound = new Map();
  for (const batch of await readBatches(gateway, counter.typeId, counter.id)) {
    writers.add(batch.clientId);
    if (batch.events.length !== 1) problems.push(`counter v${batch.version}: ${batch.events.length} events in one decision`);
    const { n, p } = JSON.parse(decode(batch.events[0].data));
    values.push(n);
    if (n !== batch.version) problems.push(`counter v${batch.version} holds ${n}`);
    if (!cond.decideAttempts.has(p)) problems.push(`counter v${batch.version}: ${p} was never decided`);
    if (counterFound.has(p)) problems.push(`counter: ${p} twice`);
    counterFound.set(p, batch.version);
    if (cond.swept.has(p)) problems.push(`counter: ${p} parked with 2003 is in the log at v${batch.version}`);
    if (cond.decideDiscarded.has(p)) problems.push(`counter: ${p}, an attempt decide discarded as a conflict, is in the log at v${batch.version}`);
  }
  for (const [p, version] of cond.decided) {
    if (counterFound.get(p) !== version) problems.push(`decide ${p} resolved with version ${version}, in the log at ${counterFound.get(p)}`);
  }
  const decidesParked = [...cond.swept.keys()].filter((p) => cond.decideAttempts.has(p)).length;
  problems.push(...cond.errors.slice(0, 5));
  // The run must have exercised what it checks.
  if (!cond.landed.size) problems.push("no conditional append landed");
  if (!appendsParked) problems.push("no conditional append was parked with 2003");
  if (!cond.decided.size) problems.push("no decide resolved");
  // A conditional write's resend is answered 2003, never 2002: a duplicate is the trap settled.
  if (!cond.traps.size) problems.push("no conditional write's lost answer was settled by its read-back");
  return {
    appends: new Set([...cond.attempted.values()].map((a) => a.payloads[0])).size,
    reportedLanded: cond.landed.size, reportedNotLanded: cond.notLanded,
    parked2003: appendsParked, batchesInLog: batchesSeen, trapsSettledAsLanded: cond.traps.size,
    decides: cond.decided.size, decideAttempts: cond.decideAttempts.size, decideParked: decidesParked,
    decideFailed: cond.decideFailed, decideConflicts: cond.decideDiscarded.size, counter: values.length, counterWriters: writers.size, parkedChecked: parked,
  };
}
