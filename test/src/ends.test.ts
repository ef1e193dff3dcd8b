import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { isDeepStrictEqual } from 'node:util';
import { SandboxEndedError, type ExecEvent } from '@warren/sdk';
import { http, initOf, notOnMicrovm, startTestWarren, until, type TestWarren } from './harness.js';

// Typed ends on real sandboxes: a command says who ended it (its timeout, a kill, the kernel's
// OOM killer at the sandbox's own limit) or that it exited; a sandbox says why it ended and whose
// doing that was, and a command its end cut off raises SandboxEndedError, not a timeout.
let t: TestWarren;
before(async () => {
  t = await startTestWarren({ images: ['busybox:latest'] });
});
after(async () => {
  await t?.close();
});

describe('typed ends', () => {
  test(
    'a command exits, times out, is killed on request, or is killed by the OOM killer at its sandbox’s limit: each says so',
    notOnMicrovm('the cgroup’s OOM count is the container backend’s'),
    async () => {
      const sb = await t.client.sandboxes.create({ image: 'busybox:latest', resources: { memoryMiB: 32 } });
      try {
        const exited = await sb.exec('exit 3');
        assert.deepEqual([exited.exitCode, exited.killedBy], [3, null]);
        const timedOut = await sb.exec('sleep 30', { timeoutMs: 200 });
        assert.deepEqual([timedOut.timedOut, timedOut.killedBy, timedOut.limitsHit], [true, 'timeout', []]);
        // A command killed through the API.
        const stream = sb.execStream(['sleep', '30']);
        const first = (await stream.next()).value as ExecEvent | undefined;
        assert.equal(first?.type, 'start');
        const commandId = first.type === 'start' ? first.commandId : '';
        await sb.kill(commandId, 'SIGKILL');
        let last: ExecEvent | undefined;
        for await (const ev of stream) last = ev;
        assert.deepEqual(last?.type === 'exit' ? [last.signal, last.killedBy] : last, ['SIGKILL', 'request']);
        // A pipe's reader that holds all it reads, past the sandbox's 32 MiB: the kernel kills it
        // (its shell says 137) — or, on a loaded machine where the reader's memory is not freed
        // before the next charge, the shell too (the command then ends by SIGKILL). Either way the
        // OOM killer did it at the sandbox's memory limit.
        const oom = await sb.exec('head -c 100000000 /dev/zero | tail > /dev/null', { timeoutMs: 60_000 });
        const got = [oom.exitCode, oom.signal ?? null, oom.killedBy, oom.limitsHit];
        const either = [
          [137, null, 'oom', ['memory']],
          [null, 'SIGKILL', 'oom', ['memory']],
        ];
        assert.ok(
          either.some((want) => isDeepStrictEqual(want, got)),
          JSON.stringify(got),
        );
        // A command that kills itself the same way is its own doing.
        const self = await sb.exec('kill -9 $$');
        assert.deepEqual([self.signal ?? self.exitCode, self.killedBy, self.limitsHit], ['SIGKILL', null, []]);
        // The sandbox lives on.
        assert.equal((await sb.refresh()).end, null);
      } finally {
        await sb.delete();
      }
      assert.deepEqual((await sb.refresh()).end?.reason, 'deleted');
    },
  );

  test(
    'a command that runs into its sandbox’s disk or pids limit says which (the sandbox lives on); one that fails otherwise says none',
    notOnMicrovm('the cgroup’s counters and the disk’s qgroup are the container backend’s'),
    async () => {
      const sb = await t.client.sandboxes.create({ image: 'busybox:latest', resources: { pids: 16, diskMiB: 16 } });
      try {
        const ok = await sb.exec('echo fine');
        assert.deepEqual([ok.exitCode, ok.limitsHit], [0, []]);
        const failed = await sb.exec('cat /nonexistent');
        assert.deepEqual([failed.exitCode, failed.limitsHit], [1, []]);
        // Its writable layer filled: the write is refused at 16 MiB.
        const fill = await sb.exec(['dd', 'if=/dev/zero', 'of=/f', 'bs=1M', 'count=100'], { timeoutMs: 30_000 });
        assert.match(fill.stderr, /Disk quota exceeded/);
        assert.deepEqual([fill.exitCode, fill.limitsHit], [1, ['disk']]);
        // Room again (what is freed counts once committed): a failure is no longer the disk's.
        assert.equal((await sb.exec('rm /f && sync && echo freed')).stdout, 'freed\n');
        assert.deepEqual((await sb.exec('exit 2')).limitsHit, []);
        // A fork bomb bounded by pids: busybox's sh gives up at the first fork refused (bash would retry for seconds).
        const bomb = await sb.exec(['sh', '-c', 'for i in $(seq 40); do sleep 1 & done; wait'], { timeoutMs: 30_000 });
        assert.notEqual(bomb.exitCode, 0, bomb.stderr);
        assert.deepEqual(bomb.limitsHit, ['pids'], bomb.stderr);
        assert.equal((await sb.refresh()).end, null);
      } finally {
        await sb.delete();
      }
    },
  );

  test(
    'a sandbox whose init is killed from the host ends as exited (not the agent’s doing); a command running then raises SandboxEndedError; /metrics counts ends by reason',
    notOnMicrovm('the init is a host process only for containers'),
    async () => {
      const sb = await t.client.sandboxes.create({ image: 'busybox:latest' });
      const running = sb.exec('sleep 60', { timeoutMs: 90_000 });
      await until(async () => (await sb.commands()).length > 0, 5000);
      const init = await initOf(sb.id);
      assert.ok(init, 'its init is a host process');
      process.kill(init.pid, 'SIGKILL');
      const e = await running.then(
        () => null,
        (x: unknown) => x,
      );
      assert.ok(e instanceof SandboxEndedError, `the cut command raised ${String(e)}`);
      assert.deepEqual([e.end.reason, e.end.by], ['exited', 'platform']);
      const info = await sb.refresh();
      assert.deepEqual([info.state, info.end?.reason], ['failed', 'exited']);
      const metrics = (await http(t, 'GET', '/metrics')).text;
      assert.match(metrics, /warren_sandbox_ends_total\{reason="exited"\} [1-9]/);
      assert.match(metrics, /warren_sandbox_ends_total\{reason="deleted"\} [1-9]/);
      await sb.delete();
    },
  );
});
