import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { connect, createServer, type Server, type Socket } from 'node:net';
import { randomInt } from 'node:crypto';
import { EgressProxy, type EgressTarget } from './egress-proxy.js';
import { compilePolicy } from './policy.js';
import { NetCounters } from './counters.js';

/**
 * The proxy's HTTP side over real sockets, against an upstream that ignores `Connection: close`
 * and serves every request it reads on a connection (as a lenient or hostile server may): what
 * the upstream receives is what one-request-per-connection rests on.
 */
let proxy: EgressProxy;
let port = 0;
let upstream: Server;
const upstreamIp = `127.${randomInt(100, 200)}.${randomInt(1, 250)}.7`;
const target: EgressTarget = {
  id: 'sb-test',
  policy: compilePolicy({ egress: 'deny', allow: ['a.example'] }),
  gateway: 0,
  counters: new NetCounters(),
  active: 0,
};
/** Each upstream connection's bytes, once its client closed. */
const received: Promise<string>[] = [];
/** Called when the upstream accepts a connection. */
let accepted: () => void = () => undefined;

before(async () => {
  upstream = createServer({ allowHalfOpen: true }, (s: Socket) => {
    let all = '';
    let answered = 0;
    accepted();
    received.push(
      new Promise((resolve) => {
        s.on('data', (d: Buffer) => {
          all += d.toString('latin1');
          // Answers every request head it has seen so far and keeps the connection open.
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
  await new Promise<void>((r) => upstream.listen(80, upstreamIp, () => r()));
  proxy = new EgressProxy({
    target: (ip) => (ip === '127.0.0.1' ? target : undefined),
    resolve: async () => upstreamIp,
    maxConnectionsPerSandbox: 16,
  });
  port = (await proxy.listen()).http;
});

after(async () => {
  await proxy?.close();
  upstream?.close();
});

/**
 * Sends raw bytes as a sandbox would and returns the whole answer: it closes its side once one
 * response is in (the upstream would serve more; the proxy closes itself after a refusal).
 */
function send(bytes: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const c = connect({ host: '127.0.0.1', port });
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

async function upstreamGot(n: number): Promise<string> {
  assert.equal(received.length, n, 'one upstream connection per request');
  return received[n - 1]!;
}

test('pipelined requests: only the first reaches the upstream, with Connection: close', async () => {
  const answer = await send(
    'GET /one HTTP/1.1\r\nHost: a.example\r\nConnection: keep-alive\r\n\r\nGET /two HTTP/1.1\r\nHost: b.example\r\n\r\nGET /three HTTP/1.1\r\nHost: a.example\r\n\r\n',
  );
  assert.equal(answer, 'HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nok0');
  assert.equal(await upstreamGot(1), 'GET /one HTTP/1.1\r\nHost: a.example\r\nConnection: close\r\n\r\n');
});

test('a body counted by Content-Length, then a smuggled request: the body goes, the request not', async () => {
  await send('POST /up HTTP/1.1\r\nHost: a.example\r\nContent-Length: 10\r\n\r\n0123456789GET /evil HTTP/1.1\r\nHost: b.example\r\n\r\n');
  assert.equal(await upstreamGot(2), 'POST /up HTTP/1.1\r\nHost: a.example\r\nContent-Length: 10\r\nConnection: close\r\n\r\n0123456789');
});

test('a chunked body, then a smuggled request: up to the last chunk only', async () => {
  const body = '4\r\nwiki\r\n0\r\n\r\n';
  await send(`POST /up HTTP/1.1\r\nHost: a.example\r\nTransfer-Encoding: chunked\r\n\r\n${body}GET /evil HTTP/1.1\r\nHost: b.example\r\n\r\n`);
  assert.equal(await upstreamGot(3), `POST /up HTTP/1.1\r\nHost: a.example\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n${body}`);
});

test('heads a lenient server could read otherwise are refused with 400 and reach no upstream', async () => {
  const before = received.length;
  for (const bad of [
    'GET / HTTP/1.1\r\nHost: a.example\r\nX: 1\nHost: b.example\r\n\r\n',
    'GET / HTTP/1.1\r\nHost: a.example\r\nX: 1\nConnection: keep-alive\r\n\r\nGET / HTTP/1.1\r\nHost: b.example\r\n\r\n',
    'GET / HTTP/1.1\r\nHost: a.example\r\nX-Long: 1\r\n Host: b.example\r\n\r\n',
    'POST / HTTP/1.1\r\nHost: a.example\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /evil HTTP/1.1\r\n\r\n',
    'POST / HTTP/1.1\r\nHost: a.example\r\nContent-Length: 4\r\nContent-Length: 40\r\n\r\nabcd',
  ]) {
    const answer = await send(bad);
    assert.match(answer, /^HTTP\/1\.1 400 Bad Request\r\n[^]*the request was refused: /, JSON.stringify(bad));
  }
  assert.equal(received.length, before);
  assert.ok((target.counters.denied.get('a.example (malformed request)') ?? 0) >= 5);
});

test('a malformed chunk later in the body: the connection is cut before it', async () => {
  const up = new Promise<void>((r) => (accepted = r));
  const c = connect({ host: '127.0.0.1', port });
  const closed = new Promise((r) => c.on('close', r));
  c.resume();
  c.write('POST /up HTTP/1.1\r\nHost: a.example\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nwiki\r\n');
  await up;
  c.write('4\nGET /evil HTTP/1.1\r\nHost: b.example\r\n\r\n');
  await closed;
  // The proxy cuts both sides at once: the upstream has the start of the request at most.
  const got = await received[received.length - 1]!;
  assert.ok('POST /up HTTP/1.1\r\nHost: a.example\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n4\r\nwiki\r\n'.startsWith(got), got);
});
