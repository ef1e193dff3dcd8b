// Runs every compiled test, in passes: warren-init's C unit tests and fuzzers, the unit tests next
// to the code, the integration tests in test/ (once: the edge in-process, the state in SQLite),
// and the API's init-protocol tests once more with microVMs as the default backend. What the edge
// transport and the store add is shown by the tests that cross those layers, over each variant:
// test/src/layers-contract.test.ts (the EdgeApi over both transports, on both stores), the Store's
// own suite (packages/server/src/store/store.test.ts, over SQLite and PostgreSQL), the edge
// protocol's (packages/edge/src/edge-api/protocol.test.ts) and the cluster's tests, which always
// speak the edge protocol and keep their state in PostgreSQL. Prints each pass's time at the end.
// Usage: node scripts/run-tests.mjs [--unit|--integration] [--transport=in-process|http] [--store=sqlite|postgres] [--backend=microvm] [name-filter]
//   --transport, --store, --backend: the whole integration suite on that variant (to chase a
//   failure there), instead of the default passes.
// WARREN_TEST_SLOTS=N: integration files run N at a time (default 2; files that ask for the
//   machine alone run alone after the others); WARREN_TEST_TIMES=all: every file's time at the end.
import { spawn, spawnSync } from 'node:child_process';
import { once } from 'node:events';
import { closeSync, mkdtempSync, openSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import { availableParallelism, tmpdir } from 'node:os';
import { join } from 'node:path';

const args = process.argv.slice(2);
const only = args.find((a) => a === '--unit' || a === '--integration');
const filter = args.find((a) => !a.startsWith('--'));
const option = (name, allowed) => {
  const v = args.find((a) => a.startsWith(`--${name}=`))?.slice(name.length + 3);
  if (v !== undefined && !allowed.includes(v)) {
    console.error(`unknown ${name} ${v}: ${allowed.join(' or ')}`);
    process.exit(2);
  }
  return v;
};
const variant = {
  WARREN_EDGE_TRANSPORT: option('transport', ['in-process', 'http']) === 'http' ? 'http' : '',
  WARREN_TEST_STORE: option('store', ['sqlite', 'postgres']) === 'postgres' ? 'postgres' : '',
  WARREN_TEST_BACKEND: option('backend', ['container', 'microvm']) === 'microvm' ? 'microvm' : '',
};
const onVariant = Object.values(variant).some(Boolean);
/** How many integration files run at once (WARREN_TEST_SLOTS; those that ask for the machine alone run alone). */
const SLOTS = Number(process.env.WARREN_TEST_SLOTS ?? 2);
if (!Number.isInteger(SLOTS) || SLOTS < 1) {
  console.error(`WARREN_TEST_SLOTS ${process.env.WARREN_TEST_SLOTS}: a whole number from 1`);
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

const pick = (list) => (filter ? list.filter((f) => f.includes(filter)) : list);
const unit = only === '--integration' ? [] : pick(readdirSync('packages').flatMap((p) => find(join('packages', p, 'dist'))));
const integration = only === '--unit' ? [] : pick(find('test/dist'));
if (!unit.length && !integration.length) {
  console.error('no test files found (did the build run?)');
  process.exit(1);
}

/** Each pass: its name, wall time and counts; printed at the end. */
const passes = [];
/** Each integration file's wall time, for the slowest-files table. */
const fileTimes = [];
/** Each failed test's file, name, location and error, repeated at the end (CI shows only the tail of the output). */
const failures = [];
const tapDir = mkdtempSync(join(tmpdir(), 'wtests-tap-'));

/**
 * Runs test files with node's runner, one process per file (unit tests: one process, `concurrency`
 * files at a time). Integration files run `slots` at a time, each printing its output whole when it
 * ends, except a file that asks for the machine to itself (a line `// run-tests: alone, <why>` in
 * its head: it measures the host's memory or CPU, loads it on purpose, or times its own waits
 * tightly): those run one at a time after the others, once what the others left is swept. A test
 * that hangs fails after 5 minutes, a file after 20, instead of holding the run. Answers the
 * counts of its TAP summaries.
 */
async function runFiles(list, env, timed, { concurrency = 1, slots = 1 } = {}) {
  const counts = { pass: 0, fail: 0, skipped: 0, files: 0, failedFiles: [] };
  const batches = timed ? list.map((f) => [f]) : [list];
  const alone = (batch) => slots === 1 || batch.length > 1 || /^\/\/ run-tests: alone\b/m.test(readFileSync(batch[0], 'utf8').slice(0, 4000));
  const together = batches.filter((b) => !alone(b));
  const solo = batches.filter(alone);
  const running = new Set();
  for (const batch of together) {
    while (running.size >= slots) await Promise.race(running);
    const run = runBatch(batch, env, timed, concurrency, counts, true, together.length > 1).then(() => running.delete(run));
    running.add(run);
  }
  await Promise.all(running);
  if (together.length && solo.length) await sweep();
  for (const batch of solo) await runBatch(batch, env, timed, concurrency, counts, false, false);
  return counts;
}

/** How long one file may run before it is killed (its tests time out after 5 minutes each). */
const FILE_TIMEOUT_MS = 20 * 60_000;

/**
 * One runner process over `batch`; its output printed as it comes, or whole at its end when
 * `buffered` (`beside` others). Never throws: a runner that cannot start or runs too long is a failed file.
 */
async function runBatch(batch, env, timed, concurrency, counts, buffered, beside) {
  const n = counts.files++;
  const name = batch.length === 1 ? batch[0] : 'unit tests';
  const tap = join(tapDir, `${n}.tap`);
  const out = join(tapDir, `${n}.out`);
  const started = Date.now();
  const cpu0 = cpuTimes();
  let status = 1;
  let why = '';
  let fd = null;
  try {
    if (buffered) {
      fd = openSync(out, 'w');
      console.log(`# ${name} started (its output comes when it ends)`);
    }
    const child = spawn(
      process.execPath,
      [
        '--test',
        `--test-concurrency=${concurrency}`,
        '--test-timeout=300000',
        '--test-reporter=spec',
        '--test-reporter-destination=stdout',
        '--test-reporter=tap',
        `--test-reporter-destination=${tap}`,
        ...batch,
      ],
      { stdio: ['ignore', fd ?? 'inherit', fd ?? 'inherit'], env: { ...process.env, ...env } },
    );
    const timer = setTimeout(() => {
      why = `ran past ${FILE_TIMEOUT_MS / 60_000} minutes and was killed`;
      child.kill('SIGKILL');
    }, FILE_TIMEOUT_MS);
    try {
      const [code, signal] = await once(child, 'exit');
      status = code ?? 1;
      if (!why && status !== 0) why = `the runner ended with ${signal ?? `status ${status}`}`;
    } finally {
      clearTimeout(timer);
    }
  } catch (e) {
    why = `the runner could not run: ${e instanceof Error ? e.message : String(e)}`;
  } finally {
    if (fd !== null) {
      closeSync(fd);
      try {
        process.stdout.write(readFileSync(out));
      } catch {
        /* nothing written */
      }
    }
  }
  if (timed) fileTimes.push({ file: batch[0], ms: Date.now() - started, busy: busyShare(cpu0, cpuTimes()), env, beside });
  let text = '';
  try {
    text = readFileSync(tap, 'utf8');
  } catch {
    /* the runner died before it wrote */
  }
  // The last summary lines are the whole file's (nested suites print their own earlier).
  const count = (k) => Number([...text.matchAll(new RegExp(`^# ${k} (\\d+)$`, 'gm'))].at(-1)?.[1] ?? 0);
  counts.pass += count('pass');
  counts.fail += count('fail') + count('cancelled');
  counts.skipped += count('skipped');
  const failed = tapFailures(text).map((f) => ({ ...f, pass: currentPass }));
  failures.push(...failed);
  if (status !== 0) {
    counts.failedFiles.push(name);
    if (count('fail') + count('cancelled') === 0) counts.fail += 1;
    if (!failed.length) failures.push({ name, location: '', error: [`no test failed, but ${why}`], pass: currentPass });
  }
}

/** The machine's CPU time so far (/proc/stat's first line, in ticks): all of it and the busy part. */
function cpuTimes() {
  try {
    // user nice system idle iowait irq softirq steal (guest and guest_nice are in user and nice already)
    const f = readFileSync('/proc/stat', 'utf8').split('\n')[0].trim().split(/\s+/).slice(1, 9).map(Number);
    const total = f.reduce((a, b) => a + b, 0);
    return { total, busy: total - f[3] - (f[4] ?? 0) };
  } catch {
    return { total: 0, busy: 0 };
  }
}

/** The share of the machine's CPU busy between two readings (0..1). */
const busyShare = (a, b) => (b.total > a.total ? (b.busy - a.busy) / (b.total - a.total) : 0);

/** The pass running now (its failures are tagged with it). */
let currentPass = '';

async function pass(name, fn) {
  currentPass = name;
  const started = Date.now();
  const counts = await fn();
  passes.push({ name, ms: Date.now() - started, ...counts });
  return counts.fail === 0 && counts.failedFiles.length === 0;
}

let ok = true;
// warren-init's own tests (C, under ASan and UBSan), then its and warren-hostd's fuzzers for a few
// seconds each (libFuzzer: only where clang is, which `scripts/setup.sh --test` installs).
if (only !== '--integration' && !filter && !onVariant) {
  ok = await pass('native: C unit tests and fuzzers', () => {
    const make = (target) => spawnSync('make', ['-s', '-C', 'native', target], { stdio: 'inherit' }).status ?? 1;
    let status = make('check');
    if (status === 0 && spawnSync('clang', ['--version'], { stdio: 'ignore' }).status === 0) status = make('fuzz');
    else if (status === 0) console.log('# fuzzers skipped: no clang here (scripts/setup.sh --test installs it)');
    return { pass: status === 0 ? 1 : 0, fail: status === 0 ? 0 : 1, skipped: 0, files: 0, failedFiles: status === 0 ? [] : ['native'] };
  });
}
// Unit tests start no sandboxes: a file a core.
if (ok && unit.length && !onVariant) ok = await pass('unit tests', () => runFiles(unit, {}, false, { concurrency: availableParallelism() }));
if (ok && integration.length) {
  const name = onVariant ? `integration tests on ${JSON.stringify(variant)}` : 'integration tests (edge in-process, SQLite, containers)';
  // The suite on microVMs (TCG guests' timings) one file at a time, as the default microVM pass.
  ok = await pass(name, () => runFiles(integration, variant, true, { slots: variant.WARREN_TEST_BACKEND ? 1 : SLOTS }));
  await sweep();
}
// The init protocol on the other backend: the API's tests of commands, files, terminals and the
// E2B layer once more with microVMs as the default backend (under TCG here; tests that need what
// microVMs lack say so and are skipped).
const onMicrovm = integration.filter((f) => /\/(exec|files|pty|e2b)\.test\.js$/.test(f));
if (ok && onMicrovm.length && !onVariant) {
  console.log('\n# the API tests again on the microVM backend (WARREN_TEST_BACKEND=microvm)\n');
  ok = await pass('init protocol on microVMs (exec, files, pty, e2b)', () => runFiles(onMicrovm, { WARREN_TEST_BACKEND: 'microvm' }, true));
  await sweep();
}
rmSync(tapDir, { recursive: true, force: true });

const fmt = (ms) => `${(ms / 1000).toFixed(1)} s`;
console.log('\n# time per pass');
for (const p of passes)
  console.log(
    `#   ${p.name}: ${fmt(p.ms)} (${p.pass} passed, ${p.fail} failed, ${p.skipped} skipped)${p.failedFiles.length ? ` FAILED: ${p.failedFiles.join(', ')}` : ''}`,
  );
console.log(`#   all: ${fmt(passes.reduce((s, p) => s + p.ms, 0))}`);
if (fileTimes.length) {
  // With the machine's CPU busy meanwhile: a file that leaves it idle waits on timers or the guest.
  const shown = process.env.WARREN_TEST_TIMES === 'all' ? fileTimes.length : 12;
  console.log("# slowest integration files (wall, the machine's CPU busy meanwhile)");
  for (const f of [...fileTimes].sort((a, b) => b.ms - a.ms).slice(0, shown))
    console.log(
      `#   ${fmt(f.ms).padStart(8)}  ${`${Math.round(f.busy * 100)} %`.padStart(5)}  ${f.file.replace(/^test\/dist\//, '')}${f.env.WARREN_TEST_BACKEND ? ' (microVM)' : ''}${f.beside ? ' (beside another)' : ''}`,
    );
}
if (failures.length) {
  // Tests cancelled because a hook before them failed come first in the TAP, the hook's own error
  // after them: they are counted, not listed, so that the cause is not cut off.
  const cancelled = failures.filter((f) => f.failureType === 'cancelledByParent');
  const shown = failures.filter((f) => f.failureType !== 'cancelledByParent');
  console.log('# failures');
  for (const f of shown.slice(0, 20)) {
    console.log(`#   ✖ ${f.name}${f.location ? `  (${f.location})` : ''}  [${f.pass}]`);
    for (const line of f.error.slice(0, 12)) console.log(`#       ${line}`);
  }
  if (shown.length > 20) console.log(`#   … and ${shown.length - 20} more`);
  if (cancelled.length) console.log(`#   ${cancelled.length} more cancelled by a failure before them`);
}
process.exit(ok ? 0 : 1);

/**
 * The failed tests in a TAP text (node's tap reporter): name, location and error lines, the
 * suites that failed only for their subtests left out.
 */
function tapFailures(text) {
  const out = [];
  const lines = text.split('\n');
  for (let i = 0; i < lines.length; i++) {
    const m = /^(\s*)not ok \d+ - (.*)$/.exec(lines[i]);
    if (!m) continue;
    const indent = m[1].length + 2;
    const f = { name: m[2], location: '', error: [], failureType: '' };
    let j = i + 1;
    if (lines[j]?.trim() !== '---') continue;
    for (j++; j < lines.length && lines[j].trimEnd() !== `${' '.repeat(indent)}...`; j++) {
      const field = new RegExp(`^ {${indent}}(\\w+): ?(.*)$`).exec(lines[j]);
      if (!field) continue;
      const [, key, value] = field;
      if (key === 'location') f.location = value.replace(/^'|'$/g, '').replace(process.cwd() + '/', '');
      else if (key === 'failureType') f.failureType = value.replace(/'/g, '');
      else if (key === 'error' || key === 'stack') {
        const block = [];
        if (value === '|-' || value === '|') {
          while (j + 1 < lines.length && lines[j + 1].startsWith(' '.repeat(indent + 2))) block.push(lines[++j].slice(indent + 2));
        } else block.push(value.replace(/^'|'$/g, ''));
        if (key === 'error') f.error.push(...block);
        // The test file's own frame: where in the test it failed.
        else
          f.error.push(
            ...block
              .filter((l) => l.includes('/test/dist/') || l.includes('/dist/'))
              .slice(0, 2)
              .map((l) => `at ${l.trim()}`),
          );
      }
    }
    i = j;
    if (f.failureType !== 'subtestsFailed') out.push(f);
  }
  return out;
}

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
