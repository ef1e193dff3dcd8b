// Warren benchmark (density section): CPU classes. Warm-session exec latency in one latency
// sandbox on an idle node, beside 2× the cores of batch sandboxes spinning (busy loops), and
// beside the same spinners as latency sandboxes. Target: with batch spinners, p99 at most 2× the
// idle node's. The phases are interleaved in rounds (idle, batch, idle, latency, then again), so
// a noisy minute of a shared machine weighs on every phase alike, not on whichever ran then.
// Prints numbers; asserts nothing.
// Usage: node bench/dist/density/cpu-classes.js [--rounds 6] [--execs 300] [--gap-ms 10] [--spinners N]
import { mkdtemp, rm } from 'node:fs/promises';
import { cpus, tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import type { CpuClass } from '@warren/api';
import type { Sandbox, Shell, Warren } from '@warren/sdk';
import { pct } from '../stats.js';
import { startWarrenUp } from '../warren-up.js';

/** The phases of one round, in order: the idle node measured before each spinning phase. */
const ROUND = ['idle', 'batch', 'idle', 'latency'] as const;
type PhaseName = (typeof ROUND)[number];

/** What the phases of one name measured over every round. */
interface Phase {
  /** Warm-session exec round trips (ms), all rounds together. */
  ms: number[];
  /** Each round's p99 (ms): how much the rounds differ. */
  roundP99Ms: number[];
  /** The spinners' CPU use while it measured (cores, all together, averaged over rounds); null: none ran. */
  spinnerCores: number[];
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

/** A set of sandboxes of one CPU class whose busy loops are started and stopped for each phase. */
interface Spinners {
  boxes: Sandbox[];
  shells: Shell[];
}

async function makeSpinners(c: Warren, n: number, cpuClass: CpuClass): Promise<Spinners> {
  const boxes = await Promise.all(
    Array.from({ length: n }, () => c.sandboxes.create({ image: 'busybox:latest', resources: { cpu: 1, cpuClass }, labels: { bench: 'cpu-classes' } })),
  );
  return { boxes, shells: await Promise.all(boxes.map((b) => b.shell())) };
}

/** CPU seconds the sandboxes have used so far, all together. */
const cpuSeconds = async (boxes: Sandbox[]): Promise<number> =>
  (await Promise.all(boxes.map(async (b) => (await b.refresh()).usage.cpuSeconds))).reduce((a, b) => a + b, 0);

/**
 * Starts each spinner's busy loop; resolves once they burn CPU (their CPU seconds grow between two
 * readings), or after ~10 s without (batch spinners on a node busy with other work may get none:
 * the table shows what they got).
 */
async function spin(s: Spinners): Promise<void> {
  for (const sh of s.shells) await sh.exec('while :; do :; done >/dev/null 2>&1 & SPIN=$!');
  for (let i = 0; i < 50; i++) {
    const c0 = await cpuSeconds(s.boxes);
    await new Promise((r) => setTimeout(r, 200));
    if ((await cpuSeconds(s.boxes)) > c0) return;
  }
}

async function stop(s: Spinners): Promise<void> {
  await Promise.all(s.shells.map((sh) => sh.exec('kill $SPIN; wait $SPIN 2>/dev/null; true')));
}

const row = (name: string, p: Phase): string => {
  const cores = p.spinnerCores.length ? (p.spinnerCores.reduce((a, b) => a + b, 0) / p.spinnerCores.length).toFixed(2) : '-';
  const rounds = p.roundP99Ms.map((x) => x.toFixed(1)).join(' ');
  return `| ${name} | ${p.ms.length} | ${pct(p.ms, 50).toFixed(2)} | ${pct(p.ms, 90).toFixed(2)} | ${pct(p.ms, 99).toFixed(2)} | ${Math.max(...p.ms).toFixed(2)} | ${rounds} | ${cores} |`;
};

/** Runs the section: prints p50/p90/p99 per phase (all rounds together, and each round's p99), and the p99 ratios to the idle node's against the target. */
export async function run(argv: string[]): Promise<void> {
  const { values } = parseArgs({
    args: argv,
    options: {
      rounds: { type: 'string', default: '6' },
      execs: { type: 'string', default: '300' },
      'gap-ms': { type: 'string', default: '10' },
      spinners: { type: 'string' },
    },
  });
  const rounds = Number(values.rounds);
  const execs = Number(values.execs);
  const gapMs = Number(values['gap-ms']);
  const n = values.spinners ? Number(values.spinners) : 2 * cpus().length;
  console.log(
    `## CPU classes: warm-session exec in one latency sandbox; ${n} spinners (2× ${cpus().length} cores); ${rounds} round(s) of ${ROUND.join(', ')}, ${execs} execs per phase, ${gapMs} ms apart`,
  );
  const dir = await mkdtemp(join(tmpdir(), 'warren-bench-cpu-classes-'));
  const node = await startWarrenUp(dir, ['--images', 'busybox:latest', '--no-network', '--no-microvm', '--no-vm', '--memory-floor-mib', '0']);
  const c = node.client;
  const phases = new Map<PhaseName, Phase>(ROUND.map((p) => [p, { ms: [], roundP99Ms: [], spinnerCores: [] }]));
  try {
    const probe = await c.sandboxes.create({ image: 'busybox:latest', resources: { cpu: 1 }, labels: { bench: 'cpu-classes' } });
    const sh = await probe.shell();
    const spinners = { batch: await makeSpinners(c, n, 'batch'), latency: await makeSpinners(c, n, 'latency') };
    for (let r = 0; r < rounds; r++) {
      for (const name of ROUND) {
        const phase = phases.get(name)!;
        const s = name === 'idle' ? null : spinners[name];
        if (s) await spin(s);
        const [cpu0, t0] = s ? [await cpuSeconds(s.boxes), performance.now()] : [0, 0];
        const ms = await measure(sh, execs, gapMs);
        if (s) {
          phase.spinnerCores.push(((await cpuSeconds(s.boxes)) - cpu0) / ((performance.now() - t0) / 1000));
          await stop(s);
        }
        phase.ms.push(...ms);
        phase.roundP99Ms.push(pct(ms, 99));
      }
    }
    await Promise.all([probe, ...spinners.batch.boxes, ...spinners.latency.boxes].map((b) => b.delete()));
  } finally {
    await node.stop();
    await rm(dir, { recursive: true, force: true });
  }
  console.log('| phase | execs | p50 ms | p90 ms | p99 ms | max ms | p99 of each phase run (ms) | spinners’ CPU (cores) |');
  console.log('|---|---|---|---|---|---|---|---|');
  const idle = phases.get('idle')!;
  const batch = phases.get('batch')!;
  const latency = phases.get('latency')!;
  console.log(row('idle node', idle));
  console.log(row(`${n} batch spinners`, batch));
  console.log(row(`${n} latency spinners`, latency));
  const ratio = (p: Phase, q: number): number => pct(p.ms, q) / pct(idle.ms, q);
  const b99 = ratio(batch, 99);
  console.log(
    `p99 with batch spinners / p99 on the idle node: ${b99.toFixed(2)}× (target ≤ 2×: ${b99 <= 2 ? 'met' : 'missed'}); p90 ${ratio(batch, 90).toFixed(2)}×, p50 ${ratio(batch, 50).toFixed(2)}×`,
  );
  console.log(`with latency spinners: p99 ${ratio(latency, 99).toFixed(2)}×, p90 ${ratio(latency, 90).toFixed(2)}×, p50 ${ratio(latency, 50).toFixed(2)}×`);
}

if (process.argv[1] === fileURLToPath(import.meta.url)) await run(process.argv.slice(2));
