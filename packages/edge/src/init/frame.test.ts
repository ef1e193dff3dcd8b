import { test } from 'node:test';
import assert from 'node:assert/strict';
import { FrameDecoder, decodeFields, encodeFields, encodeFrame } from './frame.js';

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
