import { test } from 'node:test';
import assert from 'node:assert/strict';
import { pickFnNode, type FnRouteNode } from './fn-route.js';

const node = (id: string, groups: Array<{ workers: number; busy: number; queued: number }>, committedCpu = 0): FnRouteNode & { id: string } => ({
  id,
  info: { capacity: { maxCpuPerSandbox: 2, maxMemoryMiBPerSandbox: 4096, cpu: 128 } },
  load: {
    committed: { cpu: committedCpu },
    fn: { groups: groups.map((g) => ({ key: 'k', image: 'i', ...g })), calls: 0, timedOut: 0, failed: 0, rejected: 0, coldStarts: 0, queuedMs: 0, tenants: [] },
  },
});
const r = { cpu: 1, memoryMiB: 512 };
const none = new Map<string, Map<string, number>>();

test('a call goes to the node with a free warm worker of its group, else to the one with the least waiting', () => {
  const a = node('a', [{ workers: 2, busy: 2, queued: 0 }]);
  const b = node('b', [{ workers: 1, busy: 0, queued: 0 }]);
  assert.equal(pickFnNode([a, b], 'k', r, none, new Set())?.id, 'b');
  // The call this replica sent to b since its load was read takes b's free worker.
  const sent = new Map([['b', new Map([['k', 1]])]]);
  const c = node('c', [], 10);
  assert.equal(
    pickFnNode([a, b, c], 'k', r, sent, new Set())?.id,
    'a',
    'no free worker anywhere: the least backlog, a (0) before b (sent 1) and c (0 but busier)',
  );
  assert.equal(pickFnNode([a, node('q', [{ workers: 1, busy: 1, queued: 3 }])], 'k', r, none, new Set())?.id, 'a');
});

test('nodes tried already, and nodes too small for the call, are left out', () => {
  const a = node('a', [{ workers: 1, busy: 0, queued: 0 }]);
  const b = node('b', []);
  assert.equal(pickFnNode([a, b], 'k', r, none, new Set(['a']))?.id, 'b');
  assert.equal(pickFnNode([a, b], 'k', r, none, new Set(['a', 'b'])), null);
  assert.equal(pickFnNode([a, b], 'k', { cpu: 4, memoryMiB: 512 }, none, new Set()), null);
});
