import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mapLimit } from './map-limit.js';

test('mapLimit keeps the order, runs calls side by side and never more than the limit', async () => {
  let inFlight = 0;
  let most = 0;
  const gates: Array<() => void> = [];
  const run = mapLimit([1, 2, 3, 4, 5, 6, 7], 3, async (x) => {
    inFlight++;
    most = Math.max(most, inFlight);
    await new Promise<void>((r) => gates.push(r));
    inFlight--;
    return x * 10;
  });
  // Released last in, first out: results still come back in the items' order.
  while (gates.length || inFlight) {
    await new Promise((r) => setImmediate(r));
    gates.pop()?.();
  }
  assert.deepEqual(await run, [10, 20, 30, 40, 50, 60, 70]);
  assert.equal(most, 3);
  assert.deepEqual(await mapLimit([], 4, async () => 1), []);
});
