// The demo's app shell, so the page loads and works with no network (an offline-first demo
// that cannot be reloaded offline would not be one). Network first: a visitor always gets the
// current page and package while the gateway answers; when it does not, the copy stored at the
// last successful load is served. Only the page's own files are handled (GET, same origin);
// the API (/v1/...) always goes to the network, as the client expects.
const CACHE = "celeriant-sync-demo-v1";
const SHELL = [
  "./", "index.html", "app.js", "reader.js", "inspector.js", "live.js", "balances.js", "keys.js", "style.css",
  "pkg/celeriant_sync.js", "pkg/celeriant_sync_bg.wasm",
];

// The package's JS imports wasm-bindgen's snippets (their folder name is a hash of the build):
// read them from its import statements, so they are stored too.
async function shellFiles() {
  const glue = await fetch("pkg/celeriant_sync.js", { cache: "no-store" }).then((r) => {
    // A refusal (429 from the gateway's per-address rate on static files) is not the package:
    // fail the install, which the browser tries again at the next load.
    if (!r.ok) throw new Error(`pkg/celeriant_sync.js: ${r.status}`);
    return r.text();
  });
  const snippets = [...glue.matchAll(/["'](\.\/snippets\/[^"']+)["']/g)].map((m) => `pkg/${m[1].slice(2)}`);
  return [...new Set([...SHELL, ...snippets])];
}

self.addEventListener("install", (event) => {
  event.waitUntil((async () => {
    const cache = await caches.open(CACHE);
    await cache.addAll(await shellFiles());
    await self.skipWaiting();
  })());
});

self.addEventListener("activate", (event) => {
  event.waitUntil((async () => {
    for (const name of await caches.keys()) if (name !== CACHE) await caches.delete(name);
    await self.clients.claim();
  })());
});

self.addEventListener("fetch", (event) => {
  const url = new URL(event.request.url);
  if (event.request.method !== "GET" || url.origin !== location.origin || url.pathname.startsWith("/v1/")) return;
  event.respondWith((async () => {
    const cache = await caches.open(CACHE);
    // The page with its query (`?device=2`) is the same file.
    const key = event.request.mode === "navigate" ? new Request(new URL("./", location.href)) : event.request;
    // The gateway answers `Vary: Origin` (CORS), and a module script's request carries an
    // Origin the stored copy's did not: the origin is this one either way.
    const stored = () => cache.match(key, { ignoreSearch: event.request.mode === "navigate", ignoreVary: true });
    try {
      const response = await fetch(event.request);
      if (response.ok) await cache.put(key, response.clone());
      // A refusal to serve (429: the gateway's per-address rate on static files; 5xx) is no
      // page: the stored copy is better, when there is one (browsers do not retry a script).
      if (response.status === 429 || response.status >= 500) return (await stored()) ?? response;
      return response;
    } catch (error) {
      const cached = await stored();
      if (cached) return cached;
      throw error;
    }
  })());
});
