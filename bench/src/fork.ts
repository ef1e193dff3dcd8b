// Warren benchmark: forks of a container sandbox that wrote 500 MB (and 1,000 small files), beside
// a create from scratch in the same run. For ×1, ×16 and ×64: the fork call's time until every
// child is running (×1: the first child), per child, and the children's memory when idle (their
// cgroups, as the API reports it) and the node's MemAvailable before and after. Prints numbers;
// asserts nothing. Targets: ×16 ≤ 1 s to all ready, ≤ 1 MiB of host memory per idle child.
// Usage: npm run bench:fork [-- --counts 1,16,64 --mb 500]
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { cpus, tmpdir, totalmem } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import type { Sandbox } from '@warren/sdk';
import { startWarrenUp } from './warren-up.js';
import { pct } from './stats.js';

const median = (xs: number[]): number => pct(xs, 50);

const { values } = parseArgs({
  options: { counts: { type: 'string', default: '1,16,64' }, mb: { type: 'string', default: '500' }, rounds: { type: 'string', default: '3' } },
});
const COUNTS = values.counts.split(',').map(Number);
const MB = Number(values.mb);
const ROUNDS = Number(values.rounds);

const memAvailableMiB = async (): Promise<number> => Number(/MemAvailable:\s+(\d+)/.exec(await readFile('/proc/meminfo', 'utf8'))?.[1] ?? 0) / 1024;

async function main(): Promise<void> {
  console.log(`machine: ${cpus().length} cores (${cpus()[0]?.model ?? '?'}), ${(totalmem() / 2 ** 30).toFixed(1)} GiB, node ${process.version}`);
  const dir = await mkdtemp(join(tmpdir(), 'warren-bench-fork-'));
  const node = await startWarrenUp(dir, ['--images', 'busybox:latest', '--memory-floor-mib', '0']);
  const c = node.client;
  try {
    const creates: number[] = [];
    for (let i = 0; i < 5; i++) {
      const t0 = performance.now();
      const sb = await c.sandboxes.create({ image: 'busybox:latest', resources: { cpu: 0.1, memoryMiB: 64 } });
      creates.push(performance.now() - t0);
      await sb.delete();
    }
    console.log(`create from scratch (busybox): p50 ${median(creates).toFixed(1)} ms`);
    const src = await c.sandboxes.create({ image: 'busybox:latest', resources: { cpu: 0.1, memoryMiB: 64 } });
    const w = await src.exec(`head -c ${MB * 1_000_000} /dev/zero > /big && mkdir /many && cd /many && for i in $(seq 1000); do echo $i > f$i; done`, {
      timeoutMs: 600_000,
    });
    if (w.exitCode !== 0) throw new Error(w.stderr);
    console.log(`source: ${MB} MB in one file and 1,000 small files written`);
    for (const n of COUNTS) {
      const times: number[] = [];
      let memPer = 0;
      let availPer = 0;
      for (let r = 0; r < ROUNDS; r++) {
        const before = await memAvailableMiB();
        const t0 = performance.now();
        const f = await src.fork({ count: n, resources: { cpu: 0.1, memoryMiB: 64 } });
        times.push(performance.now() - t0);
        if (f.errors.length) console.log(`  ${f.errors.length} of ${n} not made: ${f.errors[0]!.message}`);
        const kids: Sandbox[] = f.sandboxes;
        // Idle children's memory: their own cgroups, and what the node lost of MemAvailable.
        const used = await Promise.all(kids.map(async (k) => (await k.refresh()).usage?.memoryBytes ?? 0));
        memPer = used.reduce((a, b) => a + b, 0) / kids.length / 2 ** 20;
        availPer = (before - (await memAvailableMiB())) / kids.length;
        await Promise.all(kids.map((k) => k.delete()));
      }
      const p50 = median(times);
      console.log(
        `fork ×${n}: ${n === 1 ? 'the child' : 'all'} running in p50 ${p50.toFixed(0)} ms (min ${Math.min(...times).toFixed(0)}), ${(p50 / n).toFixed(1)} ms per child; ` +
          `idle child: ${memPer.toFixed(2)} MiB in its cgroup, node MemAvailable ${availPer >= 0 ? '−' : '+'}${Math.abs(availPer).toFixed(2)} MiB per child (page cache moves it either way)`,
      );
    }
    await src.delete();
  } finally {
    await node.stop();
    await rm(dir, { recursive: true, force: true });
  }
}

await main();
