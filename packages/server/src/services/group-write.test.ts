import { test } from 'node:test';
import assert from 'node:assert/strict';
import { GroupWrite } from './group-write.js';

test('writes asked for while one is in flight go together in the next; a lone one goes at once; outcomes stay per item', async () => {
  const groups: number[][] = [];
  let release: (() => void) | null = null;
  const w = new GroupWrite<number, number>(
    async (xs) => {
      groups.push(xs);
      if (xs[0] === 1) await new Promise<void>((r) => (release = r));
      return xs.map((x) => (x === 4 ? { status: 'rejected', reason: new Error('four') } : { status: 'fulfilled', value: x * 10 }));
    },
    { max: 3 },
  );
  const first = w.add(1);
  assert.deepEqual(groups, [[1]], 'the first goes at once');
  const rest = [2, 3, 4, 5].map((x) => w.add(x).catch((e: Error) => e.message));
  assert.deepEqual(groups, [[1]], 'the others wait for it');
  release!();
  assert.equal(await first, 10);
  assert.deepEqual(await Promise.all(rest), [20, 30, 'four', 50]);
  assert.deepEqual(groups, [[1], [2, 3, 4], [5]], 'at most 3 a group, in order');
  // A write that throws fails its group only; the next one goes on.
  const bad = new GroupWrite<number, number>(async (xs) => {
    if (xs.includes(0)) throw new Error('down');
    return xs.map((x) => ({ status: 'fulfilled', value: x }));
  });
  const a = bad.add(0).catch((e: Error) => e.message);
  const b = bad.add(7);
  assert.deepEqual(await Promise.all([a, b]), ['down', 7]);
});

test('with a linger, the first write waits for it and takes what came meanwhile', async () => {
  const groups: number[][] = [];
  let tick: (() => void) | null = null;
  const w = new GroupWrite<number, number>(
    async (xs) => {
      groups.push(xs);
      return xs.map((x) => ({ status: 'fulfilled', value: x }));
    },
    { linger: () => new Promise<void>((r) => (tick = r)) },
  );
  const a = w.add(1);
  const b = w.add(2);
  await Promise.resolve();
  assert.deepEqual(groups, [], 'nothing goes before the linger ends');
  tick!();
  assert.deepEqual(await Promise.all([a, b]), [1, 2]);
  assert.deepEqual(groups, [[1, 2]]);
  // The next lone write lingers again.
  const c = w.add(3);
  await Promise.resolve();
  assert.deepEqual(groups, [[1, 2]]);
  tick!();
  assert.equal(await c, 3);
  assert.deepEqual(groups, [[1, 2], [3]]);
});
