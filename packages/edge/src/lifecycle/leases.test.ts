import { test } from 'node:test';
import assert from 'node:assert/strict';
import { EdgeLeases } from './leases.js';

/** Leases on a clock the test moves; what lapsed, in order. */
function leases() {
  let now = 1_000_000;
  const lapsed: string[] = [];
  const l = new EdgeLeases({ now: () => now, lapse: (id) => lapsed.push(id) });
  return { l, lapsed, advance: (ms: number) => (now += ms), at: () => now };
}

test('a lease lapses once its deadline passes, once; a renewal (more renewals) moves it, an older view never does', () => {
  const { l, lapsed, advance, at } = leases();
  l.learn({ id: 'a', generation: 0, expiresAtMs: at() + 1000, onExpiry: 'delete' });
  l.check();
  assert.deepEqual(lapsed, []);
  // Renewed: 2 s more. A create's spec read before the renewal arrives after it: ignored.
  l.learn({ id: 'a', generation: 1, expiresAtMs: at() + 3000, onExpiry: 'delete' });
  l.learn({ id: 'a', generation: 0, expiresAtMs: at() + 1000, onExpiry: 'delete' });
  advance(2000);
  l.check();
  assert.deepEqual(lapsed, []);
  assert.equal(l.lapsed('a'), false);
  advance(1000);
  l.check();
  l.check();
  assert.deepEqual(lapsed, ['a']);
  assert.equal(l.lapsed('a'), true);
  l.close();
});

test('an ended lease (lapsed or deleted in the store) lapses at once whatever its deadline; the same news twice is one lapse', () => {
  const { l, lapsed, at } = leases();
  l.learn({ id: 'b', generation: 3, expiresAtMs: at() + 60_000, onExpiry: 'pause' });
  l.learn({ id: 'b', generation: 3, expiresAtMs: at() + 60_000, onExpiry: 'pause', ended: true });
  l.learn({ id: 'b', generation: 3, expiresAtMs: at() + 60_000, onExpiry: 'pause' });
  l.check();
  assert.deepEqual(lapsed, ['b']);
  assert.equal(l.get('b')?.ended, true);
  l.close();
});

test('leases no sandbox holds are forgotten; a timer lapses a lease on the real clock without a sweep', async () => {
  const { l, advance } = leases();
  l.learn({ id: 'c', generation: 0, expiresAtMs: 0, onExpiry: 'delete' });
  l.learn({ id: 'd', generation: 0, expiresAtMs: 2 ** 52, onExpiry: 'delete' });
  l.prune(new Set(['d']));
  assert.equal(l.get('c'), undefined);
  assert.ok(l.get('d'));
  l.close();
  advance(0);
  // A lease due now: its timer (0 ms) lapses it, with no sweep at all.
  let fire: (id: string) => void = () => undefined;
  const fired = new Promise<string>((resolve) => (fire = resolve));
  const real = new EdgeLeases({ now: () => Date.now(), lapse: (id) => fire(id) });
  real.learn({ id: 'e', generation: 0, expiresAtMs: Date.now() + 20, onExpiry: 'delete' });
  // The lease's timer does not hold the process open (a node's never should): this does, meanwhile.
  const hold = setTimeout(() => undefined, 10_000);
  assert.equal(await fired, 'e');
  clearTimeout(hold);
  real.close();
});
