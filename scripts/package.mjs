#!/usr/bin/env node
// Turns wasm-pack's output in pkg/ into the package apps install: writes the final
// package.json (exports with types, the ./react subpath, sideEffects, repository, keywords,
// engines, React as an optional peer) and copies the licences and the React hooks next to the
// generated files. Run by scripts/build.sh after wasm-pack; idempotent (it starts from what
// wasm-pack wrote each time, and rewrites the same files on a second run).
//
//   node scripts/package.mjs [pkg-dir]
import { copyFileSync, existsSync, readFileSync, readdirSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";

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

for (const file of ["LICENSE-MIT", "LICENSE-APACHE"]) copyFileSync(join(root, file), join(pkg, file));
for (const file of ["react.js", "react.d.ts"]) copyFileSync(join(root, "npm", file), join(pkg, file));

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
  files: [entry, types, wasm, "react.js", "react.d.ts", "LICENSE-MIT", "LICENSE-APACHE", ...(hasSnippets ? ["snippets/"] : [])],
  // The generated module only defines things; wasm-bindgen's snippets (one folder per crate,
  // so `**`) may run code when imported.
  sideEffects: hasSnippets ? ["./snippets/**"] : false,
  peerDependencies: { react: ">=18" },
  peerDependenciesMeta: { react: { optional: true } },
};
writeFileSync(join(pkg, "package.json"), `${JSON.stringify(manifest, null, 2)}\n`);
console.log(`package.mjs: wrote ${join(pkg, "package.json")} (${manifest.name}@${manifest.version})`);
