import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Edge, MAX_CREATE_MANY, SimulatedBackend, localEdgeApi } from '@warren/edge';

const spec = (id: string) => ({
  id,
  layers: [],
  resources: { cpu: 1, memoryMiB: 256, pids: 64 },
  env: {},
  user: null,
  workdir: null,
  expiresAtMs: null,
  idleTimeoutMs: null,
  lastActivityMs: 0,
  paused: false,
});

test('createMany admits each sandbox in turn: those past the node’s room are refused, the others made; one load after all', async () => {
  const edge = new Edge({
    nodeId: 'n1',
    backends: [new SimulatedBackend()],
    capacity: { cpu: 8, memoryMiB: 4096, sandboxes: 2, maxCpuPerSandbox: 8, maxMemoryMiBPerSandbox: 4096 },
    memoryFloorMiB: 0,
  });
  const api = localEdgeApi(edge);
  try {
    const { outcomes, load } = await api.createMany([spec('sb_a'), spec('sb_b'), spec('sb_c')]);
    assert.deepEqual(
      outcomes.map((o) => ('state' in o ? o.state.id : o.error.code)),
      ['sb_a', 'sb_b', 'resource_exhausted'],
    );
    assert.equal(load.sandboxes, 2);
    assert.deepEqual(
      (await api.sandboxes()).map((s) => s.id),
      ['sb_a', 'sb_b'],
    );
    await assert.rejects(
      api.createMany(Array.from({ length: MAX_CREATE_MANY + 1 }, (_, i) => spec(`sb_${i}`))),
      (e: { code?: string }) => e.code === 'invalid_argument',
    );
  } finally {
    await edge.close({ keep: false });
  }
});
