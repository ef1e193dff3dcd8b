import { test } from 'node:test';
import assert from 'node:assert/strict';
import { pushIterable } from './push-iterable.js';

test('a push iterable starts its source on the first read, queues what comes, and ends with the error it was given', async () => {
  let started = 0;
  let stopped = 0;
  let push: (v: number) => void = () => undefined;
  let end: (e?: Error) => void = () => undefined;
  const it = pushIterable<number>((p, e) => {
    started++;
    push = p;
    end = e;
    return () => stopped++;
  })[Symbol.asyncIterator]();
  assert.equal(started, 0);
  const first = it.next();
  push(1);
  push(2);
  assert.deepEqual(await first, { value: 1, done: false });
  assert.deepEqual(await it.next(), { value: 2, done: false });
  const third = it.next();
  end(new Error('source broke'));
  await assert.rejects(third, /source broke/);
  assert.equal(started, 1);
  assert.equal(stopped, 1);
});

test('stopping a push iterable while a read waits ends that read and stops the source', async () => {
  let stopped = 0;
  const it = pushIterable<number>(() => () => stopped++)[Symbol.asyncIterator]();
  const waiting = it.next();
  await new Promise((r) => setTimeout(r, 5));
  await it.return?.();
  assert.deepEqual(await waiting, { value: undefined, done: true });
  assert.equal(stopped, 1);
});
