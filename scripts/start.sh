#!/usr/bin/env bash
# `npm start`: set up, build the package and the gateway, and run the gateway with its embedded
# store on http://127.0.0.1:8080, serving the demo page (www/) and the package (pkg/).
# Fault injection is enabled with all rates at zero, so the demo page can turn faults on.
# The access policy is scripts/demo-policy.toml: the demo's shared accounts are writable by every
# device (a second browser joins the same ledger); everything else is owned by its creator.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"

bash scripts/setup.sh
bash scripts/build.sh
cargo build --release -p celeriant-gateway

LISTEN="${CELERIANT_GATEWAY_LISTEN:-127.0.0.1:8080}"
echo
echo "  celeriant-sync demo: http://${LISTEN}/"
echo "  (Ctrl-C stops the gateway; data is kept in .data/gateway)"
echo
exec ./target/release/celeriant-gateway \
  --listen "$LISTEN" \
  --data-dir .data/gateway \
  --www www \
  --pkg pkg \
  --policy scripts/demo-policy.toml \
  \
  --faults "$@"
