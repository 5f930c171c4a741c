// The exactly-once proof: several tabs append concurrently to many aggregates while the
// gateway injects faults, tabs reload, the draining tab is closed and the gateway is killed
// with SIGKILL and restarted on the same data. At the end, through the gateway's read
// endpoint: exactly the appended events, each once, per aggregate sequences 1..N with no gap,
// matching what each `append` returned, payloads intact; every outbox empty.
import { Gateway, launchBrowser, openTab, rng, uuid, sleep, decode } from "./lib.mjs";

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
} = {}) {
  const started = Date.now();
  const random = rng(seed);
  log(`chaos: seed ${seed}, ${events} events, ${tabs} tabs, ${aggregates} aggregates`);
  const gateway = new Gateway({ flags: ["--fault-seed", String(seed), ...faultFlags(faults)] });
  await gateway.start();
  const context = await launchBrowser();
  const db = `chaos-${seed}`;
  const typeId = uuid(random);
  const ids = Array.from({ length: aggregates }, () => uuid(random));
  const attempted = new Map(); // payload -> aggregate id
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
    if (msg.kind === "status" && msg.status.role === "drainer" && lastDrainer !== msg.tab) {
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
    await page.evaluate((a) => harness.startAppending(a), { typeId, aggregates: ids, loadId: `${seed}.${loads++}` });
  };
  const pages = [];
  for (let i = 0; i < tabs; i++) {
    const page = await openTab(context, gateway, i, db, options);
    await start(page);
    pages.push(page);
  }
  const role = (page) => page.evaluate(() => harness.status().role).catch(() => null);

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
        log(`  ${reported.size} events: reload a tab`);
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
        log(`  ${reported.size} events: kill -9 the gateway, restart it on the same data with a new session secret`);
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
  await Promise.all(pages.map((p) => p.evaluate(() => harness.stop())));
  // It must keep landing events: a minute with none is a failure, and so is taking longer
  // than the whole run may (a 2 s backoff cap makes a minute about 30 failed attempts in a row).
  const bound = { stallMs: 60_000, limitMs: Math.max(300_000, events * 100) };
  try {
    for (const page of pages) await page.evaluate((b) => harness.flush(b), bound);
  } catch (e) {
    // Every tab's inspect(), the drainer's among them: why the drain did not finish.
    const all = await Promise.all(pages.map((p) => p.evaluate(async () => JSON.stringify(await harness.client.inspect())).catch((x) => String(x))));
    throw new Error(`${String(e).slice(0, 200)}\nALL:\n${all.join("\n")}`);
  }
  const report = await gateway.setFaults({});
  const counts = { ...report.counts };
  if (figures.faultsBeforeKill) for (const [k, v] of Object.entries(figures.faultsBeforeKill)) if (k !== "maxInFlightPerClient" && typeof v === "number") counts[k] += v;
  // Landed events are deleted (pruned) in the background once the drain is idle: wait for it.
  let outboxes = [];
  for (let waited = 0; waited <= 30_000; waited += 250) {
    outboxes = await Promise.all(pages.map((p) => p.evaluate((db) => harness.countOutbox(db), db)));
    if (outboxes.every((n) => n === 0)) break;
    await sleep(250);
  }

  // Verify through the read endpoint.
  const problems = [];
  const seen = new Map();
  let total = 0;
  let duplicates = 0;
  for (const id of ids) {
    const landed = await gateway.readAll(typeId, id);
    total += landed.length;
    landed.forEach((e, i) => {
      if (e.clientSeq !== i + 1) problems.push(`aggregate ${id}: position ${i + 1} holds sequence ${e.clientSeq}`);
      const payload = decode(e.data);
      if (seen.has(payload)) duplicates += 1;
      seen.set(payload, { id, seq: e.clientSeq, eventId: e.eventId });
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
  if (outboxes.some((n) => n !== 0)) problems.push(`outboxes not empty: ${outboxes}`);
  if (verifyConcurrency && report.counts.maxInFlightPerClient !== 1) {
    problems.push(`the gateway saw ${report.counts.maxInFlightPerClient} requests of one client at once`);
  }

  const elapsed = ((Date.now() - started) / 1000).toFixed(1);
  const result = {
    seed, events: total, appendsReported: reported.size, appendedButUnreported: total - reported.size,
    faults: {
      requests: counts.requests, dropAfterCommit: counts.dropAfterCommit, timeout: counts.timeout,
      inflight: counts.inflight, busy: counts.busy, resetBeforeCommit: counts.resetBeforeCommit,
    },
    reloads: figures.reloads, drainerCloses: figures.takeovers, takeoverMs: figures.takeoverMs,
    drainerChanges, gatewayKills: figures.kills, secretRotations: figures.secretRotations, appendFailures: figures.appendFailures,
    proofsRequired: figures.proofsRequired === true,
    maxInFlightPerClient: report.counts.maxInFlightPerClient, duplicates, losses, elapsedSeconds: Number(elapsed),
  };
  log(`chaos figures: ${JSON.stringify(result)}`);
  await context.cleanup();
  await gateway.stop();
  gateway.cleanup();
  if (problems.length) throw new Error(`${problems.length} problems:\n  ${problems.slice(0, 20).join("\n  ")}`);
  return result;
}
