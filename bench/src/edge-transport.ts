// Warren benchmark: what the edge's network transport adds. Two nodes run side by side, one whose
// control plane reaches its edge in-process (the default) and one reaching it over the EdgeApi's
// HTTP transport on a Unix socket (WARREN_EDGE_TRANSPORT=http); every create and batch of execs
// and file calls alternates between them. Prints numbers; asserts nothing. Targets: the network
// transport adds at most 1 ms to a create's p50 and 0.2 ms to a warm-session exec's p50.
// Usage: npm run bench:edge [-- --rounds 4 --creates 40 --execs 400]
import { spawnSync } from 'node:child_process';
import { chmodSync } from 'node:fs';
import { mkdtemp } from 'node:fs/promises';
import { cpus, totalmem } from 'node:os';
import { parseArgs } from 'node:util';
import { startWarrenUp, type BenchNode } from './warren-up.js';
import { inTurns, report, rows, ROUND_OPTIONS, type Rounds } from './side-by-side.js';

const { values } = parseArgs({ options: { ...ROUND_OPTIONS } });
const ROUNDS: Rounds = { rounds: Number(values.rounds), creates: Number(values.creates), execs: Number(values.execs) };

async function main(): Promise<void> {
  console.log(`machine: ${cpus().length} cores (${cpus()[0]?.model ?? '?'}), ${(totalmem() / 2 ** 30).toFixed(1)} GiB, node ${process.version}`);
  const dirs = [await mkdtemp('/tmp/warren-bench-http-'), await mkdtemp('/tmp/warren-bench-local-')];
  for (const d of dirs) chmodSync(d, 0o711);
  const nodes: BenchNode[] = [];
  try {
    nodes.push(await startWarrenUp(dirs[0]!, ['--no-zram-swap'], { env: { WARREN_EDGE_TRANSPORT: 'http' } }));
    nodes.push(await startWarrenUp(dirs[1]!, ['--no-zram-swap'], { env: { WARREN_EDGE_TRANSPORT: '' } }));
    const samples = await inTurns(nodes, ROUNDS);
    report(['EdgeApi over HTTP', 'EdgeApi in-process'], samples, rows(ROUNDS));
  } finally {
    for (const n of nodes) await n.stop();
    for (const d of dirs) spawnSync('rm', ['-rf', d]);
  }
}

main().catch((e: unknown) => {
  console.error(e);
  process.exitCode = 1;
});
