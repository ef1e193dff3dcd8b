// The Python client's own tests (python/tests, unittest) against a real Warren: every call of
// the client, streaming, reattach, errors, and the asyncio client with hundreds of sandboxes.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdtemp, readdir, rm } from 'node:fs/promises';
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
