import { test } from 'node:test';
import assert from 'node:assert/strict';
import { PoolMembers, type EdgePoolSpec } from './pool-members.js';

const pool = (size: number, refill = true): EdgePoolSpec => ({
  id: 'pool_1',
  layers: ['sha256:1'],
  resources: { cpu: 0.1, memoryMiB: 64, pids: 64 },
  network: { egress: 'deny' },
  size,
  refill,
});

function node() {
  const live = new Set<string>();
  let n = 0;
  let clock = 0;
  return {
    live,
    tick: (ms: number) => (clock += ms),
    node: {
      create: async (spec: { id: string }) => void live.add(spec.id),
      destroy: async (id: string) => void live.delete(id),
      has: (id: string) => live.has(id),
      newId: () => `sb_${++n}`,
      now: () => clock,
    },
  };
}

const settle = async (): Promise<void> => {
  for (let i = 0; i < 20; i++) await new Promise((r) => setImmediate(r));
};

test('a node keeps its share ready, hands one over (no longer its own), and refills only once told again', async () => {
  const f = node();
  const m = new PoolMembers(f.node);
  m.set([pool(3)]);
  await settle();
  assert.equal(m.load()[0]!.ready, 3);
  const id = m.take('pool_1');
  assert.ok(id && f.live.has(id) && !m.owns(id));
  f.tick(1000);
  m.set([pool(3, false)]);
  await settle();
  assert.equal(m.load()[0]!.ready, 2, 'refill false: what is ready stays, no more');
  assert.match(m.load()[0]!.lastError ?? '', /quota/);
  m.set([pool(3)]);
  await settle();
  assert.equal(m.load()[0]!.ready, 3);
  // A smaller share drops the extra; a pool left out drops all of its members.
  m.set([pool(1)]);
  await settle();
  assert.equal(m.load()[0]!.ready, 1);
  assert.equal(f.live.size, 2, 'the claimed one and one member');
  m.set([]);
  await settle();
  assert.deepEqual([...f.live], [id]);
  assert.equal(m.take('pool_1'), null);
  await m.close();
});

test('a member that died is replaced; close removes the members, not the claimed', async () => {
  const f = node();
  const m = new PoolMembers(f.node);
  m.set([pool(2)]);
  await settle();
  const [first] = [...f.live];
  f.live.delete(first!);
  m.died(first!);
  m.set([pool(2)]);
  await settle();
  assert.equal(m.load()[0]!.ready, 2);
  const claimed = m.take('pool_1')!;
  await m.close();
  assert.deepEqual([...f.live], [claimed]);
});
