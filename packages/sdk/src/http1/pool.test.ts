import { test, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { connect, createServer as createNetServer, type AddressInfo, type Server, type Socket } from 'node:net';
import { once } from 'node:events';
import { spawn } from 'node:child_process';
import { Http1Pool } from './pool.js';
import { BadAnswer } from './response-parser.js';

/** A loopback HTTP server for one test: what it answers, the connections it took, closed after the test. */
async function serve(
  t: TestContext,
  handler: (req: IncomingMessage, res: ServerResponse, body: string) => void,
  keepAliveTimeout = 65_000,
): Promise<{ port: number; connections: Socket[]; openNow: () => number }> {
  const connections: Socket[] = [];
  let open = 0;
  const server = createServer({ keepAliveTimeout }, (req, res) => {
    const parts: Buffer[] = [];
    req.on('data', (c: Buffer) => parts.push(c));
    req.on('end', () => handler(req, res, Buffer.concat(parts).toString()));
  });
  server.on('connection', (s: Socket) => {
    connections.push(s);
    open++;
    s.on('close', () => open--);
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  t.after(() => {
    server.closeAllConnections();
    server.close();
  });
  return { port: (server.address() as AddressInfo).port, connections, openNow: () => open };
}

function pool(t: TestContext, port: number, o: { maxSockets?: number; now?: () => number; sockets?: Socket[] } = {}): Http1Pool {
  const { sockets, ...rest } = o;
  const p = new Http1Pool({
    host: '127.0.0.1',
    port,
    hostHeader: `127.0.0.1:${port}`,
    ...rest,
    connect: (host, to) => {
      const sock = connect({ host, port: to });
      sockets?.push(sock);
      return sock;
    },
  });
  t.after(() => p.close());
  return p;
}

/** What `echo` answered. */
interface Echoed {
  method: string;
  url: string;
  host: string;
  auth?: string;
  body: string;
}
const echoed = (b: Buffer): Echoed => JSON.parse(b.toString()) as Echoed;

const echo = (req: IncomingMessage, res: ServerResponse, body: string): void => {
  res.setHeader('content-type', 'application/json');
  res.end(JSON.stringify({ method: req.method, url: req.url, host: req.headers.host, auth: req.headers.authorization, body }));
};

test('calls one after another go over one kept connection, each request whole as sent', async (t) => {
  const s = await serve(t, echo);
  const p = pool(t, s.port);
  for (let i = 0; i < 5; i++) {
    const a = await p.request('POST', `/v1/x?i=${i}`, { authorization: 'Bearer k' }, `{"n":${i}}`);
    assert.equal(a.status, 200);
    assert.deepEqual(echoed(a.body), { method: 'POST', url: `/v1/x?i=${i}`, host: `127.0.0.1:${s.port}`, auth: 'Bearer k', body: `{"n":${i}}` });
  }
  assert.equal(s.connections.length, 1);
});

test('a kept connection the server closed is not used again: the next call opens a new one', async (t) => {
  const s = await serve(t, echo, 60_000);
  const sockets: Socket[] = [];
  const p = pool(t, s.port, { sockets });
  await p.request('GET', '/a', {});
  // The server ends it while it idles; the client's side has seen it close before the next call.
  const closed = once(sockets[0]!, 'close');
  s.connections[0]!.destroy();
  await closed;
  const a = await p.request('GET', '/b', {});
  assert.equal(echoed(a.body).url, '/b');
  assert.equal(s.connections.length, 2);
});

test('an answer with Connection: close is the last on its connection', async (t) => {
  const s = await serve(t, (req, res) => {
    res.setHeader('connection', 'close');
    res.end('bye');
  });
  const p = pool(t, s.port);
  assert.equal((await p.request('GET', '/1', {})).body.toString(), 'bye');
  assert.equal((await p.request('GET', '/2', {})).body.toString(), 'bye');
  assert.equal(s.connections.length, 2);
});

test("the server's Keep-Alive timeout is kept to, a second short of it (injected clock)", async (t) => {
  const s = await serve(t, echo, 5_000); // Node's server says `Keep-Alive: timeout=5`
  let now = 1_000_000;
  const p = pool(t, s.port, { now: () => now });
  await p.request('GET', '/1', {});
  now += 3_900;
  await p.request('GET', '/2', {});
  assert.equal(s.connections.length, 1, 'reused within timeout − 1 s');
  now += 4_000;
  await p.request('GET', '/3', {});
  assert.equal(s.connections.length, 2, 'a new connection once it was kept timeout − 1 s');
});

test('more calls at once than connections allowed: all answered, never more connections than the limit', async (t) => {
  let peak = 0;
  const s = await serve(t, (req, res, body) => {
    peak = Math.max(peak, s.openNow());
    setImmediate(() => echo(req, res, body));
  });
  const p = pool(t, s.port, { maxSockets: 4 });
  const answers = await Promise.all(Array.from({ length: 60 }, (_, i) => p.request('POST', `/n/${i}`, {}, String(i))));
  answers.forEach((a, i) => assert.equal(echoed(a.body).body, String(i)));
  assert.ok(peak <= 4, `peak ${peak}`);
  assert.ok(s.connections.length <= 4);
});

test('an aborted call rejects at once, its connection is not used again, and the next call is answered', async (t) => {
  let holding: () => void = () => undefined;
  const holds = new Promise<void>((resolve) => (holding = resolve));
  const seen: string[] = [];
  const s = await serve(t, (req, res, body) => {
    seen.push(req.url ?? '');
    if (req.url === '/hold')
      holding(); // never answered
    else echo(req, res, body);
  });
  const p = pool(t, s.port, { maxSockets: 1 });
  const ac = new AbortController();
  const call = p.request('GET', '/hold', {}, undefined, ac.signal);
  // A second call waits for the only connection; aborted too, it leaves the queue.
  const queuedAc = new AbortController();
  const queued = p.request('GET', '/queued', {}, undefined, queuedAc.signal);
  queuedAc.abort();
  await assert.rejects(queued, { name: 'AbortError' });
  await holds;
  const serverSide = s.connections[0]!;
  const closed = once(serverSide, 'close');
  ac.abort();
  await assert.rejects(call, { name: 'AbortError' });
  await closed;
  const a = await p.request('GET', '/after', {});
  assert.equal(echoed(a.body).url, '/after');
  assert.equal(s.connections.length, 2);
  assert.deepEqual(seen, ['/hold', '/after'], 'the call aborted while it waited was never sent');
  await assert.rejects(p.request('GET', '/x', {}, undefined, AbortSignal.abort()), { name: 'AbortError' });
});

test('a malformed answer or a refused connection rejects; the pool goes on with a new connection', async (t) => {
  let n = 0;
  const accepted: Socket[] = [];
  const raw: Server = createNetServer((sock) => {
    accepted.push(sock);
    sock.once('data', () => sock.write(n++ === 0 ? 'HTTP/1.1 2OO OK\r\nContent-Length: 2\r\n\r\nok' : 'HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok'));
  });
  raw.listen(0, '127.0.0.1');
  await once(raw, 'listening');
  t.after(() => raw.listening && raw.close());
  const p = pool(t, (raw.address() as AddressInfo).port);
  await assert.rejects(p.request('GET', '/', {}), BadAnswer);
  assert.equal((await p.request('GET', '/', {})).body.toString(), 'ok');

  const closedPort = (raw.address() as AddressInfo).port;
  for (const sock of accepted) sock.destroy();
  raw.close();
  await once(raw, 'close');
  await assert.rejects(pool(t, closedPort).request('GET', '/', {}), { code: 'ECONNREFUSED' });
});

/** A server that names a Keep-Alive timeout and never closes a connection itself; closed after the test. */
async function neverCloses(t: TestContext, keepAlive: string): Promise<number> {
  const accepted: Socket[] = [];
  const raw = createNetServer((sock) => {
    accepted.push(sock);
    sock.on('data', () => sock.write(`HTTP/1.1 200 OK\r\nKeep-Alive: ${keepAlive}\r\nContent-Length: 2\r\n\r\nok`));
  });
  raw.listen(0, '127.0.0.1');
  await once(raw, 'listening');
  t.after(() => {
    for (const sock of accepted) sock.destroy();
    raw.close();
  });
  return (raw.address() as AddressInfo).port;
}

test('idle connections past their keep time are closed by the client, though the server keeps them', async (t) => {
  const port = await neverCloses(t, 'timeout=1'); // kept 0 s: swept at once
  const sockets: Socket[] = [];
  const p = pool(t, port, { sockets });
  assert.equal((await p.request('GET', '/1', {})).body.toString(), 'ok');
  await once(sockets[0]!, 'close');
});

test('an idle kept connection does not hold the process open', async (t) => {
  const port = await neverCloses(t, 'timeout=600');
  const script = `import { Http1Pool } from ${JSON.stringify(new URL('./pool.js', import.meta.url).href)};
const p = new Http1Pool({ host: '127.0.0.1', port: ${port}, hostHeader: 'h' });
process.stdout.write((await p.request('GET', '/', {})).body.toString());`;
  const child = spawn(process.execPath, ['--input-type=module', '-e', script], { stdio: ['ignore', 'pipe', 'inherit'] });
  t.after(() => child.kill('SIGKILL'));
  let out = '';
  child.stdout.on('data', (d: Buffer) => (out += d.toString()));
  const [code] = (await once(child, 'exit')) as [number | null];
  assert.equal(code, 0);
  assert.equal(out, 'ok');
});

test('a connect that throws rejects its call and leaves the pool usable', async (t) => {
  const s = await serve(t, echo);
  let refuse = true;
  const p = new Http1Pool({
    host: '127.0.0.1',
    port: s.port,
    hostHeader: 'h',
    maxSockets: 1,
    connect: (host, port) => {
      if (refuse) throw new Error('no sockets left');
      return connect({ host, port });
    },
  });
  t.after(() => p.close());
  await assert.rejects(p.request('GET', '/', {}), /no sockets left/);
  refuse = false;
  assert.equal(echoed((await p.request('GET', '/ok', {})).body).url, '/ok', 'the failed connect did not use up the one socket allowed');
});

test('a header that would split the request rejects before anything is sent', async (t) => {
  const s = await serve(t, echo);
  const sockets: Socket[] = [];
  const p = pool(t, s.port, { sockets });
  await assert.rejects(p.request('GET', '/', { authorization: 'Bearer k\r\nX-Admin: 1' }), TypeError);
  assert.equal(sockets.length, 0, 'no connection was opened');
});
