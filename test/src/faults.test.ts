// Faults injected into a real `warren up`: the process is killed (SIGKILL) at a named step of a
// call (WARREN_TEST_CRASH_AT), started again on the same data dir, and nothing is lost, nothing
// runs twice and no older state comes back.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { chmod, mkdtemp } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Warren, type WarrenError } from '@warren/sdk';
import { forceCleanup, hostLeftovers, IMAGE_CACHE, spawnUp, type UpProcess } from './harness.js';

const KEY = 'faults-key';

/** Runs `body` against a node that dies at `step`, then against the node started again. */
async function crashAt(step: string, before: (w: Warren) => Promise<unknown>, after: (w: Warren, state: unknown) => Promise<void>): Promise<void> {
  const dataDir = await mkdtemp(join(tmpdir(), 'warren-faults-'));
  await chmod(dataDir, 0o711);
  const env = { ...process.env, WARREN_API_KEY: KEY, WARREN_IMAGE_CACHE: IMAGE_CACHE };
  const up = (crash?: string): Promise<UpProcess> =>
    spawnUp(['--data-dir', dataDir, '--images', 'busybox:latest', '--no-zram-swap'], crash ? { ...env, WARREN_TEST_CRASH_AT: crash } : env);
  let w = await up(step);
  try {
    const state = await before(new Warren({ url: w.url, apiKey: KEY }));
    assert.equal(await w.exited, null, `the process was killed at ${step}`);
    w = await up();
    await after(new Warren({ url: w.url, apiKey: KEY }), state);
    await w.kill('SIGTERM');
  } finally {
    await w.kill('SIGKILL').catch(() => undefined);
    await forceCleanup(dataDir);
  }
}

for (const step of ['exec:stored', 'exec:started']) {
  test(`a crash at ${step} of an exec with a requestId: the retry answers conflict, and the command ran at most once`, async () => {
    await crashAt(
      step,
      async (w) => {
        const sb = await w.sandboxes.create({ image: 'busybox:latest' });
        await assert.rejects(sb.exec('echo ran >> /root/runs', { requestId: 'step-7' }));
        return sb.id;
      },
      async (w, id) => {
        const sb = await w.sandboxes.get(id as string);
        assert.equal(sb.info.state, 'running');
        await assert.rejects(sb.exec('echo ran >> /root/runs', { requestId: 'step-7' }), (e: WarrenError) => e.code === 'conflict');
        const runs = (await sb.exec('cat /root/runs 2>/dev/null | wc -l')).stdout.trim();
        assert.ok(runs === '0' || runs === '1', `ran ${runs} times`);
        // Another requestId runs as usual.
        assert.equal((await sb.exec('echo fresh', { requestId: 'step-8' })).stdout, 'fresh\n');
        await sb.delete();
      },
    );
  });
}

test('a crash right after a delete is recorded: the sandbox does not come back, and nothing of it is left', async () => {
  await crashAt(
    'delete:stored',
    async (w) => {
      const sb = await w.sandboxes.create({ image: 'busybox:latest' });
      await assert.rejects(sb.delete());
      return sb.id;
    },
    async (w, id) => {
      const sb = await w.sandboxes.get(id as string);
      assert.equal(sb.info.state, 'stopped');
      assert.deepEqual(hostLeftovers(id as string), []);
    },
  );
});

test('a crash right after new network rules are recorded: the restart applies the new ones, never the older, looser ones', async () => {
  await crashAt(
    'network:stored',
    async (w) => {
      const sb = await w.sandboxes.create({ image: 'busybox:latest', network: { egress: 'allow' } });
      await assert.rejects(sb.setNetwork({ egress: 'deny', allow: ['npm.example'] }));
      return sb.id;
    },
    async (w, id) => {
      const sb = await w.sandboxes.get(id as string);
      assert.equal(sb.info.state, 'running');
      assert.equal(sb.info.network.egress, 'deny');
      assert.deepEqual(sb.info.network.allow, ['npm.example']);
      await sb.delete();
    },
  );
});
