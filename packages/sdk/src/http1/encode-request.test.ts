import { test } from 'node:test';
import assert from 'node:assert/strict';
import { encodeRequest as encodeParts } from './encode-request.js';

/** The request as the bytes that go on the wire. */
const encodeRequest = (...args: Parameters<typeof encodeParts>): Buffer => Buffer.concat(encodeParts(...args));

test('a request is its line, Host, the headers, a Content-Length and the body, in one buffer', () => {
  const b = encodeRequest('POST', '/v1/sandboxes/sb_1/exec?x=%20', 'h:1', { authorization: 'Bearer k', 'content-type': 'application/json' }, '{"cmd":"é"}');
  assert.equal(
    b.toString('utf8'),
    'POST /v1/sandboxes/sb_1/exec?x=%20 HTTP/1.1\r\nHost: h:1\r\nauthorization: Bearer k\r\ncontent-type: application/json\r\nContent-Length: 12\r\n\r\n{"cmd":"é"}',
  );
  const bytes = encodeRequest('PUT', '/f', 'h', {}, new Uint8Array([0, 1, 255]));
  assert.deepEqual([...bytes.subarray(bytes.length - 3)], [0, 1, 255]);
  assert.match(bytes.toString('latin1'), /Content-Length: 3\r\n\r\n/);
});

test('a large binary body is not copied: it follows its head as it is', () => {
  const big = new Uint8Array(1 << 20).fill(7);
  const parts = encodeParts('PUT', '/f', 'h', {}, big);
  assert.equal(parts.length, 2);
  assert.equal(parts[1], big);
  assert.match(Buffer.from(parts[0]!).toString('latin1'), /Content-Length: 1048576\r\n\r\n$/);
  assert.equal(encodeParts('PUT', '/f', 'h', {}, new Uint8Array(100)).length, 1);
});

test('no body: a POST says Content-Length 0, a GET or DELETE says nothing', () => {
  assert.match(encodeRequest('POST', '/a', 'h', {}).toString(), /Content-Length: 0\r\n\r\n$/);
  assert.doesNotMatch(encodeRequest('GET', '/a', 'h', {}).toString(), /Content-Length/);
  assert.doesNotMatch(encodeRequest('DELETE', '/a', 'h', {}).toString(), /Content-Length/);
});

test('nothing that would split or reframe the request is sent: CR, LF, NUL, spaces in the target, bad names', () => {
  assert.throws(() => encodeRequest('GET', '/a', 'h', { authorization: 'Bearer k\r\nX-Admin: 1' }), TypeError);
  assert.throws(() => encodeRequest('GET', '/a', 'h', { authorization: 'k\n' }), TypeError);
  assert.throws(() => encodeRequest('GET', '/a', 'h', { authorization: 'k\0' }), TypeError);
  assert.throws(() => encodeRequest('GET', '/a', 'h', { authorization: 'ключ' }), TypeError);
  assert.throws(() => encodeRequest('GET', '/a b', 'h', {}), TypeError);
  assert.throws(() => encodeRequest('GET', '/a\r\nX: 1', 'h', {}), TypeError);
  assert.throws(() => encodeRequest('GET', 'http://elsewhere/', 'h', {}), TypeError);
  assert.throws(() => encodeRequest('GET', '/a', 'h', { 'bad name': 'x' }), TypeError);
  assert.throws(() => encodeRequest('GE T', '/a', 'h', {}), TypeError);
  assert.throws(() => encodeRequest('GET', '/a', 'h\r\n', {}), TypeError);
});
