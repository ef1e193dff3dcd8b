import { test } from 'node:test';
import assert from 'node:assert/strict';
import { parseSwaps, plannedZramMiB } from './swap.js';
import { cgroupAvailableMiB } from './sandbox-memory.js';

const SWAPS = `Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority
/dev/zram1                              partition\t12341244\t792288\t\t100
/swapfile                               file\t\t1048572\t0\t\t-2
`;

test('the zram a node counts on: the host’s zram swap, plus its own device unless the host has swap or it is told otherwise', () => {
  const swaps = parseSwaps(SWAPS);
  assert.deepEqual(swaps, [
    { name: '/dev/zram1', sizeMiB: 12051 },
    { name: '/swapfile', sizeMiB: 1023 },
  ]);
  // The host's zram only (a swap file costs no memory and holds nothing compressed).
  assert.equal(plannedZramMiB(swaps, undefined, 24_105), 12051);
  assert.equal(plannedZramMiB(swaps, { zramMiB: 1000 }, 24_105), 13051);
  assert.equal(plannedZramMiB([], undefined, 24_105), 12052);
  assert.equal(plannedZramMiB([], false, 24_105), 0);
  assert.equal(plannedZramMiB(parseSwaps('Filename Type Size Used Priority\n'), { zramMiB: 64 }, 24_105), 64);
});

test('memory available under a cgroup’s limit: the limit less the working set (usage less inactive page cache)', () => {
  const stat = 'cache 400\ntotal_cache 300000000\ntotal_inactive_file 104857600\n';
  assert.equal(cgroupAvailableMiB(1024 * 2 ** 20, stat, 600 * 2 ** 20), 1024 - 500);
  // Over the limit's worth in page cache only: all of it available.
  assert.equal(cgroupAvailableMiB(1024 * 2 ** 20, 'total_inactive_file 900\n', 100), 1024);
});
