// Warren benchmark (density section): CPU classes. Warm-session exec latency in one latency
// sandbox on an idle node; then with 2× the cores of batch sandboxes spinning (busy loops); then
// with the same spinners as latency sandboxes. Target: with batch spinners, p99 at most 2× the
// idle node's. Prints numbers; asserts nothing.
// Usage: node bench/dist/density/cpu-classes.js [--execs 500] [--gap-ms 10] [--spinners N]
import { mkdtemp, rm } from 'node:fs/promises';
import { cpus, tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import type { CpuClass } from '@warren/api';
import type { Sandbox, Shell, Warren } from '@warren/sdk';
import { pct } from '../stats.js';
import { startWarrenUp } from '../warren-up.js';

/** What one phase measured: warm-session exec round trips (ms). */
interface Phase {
  name: string;
  ms: number[];
  /** The spinners' CPU use while it measured (cores, all together; null: none ran). */
  spinnerCores: number | null;
}

/** Execs of a no-op in a warm session, `gapMs` apart (as an agent's commands come: the CPU is the spinners' between them); their round trips (ms). */
async function measure(sh: Shell, execs: number, gapMs: number): Promise<number[]> {
  for (let i = 0; i < 10; i++) await sh.exec('true');
  const ms: number[] = [];
  for (let i = 0; i < execs; i++) {
    const t = performance.now();
    await sh.exec('true');
    ms.push(performance.now() - t);
    await new Promise((r) => setTimeout(r, gapMs));
  }
  return ms;
}

/** `n` sandboxes of `cpuClass`, each with one busy loop left running in a session; resolves once every loop is burning CPU. */
async function spinners(c: Warren, n: number, cpuClass: CpuClass): Promise<Sandbox[]> {
  const boxes = await Promise.all(
    Array.from({ length: n }, () => c.sandboxes.create({ image: 'busybox:latest', resources: { cpu: 1, cpuClass }, labels: { bench: 'cpu-classes' } })),
  );
  for (const sb of boxes) await (await sb.shell()).exec('while :; do :; done >/dev/null 2>&1 &');
  // Burning: each has used CPU between two readings a second or more apart.
  for (const sb of boxes) {
    for (let i = 0; i < 100 && (await sb.refresh()).usage.cpuRecent < 0.2; i++) await new Promise((r) => setTimeout(r, 200));
  }
  return boxes;
}

/** CPU seconds the sandboxes have used so far, all together. */
const cpuSeconds = async (boxes: Sandbox[]): Promise<number> =>
  (await Promise.all(boxes.map(async (b) => (await b.refresh()).usage.cpuSeconds))).reduce((a, b) => a + b, 0);

/** Runs the section: prints a table of p50/p99 per phase, and the batch-to-idle p99 ratio against the target. */
export async function run(argv: string[]): Promise<void> {
  const { values } = parseArgs({
    args: argv,
    options: { execs: { type: 'string', default: '500' }, 'gap-ms': { type: 'string', default: '10' }, spinners: { type: 'string' } },
  });
  const execs = Number(values.execs);
  const gapMs = Number(values['gap-ms']);
  const n = values.spinners ? Number(values.spinners) : 2 * cpus().length;
  console.log(
    `## CPU classes: warm-session exec in one latency sandbox; ${n} spinners (2× ${cpus().length} cores), ${execs} execs per phase, ${gapMs} ms apart`,
  );
  const dir = await mkdtemp(join(tmpdir(), 'warren-bench-cpu-classes-'));
  const node = await startWarrenUp(dir, ['--images', 'busybox:latest', '--no-network', '--no-microvm', '--no-vm', '--memory-floor-mib', '0']);
  const c = node.client;
  const phases: Phase[] = [];
  try {
    const probe = await c.sandboxes.create({ image: 'busybox:latest', resources: { cpu: 1 }, labels: { bench: 'cpu-classes' } });
    const sh = await probe.shell();
    phases.push({ name: 'idle node', ms: await measure(sh, execs, gapMs), spinnerCores: null });
    for (const cpuClass of ['batch', 'latency'] as const) {
      const boxes = await spinners(c, n, cpuClass);
      const [cpu0, t0] = [await cpuSeconds(boxes), performance.now()];
      const ms = await measure(sh, execs, gapMs);
      const spinnerCores = ((await cpuSeconds(boxes)) - cpu0) / ((performance.now() - t0) / 1000);
      phases.push({ name: `${n} ${cpuClass} spinners`, ms, spinnerCores });
      await Promise.all(boxes.map((b) => b.delete()));
    }
    await probe.delete();
  } finally {
    await node.stop();
    await rm(dir, { recursive: true, force: true });
  }
  console.log('| phase | p50 ms | p99 ms | max ms | spinners’ CPU (cores) |');
  console.log('|---|---|---|---|---|');
  for (const p of phases)
    console.log(
      `| ${p.name} | ${pct(p.ms, 50).toFixed(2)} | ${pct(p.ms, 99).toFixed(2)} | ${Math.max(...p.ms).toFixed(2)} | ${p.spinnerCores === null ? '-' : p.spinnerCores.toFixed(2)} |`,
    );
  const [idle, batch, latency] = phases.map((p) => pct(p.ms, 99));
  const ratio = batch! / idle!;
  console.log(
    `p99 with batch spinners / p99 on the idle node: ${ratio.toFixed(2)}× (target ≤ 2×: ${ratio <= 2 ? 'met' : 'missed'}); with latency spinners: ${(latency! / idle!).toFixed(2)}×`,
  );
}

if (process.argv[1] === fileURLToPath(import.meta.url)) await run(process.argv.slice(2));
