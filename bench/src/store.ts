// Warren benchmark: what keeping the control plane's state in PostgreSQL costs against SQLite.
// Two nodes side by side, one on SQLite in its data dir (the default), one on PostgreSQL (a
// private server this benchmark starts on the same machine: a Unix socket, fsync off as in the
// tests, so it measures round trips and queries, not the disk); every create and batch of execs
// and file calls alternates between them. Prints numbers; asserts nothing.
// Usage: npm run bench:store [-- --rounds 4 --creates 40 --execs 400]
import { parseArgs } from 'node:util';
import { startTestPostgres } from '@warren/server';
import { startWarrenUp } from './warren-up.js';
import { machineLine, sideBySide, ROUND_OPTIONS, type Rounds } from './side-by-side.js';

const { values } = parseArgs({ options: { ...ROUND_OPTIONS } });
const ROUNDS: Rounds = { rounds: Number(values.rounds), creates: Number(values.creates), execs: Number(values.execs) };

async function main(): Promise<void> {
  console.log(machineLine());
  const pg = await startTestPostgres();
  try {
    const url = await pg.createDatabase('bench');
    await sideBySide(
      [
        { label: 'state in PostgreSQL', start: (dir) => startWarrenUp(dir, ['--no-zram-swap'], { env: { WARREN_DATABASE: url } }) },
        { label: 'state in SQLite', start: (dir) => startWarrenUp(dir, ['--no-zram-swap'], { env: { WARREN_DATABASE: '' } }) },
      ],
      ROUNDS,
    );
  } finally {
    await pg.stop();
  }
}

main().catch((e: unknown) => {
  console.error(e);
  process.exitCode = 1;
});
