#!/usr/bin/env bash
# bench/run.sh BUILD_DIR: toolgate's bench_call and the MCP TypeScript SDK peer, one after the
# other on this machine, printed side by side; then, where valgrind is installed, instructions
# per call counted by callgrind. Builds nothing: `make bench` builds first.
# Raw results go to bench/out/ (ignored by git).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
calls="${BENCH_CALLS:-20000}"

if [ $# -ne 1 ]; then
  echo "usage: bench/run.sh BUILD_DIR   (or: make bench)" >&2
  exit 2
fi
if ! build="$(cd "$1" 2>/dev/null && pwd)" || [ ! -x "$build/bench_call" ]; then
  echo "bench/run.sh: error: no bench_call in '$1'; build first (make bench does)" >&2
  exit 1
fi
bench_call="$build/bench_call"
me=bench/run.sh
. "$here/peer-node.sh"

out="$here/out"
mkdir -p "$out"

echo "bench/run.sh: toolgate bench_call, $calls calls per case ..." >&2
"$bench_call" --calls "$calls" --json >"$out/toolgate.json"
echo "bench/run.sh: MCP TypeScript SDK peer, $calls calls per case ..." >&2
(cd "$peer" && "$peer_node" bench.mjs --calls "$calls" --json) >"$out/peer-node.json"

cpu="$(grep -m1 '^model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
echo "toolgate benchmark, $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
echo "machine: $(nproc) cores (nproc), CPU: ${cpu:-unknown}, $(uname -sr)"
# Other work on the machine moves the wall-clock figures (not callgrind's): show how much.
echo "load average after the timed runs (1, 5, 15 min): $(cut -d' ' -f1-3 /proc/loadavg)"
echo

# Both sides print the same JSON shape; rows are matched on each case's key.
"$peer_node" - "$out/toolgate.json" "$out/peer-node.json" <<'EOF'
const fs = require('node:fs');
const [ours, peer] = process.argv.slice(2).map((f) => JSON.parse(fs.readFileSync(f, 'utf8')));
const what = {
  read: 'read tool',
  list: 'tool list',
  handler: 'handler alone',
};
const sides = [
  ['toolgate (C)', ours],
  [`MCP TS SDK ${peer.version}, node ${peer.node}`, peer],
];
const lines = [];
for (const [name, doc] of sides) lines.push(`${name}:`, `  ${doc.includes}`);
lines.push('');
const row = (c) =>
  c[0].padEnd(15) + c[1].padEnd(40) +
  [[c[2], 8], [c[3], 9], [c[4], 11], [c[5], 10], [c[6], 12], [c[7], 15]]
    .map(([v, w]) => String(v).padStart(w))
    .join('');
lines.push(row(['case', 'side / what runs', 'calls', 'seconds', 'calls/s', 'µs/call', 'instr/call',
                'peak RSS (MiB)']));
for (const key of Object.keys(what)) {
  sides.forEach(([name, doc], i) => {
    const r = doc.cases.find((c) => c.key === key);
    if (!r) throw new Error(`${name} has no case ${key}`);
    const instr = r.instructionsPerCall === null ? 'n/a' : r.instructionsPerCall.toFixed(0);
    lines.push(row([i === 0 ? what[key] : '', `${i === 0 ? 'toolgate' : 'peer'}: ${r.label}`,
                    r.calls, r.seconds.toFixed(3), r.callsPerSec.toFixed(0), r.usPerCall.toFixed(2),
                    instr, (r.peakRssKiB / 1024).toFixed(1)]));
  });
}
lines.push('');
for (const [name, doc] of sides) {
  const us = (k) => doc.cases.find((c) => c.key === k).usPerCall;
  lines.push(`gate cost of a read call, ${name}: ${(us('read') - us('handler')).toFixed(2)} µs ` +
             '(read tool minus handler alone)');
}
lines.push(`instr/call, toolgate: ${ours.instructions.available ? 'perf_event_open, user space'
                                                               : `n/a (${ours.instructions.unavailable})`}`);
lines.push('peak RSS: the process\'s peak so far (getrusage / process.resourceUsage), ' +
           'so it only grows down the table');
process.stdout.write(lines.join('\n') + '\n');
EOF

echo
if ! command -v valgrind >/dev/null 2>&1; then
  echo "callgrind: skipped (valgrind is not installed)"
  exit 0
fi
# Two runs per case that differ only in the number of timed calls: their difference in total
# instructions, divided by the difference in calls, is the cost of one call without set-up.
small=1000
large=2000
total_of() {
  local case="$1" n="$2" file="$out/callgrind.$1.$2.out"
  if ! valgrind --tool=callgrind --callgrind-out-file="$file" \
      "$bench_call" --only "$case" --calls "$n" --warmup 100 --json \
      >/dev/null 2>"$out/callgrind.$case.$n.log"; then
    echo "bench/run.sh: error: bench_call under callgrind failed; see $out/callgrind.$case.$n.log" >&2
    exit 1
  fi
  local total
  total="$(sed -n 's/^totals: *//p' "$file")"
  if ! [[ "$total" =~ ^[0-9]+$ ]]; then
    echo "bench/run.sh: error: no 'totals:' line in $file" >&2
    exit 1
  fi
  echo "$total"
}
echo "bench/run.sh: callgrind, $small and $large calls per case ..." >&2
echo "callgrind ($(valgrind --version)): instructions per call, toolgate only," \
  "= (total at $large calls - total at $small calls) / $((large - small))"
for case in read list handler; do
  a="$(total_of "$case" "$small")"
  b="$(total_of "$case" "$large")"
  printf '  %-8s %12d\n' "$case" "$(((b - a) / (large - small)))"
done
