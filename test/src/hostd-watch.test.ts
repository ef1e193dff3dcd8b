import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { HostHelper, processStartTime } from '@warren/edge';

// warren-hostd tells when a watched process ends (a pidfd): how the edge notices a sandbox's init
// killed from outside without reading every init's /proc/PID/stat every 2 s.
const HOSTD = new URL('../../native/build/warren-hostd', import.meta.url).pathname;

/** A process that is not warren-hostd's child (as an init adopted after a restart is not), and its start time. */
async function sleeper(): Promise<{ child: ChildProcess; pid: number; startTime: number }> {
  const child = spawn('sleep', ['60'], { stdio: 'ignore' });
  await once(child, 'spawn');
  const pid = child.pid ?? 0;
  const startTime = await processStartTime(pid);
  assert.ok(startTime !== null);
  return { child, pid, startTime };
}

/** A promise settled by the watch's callback, and whether it has been yet. */
function told(): { onExit: () => void; done: Promise<void>; seen: () => boolean } {
  let seen = false;
  let resolve!: () => void;
  const done = new Promise<void>((r) => (resolve = r));
  return { onExit: () => ((seen = true), resolve()), done, seen: () => seen };
}

test('a watched process killed from outside is reported; one already gone (or a reused pid) at once; a watcher that stopped waiting is not; watches outlive a helper restart', async () => {
  let restarted!: () => void;
  const restart = new Promise<void>((r) => (restarted = r));
  const h = new HostHelper(HOSTD, () => restarted());
  const a = await sleeper();
  const b = await sleeper();
  try {
    const ta = told();
    await h.watchExit(a.pid, a.startTime, ta.onExit);
    // A positive control first: a live process is not reported.
    const tb = told();
    await h.watchExit(b.pid, b.startTime, tb.onExit);
    assert.equal(ta.seen(), false, 'a live process is not reported');
    a.child.kill('SIGKILL');
    await ta.done;
    // The wrong start time: the pid is another process's, so the one asked about has ended.
    const stale = told();
    await h.watchExit(b.pid, b.startTime - 1, stale.onExit);
    await stale.done;
    assert.equal(tb.seen(), false, 'the live one with the same pid is not reported');
    // A second watcher of b that stops waiting is not told; the first still is.
    const gaveUp = told();
    await h.watchExit(b.pid, b.startTime, gaveUp.onExit);
    h.unwatchExit(b.pid, b.startTime, gaveUp.onExit);
    // The helper dies: a new one watches b from then on.
    process.kill(h.pid, 'SIGKILL');
    await restart;
    b.child.kill('SIGKILL');
    await tb.done;
    assert.equal(gaveUp.seen(), false, 'a watcher that stopped waiting is not told');
  } finally {
    a.child.kill('SIGKILL');
    b.child.kill('SIGKILL');
    await h.close();
  }
});
