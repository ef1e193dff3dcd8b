import { test } from 'node:test';
import assert from 'node:assert/strict';
import type { Backend, BackendSandbox } from '../backends/backend.js';
import type { Command } from './command.js';
import type { EdgeSandboxSpec } from './edge-spec.js';
import { defaultMemoryFloorMiB, dueNow, longestIdleFirst } from './housekeeping.js';
import { newLive, type Live } from './live.js';

function live(p: Partial<EdgeSandboxSpec>, running = false): Live {
  const spec: EdgeSandboxSpec = {
    id: 'x',
    layers: [],
    resources: { cpu: 1, memoryMiB: 256, pids: 64 },
    env: {},
    user: null,
    workdir: null,
    expiresAtMs: null,
    idleTimeoutMs: null,
    lastActivityMs: 0,
    paused: false,
    ...p,
  };
  const l = newLive(spec, {} as BackendSandbox, {} as Backend);
  if (running) l.commands.set('c', { done: false } as Command);
  return l;
}

test('the sweep: a TTL passed, an idle timeout passed, an idle pause; a running command holds off idleness, never the TTL', () => {
  const m = new Map<string, Live>([
    ['ttl', live({ expiresAtMs: 100 })],
    ['ttl-busy', live({ expiresAtMs: 100 }, true)],
    ['idle', live({ idleTimeoutMs: 50, lastActivityMs: 10 })],
    ['idle-busy', live({ idleTimeoutMs: 50, lastActivityMs: 10 }, true)],
    ['pause', live({ pauseAfterIdleMs: 50, lastActivityMs: 10 })],
    ['paused', live({ pauseAfterIdleMs: 50, lastActivityMs: 10, paused: true })],
    ['young', live({ expiresAtMs: 1000, idleTimeoutMs: 500, lastActivityMs: 90 })],
    // Paused: its TTL waits unless it counts paused time.
    ['paused-ttl', live({ expiresAtMs: 100, paused: true })],
    ['paused-ttl-counts', live({ expiresAtMs: 100, paused: true, ttlCountsPaused: true })],
  ]);
  assert.deepEqual(dueNow(m, 100), [
    { id: 'ttl', due: 'ttl' },
    { id: 'ttl-busy', due: 'ttl' },
    { id: 'idle', due: 'idle' },
    { id: 'pause', due: 'pause' },
    { id: 'paused-ttl-counts', due: 'ttl' },
  ]);
  assert.deepEqual(dueNow(m, 59), []);
});

test('memory pressure pauses running, idle sandboxes, the longest idle first', () => {
  const m = new Map<string, Live>([
    ['b', live({ lastActivityMs: 20 })],
    ['busy', live({ lastActivityMs: 1 }, true)],
    ['a', live({ lastActivityMs: 5 })],
    ['paused', live({ lastActivityMs: 0, paused: true })],
  ]);
  assert.deepEqual(longestIdleFirst(m), ['a', 'b']);
  assert.equal(defaultMemoryFloorMiB(24 * 2 ** 30), 1228);
  assert.equal(defaultMemoryFloorMiB(4 * 2 ** 30), 512);
});
