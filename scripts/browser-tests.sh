#!/usr/bin/env bash
# The browser test suites: every tests/browser_*.rs, one `wasm-pack test --headless` run per file
# and engine (a failing file does not hide the others), against a real celeriant-gateway started
# here on 127.0.0.1 with fault injection enabled.
#
#   bash scripts/browser-tests.sh [chromium] [firefox] [webkit]     (no argument: all three)
#   BROWSER_TEST_FILES="browser_sync browser_tabs" bash scripts/browser-tests.sh webkit
#   BROWSER_TEST_FILES=browser_sync BROWSER_TEST_ARGS="--skip rule8" bash scripts/browser-tests.sh webkit
#
# `npm test` (scripts/test.sh) runs it with every engine; run it alone to try one engine. For
# each engine it writes, into $BROWSER_LOG_DIR (default: a temporary folder, removed at exit):
# browser-<engine>.log (the runners' output; their "test result:" lines are what is counted),
# browser-<engine>.status (0 when every file passed) and browser-<engine>.seconds (wall time),
# and it ends with one line per engine. Exit status: 0 when every engine passed.
#
# How each engine is driven (docs/browsers.md):
#   chromium  chromedriver (CHROMEDRIVER); flags from webdriver.json
#   firefox   geckodriver (GECKODRIVER), headless, with a throwaway HOME
#   webkit    WebKitWebDriver (MiniBrowser) on a private Xvfb, both started here for each file in
#             a process group of their own and reached by the runner through SAFARIDRIVER_REMOTE;
#             MiniBrowser and its web and network processes join the driver's group, and every
#             group is killed when the file ends and on every exit path (Ctrl-C included), so no
#             WebKit or Xvfb process outlives the run. (Passing a wrapper script as SAFARIDRIVER
#             leaks them: the runner kills only the process it started.)
# The runner picks the first driver variable it finds (*_REMOTE before the others, Firefox
# first), so each engine's run sees exactly one.
set -uo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"

# A *_REMOTE variable would take every engine's run to that driver.
unset CHROMEDRIVER_REMOTE GECKODRIVER_REMOTE SAFARIDRIVER_REMOTE MSEDGEDRIVER_REMOTE
ENGINES=("$@")
[ ${#ENGINES[@]} -gt 0 ] || ENGINES=(chromium firefox webkit)
for engine in "${ENGINES[@]}"; do
  case "$engine" in
    chromium | firefox | webkit) ;;
    *) echo "unknown engine '$engine' (chromium, firefox or webkit)" >&2; exit 2 ;;
  esac
done

WORK=$(mktemp -d "${TMPDIR:-/tmp}/celeriant-browser.XXXXXX")
LOG_DIR=${BROWSER_LOG_DIR:-$WORK}
mkdir -p "$LOG_DIR"
GATEWAY_PID=
APP_GATEWAY_PID=
# Leaders of the process groups started for WebKit (leader pid = group id), one a line. A file,
# because the groups are started inside each engine's subshell.
GROUPS_FILE="$WORK/process-groups"
: >"$GROUPS_FILE"

kill_group() { # leader pid: TERM the group, KILL what is left after 5 s
  kill -TERM -- "-$1" 2>/dev/null || return 0
  for _ in $(seq 50); do
    kill -0 -- "-$1" 2>/dev/null || break
    sleep 0.1
  done
  kill -KILL -- "-$1" 2>/dev/null
  wait "$1" 2>/dev/null
  return 0
}
cleanup() {
  local pid
  while read -r pid; do [ -n "$pid" ] && kill_group "$pid"; done <"$GROUPS_FILE"
  if [ -n "$GATEWAY_PID" ]; then
    kill "$GATEWAY_PID" 2>/dev/null
    wait "$GATEWAY_PID" 2>/dev/null
  fi
  if [ -n "$APP_GATEWAY_PID" ]; then
    kill "$APP_GATEWAY_PID" 2>/dev/null
    wait "$APP_GATEWAY_PID" 2>/dev/null
  fi
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

if ! cargo build -q -p celeriant-gateway; then
  for engine in "${ENGINES[@]}"; do
    echo 1 >"$LOG_DIR/browser-$engine.status"
    : >"$LOG_DIR/browser-$engine.log"
    echo 0 >"$LOG_DIR/browser-$engine.seconds"
  done
  echo "the gateway did not build"
  exit 1
fi
# Device identity is on (the gateway's default). Every test opens fresh databases, each a new
# device with its own session, all from 127.0.0.1: no per-address limit on session openings.
AUTH_FLAGS=(--session-rate-per-minute 0)
# The tests read back what landed through a reader session of their own: see the policy file.
AUTH_FLAGS+=(--policy tests/browser/policy.toml)
# A change stream names at most 50 aggregates here (the gateway's default is 1,000), so that
# tests/browser_watch_many.rs can watch more than a stream's worth with a few dozen: the client
# must split them over several streams (none of the other tests watches more than a few).
AUTH_FLAGS+=(--watch-max-aggregates 50)
# An operator credential made for this run, for the revocation test (tests/browser_share.rs).
CELERIANT_TEST_OPERATOR_SECRET=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
printf '%s' "$CELERIANT_TEST_OPERATOR_SECRET" >"$WORK/operator-secret"
export CELERIANT_TEST_OPERATOR_SECRET
./target/debug/celeriant-gateway --listen 127.0.0.1:0 --port-file "$WORK/gateway.port" \
  --data-dir "$WORK/gateway" --www www --pkg pkg --faults "${AUTH_FLAGS[@]}" \
  --operator-token-file "$WORK/operator-secret" \
  --faults-secret-out "$WORK/faults-secret" \
  --fault-seed "${CELERIANT_FAULT_SEED:-20261129}" >"$WORK/gateway.log" 2>&1 &
GATEWAY_PID=$!
for _ in $(seq 200); do [ -s "$WORK/gateway.port" ] && break; sleep 0.1; done
export CELERIANT_TEST_GATEWAY="http://$(cat "$WORK/gateway.port" 2>/dev/null)"
# The faults secret the gateway generated (written before the port file), compiled into the
# tests like the address.
CELERIANT_TEST_FAULTS_SECRET=$(cat "$WORK/faults-secret" 2>/dev/null)
export CELERIANT_TEST_FAULTS_SECRET
# A second gateway that requires app tokens (HS256, a secret made for this run), for the
# one-browser-many-users tests (tests/browser_users.rs), which mint tokens for several users.
# It lets a client hold 2 change streams (the default is 4), below the 3 a device opens when it
# watches more than 2 streams' worth (tests/browser_watch_many.rs); a device watching less
# opens one, and a second for a moment while it replaces it.
CELERIANT_TEST_APP_SECRET=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
printf '%s' "$CELERIANT_TEST_APP_SECRET" >"$WORK/app-secret"
./target/debug/celeriant-gateway --listen 127.0.0.1:0 --port-file "$WORK/app-gateway.port" \
  --data-dir "$WORK/app-gateway" "${AUTH_FLAGS[@]}" --app-token-alg hs256 \
  --watch-max-streams-per-client 2 \
  --app-token-key-file "$WORK/app-secret" --app-token-issuer celeriant-test \
  --app-token-audience celeriant-test >"$WORK/app-gateway.log" 2>&1 &
APP_GATEWAY_PID=$!
for _ in $(seq 200); do [ -s "$WORK/app-gateway.port" ] && break; sleep 0.1; done
export CELERIANT_TEST_APP_GATEWAY="http://$(cat "$WORK/app-gateway.port" 2>/dev/null)"
export CELERIANT_TEST_APP_SECRET
echo "gateway: $CELERIANT_TEST_GATEWAY (pid $GATEWAY_PID, fault seed ${CELERIANT_FAULT_SEED:-20261129})"

free_port() {
  node -e 'const s = require("net").createServer(); s.listen(0, "127.0.0.1", () => { console.log(s.address().port); s.close(); });'
}

# A private Xvfb and a WebKitWebDriver for one test file: each MiniBrowser session starts from
# empty storage anyway (WebDriver sessions are ephemeral), and a hung browser cannot reach into
# the next file. Sets XVFB_PID, DRIVER_PID and exports SAFARIDRIVER_REMOTE.
webkit_start() {
  local dir="$WORK/webkit" display port
  mkdir -p "$dir/home" "$dir/data" "$dir/cache" "$dir/config"
  rm -f "$dir/display"
  setsid Xvfb -displayfd 3 -screen 0 1280x1024x24 -nolisten tcp 3>"$dir/display" 2>>"$dir/xvfb.log" &
  XVFB_PID=$!
  echo "$XVFB_PID" >>"$GROUPS_FILE"
  for _ in $(seq 100); do [ -s "$dir/display" ] && break; sleep 0.1; done
  display=$(head -n 1 "$dir/display" 2>/dev/null)
  if [ -z "$display" ]; then
    echo "Xvfb did not start:"; tail -n 5 "$dir/xvfb.log"
    return 1
  fi
  for _ in 1 2 3; do
    port=$(free_port)
    HOME="$dir/home" XDG_DATA_HOME="$dir/data" XDG_CACHE_HOME="$dir/cache" \
      XDG_CONFIG_HOME="$dir/config" DISPLAY=":$display" \
      setsid WebKitWebDriver --port="$port" --host=local >>"$dir/driver.log" 2>&1 &
    DRIVER_PID=$!
    echo "$DRIVER_PID" >>"$GROUPS_FILE"
    for _ in $(seq 100); do
      if (: >"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
        export SAFARIDRIVER_REMOTE="http://127.0.0.1:$port"
        return 0
      fi
      kill -0 "$DRIVER_PID" 2>/dev/null || break
      sleep 0.1
    done
    kill_group "$DRIVER_PID" # the port was taken meanwhile, or it hung: another port
  done
  echo "WebKitWebDriver did not start:"; tail -n 5 "$dir/driver.log"
  return 1
}
webkit_stop() {
  kill_group "$DRIVER_PID"
  kill_group "$XVFB_PID"
}

# Runs every browser test file in one engine; exits non-zero if one failed.
run_engine() { # engine log
  local engine=$1 log=$2 status=0 name
  local args=()
  case "$engine" in
    chromium)
      unset GECKODRIVER SAFARIDRIVER
      args=(--chrome --chromedriver "$(command -v chromedriver)") ;;
    firefox)
      # Firefox writes crash-report and config folders into $HOME; cargo and rustup keep theirs.
      unset CHROMEDRIVER SAFARIDRIVER
      export CARGO_HOME="${CARGO_HOME:-$HOME/.cargo}" RUSTUP_HOME="${RUSTUP_HOME:-$HOME/.rustup}"
      export HOME="$WORK/firefox-home"
      mkdir -p "$HOME"
      args=(--firefox --geckodriver "$(command -v geckodriver)") ;;
    webkit)
      unset CHROMEDRIVER GECKODRIVER
      # wasm-pack wants a driver path; the runner uses SAFARIDRIVER_REMOTE instead.
      args=(--safari --safaridriver "$(command -v WebKitWebDriver)") ;;
  esac
  local files=(${BROWSER_TEST_FILES:-$(cd tests && ls browser_*.rs | sed 's/\.rs$//')})
  for name in "${files[@]}"; do
    echo "--- $engine: $name"
    if [ "$engine" = webkit ] && ! webkit_start; then
      status=1
      continue
    fi
    # The runner's wait for a whole file: browser_sync holds the 100,000-event backlog; every
    # other file takes seconds, so a page that never starts its tests costs minutes, not 15.
    # browser_sync runs with the runner's --nocapture so that its console lines (rule8's drain
    # rate, the chaos run's fault counts) reach the log; the summary repeats rule8's.
    local timeout=180 file_status runner_args=${BROWSER_TEST_ARGS:-} pid tail_pid waited
    if [ "$name" = browser_sync ]; then
      timeout=900
      runner_args="--nocapture $runner_args"
    fi
    timeout=${WASM_BINDGEN_TEST_TIMEOUT:-$timeout}
    # A page that never starts its tests is noticed after ${BROWSER_TEST_START_WAIT:-120} s (the
    # runner prints "running N tests" as soon as the page has loaded the module) and retried.
    local start_wait=${BROWSER_TEST_START_WAIT:-120} started
    for attempt in 1 2 3; do
      # wasm-pack, cargo, the runner and the runner's driver and browser in a process group of
      # their own, killed by a watchdog if the runner outlives its own timeout by 2 minutes (a
      # Chromium page once blocked the runner's WebDriver calls for 7 minutes past its 300 s)
      # and by cleanup on every exit path.
      # shellcheck disable=SC2086 # BROWSER_TEST_ARGS is a list of words (a filter, --skip NAME)
      WASM_BINDGEN_TEST_TIMEOUT=$timeout setsid wasm-pack test --headless "${args[@]}" -- --test "$name" \
        ${runner_args:+-- $runner_args} >"$WORK/file.log" 2>&1 &
      pid=$!
      echo "$pid" >>"$GROUPS_FILE"
      tail -n +1 -f --pid="$pid" "$WORK/file.log" &
      tail_pid=$!
      waited=0
      started=1
      local loading=0 # seconds since the runner opened the page (compiling does not count)
      while kill -0 "$pid" 2>/dev/null; do
        if grep -aq '^Running headless tests in' "$WORK/file.log"; then
          loading=$((loading + 1))
        fi
        if [ "$loading" -ge "$start_wait" ] && [ "$attempt" -lt 3 ] \
          && ! grep -aqE '^running [0-9]+ tests?' "$WORK/file.log"; then
          echo "--- $engine: $name: no test started within ${start_wait} s: killed"
          kill_group "$pid"
          started=0
          break
        fi
        if [ "$waited" -ge $((timeout + 120)) ]; then
          echo "--- $engine: $name: the runner outlived its ${timeout} s timeout by 120 s: killed"
          kill_group "$pid"
          break
        fi
        sleep 1
        waited=$((waited + 1))
      done
      wait "$pid"
      file_status=$?
      wait "$tail_pid"
      kill_group "$pid" # whatever the runner left behind (its driver, a browser)
      sed -i "/^$pid\$/d" "$GROUPS_FILE"
      # A page that never started a test (seen in Chromium and in WebKit, more than once: the page
      # stayed at "Loading scripts..."/"Loading Wasm module...", no console error) is retried
      # up to twice, in a fresh browser; a test that ran and failed is never retried.
      if [ "$file_status" -ne 0 ] && [ "$attempt" -lt 3 ] \
        && { [ "$started" -eq 0 ] || ! grep -aqE '^running [0-9]+ tests?' "$WORK/file.log"; }; then
        echo "--- $engine: $name: the runner never started a test; once more in a fresh browser"
        cat "$WORK/file.log" >>"$WORK/retried.log"
        if [ "$engine" = webkit ]; then
          webkit_stop
          webkit_start || break
        fi
        continue
      fi
      break
    done
    [ "$file_status" -eq 0 ] || status=1
    cat "$WORK/file.log" >>"$log"
    if ! grep -aq '^test result:' "$WORK/file.log"; then
      # The runner gave up on the file (its WASM_BINDGEN_TEST_TIMEOUT) or never ran it, so it
      # printed no total: count the tests it reported as ok, and every other test of the file
      # ("running N tests") as failed.
      local total ok
      total=$(grep -aoE '^running [0-9]+ tests?' "$WORK/file.log" | grep -oE '[0-9]+' | head -n 1)
      ok=$(grep -acE '^test .* \.\.\. ok$' "$WORK/file.log")
      echo "test result: FAILED. $ok passed; $((${total:-1} - ok)) failed; the file did not finish: tests it did not report count as failed" | tee -a "$log"
    fi
    [ "$engine" != webkit ] || webkit_stop
  done
  return $status
}

overall=0
for engine in "${ENGINES[@]}"; do
  log="$LOG_DIR/browser-$engine.log"
  : >"$log"
  started=$SECONDS
  (run_engine "$engine" "$log")
  status=$?
  echo "$status" >"$LOG_DIR/browser-$engine.status"
  echo $((SECONDS - started)) >"$LOG_DIR/browser-$engine.seconds"
  [ "$status" -eq 0 ] || overall=1
done

# Nothing this run started may outlive it (WebKitWebDriver, MiniBrowser and its WebKit
# processes, Xvfb, a runner and its browser): every process group it started must be empty now.
left=""
while read -r pid; do
  [ -n "$pid" ] || continue
  left="$left $(pgrep -g "$pid" 2>/dev/null | tr '\n' ' ')"
done <"$GROUPS_FILE"
left=$(echo "$left" | xargs)
printf '%s' "$left" >"$LOG_DIR/browser-leftovers"

if [ "$overall" -ne 0 ]; then
  echo "--- last lines of the gateway's log"
  tail -n 40 "$WORK/gateway.log"
fi
echo
echo "=== browser suites"
for engine in "${ENGINES[@]}"; do
  p=$(grep -aE '^test result:' "$LOG_DIR/browser-$engine.log" | grep -oE '[0-9]+ passed' | awk '{s+=$1} END {print s+0}')
  f=$(grep -aE '^test result:' "$LOG_DIR/browser-$engine.log" | grep -oE '[0-9]+ failed' | awk '{s+=$1} END {print s+0}')
  printf '  %-9s %4d passed, %d failed, exit %s, %s s\n' "$engine" "$p" "$f" \
    "$(cat "$LOG_DIR/browser-$engine.status")" "$(cat "$LOG_DIR/browser-$engine.seconds")"
  grep -a '^rule8: ' "$LOG_DIR/browser-$engine.log" | sed 's/^/            /'
done
if [ -z "$left" ]; then
  echo "  processes left running by these suites: none"
else
  echo "  processes left running by these suites (a failure; killed now):"
  # shellcheck disable=SC2086 # a list of pids
  ps -o pid=,pgid=,args= -p ${left// /,} | sed 's/^/    /'
  overall=1
fi
exit $overall
