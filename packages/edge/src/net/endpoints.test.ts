import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Endpoints, TokenBucket, endpointHead, internalName, parseEndpoint, parseEndpointFlag, sandboxToken } from './endpoints.js';

test('an endpoint: one DNS label, an http URL of host and port only', () => {
  assert.deepEqual(parseEndpointFlag('policy=http://10.0.0.5:8000'), { name: 'policy', host: '10.0.0.5', port: 8000, hostHeader: '10.0.0.5:8000' });
  assert.deepEqual(parseEndpoint('judge', 'http://judge.lan/'), { name: 'judge', host: 'judge.lan', port: 80, hostHeader: 'judge.lan' });
  assert.equal(parseEndpoint('v6', 'http://[::1]:9000').host, '::1');
  for (const [name, url, why] of [
    ['-x', 'http://a:1', /DNS label/],
    ['a.b', 'http://a:1', /DNS label/],
    ['Up', 'http://a:1', /DNS label/],
    ['p', 'https://a:1', /only http/],
    ['p', 'http://u:pw@a:1', /no user/],
    ['p', 'http://a:1/v1', /no path/],
    ['p', 'http://a:1/?q=1', /no path/],
    ['p', 'not a url', /not a URL/],
  ] as const)
    assert.throws(() => parseEndpoint(name, url), why, `${name} ${url}`);
  assert.throws(() => parseEndpointFlag('=http://a:1'), /NAME=URL/);
});

test('names under warren.internal: the endpoint they name, or none', () => {
  assert.equal(internalName('policy.warren.internal'), 'policy');
  assert.equal(internalName('warren.internal'), '');
  assert.equal(internalName('a.policy.warren.internal'), '');
  assert.equal(internalName('policy.warren.internal.evil.example'), null);
  assert.equal(internalName('xwarren.internal'), null);
});

test('a request head to an endpoint: Host the target’s, the sandbox’s id and token added, the caller’s own of those and connection headers dropped', () => {
  const head = Buffer.from(
    'POST http://policy.warren.internal/v1/chat HTTP/1.1\r\nHost: policy.warren.internal\r\nX-Warren-Sandbox-Token: forged\r\n' +
      'x-warren-sandbox-id : other\r\nContent-Length: 2\r\nConnection: keep-alive, Upgrade\r\nUpgrade: h2c\r\nAccept: text/event-stream\r\n\r\n',
    'latin1',
  );
  const out = endpointHead(head, { hostHeader: '10.0.0.5:8000', sandboxId: 'sb-1', token: 'tok' }).toString('latin1');
  assert.equal(
    out,
    'POST /v1/chat HTTP/1.1\r\nHost: 10.0.0.5:8000\r\nContent-Length: 2\r\nAccept: text/event-stream\r\n' +
      'X-Warren-Sandbox-Id: sb-1\r\nX-Warren-Sandbox-Token: tok\r\nConnection: close\r\n\r\n',
  );
  const bare = endpointHead(Buffer.from('GET http://policy.warren.internal HTTP/1.1\r\nHost: x\r\n\r\n'), { hostHeader: 'h', sandboxId: 's', token: 't' });
  assert.match(bare.toString(), /^GET \/ HTTP\/1.1\r\n/);
  assert.match(endpointHead(Buffer.from('GET /a HTTP/1.1\r\nHost: x\r\n\r\n'), { hostHeader: 'h', sandboxId: 's', token: 't' }).toString(), /^GET \/a HTTP/);
});

test('the token: an HMAC of the sandbox id under the node secret (an endpoint can check it)', () => {
  assert.equal(sandboxToken('k', 'sb-1'), sandboxToken('k', 'sb-1'));
  assert.notEqual(sandboxToken('k', 'sb-1'), sandboxToken('k', 'sb-2'));
  assert.notEqual(sandboxToken('k', 'sb-1'), sandboxToken('j', 'sb-1'));
  assert.match(sandboxToken('k', 'sb-1'), /^[0-9a-f]{64}$/);
});

test('the request rate: a burst, then the rate, by the given clock', () => {
  const b = new TokenBucket(10, 3, 1000);
  assert.deepEqual([b.take(1000), b.take(1000), b.take(1000), b.take(1000)], [true, true, true, false]);
  assert.equal(b.take(1050), false, 'half a token after 50 ms');
  assert.equal(b.take(1100), true, 'one after 100 ms');
  assert.equal(b.take(1100), false);
  // A long wait refills up to the burst, no more.
  assert.deepEqual([b.take(9000), b.take(9000), b.take(9000), b.take(9000)], [true, true, true, false]);
  // A clock that steps back takes nothing away and gives nothing.
  assert.equal(b.take(5000), false);
  let now = 0;
  const eps = new Endpoints({ targets: { p: 'http://a:1' }, secret: 'k', requestsPerSecond: 2, clock: () => now });
  const nb = eps.bucket();
  assert.deepEqual([nb.take(now), nb.take(now), nb.take(now), nb.take(now), nb.take(now)], [true, true, true, true, false], 'a burst of twice the rate');
  now = 500;
  assert.equal(nb.take(now), true);
});

test('a node’s endpoints refuse rules naming one it lacks, by name', () => {
  const eps = new Endpoints({ targets: { policy: 'http://a:1', judge: 'http://b:2' }, secret: 'k' });
  assert.deepEqual(eps.names(), ['judge', 'policy']);
  eps.check(['policy']);
  eps.check(undefined);
  assert.throws(
    () => eps.check(['policy', 'critic']),
    (e: Error & { code?: string }) => e.code === 'invalid_argument' && /"critic"/.test(e.message),
  );
  assert.throws(() => new Endpoints({ targets: { p: 'ftp://a' }, secret: 'k' }), /only http/);
});
