// Runs every compiled test: unit tests next to the code, then integration tests in test/.
// Usage: node scripts/run-tests.mjs [--unit|--integration] [name-filter]
import { spawnSync } from 'node:child_process';
import { readFileSync, readdirSync, statSync } from 'node:fs';
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
const r = spawnSync(process.execPath, ['--test', '--test-concurrency=1', '--test-reporter=spec', ...files], { stdio: 'inherit' });
sweep();
process.exit(r.status ?? 1);

/**
 * Safety net for a test process that died without its own cleanup: containers and mounts of the
 * tests' temporary data dirs (and only those) are removed.
 */
function sweep() {
  const prefix = join(tmpdir(), 'warren-');
  let left = [];
  try {
    left = JSON.parse(spawnSync('runc', ['list', '-f', 'json']).stdout.toString() || '[]') ?? [];
  } catch {
    left = [];
  }
  for (const c of left.filter((c) => c.bundle.startsWith(prefix))) {
    spawnSync('runc', ['resume', c.id], { stdio: 'ignore' });
    spawnSync('runc', ['delete', '-f', c.id], { stdio: 'ignore' });
    console.error(`swept leftover container ${c.id}`);
  }
  const mounts = readFileSync('/proc/self/mounts', 'utf8')
    .split('\n')
    .map((l) => l.split(' ')[1] ?? '')
    .filter((m) => m.startsWith(prefix))
    .reverse();
  for (const m of mounts) {
    spawnSync('umount', ['-l', m], { stdio: 'ignore' });
    console.error(`swept leftover mount ${m}`);
  }
}
