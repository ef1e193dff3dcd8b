import { test } from 'node:test';
import assert from 'node:assert/strict';
import { randomText } from './random.js';

test('randomText: that many bytes as hex or base64url, none repeated across refills of its pool; sizes out of range refused', () => {
  const seen = new Set<string>();
  // 9-byte draws do not divide the 4 KiB pool: a draw that would run past its end takes a new pool.
  for (let i = 0; i < 3000; i++) {
    const s = randomText(9, 'base64url');
    assert.match(s, /^[A-Za-z0-9_-]{12}$/);
    seen.add(s);
  }
  assert.equal(seen.size, 3000);
  assert.match(randomText(6, 'hex'), /^[0-9a-f]{12}$/);
  assert.match(randomText(64, 'hex'), /^[0-9a-f]{128}$/);
  for (const n of [0, -1, 65, 1.5, Number.NaN]) assert.throws(() => randomText(n, 'hex'), RangeError);
});
