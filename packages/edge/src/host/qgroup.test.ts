import { test } from 'node:test';
import assert from 'node:assert/strict';
import { DISK_FULL_MARGIN_BYTES, mountSource, qgroupFreeBytes } from './qgroup.js';

test("a qgroup's free bytes: its limit less what is referenced and reserved; none without a limit", () => {
  const MiB = 2 ** 20;
  // What a write refused with EDQUOT left of a 16 MiB limit (measured on btrfs: 16 KiB).
  const full = qgroupFreeBytes({ referenced: 16 * MiB - 16384, maxReferenced: 16 * MiB, reserved: 0 });
  assert.equal(full, 16384);
  assert.ok(full < DISK_FULL_MARGIN_BYTES);
  assert.equal(qgroupFreeBytes({ referenced: MiB, maxReferenced: 16 * MiB, reserved: 2 * MiB }), 13 * MiB);
  assert.equal(qgroupFreeBytes({ referenced: 17 * MiB, maxReferenced: 16 * MiB, reserved: 0 }), 0);
  assert.equal(qgroupFreeBytes({ referenced: MiB, maxReferenced: 0, reserved: 0 }), null);
});

test('the source of the top mount at a directory', () => {
  const info = [
    '22 1 8:1 / / rw - ext4 /dev/sda1 rw',
    '49 22 0:44 / /data/sandboxes rw,relatime - btrfs /dev/loop1 rw,subvolid=5,subvol=/',
    '50 49 0:45 / /data/sandboxes rw,relatime - btrfs /dev/loop2 rw,subvolid=5,subvol=/',
  ].join('\n');
  assert.equal(mountSource(info, '/data/sandboxes'), '/dev/loop2');
  assert.equal(mountSource(info, '/data'), null);
});
