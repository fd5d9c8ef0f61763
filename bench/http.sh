#!/usr/bin/env bash
# bench/http.sh BUILD_DIR: Streamable HTTP under load, toolgate next to a server built with the
# official MCP TypeScript SDK (bench/peer-node/http-server.mjs), in one run on this machine.
# Both listen on free loopback ports and expose the same read tool (test_simple_text; toolgate
# serves it with --conformance-fixtures, through its full gate and audit path). After an
# untimed second of each load against each side (the peer's JIT), four loads, each
# at 1, 8 and 64 connections for BENCH_SECONDS (default 5) against each side, on 2025-11-25
# sessions: tools/call only (the same tool and answer on both sides), then tools/list only
# (not the same list: the table says how many tools each side lists), then ping (no tool and no
# database: what the transport and the JSON-RPC layer cost each side), then ping on a new
# connection each (what accepting one costs each side). The same loads go to a third server,
# the floor (bench_http_floor): fixed answers and no other work, the most any server can show
# beside this generator on this machine. Then it prints the three sides, each server's CPU
# time per request (from /proc, over the run), the ratios to the SDK (none when a side had
# errors), idle RSS (after start, before load), peak RSS (VmHWM) and RSS 13 s after the load,
# and stops the servers by PID.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
seconds="${BENCH_SECONDS:-5}"
if [ $# -ne 1 ]; then
  echo "usage: bench/http.sh BUILD_DIR   (or: make bench)" >&2
  exit 2
fi
if ! build="$(cd "$1" 2>/dev/null && pwd)" || [ ! -x "$build/bench_http_load" ] ||
  [ ! -x "$build/bench_http_floor" ] || [ ! -x "$build/toolgate" ]; then
  echo "bench/http.sh: error: no toolgate, bench_http_load or bench_http_floor in '$1';" \
    "build first (make bench does)" >&2
  exit 1
fi
me=bench/http.sh
. "$here/peer-node.sh"

work="$(mktemp -d)"
tg_pid=""
peer_pid=""
floor_pid=""
stop() {
  for pid in $tg_pid $peer_pid $floor_pid; do
    kill -TERM "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  rm -rf "$work"
}
trap stop EXIT

# port LOG PID: the port a server logged as "listening on 127.0.0.1:PORT".
port() {
  local p=""
  for _ in $(seq 100); do
    p="$(grep -o 'listening on 127\.0\.0\.1:[0-9]*' "$1" | cut -d: -f2 || true)"
    [ -n "$p" ] && { echo "$p"; return; }
    kill -0 "$2" 2>/dev/null || break
    sleep 0.1
  done
  echo "bench/http.sh: a server did not start:" >&2
  cat "$1" >&2
  exit 1
}
rss() { awk -v k="$2:" '$1 == k { print $2 }' "/proc/$1/status"; } # kB
ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; } # user + system CPU, in clock ticks
hz="$(getconf CLK_TCK)"

export TOOLGATE_DATA="$work/ws"
"$build/toolgate" init --demo >/dev/null
# The peer limits no caller: toolgate's limit is set past what the load reaches (one caller,
# every call), so that it still counts each call but refuses none.
"$build/toolgate" serve --listen 127.0.0.1:0 --no-auth --agent demo --conformance-fixtures \
  --rate-limit 1000000000/1 2>"$work/tg.log" &
tg_pid=$!
(cd "$peer" && exec "$peer_node" http-server.mjs --port 0) 2>"$work/peer.log" &
peer_pid=$!
"$build/bench_http_floor" 2>"$work/floor.log" &
floor_pid=$!
tg_url="http://127.0.0.1:$(port "$work/tg.log" "$tg_pid")/mcp"
peer_url="http://127.0.0.1:$(port "$work/peer.log" "$peer_pid")/mcp"
floor_url="http://127.0.0.1:$(port "$work/floor.log" "$floor_pid")/mcp"
sleep 1
tg_idle="$(rss "$tg_pid" VmRSS)"
peer_idle="$(rss "$peer_pid" VmRSS)"

# The loads: tools/call, tools/list, ping, and ping on a new connection each (fresh).
loads="call list ping fresh"
load_args() { if [ "$1" = fresh ]; then echo "--mix ping --fresh"; else echo "--mix $1"; fi; }

# Untimed first: the peer's JIT compiles its hot paths in the first seconds of load (the floor
# has nothing to warm).
for url in "$tg_url" "$peer_url"; do
  for mix in $loads; do
    # shellcheck disable=SC2046 # the load's options, split on purpose
    "$build/bench_http_load" --url "$url" --connections 8 --duration 1 $(load_args "$mix") >/dev/null 2>&1 || true
  done
done

declare -A res cpu_per
for mix in $loads; do
  for c in 1 8 64; do
    for side in tg peer floor; do
      url="$tg_url" pid="$tg_pid"
      [ "$side" = peer ] && url="$peer_url" pid="$peer_pid"
      [ "$side" = floor ] && url="$floor_url" pid="$floor_pid"
      echo "bench/http.sh: $side, $mix, $c connections, ${seconds}s ..." >&2
      before="$(ticks "$pid")"
      # shellcheck disable=SC2046
      res[$side.$mix.$c]="$("$build/bench_http_load" --url "$url" --connections "$c" --duration "$seconds" $(load_args "$mix") || true)"
      # The server's CPU per request: what it costs, whatever the generator's share of the cores.
      cpu_per[$side.$mix.$c]="$(awk -v d="$(($(ticks "$pid") - before))" -v hz="$hz" \
        -v n="$(sed -n 's/.*\brequests=\([0-9]*\).*/\1/p' <<<"${res[$side.$mix.$c]}")" \
        'BEGIN { if (n > 0) printf "%.0f", d * 1e6 / hz / n; else print "-" }')"
    done
  done
done
tg_peak="$(rss "$tg_pid" VmHWM)"
peer_peak="$(rss "$peer_pid" VmHWM)"
# Resting: toolgate closes what a burst of clients left, and gives its memory back, after 10 s
# without a request (TG_HTTP_REST_AFTER_MS) and its next sweep (2 s).
rest_s=13
echo "bench/http.sh: the servers quiet for ${rest_s}s ..." >&2
sleep "$rest_s"
tg_rested="$(rss "$tg_pid" VmRSS)"
peer_rested="$(rss "$peer_pid" VmRSS)"

field() { sed -n "s/.*\b$2=\([^ ]*\).*/\1/p" <<<"$1"; }
# ratio A B: A's rate over B's; none when either failed requests (its rate is not the same work).
ratio() {
  awk -v a="$(field "$1" rps)" -v b="$(field "$2" rps)" \
    -v e="$(field "$1" errors)$(field "$2" errors)" \
    'BEGIN { if (b > 0 && e == "00") printf "%.2fx", a / b; else print "n/a" }'
}
cell() { printf '%7s  %s/%s/%s  %s  %s' "$(field "$1" rps)" "$(field "$1" p50_ms)" "$(field "$1" p90_ms)" "$(field "$1" p99_ms)" "$(field "$1" errors)" "$2"; }
cpu="$(grep -m1 '^model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
echo "toolgate Streamable HTTP benchmark, $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
echo "machine: $(nproc) cores, CPU: ${cpu:-unknown}, $(uname -sr); load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "peer: @modelcontextprotocol/sdk $("$peer_node" -p "require('$peer/node_modules/@modelcontextprotocol/sdk/package.json').version"), node $("$peer_node" --version)"
echo "load: bench_http_load, 2025-11-25 sessions (ended with DELETE), ${seconds}s per run" \
  "after a 1s warm-up of each load (but the floor's); cpu: the server's CPU time per request," \
  "in microseconds"
for mix in $loads; do
  echo
  if [ "$mix" = fresh ]; then
    echo "ping, each on a new connection (Connection: close): what accepting a connection costs"
  elif [ "$mix" = call ]; then
    echo "tools/call test_simple_text (toolgate: gated and audited, every call's rows committed before its answer)"
  elif [ "$mix" = ping ]; then
    echo "ping (no tool, no database: the transport and the JSON-RPC layer alone)"
  else
    echo "tools/list (toolgate lists $(field "${res[tg.list.1]}" listed_tools) tools with their" \
      "schemas, the TS SDK peer $(field "${res[peer.list.1]}" listed_tools)," \
      "the floor $(field "${res[floor.list.1]}" listed_tools))"
  fi
  row='%-5s | %-46s | %-46s | %-12s | %-46s | %s\n'
  # shellcheck disable=SC2059 # the row's format, kept in one place
  printf "$row" conns "toolgate  req/s  p50/p90/p99 ms  errors  cpu" \
    "TS SDK  req/s  p50/p90/p99 ms  errors  cpu" "toolgate/SDK" \
    "floor  req/s  p50/p90/p99 ms  errors  cpu" "floor/SDK"
  for c in 1 8 64; do
    t="${res[tg.$mix.$c]}"
    p="${res[peer.$mix.$c]}"
    f="${res[floor.$mix.$c]}"
    # shellcheck disable=SC2059
    printf "$row" "$c" "$(cell "$t" "${cpu_per[tg.$mix.$c]}")" \
      "$(cell "$p" "${cpu_per[peer.$mix.$c]}")" "$(ratio "$t" "$p")" \
      "$(cell "$f" "${cpu_per[floor.$mix.$c]}")" "$(ratio "$f" "$p")"
  done
done
echo
twenty_x="$(awk -v b="$(field "${res[peer.call.64]}" rps)" 'BEGIN { printf "%.0f", 20 * b }')"
echo "20x the TS SDK's tools/call at 64 connections: $twenty_x req/s;" \
  "the floor's: $(field "${res[floor.call.64]}" rps) req/s"
echo
mib() { awk -v k="$1" 'BEGIN{print k/1024}'; }
printf 'RSS (MiB)  idle: toolgate %.1f, TS SDK %.1f;  peak (VmHWM): toolgate %.1f, TS SDK %.1f;  ' \
  "$(mib "$tg_idle")" "$(mib "$peer_idle")" "$(mib "$tg_peak")" "$(mib "$peer_peak")"
printf '%s s after the load: toolgate %.1f, TS SDK %.1f\n' "$rest_s" \
  "$(mib "$tg_rested")" "$(mib "$peer_rested")"
