// The test page around App.jsx: the gateway, the aggregate and how to initialise the module
// come from the query string (`?gateway=…&typeId=…&id=…&init=default|bytes`). The end-to-end
// run (tests/vite-app/run.mjs) reads `window.app` and the rendered text.
import { StrictMode } from "react";
import { createRoot } from "react-dom/client";
import { useAggregate } from "celeriant-sync/react";
import wasmUrl from "celeriant-sync/celeriant_sync_bg.wasm?url";
import { EventCount, Outbox, openClient } from "./App.jsx";
import { FakeReadSide, fakeReader } from "./fake.jsx";

function LiveView({ client, aggregate }) {
  const view = useAggregate(client, aggregate);
  if (!view) return <p id="view">no view yet</p>;
  const confirmed = view.events.filter((e) => e.status === "confirmed").length;
  return <p id="view">version {view.version}: {view.events.length} events, {confirmed} confirmed</p>;
}

async function main() {
  const params = new URLSearchParams(location.search);
  const aggregate = { typeId: params.get("typeId"), id: params.get("id") };
  // init=bytes: the module's bytes fetched by the app and handed to init (no URL for it to guess).
  const wasm = params.get("init") === "bytes" ? await (await fetch(wasmUrl)).arrayBuffer() : undefined;
  const client = await openClient(params.get("gateway"), wasm);
  const subscribe = typeof client.subscribe === "function";
  const reader = fakeReader();
  window.app = { client, aggregate, subscribe, wasmUrl, reader };
  createRoot(document.getElementById("root")).render(
    <StrictMode>
      <Outbox client={client} aggregate={aggregate} />
      {subscribe && <LiveView client={client} aggregate={aggregate} />}
      {subscribe && <EventCount client={client} aggregate={aggregate} />}
      <FakeReadSide reader={reader} aggregate={aggregate} />
    </StrictMode>,
  );
}

main().catch((e) => {
  window.appError = String(e && e.stack ? e.stack : e);
  document.body.textContent = `failed: ${e}`;
});
