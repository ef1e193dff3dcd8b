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
import { inTurns, report, rows, ROUND_OPTIONS, type Rounds } from './side-by-side.js';

const { values } = parseArgs({ options: ROUND_OPTIONS });
const ROUNDS: Rounds = { rounds: Number(values.rounds), creates: Number(values.creates), execs: Number(values.execs) };

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
    const samples = await inTurns(nodes, ROUNDS);
    report(['hardened', 'baseline'], samples, rows(ROUNDS));
  } finally {
    for (const n of nodes) await n.stop();
    for (const d of dirs) spawnSync('rm', ['-rf', d]);
  }
}

main().catch((e: unknown) => {
  console.error(e);
  process.exitCode = 1;
});
