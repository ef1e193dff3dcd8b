import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { parseProcStat, parseUidMapBase, processExited, processExitedNow, processStartTime, waitExited } from './proc.js';

test('stat fields are read after the last parenthesis of the command name', () => {
  const line = '4242 (we ird) (x) S 1 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 10 0';
  assert.deepEqual(parseProcStat(line), { state: 'S', startTime: 987654 });
});

test('a live process is not exited; another start time under its pid is', async () => {
  const start = await processStartTime(process.pid);
  assert.ok(start !== null && start > 0);
  assert.equal(await processExited(process.pid, start), false);
  assert.equal(await processExited(process.pid, start + 1), true);
  assert.equal(await processExited(2 ** 22 + 1), true);
  // Read at once, the same answers.
  assert.equal(processExitedNow(process.pid, start), false);
  assert.equal(processExitedNow(process.pid, start + 1), true);
  assert.equal(processExitedNow(2 ** 22 + 1), true);
});

test('a child that ended (and was reaped) reads as exited at once', async () => {
  const child = spawn('sleep', ['30'], { stdio: 'ignore' });
  await once(child, 'spawn');
  const pid = child.pid!;
  const start = await processStartTime(pid);
  assert.equal(processExitedNow(pid, start), false);
  child.kill('SIGKILL');
  await once(child, 'exit');
  assert.equal(processExitedNow(pid, start), true);
});

test('a wait for a process to end: woken by the watcher, by /proc without one, or ended by its deadline', async () => {
  const child = spawn('sleep', ['30'], { stdio: 'ignore' });
  await once(child, 'spawn');
  const pid = child.pid!;
  const start = (await processStartTime(pid))!;
  try {
    // The watcher's word ends the wait though /proc still shows the process (stopped, here).
    child.kill('SIGSTOP');
    const asked: Array<() => void> = [];
    const forgotten: Array<() => void> = [];
    const watcher = {
      watchExit: async (p: number, s: number, onExit: () => void) => {
        if (p === pid && s === start) asked.push(onExit);
      },
      unwatchExit: (_p: number, _s: number, onExit: () => void) => void forgotten.push(onExit),
    };
    const watched = waitExited(pid, start, 60_000, watcher);
    await new Promise((r) => setImmediate(r));
    assert.equal(asked.length, 1, 'the watcher was asked');
    asked[0]!();
    await watched;
    assert.equal(processExitedNow(pid, start), false);
    // A wait that ends leaves its callback with the watcher no longer.
    assert.deepEqual(forgotten, asked);
    // Without a watcher that answers, its end is read from /proc.
    const polled = waitExited(pid, start, 60_000, { watchExit: () => Promise.reject(new Error('no watch')) });
    child.kill('SIGKILL');
    await once(child, 'exit');
    await polled;
    // One that never ends (this process) and no word: the wait ends at its deadline.
    const t0 = performance.now();
    await waitExited(process.pid, (await processStartTime(process.pid))!, 50, watcher);
    assert.ok(performance.now() - t0 >= 45);
    assert.equal(forgotten.length, 2);
  } finally {
    child.kill('SIGKILL');
  }
});

test("a user namespace's base is the host id its root maps to", () => {
  assert.equal(parseUidMapBase('         0 1073807360      65536\n'), 1073807360);
  assert.equal(parseUidMapBase('0 0 4294967295'), 0);
  assert.equal(parseUidMapBase('      1000 1073807360      65536\n'), null, 'root is not mapped');
  assert.equal(parseUidMapBase(''), null);
});
