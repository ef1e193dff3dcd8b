// Warren benchmark: what the sandbox hardening costs. Two nodes run side by side: one as shipped
// (strict seccomp filter, masked and read-only /proc and /sys paths, a disk quota subvolume and a
// host id range of its own per sandbox, its layers mounted idmapped), one started with
// WARREN_UNHARDENED_BENCH=1, the baseline switch that exists for this benchmark only (none of
// those). Every create and every batch of execs alternates between them, so drift of the machine
// hits both alike. Prints numbers;
// asserts nothing. Target: hardening costs ≤ 10 % of create latency and of an exec round trip.
// Usage: npm run bench:hardening [-- --rounds 4 --creates 40 --execs 400]
import { parseArgs } from 'node:util';
import { startWarrenUp } from './warren-up.js';
import { machineLine, sideBySide, ROUND_OPTIONS, type Rounds } from './side-by-side.js';

const { values } = parseArgs({ options: ROUND_OPTIONS });
const ROUNDS: Rounds = { rounds: Number(values.rounds), creates: Number(values.creates), execs: Number(values.execs) };

async function main(): Promise<void> {
  console.log(machineLine());
  await sideBySide(
    [
      { label: 'hardened', start: (dir) => startWarrenUp(dir, []) },
      { label: 'baseline', start: (dir) => startWarrenUp(dir, [], { env: { WARREN_UNHARDENED_BENCH: '1' } }) },
    ],
    ROUNDS,
  );
}

main().catch((e: unknown) => {
  console.error(e);
  process.exitCode = 1;
});
