// Warren benchmark: idle density and pause/resume. Fills one node with idle debian-python
// sandboxes (each with a live shell session and a sleeping Python process), pausing each once it
// is set up, until admission stops, the target count is reached or the host runs low; then
// measures pause, resume and the first command after a transparent resume at that density, and
// warm-pool claims. Prints numbers; asserts nothing.
// Usage: npm run bench:idle [-- --max 2000 --zram-mib 16384]
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { cpus, tmpdir, totalmem } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { WarrenError, type Sandbox, type Shell } from '@warren/sdk';
import { startWarrenUp } from './warren-up.js';
import { pct, pool } from './stats.js';

const { values } = parseArgs({
  options: {
    max: { type: 'string', default: '2000' },
    'zram-mib': { type: 'string', default: '16384' },
    'min-free-mib': { type: 'string', default: '2048' },
    sample: { type: 'string', default: '100' },
  },
});
const MAX = Number(values.max);
const MIN_FREE_MIB = Number(values['min-free-mib']);
const SAMPLE = Number(values.sample);

async function memAvailableMiB(): Promise<number> {
  return Number(/MemAvailable:\s+(\d+) kB/.exec(await readFile('/proc/meminfo', 'utf8'))?.[1] ?? 0) / 1024;
}

const ms = (xs: number[]): string => `p50 ${pct(xs, 50).toFixed(1)} ms, p99 ${pct(xs, 99).toFixed(1)} ms`;
const mib = (b: number): string => `${(b / 2 ** 20).toFixed(1)} MiB`;

async function main(): Promise<void> {
  console.log(`machine: ${cpus().length} cores (${cpus()[0]?.model ?? '?'}), ${(totalmem() / 2 ** 30).toFixed(1)} GiB, node ${process.version}`);
  const dir = await mkdtemp(join(tmpdir(), 'warren-bench-idle-'));
  const node = await startWarrenUp(dir, ['--zram-swap-mib', values['zram-mib'], '--memory-floor-mib', '0']);
  const c = node.client;
  const boxes: Array<{ sb: Sandbox; sh: Shell }> = [];
  try {
    // Fill.
    const running: number[] = [];
    const pausedMem: number[] = [];
    const createMs: number[] = [];
    let stop = 'the target count';
    const t0 = performance.now();
    const availAtStart = await memAvailableMiB();
    while (boxes.length < MAX) {
      if ((await memAvailableMiB()) < MIN_FREE_MIB) {
        stop = `the host's available memory (< ${MIN_FREE_MIB} MiB)`;
        break;
      }
      let sb: Sandbox;
      const t = performance.now();
      try {
        sb = await c.sandboxes.create({ image: 'debian-python:latest', resources: { memoryMiB: 256, cpu: 0.5 }, labels: { bench: 'idle' } });
      } catch (e) {
        if (e instanceof WarrenError && e.code === 'resource_exhausted') {
          stop = `admission (${e.message})`;
          break;
        }
        throw e;
      }
      createMs.push(performance.now() - t);
      const sh = await sb.shell({ cwd: '/' });
      await sh.exec('python3 -c "import time; time.sleep(10**6)" > /dev/null 2>&1 &');
      // Every 20th: let Python finish starting before its memory is read.
      await new Promise((r) => setTimeout(r, boxes.length % 20 === 0 ? 500 : 30));
      const before = await sb.refresh();
      await sb.pause();
      if (boxes.length % 20 === 0) {
        // A pause answers before its page-out: the memory is read once that is done (≤ 1 s).
        let after = await sb.refresh();
        for (const end = performance.now() + 1000; after.usage.memoryBytes > before.usage.memoryBytes / 2 && performance.now() < end; ) {
          await new Promise((r) => setTimeout(r, 20));
          after = await sb.refresh();
        }
        running.push(before.usage.memoryBytes);
        pausedMem.push(after.usage.memoryBytes);
      }
      boxes.push({ sb, sh });
      if (boxes.length % 250 === 0)
        console.log(
          `  ${boxes.length} idle sandboxes, ${((performance.now() - t0) / 1000).toFixed(0)} s, host available ${(await memAvailableMiB()).toFixed(0)} MiB`,
        );
    }
    const node1 = (await c.nodes()).nodes[0]!;
    console.log(`held ${boxes.length} idle paused debian-python sandboxes (each a shell session + a sleeping python3); stopped by ${stop}`);
    console.log(`create while filling: ${ms(createMs)}`);
    const perBox = ((availAtStart - (await memAvailableMiB())) / Math.max(1, boxes.length)) * 2 ** 20;
    console.log(
      `memory per sandbox (its cgroup, median of every 20th): running ${mib(pct(running, 50))}, paused ${mib(pct(pausedMem, 50))} (the rest in swap); the host's available memory fell by ${mib(perBox)} per paused sandbox (zram, kernel and Warren included)`,
    );
    console.log(
      `node: ${node1.sandboxes} sandboxes, ${node1.paused} paused; memory used ${node1.used.memoryMiB} MiB + ${node1.used.swapMiB} MiB in swap (uncompressed); committed ${node1.committed.memoryMiB} of ${node1.capacity.memoryMiB} MiB; host available ${(await memAvailableMiB()).toFixed(0)} MiB`,
    );

    // Latencies at that density, on a sample spread over the node.
    const sample = boxes.filter((_, i) => i % Math.max(1, Math.floor(boxes.length / SAMPLE)) === 0).slice(0, SAMPLE);
    const resume: number[] = [];
    const pause: number[] = [];
    const first: number[] = [];
    for (const { sb } of sample) {
      let t = performance.now();
      await sb.resume();
      resume.push(performance.now() - t);
      t = performance.now();
      await sb.pause();
      pause.push(performance.now() - t);
    }
    for (const { sh } of sample) {
      const t = performance.now();
      await sh.exec('echo hi');
      first.push(performance.now() - t);
      const sb = boxes.find((b) => b.sh === sh)!.sb;
      await sb.pause();
    }
    console.log(`pause answered (freeze; the page-out follows in the background), a woken sandbox: ${ms(pause)}`);
    console.log(`resume: ${ms(resume)}`);
    console.log(`first command on a paused sandbox (transparent resume, shell session): ${ms(first)}`);

    // Warm pool: claims.
    const p = await c.pools.create({ image: 'busybox:latest', resources: { memoryMiB: 64, cpu: 0.1 }, size: 100 });
    for (let i = 0; i < 600 && (await c.pools.list()).find((x) => x.id === p.id)!.ready < 100; i++) await new Promise((r) => setTimeout(r, 100));
    const claimOne: number[] = [];
    const claimed: Sandbox[] = [];
    for (let i = 0; i < 30; i++) {
      const t = performance.now();
      claimed.push(await c.sandboxes.create({ image: 'busybox:latest', resources: { memoryMiB: 64, cpu: 0.1 } }));
      claimOne.push(performance.now() - t);
    }
    const burst = await pool(60, 16, () => c.sandboxes.create({ image: 'busybox:latest', resources: { memoryMiB: 64, cpu: 0.1 } }));
    claimed.push(...burst.results);
    const stats = (await c.pools.list()).find((x) => x.id === p.id)!;
    console.log(
      `warm pool claim, one at a time: ${ms(claimOne)}; 60 claims with 16 in flight: ${((60 / burst.wallMs) * 1000).toFixed(0)} claims/s (${stats.claims} claims)`,
    );
    await c.pools.delete(p.id);
    for (const sb of claimed) await sb.delete();
  } finally {
    console.log('stopping (removes every sandbox)...');
    await node.stop();
    await rm(dir, { recursive: true, force: true }).catch(() => undefined);
  }
}

await main();
