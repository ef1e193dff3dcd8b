// Warren benchmark: what the sandbox hardening costs. Two nodes run side by side: one as shipped
// (strict seccomp filter, masked and read-only /proc and /sys paths, a disk quota subvolume and a
// host id range of its own per sandbox, its layers mounted idmapped), one started with
// WARREN_UNHARDENED_BENCH=1, the baseline switch that exists for this benchmark only (none of
// those). Every create and every batch of execs alternates between them, so drift of the machine
// hits both alike. Prints numbers;
// asserts nothing. Target: hardening costs ≤ 10 % of create latency and of an exec round trip.
// Usage: npm run bench:hardening [-- --rounds 4 --creates 40 --execs 400]
import { spawnSync } from 'node:child_process';
import { mkdtemp } from 'node:fs/promises';
import { chmodSync } from 'node:fs';
import { cpus, totalmem } from 'node:os';
import { parseArgs } from 'node:util';
import type { Sandbox } from '@warren/sdk';
import { startWarrenUp, type BenchNode } from './warren-up.js';
import { fmt, pct } from './stats.js';

const { values } = parseArgs({
  options: {
    rounds: { type: 'string', default: '4' },
    creates: { type: 'string', default: '40' },
    execs: { type: 'string', default: '400' },
  },
});
const ROUNDS = Number(values.rounds);
const CREATES = Number(values.creates);
const EXECS = Number(values.execs);

interface Samples {
  create: number[];
  del: number[];
  exec: number[];
  session: number[];
}

/** One create + delete on each node, in turns (the order flips each time): pairs see the same machine. */
async function creates(nodes: BenchNode[], samples: Samples[], n: number): Promise<void> {
  for (let i = 0; i < n; i++) {
    for (const k of i % 2 ? [1, 0] : [0, 1]) {
      let s = performance.now();
      const sb = await nodes[k]!.client.sandboxes.create({ image: 'busybox:latest', resources: { cpu: 0.1, memoryMiB: 64 } });
      samples[k]!.create.push(performance.now() - s);
      s = performance.now();
      await sb.delete();
      samples[k]!.del.push(performance.now() - s);
    }
  }
}

/** Exec round trips on one sandbox per node, in batches of 50 taken in turns. */
async function execs(nodes: BenchNode[], samples: Samples[], n: number): Promise<void> {
  const sbs: Sandbox[] = [];
  try {
    for (const node of nodes) sbs.push(await node.client.sandboxes.create({ image: 'debian-python:latest' }));
    const shells = await Promise.all(sbs.map((sb) => sb.shell()));
    for (let k = 0; k < sbs.length; k++) {
      for (let i = 0; i < 20; i++) {
        await sbs[k]!.exec(['true']);
        await shells[k]!.exec('true');
      }
    }
    for (let b = 0; b < n / 50; b++) {
      for (const k of b % 2 ? [1, 0] : [0, 1]) {
        for (let i = 0; i < 50; i++) {
          const s = performance.now();
          await sbs[k]!.exec(['true']);
          samples[k]!.exec.push(performance.now() - s);
        }
        for (let i = 0; i < 50; i++) {
          const s = performance.now();
          await shells[k]!.exec('true');
          samples[k]!.session.push(performance.now() - s);
        }
      }
    }
  } finally {
    for (const sb of sbs) await sb.delete();
  }
}

async function main(): Promise<void> {
  console.log(`machine: ${cpus().length} cores (${cpus()[0]?.model ?? '?'}), ${(totalmem() / 2 ** 30).toFixed(1)} GiB, node ${process.version}`);
  const dirs = [await mkdtemp('/tmp/warren-bench-on-'), await mkdtemp('/tmp/warren-bench-off-')];
  for (const d of dirs) chmodSync(d, 0o711);
  const nodes: BenchNode[] = [];
  try {
    nodes.push(await startWarrenUp(dirs[0]!, []));
    process.env.WARREN_UNHARDENED_BENCH = '1';
    try {
      nodes.push(await startWarrenUp(dirs[1]!, []));
    } finally {
      delete process.env.WARREN_UNHARDENED_BENCH;
    }
    const samples: Samples[] = nodes.map(() => ({ create: [], del: [], exec: [], session: [] }));
    // Warm both: layer mounts, the first sandbox's page cache.
    for (const n of nodes) for (const image of ['busybox:latest', 'debian-python:latest']) await (await n.client.sandboxes.create({ image })).delete();
    for (let r = 0; r < ROUNDS; r++) {
      await creates(nodes, samples, CREATES);
      await execs(nodes, samples, EXECS);
    }

    const rows: Array<[string, keyof Samples]> = [
      [`create busybox (sequential, n=${ROUNDS * CREATES})`, 'create'],
      [`delete (sequential, n=${ROUNDS * CREATES})`, 'del'],
      [`exec ['true'] as a fresh command (n=${ROUNDS * EXECS})`, 'exec'],
      [`exec 'true' on a warm session (n=${ROUNDS * EXECS})`, 'session'],
    ];
    console.log('                                              hardened            baseline            cost (p50)');
    for (const [label, k] of rows) {
      const [on, off] = [samples[0]![k], samples[1]![k]];
      const cost = ((pct(on, 50) - pct(off, 50)) / pct(off, 50)) * 100;
      console.log(
        `${label.padEnd(46)}p50 ${fmt(pct(on, 50)).padEnd(10)} p90 ${fmt(pct(on, 90)).padEnd(10)}  p50 ${fmt(pct(off, 50)).padEnd(10)} p90 ${fmt(pct(off, 90)).padEnd(10)}  ${cost >= 0 ? '+' : ''}${cost.toFixed(1)} %`,
      );
    }
  } finally {
    for (const n of nodes) await n.stop();
    for (const d of dirs) spawnSync('rm', ['-rf', d]);
  }
}

main().catch((e: unknown) => {
  console.error(e);
  process.exitCode = 1;
});
