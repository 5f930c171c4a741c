// The demo page: uses the built package exactly as an app would.
import init, { SyncClient } from "/pkg/celeriant_sync.js";
import { read } from "./reader.js";
import { inspector } from "./inspector.js";
import { liveView } from "./live.js";
import { balance, balances } from "./balances.js";
import { demoKey } from "./keys.js";

// The app shell's service worker (sw.js): the page loads, and its events are stored, with no
// network at all; they sync once the network is back.
navigator.serviceWorker?.register("sw.js").catch((e) => console.warn("service worker:", e.message));

const gateway = location.origin;
const $ = (id) => document.getElementById(id);
const TYPE_ID = "5e0d9e1a-7c41-4b8e-9f2a-0c6b3d1e2f01";
const AGGREGATES = [
  ["Account A", "a11ce000-0000-4000-8000-00000000000a"],
  ["Account B", "b0b00000-0000-4000-8000-00000000000b"],
  ["Account C", "c4a71e00-0000-4000-8000-00000000000c"],
];
// ?device=N: another device on the same page, with its own database (so its own key and client
// id) writing to the same aggregates. Device 1 keeps the client's default database.
const DEVICE = Math.max(1, Math.floor(Number(new URLSearchParams(location.search).get("device")) || 1));
const DATABASE = DEVICE === 1 ? "celeriant-sync" : `celeriant-sync-device-${DEVICE}`;
const RATES = [
  ["dropAfterCommit", "commit, then drop the reply"],
  ["timeout", "delay past the timeout"],
  ["inflight", "answer 2013"],
  ["busy", "answer 503 + Retry-After"],
  ["resetBeforeCommit", "reset before commit"],
];

function log(text) {
  const li = document.createElement("li");
  li.textContent = `${new Date().toLocaleTimeString()} ${text}`;
  $("events").prepend(li);
  while ($("events").children.length > 200) $("events").lastChild.remove();
}

function showStatus(s) {
  $("state").textContent = s.state;
  $("pending").textContent = s.pending;
  $("parked").textContent = s.parked;
  $("lastError").textContent = s.lastError ? `${s.lastError.code ?? "network"}: ${s.lastError.message}` : "—";
  $("readState").textContent = s.read?.state ?? "—";
}

// The "Offline" switch is remembered across reloads, so a page reloaded offline stays offline.
const OFFLINE_KEY = `celeriant-sync-demo-offline-${DEVICE}`;
const startOffline = localStorage.getItem(OFFLINE_KEY) === "1";
$("offline").checked = startOffline;

// The encryption switch is remembered too; switching it reloads the page, which opens the
// client again with (or without) the device's key (keys.js).
const ENCRYPT_KEY = `celeriant-sync-demo-encrypt-${DEVICE}`;
const encrypted = localStorage.getItem(ENCRYPT_KEY) === "1";
$("encrypt").checked = encrypted;
$("encrypt").addEventListener("change", () => {
  localStorage.setItem(ENCRYPT_KEY, $("encrypt").checked ? "1" : "0");
  location.reload();
});

await init();
const client = await SyncClient.open({
  gatewayUrl: gateway, databaseName: DATABASE, requestTimeoutMs: 2000, maxBatchEvents: 50, offline: startOffline,
  ...(encrypted ? { encryption: await demoKey(`device-${DEVICE}`) } : {}),
});
$("encryptionState").textContent = encrypted
  ? "on: what this device appends is stored and sent as AES-GCM ciphertext; this page decrypts it for the views and balances"
  : "off: payloads are stored and sent as plain JSON (the server can read them)";
window.client = client; // for the console and the end-to-end test
$("gateway").textContent = gateway;
const other = DEVICE === 1 ? 2 : 1;
document.title = `device ${DEVICE} — ${document.title}`;
$("deviceName").textContent = `device ${DEVICE}`;
$("databaseName").textContent = DATABASE;
$("otherDevice").href = `?device=${other}`;
$("otherDevice").textContent = `Open device ${other}`;
$("clientId").textContent = client.clientId;
showStatus(client.status());

let syncedCount = 0;
client.addEventListener("status", (e) => showStatus(e.detail));
client.addEventListener("synced", (e) => {
  const d = e.detail;
  syncedCount += d.eventIds.length;
  $("synced").textContent = syncedCount;
  log(`synced ${name(d.aggregate)} #${d.firstSeq}–${d.lastSeq}${d.duplicate ? " (2002: had already landed)" : ""}`);
  refreshServer();
});
client.addEventListener("parked", (e) => {
  const d = e.detail;
  const current = d.currentVersion === undefined ? "" : ` (currentVersion ${d.currentVersion})`;
  log(`parked ${name(d.aggregate)} #${d.firstSeq}–${d.lastSeq}: ${d.code}${current} ${d.message}`);
  refreshParked();
});

function name(aggregate) {
  return AGGREGATES.find(([, id]) => id === aggregate.id)?.[0] ?? aggregate.id.slice(0, 8);
}

for (const [label, id] of AGGREGATES) {
  $("aggregate").append(new Option(label, id));
  $("transferTo").append(new Option(label, id));
}
$("transferTo").selectedIndex = Math.min(1, AGGREGATES.length - 1);

async function append(count, type) {
  const id = $("aggregate").value;
  const amount = Number($("amount").value) || 0;
  const events = Array.from({ length: count }, (_, i) => ({
    type,
    data: { note: `demo event ${i + 1} of ${count}`, amount, device: DEVICE, at: new Date().toISOString() },
  }));
  try {
    const receipts = await client.append({ typeId: TYPE_ID, id }, events);
    const seqs = receipts.map((r) => r.clientSeq);
    $("appended").textContent = `stored #${seqs[0]}${seqs.length > 1 ? `–${seqs.at(-1)}` : ""} in IndexedDB`;
    log(`appended ${count} to ${name({ id })} (#${seqs[0]}–${seqs.at(-1)})`);
  } catch (e) {
    $("appended").textContent = `${e.name} ${e.code}: ${e.message}`;
  }
}

for (const button of document.querySelectorAll("[data-append]")) {
  button.addEventListener("click", () => append(Number(button.dataset.append), Number($("type").value)));
}
$("poison").addEventListener("click", () => append(1, Number($("rejectType").value) || 13));
$("flush").addEventListener("click", async () => {
  log("flush…");
  try {
    await client.flush();
    log("flush: everything appended before it has landed");
  } catch (e) {
    log(`flush: ${e.code} ${e.message}`);
  }
});

// Withdrawals (Balances panel). `decide` reads the account's confirmed balance from the
// server's current state and appends the withdrawal only if the account is still at the version
// it decided on; a conflict is discarded and decided again by the client.
const withdrawal = (amount) => ({
  type: Number($("type").value) || 3,
  data: { note: `withdrawal of ${amount}`, amount: -amount, device: DEVICE, at: new Date().toISOString() },
});
const conflictNote = (text) => {
  $("conflictNote").textContent = text;
  log(text);
};

$("withdraw").addEventListener("click", async () => {
  const id = $("aggregate").value;
  const amount = Math.abs(Number($("amount").value) || 0);
  let seen = 0;
  try {
    const result = await client.decide({ typeId: TYPE_ID, id }, (view) => {
      seen = view.events.filter((e) => e.status === "confirmed").reduce(balance.apply, balance.initial).balance;
      return amount > seen ? null : [withdrawal(amount)];
    }, { maxAttempts: 5 });
    conflictNote(result.receipts.length
      ? `withdrew ${amount} from ${name({ id })} (balance was ${seen}): landed at version ${result.version} after ${result.attempts} attempt(s)`
      : `refused: ${name({ id })}'s balance is ${seen}, less than ${amount}; nothing written (version ${result.version})`);
  } catch (e) {
    conflictNote(`withdraw: ${e.code}: ${e.message}`);
  }
});

$("conflict").addEventListener("click", async () => {
  const aggregate = { typeId: TYPE_ID, id: $("aggregate").value };
  const amount = Math.abs(Number($("amount").value) || 0);
  try {
    const view = await client.read(aggregate);
    if (view.fromCache) return conflictNote("conflict: offline — a stale guard is only found out by the server");
    if (view.version === 0) return conflictNote(`conflict: ${name(aggregate)} has no version yet; append to it first`);
    const expectedVersion = view.version - 1;
    conflictNote(`appending a withdrawal of ${amount} to ${name(aggregate)} with expectedVersion ${expectedVersion} (the account is at version ${view.version})…`);
    const [receipt] = await client.append(aggregate, [withdrawal(amount)], { expectedVersion });
    try {
      await client.whenSynced(receipt.eventId);
      conflictNote(`the withdrawal with expectedVersion ${expectedVersion} landed: another write must have gone first`);
    } catch (e) {
      const parked = (await client.parkedEvents()).find((p) => p.eventId === receipt.eventId);
      conflictNote(parked
        ? `conflict: parked with ${parked.code}, expectedVersion ${expectedVersion}, currentVersion ${parked.currentVersion}; nothing was stored at the server — discard it in the Outbox panel`
        : `conflict: ${e.code} ${e.message}`);
    }
  } catch (e) {
    conflictNote(`conflict: ${e.code}: ${e.message}`);
  }
});

// Transfers (Balances panel): `appendAtomic` writes both accounts in one request that lands
// whole or not at all. The stale variant guards the source account one version behind: the
// whole transfer is refused with 2003 and both legs are parked.
const transferNote = (text) => {
  $("transferNote").textContent = text;
  log(text);
};
async function transfer(stale) {
  const from = { typeId: TYPE_ID, id: $("aggregate").value };
  const to = { typeId: TYPE_ID, id: $("transferTo").value };
  const amount = Math.abs(Number($("amount").value) || 0);
  if (from.id === to.id) return transferNote("transfer: choose two different accounts");
  const leg = (sign, other) => ({
    type: Number($("type").value) || 3,
    data: { note: `transfer ${sign < 0 ? "to" : "from"} ${name(other)}`, amount: sign * amount, device: DEVICE, at: new Date().toISOString() },
  });
  try {
    let expectedVersion;
    if (stale) {
      const view = await client.read(from);
      if (view.fromCache) return transferNote("transfer: offline — a stale guard is only found out by the server");
      if (view.version === 0) return transferNote(`transfer: ${name(from)} has no version yet; append to it first`);
      expectedVersion = view.version - 1;
    }
    const [out] = await client.appendAtomic([
      { aggregate: from, events: [leg(-1, to)], ...(stale ? { expectedVersion } : {}) },
      { aggregate: to, events: [leg(1, from)] },
    ]);
    transferNote(`transfer of ${amount} from ${name(from)} to ${name(to)} stored (one transaction)${stale ? `, guarded on ${name(from)} at version ${expectedVersion}` : ""}…`);
    try {
      await client.whenSynced(out[0].eventId);
      transferNote(`transfer of ${amount} from ${name(from)} to ${name(to)} landed on both, in one request`);
    } catch (e) {
      const parked = (await client.parkedEvents()).filter((p) => p.atomicWith);
      const mine = parked.find((p) => p.eventId === out[0].eventId);
      transferNote(mine
        ? `transfer refused whole: parked with ${mine.code} (currentVersion ${mine.currentVersion ?? "—"}) on ${parked.length} events of ${new Set(parked.map((p) => p.aggregate.id)).size} accounts; nothing was stored — discard either leg in the Outbox panel and the whole transfer goes`
        : `transfer: ${e.code} ${e.message}`);
    }
  } catch (e) {
    transferNote(`transfer: ${e.code}: ${e.message}`);
  }
}
$("transfer").addEventListener("click", () => transfer(false));
$("transferStale").addEventListener("click", () => transfer(true));

// Offline: the client's network switch (client.setOffline) stops every request it makes —
// writes, the offline probe, sessions, catch-up reads, the change stream — and this page stops
// its own polling of the gateway; appends are stored and wait. Back on, they sync at once.
$("offline").addEventListener("change", () => {
  const offline = $("offline").checked;
  client.setOffline(offline);
  localStorage.setItem(OFFLINE_KEY, offline ? "1" : "0");
  log(offline ? "offline: the client sends nothing" : "back online");
  if (!offline) refreshServer();
});

// Fault injection on the gateway.
for (const [key, label] of RATES) {
  const row = document.createElement("label");
  row.innerHTML = `<span>${label}</span><input type="range" min="0" max="0.5" step="0.05" value="0" data-rate="${key}"><output>0</output>`;
  row.querySelector("input").addEventListener("input", (e) => (row.querySelector("output").textContent = e.target.value));
  $("rates").append(row);
}

// The gateway's faults secret, from the URL `npm start` printed (`#faults=<secret>`): a fragment
// never travels to the server in a URL; the secret is sent only in the faults header.
const faultsSecret = () => new URLSearchParams(location.hash.slice(1)).get("faults") ?? "";
const linkOtherDevice = () => ($("otherDevice").href = `?device=2${location.hash}`);
linkOtherDevice();
addEventListener("hashchange", linkOtherDevice);

async function putFaults(rates) {
  const secret = faultsSecret();
  if (!secret) throw new Error("open the demo with the URL `npm start` printed (it ends in #faults=...)");
  const r = await fetch(`${gateway}/v1/faults`, {
    method: "PUT",
    headers: { "content-type": "application/json", "celeriant-faults-secret": secret },
    body: JSON.stringify(rates),
  });
  if (!r.ok) throw new Error(`${r.status} ${await r.text()}`);
  showFaults(await r.json());
}

function currentRates() {
  const rates = { delayMs: 3000, retryAfterMs: 1000, rejectType: Number($("rejectType").value) || 0 };
  for (const input of document.querySelectorAll("[data-rate]")) rates[input.dataset.rate] = Number(input.value);
  return rates;
}

function setSliders(values) {
  for (const input of document.querySelectorAll("[data-rate]")) {
    input.value = values[input.dataset.rate] ?? 0;
    input.nextElementSibling.textContent = input.value;
  }
}

$("applyFaults").addEventListener("click", () => putFaults(currentRates()).catch((e) => log(`faults: ${e.message}`)));
$("chaos").addEventListener("click", () => {
  setSliders({ dropAfterCommit: 0.3, timeout: 0.1, inflight: 0.1, busy: 0.1, resetBeforeCommit: 0.05 });
  putFaults(currentRates()).catch((e) => log(`faults: ${e.message}`));
});
$("calm").addEventListener("click", () => {
  setSliders({});
  putFaults(currentRates()).catch((e) => log(`faults: ${e.message}`));
});

function showFaults(report) {
  $("faultCounts").textContent = JSON.stringify(report.counts, null, 1);
}

async function refreshFaults() {
  const secret = faultsSecret();
  if (!secret) return;
  const r = await fetch(`${gateway}/v1/faults`, { headers: { "celeriant-faults-secret": secret } }).catch(() => null);
  if (r?.ok) showFaults(await r.json());
}

async function refreshServer() {
  const rows = [];
  for (const [label, id] of AGGREGATES) {
    const seqs = [];
    let withIv = 0;
    let from = 1;
    for (;;) {
      const r = await read(gateway, `${gateway}/v1/aggregates/${TYPE_ID}/${id}/events?from=${from}`).catch(() => null);
      if (!r?.ok) break;
      const page = await r.json();
      for (const b of page.batches) for (const e of b.events) {
        seqs.push(e.clientSeq);
        if (e.iv) withIv += 1;
      }
      if (page.next === null) break;
      from = page.next;
    }
    const dups = seqs.length - new Set(seqs).size;
    const range = seqs.length ? `${seqs[0]}…${seqs.at(-1)}` : "—";
    rows.push(`<tr><td>${label}</td><td>${seqs.length}</td><td>${range}</td><td>${dups}</td><td>${withIv}</td></tr>`);
  }
  $("serverRows").innerHTML = rows.join("");
}

async function refreshParked() {
  const parked = await client.parkedEvents();
  $("parkedList").innerHTML = "";
  for (const e of parked) {
    const div = document.createElement("div");
    div.className = "parked";
    const current = e.currentVersion === undefined ? "" : ` (currentVersion ${e.currentVersion})`;
    div.textContent = `${name(e.aggregate)} #${e.clientSeq} (type ${e.type}) rejected ${e.code}${current}: ${e.message} `;
    const discard = document.createElement("button");
    discard.textContent = "Discard";
    discard.addEventListener("click", async () => {
      const n = await client.discardParked(e.aggregate);
      log(`discarded ${n} parked event(s) of ${name(e.aggregate)}`);
      refreshParked();
    });
    div.append(discard);
    $("parkedList").append(div);
  }
}

inspector(client);
liveView(client, TYPE_ID, AGGREGATES, $("liveAggregates"));
balances(client, TYPE_ID, AGGREGATES, $("balanceRows"));
if (!client.offline) refreshServer();
refreshParked();
if (!client.offline) refreshFaults();
setInterval(() => client.offline || refreshFaults(), 1000);
setInterval(() => client.offline || refreshServer(), 3000);
