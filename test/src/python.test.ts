// The Python client's own tests (python/tests, unittest) against a real Warren: every call of
// the client, streaming, reattach, errors, and the asyncio client with hundreds of sandboxes.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { chmod, readFile, readdir, rm } from 'node:fs/promises';
import { createServer, type AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { forceCleanup, IMAGE_CACHE, ownedTempDir, spawnUp, startTestWarren, type TestWarren, type UpProcess } from './harness.js';

import { PYTHON, PYTHON_DIR, runPython } from './python-run.js';

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

// The oldest Python the client supports, where this machine has one (pyenv's, not Debian's).
const PYTHON_39 = [
  process.env.WARREN_PYTHON_39,
  join(process.env.PYENV_ROOT ?? join(process.env.HOME ?? '/root', '.pyenv'), 'versions/3.9.18/bin/python3'),
].find((p): p is string => !!p && existsSync(p));

test('the Python client on Python 3.9: unit, live and asyncio suites', { skip: PYTHON_39 ? false : 'no Python 3.9 here' }, async () => {
  const env = { WARREN_URL: t.url, WARREN_API_KEY: t.key };
  const r = await runPython(['-m', 'unittest', 'tests.test_unit', 'tests.test_live', 'tests.test_async'], env, PYTHON_DIR, PYTHON_39);
  assertAllPassed(r, 30);
});

test('the Python client installs with pip where no package index is reachable, and type-checks', async () => {
  const dir = await ownedTempDir('pip-');
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
  const dir = await ownedTempDir('pyrollout-');
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

const RESTART_PROGRAM = `
import json, sys, time
from warren import TransportError, Warren
w = Warren()
sb = w.sandboxes.create(image="busybox:latest")
t0 = time.monotonic()
try:
    for ev in sb.exec_stream("echo a; sleep 120; echo b"):
        if ev.type == "stdout":
            t0 = time.monotonic()
            print(json.dumps({"streaming": True}), flush=True)
    print(json.dumps({"error": None}), flush=True)
except TransportError as e:
    print(json.dumps({"error": e.code, "afterS": time.monotonic() - t0, "message": str(e)}), flush=True)
sys.stdin.readline()
print(json.dumps({"state": w.sandboxes.get(sb.id).info.state, "echo": sb.exec("echo back").stdout}), flush=True)
sb.delete()
`;

test('the Python client when the server dies mid-stream: a clear error at once, and the same client works once it is back', async () => {
  const dataDir = await ownedTempDir('pyrestart-');
  await chmod(dataDir, 0o711);
  const port = await freePort();
  const key = 'py-restart-key';
  const env = { ...process.env, WARREN_API_KEY: key, WARREN_IMAGE_CACHE: IMAGE_CACHE };
  const up = (): Promise<UpProcess> => spawnUp(['--data-dir', dataDir, '--images', 'busybox:latest', '--no-zram-swap', '--port', String(port)], env);
  let server = await up();
  const py = spawn(PYTHON, ['-c', RESTART_PROGRAM], {
    cwd: PYTHON_DIR,
    env: { ...process.env, WARREN_URL: server.url, WARREN_API_KEY: key, PYTHONDONTWRITEBYTECODE: '1' },
    stdio: ['pipe', 'pipe', 'inherit'],
  });
  const lines: Array<Record<string, unknown>> = [];
  const next = (pred: (l: Record<string, unknown>) => boolean): Promise<Record<string, unknown>> =>
    new Promise((resolve, reject) => {
      const check = (): boolean => {
        const l = lines.find(pred);
        if (l) resolve(l);
        return !!l;
      };
      if (check()) return;
      const timer = setTimeout(() => reject(new Error(`no such line: ${JSON.stringify(lines)}`)), 60_000);
      py.stdout.on('data', () => check() && clearTimeout(timer));
    });
  let buf = '';
  py.stdout.on('data', (d: Buffer) => {
    buf += d.toString();
    for (let nl = buf.indexOf('\n'); nl >= 0; nl = buf.indexOf('\n')) {
      lines.push(JSON.parse(buf.slice(0, nl)) as Record<string, unknown>);
      buf = buf.slice(nl + 1);
    }
  });
  try {
    await next((l) => l.streaming === true);
    await server.kill('SIGKILL');
    const err = await next((l) => 'error' in l);
    assert.equal(err.error, 'unavailable', JSON.stringify(err));
    assert.ok((err.afterS as number) < 10, `the error came ${String(err.afterS)} s after the stream's last output`);
    server = await up();
    py.stdin.write('\n');
    // Its kept-alive connection died with the old server: the client opens a new one.
    assert.deepEqual(await next((l) => 'state' in l), { state: 'running', echo: 'back\n' });
  } finally {
    py.kill('SIGKILL');
    await server.kill('SIGKILL').catch(() => undefined);
    await forceCleanup(dataDir);
  }
});

function freePort(): Promise<number> {
  return new Promise((resolve) => {
    const s = createServer().listen(0, '127.0.0.1', () => {
      const p = (s.address() as AddressInfo).port;
      s.close(() => resolve(p));
    });
  });
}
