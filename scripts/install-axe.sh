#!/usr/bin/env bash
# axe-core, the accessibility engine the landing-page tests run inside Chromium, from the npm registry with npm
# itself, pinned by version and by the tarball's sha512 (npm checks it); cached under ~/.cache so a CI machine
# downloads it once. Prints the path of axe.min.js. Idempotent.
set -euo pipefail

version=4.14.1
integrity="sha512-FHfa+lmNjQZfJz1q8wKqIDwC6DExcHt/pkjNQb09a3NPjCKg2rhu5qb2S4r76ASyFNNtuFooJpZe37OgudVGtQ=="
cache="${XDG_CACHE_HOME:-$HOME/.cache}/wheelwright/axe-core-$version"
script="$cache/node_modules/axe-core/axe.min.js"

if [ ! -f "$script" ]; then
  command -v npm >/dev/null || { echo "ERROR: npm is missing: run scripts/install-system-deps.sh" >&2; exit 1; }
  mkdir -p "$cache"
  # A lock file pins the exact tarball (from npm's configured registry): npm refuses bytes whose digest differs.
  cat > "$cache/package.json" <<JSON
{"name": "wheelwright-test-assets", "private": true, "dependencies": {"axe-core": "$version"}}
JSON
  cat > "$cache/package-lock.json" <<JSON
{"name": "wheelwright-test-assets", "lockfileVersion": 3, "requires": true, "packages": {
  "": {"name": "wheelwright-test-assets", "dependencies": {"axe-core": "$version"}},
  "node_modules/axe-core": {"version": "$version", "integrity": "$integrity"}}}
JSON
  npm ci --prefix "$cache" --no-audit --no-fund --ignore-scripts --loglevel=error >&2
fi
echo "$script"
