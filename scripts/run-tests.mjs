// Runs every compiled test: unit tests next to the code, then integration tests in test/.
// Usage: node scripts/run-tests.mjs [--unit|--integration] [name-filter]
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { readFileSync, readdirSync, rmdirSync, statSync, writeFileSync } from 'node:fs';
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
  // Sandboxes the native spawner started, found by their cgroups, and on-demand views' daemons.
  const own = /^\d+:memory:(.*)$/m.exec(readFileSync('/proc/self/cgroup', 'utf8'))?.[1] ?? '/';
  for (const d of readdirSync(tmpdir()).filter((n) => n.startsWith('warren-'))) {
    const base = join(tmpdir(), d);
    for (const id of readdirSafe(join(base, 'sandboxes'))) {
      const cg = (c) => join('/sys/fs/cgroup', c, own, 'warren', id);
      try {
        writeFileSync(join(cg('freezer'), 'freezer.state'), 'THAWED');
      } catch {
        /* gone */
      }
      for (const pid of readSafe(join(cg('pids'), 'cgroup.procs'))
        .split('\n')
        .filter(Boolean)) {
        try {
          process.kill(Number(pid), 'SIGKILL');
          console.error(`swept leftover sandbox process ${pid} (${id})`);
        } catch {
          /* gone */
        }
      }
    }
    for (const id of readdirSafe(join(base, 'sandboxes'))) {
      for (const c of ['memory', 'cpu', 'cpuacct', 'pids', 'freezer', 'devices']) {
        const dir = join('/sys/fs/cgroup', c, own, 'warren', id);
        for (let i = 0; i < 100; i++) {
          try {
            rmdirSync(dir);
            break;
          } catch (e) {
            if (e.code !== 'EBUSY') break;
            spawnSync('sleep', ['0.02']);
          }
        }
      }
    }
    const blobfs = Number(readSafe(join(base, 'cache', 'blobfs.pid')).trim());
    if (blobfs > 0 && readSafe(`/proc/${blobfs}/cmdline`).includes('warren-blobfs')) {
      try {
        process.kill(blobfs, 'SIGKILL');
        console.error(`swept leftover warren-blobfs ${blobfs}`);
      } catch {
        /* gone */
      }
    }
    // Its sandbox network's nftables table (named from the data dir, as edge/src/net/addresses.ts does).
    const n = createHash('sha256').update(base).digest().readUInt32BE(0);
    const table = `warren_${(n % 36 ** 4).toString(36).padStart(4, '0')}`;
    if (spawnSync('nft', ['delete', 'table', 'inet', table], { stdio: 'ignore' }).status === 0) console.error(`swept leftover nftables table ${table}`);
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

function readdirSafe(dir) {
  try {
    return readdirSync(dir);
  } catch {
    return [];
  }
}

function readSafe(file) {
  try {
    return readFileSync(file, 'utf8');
  } catch {
    return '';
  }
}
