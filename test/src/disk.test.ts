// The data disk full: a node whose data dir is a small file system of the test's own (an ext4
// image, loop-mounted), filled by its sandboxes and then from outside. Warren's own state stays
// writable, what does not fit is refused with a clear error and leaves nothing half-written, and
// a restart finds everything it had.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { chmod, mkdir, readdir, rm, statfs } from 'node:fs/promises';
import { join } from 'node:path';
import type { WarrenError } from '@warren/sdk';
import { forceCleanup, ownedTempDir, startTestWarren, type TestWarren } from './harness.js';
import { dockerSave, makeTar } from './tar-writer.js';

const RESERVE_MIB = 200;

describe('the data disk full', () => {
  let root = '';
  let mnt = '';
  let dataDir = '';
  let t: TestWarren | null = null;
  const start = (): Promise<TestWarren> => startTestWarren({ dataDir, images: ['busybox:latest'], network: false, dataDiskReserveMiB: RESERVE_MIB });

  before(async () => {
    root = await ownedTempDir('diskfull-');
    mnt = join(root, 'mnt');
    await mkdir(mnt);
    execFileSync('truncate', ['-s', '700M', join(root, 'disk.img')]);
    execFileSync('mkfs.ext4', ['-q', '-F', join(root, 'disk.img')]);
    execFileSync('mount', ['-o', 'loop', join(root, 'disk.img'), mnt]);
    dataDir = join(mnt, 'data');
    await mkdir(dataDir);
    // Sandboxes' mapped ids walk these paths, as the data dir's own.
    for (const d of [root, mnt, dataDir]) await chmod(d, 0o711);
    t = await start();
  });

  after(async () => {
    await t?.close({ removeData: false }).catch(() => undefined);
    await forceCleanup(dataDir).catch(() => undefined);
    try {
      execFileSync('umount', ['-l', mnt], { stdio: 'ignore' });
    } catch {
      /* not mounted */
    }
    await rm(root, { recursive: true, force: true });
  });

  const blobs = async (): Promise<string[]> => (await readdir(join(dataDir, 'layers', 'blobs'))).sort();
  const archive = dockerSave([makeTar([{ path: 'big', content: Buffer.alloc(64 * 2 ** 20, 7) }])]);

  test('sandboxes that fill their disks, then a disk filled from outside: clear errors, the store writable, nothing lost at restart', async () => {
    const w = t!;
    // Sandboxes fill all the space theirs: each up to its quota, together the whole image.
    const boxes = await Promise.all(Array.from({ length: 5 }, () => w.client.sandboxes.create({ image: 'busybox:latest' })));
    const fills = await Promise.all(boxes.map((sb) => sb.exec('dd if=/dev/zero of=/root/fill bs=1M count=250 2>&1; sync', { timeoutMs: 120_000 })));
    for (const r of fills) assert.match(r.stdout, /Disk quota exceeded|No space left on device/, r.stdout);
    // No room for another sandbox's layer: refused as the node being full, and nothing of it left.
    await assert.rejects(
      w.client.sandboxes.create({ image: 'busybox:latest' }),
      (e: WarrenError) => e.code === 'resource_exhausted' && /sandboxes' disk is full/.test(e.message),
    );
    assert.deepEqual((await w.client.sandboxes.list()).sandboxes.map((s) => s.id).sort(), boxes.map((b) => b.id).sort());
    assert.deepEqual((await readdir(join(dataDir, 'sandboxes'))).filter((n) => n.startsWith('sb_')).sort(), boxes.map((b) => b.id).sort());
    // Warren's own state is still writable, and what fits is still made.
    const key = await w.client.createKey({ tenant: 'after-fill' });
    assert.ok(key);
    const first = await w.client.importImage('small:1', dockerSave([makeTar([{ path: 'hello', content: 'hi\n' }])]));
    assert.equal(first.name, 'small:1');
    assert.equal((await boxes[0]!.exec('echo alive')).stdout, 'alive\n');

    // Now something else fills the data disk itself, down to less than the reserve.
    const st = await statfs(mnt);
    const free = st.bavail * st.bsize;
    execFileSync('fallocate', ['-l', String(Math.max(0, free - (RESERVE_MIB / 2) * 2 ** 20)), join(mnt, 'other')]);
    const before = await blobs();
    await assert.rejects(w.client.importImage('big:1', archive), (e: WarrenError) => e.code === 'resource_exhausted' && /data disk is full/.test(e.message));
    await assert.rejects(boxes[1]!.commit('snap:1'), (e: WarrenError) => e.code === 'resource_exhausted' && /data disk is full/.test(e.message));
    assert.deepEqual(await blobs(), before);
    assert.deepEqual((await w.client.images()).map((i) => i.name).sort(), ['busybox:latest', 'small:1']);
    // The store still takes writes: keys, deletes.
    await w.client.createKey({ tenant: 'when-full' });
    await Promise.all(boxes.slice(2).map((sb) => sb.delete()));

    // Once there is room again, a restart on the same data dir has every image and sandbox it had.
    await rm(join(mnt, 'other'));
    await w.close({ keep: true, removeData: false });
    t = await start();
    assert.deepEqual((await t.client.images()).map((i) => i.name).sort(), ['busybox:latest', 'small:1']);
    const back = await t.client.sandboxes.get(boxes[0]!.id);
    assert.equal(back.info.state, 'running');
    assert.equal((await back.exec('ls -l /root/fill | wc -l')).stdout, '1\n');
    assert.equal((await t.client.importImage('big:1', archive)).name, 'big:1');
  });
});
