import { test } from 'node:test';
import assert from 'node:assert/strict';
import { FrameDecoder, MAX_REPLY_BYTES, decodeFields, encodeFields, encodeFrame } from './frame.js';

test('fields round-trip with repeated keys and binary-safe lengths', () => {
  const buf = encodeFields([
    ['a', 'sh'],
    ['a', '-c'],
    ['e', 'X=1=2'],
    ['c', ''],
  ]);
  const f = decodeFields(buf);
  assert.deepEqual(f.get('a'), ['sh', '-c']);
  assert.deepEqual(f.get('e'), ['X=1=2']);
  assert.deepEqual(f.get('c'), ['']);
});

test('the decoder reassembles frames split at every byte', () => {
  const wire = Buffer.concat([encodeFrame('o', Buffer.from('hello')), encodeFrame('x', encodeFields([['c', '0']]))]);
  const dec = new FrameDecoder();
  const got = [];
  for (const byte of wire) got.push(...dec.push(Buffer.from([byte])));
  assert.equal(got.length, 2);
  assert.equal(got[0]?.type, 'o');
  assert.equal(got[0]?.payload.toString(), 'hello');
  assert.equal(decodeFields(got[1]?.payload ?? Buffer.alloc(0)).get('c')?.[0], '0');
});

test('the decoder rejects absurd lengths and truncated fields', () => {
  const bad = Buffer.alloc(5);
  bad.writeUInt32LE(0xffffffff, 0);
  assert.throws(() => new FrameDecoder().push(bad));
  assert.throws(() => decodeFields(Buffer.from([0x61, 9, 0, 0, 0, 0x62])));
});

test('the decoder joins a frame fed in small pieces once: 1 MiB in 64-byte pieces takes milliseconds, not a copy per piece', () => {
  const wire = encodeFrame('o', Buffer.alloc(1024 * 1024, 7));
  const dec = new FrameDecoder();
  const t0 = performance.now();
  const got = [];
  for (let at = 0; at < wire.length; at += 64) got.push(...dec.push(wire.subarray(at, at + 64)));
  const ms = performance.now() - t0;
  assert.equal(got.length, 1);
  assert.equal(got[0]?.payload.length, 1024 * 1024);
  assert.ok(got[0]?.payload.every((b) => b === 7));
  // Re-copying what is held on every piece: 16,385 pieces x 512 KiB on average, seconds.
  assert.ok(ms < 500, `took ${ms.toFixed(0)} ms`);
});

test('a reply over 1 MiB is refused at its header, whatever its type (an entry with all its attributes is under 300 KiB)', () => {
  const head = (type: string, payload: number): Buffer => {
    const b = Buffer.alloc(5);
    b.writeUInt32LE(payload + 1, 0);
    b[4] = type.charCodeAt(0);
    return b;
  };
  for (const t of ['o', 'r', 'e', 'x', 'f'])
    assert.throws(() => new FrameDecoder().push(head(t, MAX_REPLY_BYTES + 1)), new RegExp(`type '${t}' with 1048577 bytes is over the 1048576 allowed`));
  assert.deepEqual(new FrameDecoder().push(head('o', MAX_REPLY_BYTES)), [], 'at the limit: waits for the body');
  // An entry as large as one can be: 64 attributes of 4 KiB with long names, two long paths.
  const fields: Array<[string, string]> = [
    ['p', '/' + 'p'.repeat(4095)],
    ['k', '/' + 'k'.repeat(4095)],
  ];
  for (let i = 0; i < 64; i++) fields.push(['x', `user.${String(i).padStart(250, 'n')}\0${'v'.repeat(4096)}`]);
  assert.equal(new FrameDecoder().push(encodeFrame('e', encodeFields(fields))).length, 1);
  const zero = Buffer.alloc(5);
  assert.throws(() => new FrameDecoder().push(zero), /bad frame length 0/);
});
