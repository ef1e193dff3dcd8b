// run-tests: alone, fills memory until the node reclaims it.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { WarrenError, type Sandbox as SandboxInfo } from '@warren/api';
import { SandboxEndedError, type Sandbox } from '@warren/sdk';
import { notOnMicrovm, startTestWarren, until, type TestWarren } from './harness.js';

// Real memory pressure on a node whose sandboxes share a cgroup limited to LIMIT_MIB (the test's
// own: the machine stays healthy). Idle sandboxes holding memory are paged out and then paused,
// busy ones keep theirs and run, nothing within its limit is OOM-killed, creates are refused
// naming memory once nothing can be reclaimed, and no sandbox is lost.
const LIMIT_MIB = 768;
const FLOOR_MIB = 128;
const MiB = 2 ** 20;

let t: TestWarren;
before(async () => {
  t = await startTestWarren({ images: ['busybox:latest'], sandboxMemoryMiB: LIMIT_MIB, memoryFloorMiB: FLOOR_MIB });
});
after(async () => {
  await t?.close();
});

/**
 * Holds `mib` MiB, `stepMiB` at a time every `stepSeconds`, in processes that then do nothing:
 * each `dd` has read its block into its buffer and waits for ever to write it to a `sleep`.
 */
const hold = (mib: number, stepMiB = mib, stepSeconds = 0): string =>
  `for i in $(seq ${Math.ceil(mib / stepMiB)}); do dd if=/dev/zero bs=${stepMiB}M count=1 2>/dev/null | sleep 1000 & sleep ${stepSeconds}; done; wait`;

const info = (sb: Sandbox): Promise<SandboxInfo> => sb.refresh();
/** What a sandbox holds, in memory and in swap. */
const heldMiB = async (sb: Sandbox): Promise<number> => {
  const u = (await info(sb)).usage;
  return (u.memoryBytes + u.swapBytes) / MiB;
};

describe('memory pressure', () => {
  test(
    'idle sandboxes are paged out and paused first, busy ones keep their memory, creates are refused naming memory once nothing can be reclaimed',
    notOnMicrovm('a container node’s cgroups'),
    async () => {
      const small = { memoryMiB: 256, memoryRequestMiB: 16 };
      // Idle: each holds 64 MiB in a background process, then nothing runs in it.
      const idle = await Promise.all(Array.from({ length: 4 }, () => t.client.sandboxes.create({ image: 'busybox:latest', resources: small })));
      for (const sb of idle) {
        const r = await sb.exec(['sh', '-c', `(${hold(64)}) </dev/null >/dev/null 2>&1 &`]);
        assert.equal(r.exitCode, 0);
      }
      for (const sb of idle) await until(async () => (await heldMiB(sb)) >= 60, 20_000);
      // Busy: a command that holds 200 MiB and runs on.
      const busy = await t.client.sandboxes.create({ image: 'busybox:latest', resources: small });
      const busyRun = busy.exec(['sh', '-c', hold(200)], { timeoutMs: 120_000 }).catch((e: unknown) => e);
      await until(async () => (await heldMiB(busy)) >= 195, 20_000);

      // The load: sandboxes whose commands take 100 MiB each, 20 MiB every half second, until a create is refused.
      const loads: Sandbox[] = [];
      const runs: Array<Promise<unknown>> = [];
      let refusal: unknown = null;
      for (let i = 0; i < 8 && !refusal; i++) {
        const made = await t.client.sandboxes.create({ image: 'busybox:latest', resources: small }).catch((e: unknown) => e);
        if (!(made instanceof Object) || made instanceof Error) {
          refusal = made;
          break;
        }
        const sb = made as Sandbox;
        loads.push(sb);
        runs.push(sb.exec(['sh', '-c', hold(100, 20, 0.5)], { timeoutMs: 120_000 }).catch((e: unknown) => e));
        await until(async () => (await heldMiB(sb)) >= 95, 20_000);
      }
      assert.ok(refusal instanceof WarrenError, `a create was refused: ${String(refusal)}`);
      assert.equal(refusal.code, 'resource_exhausted');
      assert.equal(refusal.details.resource, 'memory');
      assert.match(
        refusal.message,
        /out of memory: \d+ MiB are available, it keeps 128 MiB free and this sandbox requests 16 MiB; its idle sandboxes are paged out and paused \(4\) already/,
      );
      assert.ok(loads.length >= 1, 'the load made at least one sandbox before the node was full');

      // The idle ones were paused (their memory paged out, where the host has swap); the busy ones
      // were not, and kept their memory (none of it swapped out).
      const swap = (await readFile('/proc/swaps', 'utf8')).trim().split('\n').length > 1;
      for (const sb of idle) {
        const x = await info(sb);
        assert.equal(x.state, 'paused', sb.id);
        if (swap) assert.ok(x.usage.memoryBytes < 16 * MiB, `${sb.id} keeps ${x.usage.memoryBytes / MiB} MiB resident`);
      }
      for (const sb of [busy, ...loads]) {
        const x = await info(sb);
        assert.equal(x.state, 'running', sb.id);
        assert.equal(x.end, null);
        assert.equal((await sb.commands()).length, 1, `${sb.id} still runs its command`);
      }
      const busyNow = await info(busy);
      assert.ok(busyNow.usage.memoryBytes >= 195 * MiB, `the busy one holds ${busyNow.usage.memoryBytes / MiB} MiB`);
      assert.ok(busyNow.usage.swapBytes < 10 * MiB, `the busy one has ${busyNow.usage.swapBytes / MiB} MiB in swap`);

      // Each pause says it was for memory (lifecycle events from the start).
      const paused = new Set<string>();
      const stop = new AbortController();
      const timer = setTimeout(() => stop.abort(), 15_000);
      try {
        for await (const ev of t.client.events({ since: 0, signal: stop.signal })) {
          if (ev.type === 'paused' && ev.reason === 'memory' && ev.sandbox) paused.add(ev.sandbox);
          if (paused.size === idle.length) break;
        }
      } catch (e) {
        if (!stop.signal.aborted) throw e;
      } finally {
        clearTimeout(timer);
      }
      assert.deepEqual([...paused].sort(), idle.map((sb) => sb.id).sort());

      // Nothing lost: every sandbox is there, and the paused ones come back on their next command.
      const listed = new Set((await t.client.sandboxes.list()).sandboxes.map((s) => s.id));
      for (const sb of [...idle, busy, ...loads]) assert.ok(listed.has(sb.id), sb.id);
      for (const sb of [busy, ...loads]) await sb.delete();
      for (const r of [busyRun, ...runs]) await r;
      const woke = await idle[0]!.exec('echo back');
      assert.equal(woke.stdout, 'back\n');
      assert.equal((await info(idle[0]!)).state, 'running');
      for (const sb of idle) await sb.delete();
    },
  );

  test(
    'a sandbox that fills its own limit is OOM-killed inside itself and ends with reason oom; its neighbour lives on',
    notOnMicrovm('a container’s memory cgroup'),
    async () => {
      const neighbour = await t.client.sandboxes.create({ image: 'busybox:latest', resources: { memoryMiB: 64 } });
      const sb = await t.client.sandboxes.create({ image: 'busybox:latest', resources: { memoryMiB: 32 } });
      // Its tmpfs (64 MiB) takes more than its limit: the writer is killed, its pages stay, and the
      // next thing its init starts leaves the kernel nothing to kill but the init.
      const fill = await sb.exec(['sh', '-c', 'cat /dev/zero > /dev/shm/fill'], { timeoutMs: 30_000 }).catch((e: unknown) => e);
      assert.ok(!(fill instanceof Error) || fill instanceof SandboxEndedError, String(fill));
      for (let i = 0; i < 5 && (await info(sb)).end === null; i++) await sb.exec('echo hello').catch(() => undefined);
      await until(async () => (await info(sb)).end !== null, 10_000);
      const end = (await info(sb)).end!;
      assert.deepEqual([end.reason, end.by], ['oom', 'agent']);
      assert.match(end.detail ?? '', /out of memory: the kernel killed its processes at its limit \(32 MiB\)/);
      assert.equal((await neighbour.exec('echo fine')).stdout, 'fine\n');
      await neighbour.delete();
      await sb.delete().catch(() => undefined);
    },
  );
});
