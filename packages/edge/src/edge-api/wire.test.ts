import { test } from 'node:test';
import assert from 'node:assert/strict';
import { decodeValue, encodeValue } from './wire.js';

test('values without bytes travel as plain JSON; bytes anywhere in a value travel as base64 and come back as Buffers', () => {
  const plain = ['sb_1', { cmd: 'echo "$b"', env: { A: '1' }, n: [1, null, true] }, undefined];
  assert.equal(encodeValue(plain), JSON.stringify(plain));
  assert.deepEqual(decodeValue(encodeValue(plain)), JSON.parse(JSON.stringify(plain)));
  const withBytes = { a: [1, { b: Buffer.from('hi') }], c: new Uint8Array([1, 2]) };
  const text = encodeValue(withBytes);
  assert.match(text, /"\$b":"aGk="/);
  const back = decodeValue(text) as { a: [number, { b: Buffer }]; c: Buffer };
  assert.ok(Buffer.isBuffer(back.a[1].b));
  assert.equal(back.a[1].b.toString(), 'hi');
  assert.deepEqual([...back.c], [1, 2]);
  // A string that reads "$b" stays a string, beside bytes or not.
  assert.deepEqual(decodeValue(encodeValue(['"$b"', '$b'])), ['"$b"', '$b']);
  assert.deepEqual(decodeValue(encodeValue(['$b', Buffer.from('x')])), ['$b', Buffer.from('x')]);
  // A value nested deeper than the walk looks goes the careful way, and still comes back whole.
  let deep: unknown = { leaf: Buffer.from('deep') };
  for (let i = 0; i < 40; i++) deep = { d: deep };
  let back2 = decodeValue(encodeValue(deep)) as { d?: unknown; leaf?: Buffer };
  for (let i = 0; i < 40; i++) back2 = back2.d as typeof back2;
  assert.equal(back2.leaf?.toString(), 'deep');
});
