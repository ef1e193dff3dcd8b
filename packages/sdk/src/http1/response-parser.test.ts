import { test } from 'node:test';
import assert from 'node:assert/strict';
import { BadAnswer, MAX_HEAD_BYTES, ResponseParser, type WholeAnswer } from './response-parser.js';

/** Feeds `text` in pieces of `size` bytes; the answer, and after which piece it came. */
function feed(text: string | Buffer, size: number, method = 'GET'): { answer: WholeAnswer | null; at: number; pieces: number } {
  const bytes = Buffer.isBuffer(text) ? text : Buffer.from(text, 'latin1');
  const p = new ResponseParser(method);
  let pieces = 0;
  for (let i = 0; i < bytes.length; i += size) {
    pieces++;
    const a = p.push(bytes.subarray(i, i + size));
    if (a) return { answer: a, at: pieces, pieces: Math.ceil(bytes.length / size) };
  }
  return { answer: null, at: -1, pieces };
}

const OK = 'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\nKeep-Alive: timeout=65\r\n\r\n{"ok":true}';

test('an answer in any pieces, down to a byte at a time, is the same answer, and only once its last byte is in', () => {
  for (const size of [1, 2, 3, 5, 17, 64, 4096]) {
    const { answer, at, pieces } = feed(OK, size);
    assert.ok(answer, `pieces of ${size}`);
    assert.equal(at, pieces, `answered at the last piece (pieces of ${size})`);
    assert.equal(answer.status, 200);
    assert.equal(answer.body.toString(), '{"ok":true}');
    assert.equal(answer.keepAlive, true);
    assert.equal(answer.keepAliveMs, 65_000);
  }
});

test('chunked coding: sizes in hex with extensions, trailers, split anywhere', () => {
  const text = 'HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;name=x\r\nhello\r\nB\r\n, chunked!!\r\n0\r\nX-Trailer: 1\r\n\r\n';
  for (const size of [1, 4, 7, 1000]) {
    const { answer, at, pieces } = feed(text, size);
    assert.ok(answer);
    assert.equal(at, pieces);
    assert.equal(answer.body.toString(), 'hello, chunked!!');
  }
});

test('no body where there is none: 204, 304, an answer to HEAD, Content-Length 0', () => {
  assert.equal(feed('HTTP/1.1 204 No Content\r\n\r\n', 3).answer?.body.length, 0);
  assert.equal(feed('HTTP/1.1 304 Not Modified\r\nContent-Length: 10\r\n\r\n', 100).answer?.body.length, 0);
  assert.equal(feed('HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n', 100, 'HEAD').answer?.body.length, 0);
  assert.equal(feed('HTTP/1.1 201 Created\r\nContent-Length: 0\r\n\r\n', 1).answer?.status, 201);
});

test('1xx answers are skipped; the real answer follows', () => {
  const { answer } = feed('HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi', 5);
  assert.equal(answer?.status, 200);
  assert.equal(answer?.body.toString(), 'hi');
});

test('a body without a length runs to the end of the connection, which is then not kept', () => {
  const p = new ResponseParser('GET');
  assert.equal(p.push(Buffer.from('HTTP/1.1 200 OK\r\n\r\nsome ')), null);
  assert.equal(p.push(Buffer.from('bytes')), null);
  const a = p.end();
  assert.equal(a.body.toString(), 'some bytes');
  assert.equal(a.keepAlive, false);
});

test('Connection: close and HTTP/1.0 are not kept; HTTP/1.0 with keep-alive is', () => {
  assert.equal(feed('HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n', 9).answer?.keepAlive, false);
  assert.equal(feed('HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n', 9).answer?.keepAlive, false);
  assert.equal(feed('HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 0\r\n\r\n', 9).answer?.keepAlive, true);
});

test('a connection that ends early: before an answer, and in the middle of one', () => {
  const p = new ResponseParser('GET');
  assert.throws(() => p.end(), /closed before an answer/);
  const q = new ResponseParser('GET');
  q.push(Buffer.from('HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nab'));
  assert.throws(() => q.end(), /in the middle of an answer/);
});

test('malformed answers are refused, each with why', () => {
  const bad: Array<[string, RegExp]> = [
    ['HTTP/2 200 OK\r\n\r\n', /status line/],
    ['HTTP/1.1 20 OK\r\n\r\n', /status line/],
    ['SSH-2.0-OpenSSH\r\n\r\n', /status line/],
    ['HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n', /Content-Length/],
    ['HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n', /two different/],
    ['HTTP/1.1 200 OK\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n', /both/],
    ['HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n', /Transfer-Encoding/],
    ['HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n', /Transfer-Encoding/],
    ['HTTP/1.1 200 OK\r\nContent-Length: \v1\r\n\r\n', /Content-Length/],
    ['HTTP/1.1 200 OK\r\nX-Bad : 1\r\n\r\n', /malformed header/],
    ['HTTP/1.1 200 OK\r\n folded\r\n\r\n', /malformed header/],
    ['HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n', /chunk size/],
    ['HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabX\r\n', /not followed by CRLF/],
    ['HTTP/1.1 101 Switching Protocols\r\n\r\n', /upgrade/],
    ['HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nab', /bytes after the answer/],
  ];
  for (const [text, why] of bad)
    assert.throws(
      () => feed(text, 1000),
      (e: unknown) => e instanceof BadAnswer && why.test(e.message),
      text,
    );
});

test('the head and a chunk line are bounded: a server cannot grow them without end', () => {
  const p = new ResponseParser('GET');
  p.push(Buffer.from('HTTP/1.1 200 OK\r\n'));
  const filler = Buffer.from(`X-Fill: ${'a'.repeat(1000)}\r\n`);
  assert.throws(() => {
    for (let n = 0; n <= MAX_HEAD_BYTES; n += filler.length) p.push(filler);
  }, /head over/);
  const q = new ResponseParser('GET');
  q.push(Buffer.from('HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n'));
  assert.throws(() => q.push(Buffer.from('1'.repeat(2000))), /chunk line too long/);
});

test('a head that comes a byte at a time is copied in proportion to its length, not its square', () => {
  const head = `HTTP/1.1 200 OK\r\n${'X-Fill: abcdefgh\r\n'.repeat(3000)}Content-Length: 2\r\nKeep-Alive: Timeout=7\r\n\r\nok`;
  const p = new ResponseParser('GET');
  // Every byte Buffer.concat copies while the head comes in (re-joining it at each byte: ~1.6 GB).
  const concat = Buffer.concat.bind(Buffer);
  let copied = 0;
  Buffer.concat = (list: readonly Uint8Array[], total?: number): Buffer<ArrayBuffer> => {
    const out = concat(list, total);
    copied += out.length;
    return out;
  };
  let a: WholeAnswer | null = null;
  try {
    for (let i = 0; i < head.length; i++) a = p.push(Buffer.from(head[i]!, 'latin1')) ?? a;
  } finally {
    Buffer.concat = concat;
  }
  assert.equal(a?.body.toString(), 'ok');
  assert.equal(a?.keepAliveMs, 7_000, 'Keep-Alive timeout named in any case');
  assert.ok(copied < 10 * head.length, `${copied} bytes copied for a ${head.length}-byte head`);
});

test('no bytes are taken once the answer is whole', () => {
  const p = new ResponseParser('GET');
  assert.ok(p.push(Buffer.from('HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n')));
  assert.throws(() => p.push(Buffer.from('x')), /after the answer/);
});
