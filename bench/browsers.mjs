// The engines the benchmark does not launch as a plain Chromium process:
//
//   firefox      geckodriver and headless Firefox (a throwaway HOME; geckodriver makes a fresh
//                on-disk profile)
//   webkit       WebKitWebDriver and its MiniBrowser on a private Xvfb. A WebDriver session in
//                WebKit is ephemeral (MiniBrowser --automation uses a non-persistent data store),
//                so IndexedDB lives in WebKit's in-memory backend — the one Safari's Private
//                Browsing, WKWebViews with a non-persistent store and WebDriver sessions use.
//   webkit-disk  MiniBrowser launched as a plain process (no automation) with a fresh on-disk
//                data directory: IndexedDB in SQLite, like a normal Safari profile.
//
// Each is driven with a minimal W3C WebDriver client (`fetch` to the driver: new session,
// navigate, delete session) or not at all; nothing else talks to the browser while the page
// measures. Every process is started in its own process group and killed as a group, so nothing
// is left behind: MiniBrowser, WebKitWebProcess and WebKitNetworkProcess belong to the driver's
// (or MiniBrowser's) group, Firefox's content processes to geckodriver's.
import { spawn, execFileSync } from "node:child_process";
import { createServer } from "node:net";
import { mkdtempSync, rmSync, mkdirSync } from "node:fs";
import { join } from "node:path";

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
export const MINIBROWSER = "/usr/lib/x86_64-linux-gnu/webkit2gtk-4.1/MiniBrowser";

/** A free TCP port on 127.0.0.1. */
export function freePort() {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once("error", reject);
    s.listen(0, "127.0.0.1", () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

/** Spawns `cmd` as the leader of a new process group; `stop()` kills the whole group. */
function group(cmd, args, options = {}) {
  const proc = spawn(cmd, args, { stdio: ["ignore", "ignore", "pipe"], detached: true, ...options });
  let stderr = "";
  proc.stderr?.on("data", (d) => (stderr = (stderr + d).slice(-4000)));
  const exited = new Promise((r) => (proc.exitCode !== null || proc.signalCode !== null ? r() : proc.once("exit", r)));
  const signal = (s) => { try { process.kill(-proc.pid, s); } catch {} };
  const alive = () => { try { process.kill(-proc.pid, 0); return true; } catch { return false; } };
  return {
    proc,
    stderr: () => stderr,
    async stop() {
      signal("SIGTERM");
      const t = setTimeout(() => signal("SIGKILL"), 3000);
      await exited;
      clearTimeout(t);
      // Members that outlived the leader (a web or network process) are still in its group;
      // wait until the group is empty (the init process reaps the orphans within a second or
      // two), so that nothing of this browser is left when the benchmark moves on or exits.
      signal("SIGKILL");
      for (let i = 0; i < 50 && alive(); i++) await sleep(100);
    },
  };
}

/** A private X server: `{ display: ":N", stop() }`. */
export async function startXvfb() {
  const x = group("Xvfb", ["-displayfd", "3", "-screen", "0", "1280x1024x24", "-nolisten", "tcp"], {
    stdio: ["ignore", "ignore", "pipe", "pipe"],
  });
  try {
    const display = await new Promise((resolve, reject) => {
      let out = "";
      x.proc.stdio[3].on("data", (d) => {
        out += d;
        if (out.includes("\n")) resolve(`:${out.trim()}`);
      });
      x.proc.once("exit", (code) => reject(new Error(`Xvfb exited (${code}): ${x.stderr()}`)));
    });
    return { display, stop: () => x.stop() };
  } catch (e) {
    await x.stop();
    throw e;
  }
}

/** A throwaway HOME with XDG folders inside, and the environment pointing at them. */
function throwawayHome(tmp, engine) {
  const home = mkdtempSync(join(tmp, `${engine}-home-`));
  for (const d of ["data", "cache", "config"]) mkdirSync(join(home, d));
  const env = { ...process.env, HOME: home, XDG_DATA_HOME: join(home, "data"), XDG_CACHE_HOME: join(home, "cache"), XDG_CONFIG_HOME: join(home, "config") };
  return { home, env };
}

async function call(base, method, path, body) {
  const r = await fetch(`${base}${path}`, {
    method,
    headers: { "content-type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const json = await r.json().catch(() => ({}));
  if (!r.ok) throw new Error(`WebDriver ${method} ${path}: ${r.status} ${JSON.stringify(json.value ?? json)}`);
  return json.value;
}

/**
 * Opens `url` in a fresh browser of `engine` ("firefox", "webkit" or "webkit-disk").
 * Resolves with `{ version, stop() }` once the browser was told to navigate (the page then runs
 * on its own); `stop()` ends the session and kills every process it started.
 */
export async function open(engine, url, { tmp, firefoxPrefs = {} }) {
  const { home, env } = throwawayHome(tmp, engine);
  const started = [];
  const stopAll = async () => {
    for (const p of started.reverse()) await p.stop();
    rmSync(home, { recursive: true, force: true });
  };
  try {
    if (engine === "webkit-disk") {
      const x = await startXvfb();
      started.push(x);
      const browser = group(MINIBROWSER, [url], { env: { ...env, DISPLAY: x.display } });
      started.push(browser);
      return { version: webkitVersion(x.display), stop: stopAll };
    }
    const port = await freePort();
    const base = `http://127.0.0.1:${port}`;
    let driver;
    let capabilities;
    if (engine === "webkit") {
      const x = await startXvfb();
      started.push(x);
      driver = group("WebKitWebDriver", [`--port=${port}`, "--host=local"], { env: { ...env, DISPLAY: x.display } });
      capabilities = {};
    } else if (engine === "firefox") {
      driver = group("geckodriver", ["--port", String(port), "--host", "127.0.0.1"], { env });
      capabilities = { "moz:firefoxOptions": { args: ["-headless"], prefs: firefoxPrefs } };
    } else {
      throw new Error(`unknown engine ${engine}`);
    }
    started.push(driver);
    for (let i = 0; ; i++) {
      try {
        await call(base, "GET", "/status");
        break;
      } catch {
        if (i > 100 || driver.proc.exitCode !== null) throw new Error(`${engine}: the WebDriver server did not start: ${driver.stderr()}`);
        await sleep(100);
      }
    }
    const session = await call(base, "POST", "/session", { capabilities: { alwaysMatch: capabilities } });
    const id = session.sessionId;
    // Navigation returns when the page has loaded; the measurement goes on after that and
    // reports on its own, so this is not awaited (a slow load must not look like a failure).
    call(base, "POST", `/session/${id}/url`, { url }).catch(() => {});
    return {
      version: engine === "webkit" ? `WebKitGTK ${session.capabilities.browserVersion} (MiniBrowser)` : `Firefox ${session.capabilities.browserVersion}`,
      async stop() {
        await Promise.race([call(base, "DELETE", `/session/${id}`).catch(() => {}), sleep(10_000)]);
        await stopAll();
      },
    };
  } catch (e) {
    await stopAll();
    throw e;
  }
}

/** WebKitGTK's version, as MiniBrowser prints it (it wants a display even for that). */
export function webkitVersion(display) {
  try {
    const out = execFileSync(MINIBROWSER, ["--version"], { encoding: "utf8", env: { ...process.env, DISPLAY: display }, stdio: ["ignore", "pipe", "ignore"] });
    return `${out.trim().split("\n").pop()} (MiniBrowser)`;
  } catch {
    return "WebKitGTK (version unknown)";
  }
}
