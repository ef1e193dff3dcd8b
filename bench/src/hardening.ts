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
import { startWarrenUp, type BenchNode } from './warren-up.js';
import { creates, execs, newSamples, report, type Samples } from './side-by-side.js';

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
    const samples: Samples[] = nodes.map(newSamples);
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
    report(['hardened', 'baseline'], samples, rows);
  } finally {
    for (const n of nodes) await n.stop();
    for (const d of dirs) spawnSync('rm', ['-rf', d]);
  }
}

main().catch((e: unknown) => {
  console.error(e);
  process.exitCode = 1;
});
