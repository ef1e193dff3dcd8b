import { test } from 'node:test';
import assert from 'node:assert/strict';
import { IdRanges, RANGE_SIZE, SANDBOX_IDS_BASE } from './id-ranges.js';

test('ranges are disjoint, clear of /etc/subuid-style ranges and below 2^31', () => {
  const r = new IdRanges(4);
  const got = [r.take(), r.take(), r.take(), r.take()].map((m) => m!.hostStart);
  assert.deepEqual(
    got,
    [0, 1, 2, 3].map((k) => SANDBOX_IDS_BASE + k * RANGE_SIZE),
  );
  assert.equal(r.take(), null, 'none left');
  assert.ok(new IdRanges().take()!.hostStart >= 2 ** 30);
  const last = SANDBOX_IDS_BASE + (16384 - 1) * RANGE_SIZE;
  assert.ok(last + RANGE_SIZE <= 2 ** 31);
});

test('the lowest free range is handed out; claimed ones are skipped', () => {
  const r = new IdRanges(3);
  const a = r.take()!.hostStart;
  const b = r.take()!.hostStart;
  r.release(a);
  assert.equal(r.take()!.hostStart, a);
  r.release(b);
  assert.equal(r.take()!.hostStart, b);

  const s = new IdRanges(3);
  s.claim(SANDBOX_IDS_BASE);
  s.claim(100000); // a sandbox from before ranges: held, harmless
  assert.equal(s.take()!.hostStart, SANDBOX_IDS_BASE + RANGE_SIZE);
  assert.equal(s.inUse, 3);
});

test('filling all 16,384 ranges does not look at every range for each (it took 0.9 s)', () => {
  const r = new IdRanges();
  const t0 = performance.now();
  for (let i = 0; i < 16384; i++) assert.ok(r.take());
  const ms = performance.now() - t0;
  assert.equal(r.take(), null);
  assert.ok(ms < 300, `took ${ms.toFixed(0)} ms`);
});
