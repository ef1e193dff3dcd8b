import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { mkdir, mkdtemp, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { removeBuildDir } from './defaults.js';

test('a build dir with a mount left inside (an interrupted debootstrap) is unmounted, then removed', async () => {
  const dir = await mkdtemp(join(tmpdir(), 'warren-build-'));
  const inner = join(dir, 'rootfs', 'proc');
  await mkdir(inner, { recursive: true });
  execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=1m', 'tmpfs', inner]);
  await writeFile(join(inner, 'canary'), 'x');
  try {
    await removeBuildDir(dir);
    assert.equal(existsSync(dir), false);
    assert.doesNotMatch(readFileSync('/proc/self/mounts', 'utf8'), new RegExp(dir));
  } finally {
    if (existsSync(inner)) execFileSync('umount', ['-l', inner]);
  }
});
