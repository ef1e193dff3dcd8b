// Runs every compiled test: warren-init's C unit tests and fuzzers, unit tests next to the code,
// then integration tests in test/, then the integration tests again with every edge reached over
// its network transport (the edge protocol on a Unix socket) instead of in-process, then once
// more with every node's state in PostgreSQL instead of SQLite, and the API's tests on microVMs.
// Usage: node scripts/run-tests.mjs [--unit|--integration] [--transport=in-process|http|both] [--store=sqlite|postgres|both] [name-filter]
import { spawnSync } from 'node:child_process';
import { readdirSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const args = process.argv.slice(2);
const only = args.find((a) => a === '--unit' || a === '--integration');
const filter = args.find((a) => !a.startsWith('--'));
const transport = (args.find((a) => a.startsWith('--transport=')) ?? '--transport=both').slice('--transport='.length);
const store = (args.find((a) => a.startsWith('--store=')) ?? '--store=both').slice('--store='.length);
if (!['sqlite', 'postgres', 'both'].includes(store)) {
  console.error(`unknown store ${store}: sqlite, postgres or both`);
  process.exit(2);
}
if (!['in-process', 'http', 'both'].includes(transport)) {
  console.error(`unknown transport ${transport}: in-process, http or both`);
  process.exit(2);
}

function find(dir, out = []) {
  let names = [];
  try {
    names = readdirSync(dir);
  } catch {
    return out;
  }
  for (const n of names) {
    const p = join(dir, n);
    if (statSync(p).isDirectory()) find(p, out);
    else if (n.endsWith('.test.js')) out.push(p);
  }
  return out;
}

const unit = readdirSync('packages').flatMap((p) => find(join('packages', p, 'dist')));
const integration = find('test/dist');
let files = only === '--unit' ? unit : only === '--integration' ? integration : [...unit, ...integration];
if (filter) files = files.filter((f) => f.includes(filter));
if (!files.length) {
  console.error('no test files found (did the build run?)');
  process.exit(1);
}
// Integration tests start real sandboxes: one file at a time keeps a 2-core machine honest.
// A test that hangs fails after 5 minutes instead of holding the run.
const run = (list, env) =>
  spawnSync(process.execPath, ['--test', '--test-concurrency=1', '--test-timeout=300000', '--test-reporter=spec', ...list], {
    stdio: 'inherit',
    env: { ...process.env, ...env },
  }).status ?? 1;
let status = 0;
// With the unit tests: warren-init's own (C, under ASan and UBSan), then its fuzzers for a few
// seconds each (libFuzzer: only where clang is, which `scripts/setup.sh --test` installs).
if (only !== '--integration' && !filter) {
  const make = (target) => spawnSync('make', ['-s', '-C', 'native', target], { stdio: 'inherit' }).status ?? 1;
  status = make('check');
  if (status === 0 && spawnSync('clang', ['--version'], { stdio: 'ignore' }).status === 0) status = make('fuzz');
  else if (status === 0) console.log('# warren-init fuzzers skipped: no clang here (scripts/setup.sh --test installs it)');
}
if (status === 0 && transport !== 'http' && store !== 'postgres') status = run(files, { WARREN_EDGE_TRANSPORT: '', WARREN_TEST_STORE: '' });
await sweep();
const again = files.filter((f) => integration.includes(f));
if (status === 0 && transport !== 'in-process' && store !== 'postgres' && again.length) {
  console.log('\n# the integration tests again, every edge reached over its network transport (WARREN_EDGE_TRANSPORT=http)\n');
  status = run(again, { WARREN_EDGE_TRANSPORT: 'http', WARREN_TEST_STORE: '' });
  await sweep();
}
// And once more with every node's state in PostgreSQL (a private server per test file) instead
// of SQLite, the edge in-process.
if (status === 0 && transport !== 'http' && store !== 'sqlite' && again.length) {
  console.log('\n# the integration tests again, every node keeping its state in PostgreSQL (WARREN_TEST_STORE=postgres)\n');
  status = run(again, { WARREN_EDGE_TRANSPORT: '', WARREN_TEST_STORE: 'postgres' });
  await sweep();
}
// And the API's own tests once more with microVMs as the default backend (under TCG here: the
// files of exec, files and terminals only, which cover what the init does for either backend; tests that
// need what microVMs lack yet say so and are skipped).
const onMicrovm = again.filter((f) => /\/(exec|files|pty|e2b)\.test\.js$/.test(f));
if (status === 0 && transport !== 'http' && store !== 'postgres' && onMicrovm.length) {
  console.log('\n# the API tests again on the microVM backend (WARREN_TEST_BACKEND=microvm)\n');
  status = run(onMicrovm, { WARREN_EDGE_TRANSPORT: '', WARREN_TEST_STORE: '', WARREN_TEST_BACKEND: 'microvm' });
  await sweep();
}
process.exit(status);

/**
 * Safety net for a test process that died without its own cleanup: what the tests' temporary data
 * dirs left (packages/edge/src/host/leftovers.ts, the harness's cleanup too). A dir with a live
 * `warren up` (a benchmark's, say), or one whose owner process lives (another run's test, whose
 * node runs in-process), is left alone.
 */
async function sweep() {
  const { liveNode, liveOwner, sweepDataDir } = await import('../packages/edge/dist/host/leftovers.js');
  for (const d of readdirSync(tmpdir()).filter((n) => n.startsWith('warren-'))) {
    const base = join(tmpdir(), d);
    // Another run's (a second checkout's tests, a benchmark): its node or its test process lives.
    if ((await liveNode(base)) || (await liveNode(join(base, 'data'))) || (await liveOwner(base))) continue;
    await sweepDataDir(base, { log: (m) => console.error(m) });
  }
}
