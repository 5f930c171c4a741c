#!/usr/bin/env bash
# Builds the npm package into pkg/ (wasm-pack, target web, release profile).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"
# Snippets of an earlier build would be packed too (wasm-pack adds, never removes).
rm -rf pkg/snippets
wasm-pack build --target web --profile wasm-release --out-dir pkg --out-name celeriant_sync "$@"
# The final package.json, licences and the React hooks (idempotent).
node scripts/package.mjs pkg
