#!/usr/bin/env bash
# `npm start`: set up, build the package and the gateway, and run the gateway with its embedded
# store on http://127.0.0.1:8080, serving the demo page (www/) and the package (pkg/).
# Fault injection is enabled with all rates at zero, so the demo page can turn faults on; its
# endpoints want a secret on every request, made fresh here at each start (32 random bytes in
# hex, in .data/faults-secret, mode 0600) and handed to the demo in the URL's fragment
# (#faults=...), which the browser never sends to the server. Events of type 13 are refused
# (422, 2022), so the demo's "Append a rejected event" parks at once.
# The access policy is scripts/demo-policy.toml: the demo's shared accounts are writable by every
# device (a second browser joins the same ledger); everything else is owned by its creator.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"

bash scripts/setup.sh
bash scripts/build.sh
cargo build --release -p celeriant-gateway

LISTEN="${CELERIANT_GATEWAY_LISTEN:-127.0.0.1:8080}"
mkdir -p .data
chmod 700 .data
SECRET_FILE=.data/faults-secret
rm -f "$SECRET_FILE"
(umask 077 && od -An -tx1 -N32 /dev/urandom | tr -d ' \n' >"$SECRET_FILE")
echo
echo "  celeriant-sync demo: http://${LISTEN}/#faults=$(cat "$SECRET_FILE")"
echo "  (Ctrl-C stops the gateway; data is kept in .data/gateway)"
echo
exec ./target/release/celeriant-gateway \
  --listen "$LISTEN" \
  --data-dir .data/gateway \
  --www www \
  --pkg pkg \
  --policy scripts/demo-policy.toml \
  \
  --faults --faults-secret-file "$SECRET_FILE" --fault-reject-type 13 "$@"
