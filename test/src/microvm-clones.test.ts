// run-tests: alone, busies every core on purpose, and counts what QEMU holds of the host's memory.
// The microVM backend through the API, past the first boot: creates that clone their image's
// template (and keep their clock when it booted on a busy host), an edge restarted under its
// microVMs, what admission counts of a QEMU, the accelerator probe (the first boots, pause and
// the API's basics: microvm.test.ts).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync, readFileSync, readdirSync, readlinkSync } from 'node:fs';
import { mkdir, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { chooseAccel, guestKit, guestRuns, processCpuSeconds, startMicrovm, vmFiles } from '@warren/edge';
import type { Sandbox } from '@warren/sdk';
import { forceCleanup, http, ownedTempDir, startTestWarren, type TestWarren, until } from './harness.js';
import { NATIVE, GUEST_CACHE, platformOf, busyboxLayer, alive, withMicrovm, qemuOf, qmpStatus, identity } from './microvm-harness.js';

test('creates clone the template of their image and size: no boot, each its own hostname, clock and randomness and disk', { timeout: 240_000 }, async () => {
  const t = await startTestWarren({ images: ['busybox:latest'] });
  const made: Sandbox[] = [];
  try {
    const create = async (): Promise<{ sb: Sandbox; ms: number }> => {
      const t0 = performance.now();
      const sb = await t.client.sandboxes.create({ image: 'busybox:latest', backend: 'microvm', resources: { memoryMiB: 256 } });
      made.push(sb);
      return { sb, ms: performance.now() - t0 };
    };
    const first = await create();
    const second = await create();
    const templates = join(t.dataDir, 'microvm-templates');
    const [name, ...more] = readdirSync(templates);
    assert.deepEqual(more, [], 'one template for one image and size');
    // Each QEMU maps the template's RAM copy-on-write: nothing of it is copied per sandbox.
    for (const { sb } of [first, second])
      assert.ok((await qemuOf(t.dataDir, sb.id)).argv.some((a) => a.endsWith(`mem-path=${join(templates, name!, 'ram')},share=off`)));
    // The template's guest was saved long before: each clone is told who and when it is.
    const [a, b] = [await identity(first.sb), await identity(second.sb)];
    assert.equal(a.hostname, first.sb.id.replace(/_/g, '-'));
    assert.equal(b.hostname, second.sb.id.replace(/_/g, '-'));
    for (const x of [a, b]) assert.ok(Math.abs(x.clock - Date.now() / 1000) < 5, `guest clock ${x.clock}`);
    assert.match(a.random, /^[0-9a-f]{32}$/);
    assert.notEqual(a.random, b.random, 'clones of one snapshot must not share their random state');
    // Each has its own writable disk.
    await first.sb.exec('echo mine > /root/mine');
    assert.equal((await second.sb.exec('cat /root/mine')).exitCode, 1);
    assert.equal((await first.sb.exec('cat /root/mine')).stdout, 'mine\n');
    console.log(`microVM create with a new template ${first.ms.toFixed(0)} ms, from the template ${second.ms.toFixed(0)} ms (TCG)`);
  } finally {
    for (const sb of made) await sb.delete().catch(() => undefined);
    await t.close();
  }
});

test(
  'a template whose state is corrupt or another’s: the create fails clearly, nothing is left, the next create makes it again',
  { timeout: 300_000 },
  async () => {
    const t = await startTestWarren({ images: ['busybox:latest'] });
    try {
      const templates = join(t.dataDir, 'microvm-templates');
      const create = (memoryMiB: number): Promise<Sandbox> =>
        t.client.sandboxes.create({ image: 'busybox:latest', backend: 'microvm', resources: { memoryMiB } });
      await (await create(256)).delete();
      const [big] = readdirSync(templates);
      await (await create(128)).delete();
      const small = readdirSync(templates).find((n) => n !== big)!;
      for (const bad of [await readFile(join(templates, small, 'state')), Buffer.from('QEVM not a saved state')]) {
        await writeFile(join(templates, big!, 'state'), bad);
        await assert.rejects(create(256), (e: Error & { code?: string }) => {
          assert.equal(e.code, 'unavailable', e.message);
          return true;
        });
        assert.ok(!existsSync(join(templates, big!)), 'the bad template is dropped');
        assert.deepEqual(
          readdirSync(join(t.dataDir, 'microvm')).filter((n) => !n.startsWith('.spare-')),
          [],
          'no sandbox dir left',
        );
        assert.ok(!(await t.client.sandboxes.list()).sandboxes.some((s) => s.info.state === 'creating' || s.info.state === 'running'));
        const again = await create(256);
        assert.equal((await again.exec('echo ok')).stdout, 'ok\n');
        await again.delete();
        assert.ok(existsSync(join(templates, big!, 'ready')), 'made again');
      }
    } finally {
      await t.close();
    }
  },
);

test(
  'a template booted on a busy host: its clones keep the TSC as their clock (tickless when idle), not the jiffies fallback',
  { timeout: 180_000 },
  async () => {
    // Busy loops on every core while the template boots and the clone starts: a TCG guest loses
    // ticks then, and a TSC left to a watchdog of ticks is turned off for good (every clone of the
    // template then took a timer interrupt every 4 ms, idle: 4.5 % of a CPU instead of 0.6 %).
    const spinners = Array.from({ length: 3 }, () => spawn('sh', ['-c', 'while :; do :; done'], { stdio: 'ignore' }));
    const t = await startTestWarren({ images: ['busybox:latest'] }).catch((e: unknown) => {
      for (const s of spinners) s.kill('SIGKILL');
      throw e;
    });
    try {
      const sb = await t.client.sandboxes.create({ image: 'busybox:latest', backend: 'microvm', resources: { memoryMiB: 128 } });
      const clock = async (): Promise<{ source: string; uptime: number }> => {
        const [source = '', uptime = ''] = (await sb.exec('cat /sys/devices/system/clocksource/clocksource0/current_clocksource /proc/uptime')).stdout.split(
          '\n',
        );
        return { source, uptime: Number(uptime.split(' ')[0]) };
      };
      // Still loaded: until the guest settled its clock (the early TSC replaced), and 3 s of its time more.
      let settled = { source: 'tsc-early', uptime: 0 };
      await until(async () => (settled = await clock()).source !== 'tsc-early', 60_000);
      await until(async () => (await clock()).uptime > settled.uptime + 3, 60_000);
      for (const s of spinners) s.kill('SIGKILL');
      assert.equal((await clock()).source, 'tsc');
      await sb.delete();
    } finally {
      for (const s of spinners) s.kill('SIGKILL');
      await t.close();
    }
  },
);

test('a guest whose init never answers: the create fails with unavailable after its boot timeout, QEMU gone', { timeout: 120_000 }, async () => {
  const dir = await ownedTempDir('microvm-');
  // Inside the dir: what the guest finds at /.warren is this dir's files alone (no owner mark).
  const platform = join(dir, 'platform');
  await mkdir(platform);
  try {
    await writeFile(join(platform, 'warren-init'), '#!/bin/sh\necho init is stuck\nexec sleep 100000\n', { mode: 0o755 });
    const kit = await guestKit(GUEST_CACHE, join(NATIVE, 'warren-vmstage'), platform);
    const t0 = performance.now();
    await assert.rejects(
      startMicrovm(dir, kit, { cpus: 1, memoryMiB: 128, layers: [busyboxLayer()], diskMiB: 16, accel: 'tcg', bootTimeoutMs: 5_000 }),
      (e: Error & { code?: string }) => {
        assert.equal(e.code, 'unavailable');
        assert.match(e.message, /did not answer/);
        return true;
      },
    );
    assert.ok(performance.now() - t0 >= 5_000);
    const pid = Number(await readFile(vmFiles(dir).pid, 'utf8'));
    assert.equal(alive(pid), false);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});

test('an edge restarted: its microVMs run on and are adopted (shell sessions too), its template is used again', { timeout: 240_000 }, async () => {
  const first = await startTestWarren({ images: ['busybox:latest'] });
  let second: TestWarren | null = null;
  try {
    const sb = await first.client.sandboxes.create({ image: 'busybox:latest', backend: 'microvm', resources: { memoryMiB: 256 } });
    const sh = await sb.shell();
    await sh.exec('cd /tmp; export KEPT=yes');
    const { pid } = await qemuOf(first.dataDir, sb.id);
    const templates = join(first.dataDir, 'microvm-templates');
    const ready = (await stat(join(templates, readdirSync(templates)[0]!, 'ready'))).mtimeMs;
    await first.close({ keep: true });
    assert.ok(alive(pid), 'the microVM runs on while its edge is down');
    // With nobody at the port the guest's mux waits for the host to come back, not spins.
    const cpu0 = (await processCpuSeconds(pid))!;
    await new Promise((r) => setTimeout(r, 3000));
    const idle = (await processCpuSeconds(pid))! - cpu0;
    assert.ok(idle < 0.6, `the microVM used ${idle.toFixed(2)} s of CPU in 3 s with its edge down`);
    second = await startTestWarren({ images: ['busybox:latest'], dataDir: first.dataDir });
    const k = await second.client.sandboxes.get(sb.id);
    assert.equal(k.info.state, 'running');
    assert.equal((await k.exec('echo $KEPT $(pwd)', { session: sh.id })).stdout, 'yes /tmp\n');
    const other = await second.client.sandboxes.create({ image: 'busybox:latest', backend: 'microvm', resources: { memoryMiB: 256 } });
    assert.equal((await stat(join(templates, readdirSync(templates)[0]!, 'ready'))).mtimeMs, ready, 'the template was not made again');
    assert.equal((await other.exec('hostname')).stdout, `${other.id.replace(/_/g, '-')}\n`);
    await other.delete();
    await k.delete();
    assert.equal(alive(pid), false);
  } finally {
    await second?.close();
    await first.close();
  }
});

test(
  'a spare QEMU waits for the next clone: that create takes it (its directory a link to the spare’s); delete and stop leave none',
  { timeout: 240_000 },
  async () => {
    const t = await startTestWarren({ images: ['busybox:latest'] });
    const vms = join(t.dataDir, 'microvm');
    const spares = (): string[] => readdirSync(vms).filter((n) => n.startsWith('.spare-'));
    let sparePids: number[] = [];
    try {
      const create = (): Promise<Sandbox> => t.client.sandboxes.create({ image: 'busybox:latest', backend: 'microvm', resources: { memoryMiB: 256 } });
      const first = await create();
      // The create asked for a spare of its template: a QEMU that runs the template's state
      // ahead, with one command run (its file `spare-ready` says so).
      await until(async () => spares().length === 1 && existsSync(join(vms, spares()[0]!, 'spare-ready')), 30_000);
      const spare = spares()[0]!;
      const sparePid = Number(await readFile(join(vms, spare, 'qemu.pid'), 'utf8'));
      assert.ok(alive(sparePid));
      assert.equal(await qmpStatus(join(vms, spare, 'qmp.sock')), 'running', 'the spare’s guest runs before any create takes it');
      // It waits a while: the sandbox's clock is still its own (the HELLO sets it).
      await new Promise((r) => setTimeout(r, 2000));
      const second = await create();
      const clock = Number((await second.exec('date +%s')).stdout);
      assert.ok(Math.abs(clock - Date.now() / 1000) < 3, `guest clock ${clock}`);
      assert.equal(readlinkSync(join(vms, second.id)), spare, 'the sandbox is the spare');
      assert.equal((await qemuOf(t.dataDir, second.id)).pid, sparePid);
      assert.equal((await second.exec('hostname')).stdout, `${second.id.replace(/_/g, '-')}\n`);
      await second.delete();
      assert.equal(alive(sparePid), false);
      assert.ok(!existsSync(join(vms, spare)), 'the spare’s directory went with its sandbox');
      await first.delete();
      await until(async () => spares().length === 1 && existsSync(join(vms, spares()[0]!, 'spare-ready')), 30_000);
      sparePids = spares().map((n) => Number(readFileSync(join(vms, n, 'qemu.pid'), 'utf8')));
    } finally {
      await t.close({ keep: true, removeData: false });
    }
    try {
      // A stopped node leaves no spare running (its sandboxes, none here, would run on).
      for (const p of sparePids) assert.equal(alive(p), false);
      assert.deepEqual(spares(), []);
    } finally {
      await forceCleanup(t.dataDir);
    }
  },
);

test('admission counts what a microVM’s QEMU really holds beyond its request', { timeout: 180_000 }, async () => {
  // No spare: one running ahead shares the template's pages with the clone, and its share of them
  // is not the clone's (the clone's proportional set is then below its guest's memory).
  await withMicrovm(
    // The default request, a quarter of its guest (32 MiB): what the VMM holds past it is counted on top.
    { resources: { memoryMiB: 128 } },
    async ({ t, sb }) => {
      type NodeView = { allocated: { memoryMiB: number }; committed: { memoryMiB: number }; used: { memoryMiB: number; swapMiB: number } };
      const node = async (): Promise<NodeView> => ((await http(t, 'GET', '/v1/nodes')).json as { nodes: NodeView[] }).nodes[0]!;
      assert.equal((await node()).allocated.memoryMiB, 32);
      // The guest fills most of its memory (its page cache): the VMM then holds that, its own, and TCG's code cache.
      // Random bytes: zeros would be merged into the host's zero page (KSM) and held by no one.
      assert.equal((await sb.exec('head -c 90m /dev/urandom > /root/fill && sync && echo ok')).stdout, 'ok\n');
      // Counted by its guest's size it would be 32 MiB plus nothing (it holds less than 128).
      await until(async () => (await node()).committed.memoryMiB > 90, 20_000).catch(async (e: unknown) => {
        throw new Error(`${String(e)}: ${JSON.stringify(await node())}`);
      });
      const n = await node();
      assert.ok(n.committed.memoryMiB <= n.used.memoryMiB + n.used.swapMiB + 1, `committed ${n.committed.memoryMiB} MiB, used ${JSON.stringify(n.used)}`);
    },
    { microvm: { spares: 0 } },
  );
});

test(
  'the accelerator probe: a guest that runs says so on its console; a kernel that is none does not; the answer is kept per host boot',
  { timeout: 120_000 },
  async () => {
    const kit = await guestKit(GUEST_CACHE, join(NATIVE, 'warren-vmstage'), await platformOf(NATIVE));
    assert.equal(await guestRuns(kit, 'tcg', 60_000), true);
    const dir = await ownedTempDir('accel-');
    try {
      const bogus = join(dir, 'vmlinuz');
      await writeFile(bogus, 'not a kernel');
      assert.equal(await guestRuns({ ...kit, kernel: bogus }, 'tcg', 60_000), false);
      // No /dev/kvm: TCG, nothing probed.
      let probed = 0;
      const counting = async (): Promise<typeof kit> => {
        probed++;
        return { ...kit, kernel: bogus };
      };
      assert.equal(await chooseAccel(dir, counting, { kvmDevice: join(dir, 'no-kvm') }), 'tcg');
      assert.equal(probed, 0);
      // A device that is there is probed once per boot of the host (here the probe's guest cannot run: TCG).
      assert.equal(await chooseAccel(dir, counting, { kvmDevice: bogus, timeoutMs: 5000 }), 'tcg');
      assert.equal(await chooseAccel(dir, counting, { kvmDevice: bogus, timeoutMs: 5000 }), 'tcg');
      assert.equal(probed, 1);
      const boot = (await readFile('/proc/sys/kernel/random/boot_id', 'utf8')).trim();
      assert.equal(await readFile(join(dir, `accel-${boot}`), 'utf8'), 'tcg');
      await writeFile(join(dir, `accel-${boot}`), 'kvm');
      assert.equal(await chooseAccel(dir, counting, { kvmDevice: bogus }), 'kvm');
      assert.equal(probed, 1);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  },
);
