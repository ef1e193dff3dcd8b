import { test } from 'node:test';
import assert from 'node:assert/strict';
import { ByteQueue } from './byte-queue.js';

test('ByteQueue: what is taken is what was pushed, in order, whatever the sizes of the chunks and the takes', () => {
  let seed = 7;
  const rand = (n: number): number => {
    seed = (seed * 1103515245 + 12345) & 0x7fffffff;
    return seed % n;
  };
  const q = new ByteQueue();
  const sent: Buffer[] = [];
  const got: Buffer[] = [];
  let byte = 0;
  for (let round = 0; round < 5000; round++) {
    const size = [0, 1, 3, 700, 1024, 1025, 5000, 70_000][rand(8)]!;
    const b = Buffer.alloc(size);
    for (let i = 0; i < size; i++) b[i] = byte++ & 0xff;
    q.push(b);
    sent.push(b);
    if (rand(3) === 0) got.push(q.take(rand(q.length + 1)));
  }
  got.push(q.take(q.length));
  assert.equal(q.length, 0);
  assert.ok(Buffer.concat(got).equals(Buffer.concat(sent)));
  assert.throws(() => q.take(1), RangeError);
});

test('ByteQueue: bytes taken earlier are not changed by what is pushed after (small chunks share a slab)', () => {
  const q = new ByteQueue();
  q.push(Buffer.from('ab'));
  const ab = q.take(2);
  q.push(Buffer.from('cd'));
  q.push(Buffer.from('ef'));
  assert.equal(ab.toString(), 'ab');
  assert.equal(q.take(4).toString(), 'cdef');
});

test('ByteQueue: an emptied queue keeps no slab (an idle connection holds nothing); a busy one gets larger slabs', () => {
  const q = new ByteQueue();
  q.push(Buffer.from('hello'));
  assert.ok(q.slabBytes > 0 && q.slabBytes <= 4096, `first slab ${q.slabBytes}`);
  const hello = q.take(5);
  assert.equal(q.slabBytes, 0);
  for (let i = 0; i < 200; i++) q.push(Buffer.alloc(1000, i));
  assert.equal(q.slabBytes, 64 * 1024);
  q.skip(q.length - 1);
  assert.equal(q.take(1)[0], 199);
  assert.equal(q.slabBytes, 0);
  assert.equal(hello.toString(), 'hello');
});

test('ByteQueue: a megabyte pushed a byte at a time is taken in one piece, in milliseconds', () => {
  const q = new ByteQueue();
  const one = Buffer.alloc(1, 9);
  const t0 = performance.now();
  for (let i = 0; i < 1024 * 1024; i++) q.push(one);
  const all = q.take(1024 * 1024);
  const ms = performance.now() - t0;
  assert.equal(all.length, 1024 * 1024);
  assert.ok(all.every((b) => b === 9));
  assert.ok(ms < 1000, `took ${ms.toFixed(0)} ms`);
});

test('ByteQueue: a few small bytes taken keep no 64 KiB block alive (an init call gets a frame or two; a finished command keeps its output for minutes)', () => {
  const q = new ByteQueue();
  q.push(Buffer.from('\x05\x00\x00\x00xabcd'));
  const frame = q.take(9);
  assert.equal(frame.subarray(5).toString(), 'abcd');
  assert.ok(frame.buffer.byteLength <= 8 * 1024, `the 9 bytes taken keep a block of ${frame.buffer.byteLength} bytes`);
  // Many small chunks still share slabs (no Buffer of its own each), up to 64 KiB each.
  for (let i = 0; i < 100_000; i++) q.push(Buffer.from('x'));
  const all = q.take(100_000);
  assert.equal(all.length, 100_000);
});
