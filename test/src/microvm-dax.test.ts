// microVMs whose image layers are mapped into their guests (DAX: a node's default; `warren up
// --no-microvm-dax` gives virtio disks), on real QEMU (TCG here): the guest reads its image's files without
// keeping them in its page cache, every guest maps the same host file, a guest's root cannot
// change a layer for the others, and pause, resume and fork work as on virtio disks.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import type { Sandbox } from '@warren/sdk';
import { startTestWarren } from './harness.js';
import { qemuOf } from './microvm-harness.js';

const cachedKiB = async (sb: Sandbox): Promise<number> => Number(/^Cached:\s+(\d+) kB/m.exec((await sb.exec('cat /proc/meminfo')).stdout)?.[1]);

/** The layer files a microVM's QEMU maps into its guest (its `mem-path=` of a read-only node), and how much of each it has resident (KiB). */
async function mappedLayers(dataDir: string, id: string): Promise<Map<string, number>> {
  const { pid, argv } = await qemuOf(dataDir, id);
  const files = argv.flatMap((a) => (/^memory-backend-file,id=dax\d+,/.test(a) ? [/mem-path=([^,]+)/.exec(a)![1]!] : []));
  const smaps = await readFile(`/proc/${pid}/smaps`, 'utf8');
  const rss = new Map<string, number>(files.map((f) => [f, 0]));
  let current: string | null = null;
  for (const line of smaps.split('\n')) {
    const head = /^[0-9a-f]+-[0-9a-f]+ \S+ \S+ \S+ \S+\s+(.*)$/.exec(line);
    if (head) current = rss.has(head[1]!) ? head[1]! : null;
    else if (current && line.startsWith('Rss:')) rss.set(current, rss.get(current)! + Number(/(\d+)/.exec(line)![1]));
  }
  return rss;
}

const sha256 = async (file: string): Promise<string> =>
  createHash('sha256')
    .update(await readFile(file))
    .digest('hex');

test(
  'DAX layers: files read in place, one host mapping for every guest, a guest cannot write a layer, pause, resume and fork',
  { timeout: 600_000 },
  async () => {
    const t = await startTestWarren({ images: ['debian-python:latest'] });
    try {
      const spec = { image: 'debian-python:latest', backend: 'microvm' as const, resources: { memoryMiB: 256 } };
      const [a, b] = [await t.client.sandboxes.create(spec), await t.client.sandboxes.create(spec)];
      assert.match((await a.exec('ls /dev')).stdout, /pmem0/);
      // Reading the standard library (tens of MB) leaves the guest's page cache as it was.
      const before = await cachedKiB(a);
      const read = await a.exec('cat $(find /usr/lib/python3* -name "*.py") | wc -c', { timeoutMs: 120_000 });
      assert.equal(read.exitCode, 0, read.stderr);
      const readKiB = Number(read.stdout.trim()) / 1024;
      assert.ok(readKiB > 10_000, `read ${readKiB} KiB`);
      const grew = (await cachedKiB(a)) - before;
      assert.ok(grew < readKiB / 4, `the guest's page cache grew by ${grew} KiB for ${readKiB} KiB read`);
      // Both QEMUs map the same layer files, and what a guest read is resident in its mapping (the host's page cache).
      const [ma, mb] = [await mappedLayers(t.dataDir, a.id), await mappedLayers(t.dataDir, b.id)];
      assert.ok(ma.size >= 1, 'no layer file mapped');
      assert.deepEqual([...ma.keys()].sort(), [...mb.keys()].sort());
      assert.ok(Math.max(...ma.values()) > readKiB / 2, `resident in the mapping: ${JSON.stringify([...ma])}`);

      // Root in a guest writes over its persistent memory, straight to the device (O_DIRECT: through
      // the guest's page cache, its own reads of the layer then saw what it wrote until the cache was
      // dropped): the write goes nowhere, for it and the others, and the host's files stay as they are.
      const sums = new Map(await Promise.all([...ma.keys()].map(async (f) => [f, await sha256(f)] as const)));
      const devices = 'for d in /dev/pmem*; do dd if=$d bs=4096 count=64 iflag=direct 2>/dev/null | sha256sum; done';
      const inGuest = (await a.exec(devices, { user: 'root' })).stdout;
      assert.equal(inGuest.split('\n').filter((l) => /^[0-9a-f]{64} /.test(l) && !l.startsWith('e3b0c442')).length, ma.size, inGuest);
      const write = await a.exec('for d in /dev/pmem*; do dd if=/dev/urandom of=$d bs=4096 count=64 oflag=direct conv=notrunc,fsync 2>&1 || exit 1; done', {
        user: 'root',
        timeoutMs: 60_000,
      });
      assert.equal(write.exitCode, 0, write.stdout + write.stderr);
      assert.equal((await a.exec(devices, { user: 'root' })).stdout, inGuest, 'the guest reads its layers as they were');
      for (const [f, sum] of sums) assert.equal(await sha256(f), sum, `${f} changed (${write.stdout}${write.stderr})`);
      for (const sb of [a, b]) assert.equal((await sb.exec(['python3', '-c', 'import json, email; print("ok")'])).stdout, 'ok\n');

      // Paused (its state saved, its QEMU gone) and resumed, it reads its layers as before.
      await a.pause();
      assert.equal((await a.refresh()).state, 'paused');
      assert.equal((await a.exec(['python3', '-c', 'import decimal; print(decimal.Decimal(1) / 4)'])).stdout, '0.25\n');

      // Forked: each child reads its layers mapped, has its source's files, and its memory is its
      // base's RAM file mapped copy-on-write (one copy for all the children, as on disks).
      assert.equal((await b.exec('echo forked > /tmp/mark')).exitCode, 0);
      const { sandboxes: children, errors } = await b.fork({ count: 2 });
      assert.deepEqual(errors, []);
      for (const c of children) {
        assert.equal((await c.exec('cat /tmp/mark')).stdout, 'forked\n');
        assert.equal((await c.exec(['python3', '-c', 'import csv; print("ok")'])).stdout, 'ok\n');
        assert.ok((await mappedLayers(t.dataDir, c.id)).size >= 1);
        assert.match((await qemuOf(t.dataDir, c.id)).argv.join(' '), /memory-backend-file,id=microvm\.ram,size=256M,mem-path=\S+\/ram,share=off/);
      }
    } finally {
      await t.close();
    }
  },
);
