import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { readFile, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { ownedTempDir, startTestWarren } from './harness.js';

const DRIVER = fileURLToPath(new URL('../../examples/rollout/dist/driver.js', import.meta.url));

interface State {
  results: Record<string, { episode: number; test: string[]; runs: number }>;
  steps: Record<string, { commandId: string; offset: number }>;
}

test('a rollout driver killed mid-batch and restarted finishes every episode exactly once, with the same results', async () => {
  const t = await startTestWarren({ images: ['busybox:latest', 'debian-python:latest'] });
  const dir = await ownedTempDir('rollout-');
  const stateFile = join(dir, 'state.json');
  const batch = `b${Date.now().toString(36)}`;
  const EPISODES = 6;
  const run = () =>
    spawn(process.execPath, [DRIVER, '--batch', batch, '--episodes', String(EPISODES), '--parallel', '3', '--state', stateFile], {
      env: { ...process.env, WARREN_URL: t.url, WARREN_API_KEY: t.key },
      stdio: ['ignore', 'pipe', 'inherit'],
    });
  const readState = async (): Promise<State | null> =>
    readFile(stateFile, 'utf8').then(
      (s) => JSON.parse(s) as State,
      () => null,
    );
  try {
    // First run: killed (SIGKILL) while it is reading a test's output, after an episode finished.
    const first = run();
    const exited = new Promise<number | null>((r) => first.on('exit', (code) => r(code)));
    let killedMidStep = false;
    for (const deadline = Date.now() + 60_000; Date.now() < deadline; ) {
      const s = await readState();
      const reading = Object.values(s?.steps ?? {}).some((x) => x.offset > 0);
      if (s && reading && Object.keys(s.results).length >= 1) {
        killedMidStep = true;
        break;
      }
      await new Promise((r) => setTimeout(r, 25));
    }
    first.kill('SIGKILL');
    await exited;
    assert.ok(killedMidStep, 'the driver was killed in the middle of a step');
    const mid = (await readState())!;
    assert.ok(Object.keys(mid.results).length < EPISODES, 'mid-batch');

    // Second run: continues from the state file.
    const second = run();
    let out = '';
    second.stdout.on('data', (d: Buffer) => (out += d.toString()));
    assert.equal(await new Promise<number | null>((r) => second.on('exit', (code) => r(code))), 0);
    assert.match(out, new RegExp(`"finished":${EPISODES}`));

    const done = (await readState())!;
    for (let i = 0; i < EPISODES; i++) {
      const r = done.results[`${batch}-ep${i}`];
      assert.ok(r, `episode ${i}`);
      assert.deepEqual(
        r.test,
        [0, 1, 2, 3, 4].map((k) => String(k * (i + 1))),
        `episode ${i} output`,
      );
      assert.equal(r.runs, 1, `episode ${i} ran its side effect once`);
    }
    // One sandbox per episode, ever (a retried create returned the first), all deleted at the end.
    const list = await t.client.sandboxes.list({ labels: { batch } });
    assert.equal(list.sandboxes.length, EPISODES);
    assert.ok(list.sandboxes.every((s) => s.info.state === 'stopped'));
  } finally {
    await t.close();
    await rm(dir, { recursive: true, force: true });
  }
});
