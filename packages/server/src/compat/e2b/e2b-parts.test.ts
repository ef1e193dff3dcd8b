import { test } from 'node:test';
import assert from 'node:assert/strict';
import { WarrenError, type FileEntry, type Sandbox } from '@warren/api';
import { uploadMetadata } from './envd-files.js';
import { changes } from './envd-watch.js';
import { listQuery, nextToken } from './list.js';
import { metricOf, parseDf } from './metrics.js';
import { namesById } from './owners.js';
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

test('E2B’s list query: metadata as one value, states repeated or joined, order, limit, startedAfter, a token this server gave', () => {
  const q = listQuery(
    new URLSearchParams('metadata=job%3Drl%26n%3D1&state=running&state=paused,running&order=asc&limit=2&startedAfter=2026-01-01T00:00:00.000Z&template=base'),
  );
  assert.deepEqual(q, {
    labels: [
      ['job', 'rl'],
      ['n', '1'],
    ],
    states: ['running', 'paused'],
    template: 'base',
    startedAfter: Date.parse('2026-01-01T00:00:00.000Z'),
    order: 'asc',
    limit: 2,
    from: undefined,
  });
  assert.equal(listQuery(new URLSearchParams(`nextToken=${nextToken('sb_abc')}`)).from, 'sb_abc');
  assert.deepEqual([listQuery(new URLSearchParams('')).order, listQuery(new URLSearchParams('')).limit], ['desc', 100]);
  for (const bad of ['state=gone', 'order=up', 'limit=0', 'limit=1001', 'limit=x', 'startedAfter=soon', `nextToken=${nextToken('../etc')}`])
    assert.throws(
      () => listQuery(new URLSearchParams(bad)),
      (e: unknown) => e instanceof WarrenError && e.code === 'invalid_argument',
      bad,
    );
});

test('metrics in E2B’s shape: CPUs rounded up, the share of them used, memory and the root file system’s df', () => {
  assert.deepEqual(parseDf('Filesystem 1024-blocks Used Available Capacity Mounted on\noverlay 1000 250 750 25% /\n'), {
    used: 250 * 1024,
    total: 1000 * 1024,
  });
  assert.equal(parseDf('nothing'), null);
  const s = { resources: { cpu: 0.5, memoryMiB: 512 }, usage: { cpuRecent: 0.25, memoryBytes: 1000 } } as unknown as Sandbox;
  assert.deepEqual(metricOf(s, { used: 1, total: 2 }, 1_800_000_000_123), {
    timestamp: new Date(1_800_000_000_123).toISOString(),
    timestampUnix: 1_800_000_000,
    cpuCount: 1,
    cpuUsedPct: 50,
    memUsed: 1000,
    memTotal: 512 * 2 ** 20,
    diskUsed: 1,
    diskTotal: 2,
  });
});

test('owners by id from passwd and group files; upload metadata from X-Metadata-* headers, checked as envd checks it', () => {
  assert.deepEqual(
    [...namesById('root:x:0:0:root:/root:/bin/bash\nuser:x:1001:1001::/home/user:/bin/bash\ndup:x:1001:1\nbad line\n#c:x:y:\n')],
    [
      [0, 'root'],
      [1001, 'user'],
    ],
  );
  assert.deepEqual(uploadMetadata({ 'x-metadata-Author': ['mish', 'second'], 'content-type': ['x'], 'x-metadata-empty': [''] }), { author: 'mish', empty: '' });
  for (const bad of [
    { 'x-metadata-k': ['a\nb'] },
    { 'x-metadata-': ['v'] },
    { [`x-metadata-${'k'.repeat(247)}`]: ['v'] },
    { 'x-metadata-k': ['v'.repeat(4096)] },
  ])
    assert.throws(
      () => uploadMetadata(bad),
      (e: unknown) => e instanceof WarrenError && e.code === 'invalid_argument',
    );
});
