import { test } from 'node:test';
import assert from 'node:assert/strict';
import { EdgeLeases, isEdgeLease } from './leases.js';

/** Leases on a clock the test moves, over sandboxes it lists: what was frozen and thawed, in order. */
function leases(holders: Record<string, string[]> = {}) {
  let now = 1_000_000;
  const paused = new Set<string>();
  const log: string[] = [];
  const l = new EdgeLeases({
    now: () => now,
    holders: (lease) => (holders[lease] ?? []).map((id) => ({ id, paused: paused.has(id) })),
    freeze: async (id, reclaim) => {
      paused.add(id);
      log.push(`freeze ${id}${reclaim ? ' reclaim' : ''}`);
    },
    thaw: async (id) => {
      paused.delete(id);
      log.push(`thaw ${id}`);
    },
  });
  const settle = (): Promise<void> => new Promise((r) => setImmediate(r));
  return { l, log, paused, settle, advance: (ms: number) => (now += ms), at: () => now };
}

test('a lease lapses once its deadline passes, freezing its sandboxes once; a renewal (more renewals) moves it, an older view never does', async () => {
  const { l, log, advance, at, settle } = leases({ a: ['sb_1', 'sb_2'] });
  l.learn({ id: 'a', generation: 0, expiresAtMs: at() + 1000, onExpiry: 'delete' });
  l.check();
  // Renewed: 2 s more. A create's spec read before the renewal arrives after it: ignored.
  l.learn({ id: 'a', generation: 1, expiresAtMs: at() + 3000, onExpiry: 'delete' });
  l.learn({ id: 'a', generation: 0, expiresAtMs: at() + 1000, onExpiry: 'delete' });
  advance(2000);
  l.check();
  assert.deepEqual(log, []);
  assert.equal(l.lapsed('a'), false);
  advance(1000);
  l.check();
  l.check();
  await settle();
  assert.deepEqual(log, ['freeze sb_1', 'freeze sb_2'], 'a lease that says delete pages nothing out');
  assert.equal(l.lapsed('a'), true);
  l.close();
});

test('a renewal that reaches the node after its own deadline, but that the store took in time, thaws what the lapse froze', async () => {
  const { l, log, advance, at, settle, paused } = leases({ b: ['sb_1'] });
  l.learn({ id: 'b', generation: 4, expiresAtMs: at() + 1000, onExpiry: 'pause' });
  advance(1001);
  l.check();
  await settle();
  assert.deepEqual(log, ['freeze sb_1 reclaim']);
  l.learn({ id: 'b', generation: 5, expiresAtMs: at() + 30_000, onExpiry: 'pause' });
  await settle();
  assert.deepEqual(log, ['freeze sb_1 reclaim', 'thaw sb_1']);
  assert.equal(paused.has('sb_1'), false);
  assert.equal(l.lapsed('b'), false);
  // And it lapses again at the new deadline.
  advance(30_000);
  l.check();
  await settle();
  assert.equal(log.at(-1), 'freeze sb_1 reclaim');
  l.close();
});

test('an ended lease (lapsed or deleted in the store) lapses at once whatever its deadline; the same news twice is one lapse; a sandbox made after freezes at once', async () => {
  const { l, log, at, settle } = leases({ c: ['sb_1'] });
  l.learn({ id: 'c', generation: 3, expiresAtMs: at() + 60_000, onExpiry: 'pause' });
  l.learn({ id: 'c', generation: 3, expiresAtMs: at() + 60_000, onExpiry: 'pause', ended: true });
  l.learn({ id: 'c', generation: 3, expiresAtMs: at() + 60_000, onExpiry: 'pause' });
  l.check();
  l.check();
  await settle();
  assert.deepEqual(log, ['freeze sb_1 reclaim']);
  assert.equal(l.get('c')?.ended, true);
  // An ended lease is not revived by news of the same generation.
  assert.equal(l.lapsed('c'), true);
  l.freezeLate('c', 'sb_9');
  await settle();
  assert.equal(log.at(-1), 'freeze sb_9 reclaim');
  l.close();
});

test('leases no sandbox holds are forgotten; a timer lapses a lease on the real clock without a sweep; what comes over the wire is checked', async () => {
  const { l } = leases();
  l.learn({ id: 'c', generation: 0, expiresAtMs: 0, onExpiry: 'delete' });
  l.learn({ id: 'd', generation: 0, expiresAtMs: 2 ** 52, onExpiry: 'delete' });
  l.prune(new Set(['d']));
  assert.equal(l.get('c'), undefined);
  assert.ok(l.get('d'));
  l.close();
  // A lease due in 20 ms: its timer lapses it, with no sweep at all.
  let fire: (id: string) => void = () => undefined;
  const fired = new Promise<string>((resolve) => (fire = resolve));
  const real = new EdgeLeases({
    now: () => Date.now(),
    holders: () => [{ id: 'sb_e', paused: false }],
    freeze: async (id) => fire(id),
    thaw: async () => undefined,
  });
  real.learn({ id: 'e', generation: 0, expiresAtMs: Date.now() + 20, onExpiry: 'delete' });
  // The lease's timer does not hold the process open (a node's never should): this does, meanwhile.
  const hold = setTimeout(() => undefined, 10_000);
  assert.equal(await fired, 'sb_e');
  clearTimeout(hold);
  real.close();
  assert.equal(isEdgeLease({ id: 'x', generation: 1, expiresAtMs: 5, onExpiry: 'pause' }), true);
  for (const bad of [
    null,
    { id: '', generation: 1, expiresAtMs: 5, onExpiry: 'pause' },
    { id: 'x', generation: 1.5, expiresAtMs: 5, onExpiry: 'pause' },
    { id: 'x', generation: 1, expiresAtMs: Infinity, onExpiry: 'pause' },
    { id: 'x'.repeat(65), generation: 1, expiresAtMs: 5, onExpiry: 'delete' },
    { id: 'x', generation: 1, expiresAtMs: 5, onExpiry: 'keep' },
  ])
    assert.equal(isEdgeLease(bad), false, JSON.stringify(bad));
});
