import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { connect, createServer, type Server, type Socket } from 'node:net';
import { connect as tlsConnect } from 'node:tls';
import { randomInt } from 'node:crypto';
import { EgressProxy, type EgressTarget } from './egress-proxy.js';
import { compilePolicy } from './policy.js';
import { NetCounters } from './counters.js';
import { Endpoints, sandboxToken } from './endpoints.js';

/**
 * The proxy's way to an endpoint over real sockets, against an upstream that answers every
 * request head it reads on a connection (so what it receives is what the proxy let through): the
 * head rewritten, one request per connection, the rate and the body bound, TLS refused.
 */
let proxy: EgressProxy;
let ports = { http: 0, tls: 0 };
let upstream: Server;
const upstreamIp = `127.${randomInt(100, 200)}.${randomInt(1, 250)}.9`;
let upstreamPort = 0;
let now = 0;
const target: EgressTarget = {
  id: 'sb-ep',
  policy: compilePolicy({ egress: 'allow', endpoints: ['p'] }),
  gateway: 0,
  counters: new NetCounters(),
  active: 0,
};
/** Each upstream connection's bytes, once its client closed. */
const received: Promise<string>[] = [];

before(async () => {
  upstream = createServer({ allowHalfOpen: true }, (s: Socket) => {
    let all = '';
    let answered = 0;
    received.push(
      new Promise((resolve) => {
        s.on('data', (d: Buffer) => {
          all += d.toString('latin1');
          const heads = all.split('\r\n\r\n').length - 1;
          for (; answered < heads; answered++) s.write(`HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nok${answered}`);
        });
        s.on('end', () => {
          resolve(all);
          s.end();
        });
        s.on('error', () => undefined);
        s.on('close', () => resolve(all));
      }),
    );
  });
  await new Promise<void>((r) => upstream.listen(0, upstreamIp, () => r()));
  upstreamPort = (upstream.address() as { port: number }).port;
  proxy = new EgressProxy({
    target: (ip) => (ip === '127.0.0.1' ? target : undefined),
    resolve: () => Promise.reject(new Error('only endpoints here')),
    endpoints: new Endpoints({
      targets: { p: `http://${upstreamIp}:${upstreamPort}`, q: `http://${upstreamIp}:${upstreamPort}` },
      secret: 'k',
      requestsPerSecond: 2,
      requestBurst: 2,
      maxRequestBodyBytes: 16,
      clock: () => now,
    }),
    maxConnectionsPerSandbox: 16,
  });
  ports = await proxy.listen();
});

after(async () => {
  await proxy?.close();
  upstream?.close();
});

async function until(pred: () => boolean): Promise<void> {
  while (!pred()) await new Promise((r) => setTimeout(r, 5));
}

/** Sends raw bytes as a sandbox would and returns the whole answer (closing once one response is in). */
function send(bytes: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const c = connect({ host: '127.0.0.1', port: ports.http });
    let out = '';
    c.on('data', (d: Buffer) => {
      out += d.toString('latin1');
      if (/\r\n\r\nok\d+$/.test(out)) c.end();
    });
    c.on('error', reject);
    c.on('close', () => resolve(out));
    c.write(bytes);
  });
}

test('an endpoint request: Host and the token set, the spoofed ones dropped, a pipelined request not forwarded', async () => {
  const answer = await send(
    'GET /v1/models HTTP/1.1\r\nHost: p.warren.internal\r\nX-Warren-Sandbox-Token: forged\r\nConnection: keep-alive\r\n\r\nGET /two HTTP/1.1\r\nHost: p.warren.internal\r\n\r\n',
  );
  assert.equal(answer, 'HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nok0');
  assert.equal(received.length, 1);
  assert.equal(
    await received[0],
    `GET /v1/models HTTP/1.1\r\nHost: ${upstreamIp}:${upstreamPort}\r\nX-Warren-Sandbox-Id: sb-ep\r\nX-Warren-Sandbox-Token: ${sandboxToken('k', 'sb-ep')}\r\nConnection: close\r\n\r\n`,
  );
});

test('past the rate, 429 and nothing forwarded; a moment later, through again', async () => {
  now = 10_000; // a full bucket again
  const before = received.length;
  const get = 'GET / HTTP/1.1\r\nHost: p.warren.internal\r\n\r\n';
  assert.match(await send(get), /^HTTP\/1.1 200 OK/);
  assert.match(await send(get), /^HTTP\/1.1 200 OK/);
  assert.match(await send(get), /^HTTP\/1.1 429 Too Many Requests\r\n[^]*Retry-After: 1\r\n/);
  assert.equal(received.length, before + 2);
  now += 500;
  assert.match(await send(get), /^HTTP\/1.1 200 OK/);
  assert.equal(target.counters.denied.get('p.warren.internal (request rate)'), 1);
});

test('request bodies are bounded: 413 for a Content-Length past it, a chunked body past it cut', async () => {
  now += 60_000;
  const before = received.length;
  assert.match(await send('POST / HTTP/1.1\r\nHost: p.warren.internal\r\nContent-Length: 17\r\n\r\n'), /^HTTP\/1.1 413 /);
  assert.equal(received.length, before);
  // Whole in the first read: refused before anything goes up.
  assert.match(
    await send('POST / HTTP/1.1\r\nHost: p.warren.internal\r\nTransfer-Encoding: chunked\r\n\r\n10\r\n0123456789abcdef\r\n5\r\nmore!\r\n0\r\n\r\n'),
    /^HTTP\/1.1 413 /,
  );
  assert.equal(received.length, before);
  // Past the bound later in the body: the connection is cut before those bytes go up.
  const c = connect({ host: '127.0.0.1', port: ports.http });
  const closed = new Promise((r) => c.on('close', r));
  c.on('error', () => undefined);
  c.resume();
  c.write('POST / HTTP/1.1\r\nHost: p.warren.internal\r\nTransfer-Encoding: chunked\r\n\r\n8\r\n01234567\r\n');
  await until(() => received.length === before + 1);
  c.write('10\r\n0123456789abcdef\r\n0\r\n\r\n');
  await closed;
  const got = await received[received.length - 1]!;
  assert.match(got, /01234567/);
  assert.doesNotMatch(got, /abcdef/);
});

test('not its endpoint: 403 (and warren.internal names are never an allowed name, egress allow or not); TLS to one: cut', async () => {
  const before = received.length;
  for (const h of ['q.warren.internal', 'warren.internal', 'x.p.warren.internal']) {
    assert.match(await send(`GET / HTTP/1.1\r\nHost: ${h}\r\n\r\n`), new RegExp(`^HTTP/1.1 403 Forbidden[^]*${h.replace(/\./g, '\\.')} is not an endpoint`));
  }
  const tls = tlsConnect({ host: '127.0.0.1', port: ports.tls, servername: 'p.warren.internal', rejectUnauthorized: false });
  const outcome = await new Promise<string>((r) => {
    tls.once('secureConnect', () => r('connected'));
    tls.once('error', (e: Error) => r(e.message));
  });
  assert.notEqual(outcome, 'connected');
  assert.equal(received.length, before);
});
