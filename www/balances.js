// The demo's balances: each account's balance is a projection of its events
// (`client.project`), not a loop over them in the page. Every event the demo appends carries an
// `amount`; the balance is their sum. The client folds the confirmed events once (a new
// confirmed event is one `apply` call, however long the account) and re-applies this device's
// pending ones on top at each change, so the balance moves the moment an event is appended and
// stays put when it is confirmed. Parked (rejected) events never count; an event the page
// cannot read (encrypted under a key it does not have) is counted apart, never guessed. With
// encryption on, an event stored in the clear (appended before the switch was turned on, or by
// a device without it) is flagged NOT_ENCRYPTED by the client: its data is readable but not
// authenticated. The demo counts it and shows how many such events a balance includes; an app
// decides for itself whether to trust them (e.g. only those older than its switch to encryption).

/** The fold. `apply` returns a new state and never changes the one it is given. */
export const balance = {
  initial: { balance: 0, confirmed: 0, events: 0, unreadable: 0, clear: 0 },
  apply(s, e) {
    if (e.parked) return s;
    let amount;
    const clear = e.decryptError?.code === "NOT_ENCRYPTED";
    try {
      // json() throws on an event that did not decrypt (e.decryptError) and on ciphertext read
      // without the encryption option: both are unreadable here. A NOT_ENCRYPTED event's data
      // is the clear JSON as stored.
      const value = clear ? JSON.parse(new TextDecoder().decode(e.data)) : e.json();
      amount = Number(value?.amount) || 0;
    } catch {
      return { ...s, unreadable: s.unreadable + 1 };
    }
    return {
      balance: s.balance + amount,
      confirmed: s.confirmed + (e.status === "confirmed" ? amount : 0),
      events: s.events + 1,
      unreadable: s.unreadable,
      clear: s.clear + (clear ? 1 : 0),
    };
  },
};

/** One table row per account ([label, id] pairs of type `typeId`) in `tbody`, kept current by
 *  the account's projection; returns the projections (closed with the client). */
export function balances(client, typeId, accounts, tbody) {
  return accounts.map(([label, id]) => {
    const row = document.createElement("tr");
    row.dataset.account = id;
    row.innerHTML = `<td>${label}</td><td class="balance">…</td><td class="confirmed">…</td><td class="pendingCount">…</td><td class="unreadable">…</td><td class="clear">…</td>`;
    tbody.append(row);
    const cell = (name) => row.querySelector(`.${name}`);
    const projection = client.project({ typeId, id }, balance);
    projection.subscribe((snapshot) => {
      const s = snapshot.state;
      cell("balance").textContent = String(s.balance);
      cell("confirmed").textContent = `${s.confirmed} (v${snapshot.version})`;
      cell("pendingCount").textContent = String(snapshot.pending);
      cell("unreadable").textContent = String(s.unreadable);
      cell("clear").textContent = String(s.clear);
      row.title = snapshot.error ? `${snapshot.error.code}: ${snapshot.error.message}` : "";
    });
    return projection;
  });
}
