import { test } from 'node:test';
import assert from 'node:assert/strict';
import { RecentMap } from './recent-map.js';

test('a recent map keeps at most its bound, the most recently set, and finds what it keeps', () => {
  const m = new RecentMap<number, string>(4);
  for (let i = 1; i <= 5; i++) m.set(i, `v${i}`);
  assert.ok(m.size <= 4);
  assert.equal(m.get(1), undefined);
  assert.deepEqual(
    [3, 4, 5].map((i) => m.get(i)),
    ['v3', 'v4', 'v5'],
  );
  // Set again, an entry is the newest: it outlives those set before it.
  m.set(3, 'again');
  m.set(6, 'v6');
  assert.equal(m.get(3), 'again');
  assert.equal(m.get(4), undefined);
  assert.ok(m.size <= 4);
  m.delete(3);
  assert.equal(m.get(3), undefined);
});

test('a recent map bounded at 0 or 1 keeps at most one entry', () => {
  for (const max of [0, 1]) {
    const m = new RecentMap<number, number>(max);
    m.set(1, 1);
    m.set(2, 2);
    assert.ok(m.size <= 1, `max ${max}: ${m.size}`);
    assert.equal(m.get(1), undefined);
  }
});
