// The peer of `toolgate serve` for bench/http.sh: an MCP server over Streamable HTTP built with
// the official TypeScript SDK, exposing the same read tool the load runs against toolgate
// (test_simple_text, which answers one fixed text block). Sessions as in the SDK's own
// stateful example: one McpServer and transport per initialize, found by Mcp-Session-Id.
// JSON responses (enableJsonResponse) rather than SSE: the cheaper of the SDK's two answers.
//
//   node http-server.mjs [--port N]     (listens on 127.0.0.1; port 0 picks a free one)
import { randomUUID } from 'node:crypto';
import { createServer } from 'node:http';

import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { isInitializeRequest } from '@modelcontextprotocol/sdk/types.js';

const MAX_BODY = 4 * 1024 * 1024; // toolgate's limit on one message

const portArg = process.argv.indexOf('--port');
const port = portArg > 0 ? Number(process.argv[portArg + 1]) : 0;
if (!Number.isInteger(port) || port < 0 || port > 65535) {
  process.stderr.write('usage: node http-server.mjs [--port N]\n');
  process.exit(2);
}

function newServer() {
  const server = new McpServer({ name: 'peer-node', version: '1.0.0' });
  server.registerTool(
    'test_simple_text',
    { description: 'Returns one text block.', annotations: { readOnlyHint: true } },
    async () => ({ content: [{ type: 'text', text: 'This is a simple text response for testing.' }] }),
  );
  return server;
}

const transports = new Map(); // session id -> transport

function readBody(req) {
  return new Promise((resolve, reject) => {
    const chunks = [];
    let size = 0;
    req.on('data', (chunk) => {
      size += chunk.length;
      if (size > MAX_BODY) reject(new Error('body too large'));
      else chunks.push(chunk);
    });
    req.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
    req.on('error', reject);
  });
}

function fail(res, status, message) {
  res.writeHead(status, { 'Content-Type': 'application/json' });
  res.end(JSON.stringify({ jsonrpc: '2.0', error: { code: -32000, message }, id: null }));
}

const http = createServer(async (req, res) => {
  try {
    if (req.url !== '/mcp') return fail(res, 404, 'Not found');
    const sid = req.headers['mcp-session-id'];
    let body;
    if (req.method === 'POST') body = JSON.parse(await readBody(req));
    let transport = sid ? transports.get(sid) : undefined;
    if (!transport) {
      if (sid || req.method !== 'POST' || !isInitializeRequest(body)) return fail(res, sid ? 404 : 400, 'No valid session');
      transport = new StreamableHTTPServerTransport({
        sessionIdGenerator: () => randomUUID(),
        enableJsonResponse: true,
        onsessioninitialized: (id) => transports.set(id, transport),
      });
      transport.onclose = () => transport.sessionId && transports.delete(transport.sessionId);
      await newServer().connect(transport);
    }
    await transport.handleRequest(req, res, body);
  } catch (err) {
    if (!res.headersSent) fail(res, 400, String(err.message ?? err));
  }
});

http.listen(port, '127.0.0.1', () => {
  process.stderr.write(`peer-node: listening on 127.0.0.1:${http.address().port}\n`);
});
process.on('SIGTERM', () => http.close(() => process.exit(0)));
