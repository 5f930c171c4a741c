#!/usr/bin/env node
// Turns wasm-pack's output in pkg/ into the package apps install: writes the final
// package.json (exports with types, the ./react subpath, sideEffects, repository, keywords,
// engines, React as an optional peer), copies the licences and the React hooks next to the
// generated files, strips the module's debugging-only sections, and minifies the JavaScript
// (with source maps). Run by scripts/build.sh after wasm-pack; idempotent (it starts from what
// wasm-pack wrote each time, and leaves files it has already minified as they are).
//
//   node scripts/package.mjs [pkg-dir]
import { copyFileSync, existsSync, readFileSync, readdirSync, writeFileSync } from "node:fs";
import { basename, join, resolve } from "node:path";
import { minify } from "terser";

const root = resolve(new URL("..", import.meta.url).pathname);
const pkg = resolve(process.argv[2] || join(root, "pkg"));
const generated = JSON.parse(readFileSync(join(pkg, "package.json"), "utf8"));
const bare = (file) => file.replace(/^\.\//, "");
const entry = bare(generated.main || generated.module || "celeriant_sync.js");
const types = bare(generated.types || entry.replace(/\.js$/, ".d.ts"));
const wasm = entry.replace(/\.js$/, "_bg.wasm");
for (const file of [entry, types, wasm]) {
  if (!existsSync(join(pkg, file))) throw new Error(`${pkg} has no ${file}: run wasm-pack first`);
}

// The module's `name` and `producers` custom sections: function names for stack traces (the
// Rust symbols are stripped already; what is left names wasm-bindgen's imports) and the
// toolchain's versions. Nothing reads them at run time; they cost ≈ 1 KB gzipped
// (docs/benchmarks.md). Every other section is copied byte for byte.
function stripCustomSections(file, names) {
  const bytes = readFileSync(file);
  const leb = (at) => {
    let value = 0, shift = 0, b;
    do {
      b = bytes[at++];
      value += (b & 0x7f) * 2 ** shift;
      shift += 7;
    } while (b & 0x80);
    return [value, at];
  };
  const kept = [bytes.subarray(0, 8)];
  let at = 8, dropped = 0;
  while (at < bytes.length) {
    const start = at;
    const [size, body] = leb(at + 1);
    at = body + size;
    if (bytes[start] === 0) {
      const [length, name] = leb(body);
      if (names.includes(bytes.subarray(name, name + length).toString())) {
        dropped += at - start;
        continue;
      }
    }
    kept.push(bytes.subarray(start, at));
  }
  if (dropped > 0) writeFileSync(file, Buffer.concat(kept));
  return dropped;
}
const stripped = stripCustomSections(join(pkg, wasm), ["name", "producers"]);

// The JavaScript the page loads — wasm-bindgen's glue and its snippets (`src/browser/glue.js`)
// — minified: 12.3 → 7.7 KB gzipped (docs/benchmarks.md, "Size"). Each file keeps a source map
// beside it with the original text, for devtools and stack traces. Top-level names are mangled
// (`module`), exported ones kept; class names are kept (`SyncClient` in the console). A file
// that already names its map was minified by an earlier run and is left alone.
async function minifyInPlace(file) {
  const code = readFileSync(file, "utf8");
  if (code.includes("//# sourceMappingURL=")) return 0;
  const name = basename(file);
  // The map's source gets its own name, so devtools do not show two files as one.
  const out = await minify(
    { [name.replace(/\.js$/, ".src.js")]: code },
    {
      module: true,
      ecma: 2020,
      compress: { passes: 2 },
      mangle: true,
      keep_classnames: true,
      // wasm-bindgen's `@ts-self-types` pointer (Deno, JSR and URL imports find the types with
      // it) and bundlers' purity annotations stay; every other comment goes.
      format: { comments: /@ts-self-types|[@#]__PURE__/ },
      sourceMap: { filename: name, url: `${name}.map`, includeSources: true },
    },
  );
  writeFileSync(file, out.code);
  writeFileSync(`${file}.map`, out.map);
  return code.length - out.code.length;
}
const scripts = [join(pkg, entry)];
if (existsSync(join(pkg, "snippets"))) {
  for (const f of readdirSync(join(pkg, "snippets"), { recursive: true })) {
    if (String(f).endsWith(".js")) scripts.push(join(pkg, "snippets", String(f)));
  }
}
let minified = 0;
for (const file of scripts) minified += await minifyInPlace(file);

for (const file of ["LICENSE-MIT", "LICENSE-APACHE"]) copyFileSync(join(root, file), join(pkg, file));
for (const file of ["react.js", "react.d.ts"]) copyFileSync(join(root, "npm", file), join(pkg, file));
// The package's own README, written for the app developer (install, loading, use, React,
// errors; links absolute), over the repository's README that wasm-pack copied.
copyFileSync(join(root, "npm", "README.md"), join(pkg, "README.md"));

const hasSnippets = existsSync(join(pkg, "snippets")) && readdirSync(join(pkg, "snippets")).length > 0;
const manifest = {
  name: generated.name,
  version: generated.version,
  description: generated.description,
  license: generated.license,
  type: "module",
  repository: { type: "git", url: "git+https://github.com/celeriant/celeriant-sync.git" },
  keywords: ["celeriant", "event-sourcing", "event-store", "offline-first", "outbox", "sync", "indexeddb", "wasm", "webassembly", "react"],
  engines: { node: ">=18" },
  main: `./${entry}`,
  module: `./${entry}`,
  types: `./${types}`,
  exports: {
    ".": { types: `./${types}`, import: `./${entry}`, default: `./${entry}` },
    "./react": { types: "./react.d.ts", import: "./react.js", default: "./react.js" },
    [`./${wasm}`]: `./${wasm}`,
    "./package.json": "./package.json",
  },
  files: [entry, `${entry}.map`, types, wasm, "react.js", "react.d.ts", "LICENSE-MIT", "LICENSE-APACHE", ...(hasSnippets ? ["snippets/"] : [])],
  // The generated module only defines things; wasm-bindgen's snippets (one folder per crate,
  // so `**`) may run code when imported.
  sideEffects: hasSnippets ? ["./snippets/**"] : false,
  peerDependencies: { react: ">=18" },
  peerDependenciesMeta: { react: { optional: true } },
};
writeFileSync(join(pkg, "package.json"), `${JSON.stringify(manifest, null, 2)}\n`);
console.log(`package.mjs: wrote ${join(pkg, "package.json")} (${manifest.name}@${manifest.version}); ${stripped} bytes of debugging sections stripped from ${wasm}; ${minified} bytes minified away from ${scripts.length} scripts`);
