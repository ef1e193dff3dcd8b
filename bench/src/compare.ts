// Warren benchmark: this checkout against another commit, side by side in one run. The other
// commit is checked out into a scratch worktree and built there (npm dependencies copied from
// this checkout when its lockfile is the same, else installed); both run `warren up`, each driven
// by its own build's SDK (a client's cost is part of a round trip), and every create and batch of
// execs and file calls alternates between them. Prints numbers; asserts
// nothing. Target: a change makes no hot path slower (compare the p50 ratios, not the times).
// `--store postgres`: both nodes keep their state in a private PostgreSQL this benchmark starts (a
// database each; PostgreSQL installed, as `npm run bench:store`'s set-up does), not SQLite.
// Usage: npm run bench:compare -- --base REF [--flags=--no-zram-swap] [--store sqlite|postgres] [--rounds 4 --creates 40 --execs 400]
import { execFileSync, spawnSync } from 'node:child_process';
import { chmodSync, existsSync } from 'node:fs';
import { mkdtemp } from 'node:fs/promises';
import { cpus, totalmem } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { startTestPostgres } from '@warren/server';
import { startWarrenUp, type BenchNode } from './warren-up.js';
import { inTurns, report, rows, ROUND_OPTIONS, type Rounds } from './side-by-side.js';

const { values } = parseArgs({
  options: {
    base: { type: 'string', default: 'HEAD' },
    flags: { type: 'string', default: '' },
    store: { type: 'string', default: 'sqlite' },
    ...ROUND_OPTIONS,
  },
});
if (values.store !== 'sqlite' && values.store !== 'postgres') throw new Error(`--store is sqlite or postgres, not ${values.store}`);
/** `warren up` flags for this checkout's node only (e.g. to switch a new default off). */
const FLAGS = values.flags.split(' ').filter(Boolean);
const ROUNDS: Rounds = { rounds: Number(values.rounds), creates: Number(values.creates), execs: Number(values.execs) };
const ROOT = fileURLToPath(new URL('../..', import.meta.url));

const run = (cmd: string, args: string[], cwd: string): void => {
  execFileSync(cmd, args, { cwd, stdio: ['ignore', 'ignore', 'inherit'] });
};

/** Checks `ref` out into a scratch worktree and builds it; returns its directory. */
function buildBase(ref: string): string {
  const dir = join('/tmp', `warren-bench-base-${process.pid}`);
  run('git', ['worktree', 'add', '--detach', dir, ref], ROOT);
  const same = spawnSync('cmp', ['-s', join(ROOT, 'package-lock.json'), join(dir, 'package-lock.json')]).status === 0;
  // A copy keeps the workspace links relative to the copy (a link to ours would load our packages).
  if (same) run('cp', ['-a', join(ROOT, 'node_modules'), join(dir, 'node_modules')], ROOT);
  else run('npm', ['ci', '--no-audit', '--no-fund'], dir);
  run('npx', ['tsc', '-b'], dir);
  run('make', ['-s', '-C', 'native'], dir);
  return dir;
}

async function main(): Promise<void> {
  console.log(`machine: ${cpus().length} cores (${cpus()[0]?.model ?? '?'}), ${(totalmem() / 2 ** 30).toFixed(1)} GiB, node ${process.version}`);
  const rev = execFileSync('git', ['rev-parse', '--short', values.base], { cwd: ROOT }).toString().trim();
  console.log(
    `this checkout (with its uncommitted changes${FLAGS.length ? `, warren up ${FLAGS.join(' ')}` : ''}) against ${values.base} (${rev}), state in ${values.store}`,
  );
  const base = buildBase(values.base);
  const pg = values.store === 'postgres' ? await startTestPostgres() : null;
  // A database each (none: SQLite in each node's data dir).
  const env = async (name: string): Promise<Record<string, string>> => ({ WARREN_DATABASE: pg ? await pg.createDatabase(name) : '' });
  const dirs = [await mkdtemp('/tmp/warren-bench-new-'), await mkdtemp('/tmp/warren-bench-old-')];
  for (const d of dirs) chmodSync(d, 0o711);
  const nodes: BenchNode[] = [];
  try {
    nodes.push(await startWarrenUp(dirs[0]!, FLAGS, { env: await env('bench_new') }));
    nodes.push(
      await startWarrenUp(dirs[1]!, [], {
        cli: join(base, 'packages/cli/dist/main.js'),
        sdk: join(base, 'packages/sdk/dist/index.js'),
        env: await env('bench_base'),
      }),
    );
    const samples = await inTurns(nodes, ROUNDS);
    report(['this checkout', rev], samples, rows(ROUNDS));
  } finally {
    for (const n of nodes) await n.stop();
    for (const d of dirs) spawnSync('rm', ['-rf', d]);
    await pg?.stop();
    if (existsSync(base)) run('git', ['worktree', 'remove', '--force', base], ROOT);
  }
}

main().catch((e: unknown) => {
  console.error(e);
  process.exitCode = 1;
});
