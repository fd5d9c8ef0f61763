// Real MCP clients against the real binary: the official TypeScript SDK client over stdio
// and over Streamable HTTP, the MCP Inspector CLI over stdio, and 2026-07-28 tasks over
// stdio as plain JSON lines.
// Needs TG_BINARY (set by ctest or run.sh).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import {
  CallToolResultSchema, CreateMessageRequestSchema, ToolListChangedNotificationSchema,
} from '@modelcontextprotocol/sdk/types.js';

const here = dirname(fileURLToPath(import.meta.url));
const tg = process.env.TG_BINARY;
assert.ok(tg, 'TG_BINARY must name the toolgate binary');
const data = mkdtempSync(join(tmpdir(), 'tg-interop-'));
const env = { ...process.env, TOOLGATE_DATA: data };
delete env.TOOLGATE_PUBLIC_URL; // links name the server they come from (a test checks it)
let server; // the `toolgate serve` child
let url;
let token;

// Starts `toolgate serve` on a free loopback port; resolves with its URL once it listens.
function serve(args) {
  return new Promise((resolve, reject) => {
    const child = spawn(tg, ['serve', '--listen', '127.0.0.1:0', ...args], { env, stdio: ['ignore', 'ignore', 'pipe'] });
    let err = '';
    child.stderr.on('data', (chunk) => {
      err += chunk;
      const m = /listening on 127\.0\.0\.1:(\d+)/.exec(err);
      if (m) resolve({ child, url: `http://127.0.0.1:${m[1]}/mcp` });
    });
    child.on('exit', (code) => reject(new Error(`serve exited with ${code}: ${err}`)));
  });
}

before(async () => {
  execFileSync(tg, ['init', '--demo'], { env });
  token = JSON.parse(execFileSync(tg, ['token', 'create', '--agent', 'demo'], { env })).token;
  ({ child: server, url } = await serve([]));
});

// Stops a server and waits for it: stopping, it still writes to the workspace's files (its
// last commits and checkpoint), which could put a file back in a directory being removed.
async function stop(child) {
  if (!child || child.exitCode !== null || child.signalCode !== null) return;
  const stopped = new Promise((resolve) => child.once('exit', resolve));
  child.kill('SIGTERM');
  await stopped;
}

after(async () => {
  await stop(server);
  rmSync(data, { recursive: true, force: true });
});

// A tool result's text content is its structured content, as JSON.
function assertTextMirrorsStructured(result) {
  assert.equal(result.content[0].type, 'text');
  assert.deepEqual(JSON.parse(result.content[0].text), result.structuredContent);
}

// admin.agent.list called over MCP: refused with the error envelope, as a tool result.
function assertRefusedBySurface(refused) {
  assert.equal(refused.isError, true);
  const { error } = refused.structuredContent;
  assert.equal(error.code, 'permission_denied');
  assert.equal(typeof error.message, 'string');
  assert.ok(error.message.length > 0);
  assert.equal(error.details.reason, 'surface');
  assertTextMirrorsStructured(refused);
}

// The same checks over any transport: listing, a read call, a refused call.
async function exercise(transport) {
  const client = new Client({ name: 'toolgate-interop', version: '1.0.0' });
  await client.connect(transport);
  try {
    const { tools } = await client.listTools();
    const names = tools.map((t) => t.name);
    assert.ok(names.includes('agent_tool_list'), `agent_tool_list listed: ${names}`);
    assert.ok(!names.includes('admin_agent_list'), 'api-only tools are not offered on MCP');
    const listTool = tools.find((t) => t.name === 'agent_tool_list');
    assert.equal(listTool.annotations.readOnlyHint, true);
    assert.equal(listTool.outputSchema.type, 'object');

    const ok = await client.callTool({ name: 'agent_tool_list', arguments: {} });
    assert.notEqual(ok.isError, true);
    assert.ok(ok.structuredContent.tools.some((t) => t.name === 'agent_tool_list'),
      'the list tool lists itself');
    assertTextMirrorsStructured(ok);

    const refused = await client.callTool({ name: 'admin.agent.list', arguments: {} });
    assertRefusedBySurface(refused);

    // A listed tool that fails: the SDK checks structuredContent against the listed
    // outputSchema even when isError is set, so the envelope must be valid against it.
    assert.ok(tools.find((t) => t.name === 'work_task_create').outputSchema);
    const invalid = await client.callTool({ name: 'work_task_create', arguments: {} });
    assert.equal(invalid.isError, true);
    assert.equal(invalid.structuredContent.error.code, 'validation_failed');

    await assert.rejects(client.callTool({ name: 'no_such_tool', arguments: {} }), /-32602|Unknown tool/);
  } finally {
    await client.close();
  }
}

test('a pull request opened over HTTP links to the server it was opened on', async () => {
  execFileSync(tg, ['missions', 'create', '--slug', 'linked', '--title', 'Linked'], { env });
  execFileSync(tg, ['works', 'create', '--slug', 'linked-site', '--mission', 'linked'], { env });
  execFileSync(tg, ['agents', 'create', '--slug', 'opener', '--scope', 'work:linked-site',
    '--grant', 'canCommitToRepo', '--grant', 'canOpenPullRequests'], { env });
  const opener = JSON.parse(execFileSync(tg, ['token', 'create', '--agent', 'opener'], { env })).token;
  const { child, url: prUrlServer } = await serve([]); // on port 0: the one the system picked
  const { port } = new URL(prUrlServer);
  const client = new Client({ name: 'toolgate-interop', version: '1.0.0' });
  try {
    await client.connect(new StreamableHTTPClientTransport(new URL(prUrlServer),
      { requestInit: { headers: { Authorization: `Bearer ${opener}` } } }));
    const opened = await client.callTool({ name: 'repo_pr_open', arguments: {
      files: [{ path: 'about.md', content: '# About\n', mode: 'add' }],
      branchName: 'about', title: 'Add about', body: '' } });
    assert.notEqual(opened.isError, true, JSON.stringify(opened.structuredContent));
    assert.match(opened.structuredContent.prUrl, new RegExp(`^http://127\\.0\\.0\\.1:${port}/.+/pulls/1$`));
  } finally {
    await client.close();
    await stop(child);
  }
});

test('SDK client over stdio (--agent)', async () => {
  await exercise(new StdioClientTransport({ command: tg, args: ['mcp', '--agent', 'demo'], env, stderr: 'ignore' }));
});

test('SDK client over stdio (--token)', async () => {
  await exercise(new StdioClientTransport({ command: tg, args: ['mcp', '--token', token], env, stderr: 'ignore' }));
});

// The token in the server's environment, as a client configuration's "env" gives it.
test('SDK client over stdio (TOOLGATE_TOKEN)', async () => {
  await exercise(new StdioClientTransport({
    command: tg, args: ['mcp'], env: { ...env, TOOLGATE_TOKEN: token }, stderr: 'ignore',
  }));
});

// Connects client with transport as agent slug (holding tasks.assign), revokes the grant with
// the CLI, another process, once ready() resolves, and expects notifications/tools/list_changed
// while the connection is idle, then a list without the tool the grant allowed.
async function hearsOfRevocation(client, transport, slug, ready) {
  const changed = new Promise((resolve) => client.setNotificationHandler(ToolListChangedNotificationSchema, resolve));
  await client.connect(transport);
  try {
    assert.equal(client.getServerCapabilities().tools.listChanged, true);
    const names = async () => (await client.listTools()).tools.map((t) => t.name);
    assert.ok((await names()).includes('work_task_create'));
    await ready;
    execFileSync(tg, ['agents', 'revoke', slug, 'tasks.assign'], { env });
    await changed;
    assert.ok(!(await names()).includes('work_task_create'));
  } finally {
    await client.close();
  }
}

test('SDK client over stdio hears of a grant revoked by another process', async () => {
  execFileSync(tg, ['agents', 'create', '--slug', 'watcher', '--grant', 'canAssignTasks'], { env });
  const client = new Client({ name: 'toolgate-interop', version: '1.0.0' });
  await hearsOfRevocation(client, new StdioClientTransport({ command: tg, args: ['mcp', '--agent', 'watcher'], env, stderr: 'ignore' }),
    'watcher', Promise.resolve());
});

// A client declaring sampling whose user never answers; sampling resolves when it is asked.
function clientWhoNeverAnswersSampling() {
  const client = new Client({ name: 'toolgate-interop', version: '1.0.0' }, { capabilities: { sampling: {} } });
  let asked;
  const sampling = new Promise((resolve) => { asked = resolve; });
  client.setRequestHandler(CreateMessageRequestSchema, () => {
    asked();
    return new Promise(() => {});
  });
  return { client, sampling };
}

test('SDK client over stdio cancels a call waiting for sampling', async () => {
  const { client, sampling } = clientWhoNeverAnswersSampling();
  const errors = [];
  client.onerror = (e) => errors.push(e);
  await client.connect(new StdioClientTransport({
    command: tg, args: ['mcp', '--agent', 'demo', '--conformance-fixtures'], env, stderr: 'ignore',
  }));
  try {
    const abort = new AbortController();
    const call = client.callTool({ name: 'test_sampling', arguments: { prompt: 'hi' } }, undefined, { signal: abort.signal });
    await sampling;
    abort.abort('changed my mind'); // sends notifications/cancelled
    await assert.rejects(call);
    // The server serves on, in order: an answer to the cancelled call would arrive before
    // this one, and the client would report it as unknown.
    assert.ok((await client.listTools()).tools.length > 0);
    assert.deepEqual(errors, []);
  } finally {
    await client.close();
  }
});

test('SDK client over Streamable HTTP with a Bearer token', async () => {
  await exercise(new StreamableHTTPClientTransport(new URL(url), {
    requestInit: { headers: { Authorization: `Bearer ${token}` } },
  }));
});

test('SDK client over HTTP hears on its GET stream of a grant revoked by another process', async () => {
  execFileSync(tg, ['agents', 'create', '--slug', 'http-watcher', '--grant', 'canAssignTasks'], { env });
  const watcher = JSON.parse(execFileSync(tg, ['token', 'create', '--agent', 'http-watcher'], { env })).token;
  // A change is announced on the session's GET stream, which the client opens by itself
  // after initializing: the revocation waits until it is open.
  let getOpened;
  const opened = new Promise((resolve) => { getOpened = resolve; });
  const watching = async (input, init) => {
    const res = await fetch(input, init);
    if (init?.method === 'GET' && res.ok) getOpened();
    return res;
  };
  const client = new Client({ name: 'toolgate-interop', version: '1.0.0' });
  await hearsOfRevocation(client, new StreamableHTTPClientTransport(new URL(url), {
    fetch: watching, requestInit: { headers: { Authorization: `Bearer ${watcher}` } },
  }), 'http-watcher', opened);
});

test('SDK client over HTTP cancels a call waiting for sampling: the call gets no answer', async () => {
  const { child, url: fixturesUrl } = await serve(['--no-auth', '--agent', 'demo', '--conformance-fixtures']);
  // What the server sends on each tools/call stream, read to its end beside the client.
  const calls = [];
  const reading = async (input, init) => {
    const res = await fetch(input, init);
    const sent = typeof init?.body === 'string' ? JSON.parse(init.body) : undefined;
    if (sent?.method !== 'tools/call' || !res.body) return res;
    const [mine, theirs] = res.body.tee();
    calls.push({ id: sent.id, text: new Response(mine).text() });
    return new Response(theirs, { status: res.status, statusText: res.statusText, headers: res.headers });
  };
  const { client, sampling } = clientWhoNeverAnswersSampling();
  await client.connect(new StreamableHTTPClientTransport(new URL(fixturesUrl), { fetch: reading }));
  try {
    const abort = new AbortController();
    const call = client.callTool({ name: 'test_sampling', arguments: { prompt: 'hi' } }, undefined, { signal: abort.signal });
    await sampling;
    abort.abort('changed my mind'); // posts notifications/cancelled
    await assert.rejects(call);
    // The call stops waiting and its stream ends: with the request to the client, no answer.
    const [{ id, text }] = calls;
    const messages = (await text).split('\n').filter((l) => l.startsWith('data: {')).map((l) => JSON.parse(l.slice(6)));
    assert.ok(messages.some((m) => m.method === 'sampling/createMessage'));
    assert.deepEqual(messages.filter((m) => m.id === id && !m.method), []);
    assert.ok((await client.listTools()).tools.length > 0);
  } finally {
    await client.close();
    await stop(child);
  }
});

// The SDK's HTTP transport, bearing the token, with every message it receives, and a
// promise of the next ones answering ids.
function batchingTransport() {
  const transport = new StreamableHTTPClientTransport(new URL(url), {
    requestInit: { headers: { Authorization: `Bearer ${token}` } },
  });
  const received = new Map();
  const waiting = [];
  transport.onmessage = (m) => {
    received.set(m.id, m);
    for (const w of waiting.splice(0)) w();
  };
  const answers = async (...ids) => {
    while (!ids.every((id) => received.has(id))) await new Promise((resolve) => waiting.push(resolve));
    return ids.map((id) => received.get(id));
  };
  return { transport, answers };
}

async function initializeAt(transport, answers, protocolVersion) {
  await transport.send({
    jsonrpc: '2.0', id: 1, method: 'initialize',
    params: { protocolVersion, capabilities: {}, clientInfo: { name: 'toolgate-interop', version: '1.0.0' } },
  });
  const [init] = await answers(1);
  assert.equal(init.result.protocolVersion, protocolVersion);
  await transport.send({ jsonrpc: '2.0', method: 'notifications/initialized' });
}

test('the SDK\'s HTTP transport sends a batch on a 2025-03-26 session and gets each answer', { timeout: 30000 }, async () => {
  const { transport, answers } = batchingTransport();
  await transport.start();
  try {
    await initializeAt(transport, answers, '2025-03-26');
    await transport.send([
      { jsonrpc: '2.0', id: 2, method: 'tools/call', params: { name: 'agent_tool_list', arguments: {} } },
      { jsonrpc: '2.0', method: 'notifications/progress', params: { progressToken: 'x', progress: 1 } },
      { jsonrpc: '2.0', id: 3, method: 'ping' },
      { jsonrpc: '2.0', id: 4, method: 'tools/call', params: { name: 'admin.agent.list', arguments: {} } },
    ]);
    const [listed, pong, refused] = await answers(2, 3, 4);
    assert.notEqual(listed.result.isError, true);
    assert.equal(listed.result.content[0].type, 'text');
    assert.deepEqual(pong.result, {});
    assert.equal(refused.result.isError, true);
  } finally {
    await transport.close();
  }
  // 2025-06-18 took batches out: each request of one is refused, and nothing in it runs.
  const later = batchingTransport();
  await later.transport.start();
  try {
    await initializeAt(later.transport, later.answers, '2025-11-25');
    await assert.rejects(later.transport.send([{ jsonrpc: '2.0', id: 2, method: 'ping' }]),
      (e) => e.code === 400 && /"id":2/.test(e.message) && /2025-03-26/.test(e.message));
  } finally {
    await later.transport.close();
  }
});

// A 2026-07-28 server/discover over HTTP (no session needed) bearing token (none when
// undefined).
function discoverOverHttp(token) {
  const headers = {
    'Content-Type': 'application/json', Accept: 'application/json, text/event-stream',
    'MCP-Protocol-Version': '2026-07-28', 'Mcp-Method': 'server/discover',
  };
  if (token !== undefined) headers.Authorization = `Bearer ${token}`;
  const _meta = { 'io.modelcontextprotocol/protocolVersion': '2026-07-28', 'io.modelcontextprotocol/clientCapabilities': {} };
  return fetch(url, { method: 'POST', headers, body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'server/discover', params: { _meta } }) });
}

// A new token of agent demo, and its id (token list names it, newest first).
function newToken() {
  const { token: made, tokenId } = JSON.parse(execFileSync(tg, ['token', 'create', '--agent', 'demo'], { env }));
  const listed = JSON.parse(execFileSync(tg, ['token', 'list', '--agent', 'demo', '--json'], { env }));
  assert.equal(listed.tokens[0].tokenId, tokenId);
  assert.equal(listed.tokens[0].prefix, made.slice(0, 11));
  return { made, tokenId };
}

test('HTTP without a token answers 401 with WWW-Authenticate; a bad token is called invalid', async () => {
  const none = await discoverOverHttp();
  assert.equal(none.status, 401);
  assert.equal(none.headers.get('www-authenticate'), 'Bearer realm="toolgate"'); // RFC 6750 §3.1
  const bad = await discoverOverHttp('tg_nosuchtoken');
  assert.equal(bad.status, 401);
  assert.equal(bad.headers.get('www-authenticate'), 'Bearer realm="toolgate", error="invalid_token"');
});

test('a token revoked by another process is refused over HTTP at its next request', async () => {
  const { made, tokenId } = newToken();
  assert.equal((await discoverOverHttp(made)).status, 200);
  execFileSync(tg, ['token', 'revoke', tokenId], { env });
  const refused = await discoverOverHttp(made);
  assert.equal(refused.status, 401);
  assert.match(refused.headers.get('www-authenticate'), /error="invalid_token"/);
  assert.equal((await discoverOverHttp(token)).status, 200); // other tokens stand
});

test('stdio started with a token stops once the token is revoked', async () => {
  const { made, tokenId } = newToken();
  const transport = new StdioClientTransport({ command: tg, args: ['mcp', '--token', made], env, stderr: 'ignore' });
  const closed = new Promise((resolve) => { transport.onclose = resolve; });
  const client = new Client({ name: 'toolgate-interop', version: '1.0.0' });
  await client.connect(transport);
  try {
    assert.ok((await client.listTools()).tools.length > 0);
    execFileSync(tg, ['token', 'revoke', tokenId], { env });
    // The request is refused, unless the server, looking every two seconds, ended first.
    await assert.rejects(client.listTools(), /The token this server runs with was revoked|Connection closed/);
    await closed;
  } finally {
    await client.close();
  }
});

test('/healthz answers GET and HEAD only, and says so; another path names /mcp', async () => {
  const ok = await fetch(url.replace(/\/mcp$/, '/healthz'));
  assert.equal(ok.status, 200);
  assert.deepEqual(await ok.json(), { status: 'ok' });
  const head = await fetch(url.replace(/\/mcp$/, '/healthz'), { method: 'HEAD' });
  assert.equal(head.status, 200);
  assert.equal(await head.text(), '');
  const post = await fetch(url.replace(/\/mcp$/, '/healthz'), { method: 'POST' });
  assert.equal(post.status, 405);
  assert.equal(post.headers.get('allow'), 'GET, HEAD');
  const elsewhere = await fetch(url.replace(/\/mcp$/, '/'), { method: 'POST' });
  assert.equal(elsewhere.status, 404);
  assert.match((await elsewhere.json()).error.message, /MCP is served at \/mcp/);
});

test('HTTP refuses a forged Origin with 403', async () => {
  const res = await fetch(url, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', Origin: 'http://evil.example.com', Authorization: `Bearer ${token}` },
    body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'ping' }),
  });
  assert.equal(res.status, 403);
});

test('a deleted session answers 404', async () => {
  const headers = { 'Content-Type': 'application/json', Accept: 'application/json, text/event-stream', Authorization: `Bearer ${token}` };
  const init = await fetch(url, {
    method: 'POST', headers,
    body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'initialize', params: { protocolVersion: '2025-11-25', capabilities: {}, clientInfo: { name: 't', version: '1' } } }),
  });
  assert.equal(init.status, 200);
  const sid = init.headers.get('mcp-session-id');
  assert.match(sid, /^[0-9a-f]{32}$/);
  // A revision the server does not speak is refused on GET and DELETE as on POST.
  for (const method of ['GET', 'DELETE']) {
    const res = await fetch(url, { method, headers: { ...headers, 'Mcp-Session-Id': sid, 'MCP-Protocol-Version': '1999-01-01' } });
    assert.equal(res.status, 400, method);
  }
  const del = await fetch(url, { method: 'DELETE', headers: { ...headers, 'Mcp-Session-Id': sid, 'MCP-Protocol-Version': '2025-11-25' } });
  assert.equal(del.status, 200);
  const again = await fetch(url, { method: 'POST', headers: { ...headers, 'Mcp-Session-Id': sid }, body: JSON.stringify({ jsonrpc: '2.0', id: 2, method: 'ping' }) });
  assert.equal(again.status, 404);
});

test('SDK client resumes a call stream with Last-Event-ID', async () => {
  // The progress fixture streams events with ids; a second request for the same call,
  // carrying the first progress event's id as its resumption token, is a GET with Last-Event-ID
  // whose replay must bring the rest of the stream and the result.
  const { child, url: fixturesUrl } = await serve(['--no-auth', '--agent', 'demo', '--conformance-fixtures']);
  const client = new Client({ name: 'toolgate-interop', version: '1.0.0' });
  try {
    const transport = new StreamableHTTPClientTransport(new URL(fixturesUrl));
    await client.connect(transport);
    // Every message the transport delivers, to see what a replay carries.
    const delivered = [];
    const deliver = transport.onmessage;
    transport.onmessage = (message, extra) => {
      delivered.push(message);
      deliver(message, extra);
    };
    const tokens = [];
    const progress = [];
    const first = await client.callTool({ name: 'test_tool_with_progress', arguments: {} }, undefined, {
      onprogress: (p) => progress.push(p.progress),
      onresumptiontoken: (t) => tokens.push(t),
    });
    assert.deepEqual(progress, [0, 50, 100]);
    // One id per event: the priming event (no data), three progress notifications, the result.
    assert.equal(tokens.length, 5, `one id per event: ${tokens}`);
    assert.match(tokens[0], /-0$/, 'the stream begins with its priming event');
    delivered.length = 0;
    const resumed = await client.request(
      { method: 'tools/call', params: { name: 'test_tool_with_progress', arguments: {} } },
      CallToolResultSchema,
      { resumptionToken: tokens[1] },
    );
    assert.deepEqual(resumed.content, first.content);
    const replayed = delivered.filter((m) => m.method === 'notifications/progress').map((m) => m.params.progress);
    assert.deepEqual(replayed, [50, 100], 'the replay starts after the given event');
  } finally {
    await client.close();
    await stop(child);
  }
});

test('MCP Inspector CLI over stdio', () => {
  const cli = join(here, 'node_modules/@modelcontextprotocol/inspector-cli/build/index.js');
  // 1.0.3 finds its own package.json relative to the working folder, so it runs from there.
  const run = (...args) => JSON.parse(execFileSync(process.execPath, [cli, tg, 'mcp', '--agent', 'demo', ...args],
    { env, cwd: dirname(cli), stdio: ['ignore', 'pipe', 'ignore'] }));
  const newestRun = () =>
    JSON.parse(execFileSync(tg, ['runs', 'list', '--agent', 'demo', '--limit', '1', '--json'], { env })).runs[0];
  const runBefore = newestRun();
  const listed = run('--method', 'tools/list');
  assert.ok(listed.tools.some((t) => t.name === 'agent_tool_list'));
  // A client that only looks (as `claude mcp list` does) leaves no run; one that calls, one.
  assert.equal(newestRun()?.id, runBefore?.id);
  const called = run('--method', 'tools/call', '--tool-name', 'agent_tool_list');
  assert.ok(called.structuredContent.tools.some((t) => t.name === 'agent_tool_list'));
  const opened = newestRun();
  assert.notEqual(opened.id, runBefore?.id);
  assert.deepEqual([opened.trigger, opened.status, opened.calls], ['mcp', 'completed', 1]);
  assertTextMirrorsStructured(called);
  assertRefusedBySurface(run('--method', 'tools/call', '--tool-name', 'admin.agent.list'));
});

// `toolgate mcp` spoken to as newline-delimited JSON-RPC on 2026-07-28, by a client taking
// tasks (the SDK client pinned here speaks neither that revision nor the Tasks extension):
// request(method, params) resolves with the answer; heard holds notifications/tasks, and
// hear() is called at each.
function modernStdio() {
  const child = spawn(tg, ['mcp', '--agent', 'demo', '--conformance-fixtures'], { env, stdio: ['pipe', 'pipe', 'ignore'] });
  const s = {
    child,
    exited: new Promise((resolve) => child.on('exit', (code, signal) => resolve(code ?? signal))),
    heard: [],
    hear: () => {},
  };
  const waiting = new Map();
  let buffered = '';
  child.stdout.on('data', (chunk) => {
    buffered += chunk;
    for (let nl; (nl = buffered.indexOf('\n')) >= 0;) {
      const msg = JSON.parse(buffered.slice(0, nl));
      buffered = buffered.slice(nl + 1);
      if (msg.method === 'notifications/tasks') {
        s.heard.push(msg.params);
        s.hear();
      } else {
        waiting.get(msg.id)?.(msg);
      }
    }
  });
  let nextId = 0;
  const meta = {
    'io.modelcontextprotocol/protocolVersion': '2026-07-28',
    'io.modelcontextprotocol/clientCapabilities': { extensions: { 'io.modelcontextprotocol/tasks': {} } },
  };
  s.request = (method, params) => new Promise((resolve) => {
    const id = ++nextId;
    waiting.set(id, resolve);
    child.stdin.write(JSON.stringify({ jsonrpc: '2.0', id, method, params: { ...params, _meta: meta } }) + '\n');
  });
  return s;
}

test('stdio: a tool call becomes a task; the client polls it or listens to it; ending the connection cancels one running', { timeout: 60000 }, async () => {
  const s = modernStdio();
  const { request, heard } = s;
  const created = (await request('tools/call', { name: 'slow_compute', arguments: { seconds: 1, label: 'stdio' } })).result;
  assert.equal(created.resultType, 'task');
  let task;
  for (let i = 0; i < 300; i++) { // a hang guard, not a timing check
    task = (await request('tasks/get', { taskId: created.taskId })).result;
    if (task.status === 'completed') break;
    await new Promise((r) => setTimeout(r, 100));
  }
  assert.equal(task.status, 'completed');
  assert.equal(task.result.content[0].text, 'Computed stdio in 1s');
  // Or it listens: the task is told as it stands, then as it changes, to its end.
  const listened = (await request('tools/call', { name: 'slow_compute', arguments: { seconds: 600, label: 'heard' } })).result;
  assert.equal(listened.resultType, 'task');
  // (The listen request is answered only when the server ends the subscription.)
  request('subscriptions/listen', { notifications: { taskIds: [listened.taskId] } });
  const until = async (seen) => {
    while (!heard.some(seen)) await new Promise((r) => { s.hear = r; });
  };
  await until((t) => t.statusMessage?.startsWith('Computing heard: '));
  assert.equal((await request('tasks/cancel', { taskId: listened.taskId })).result.resultType, 'complete');
  await until((t) => t.status === 'cancelled');
  assert.ok(heard.every((t) => t.taskId === listened.taskId));
  assert.deepEqual([...new Set(heard.map((t) => t.status))], ['working', 'cancelled']);
  const running = (await request('tools/call', { name: 'slow_compute', arguments: { seconds: 600 } })).result;
  assert.equal(running.resultType, 'task');
  // The server cancels what still runs and waits for it, then exits cleanly.
  s.child.stdin.end();
  assert.equal(await s.exited, 0);
});

test('stdio: a task whose server was killed reads as failed from the next server', { timeout: 60000 }, async () => {
  const first = modernStdio();
  let next;
  try {
    const created = (await first.request('tools/call', { name: 'slow_compute', arguments: { seconds: 600 } })).result;
    assert.equal(created.resultType, 'task');
    first.child.kill('SIGKILL');
    assert.equal(await first.exited, 'SIGKILL');
    next = modernStdio();
    const answer = await next.request('tasks/get', { taskId: created.taskId });
    assert.equal(answer.error, undefined);
    assert.equal(answer.result.taskId, created.taskId);
    assert.equal(answer.result.status, 'failed');
    assert.equal(answer.result.createdAt, created.createdAt);
    assert.equal(answer.result.statusMessage, 'The server running the task stopped before it ended');
    assert.equal(answer.result.error.code, -32603);
  } finally {
    first.child.kill('SIGKILL'); // a failed check leaves no server behind
    next?.child.stdin.end();
  }
  assert.equal(await next.exited, 0);
});
