import { test } from 'node:test';
import assert from 'node:assert/strict';
import type { Backend, LimitCounts } from '../backends/backend.js';
import { limitsHit, watchLimits } from './limit-watch.js';

const c = (oomKills: number | null, pidsMaxHits: number | null): LimitCounts => ({ oomKills, pidsMaxHits });

test('a limit was hit when its counter rose while the command ran, its disk was full at its end, or the OOM killer ended it', () => {
  const none = { oomKilled: false };
  assert.deepEqual(limitsHit(c(0, 3), c(0, 3), false, none), []);
  assert.deepEqual(limitsHit(c(0, 3), c(0, 9), false, none), ['pids']);
  assert.deepEqual(limitsHit(c(1, 0), c(2, 0), null, none), ['memory']);
  assert.deepEqual(limitsHit(c(1, 0), c(1, 0), null, { oomKilled: true }), ['memory']);
  assert.deepEqual(limitsHit(c(0, 0), c(1, 1), true, none), ['memory', 'pids', 'disk']);
  // A count hit before the command started is not its; counters not known say nothing.
  assert.deepEqual(limitsHit(c(5, 5), c(5, 5), null, none), []);
  assert.deepEqual(limitsHit(null, c(1, 1), null, none), []);
  assert.deepEqual(limitsHit(c(null, null), c(1, 1), null, none), []);
});

test('nothing is read as a command starts; a failed one reads the counters and compares them with the last check, which moves on; the disk only of a sandbox with a disk limit', async () => {
  let pids = 2;
  const reads: string[] = [];
  const backend = {
    limitCounts: async (id: string) => {
      reads.push(`counts ${id}`);
      return c(0, pids);
    },
    diskFull: async (id: string) => {
      reads.push(`disk ${id}`);
      return true;
    },
  } as unknown as Backend;
  const l = { backend, spec: { id: 'sb_1', resources: { cpu: 1, memoryMiB: 64, pids: 16, diskMiB: 16 } } as never, limitsSeen: c(0, 2) };
  const limited = watchLimits(l);
  assert.deepEqual(reads, []);
  pids = 7;
  assert.deepEqual(await limited({ oomKilled: false }), ['pids', 'disk']);
  assert.deepEqual(reads, ['counts sb_1', 'disk sb_1']);
  assert.deepEqual(l.limitsSeen, c(0, 7));
  // The next failure sees no new rise.
  assert.deepEqual(await watchLimits(l)({ oomKilled: false }), ['disk']);
  reads.length = 0;
  // A fresh sandbox (none seen yet) counts from zero.
  const fresh = { backend, spec: { id: 'sb_2', resources: { cpu: 1, memoryMiB: 64, pids: 16, diskMiB: null } } as never, limitsSeen: null };
  assert.deepEqual(await watchLimits(fresh)({ oomKilled: false }), ['pids']);
  assert.deepEqual(reads, ['counts sb_2']);
  // A backend that knows none of it (a VM's guest) says none.
  assert.deepEqual(
    await watchLimits({ backend: {} as Backend, spec: { id: 'x', resources: { diskMiB: 8 } } as never, limitsSeen: null })({ oomKilled: true }),
    ['memory'],
  );
});
