import { test } from 'node:test';
import assert from 'node:assert/strict';
import { WarrenError, type FileEntry } from '@warren/api';
import { changes } from './envd-watch.js';
import { multipartParts } from './multipart.js';
import { accessToken, e2bKey, openAccessToken, warrenKeyOf } from './tokens.js';

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

test('an access token carries its key for its own sandbox under the deployment’s secret, until it expires', () => {
  const secret = Buffer.alloc(32, 7);
  const now = 1_800_000_000_000;
  const t = accessToken(secret, 'sb_a', 'wk_key', now, 60_000);
  assert.equal(openAccessToken(secret, 'sb_a', t, now), 'wk_key');
  assert.equal(openAccessToken(secret, 'sb_a', t, now + 59_000), 'wk_key');
  assert.notEqual(accessToken(secret, 'sb_a', 'wk_key', now), t, 'each token is sealed afresh');
  const refused = (id: string, token: string | undefined, s: Buffer, at: number, why: RegExp): void =>
    assert.throws(
      () => openAccessToken(s, id, token, at),
      (e: unknown) => e instanceof WarrenError && e.code === 'unauthenticated' && why.test(e.message),
    );
  refused('sb_a', t, secret, now + 60_000, /expired/);
  refused('sb_b', t, secret, now, /wrong/);
  refused('sb_a', t, Buffer.alloc(32, 8), now, /wrong/);
  refused('sb_a', undefined, secret, now, /missing/);
  refused('sb_a', t.slice(0, -2), secret, now, /wrong/);
  // A flipped bit anywhere (the end time included) breaks the seal.
  const raw = Buffer.from(t, 'base64url');
  raw[14]! ^= 1;
  refused('sb_a', raw.toString('base64url'), secret, now, /wrong/);
});

/** A body as chunks of `size` bytes (1: every delimiter split across chunks). */
async function* chunked(b: Buffer, size: number): AsyncGenerator<Buffer> {
  for (let i = 0; i < b.length; i += size) yield b.subarray(i, i + size);
}

async function parts(body: Buffer, type: string, size: number): Promise<Array<[string | null, string | null, number[]]>> {
  const out: Array<[string | null, string | null, number[]]> = [];
  for await (const p of multipartParts(chunked(body, size), type)) {
    const bytes: Buffer[] = [];
    for await (const c of p.data) bytes.push(c);
    out.push([p.name, p.filename, [...Buffer.concat(bytes)]]);
  }
  return out;
}

test('multipart bodies as they arrive: files with names, quoted names, binary data, any chunking; malformed ones are refused', async () => {
  const b = 'XyZ';
  const body = Buffer.concat([
    Buffer.from(`preamble\r\n--${b}\r\nContent-Disposition: form-data; name="file"; filename="/tmp/a b.txt"\r\nContent-Type: application/octet-stream\r\n\r\n`),
    Buffer.from([0, 13, 10, 45, 45, 255, 13, 10, 45]),
    Buffer.from(`\r\n--${b}\r\nContent-Disposition: form-data; name="file"; filename=rel/c.txt\r\n\r\nsecond\r\n--${b}--\r\n`),
  ]);
  const want = [
    ['file', '/tmp/a b.txt', [0, 13, 10, 45, 45, 255, 13, 10, 45]],
    ['file', 'rel/c.txt', [...Buffer.from('second')]],
  ];
  for (const size of [1, 3, 7, 64, 4096]) assert.deepEqual(await parts(body, `multipart/form-data; boundary=${b}`, size), want, `chunks of ${size}`);
  // A part its reader leaves unread is skipped.
  const names: Array<string | null> = [];
  for await (const p of multipartParts(chunked(body, 5), `multipart/form-data; boundary=${b}`)) names.push(p.filename);
  assert.deepEqual(names, ['/tmp/a b.txt', 'rel/c.txt']);
  assert.equal((await parts(Buffer.from(`--${b}--\r\n`), `multipart/form-data; boundary="${b}"`, 2)).length, 0);
  const bad = async (s: string, type = `multipart/form-data; boundary=${b}`): Promise<boolean> =>
    parts(Buffer.from(s), type, 64).then(
      () => false,
      (e: unknown) => e instanceof WarrenError && e.code === 'invalid_argument',
    );
  assert.ok(await bad('anything', 'multipart/form-data'), 'no boundary');
  assert.ok(await bad('no delimiter here'), 'no delimiter');
  assert.ok(await bad(`--${b}\r\nContent-Disposition: form-data; name="f"\r\n\r\ncut short`), 'cut short');
  assert.ok(await bad(`--${b}\r\nno end of headers`), 'no end of headers');
  assert.ok(await bad(`--${b}\r\n${'h'.repeat(20_000)}`), 'headers past their bound');
  assert.ok(await bad(`${'p'.repeat(20_000)}--${b}--`), 'a preamble past its bound');
});

const entry = (path: string, type: FileEntry['type'], size: number, mtime: string, mode = 0o644): FileEntry => ({
  name: path.split('/').pop()!,
  path,
  type,
  size,
  mode,
  mtime,
});

test('watch events between two reads of a tree: created (and written, when it has bytes), written, chmodded, removed', () => {
  const t1 = '2026-01-01T00:00:00.000Z';
  const t2 = '2026-01-01T00:00:01.000Z';
  const before = new Map([
    ['a', entry('/w/a', 'file', 1, t1)],
    ['b', entry('/w/b', 'file', 1, t1)],
    ['c', entry('/w/c', 'file', 1, t1)],
  ]);
  const after = new Map([
    ['a', entry('/w/a', 'file', 2, t2)],
    ['c', entry('/w/c', 'file', 1, t1, 0o600)],
    ['d', entry('/w/d', 'dir', 4096, t2)],
    ['d/e', entry('/w/d/e', 'file', 3, t2)],
    ['f', entry('/w/f', 'file', 0, t2)],
  ]);
  assert.deepEqual(
    changes(before, after, false).map((e) => `${e.type.replace('EVENT_TYPE_', '')} ${e.name}`),
    ['WRITE a', 'CHMOD c', 'CREATE d', 'CREATE d/e', 'WRITE d/e', 'CREATE f', 'REMOVE b'],
  );
  const withEntry = changes(before, after, true);
  assert.equal(withEntry.find((e) => e.name === 'a')?.entry?.path, '/w/a');
  assert.equal(withEntry.find((e) => e.type === 'EVENT_TYPE_REMOVE')?.entry, undefined, 'a removed entry has none');
});
