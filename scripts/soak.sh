#!/usr/bin/env bash
# `npm run soak -- [--events N] [--seed S]`: the long exactly-once chaos run (default 100,000
# events) in real Chromium tabs against a real gateway with faults, reloads, a closed drainer
# and a kill -9 of the gateway. Prints its figures; exits non-zero on any duplicate or loss.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"
bash scripts/setup.sh
bash scripts/build.sh >/dev/null
cargo build -q -p celeriant-gateway
RUN_DIR=$(mktemp -d "${TMPDIR:-/tmp}/celeriant-soak.XXXXXX")
trap 'rm -rf "$RUN_DIR"' EXIT
events=100000
[[ " $* " == *" --events "* ]] && events=""
TMPDIR="$RUN_DIR" node tests/e2e/run.mjs --only chaos ${events:+--events $events} "$@"
