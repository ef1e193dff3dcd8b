import { test } from 'node:test';
import assert from 'node:assert/strict';
import { poolNodes, poolShares } from './pool-shares.js';

test("a pool's size is spread evenly over its nodes, the remainders of pools falling on different nodes", () => {
  const sum = (m: Map<string, number>): number => [...m.values()].reduce((a, b) => a + b, 0);
  for (const size of [1, 2, 3, 7, 100]) {
    const s = poolShares('pool_x', size, ['a', 'b', 'c']);
    assert.equal(sum(s), size);
    assert.ok(Math.max(...s.values()) - Math.min(...s.values()) <= 1, JSON.stringify([...s]));
  }
  assert.equal(poolShares('pool_x', 5, []).size, 0);
  // The same pool, the same nodes: the same shares (any replica computes them).
  assert.deepEqual([...poolShares('pool_y', 4, ['a', 'b', 'c'])], [...poolShares('pool_y', 4, ['a', 'b', 'c'])]);
  const firsts = new Set(Array.from({ length: 20 }, (_, i) => [...poolShares(`pool_${i}`, 1, ['a', 'b', 'c'])].find(([, n]) => n === 1)![0]));
  assert.ok(firsts.size > 1, 'single-member pools do not all land on one node');
});

test("a pool's nodes are the ready ones that run containers, have a network if it needs one, and are large enough", () => {
  const node = (id: string, o: { state?: string; networking?: boolean; cpu?: number; backend?: string } = {}) => ({
    id,
    state: (o.state ?? 'ready') as 'ready',
    info: {
      backends: [{ name: o.backend ?? 'container' }],
      networking: o.networking ?? true,
      capacity: { maxCpuPerSandbox: o.cpu ?? 2, maxMemoryMiBPerSandbox: 4096 },
    },
  });
  const nodes = [node('d'), node('a', { networking: false }), node('b', { state: 'draining' }), node('c', { cpu: 0.5 }), node('e', { backend: 'vm' })];
  const closed = { resources: { cpu: 1, memoryMiB: 256, pids: 64, diskMiB: null }, network: { egress: 'deny' as const, allow: [], deny: [] } };
  assert.deepEqual(
    poolNodes(nodes as never, closed).map((n) => n.id),
    ['a', 'd'],
  );
  assert.deepEqual(
    poolNodes(nodes as never, { ...closed, network: { egress: 'deny', allow: ['npm.example'], deny: [] } }).map((n) => n.id),
    ['d'],
  );
  // Endpoints need a network and a node that offers each.
  const withEndpoint = [...nodes, { ...node('f'), info: { ...node('f').info, endpoints: ['policy'] } }];
  assert.deepEqual(
    poolNodes(withEndpoint as never, { ...closed, network: { egress: 'deny', allow: [], deny: [], endpoints: ['policy'] } }).map((n) => n.id),
    ['f'],
  );
});
