import { test } from 'node:test';
import assert from 'node:assert/strict';
import { WEBHOOK_BACKOFF, webhookBackoffMs } from './webhook-backoff.js';

test('the backoff doubles from 0.5 s to a minute, a random half of each step taken off, never below half the step', () => {
  const steps = [1, 2, 3, 4, 5, 6, 7, 8, 9, 50, 10_000].map((a) => webhookBackoffMs(a, () => 0.999999));
  assert.deepEqual(steps, [500, 1000, 2000, 4000, 8000, 16000, 32000, 60000, 60000, 60000, 60000]);
  const least = [1, 2, 3, 8, 50].map((a) => webhookBackoffMs(a, () => 0));
  assert.deepEqual(least, [250, 500, 1000, 30000, 30000]);
  assert.equal(
    webhookBackoffMs(3, () => 0.5),
    1500,
  );
  // Tests pace it their own way.
  assert.deepEqual(
    [1, 2, 3].map((a) => webhookBackoffMs(a, () => 0, { firstMs: 10, maxMs: 30 })),
    [5, 10, 15],
  );
  assert.equal(WEBHOOK_BACKOFF.maxMs, 60_000);
});
