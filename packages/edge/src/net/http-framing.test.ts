import { test } from 'node:test';
import assert from 'node:assert/strict';
import { BodyMeter, checkHead } from './http-framing.js';

const head = (s: string): Buffer => Buffer.from(s.replace(/\n/g, '\r\n') + '\r\n');

test('a request head: its body framing, read strictly', () => {
  assert.deepEqual(checkHead(head('GET / HTTP/1.1\nHost: a.example\n')), { ok: true, headBytes: 35, framing: { kind: 'length', bytes: 0 } });
  const post = checkHead(head('POST / HTTP/1.1\nHost: a.example\nContent-Length: 12\n'));
  assert.ok(post.ok && post.framing.kind === 'length' && post.framing.bytes === 12);
  const same = checkHead(head('POST / HTTP/1.1\nHost: a.example\nContent-Length: 5, 5\n'));
  assert.ok(same.ok && same.framing.kind === 'length' && same.framing.bytes === 5);
  const chunked = checkHead(head('POST / HTTP/1.1\nHost: a.example\nTransfer-Encoding: gzip, chunked\n'));
  assert.ok(chunked.ok && chunked.framing.kind === 'chunked');
  for (const bad of [
    'GET / HTTP/1.1\r\nHost: a.example\r\nX: 1\nHost: b.example\r\n\r\n', // a bare LF hides a second Host
    'GET / HTTP/1.1\r\nHost: a.example\r\nX: 1\rConnection: keep-alive\r\n\r\n',
    'GET / HTTP/1.1\r\nHost: a.example\r\nX-A: 1\r\n b.example\r\n\r\n', // folded
    'GET / HTTP/1.1\r\nHost: a.example\r\nBad Name: 1\r\n\r\n',
    'GET / HTTP/1.1\r\nHost: a.example\r\nContent-Length : 3\r\n\r\n',
    'POST / HTTP/1.1\r\nHost: a.example\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n',
    'POST / HTTP/1.1\r\nHost: a.example\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n',
    'POST / HTTP/1.1\r\nHost: a.example\r\nContent-Length: -1\r\n\r\n',
    'POST / HTTP/1.1\r\nHost: a.example\r\nContent-Length: 0x10\r\n\r\n',
    'POST / HTTP/1.1\r\nHost: a.example\r\nTransfer-Encoding: chunked, gzip\r\n\r\n',
    'POST / HTTP/1.1\r\nHost: a.example\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n',
    'POST / HTTP/1.1\r\nHost: a.example\r\nTransfer-Encoding: xchunked\r\n\r\n',
    'GET / HTTP/1.1\r\nHost: a.example\r\n',
  ]) {
    assert.equal(checkHead(Buffer.from(bad)).ok, false, JSON.stringify(bad));
  }
});

test('a length body: exactly its bytes, whatever the split; the rest never', () => {
  const m = new BodyMeter({ kind: 'length', bytes: 5 });
  assert.equal(m.take(Buffer.from('ab')).toString(), 'ab');
  assert.equal(m.done, false);
  assert.equal(m.take(Buffer.from('cdeGET /evil HTTP/1.1\r\n')).toString(), 'cde');
  assert.equal(m.done, true);
  assert.equal(m.take(Buffer.from('more')).length, 0);
  assert.equal(new BodyMeter({ kind: 'length', bytes: 0 }).take(Buffer.from('GET / HTTP/1.1\r\n')).length, 0);
});

test('a chunked body, byte by byte: up to its last chunk and trailers, nothing after', () => {
  const body = '5\r\nhello\r\n1a;ext=1\r\nabcdefghijklmnopqrstuvwxyz\r\n0\r\nX-Trailer: 1\r\n\r\n';
  const next = 'GET /second HTTP/1.1\r\nHost: b.example\r\n\r\n';
  for (const step of [1, 3, 7, body.length + next.length]) {
    const m = new BodyMeter({ kind: 'chunked' });
    const all = Buffer.from(body + next);
    let out = '';
    for (let i = 0; i < all.length; i += step) out += m.take(all.subarray(i, i + step)).toString('latin1');
    assert.equal(out, body, `step ${step}`);
    assert.equal(m.done, true);
    assert.equal(m.error, null);
  }
});

test('a malformed chunked body stops before the bad line', () => {
  for (const [body, good] of [
    ['5\r\nhello\r\nzz\r\n', '5\r\nhello\r\n'],
    ['5\r\nhello\n0\r\n\r\n', '5\r\nhello'],
    ['3\r\nhello\r\n', '3\r\nhel'],
    ['0\r\nX: 1\nGET / HTTP/1.1\r\n\r\n', '0\r\n'],
  ] as const) {
    const m = new BodyMeter({ kind: 'chunked' });
    const out = m.take(Buffer.from(body + 'y'.repeat(5000))).toString('latin1');
    assert.equal(out, good, JSON.stringify(body));
    assert.ok(m.error, JSON.stringify(body));
  }
  // A chunk-size line without end is held, then refused past its bound.
  const m = new BodyMeter({ kind: 'chunked' });
  assert.equal(m.take(Buffer.from('1'.repeat(100))).length, 0);
  assert.equal(m.take(Buffer.from('1'.repeat(5000))).length, 0);
  assert.ok(m.error);
});

test('a body whose trailers are refused (an endpoint’s request) fails at its first trailer field, forwarding nothing of it; the empty end is fine', () => {
  const m = new BodyMeter({ kind: 'chunked' }, { noTrailers: true });
  const sent = m.take(Buffer.from('3\r\nabc\r\n0\r\nX-Warren-Sandbox-Token: forged\r\n\r\n'));
  assert.equal(sent.toString(), '3\r\nabc\r\n0\r\n');
  assert.equal(m.error, 'trailer fields are not forwarded');
  const ok = new BodyMeter({ kind: 'chunked' }, { noTrailers: true });
  assert.equal(ok.take(Buffer.from('3\r\nabc\r\n0\r\n\r\n')).toString(), '3\r\nabc\r\n0\r\n\r\n');
  assert.equal(ok.done, true);
  // Elsewhere (an allowed name) trailers pass as they are.
  const plain = new BodyMeter({ kind: 'chunked' });
  assert.equal(plain.take(Buffer.from('0\r\nA: b\r\n\r\n')).toString(), '0\r\nA: b\r\n\r\n');
});
