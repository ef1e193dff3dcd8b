import { test } from 'node:test';
import assert from 'node:assert/strict';
import { favorPlan } from './cgroup-moves.js';

const V1 = '30 25 0:27 / /sys/fs/cgroup/memory rw,relatime shared:8 - cgroup cgroup rw,memory';

test('favorPlan: the cgroup2 mount remounted with its own super-block options kept and favordynmods added', () => {
  const hybrid = `${V1}\n36 25 0:31 / /sys/fs/cgroup/unified rw,nosuid,nodev,noexec,relatime shared:10 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot\n`;
  assert.deepEqual(favorPlan(hybrid), { state: 'remount', target: '/sys/fs/cgroup/unified', options: 'nsdelegate,memory_recursiveprot,favordynmods' });
  const bare = '36 25 0:31 / /sys/fs/cgroup rw,relatime shared:10 - cgroup2 cgroup2 rw\n';
  assert.deepEqual(favorPlan(bare), { state: 'remount', target: '/sys/fs/cgroup', options: 'favordynmods' });
  // An escaped mount point (a space is \040 in mountinfo).
  const spaced = '36 25 0:31 / /mnt/c\\040g rw - cgroup2 none rw\n';
  assert.deepEqual(favorPlan(spaced), { state: 'remount', target: '/mnt/c g', options: 'favordynmods' });
});

test('favorPlan: nothing to do once it is on, nothing to remount without a cgroup2 mount', () => {
  assert.deepEqual(favorPlan(`36 25 0:31 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw,favordynmods\n`), { state: 'on' });
  assert.deepEqual(favorPlan(`${V1}\n`), { state: 'none' });
  assert.deepEqual(favorPlan(''), { state: 'none' });
});
