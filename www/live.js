// The demo's live view: `client.subscribe` on each aggregate the page writes to. A view is the
// server's confirmed events in server order (with their version and the writing client), then
// this device's events not confirmed yet (pending, or parked with the reason). Another device
// (a second tab with ?device=2, or another browser profile) writing to the same aggregates
// shows up here as its events are confirmed.
const SHOWN = 12; // the newest events of each aggregate; the counts cover all of them
const short = (clientId) => clientId.slice(0, 8);

function describe(e) {
  if (e.decryptError) return `encrypted, cannot decrypt here (${e.decryptError.code}), ${e.data.length} bytes`;
  const lock = e.iv ? " (encrypted on the server)" : "";
  try {
    const data = e.json();
    return (data && typeof data === "object" ? `${data.device ? `device ${data.device}: ` : ""}${data.note ?? ""}` : String(data)) + lock;
  } catch {
    return `${e.data.length} bytes`;
  }
}

function row(e, me) {
  const li = document.createElement("li");
  const state = e.parked ? "parked" : e.status;
  li.className = state;
  const who = `${short(e.clientId)}${e.clientId === me ? " (this device)" : ""}`;
  const where = e.status === "confirmed" ? `v${e.version}` : "—";
  const why = e.parked ? ` (${e.parked.code}: ${e.parked.message})` : "";
  li.textContent = `${where} ${state}${why} · ${who} #${e.clientSeq} · type ${e.type} · ${describe(e)}`;
  return li;
}

/** Per writing client: how many of its events are confirmed, pending and parked. */
function writers(view, me) {
  const by = new Map();
  for (const e of view.events) {
    const w = by.get(e.clientId) ?? { confirmed: 0, pending: 0, parked: 0 };
    w[e.parked ? "parked" : e.status] += 1;
    by.set(e.clientId, w);
  }
  return [...by].map(([id, w]) => {
    const parts = [`${w.confirmed} confirmed`];
    if (w.pending) parts.push(`${w.pending} pending`);
    if (w.parked) parts.push(`${w.parked} parked`);
    return `${short(id)}${id === me ? " (this device)" : ""}: ${parts.join(", ")}`;
  });
}

function render(box, label, view, me) {
  const confirmed = view.events.length - view.pending;
  box.querySelector("h3").textContent =
    `${label}: version ${view.version}, ${confirmed} confirmed, ${view.pending} pending${view.fromCache ? " (from the local log; may be behind)" : ""}`;
  box.querySelector(".writers").replaceChildren(
    ...writers(view, me).map((text) => Object.assign(document.createElement("li"), { textContent: text })),
  );
  const hidden = Math.max(0, view.events.length - SHOWN);
  box.querySelector(".earlier").textContent = hidden ? `… ${hidden} earlier events` : "";
  box.querySelector(".events").replaceChildren(...view.events.slice(hidden).map((e) => row(e, me)));
}

/** Renders a live view of each of `aggregates` ([label, id] pairs of type `typeId`) into
 *  `container`; returns the functions that unsubscribe. */
export function liveView(client, typeId, aggregates, container) {
  return aggregates.map(([label, id]) => {
    const box = document.createElement("div");
    box.className = "aggregate";
    box.dataset.aggregate = id;
    box.innerHTML = `<h3>${label}</h3><ul class="writers"></ul><p class="earlier note"></p><ol class="events"></ol>`;
    container.append(box);
    return client.subscribe({ typeId, id }, (view) => render(box, label, view, client.clientId));
  });
}
