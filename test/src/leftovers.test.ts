// The one cleanup of what a dead node left (packages/edge/src/host/leftovers.ts), used by the
// harness and the test runner's sweep: it removes mounts and the dir, and leaves a live node's
// data dir alone.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import { once } from 'node:events';
import { existsSync } from 'node:fs';
import { mkdir, readFile, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { OWNER_PID_FILE, liveNode, liveOwner, sweepDataDir } from '@warren/edge';
import { ownedTempDir } from './harness.js';

test('a dead node’s data dir is swept: mounts below it gone, the dir removed; a live one is told apart', async () => {
  const dir = await ownedTempDir('leftovers-');
  try {
    await mkdir(join(dir, 'mnt', 'inner'), { recursive: true });
    execFileSync('mount', ['-t', 'tmpfs', 'tmpfs', join(dir, 'mnt')]);
    await mkdir(join(dir, 'mnt', 'inner'));
    execFileSync('mount', ['-t', 'tmpfs', 'tmpfs', join(dir, 'mnt', 'inner')]);
    // A process that looks like `warren up` on this dir.
    const up = spawn(process.execPath, ['-e', 'setTimeout(() => {}, 60000)', 'up'], { stdio: 'ignore' });
    // Listened for at once: 'spawn' comes on the next tick (the process has exec'd by then).
    const upSpawned = once(up, 'spawn');
    await writeFile(join(dir, 'warren.pid'), String(up.pid));
    // A test process whose node runs inside it owns a dir the same way (another run's sweep skips it).
    const owner = spawn(process.execPath, ['-e', 'setTimeout(() => {}, 60000)'], { stdio: 'ignore' });
    // Listened for at once: both are killed together, and one may be gone before the other is awaited.
    const exits = [once(up, 'exit'), once(owner, 'exit')];
    const spawned = Promise.all([upSpawned, once(owner, 'spawn')]);
    await writeFile(join(dir, OWNER_PID_FILE), String(owner.pid));
    await spawned;
    assert.equal(await liveNode(dir), true);
    assert.equal(await liveOwner(dir), true);
    up.kill('SIGKILL');
    owner.kill('SIGKILL');
    await Promise.all(exits);
    assert.equal(await liveNode(dir), false);
    assert.equal(await liveOwner(dir), false);
    const logged: string[] = [];
    await sweepDataDir(dir, { remove: true, log: (m) => logged.push(m) });
    assert.ok(!(await readFile('/proc/self/mounts', 'utf8')).includes(dir), 'no mount left below it');
    assert.equal(existsSync(dir), false);
    assert.equal(logged.filter((l) => l.startsWith('swept leftover mount')).length, 2, logged.join('\n'));
  } finally {
    for (const m of [join(dir, 'mnt', 'inner'), join(dir, 'mnt')]) {
      try {
        execFileSync('umount', ['-l', m], { stdio: 'ignore' });
      } catch {
        /* not mounted */
      }
    }
    await rm(dir, { recursive: true, force: true });
  }
});
