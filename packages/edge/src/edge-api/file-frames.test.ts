import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createHash, randomBytes } from 'node:crypto';
import { ContentCache, decodeFileCall, encodeFileCall } from './file-frames.js';

/** The parts of a body as the network delivers them: in chunks that cut across the parts. */
function* rechunk(parts: Buffer[], size: number): Generator<Buffer> {
  const all = Buffer.concat(parts);
  for (let i = 0; i < all.length; i += size) yield all.subarray(i, i + size);
}

async function* from(chunks: Iterable<Buffer>): AsyncGenerator<Buffer> {
  yield* chunks;
}

test('a file call carries its arguments and raw file bytes; the sender writes the caller’s own buffers', async () => {
  const a = randomBytes(100_000);
  const parts = encodeFileCall(
    [{ id: 'sb_1', env: { K: 'v' } }],
    [
      { path: '/a', content: a, mode: 0o600 },
      { path: '/empty', content: Buffer.alloc(0) },
    ],
  );
  assert.ok(parts.includes(a));
  const args = await decodeFileCall(from(rechunk(parts, 777)), new ContentCache(), 2 ** 20);
  assert.deepEqual(args, [
    { id: 'sb_1', env: { K: 'v' } },
    [
      { path: '/a', content: a, mode: 0o600 },
      { path: '/empty', content: Buffer.alloc(0) },
    ],
  ]);
});

test('the receiver keeps one copy of content it holds already, and a wrong digest costs a copy, never wrong bytes', async () => {
  const cache = new ContentCache();
  const a = randomBytes(300_000);
  const first = (await decodeFileCall(from(rechunk(encodeFileCall([1], [{ path: '/f', content: a }]), 4096)), cache, 2 ** 20))[1] as Array<{ content: Buffer }>;
  const second = (await decodeFileCall(from(rechunk(encodeFileCall([2], [{ path: '/f', content: a }]), 1000)), cache, 2 ** 20))[1] as Array<{
    content: Buffer;
  }>;
  assert.equal(second[0]!.content, first[0]!.content, 'the same buffer, not a second copy');
  // Content that differs from the held copy in its middle, sent under that copy's digest.
  const b = Buffer.from(a);
  b.writeUInt8(b.readUInt8(150_000) ^ 0xff, 150_000);
  const forged = encodeFileCall([3], [{ path: '/f', content: b }]);
  const json = JSON.parse(forged[1]!.toString()) as [number, Array<{ sha256: string }>];
  json[1][0]!.sha256 = createHash('sha256').update(a).digest('hex');
  const body = Buffer.from(JSON.stringify(json));
  const len = Buffer.alloc(4);
  len.writeUInt32BE(body.length);
  const third = (await decodeFileCall(from(rechunk([len, body, b], 5000)), cache, 2 ** 20))[1] as Array<{ content: Buffer }>;
  assert.ok(third[0]!.content.equals(b));
  assert.notEqual(third[0]!.content, first[0]!.content);
});

test('a file call that announces more or fewer bytes than it carries, or a file over the limit, is refused', async () => {
  const parts = encodeFileCall([1], [{ path: '/f', content: Buffer.alloc(10, 1) }]);
  await assert.rejects(decodeFileCall(from([Buffer.concat(parts).subarray(0, -1)]), new ContentCache(), 100), /ended before its files did/);
  await assert.rejects(decodeFileCall(from([Buffer.concat([...parts, Buffer.from('x')])]), new ContentCache(), 100), /more bytes than its files/);
  await assert.rejects(decodeFileCall(from([Buffer.concat(parts)]), new ContentCache(), 5), /limited to 5 bytes/);
});
