import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Semaphore } from './semaphore.js';

test('never more than the limit at once, all finish, errors free the slot', async () => {
  const s = new Semaphore(2);
  let now = 0;
  let peak = 0;
  const job = async (fail: boolean): Promise<number> => {
    now++;
    peak = Math.max(peak, now);
    await new Promise((r) => setTimeout(r, 5));
    now--;
    if (fail) throw new Error('x');
    return 1;
  };
  const results = await Promise.allSettled(Array.from({ length: 7 }, (_, i) => s.run(() => job(i === 2))));
  assert.equal(peak, 2);
  assert.equal(results.filter((r) => r.status === 'fulfilled').length, 6);
});
