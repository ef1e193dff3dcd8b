import { test } from 'node:test';
import assert from 'node:assert/strict';
import { SimulatedBackend } from '../backends/simulated/simulated-backend.js';
import { localEdgeApi } from '../edge-api/local.js';
import { Edge } from '../lifecycle/edge.js';
import { unclaimedSpec, type EdgeSandboxSpec } from '../lifecycle/edge-spec.js';

const spec = (id: string, layers: string[] = []): EdgeSandboxSpec => unclaimedSpec(id, layers, { cpu: 1, memoryMiB: 256, pids: 64 }, Date.now(), {});

test('a fork on a node with room for none of its children, and nowhere else for them to go, freezes and copies nothing: each child is refused as a batch’s would be', async () => {
  const edge = new Edge({
    nodeId: 'n1',
    backends: [new SimulatedBackend()],
    capacity: { cpu: 8, memoryMiB: 4096, sandboxes: 1, maxCpuPerSandbox: 8, maxMemoryMiBPerSandbox: 4096 },
    memoryFloorMiB: 0,
  });
  const api = localEdgeApi(edge);
  try {
    await api.create(spec('sb_src'));
    const base = 'fb_000000000000000000000001';
    const r = await api.fork('sb_src', base, [spec('sb_kid', [`fork:${base}`])]);
    // Refused for room before any freeze (the simulated backend cannot fork: a freeze would be invalid_argument).
    assert.deepEqual(
      r.outcomes.map((o) => ('error' in o ? o.error.code : 'made')),
      ['resource_exhausted'],
    );
  } finally {
    await edge.close({ keep: false });
  }
});
