// The demo's inspector panel: client.inspect() rendered, refreshed on every status, synced and
// parked event and once a second (the next attempt time counts down).
const $ = (id) => document.getElementById(id);
const short = (a) => `${a.id.slice(0, 8)}…`;
const range = (x) => `${short(x.aggregate)} #${x.firstSeq}–${x.lastSeq}`;
const when = (ms) => (ms === null ? "—" : ms <= Date.now() ? "now" : `in ${((ms - Date.now()) / 1000).toFixed(1)} s`);
const outcome = (o) => `${o.outcome}${o.code === null ? "" : ` ${o.code}`}${o.message ? ` (${o.message})` : ""}`;

function render(s) {
  const d = s.drainer;
  $("inspectDrainer").textContent =
    `${s.role}; drained by ${d.context === "this" ? "this tab" : d.context === "other" ? "another tab or worker" : "nobody right now"}` +
    (d.lockHolder ? ` (lock holder ${d.lockHolder.slice(0, 8)}…, ${d.waiting} waiting)` : "");
  const p = s.pinned;
  $("inspectPinned").textContent = p
    ? `${range(p)} (${p.count} events), attempts ${p.attempts ?? "?"}${p.inFlight ? ", in flight" : ""}` +
      `, last ${p.lastOutcome ? outcome(p.lastOutcome) : "—"}, next ${when(p.nextAttemptAt)}`
    : "nothing pinned";
  $("inspectAggregates").replaceChildren(
    ...s.aggregates.map((a) => {
      const tr = document.createElement("tr");
      for (const text of [short(a.aggregate), a.pending, a.parked, `${a.firstSeq}–${a.lastSeq}`]) {
        const td = document.createElement("td");
        td.textContent = text;
        tr.append(td);
      }
      return tr;
    }),
  );
  $("inspectOutcomes").replaceChildren(
    ...s.outcomes.slice(-10).reverse().map((o) => {
      const li = document.createElement("li");
      li.textContent = `${new Date(o.at).toLocaleTimeString()} ${range(o)} attempt ${o.attempt}: ${outcome(o)}`;
      return li;
    }),
  );
}

export function inspector(client) {
  let busy = false;
  const refresh = async () => {
    if (busy) return;
    busy = true;
    try {
      render(await client.inspect());
    } catch (e) {
      $("inspectDrainer").textContent = `inspect failed: ${e.message}`;
    } finally {
      busy = false;
    }
  };
  for (const kind of ["status", "synced", "parked"]) client.addEventListener(kind, refresh);
  setInterval(refresh, 1000);
  refresh();
}
