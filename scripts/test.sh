#!/usr/bin/env bash
# `npm test`: every test of the project, ending with one line "N passed, N failed".
#
#   1. lint: rustfmt and clippy -D warnings, native and wasm32 (one check)
#   2. native tests: `cargo test --workspace` (protocol, gateway, engine, property tests; the
#      gateway's include nginx with TLS in front of it, the systemd unit under
#      `systemd-analyze verify`, and /metrics scraped after traffic)
#   3. browser tests (scripts/browser-tests.sh): `wasm-pack test --headless`, in Chromium,
#      Firefox and WebKit, against a real gateway process started on 127.0.0.1 with fault
#      injection enabled; each engine's wall time is printed
#   4. the built npm package: TypeScript consumers type-check against its .d.ts files (one check);
#      `npm pack` of it holds exactly the files an app needs (tests/package/pack.mjs)
#   5. the benchmark's pipeline in smoke mode (one check; times are printed, never asserted)
#   6. end to end: real tabs of one Chromium profile (playwright-core) against real gateway
#      processes: the exactly-once chaos run, one sender, takeover, a hung drainer, a full
#      disk, the demo page (its balances, a projection; the demo offline: its switch, a reload
#      from its service worker, the rejected event; its encryption switch: ciphertext on the
#      gateway; at the fake Celeriant node: only ciphertext of an encrypting client's event), and
#      the fleet: three replicas behind nginx with TLS over a fake three-node Celeriant cluster
#      (the `fake-celeriant` binary), a replica killed and a leader changed mid-drain
#   7. the vite app: `npm pack` of pkg/ installed into tests/vite-app (React), `vite build`,
#      served on 127.0.0.1 and run in Chromium against a real gateway (tests/vite-app/run.mjs)
#   8. the README's first example, type-checked and run in Chromium against a real gateway
#      (tests/readme/run.mjs)
#
# Each part's count comes from the test runners' own "test result:" lines. Chromium profiles
# and the gateway's data live in a per-run temporary folder, removed at exit.
set -uo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"
# One build from scratch: incremental compilation's caches (~3 GB here) would never be reused.
export CARGO_INCREMENTAL=0

# Disk: what is free before and what the run used, so a CI machine short of disk says so.
disk_free() { df -Pk . | awk 'NR==2 {printf "%.1f GB free", $4/1048576}'; }
echo "disk at start: $(disk_free)"

if ! bash scripts/setup.sh; then
  echo "setup failed"
  echo "0 passed, 1 failed"
  exit 1
fi

RUN_DIR=$(mktemp -d "${TMPDIR:-/tmp}/celeriant-test.XXXXXX")
export TMPDIR="$RUN_DIR/tmp"
mkdir -p "$TMPDIR"
cleanup() {
  rm -rf "$RUN_DIR"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

PASSED=0
FAILED=0
SUMMARY=()
record() { # name passed failed
  PASSED=$((PASSED + $2))
  FAILED=$((FAILED + $3))
  SUMMARY+=("$(printf '  %-34s %5d passed, %d failed' "$1" "$2" "$3")")
}
# Sums the "test result:" lines in log $1; a non-zero exit without a failed test counts as one.
tally() {
  local log=$1 name=$2 status=$3 p f
  p=$(grep -aE '^test result:' "$log" | grep -oE '[0-9]+ passed' | awk '{s+=$1} END {print s+0}')
  f=$(grep -aE '^test result:' "$log" | grep -oE '[0-9]+ failed' | awk '{s+=$1} END {print s+0}')
  if [ "$status" -ne 0 ] && [ "$f" -eq 0 ]; then f=1; fi
  record "$name" "$p" "$f"
}
step() { printf '\n=== %s\n' "$*"; }
# Disk: a part's test executables are never run again once it has ended; removing them keeps the
# run's peak use of target/ down. A CI machine with ~3 GB free ran out mid-run (its gateways
# then answered 507 under their disk floor, and the wasm build failed with ENOSPC). The list is
# cargo's own (`--no-run --message-format=json`, nothing rebuilt): only artifacts built as tests,
# never the gateway's or fake-celeriant's binaries that later parts run.
drop_test_executables() { # cargo test arguments
  cargo test "$@" --no-run -q --message-format=json 2>/dev/null | node -e '
    let buf = "";
    process.stdin.on("data", (d) => (buf += d)).on("end", () => {
      for (const line of buf.split("\n")) {
        if (!line.startsWith("{")) continue;
        const m = JSON.parse(line);
        if (m.reason === "compiler-artifact" && m.profile && m.profile.test && m.executable) {
          console.log(m.executable);
        }
      }
    });' | xargs -r rm -f
}
report_disk() { echo "disk $1: $(disk_free); target/ holds $(du -sh target 2>/dev/null | cut -f1)"; }

step "lint: cargo fmt --check; clippy -D warnings (native and wasm32)"
lint=0
cargo fmt --all --check || lint=1
cargo clippy --workspace --all-targets -q -- -D warnings || lint=1
# The browser tests read the gateway's address at build time; any value does for linting.
CELERIANT_TEST_GATEWAY=http://127.0.0.1:1 \
  cargo clippy --target wasm32-unknown-unknown --all-targets -q -- -D warnings || lint=1
record "lint (fmt, clippy)" $((1 - lint)) "$lint"

step "native tests: cargo test --workspace"
cargo test --workspace --no-fail-fast 2>&1 | tee "$RUN_DIR/native.log"
tally "$RUN_DIR/native.log" "native (cargo test)" "${PIPESTATUS[0]}"
report_disk "after the native tests"
drop_test_executables --workspace
report_disk "without their executables"

step "browser tests: headless Chromium, Firefox and WebKit against a real gateway on 127.0.0.1"
BROWSER_LOG_DIR="$RUN_DIR" bash scripts/browser-tests.sh chromium firefox webkit
for engine in Chromium Firefox WebKit; do
  key=$(echo "$engine" | tr 'A-Z' 'a-z')
  if [ -f "$RUN_DIR/browser-$key.status" ]; then
    tally "$RUN_DIR/browser-$key.log" "browser, $engine (wasm-pack test)" "$(cat "$RUN_DIR/browser-$key.status")"
  else
    record "browser, $engine (wasm-pack test)" 0 1
  fi
done
# No WebKitWebDriver, MiniBrowser, Xvfb, runner or browser of those suites is still running.
if [ -f "$RUN_DIR/browser-leftovers" ] && [ ! -s "$RUN_DIR/browser-leftovers" ]; then
  record "browser processes left running: none" 1 0
else
  record "browser processes left running: none" 0 1
fi
# Nothing later runs a wasm32 debug build (the package is built with the wasm-release profile).
report_disk "after the browser tests"
rm -rf target/wasm32-unknown-unknown/debug
report_disk "without their wasm32 debug build"

step "package: build pkg/ and type-check a TypeScript consumer against its .d.ts"
if bash scripts/build.sh >"$RUN_DIR/build.log" 2>&1 \
  && npx --no-install tsc -p tests/typescript/tsconfig.json; then
  record "package (build, tsc consumer)" 1 0
else
  tail -n 30 "$RUN_DIR/build.log"
  record "package (build, tsc consumer)" 0 1
fi
# The tarball: `npm pack --dry-run` lists exactly what an app needs (its own test lines).
if [ -f pkg/package.json ]; then
  node tests/package/pack.mjs 2>&1 | tee "$RUN_DIR/pack.log"
  tally "$RUN_DIR/pack.log" "package (tarball contents)" "${PIPESTATUS[0]}"
else
  record "package (tarball contents)" 0 1
fi

step "benchmark smoke: npm run bench's pipeline, one run of small N (times are not asserted)"
if cargo build --release -q -p celeriant-gateway --bins && TMPDIR="$RUN_DIR/tmp" node bench/run.mjs --smoke >"$RUN_DIR/bench.log" 2>&1; then
  grep -E '^\| ' "$RUN_DIR/bench.log" || true
  record "benchmark smoke" 1 0
else
  tail -n 30 "$RUN_DIR/bench.log"
  record "benchmark smoke" 0 1
fi

step "end to end: tabs of Debian's Chromium (playwright-core) against real gateways"
# The fleet and celeriant-encrypted scenarios run the fake cluster as a process (`cargo test` builds no plain binary of it).
cargo build -q -p fake-celeriant
if [ -f pkg/celeriant_sync_bg.wasm ] && [ -x target/debug/celeriant-gateway ] && [ -x target/debug/fake-celeriant ]; then
  node tests/e2e/run.mjs 2>&1 | tee "$RUN_DIR/e2e.log"
  tally "$RUN_DIR/e2e.log" "end to end (playwright-core)" "${PIPESTATUS[0]}"
else
  record "end to end (playwright-core)" 0 1
fi

step "vite app: the packed tarball installed in a React app, vite build, run in Chromium against a real gateway"
if [ -f pkg/package.json ] && [ -x target/debug/celeriant-gateway ]; then
  node tests/vite-app/run.mjs 2>&1 | tee "$RUN_DIR/vite-app.log"
  tally "$RUN_DIR/vite-app.log" "vite app (tarball, React, Chromium)" "${PIPESTATUS[0]}"
else
  record "vite app (tarball, React, Chromium)" 0 1
fi

step "readme: the README's first example, type-checked and run in Chromium against a real gateway"
if [ -f pkg/package.json ] && [ -x target/debug/celeriant-gateway ]; then
  node tests/readme/run.mjs 2>&1 | tee "$RUN_DIR/readme.log"
  tally "$RUN_DIR/readme.log" "readme example (tsc, Chromium)" "${PIPESTATUS[0]}"
else
  record "readme example (tsc, Chromium)" 0 1
fi

echo
report_disk "at end"
du -sh target/*/ target/wasm32-unknown-unknown/*/ 2>/dev/null | sed 's/^/  /'
echo "=== summary"
printf '%s\n' "${SUMMARY[@]}"
echo "$PASSED passed, $FAILED failed"
[ "$FAILED" -eq 0 ]
