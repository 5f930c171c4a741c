// useAggregate against a stand-in for the read side's `client.subscribe` (the contract in
// docs: listener called asynchronously at once, then after every change; the returned function
// unsubscribes synchronously), which the test drives by hand — a change at will, a switch of
// aggregates — so the hook's re-subscription and clean-up are checked exactly (the real
// `subscribe` is exercised by main.jsx's LiveView); run.mjs asserts the rendered text and the
// subscriptions left open.
import { Component, useState } from "react";
import { useAggregate } from "celeriant-sync/react";

export function fakeReader() {
  const listeners = new Set();
  let version = 0;
  const view = (aggregate) => ({ aggregate, version, events: [], pending: 0, fromCache: false });
  const reader = {
    active: () => listeners.size,
    subscribed: 0,
    subscribe(aggregate, listener) {
      reader.subscribed += 1;
      const entry = { aggregate, listener };
      listeners.add(entry);
      queueMicrotask(() => listeners.has(entry) && listener(view(aggregate)));
      return () => listeners.delete(entry);
    },
    change() {
      version += 1;
      for (const { aggregate, listener } of listeners) listener(view(aggregate));
    },
  };
  return reader;
}

class Catch extends Component {
  state = { error: null };
  static getDerivedStateFromError(error) {
    return { error };
  }
  render() {
    return this.state.error ? <p id="noSubscribe">{this.state.error.message}</p> : this.props.children;
  }
}

function FakeView({ reader, aggregate }) {
  const view = useAggregate(reader, aggregate);
  return <p id="fakeView">{view ? `version ${view.version} of ${view.aggregate.id}` : "no view yet"}</p>;
}

function NoSubscribe({ aggregate }) {
  useAggregate({}, aggregate);
  return null;
}

export function FakeReadSide({ reader, aggregate }) {
  const [other, setOther] = useState(false);
  const shown = other ? { ...aggregate, id: "other" } : aggregate;
  return (
    <section>
      <button id="fakeChange" onClick={() => reader.change()}>change</button>
      <button id="fakeSwitch" onClick={() => setOther(true)}>switch aggregate</button>
      <FakeView reader={reader} aggregate={shown} />
      <Catch>
        <NoSubscribe aggregate={aggregate} />
      </Catch>
    </section>
  );
}
