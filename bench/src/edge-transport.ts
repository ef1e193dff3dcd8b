// Warren benchmark: what the edge's network transport adds. Two nodes run side by side, one whose
// control plane reaches its edge in-process (the default) and one reaching it over the EdgeApi's
// network transport on a Unix socket (the edge protocol, WARREN_EDGE_TRANSPORT=http); every create and batch of execs
// and file calls alternates between them. Prints numbers; asserts nothing. Targets: the network
// transport adds at most 1 ms to a create's p50 and 0.2 ms to a warm-session exec's p50.
// Usage: npm run bench:edge [-- --rounds 4 --creates 40 --execs 400]
import { parseArgs } from 'node:util';
import { startWarrenUp } from './warren-up.js';
import { machineLine, sideBySide, ROUND_OPTIONS, type Rounds } from './side-by-side.js';

const { values } = parseArgs({ options: { ...ROUND_OPTIONS } });
const ROUNDS: Rounds = { rounds: Number(values.rounds), creates: Number(values.creates), execs: Number(values.execs) };

async function main(): Promise<void> {
  console.log(machineLine());
  await sideBySide(
    [
      { label: 'EdgeApi over a socket', start: (dir) => startWarrenUp(dir, ['--no-zram-swap'], { env: { WARREN_EDGE_TRANSPORT: 'http' } }) },
      { label: 'EdgeApi in-process', start: (dir) => startWarrenUp(dir, ['--no-zram-swap'], { env: { WARREN_EDGE_TRANSPORT: '' } }) },
    ],
    ROUNDS,
  );
}

main().catch((e: unknown) => {
  console.error(e);
  process.exitCode = 1;
});
