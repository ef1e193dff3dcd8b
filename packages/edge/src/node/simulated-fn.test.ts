import { test } from 'node:test';
import assert from 'node:assert/strict';
import type { WarrenError } from '@warren/api';
import { SimulatedBackend } from '../backends/simulated/simulated-backend.js';
import { SIMULATED_FN_STDOUT } from '../backends/simulated/simulated-worker.js';
import { localEdgeApi } from '../edge-api/local.js';
import { Edge } from '../lifecycle/edge.js';

const group = { image: 'busybox:latest', layers: [], builtIn: true, resources: { cpu: 1, memoryMiB: 256, pids: 64 } };
const spec = { language: 'bash' as const, code: 'echo ok', env: [], cwd: '/tmp', timeoutMs: 5000, files: [], maxOutputBytes: 1024 };

test('a simulated node answers FnCalls through the edge’s own workers: one worker made under admission, then reused; its sandboxes still run nothing', async () => {
  const edge = new Edge({
    nodeId: 'n1',
    backends: [new SimulatedBackend()],
    capacity: { cpu: 8, memoryMiB: 4096, sandboxes: 4, maxCpuPerSandbox: 8, maxMemoryMiBPerSandbox: 4096 },
    memoryFloorMiB: 0,
  });
  const api = localEdgeApi(edge);
  try {
    const first = await api.fnRun({ tenant: 't', room: null, group, spec });
    assert.deepEqual([first.stdout, first.stderr, first.exitCode, first.cold], [SIMULATED_FN_STDOUT, '', 0, true]);
    const more = await Promise.all([1, 2, 3].map(() => api.fnRun({ tenant: 't', room: null, group, spec })));
    assert.deepEqual(
      more.map((r) => r.stdout),
      [SIMULATED_FN_STDOUT, SIMULATED_FN_STDOUT, SIMULATED_FN_STDOUT],
    );
    const load = await api.load();
    assert.equal(load.fn?.calls, 4);
    assert.ok(load.fn && load.fn.groups.reduce((n, g) => n + g.workers, 0) >= 1);
    // A sandbox that is not a worker still has no agent.
    await api.create({
      id: 'sb_plain',
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
    await assert.rejects(api.exec('sb_plain', { cmd: 'true' }), (e: WarrenError) => e.code === 'invalid_argument');
  } finally {
    await edge.close({ keep: false });
  }
});
