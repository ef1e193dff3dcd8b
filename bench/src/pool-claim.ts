// Warren benchmark: creates that claim a warm pool's sandbox, against plain creates of the same
// spec in the same run. A pool of `--size` busybox sandboxes is made and filled; then `--size`
// creates one at a time claim them (the pool refills behind them), then, `--rounds` times, it is
// filled again and `--size` creates from 16 clients claim them at once (Warren's CPU per claim read
// from /proc beside the rate). Prints numbers; asserts nothing.
// Usage: npm run bench:pool [-- --size 64 --rounds 3]
import { mkdtemp } from 'node:fs/promises';
import { chmodSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { Warren, type Sandbox } from '@warren/sdk';
import { machineLine } from './side-by-side.js';
import { fmt, pct, pool, processCpuSeconds } from './stats.js';
import { startWarrenUp } from './warren-up.js';

const { values } = parseArgs({ options: { size: { type: 'string', default: '64' }, rounds: { type: 'string', default: '3' } } });
const SIZE = Number(values.size);
const ROUNDS = Math.max(1, Number(values.rounds));
const SPEC = { image: 'busybox:latest', resources: { cpu: 0.25, memoryMiB: 128 } };

async function main(): Promise<void> {
  console.log(machineLine());
  const dataDir = await mkdtemp('/tmp/warren-bench-pool-');
  chmodSync(dataDir, 0o711);
  const srv = await startWarrenUp(dataDir, [], { removeDataDir: true });
  const w = new Warren({ url: srv.url, apiKey: srv.key });
  const made: Sandbox[] = [];
  try {
    // Plain creates of the same spec first, for the same run's anchor.
    const plain: number[] = [];
    for (let i = 0; i < SIZE; i++) {
      const t = performance.now();
      made.push(await w.sandboxes.create(SPEC));
      plain.push(performance.now() - t);
    }
    await pool(made.length, 8, (i) => made[i]!.delete());
    made.length = 0;
    const p = await w.pools.create({ ...SPEC, size: SIZE });
    const filled = async (): Promise<void> => {
      while (((await w.pools.list()).find((x) => x.id === p.id)?.ready ?? 0) < SIZE) await new Promise((r) => setTimeout(r, 200));
    };
    await filled();
    const one: number[] = [];
    for (let i = 0; i < SIZE; i++) {
      const t = performance.now();
      made.push(await w.sandboxes.create(SPEC));
      one.push(performance.now() - t);
    }
    const bursts: Array<{ rate: number; cpuMs: number; claims: number }> = [];
    for (let r = 0; r < ROUNDS; r++) {
      await pool(made.length, 8, (i) => made[i]!.delete());
      made.length = 0;
      await filled();
      const before = (await w.pools.list()).find((x) => x.id === p.id)?.claims ?? 0;
      const [t0, cpu0] = [performance.now(), processCpuSeconds(srv.pid)];
      await pool(SIZE, 16, async () => void made.push(await w.sandboxes.create(SPEC)));
      const [s, cpu] = [(performance.now() - t0) / 1000, processCpuSeconds(srv.pid) - cpu0];
      const claims = ((await w.pools.list()).find((x) => x.id === p.id)?.claims ?? 0) - before;
      bursts.push({ rate: SIZE / s, cpuMs: (cpu * 1000) / SIZE, claims });
    }
    bursts.sort((a, b) => a.rate - b.rate);
    const mid = bursts[bursts.length >> 1]!;
    console.log(`plain create, one at a time (n=${SIZE}): p50 ${fmt(pct(plain, 50))}  p99 ${fmt(pct(plain, 99))}`);
    console.log(`claim of a pool's sandbox, one at a time (n=${SIZE}, the pool refilling behind): p50 ${fmt(pct(one, 50))}  p99 ${fmt(pct(one, 99))}`);
    console.log(
      `claims, 16 clients at once (n=${SIZE}, median of ${ROUNDS} bursts, ${mid.claims} of them from the pool): ${mid.rate.toFixed(0)}/s, Warren's CPU ${mid.cpuMs.toFixed(2)} ms a claim` +
        ` (all bursts: ${bursts.map((b) => b.rate.toFixed(0)).join(', ')}/s)`,
    );
    await w.pools.delete(p.id);
  } finally {
    await pool(made.length, 8, (i) => made[i]!.delete().catch(() => undefined));
    await srv.stop();
  }
}

main().catch((e: unknown) => {
  console.error(e);
  process.exit(1);
});
