// The Python client's own tests (python/tests, unittest) against a real Warren: every call of
// the client, streaming, reattach, errors, and the asyncio client with hundreds of sandboxes.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdtemp, readFile, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { startTestWarren, type TestWarren } from './harness.js';

// Debian's Python (scripts/setup.sh --test installs it, with setuptools, pip and mypy).
export const PYTHON = process.env.WARREN_PYTHON ?? (existsSync('/usr/bin/python3') ? '/usr/bin/python3' : 'python3');
export const PYTHON_DIR = fileURLToPath(new URL('../../python', import.meta.url));

/** Runs a Python program to its end; its exit code and output. */
export function runPython(args: string[], env: NodeJS.ProcessEnv, cwd = PYTHON_DIR, program = PYTHON): Promise<{ code: number | null; out: string }> {
  return new Promise((resolve) => {
    const p = spawn(program, args, { cwd, env: { ...process.env, PYTHONDONTWRITEBYTECODE: '1', ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    p.stdout.on('data', (d: Buffer) => (out += d.toString()));
    p.stderr.on('data', (d: Buffer) => (out += d.toString()));
    p.on('exit', (code) => resolve({ code, out }));
  });
}

let t: TestWarren;
before(async () => {
  t = await startTestWarren({ images: ['busybox:latest', 'debian-python:latest'] });
});
after(async () => {
  await t?.close();
});

/** unittest's summary: every test ran (none skipped) and passed. */
function assertAllPassed(r: { code: number | null; out: string }, atLeast: number): void {
  const ran = Number(/Ran (\d+) tests?/.exec(r.out)?.[1] ?? 0);
  assert.equal(r.code, 0, r.out);
  assert.ok(ran >= atLeast, `ran ${ran} tests:\n${r.out}`);
  assert.doesNotMatch(r.out, /skipped=/, r.out);
}

test('the Python client: unit tests (wire, retries, NDJSON, safe tar extraction) pass', async () => {
  assertAllPassed(await runPython(['-m', 'unittest', '-v', 'tests.test_unit'], {}), 10);
});

test('the Python client: every call against a real Warren', async () => {
  assertAllPassed(await runPython(['-m', 'unittest', '-v', 'tests.test_live'], { WARREN_URL: t.url, WARREN_API_KEY: t.key }), 15);
});

test('the Python client: the asyncio client, with 200 sandboxes at once', async () => {
  assertAllPassed(await runPython(['-m', 'unittest', '-v', 'tests.test_async'], { WARREN_URL: t.url, WARREN_API_KEY: t.key }), 3);
});

test('the Python client installs with pip where no package index is reachable, and type-checks', async () => {
  const dir = await mkdtemp(join(tmpdir(), 'warren-pip-'));
  try {
    const pip = await runPython(['-m', 'pip', 'install', '-q', '--no-build-isolation', '--no-index', '--target', dir, PYTHON_DIR], {});
    assert.equal(pip.code, 0, pip.out);
    assert.ok((await readdir(join(dir, 'warren'))).includes('py.typed'));
    // Imported from the install, not from the checkout.
    const r = await runPython(
      ['-c', 'import warren, sys; print(warren.__file__.startswith(sys.argv[1]), warren.__version__)', dir],
      { PYTHONPATH: dir },
      tmpdir(),
    );
    assert.equal(r.out, 'True 0.1.0\n');
    const mypy = await runPython(['warren'], {}, PYTHON_DIR, 'mypy');
    assert.equal(mypy.code, 0, mypy.out);
    assert.match(mypy.out, /Success: no issues found/);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});

test('the Python rollout driver, killed (-9) mid-batch and started again, finishes every episode once and runs no test twice', async () => {
  const dir = await mkdtemp(join(tmpdir(), 'warren-pyrollout-'));
  const out = join(dir, 'rewards.jsonl');
  const batch = `pyb${Date.now().toString(36)}`;
  const EPISODES = 6;
  const driver = fileURLToPath(new URL('../../examples/python-rollout/rollout.py', import.meta.url));
  const args = [driver, '--batch', batch, '--episodes', String(EPISODES), '--parallel', '3', '--out', out];
  const env = { ...process.env, WARREN_URL: t.url, WARREN_API_KEY: t.key, PYTHONDONTWRITEBYTECODE: '1' };
  try {
    const first = spawn(PYTHON, args, { env, stdio: ['ignore', 'pipe', 'inherit'] });
    const exited = new Promise<number | null>((r) => first.on('exit', (code) => r(code)));
    // Killed once an episode has finished while others' tests are running.
    let log = '';
    let killedMidStep = false;
    await new Promise<void>((resolve) => {
      first.stdout.on('data', (d: Buffer) => {
        log += d.toString();
        const lines = log
          .split('\n')
          .filter(Boolean)
          .map((l) => JSON.parse(l) as { finished?: number; started?: string; step?: string });
        const fin = lines.filter((l) => l.finished !== undefined).map((l) => l.finished);
        const running = lines.filter((l) => l.started && !fin.includes(Number(/-ep(\d+)-/.exec(l.step ?? '')?.[1])));
        if (fin.length >= 1 && running.length >= 1 && !killedMidStep) {
          killedMidStep = true;
          first.kill('SIGKILL');
          resolve();
        }
      });
      first.on('exit', () => resolve());
    });
    await exited;
    assert.ok(killedMidStep, `killed mid-step:\n${log}`);
    const mid = (await readFile(out, 'utf8')).split('\n').filter(Boolean).length;
    assert.ok(mid >= 1 && mid < EPISODES, `mid-batch: ${mid} finished`);

    const second = await runPython(args, env, dir);
    assert.equal(second.code, 0, second.out);
    const results = (await readFile(out, 'utf8'))
      .split('\n')
      .filter(Boolean)
      .map((l) => JSON.parse(l) as { episode: number; reward: number; runs: number; sandbox: string });
    assert.deepEqual(results.map((r) => r.episode).sort(), [...Array(EPISODES).keys()], 'every episode once');
    for (const r of results) {
      assert.equal(r.runs, 1, `episode ${r.episode}: its test ran once`);
      assert.equal(r.reward, r.episode % 2 === 0 ? 1 : 0, `episode ${r.episode}: its reward`);
    }
    // Nothing of the batch is left running.
    const left = (await t.client.sandboxes.list({ labels: { batch } })).sandboxes.filter((s) => s.info.state !== 'stopped');
    assert.deepEqual(
      left.map((s) => s.id),
      [],
    );
  } finally {
    await t.client.sandboxes.batch('delete', { batch }).catch(() => undefined);
    await rm(dir, { recursive: true, force: true });
  }
});
