#!/usr/bin/env bash
# `npm run bench [-- --smoke] [-- --browser chromium|firefox|webkit|all]`: builds the package and
# the gateway (release), then runs bench/run.mjs, which measures each line against a
# plain-JavaScript baseline in fresh headless Chromium processes, then the drain in each other
# engine of --browser (default all: Firefox, WebKit through WebDriver, WebKit on disk) against
# Chromium's, and a projection's cost for one new event on a large aggregate against a small
# one (--only projection), and writes BENCHMARKS.md (not in smoke mode, nor with --only).
# BENCH_BASELINE_GATEWAY=<binary> [BENCH_GATEWAY_ROUNDS=n]: the gateway line measures that
# binary side by side with this tree's, alternating rounds (docs/benchmarks.md).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"
bash scripts/setup.sh
bash scripts/build.sh >/dev/null
cargo build --release -q -p celeriant-gateway --bins
RUN_DIR=$(mktemp -d "${TMPDIR:-/tmp}/celeriant-bench.XXXXXX")
trap 'rm -rf "$RUN_DIR"' EXIT
TMPDIR="$RUN_DIR" node bench/run.mjs "$@"
