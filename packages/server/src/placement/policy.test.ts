import { test } from 'node:test';
import assert from 'node:assert/strict';
import { placeAll, placeSandbox, type PlacementNode, type PlacementRequest } from './policy.js';

const node = (id: string, memoryMiB: number, more: Partial<PlacementNode> = {}): PlacementNode => ({
  id,
  state: 'ready',
  backends: ['container'],
  networking: true,
  capacity: { cpu: 128, busyCpu: 1.8, memoryMiB: 4096, sandboxes: 100, maxCpuPerSandbox: 2, maxMemoryMiBPerSandbox: 2048 },
  committed: { cpu: 0, memoryMiB },
  sandboxes: 0,
  paused: 0,
  cpuUsed: 0,
  ...more,
});
// A request as large as the limit: a node's committed memory below counts whole sandboxes.
const want: PlacementRequest = { backend: 'container', cpu: 1, memoryMiB: 512, memoryRequestMiB: 512, network: false };

/** A generator of the numbers `Math.random` would give, from a seed (repeatable). */
function seeded(seed: number): () => number {
  let x = seed;
  return () => (x = (x * 1103515245 + 12345) % 2 ** 31) / 2 ** 31;
}

test('a full scan leaves out the nodes that cannot take a create, each with why, and puts the others best first', () => {
  const nodes = [
    node('full', 3800),
    node('draining', 0, { state: 'draining' }),
    node('down', 0, { state: 'down' }),
    node('novm', 0, { backends: ['microvm'] }),
    node('busy', 0, { cpuUsed: 1.9 }),
    node('a', 1000),
    node('b', 3000),
  ];
  const p = placeAll(nodes, want);
  assert.deepEqual(p.order, ['a', 'b']);
  assert.equal(p.complete, true);
  assert.match(p.refused.full ?? '', /3800 of 4096 MiB/);
  assert.equal(p.refused.draining, 'the node is draining');
  assert.equal(p.refused.down, 'the node is down');
  assert.match(p.refused.novm ?? '', /container backend/);
  assert.match(p.refused.busy ?? '', /use 1.9 cores/);
  assert.deepEqual(Object.keys(p.refused).sort(), ['busy', 'down', 'draining', 'full', 'novm']);
  // Nodes tried already are skipped.
  assert.deepEqual(placeAll(nodes, want, new Set(['a'])).order, ['b']);
  // When the view says every node is full, the least loaded few that are up are asked anyway
  // (the view lags deletes): never a draining, down or wrong-backend one.
  const none = placeAll(
    nodes.filter((n) => !['a', 'b'].includes(n.id)),
    want,
  );
  assert.deepEqual(none.order, ['busy', 'full']);
  assert.deepEqual(Object.keys(none.refused).sort(), ['busy', 'down', 'draining', 'full', 'novm']);
  // A create that needs a network skips a node without one.
  assert.deepEqual(placeAll([node('lo', 0, { networking: false })], { ...want, network: true }).refused, { lo: 'its sandboxes have loopback only' });
  // A create whose rules name endpoints goes only to a node that offers each.
  const eps = placeAll([node('none', 0), node('one', 0, { endpoints: ['policy'] }), node('both', 0, { endpoints: ['judge', 'policy'] })], {
    ...want,
    network: true,
    endpoints: ['policy', 'judge'],
  });
  assert.deepEqual([eps.order, eps.refused], [['both'], { none: 'it has no endpoint named "policy"', one: 'it has no endpoint named "judge"' }]);
});

test('the first try is the best of a random sample of k; a sample with no node that fits falls back to a full scan', () => {
  const nodes = [node('a', 3000), node('b', 0), node('c', 2000), node('d', 1000)];
  const random = seeded(7);
  const firsts = new Set<string>();
  for (let i = 0; i < 64; i++) {
    const p = placeSandbox(nodes, want, { k: 1, random });
    assert.equal(p.order.length, 1);
    assert.equal(p.complete, false);
    firsts.add(p.order[0]!);
  }
  assert.deepEqual([...firsts].sort(), ['a', 'b', 'c', 'd']);
  // Of two sampled, the better first.
  for (let i = 0; i < 64; i++) {
    const p = placeSandbox(nodes, want, { k: 2, random });
    const score = (id: string): number => -nodes.find((n) => n.id === id)!.committed.memoryMiB;
    assert.equal(p.order.length, 2);
    assert.ok(score(p.order[0]!) >= score(p.order[1]!), p.order.join());
  }
  // Only one node has room: a sample that misses it scans them all.
  const one = [node('x', 3900), node('y', 3900), node('z', 0), node('w', 3900)];
  for (let i = 0; i < 16; i++) assert.equal(placeSandbox(one, want, { k: 2, random }).order[0], 'z');
});

test('best of two over 160 equal nodes keeps the most loaded within 10 % of the mean, where one random pick does not', () => {
  const spread = (k: number): number => {
    const nodes = Array.from({ length: 160 }, (_, i) => node(`n${i}`, 0, { capacity: { ...node('x', 0).capacity, memoryMiB: 1 << 20, sandboxes: 1 << 20 } }));
    const random = seeded(42);
    for (let i = 0; i < 32_000; i++) {
      const id = placeSandbox(nodes, { ...want, memoryMiB: 64, memoryRequestMiB: 64 }, { k, random }).order[0]!;
      const n = nodes.find((x) => x.id === id)!;
      n.committed.memoryMiB += 64;
      n.sandboxes++;
    }
    const counts = nodes.map((n) => n.sandboxes);
    return Math.max(...counts) / (32_000 / 160);
  };
  const two = spread(2);
  const one = spread(1);
  assert.ok(two <= 1.1, `best of two: max/mean ${two}`);
  assert.ok(one > 1.1, `one random pick: max/mean ${one}`);
});
