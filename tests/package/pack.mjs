#!/usr/bin/env node
// The tarball's contents: `npm pack --dry-run --json` of pkg/ lists exactly the files an app
// needs — nothing missing (entry, wasm, types, React hooks, README, both licences, every
// wasm-bindgen snippet the entry imports), nothing extra (no tests, no .gitignore, no
// wasm-pack leftovers) — and package.json's exports point at files in the tarball.
//
//   node tests/package/pack.mjs [pkg-dir]      (after scripts/build.sh)
// Ends with a cargo-style "test result:" line that `npm test` counts.
import { execFileSync } from "node:child_process";
import { existsSync, readFileSync, readdirSync, statSync } from "node:fs";
import { join, posix, resolve, sep } from "node:path";
import assert from "node:assert/strict";

const root = resolve(new URL("../..", import.meta.url).pathname);
const pkg = resolve(process.argv[2] || join(root, "pkg"));
const results = [];
const check = (name, fn) => {
  try {
    fn();
    results.push([name, null]);
    console.log(`test package::${name} ... ok`);
  } catch (e) {
    results.push([name, e]);
    console.log(`test package::${name} ... FAILED\n${e.stack || e}`);
  }
};

const [packed] = JSON.parse(execFileSync("npm", ["pack", "--dry-run", "--json", "--ignore-scripts"], { cwd: pkg, encoding: "utf8" }));
const files = packed.files.map((f) => f.path).sort();
const manifest = JSON.parse(readFileSync(join(pkg, "package.json"), "utf8"));
const entry = readFileSync(join(pkg, "celeriant_sync.js"), "utf8");
// Every relative module the entry imports (wasm-bindgen's snippets).
const imported = [...new Set([...entry.matchAll(/(?:import|from)\s*\(?\s*['"](\.\/[^'"]+)['"]/g)].map((m) => posix.normalize(m[1])))];
// Every snippet wasm-bindgen wrote (all of them must ship, imported or not).
const snippets = existsSync(join(pkg, "snippets"))
  ? readdirSync(join(pkg, "snippets"), { recursive: true })
      .map((p) => posix.join("snippets", p.split(sep).join("/")))
      .filter((p) => statSync(join(pkg, p)).isFile())
  : [];
console.log(`${packed.filename}: ${files.length} files, ${packed.size} bytes packed, ${packed.unpackedSize} unpacked`);
for (const f of packed.files) console.log(`  ${String(f.size).padStart(8)}  ${f.path}`);

check("exact_file_list", () => {
  const expected = [
    "LICENSE-APACHE",
    "LICENSE-MIT",
    "README.md",
    "celeriant_sync.d.ts",
    "celeriant_sync.js",
    "celeriant_sync.js.map",
    "celeriant_sync_bg.wasm",
    "package.json",
    "react.d.ts",
    "react.js",
    ...new Set([...snippets, ...imported.filter((p) => p.startsWith("snippets/"))]),
  ].sort();
  assert.deepEqual(files, expected);
});

check("snippets_imported_by_the_entry_are_packed", () => {
  assert.ok(imported.length > 0, "the entry imports no snippet: has the build changed? update this test");
  for (const p of imported) assert.ok(files.includes(p), `${p} is imported by celeriant_sync.js but not packed`);
});

check("licences_match_cargo", () => {
  const cargo = readFileSync(join(root, "Cargo.toml"), "utf8");
  assert.match(cargo, /license = "MIT OR Apache-2.0"/);
  assert.equal(manifest.license, "MIT OR Apache-2.0");
  assert.match(readFileSync(join(pkg, "LICENSE-MIT"), "utf8"), /^MIT License/);
  assert.match(readFileSync(join(pkg, "LICENSE-APACHE"), "utf8"), /Apache License\s+Version 2\.0, January 2004/);
});

check("manifest_fields", () => {
  assert.equal(manifest.name, "celeriant-sync");
  assert.equal(manifest.type, "module");
  assert.deepEqual(manifest.exports["."], { types: "./celeriant_sync.d.ts", import: "./celeriant_sync.js", default: "./celeriant_sync.js" });
  assert.deepEqual(manifest.exports["./react"], { types: "./react.d.ts", import: "./react.js", default: "./react.js" });
  assert.equal(Object.keys(manifest.exports["."])[0], "types", "the types condition must come first");
  assert.deepEqual(manifest.sideEffects, ["./snippets/**"]);
  assert.equal(manifest.peerDependencies?.react, ">=18");
  assert.equal(manifest.peerDependenciesMeta?.react?.optional, true);
  assert.equal(manifest.dependencies, undefined, "the package has no runtime dependencies");
  assert.ok(manifest.repository?.url, "repository");
  assert.ok(manifest.keywords?.length > 0, "keywords");
  assert.ok(manifest.engines?.node, "engines");
});

check("exports_point_into_the_tarball", () => {
  const targets = [];
  const walk = (v) => (typeof v === "string" ? targets.push(v) : Object.values(v).forEach(walk));
  walk(manifest.exports);
  for (const t of [...targets, manifest.main, manifest.types]) {
    assert.ok(files.includes(posix.normalize(t)), `${t} is named in package.json but not packed`);
  }
});

check("react_hooks_import_only_react", () => {
  const hooks = readFileSync(join(pkg, "react.js"), "utf8");
  const specifiers = [...hooks.matchAll(/from\s*['"]([^'"]+)['"]/g)].map((m) => m[1]);
  assert.deepEqual(specifiers, ["react"]);
});

// The READMEs' app is the one `npm test` builds and runs (tests/vite-app), so it cannot drift.
const testedApp = readFileSync(join(root, "tests/vite-app/src/App.jsx"), "utf8")
  .split("\n")
  .filter((line, i) => !(i === 0 && line.startsWith("//")))
  .join("\n");
const firstBlock = (text, lang) => text.match(new RegExp("```" + lang + "\\n([\\s\\S]*?)```"))?.[1];

check("readme_react_example_is_the_tested_app", () => {
  const readme = readFileSync(join(root, "README.md"), "utf8");
  const section = readme.split("## Install and use in a Vite + React app")[1];
  assert.ok(section, "README has the section");
  const block = firstBlock(section, "jsx");
  assert.ok(block, "the section has a jsx block");
  assert.equal(block, testedApp);
});

// What `npm pack` ships as README.md is the package's own (npm/README.md), written for the app
// developer, not the repository's with its test sections; its examples are the tested ones
// (the ts block is the repository README's first example, which tests/readme runs; the jsx
// block is the Vite app), and every link works outside this repository.
check("package_readme_is_the_app_developers", () => {
  const shipped = readFileSync(join(pkg, "README.md"), "utf8");
  assert.equal(shipped, readFileSync(join(root, "npm", "README.md"), "utf8"), "pkg/README.md is npm/README.md");
  assert.doesNotMatch(shipped, /^## Testing/m, "no test sections");
  for (const heading of ["## Install", "## Use", "## Loading the module", "## React", "## Errors"]) {
    assert.match(shipped, new RegExp(`^${heading}$`, "m"), `has ${heading}`);
  }
  const repoReadme = readFileSync(join(root, "README.md"), "utf8");
  assert.equal(firstBlock(shipped, "ts"), firstBlock(repoReadme, "ts"), "its first example is the tested one");
  assert.equal(firstBlock(shipped, "jsx"), testedApp, "its React example is the tested app");
  const anchors = new Set([...shipped.matchAll(/^#+ (.+)$/gm)].map((m) => "#" + m[1].toLowerCase().replace(/[^a-z0-9 -]/g, "").replace(/ /g, "-")));
  const links = [...shipped.matchAll(/\]\(([^)\s]+)\)/g)].map((m) => m[1]);
  assert.ok(links.length > 0, "it links to the guides");
  const repoUrl = manifest.repository.url.replace(/^git\+/, "").replace(/\.git$/, "");
  for (const link of links) {
    if (link.startsWith("#")) {
      assert.ok(anchors.has(link), `${link} is not a heading of the README`);
      continue;
    }
    assert.match(link, /^https:\/\//, `${link} is relative: it breaks outside the repository`);
    const inRepo = link.startsWith(`${repoUrl}/blob/main/`) ? link.slice(`${repoUrl}/blob/main/`.length).split("#")[0] : null;
    if (inRepo !== null) assert.ok(existsSync(join(root, inRepo)), `${link} names ${inRepo}, which the repository does not have`);
  }
});

const failed = results.filter(([, e]) => e).length;
console.log(`\ntest result: ${failed ? "FAILED" : "ok"}. ${results.length - failed} passed; ${failed} failed`);
process.exit(failed ? 1 : 0);
