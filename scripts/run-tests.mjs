// Runs every compiled test: unit tests next to the code, then integration tests in test/.
// Usage: node scripts/run-tests.mjs [--unit|--integration] [name-filter]
import { spawnSync } from 'node:child_process';
import { readdirSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const args = process.argv.slice(2);
const only = args.find((a) => a === '--unit' || a === '--integration');
const filter = args.find((a) => !a.startsWith('--'));

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
const r = spawnSync(process.execPath, ['--test', '--test-concurrency=1', '--test-timeout=300000', '--test-reporter=spec', ...files], { stdio: 'inherit' });
await sweep();
process.exit(r.status ?? 1);

/**
 * Safety net for a test process that died without its own cleanup: what the tests' temporary data
 * dirs left (packages/edge/src/host/leftovers.ts, the harness's cleanup too). A dir with a live
 * `warren up` (a benchmark's, say) is left alone.
 */
async function sweep() {
  const { liveNode, sweepDataDir } = await import('../packages/edge/dist/host/leftovers.js');
  for (const d of readdirSync(tmpdir()).filter((n) => n.startsWith('warren-'))) {
    const base = join(tmpdir(), d);
    if ((await liveNode(base)) || (await liveNode(join(base, 'data')))) continue;
    await sweepDataDir(base, { log: (m) => console.error(m) });
  }
}
