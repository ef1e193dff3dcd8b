// run-tests: alone, four TCG guests counting, their clocks compared to the host's.
// A microVM forked N ways on real QEMU (TCG here): the backend freezes a running microVM as a fork
// base (its memory, devices and disk) and starts children from it, each resuming the same saved
// state with memory of its own (the base's file mapped copy-on-write), a disk of its own and an
// identity of its own (hostname, address, randomness, clock) from the agent's HELLO.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, readdirSync } from 'node:fs';
import { copyFile, mkdir, rm } from 'node:fs/promises';
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import { DEFAULT_ID_MAP, LayerStore } from '@warren/images';
import { MicrovmBackend, guestKit, type BackendCreateSpec, type BackendSandbox } from '@warren/edge';
import { IMAGE_CACHE, ownedTempDir, until } from './harness.js';
import { GUEST_CACHE, NATIVE, sh as shAgent } from './microvm-harness.js';

const MEMORY_MIB = 256;

/** busybox's EROFS layer in the image cache (`digest` names it) beside the layers of a real store (what baseLayer makes). */
function busyboxStore(layers: LayerStore): { digest: string; store: ConstructorParameters<typeof MicrovmBackend>[0]['store'] } {
  const meta = readdirSync(IMAGE_CACHE).find((f) => /^busybox\.v\d+\.erofs$/.test(f));
  assert.ok(meta, `no busybox layer in ${IMAGE_CACHE} (bash scripts/setup.sh makes it)`);
  const data = join(IMAGE_CACHE, meta.replace(/\.erofs$/, '.data'));
  const digest = 'sha256:' + '0'.repeat(64);
  return {
    digest,
    store: {
      ensureMeta: async (d) => d === digest || layers.ensureMeta(d),
      layerPath: (d) => (d === digest ? join(IMAGE_CACHE, meta) : layers.layerPath(d)),
      dataPath: (d) => (d !== digest ? layers.dataPath(d) : existsSync(data) ? data : null),
      addLayerTar: (source, o) => layers.addLayerTar(source, o),
    },
  };
}

/** Runs a shell command in a sandbox through its init (microvm-harness's sh). */
const sh = (sb: BackendSandbox, script: string): ReturnType<typeof shAgent> => shAgent(sb.connect, script);

const counter = async (sb: BackendSandbox): Promise<number> => Number((await sh(sb, 'cat /tmp/c')).out);

test(
  'a running microVM forked 4 ways: each child runs on from the fork with its own memory, disk and identity; the base goes with its entry',
  { timeout: 300_000 },
  async () => {
    const dir = await ownedTempDir('fork-');
    // What the guest finds at /.warren: warren-init alone.
    const platform = join(dir, 'platform');
    await mkdir(platform);
    await copyFile(join(NATIVE, 'warren-init'), join(platform, 'warren-init'));
    const layers = new LayerStore(join(dir, 'layers'));
    await layers.open();
    const { digest, store } = busyboxStore(layers);
    // Each sandbox's link: a tap QEMU opens (on the host it stays unaddressed: what the guest makes of its HELLO is under test).
    const slot = randomBytes(2);
    const link = (i: number): NonNullable<BackendCreateSpec['tap']> => ({
      ifname: `wf${slot.toString('hex')}${i}`,
      address: `10.254.${slot[0]! % 200}.${2 * i + 1}`,
      prefix: 31,
      gateway: `10.254.${slot[0]! % 200}.${2 * i}`,
    });
    const open = (): MicrovmBackend =>
      new MicrovmBackend({
        dir: join(dir, 'microvm'),
        store,
        fsOps: { mknod: () => Promise.reject(new Error('unused')), setxattr: () => Promise.reject(new Error('unused')) },
        idMap: DEFAULT_ID_MAP,
        kit: () => guestKit(GUEST_CACHE, join(NATIVE, 'warren-vmstage'), platform),
        accel: 'tcg',
        defaultDiskMiB: 64,
        templateDir: null,
        bindTap: async () => undefined,
      });
    let backend = open();
    const ids: string[] = [];
    const create = async (id: string, layers: string[], i: number | null): Promise<BackendSandbox> => {
      ids.push(id);
      return backend.create({ id, layers, resources: { cpu: 1, memoryMiB: MEMORY_MIB, pids: 1000 }, tap: i === null ? undefined : link(i) });
    };
    try {
      assert.equal(backend.capabilities.fork, true);
      const source = await create('sb_source', [digest], 0);
      await sh(source, 'echo frozen > /root/at-fork');
      // Each count is written aside and renamed into place: a read never finds the file emptied
      // for its next write (a fork caught between the two read as no line at all).
      await sh(source, '(i=0; while true; do i=$((i+1)); echo $i > /tmp/c.n; mv /tmp/c.n /tmp/c; sleep 0.1; done) > /dev/null 2>&1 &');
      await until(async () => (await counter(source)) > 2, 30_000);
      const baseId = 'fb_' + randomBytes(12).toString('hex');

      // Freeze as the edge does: the CPUs stopped around it, then running again.
      await backend.pause('sb_source');
      const t0 = performance.now();
      await backend.freeze('sb_source', baseId);
      const freezeMs = performance.now() - t0;
      assert.deepEqual(await backend.bases(), [baseId]);
      await backend.resume('sb_source');
      const sourceAtFork = await counter(source);

      const t1 = performance.now();
      const children = await Promise.all([1, 2, 3, 4].map((i) => create(`sb_child${i}`, [digest, `fork:${baseId}`], i)));
      const forkMs = performance.now() - t1;

      const seen = await Promise.all(
        children.map(async (c) => {
          const r = await sh(
            c,
            "cat /tmp/c; hostname; ip -4 -o addr show eth0 | awk '{print $4}'; date +%s; head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \\n'",
          );
          const [count, hostname, address, clock, random] = r.out.split('\n');
          return { count: Number(count), hostname, address, clock: Number(clock), random };
        }),
      );
      seen.forEach((s, i) => {
        assert.equal(s.hostname, `sb-child${i + 1}`);
        assert.equal(s.address, `${link(i + 1).address}/31`);
        assert.ok(Math.abs(s.clock - Date.now() / 1000) < 5, `child ${i + 1}'s clock: ${s.clock}`);
        assert.match(s.random!, /^[0-9a-f]{32}$/);
        // The loop was frozen with the guest: it counts on from where the source stopped (not from a boot).
        assert.ok(s.count >= sourceAtFork - 1, `child ${i + 1} counts from ${s.count}, the source was at ${sourceAtFork}`);
      });
      assert.equal(new Set(seen.map((s) => s.random)).size, 4, 'each child its own randomness');
      // Each child's loop runs on, and so does the source's.
      await Promise.all([...children, source].map((c, i) => until(async () => (await counter(c)) > (seen[i]?.count ?? sourceAtFork) + 5, 30_000)));
      const src = await sh(source, "hostname; ip -4 -o addr show eth0 | awk '{print $4}'");
      assert.equal(src.out, `sb-source\n${link(0).address}/31\n`);

      // Their disks are their own: what one writes the others and the source do not see.
      assert.equal((await sh(children[0]!, 'echo mine > /root/mine && sync && cat /root/mine')).out, 'mine\n');
      for (const other of [...children.slice(1), source]) assert.equal((await sh(other, 'test -e /root/mine')).code, 1);
      assert.equal((await sh(children[3]!, 'cat /root/at-fork')).out, 'frozen\n');

      // The base's files as a layer: a microVM booted on it finds what its source had written.
      const layer = await backend.baseLayer(baseId, { exclude: [], excludeRegex: [] });
      const onLayer = await create('sb_layered', [digest, layer.digest], 6);
      assert.equal((await sh(onLayer, 'cat /root/at-fork; test -e /root/mine || echo none')).out, 'frozen\nnone\n');

      // A paused source frozen stays stopped, and is saved to disk after as any paused microVM;
      // one saved to disk is frozen from its saved state.
      const atSecond = await counter(source);
      await backend.pause('sb_source');
      const [second, third] = ['fb_' + randomBytes(12).toString('hex'), 'fb_' + randomBytes(12).toString('hex')];
      await backend.freeze('sb_source', second);
      assert.equal(await backend.reclaim('sb_source'), 0);
      await backend.freeze('sb_source', third);
      const late = await create('sb_child5', [digest, `fork:${third}`], 5);
      await backend.resume('sb_source');
      const [lateCount, sourceCount] = [await counter(late), await counter(source)];
      assert.ok(lateCount >= atSecond && sourceCount >= atSecond, `the source at ${sourceCount}, its late fork at ${lateCount}, both from ${atSecond}`);
      assert.equal((await sh(late, 'hostname')).out, 'sb-child5\n');
      // A fork without a network link of its own (its source had one) starts all the same.
      const unlinked = await create('sb_unlinked', [digest, `fork:${third}`], null);
      assert.equal((await sh(unlinked, 'hostname')).out, 'sb-unlinked\n');
      await backend.releaseLayers([digest, `fork:${second}`, `fork:${third}`]);
      assert.deepEqual(await backend.bases(), [baseId]);

      // An edge restarted: its forks are adopted as any microVM, its base is still there.
      await backend.close();
      backend = open();
      assert.deepEqual(await backend.bases(), [baseId]);
      const adopted = await backend.adopt('sb_child1');
      assert.ok(adopted);
      const before = await counter(adopted);
      await until(async () => (await counter(adopted)) > before, 30_000);
      // A fork (adopted, at that) forks as any microVM: its child counts on from its count.
      await backend.pause('sb_child1');
      const fourth = 'fb_' + randomBytes(12).toString('hex');
      await backend.freeze('sb_child1', fourth);
      await backend.resume('sb_child1');
      const grandchild = await create('sb_grandchild', [digest, `fork:${fourth}`], 7);
      assert.ok((await counter(grandchild)) >= before);
      assert.equal((await sh(grandchild, 'hostname; cat /root/mine')).out, 'sb-grandchild\nmine\n');

      console.log(
        `microVM fork (TCG, ${MEMORY_MIB} MiB): freeze ${freezeMs.toFixed(0)} ms, 4 children running ${forkMs.toFixed(0)} ms; counters at fork ${sourceAtFork}, children ${seen.map((s) => s.count).join(', ')}`,
      );
      for (const id of ids.splice(0)) await backend.destroy(id);
      // No sandbox stands on the base any more: the edge names its entry, and it goes.
      await backend.releaseLayers([digest, `fork:${baseId}`, `fork:${fourth}`]);
      assert.deepEqual(await backend.bases(), []);
      assert.deepEqual(readdirSync(join(dir, 'microvm', '.fork-bases')), []);
    } finally {
      for (const id of ids) await backend.destroy(id).catch(() => undefined);
      await backend.close();
      await rm(dir, { recursive: true, force: true });
    }
  },
);
