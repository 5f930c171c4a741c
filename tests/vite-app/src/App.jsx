// The README's "Install and use in a Vite + React app" is this file, as it is.
import { useEffect, useState } from "react";
import init, { SyncClient } from "celeriant-sync";
import { useProjection, useSyncStatus } from "celeriant-sync/react";

export async function openClient(gatewayUrl, wasm) {
  await init(wasm && { module_or_path: wasm }); // no argument: the .wasm Vite emitted
  return SyncClient.open({ gatewayUrl });
}

export function Outbox({ client, aggregate }) {
  const status = useSyncStatus(client); // re-renders on every status change
  const [landed, setLanded] = useState(0);
  useEffect(() => {
    const onSynced = (e) => setLanded((n) => n + e.detail.eventIds.length);
    client.addEventListener("synced", onSynced);
    return () => client.removeEventListener("synced", onSynced);
  }, [client]);
  const append = () => client.append(aggregate, [{ type: 1, data: { at: Date.now() } }]);
  return (
    <section>
      <button onClick={append}>Append</button>
      <output>{status.state}: {status.pending} pending, {landed} landed</output>
    </section>
  );
}

// A fold of the aggregate's events, defined once (a new object would start a new projection).
const counting = {
  initial: { events: 0, confirmed: 0 },
  apply: (s, e) => ({ events: s.events + 1, confirmed: s.confirmed + (e.status === "confirmed" ? 1 : 0) }),
};

export function EventCount({ client, aggregate }) {
  const snapshot = useProjection(client, aggregate, counting); // confirmed folded once, pending on top
  if (!snapshot) return <p id="projection">no projection yet</p>;
  const { events, confirmed } = snapshot.state;
  return <p id="projection">projected {events} events, {confirmed} confirmed{snapshot.error ? ` (${snapshot.error.code})` : ""}</p>;
}
