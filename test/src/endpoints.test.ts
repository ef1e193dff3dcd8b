// Endpoints on real sandboxes: a target on the host's loopback that the operator named, reached
// from inside at http://policy.warren.internal/ through the node's proxy with the sandbox's token,
// its streamed answer passed on as it comes; everything else under warren.internal refused.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, type IncomingHttpHeaders, type Server } from 'node:http';
import { randomInt } from 'node:crypto';
import type { AddressInfo } from 'node:net';
import { sandboxToken } from '@warren/edge';
import type { WarrenError } from '@warren/api';
import type { Sandbox } from '@warren/sdk';
import { startTestWarren, type TestWarren } from './harness.js';

/** Run inside sandboxes (debian-python): each command prints one line the test asserts on. */
const PROBE = String.raw`
import socket, ssl, sys
def ask(host, path, addr=None, port=80, extra=''):
    s = socket.create_connection((addr or host, port), timeout=5)
    s.sendall(('GET %s HTTP/1.1\r\nHost: %s\r\nConnection: keep-alive\r\n%s\r\n' % (path, host, extra)).encode())
    return s
def whole(s, data=b''):
    while True:
        d = s.recv(65536)
        if not d: return data
        data += d
def line(r):
    head, _, body = r.partition(b'\r\n\r\n')
    return head.split(b'\r\n')[0].decode() + ' | ' + body.decode().strip()
cmd, args = sys.argv[1], sys.argv[2:]
try:
    if cmd == 'resolve':
        print(socket.gethostbyname(args[0]))
    elif cmd == 'get':
        # A spoofed token and id, and a second request pipelined behind the first.
        s = ask(args[0], args[1], args[2] if len(args) > 2 else None,
                extra='X-Warren-Sandbox-Token: forged\r\nX-Warren-Sandbox-Id: someone-else\r\n')
        s.sendall(('GET /echo?second HTTP/1.1\r\nHost: %s\r\n\r\n' % args[0]).encode())
        print(line(whole(s)))
    elif cmd == 'stream':
        s = ask('policy.warren.internal', '/sse', extra='Accept: text/event-stream\r\n')
        got = b''
        while b'data: one' not in got:
            d = s.recv(65536)
            if not d: break
            got += d
        # The first event is in: tell the target, which sends the last one only then.
        line(whole(ask('policy.warren.internal', '/saw-one')))
        rest = whole(s)
        print('one then two' if b'data: one' in got and b'data: two' not in got and b'data: two' in rest else 'buffered: %r' % (got + rest))
    elif cmd == 'tls':
        ctx = ssl.create_default_context(); ctx.check_hostname = False; ctx.verify_mode = ssl.CERT_NONE
        s = ctx.wrap_socket(socket.create_connection((args[0], 443), timeout=5), server_hostname=args[0])
        print('tls connected')
except Exception as e:
    if isinstance(e, socket.gaierror): print('nxdomain')
    else: print(type(e).__name__)
`;

describe('endpoints: a private path to an operator-named target', () => {
  let t: TestWarren;
  const secret = 'test-endpoint-secret';
  const host = `127.${randomInt(100, 200)}.${randomInt(1, 250)}.1`;
  let target: Server;
  let web: Server;
  let targetHost = '';
  /** What the target saw of each request, in order. */
  const seen: Array<{ url: string; headers: IncomingHttpHeaders }> = [];
  /** Resolved when a sandbox says it has read the stream's first event. */
  let sawOne: () => void = () => undefined;

  before(async () => {
    target = createServer((req, res) => {
      seen.push({ url: req.url ?? '', headers: req.headers });
      if (req.url === '/saw-one') {
        sawOne();
        return void res.end('ok');
      }
      if (req.url === '/sse') {
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        res.write('data: one\n\n');
        // The last event waits for the reader to have the first (no time-out: a buffering proxy fails the test).
        const saw = new Promise<void>((r) => (sawOne = r));
        return void saw.then(() => res.end('data: two\n\n'));
      }
      res.setHeader('content-type', 'application/json');
      res.end(JSON.stringify({ url: req.url, headers: req.headers }));
    });
    web = createServer((req, res) => res.end(`web ${req.headers.host ?? '-'}`));
    await new Promise<void>((r) => target.listen(0, host, r));
    await new Promise<void>((r) => web.listen(80, host, r));
    targetHost = `${host}:${(target.address() as AddressInfo).port}`;
    t = await startTestWarren({
      images: ['debian-python:latest'],
      network: {
        poolSize: 2,
        hosts: { 'pypi.example': host },
        endpoints: { policy: `http://${targetHost}`, judge: `http://${host}:1` },
        endpointSecret: secret,
      },
    });
  });

  after(async () => {
    await t?.close();
    target?.closeAllConnections();
    target?.close();
    web?.close();
  });

  const box = (network: unknown): Promise<Sandbox> =>
    t.client.sandboxes.create({
      image: 'debian-python:latest',
      network: network as never,
      files: [{ path: '/tmp/probe.py', content: Buffer.from(PROBE).toString('base64') }],
    });
  const probe = async (sb: Sandbox, ...args: string[]): Promise<string> =>
    (await sb.exec(['python3', '/tmp/probe.py', ...args], { timeoutMs: 30_000 })).stdout.trim();

  test('a deny-all sandbox with one endpoint reaches it with its token (a spoofed one replaced), streamed, and nothing else', async () => {
    const sb = await box({ egress: 'deny', endpoints: ['policy'] });
    const other = await box({ egress: 'allow' });
    try {
      assert.deepEqual((await sb.refresh()).network.endpoints, ['policy']);
      // The endpoint: its token and id set by the node, the caller's dropped; Host the target's;
      // the pipelined second request never reaches it (one request per connection).
      const before = seen.length;
      const got = await probe(sb, 'get', 'policy.warren.internal', '/echo?first');
      assert.match(got, /^HTTP\/1.1 200 OK \| /);
      const echo = JSON.parse(got.split(' | ')[1]!) as { url: string; headers: IncomingHttpHeaders };
      assert.equal(echo.url, '/echo?first');
      assert.equal(echo.headers['x-warren-sandbox-token'], sandboxToken(secret, sb.id));
      assert.equal(echo.headers['x-warren-sandbox-id'], sb.id);
      assert.equal(echo.headers.host, targetHost);
      assert.equal(echo.headers.connection, 'close');
      assert.deepEqual(
        seen.slice(before).map((s) => s.url),
        ['/echo?first'],
      );
      // Streamed: the reader has the first event before the target sends the last.
      assert.equal(await probe(sb, 'stream'), 'one then two');
      assert.ok(seen.filter((s) => s.url === '/saw-one').every((s) => s.headers['x-warren-sandbox-token'] === sandboxToken(secret, sb.id)));
      // Nothing else: not a name the other sandbox reaches (the positive control), not another
      // endpoint of the node's, not TLS to its own endpoint.
      assert.equal(await probe(other, 'get', 'pypi.example', '/'), 'HTTP/1.1 200 OK | web pypi.example');
      assert.equal(await probe(sb, 'resolve', 'pypi.example'), 'nxdomain');
      const gateway = await probe(sb, 'resolve', 'policy.warren.internal');
      assert.match(gateway, /^\d+\.\d+\.\d+\.\d+$/);
      assert.match(await probe(sb, 'get', 'pypi.example', '/', gateway), /^HTTP\/1.1 403 Forbidden \| pypi.example is not allowed/);
      assert.equal(await probe(sb, 'resolve', 'judge.warren.internal'), 'nxdomain');
      assert.match(await probe(sb, 'get', 'judge.warren.internal', '/', gateway), /^HTTP\/1.1 403 Forbidden \| judge.warren.internal is not an endpoint/);
      assert.match(await probe(sb, 'tls', 'policy.warren.internal'), /^(SSLEOFError|ConnectionResetError|SSLZeroReturnError|OSError)$/);
      // A sandbox whose rules name no endpoint (egress allow: every other name) reaches none.
      assert.equal(await probe(other, 'resolve', 'policy.warren.internal'), 'nxdomain');
      const otherGateway = await probe(other, 'resolve', 'pypi.example');
      assert.match(
        await probe(other, 'get', 'policy.warren.internal', '/', otherGateway),
        /^HTTP\/1.1 403 Forbidden \| policy.warren.internal is not an endpoint/,
      );
      const usage = (await sb.refresh()).network.usage;
      assert.ok((usage.allowed['policy.warren.internal'] ?? 0) >= 3, JSON.stringify(usage));
      assert.ok((usage.denied['judge.warren.internal'] ?? 0) >= 2, JSON.stringify(usage));
    } finally {
      await Promise.all([sb.delete(), other.delete()]);
    }
  });

  test('rules name only endpoints some node has (invalid_argument naming it); setNetwork adds one; /v1/info lists the names', async () => {
    assert.deepEqual((await t.client.info()).endpoints, ['judge', 'policy']);
    await assert.rejects(
      box({ egress: 'deny', endpoints: ['policy', 'critic'] }),
      (e: WarrenError) => e.code === 'invalid_argument' && /"critic"/.test(e.message),
    );
    const sb = await box({ egress: 'deny' });
    try {
      assert.equal(await probe(sb, 'resolve', 'policy.warren.internal'), 'nxdomain');
      await assert.rejects(sb.setNetwork({ endpoints: ['critic'] }), (e: WarrenError) => e.code === 'invalid_argument' && /"critic"/.test(e.message));
      assert.deepEqual((await sb.setNetwork({ egress: 'deny', endpoints: ['policy'] })).network.endpoints, ['policy']);
      const got = await probe(sb, 'get', 'policy.warren.internal', '/echo');
      assert.equal((JSON.parse(got.split(' | ')[1]!) as { headers: IncomingHttpHeaders }).headers['x-warren-sandbox-token'], sandboxToken(secret, sb.id));
    } finally {
      await sb.delete();
    }
  });
});
