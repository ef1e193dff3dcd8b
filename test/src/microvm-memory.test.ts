// run-tests: alone, measures what QEMU holds of the host's memory.
// What a microVM holds of the host's memory, on real QEMU (TCG here), from the host's view: an
// idle clone's guest is asked to drop its caches and its QEMU is paged out by the backend's idle
// pager (its guest's pages in the template's file mapping too), and its guest finds its memory
// and files intact; a guest that fills its memory is counted as holding it whatever it says, and
// holds no more than its RAM and QEMU's bounded share.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { existsSync, readdirSync } from 'node:fs';
import { copyFile, mkdir, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { DEFAULT_ID_MAP } from '@warren/images';
import { MicrovmBackend, guestKit, setupZramSwap, type BackendSandbox, type ZramSwap } from '@warren/edge';
import { IMAGE_CACHE, ownedTempDir, until } from './harness.js';
import { GUEST_CACHE, NATIVE, sh as shAgent } from './microvm-harness.js';

const MEMORY_MIB = 192;
const MiB = 2 ** 20;

/** Runs a shell command in a sandbox through its init (microvm-harness's sh). */
const sh = (sb: BackendSandbox, script: string): ReturnType<typeof shAgent> => shAgent(sb.connect, script);

test(
  'microVM memory from the host: an idle clone paged out and intact; a guest that fills its memory counted so, and bounded',
  { timeout: 300_000 },
  async () => {
    const dir = await ownedTempDir('vmmem-');
    const platform = join(dir, 'platform');
    await mkdir(platform);
    await copyFile(join(NATIVE, 'warren-init'), join(platform, 'warren-init'));
    const meta = readdirSync(IMAGE_CACHE).find((f) => /^busybox\.v\d+\.erofs$/.test(f));
    assert.ok(meta, `no busybox layer in ${IMAGE_CACHE} (bash scripts/setup.sh makes it)`);
    const data = join(IMAGE_CACHE, meta.replace(/\.erofs$/, '.data'));
    const digest = 'sha256:' + '7'.repeat(64);
    const backend = new MicrovmBackend({
      dir: join(dir, 'microvm'),
      store: {
        ensureMeta: async (d) => d === digest,
        layerPath: () => join(IMAGE_CACHE, meta),
        dataPath: () => (existsSync(data) ? data : null),
        addLayerTar: () => Promise.reject(new Error('unused')),
      },
      fsOps: { mknod: () => Promise.reject(new Error('unused')), setxattr: () => Promise.reject(new Error('unused')) },
      idMap: DEFAULT_ID_MAP,
      kit: () => guestKit(GUEST_CACHE, join(NATIVE, 'warren-vmstage'), platform),
      accel: 'tcg',
      defaultDiskMiB: 64,
      // Clones of a template: their guest memory is the template's file mapped copy-on-write.
      templateDir: join(dir, 'templates'),
      spares: 0,
      pageoutPath: join(NATIVE, 'warren-pageout'),
      // Idle a second is enough here (the default is half a minute).
      idlePolicy: { idleMs: 1000, busyCpuFraction: 0.2, regrowBytes: 4 * MiB },
      ksm: null,
    });
    const ids: string[] = [];
    // The pager moves QEMU's pages to swap: zram of this test's own (a node sets its own up at
    // start and takes it down at stop, so another test's cannot be counted on; the machine may
    // have none).
    let swap: ZramSwap | null = null;
    const create = async (id: string): Promise<BackendSandbox> => {
      ids.push(id);
      const sb = await backend.create({ id, layers: [digest], resources: { cpu: 1, memoryMiB: MEMORY_MIB, pids: 1000 } });
      await backend.started();
      return sb;
    };
    try {
      // A fresh machine may not have the zram module loaded yet (a node loads it when it starts).
      try {
        execFileSync('modprobe', ['zram'], { stdio: 'ignore' });
      } catch {
        /* built in, or loaded already: setupZramSwap says if it cannot */
      }
      swap = await setupZramSwap(1024);
      // 48 MiB the guest wrote and keeps (tmpfs): its pages in the template's file mapping.
      const idle = await create('sb_idle');
      assert.equal((await sh(idle, 'head -c 50331648 /dev/urandom > /dev/shm/keep && md5sum /dev/shm/keep > /tmp/sum')).code, 0);
      // And 16 MiB of a file on its disk, in its page cache: given back when the pager asks (reclaimed, zero).
      assert.equal(
        (await sh(idle, 'head -c 16777216 /dev/urandom > /var/tmp/file && md5sum /var/tmp/file > /var/tmp/sum && cat /var/tmp/file > /dev/null')).code,
        0,
      );
      const cachedKiB = async (): Promise<number> => Number(/^Cached:\s+(\d+) kB/m.exec((await sh(idle, 'cat /proc/meminfo')).out)?.[1]);
      const cachedBefore = await cachedKiB();
      const busy = await backend.memory('sb_idle');
      assert.ok(busy.pssBytes >= 48 * MiB, `the guest's 48 MiB are counted: ${busy.pssBytes}`);
      assert.equal(busy.heldBytes, busy.pssBytes + busy.swapHeldBytes);
      // Idle, its QEMU is paged out: the guest's own pages with it (more than QEMU's own could make).
      await until(async () => (await backend.memory('sb_idle')).swapBytes >= 48 * MiB, 60_000);
      const paged = await backend.memory('sb_idle');
      assert.ok(paged.pssBytes < busy.pssBytes - 40 * MiB, `its RAM given back: ${busy.pssBytes} → ${paged.pssBytes}`);
      assert.ok(paged.swapHeldBytes > 0 && paged.heldBytes === paged.pssBytes + paged.swapHeldBytes, 'what zram keeps of it still counts');
      // Asked first, the guest dropped its file's pages (its tmpfs stays: nothing to drop there).
      const cachedAfter = await cachedKiB();
      assert.ok(cachedAfter < cachedBefore - 12 * 1024, `the guest gave its page cache back: ${cachedBefore} → ${cachedAfter} KiB cached`);
      // What it touches comes back, as it was.
      assert.equal((await sh(idle, 'md5sum /dev/shm/keep | cmp - /tmp/sum && echo same')).out.trim(), 'same');
      assert.equal((await sh(idle, 'md5sum /var/tmp/file | cmp - /var/tmp/sum && echo same')).out.trim(), 'same');

      // A guest that takes all the memory it can (and would tell the host otherwise, had it asked):
      // counted from the host's view, and bounded by its RAM and QEMU's own share.
      const hog = await create('sb_hog');
      await sh(hog, `for i in $(seq 1 ${MEMORY_MIB}); do head -c 1048576 /dev/urandom > /dev/shm/f$i || break; done; true`);
      const held = await backend.memory('sb_hog');
      const stats = await backend.stats('sb_hog');
      // The sandbox's stats read the same proportional set (two reads of a live QEMU, a few pages apart).
      assert.ok(Math.abs(stats.memoryBytes - held.pssBytes) < 4 * MiB, `stats ${stats.memoryBytes}, memory ${held.pssBytes}`);
      assert.ok(held.heldBytes >= (MEMORY_MIB - 64) * MiB, `a full guest counts as full: ${held.heldBytes / MiB} MiB`);
      // Its RAM, TCG's code (capped), QEMU's heap and its share of the template's pages.
      assert.ok(
        held.pssBytes + held.swapBytes <= (MEMORY_MIB + 128) * MiB,
        `no more than its RAM and QEMU's share: ${(held.pssBytes + held.swapBytes) / MiB} MiB`,
      );
    } finally {
      for (const id of ids) await backend.destroy(id).catch(() => undefined);
      await backend.close();
      await swap?.close();
      await rm(dir, { recursive: true, force: true });
    }
  },
);
