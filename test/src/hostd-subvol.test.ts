import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdir, rm, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { HostHelper } from '@warren/edge';
import { ownedTempDir } from './harness.js';

// warren-hostd makes a sandbox's disk in one request: a btrfs subvolume with its quota and, asked
// with the sandbox's host id, the writable layer's `upper` (the sandbox's) and `work` (root's).
const HOSTD = new URL('../../native/build/warren-hostd', import.meta.url).pathname;
const run = promisify(execFile);

test("a subvolume made with an owner holds the sandbox's upper and work dirs; without one, neither; a bad owner is refused", async () => {
  const dir = await ownedTempDir('subvol-');
  const image = join(dir, 'fs.btrfs');
  const mnt = join(dir, 'mnt');
  const h = new HostHelper(HOSTD);
  let mounted = false;
  try {
    await run('truncate', ['-s', '256M', image]);
    await run('mkfs.btrfs', ['-q', '-m', 'single', image]);
    await mkdir(mnt);
    await run('mount', ['-o', 'loop', image, mnt]);
    mounted = true;
    await run('btrfs', ['quota', 'enable', mnt]);
    await h.subvolume(mnt, 'sb_a', 1024, 230000);
    const upper = await stat(join(mnt, 'sb_a', 'upper'));
    const work = await stat(join(mnt, 'sb_a', 'work'));
    assert.deepEqual([upper.uid, upper.gid, upper.mode & 0o7777], [230000, 230000, 0o755]);
    assert.deepEqual([work.uid, work.mode & 0o7777], [0, 0o755]);
    await h.subvolume(mnt, 'sb_b', 1024);
    assert.equal(existsSync(join(mnt, 'sb_b', 'upper')), false);
    for (const owner of [-1, 4294967295, 1.5]) await assert.rejects(h.subvolume(mnt, 'sb_c', 1024, owner), /EINVAL|invalid/i, String(owner));
    assert.equal(existsSync(join(mnt, 'sb_c')), false);
    await h.deleteSubvolume(mnt, 'sb_a');
    assert.equal(existsSync(join(mnt, 'sb_a')), false);
  } finally {
    await h.close();
    if (mounted) await run('umount', [mnt]).catch(() => run('umount', ['-l', mnt]));
    await rm(dir, { recursive: true, force: true });
  }
});
