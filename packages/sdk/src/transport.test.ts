import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, type IncomingMessage } from 'node:http';
import { createServer as createHttpsServer } from 'node:https';
import { createServer as createNetServer, type AddressInfo } from 'node:net';
import { once } from 'node:events';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ROUTES, WarrenError, serializeError } from '@warren/api';
import { Transport, type FetchLike } from './transport.js';
import { LOCALHOST_CERT, LOCALHOST_KEY, OTHER_LOCALHOST_CERT, OTHER_LOCALHOST_KEY } from './http1/localhost-cert.fixture.js';

/** A transport whose every request is recorded (method and URL) and answered `{}`. */
function recording(): { t: Transport; seen: string[] } {
  const seen: string[] = [];
  const fetch: FetchLike = async (url, init) => {
    seen.push(`${init?.method ?? 'GET'} ${url}`);
    return new Response('{}', { status: 200 });
  };
  return { t: new Transport({ url: 'http://w', apiKey: 'k', fetch }), seen };
}

test('a call takes its route path parameters and its query as the contract types them', async () => {
  const { t, seen } = recording();
  await t.json(ROUTES.getSandbox, { id: 'a/b' });
  await t.json(ROUTES.listSandboxes, {}, { query: { label: ['a=1', 'b=2'], limit: 5 } });
  await t.json(ROUTES.info);
  await t.empty(ROUTES.commandStdin, { id: 'sb', commandId: 'c' }, { body: 'x', query: { eof: '1' } });
  await t.empty(ROUTES.deleteFile, { id: 'sb' }, { query: { path: '/tmp/x y', recursive: '1' } });
  assert.deepEqual(seen, [
    'GET http://w/v1/sandboxes/a%2Fb',
    'GET http://w/v1/sandboxes?label=a%3D1&label=b%3D2&limit=5',
    'GET http://w/v1/info',
    'POST http://w/v1/sandboxes/sb/commands/c/stdin?eof=1',
    'DELETE http://w/v1/sandboxes/sb/files?path=%2Ftmp%2Fx+y&recursive=1',
  ]);
});

test("over plain HTTP: the base URL's path before every route, the key, JSON, bytes whole, the server's errors as its WarrenErrors", async (t) => {
  const big = Buffer.alloc(300_000, 7);
  const seen: Array<{ url: string; host: string; auth: string; accept: string }> = [];
  const server = createServer((req: IncomingMessage, res) => {
    seen.push({ url: req.url ?? '', host: req.headers.host ?? '', auth: req.headers.authorization ?? '', accept: req.headers.accept ?? '' });
    if (req.url?.startsWith('/prefix/v1/sandboxes/sb/files')) return res.end(req.url.endsWith('big') ? big : Buffer.from([0, 255, 10, 13]));
    if (req.url === '/prefix/v1/sandboxes/gone') {
      const e = serializeError(new WarrenError('not_found', 'no sandbox gone'));
      res.writeHead(e.status, { 'content-type': 'application/json' });
      return res.end(JSON.stringify(e.body));
    }
    res.setHeader('content-type', 'application/json');
    res.end('{"version":"x"}');
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  t.after(() => {
    server.closeAllConnections();
    server.close();
  });
  const port = (server.address() as AddressInfo).port;
  const tr = new Transport({ url: `http://127.0.0.1:${port}/prefix/`, apiKey: 'k' });
  assert.deepEqual(await tr.json(ROUTES.info), { version: 'x' });
  const small = await tr.bytes(ROUTES.readFile, { id: 'sb' }, { query: { path: '/b' } });
  assert.deepEqual([...small], [0, 255, 10, 13]);
  // The bytes view their own memory alone: never the answer's head or other buffers beside them.
  assert.equal(small.buffer.byteLength, 4);
  const large = await tr.bytes(ROUTES.readFile, { id: 'sb' }, { query: { path: '/big' } });
  assert.equal(large.buffer.byteLength, big.length);
  assert.ok(Buffer.from(large).equals(big));
  await assert.rejects(
    tr.json(ROUTES.getSandbox, { id: 'gone' }),
    (e: unknown) => e instanceof WarrenError && e.code === 'not_found' && e.message === 'no sandbox gone',
  );
  assert.deepEqual(seen[0], { url: '/prefix/v1/info', host: `127.0.0.1:${port}`, auth: 'Bearer k', accept: 'application/json' });
  assert.equal(seen[1]?.url, '/prefix/v1/sandboxes/sb/files?path=%2Fb');
  assert.equal(seen[2]?.url, '/prefix/v1/sandboxes/sb/files?path=%2Fbig');
});

test('over HTTPS with `ca`: answers read whole and streamed answers both reach a server whose certificate only `ca` vouches for; without it, unavailable', async (t) => {
  const paths: string[] = [];
  const server = createHttpsServer({ key: LOCALHOST_KEY, cert: LOCALHOST_CERT }, (req, res) => {
    paths.push(req.url ?? '');
    res.setHeader('content-type', 'application/json');
    res.end('{"version":"tls"}');
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  t.after(() => {
    server.closeAllConnections();
    server.close();
  });
  const url = `https://localhost:${(server.address() as AddressInfo).port}/p`;
  const tr = new Transport({ url, apiKey: 'k', ca: LOCALHOST_CERT });
  assert.deepEqual(await tr.json(ROUTES.info), { version: 'tls' });
  // A call whose answer is read as it comes goes through Node's client, with the same trust.
  const res = await tr.request(ROUTES.info);
  assert.equal(await res.text(), '{"version":"tls"}');
  assert.deepEqual(paths, ['/p/v1/info', '/p/v1/info']);
  const unavailable = (e: unknown): boolean => e instanceof WarrenError && e.code === 'unavailable';
  await assert.rejects(new Transport({ url, apiKey: 'k' }).json(ROUTES.info), unavailable);
  await assert.rejects(new Transport({ url, apiKey: 'k' }).request(ROUTES.info), unavailable);
  assert.equal(paths.length, 2);
});

test('`ca` adds to the CAs trusted by default (NODE_EXTRA_CA_CERTS among them), it does not replace them', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'warren-sdk-ca-'));
  const before = process.env.NODE_EXTRA_CA_CERTS;
  t.after(() => {
    if (before === undefined) delete process.env.NODE_EXTRA_CA_CERTS;
    else process.env.NODE_EXTRA_CA_CERTS = before;
    rmSync(dir, { recursive: true, force: true });
  });
  writeFileSync(join(dir, 'extra.pem'), OTHER_LOCALHOST_CERT);
  process.env.NODE_EXTRA_CA_CERTS = join(dir, 'extra.pem');
  const urls: string[] = [];
  for (const [key, cert] of [
    [LOCALHOST_KEY, LOCALHOST_CERT],
    [OTHER_LOCALHOST_KEY, OTHER_LOCALHOST_CERT],
  ] as const) {
    const server = createHttpsServer({ key, cert }, (_req, res) => res.end('{"version":"tls"}'));
    server.listen(0, '127.0.0.1');
    await once(server, 'listening');
    t.after(() => {
      server.closeAllConnections();
      server.close();
    });
    urls.push(`https://localhost:${(server.address() as AddressInfo).port}`);
  }
  for (const url of urls) {
    const tr = new Transport({ url, apiKey: 'k', ca: LOCALHOST_CERT });
    assert.deepEqual(await tr.json(ROUTES.info), { version: 'tls' }, url);
    assert.equal(await (await tr.request(ROUTES.info)).text(), '{"version":"tls"}', url);
  }
});

test('a malformed answer, a refused connection and a base that is no URL are each unavailable, not a crash', async (t) => {
  const raw = createNetServer((sock) => sock.once('data', () => sock.end('HTTP/1.1 2OO OK\r\n\r\n')));
  raw.listen(0, '127.0.0.1');
  await once(raw, 'listening');
  t.after(() => raw.close());
  const port = (raw.address() as AddressInfo).port;
  const unavailable = (e: unknown): boolean => e instanceof WarrenError && e.code === 'unavailable';
  await assert.rejects(new Transport({ url: `http://127.0.0.1:${port}`, apiKey: 'k' }).json(ROUTES.info), unavailable);
  await assert.rejects(new Transport({ url: 'http://127.0.0.1:1', apiKey: 'k' }).json(ROUTES.info), unavailable);
  const noUrl = new Transport({ url: '127.0.0.1:7070', apiKey: 'k' });
  await assert.rejects(noUrl.json(ROUTES.info), unavailable);
});

// Compile-time checks (tsc -b type-checks the tests): each `@ts-expect-error` asserts that the call
// it marks does not compile, and tsc fails if it does. It does not silence a type. The calls are
// never made (the function is not called): what they would send does not matter.
export async function wrongCallsDoNotCompile(t: Transport): Promise<void> {
  // @ts-expect-error -- getSandbox needs its id
  await t.json(ROUTES.getSandbox);
  // @ts-expect-error -- the parameter is `id`, not `sid`
  await t.json(ROUTES.getSandbox, { sid: 'x' });
  // @ts-expect-error -- commandOutput needs commandId as well as id
  await t.request(ROUTES.commandOutput, { id: 'x' });
  // @ts-expect-error -- info's path has no parameters
  await t.json(ROUTES.info, { id: 'x' });
  // @ts-expect-error -- listSandboxes has no `labels` in its query (it is `label`)
  await t.json(ROUTES.listSandboxes, {}, { query: { labels: ['a=1'] } });
  // @ts-expect-error -- a state the query's enum does not hold
  await t.json(ROUTES.listSandboxes, {}, { query: { state: 'gone' } });
  // @ts-expect-error -- createSandbox's body is JSON, not raw bytes
  await t.json(ROUTES.createSandbox, {}, { body: 'raw' });
  // @ts-expect-error -- a JSON body of the wrong shape (ttlSeconds is a number)
  await t.json(ROUTES.setTimeout, { id: 'x' }, { json: { ttlSeconds: '60' } });
  // @ts-expect-error -- commandStdin's body is raw bytes, not JSON
  await t.empty(ROUTES.commandStdin, { id: 'x', commandId: 'c' }, { json: {} });
  // @ts-expect-error -- getSandbox takes no query
  await t.json(ROUTES.getSandbox, { id: 'x' }, { query: { verbose: '1' } });
  // @ts-expect-error -- a signal the contract does not know
  await t.empty(ROUTES.killCommand, { id: 'x', commandId: 'c' }, { json: { signal: 'SIGSTOP' } });
}
