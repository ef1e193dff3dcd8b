import { test } from 'node:test';
import assert from 'node:assert/strict';
import { WarrenError } from '@warren/api';
import { parseMultipart } from './multipart.js';
import { accessToken, checkAccessToken, e2bKey, warrenKeyOf } from './tokens.js';

test('a Warren key in E2B’s shape and back; a Warren key as it is; bytes that are no key are refused', () => {
  const k = 'wk_AbC-09_xyz';
  assert.match(e2bKey(k), /^e2b_[0-9a-f]+$/);
  assert.equal(warrenKeyOf(e2bKey(k)), k);
  assert.equal(warrenKeyOf(k), k);
  assert.throws(
    () => warrenKeyOf('e2b_0a0d'),
    (e: unknown) => e instanceof WarrenError && e.code === 'unauthenticated',
  );
});

test('an access token is the sandbox’s own under the deployment’s secret', () => {
  const secret = Buffer.alloc(32, 7);
  const t = accessToken(secret, 'sb_a');
  assert.doesNotThrow(() => checkAccessToken(secret, 'sb_a', t));
  for (const [id, token, s] of [
    ['sb_b', t, secret],
    ['sb_a', t, Buffer.alloc(32, 8)],
    ['sb_a', undefined, secret],
    ['sb_a', t.slice(0, -1), secret],
  ] as const)
    assert.throws(
      () => checkAccessToken(s, id, token),
      (e: unknown) => e instanceof WarrenError && e.code === 'unauthenticated',
    );
});

test('multipart bodies: files with names, quoted names, binary data; malformed ones are refused', () => {
  const b = 'XyZ';
  const body = Buffer.concat([
    Buffer.from(`--${b}\r\nContent-Disposition: form-data; name="file"; filename="/tmp/a b.txt"\r\nContent-Type: application/octet-stream\r\n\r\n`),
    Buffer.from([0, 13, 10, 45, 45, 255]),
    Buffer.from(`\r\n--${b}\r\nContent-Disposition: form-data; name="file"; filename=rel/c.txt\r\n\r\nsecond\r\n--${b}--\r\n`),
  ]);
  const parts = parseMultipart(body, `multipart/form-data; boundary=${b}`);
  assert.deepEqual(
    parts.map((p) => [p.name, p.filename, [...p.data]]),
    [
      ['file', '/tmp/a b.txt', [0, 13, 10, 45, 45, 255]],
      ['file', 'rel/c.txt', [...Buffer.from('second')]],
    ],
  );
  assert.equal(parseMultipart(Buffer.from(`--${b}--\r\n`), `multipart/form-data; boundary="${b}"`).length, 0);
  const bad = (s: string, type = `multipart/form-data; boundary=${b}`): boolean => {
    try {
      parseMultipart(Buffer.from(s), type);
      return false;
    } catch (e) {
      return e instanceof WarrenError && e.code === 'invalid_argument';
    }
  };
  assert.ok(bad('anything', 'multipart/form-data'), 'no boundary');
  assert.ok(bad('no delimiter here'), 'no delimiter');
  assert.ok(bad(`--${b}\r\nContent-Disposition: form-data; name="f"\r\n\r\ncut short`), 'cut short');
  assert.ok(bad(`--${b}\r\nno end of headers`), 'no end of headers');
});
