// The Python client's own tests (python/tests, unittest) against a real Warren: every call of
// the client, streaming, reattach, errors, and the asyncio client with hundreds of sandboxes.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { startTestWarren, type TestWarren } from './harness.js';

export const PYTHON = process.env.WARREN_PYTHON ?? 'python3';
export const PYTHON_DIR = fileURLToPath(new URL('../../python', import.meta.url));

/** Runs a Python program to its end; its exit code and output. */
export function runPython(args: string[], env: NodeJS.ProcessEnv, cwd = PYTHON_DIR): Promise<{ code: number | null; out: string }> {
  return new Promise((resolve) => {
    const p = spawn(PYTHON, args, { cwd, env: { ...process.env, PYTHONDONTWRITEBYTECODE: '1', ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
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
