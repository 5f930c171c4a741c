#!/usr/bin/env bash
# Installs what this project needs on a fresh machine, skipping whatever is already present.
# Called by `npm start` and `npm test`; safe (and fast) to run again.
#
#   - the wasm32-unknown-unknown Rust target
#   - wasm-bindgen-cli at exactly the wasm-bindgen version in Cargo.lock
#   - wasm-pack 0.15.1
#   - Debian's chromium and chromium-driver, firefox-esr and geckodriver, webkit2gtk-driver
#     (WebKitWebDriver and MiniBrowser) and xvfb (headless browser tests)
#   - Debian's nginx (the TLS reverse proxy the nginx test starts on its own), curl, openssl and
#     systemd (for systemd-analyze), which the nginx and deployment-file tests call
#   - the npm packages in package-lock.json
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"

log() { printf '[setup] %s\n' "$*" >&2; }

WASM_PACK_VERSION=0.15.1

# 1. Rust target.
if ! rustup target list --installed | grep -qx wasm32-unknown-unknown; then
  log "adding the wasm32-unknown-unknown target"
  rustup target add wasm32-unknown-unknown
fi

# 2. wasm-bindgen-cli, pinned to Cargo.lock (the CLI and the library must match exactly).
want=$(awk '/^name = "wasm-bindgen"$/ { getline; gsub(/version = |"/, ""); print; exit }' Cargo.lock)
if [ -z "$want" ]; then
  log "cannot find wasm-bindgen in Cargo.lock"; exit 1
fi
have=$(wasm-bindgen --version 2>/dev/null | awk '{print $2}' || true)
if [ "$have" != "$want" ]; then
  log "installing wasm-bindgen-cli $want (found: ${have:-none}); about 2 minutes"
  # Not --locked: the CLI's own lockfile does not resolve in this environment.
  cargo install wasm-bindgen-cli --version "$want" --force
fi

# 3. wasm-pack (the npm package downloads binaries from GitHub, which is unreachable here).
have=$(wasm-pack --version 2>/dev/null | awk '{print $2}' || true)
if [ "$have" != "$WASM_PACK_VERSION" ]; then
  log "installing wasm-pack $WASM_PACK_VERSION (found: ${have:-none}); about 2 minutes"
  cargo install wasm-pack --version "$WASM_PACK_VERSION" --locked --force
fi

# 4. Headless Chromium and its driver, Firefox (the second engine), WebKitGTK's WebDriver with
#    its MiniBrowser and the X server it needs (the third engine), from Debian (never a test
#    tool's own browser download); one `apt-get update` for whatever is missing.
packages=()
if ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null; then
  packages+=(chromium chromium-driver)
fi
if ! command -v firefox-esr >/dev/null && ! command -v firefox >/dev/null; then
  packages+=(firefox-esr)
fi
if ! command -v WebKitWebDriver >/dev/null; then
  packages+=(webkit2gtk-driver)
fi
if ! command -v Xvfb >/dev/null; then
  packages+=(xvfb)
fi
# nginx: the reverse proxy with TLS in front of the gateway (tests/e2e's nginx test starts its
# own, unprivileged instance; the package's service is never used).
if ! command -v nginx >/dev/null && [ ! -x /usr/sbin/nginx ]; then
  packages+=(nginx)
fi
# The gateway's allocator (tikv-jemallocator) builds jemalloc from its C sources: make and a C
# compiler (gcc also builds the other crates with C in them).
for tool in make gcc; do
  command -v "$tool" >/dev/null || packages+=("$tool")
done
# What the nginx and deployment-file tests call: curl (the TLS client), openssl (the test
# certificate, scripts/proof.sh) and systemd-analyze (the unit file check, in Debian's systemd).
for tool in curl openssl; do
  command -v "$tool" >/dev/null || packages+=("$tool")
done
if ! command -v systemd-analyze >/dev/null; then
  packages+=(systemd)
fi
if [ ${#packages[@]} -gt 0 ]; then
  log "installing Debian's ${packages[*]}"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q "${packages[@]}"
fi

# 5. geckodriver (Firefox's WebDriver; Debian does not package it).
if ! command -v geckodriver >/dev/null; then
  log "installing geckodriver (cargo); about 2 minutes"
  cargo install geckodriver --locked
fi

# 6. npm packages, when package-lock.json changed since the last install.
if [ ! -f node_modules/.package-lock.json ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  log "installing npm packages"
  npm ci --no-audit --no-fund --loglevel=error
fi
