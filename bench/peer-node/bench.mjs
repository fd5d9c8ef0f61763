// The peer of bench/bench_call.c: the same read-tool call on the official MCP TypeScript SDK
// (1.x), in one process. An McpServer with one tool whose input is checked by a zod schema of
// the same shape, a Client over the SDK's InMemoryTransport (messages are handed over as
// objects, never serialized), so what is measured is the SDK's dispatch and validation.
//
//   node bench.mjs [--calls N] [--warmup N] [--json]
import { readFileSync } from 'node:fs';
import { performance } from 'node:perf_hooks';

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { InMemoryTransport } from '@modelcontextprotocol/sdk/inMemory.js';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { z } from 'zod';

const DEFAULT_CALLS = 20000;
const DEFAULT_WARMUP = 2000;
const ECHO_TOOL = 'bench.echo.read';
const ECHO_TEXT = 'hello from the benchmark'; // bench_call.c sends the same text

const INCLUDES =
  'MCP TypeScript SDK, in process: Client.callTool builds a JSON-RPC request, the ' +
  'InMemoryTransport hands it to the McpServer (no serialization), the server checks the ' +
  'request shape, finds the tool, validates the arguments with zod, runs the handler, ' +
  'validates the structured result with zod; the client checks the response shape and ' +
  'validates the structured result against the listed outputSchema (ajv). No caller ' +
  'identity, no permission or policy check, no database, no audit or telemetry row.';

function usage(to) {
  to.write(
    'usage: node bench.mjs [--calls N] [--warmup N] [--json]\n' +
      `  --calls N    timed calls per case (default ${DEFAULT_CALLS})\n` +
      `  --warmup N   untimed calls per case first (default ${DEFAULT_WARMUP})\n` +
      '  --json       print a JSON object instead of the table\n',
  );
}

function parseCount(text, min) {
  if (text === undefined || !/^[0-9]+$/.test(text)) return null;
  const v = Number(text);
  return Number.isSafeInteger(v) && v >= min ? v : null;
}

function parseArgs(argv) {
  const opts = { calls: DEFAULT_CALLS, warmup: DEFAULT_WARMUP, json: false };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === '--json') opts.json = true;
    else if (a === '--help') {
      usage(process.stdout);
      process.exit(0);
    } else if (a === '--calls' || a === '--warmup') {
      const least = a === '--calls' ? 1 : 0;
      const v = parseCount(argv[++i], least);
      if (v === null) {
        process.stderr.write(`bench.mjs: ${a} needs a whole number >= ${least}\n`);
        process.exit(2);
      }
      opts[a.slice(2)] = v;
    } else {
      process.stderr.write(`bench.mjs: bad argument: ${a}\n`);
      usage(process.stderr);
      process.exit(2);
    }
  }
  return opts;
}

function echo({ text }) {
  return { content: [{ type: 'text', text }], structuredContent: { text } };
}

async function connect() {
  const server = new McpServer({ name: 'toolgate-bench-peer', version: '0.0.0' });
  server.registerTool(
    ECHO_TOOL,
    {
      description: 'Echoes its text.',
      inputSchema: { text: z.string().max(100) },
      outputSchema: { text: z.string() },
      annotations: { readOnlyHint: true },
    },
    echo,
  );
  const client = new Client({ name: 'toolgate-bench-client', version: '0.0.0' });
  const [clientSide, serverSide] = InMemoryTransport.createLinkedPair();
  await Promise.all([server.connect(serverSide), client.connect(clientSide)]);
  // A client lists the tools before calling them; it also primes its outputSchema validators.
  const { tools } = await client.listTools();
  if (!tools.some((t) => t.name === ECHO_TOOL)) throw new Error(`${ECHO_TOOL} is not listed`);
  return { server, client };
}

async function callRead(client) {
  const res = await client.callTool({ name: ECHO_TOOL, arguments: { text: ECHO_TEXT } });
  if (res.isError || res.structuredContent?.text !== ECHO_TEXT)
    throw new Error(`${ECHO_TOOL} failed: ${JSON.stringify(res)}`);
}

async function callList(client) {
  const res = await client.listTools();
  if (res.tools.length !== 1) throw new Error(`tools/list answered ${JSON.stringify(res)}`);
}

// The handler as the SDK runs it, minus everything the SDK adds.
function callHandler() {
  const res = echo({ text: ECHO_TEXT });
  if (res.structuredContent.text !== ECHO_TEXT) throw new Error('the handler failed');
}

const CASES = [
  { key: 'read', label: 'read tool via callTool', once: callRead },
  { key: 'list', label: 'tools/list via listTools', once: callList },
  { key: 'handler', label: 'handler alone (no SDK)', once: callHandler },
];

async function runCase(c, client, calls, warmup) {
  for (let i = 0; i < warmup; i++) await c.once(client);
  const t0 = performance.now();
  for (let i = 0; i < calls; i++) await c.once(client);
  const seconds = (performance.now() - t0) / 1000;
  return {
    key: c.key,
    label: c.label,
    calls,
    seconds,
    callsPerSec: seconds > 0 ? calls / seconds : 0,
    usPerCall: (seconds * 1e6) / calls,
    instructionsPerCall: null,
    peakRssKiB: process.resourceUsage().maxRSS,
  };
}

// The package's exports map hides its package.json from import and require.
function sdkVersion() {
  const file = new URL('./node_modules/@modelcontextprotocol/sdk/package.json', import.meta.url);
  return JSON.parse(readFileSync(file, 'utf8')).version;
}

function printTable(results, opts, version) {
  const out = [];
  out.push(
    `MCP TypeScript SDK ${version} on node ${process.versions.node}: ` +
      `${opts.calls} calls per case after ${opts.warmup} warm-up calls`,
  );
  out.push(`includes: ${INCLUDES}`, '');
  const row = (cells) =>
    cells[0].padEnd(28) +
    [[cells[1], 9], [cells[2], 10], [cells[3], 12], [cells[4], 10], [cells[5], 13], [cells[6], 15]]
      .map(([v, w]) => String(v).padStart(w))
      .join('');
  out.push(row(['case', 'calls', 'seconds', 'calls/s', 'µs/call', 'instr/call', 'peak RSS (MiB)']));
  for (const r of results)
    out.push(
      row([
        r.label,
        r.calls,
        r.seconds.toFixed(3),
        r.callsPerSec.toFixed(0),
        r.usPerCall.toFixed(2),
        'n/a',
        (r.peakRssKiB / 1024).toFixed(1),
      ]),
    );
  out.push('', 'instr/call: n/a (not measured on the node side)');
  process.stdout.write(out.join('\n') + '\n');
}

async function main() {
  const opts = parseArgs(process.argv.slice(2));
  const { server, client } = await connect();
  const results = [];
  try {
    for (const c of CASES) results.push(await runCase(c, client, opts.calls, opts.warmup));
  } finally {
    await client.close();
    await server.close();
  }
  const version = sdkVersion();
  if (opts.json) {
    const doc = {
      side: 'mcp-typescript-sdk',
      version,
      node: process.versions.node,
      includes: INCLUDES,
      calls: opts.calls,
      warmup: opts.warmup,
      instructions: { available: false, unavailable: 'not measured on the node side' },
      cases: results,
    };
    process.stdout.write(JSON.stringify(doc, null, 2) + '\n');
  } else {
    printTable(results, opts, version);
  }
}

main().catch((err) => {
  process.stderr.write(`bench.mjs: ${err.stack ?? err}\n`);
  process.exit(1);
});
