// Faults injected into a real `warren up`: the process is killed (SIGKILL) at a named step of a
// call (WARREN_TEST_CRASH_AT), started again on the same data dir, and nothing is lost, nothing
// runs twice and no older state comes back.
import { test } from 'node:test';
import { execFileSync } from 'node:child_process';
import assert from 'node:assert/strict';
import { chmod, readdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { Warren, type WarrenError } from '@warren/sdk';
import { CgroupV1, readOwnCgroupParent } from '@warren/edge';
import { forceCleanup, hostLeftovers, IMAGE_CACHE, ownedTempDir, spawnUp, startTestWarren, type UpProcess } from './harness.js';
import { dockerSave, makeTar } from './tar-writer.js';

const KEY = 'faults-key';

/** Runs `body` against a node that dies at `step`, then against the node started again. */
async function crashAt(
  step: string,
  before: (w: Warren, dataDir: string) => Promise<unknown>,
  after: (w: Warren, state: unknown, dataDir: string) => Promise<void>,
): Promise<void> {
  const dataDir = await ownedTempDir('faults-');
  await chmod(dataDir, 0o711);
  const env = { ...process.env, WARREN_API_KEY: KEY, WARREN_IMAGE_CACHE: IMAGE_CACHE };
  const up = (crash?: string): Promise<UpProcess> =>
    spawnUp(['--data-dir', dataDir, '--images', 'busybox:latest', '--no-zram-swap'], crash ? { ...env, WARREN_TEST_CRASH_AT: crash } : env);
  let w = await up(step);
  try {
    const state = await before(new Warren({ url: w.url, apiKey: KEY }), dataDir);
    assert.equal(await w.exited, null, `the process was killed at ${step}`);
    w = await up();
    await after(new Warren({ url: w.url, apiKey: KEY }), state, dataDir);
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

/** The layer store's blob files: what a crash must not leave more of. */
const blobs = async (dataDir: string): Promise<string[]> => (await readdir(join(dataDir, 'layers', 'blobs'))).sort();

for (const step of ['create:stored', 'create:started']) {
  test(`a crash at ${step}: the sandbox is failed and gone from the host, its requestId answers it, and creates work again`, async () => {
    await crashAt(
      step,
      async (w) => {
        await assert.rejects(w.sandboxes.create({ image: 'busybox:latest', requestId: 'ep-1', labels: { run: 'crash' } }));
      },
      async (w) => {
        const { sandboxes } = await w.sandboxes.list({ labels: { run: 'crash' } });
        assert.equal(sandboxes.length, 1);
        const id = sandboxes[0]!.info.id;
        assert.equal(sandboxes[0]!.info.state, 'failed');
        assert.deepEqual(hostLeftovers(id), []);
        // The same requestId is the same sandbox: a retry never makes a second one.
        assert.equal((await w.sandboxes.create({ image: 'busybox:latest', requestId: 'ep-1' })).id, id);
        const sb = await w.sandboxes.create({ image: 'busybox:latest', requestId: 'ep-2' });
        assert.equal((await sb.exec('echo ok')).stdout, 'ok\n');
        await sb.delete();
      },
    );
  });
}

test('a crash while a commit holds the sandbox frozen: it comes back running and thawed, no image, and the commit works again', async () => {
  await crashAt(
    'commit:frozen',
    async (w, dataDir) => {
      const sb = await w.sandboxes.create({ image: 'busybox:latest' });
      await sb.exec('echo kept > /root/state');
      const before = await blobs(dataDir);
      await assert.rejects(sb.commit('snap:1'));
      return { id: sb.id, before };
    },
    async (w, state, dataDir) => {
      const { id, before } = state as { id: string; before: string[] };
      const freezer = await readFile(join(new CgroupV1().dir('freezer', `${readOwnCgroupParent()}/${id}`), 'freezer.state'), 'utf8');
      assert.equal(freezer.trim(), 'THAWED');
      const sb = await w.sandboxes.get(id);
      assert.equal(sb.info.state, 'running');
      assert.equal((await sb.exec('cat /root/state')).stdout, 'kept\n');
      assert.equal(
        (await w.images()).find((i) => i.name === 'snap:1'),
        undefined,
      );
      assert.deepEqual(await blobs(dataDir), before);
      await sb.commit('snap:1');
      const again = await w.sandboxes.create({ image: 'snap:1' });
      assert.equal((await again.exec('cat /root/state')).stdout, 'kept\n');
      await Promise.all([again.delete(), sb.delete()]);
    },
  );
});

test('a crash after a commit wrote its layer, before the image was named: the unnamed layer is removed at start', async () => {
  await crashAt(
    'commit:layer',
    async (w, dataDir) => {
      const sb = await w.sandboxes.create({ image: 'busybox:latest' });
      await sb.exec('head -c 100000 /dev/urandom > /root/blob');
      const before = await blobs(dataDir);
      await assert.rejects(sb.commit('snap:2'));
      return { id: sb.id, before };
    },
    async (w, state, dataDir) => {
      const { id, before } = state as { id: string; before: string[] };
      assert.deepEqual(await blobs(dataDir), before);
      assert.equal(
        (await w.images()).find((i) => i.name === 'snap:2'),
        undefined,
      );
      const sb = await w.sandboxes.get(id);
      const image = await sb.commit('snap:2');
      assert.equal(image.layers.length, 2);
      await sb.delete();
    },
  );
});

test('a crash after an import converted its layers, before the image was named: nothing of it is left, and the import works again', async () => {
  const archive = dockerSave([
    makeTar([
      { path: 'app/', type: 'dir' },
      { path: 'app/hello', content: 'hello\n' },
    ]),
  ]);
  await crashAt(
    'import:layers',
    async (w, dataDir) => {
      const before = await blobs(dataDir);
      await assert.rejects(w.importImage('app:crash', archive));
      return before;
    },
    async (w, before, dataDir) => {
      assert.deepEqual(await blobs(dataDir), before);
      assert.equal(
        (await w.images()).find((i) => i.name === 'app:crash'),
        undefined,
      );
      assert.equal((await w.importImage('app:crash', archive)).name, 'app:crash');
    },
  );
});

test('warren-hostd killed: a new one takes its place; running sandboxes keep serving, new ones get their own network, nothing is left', async () => {
  const t = await startTestWarren({ images: ['busybox:latest'], network: { poolSize: 2 } });
  const helper = (): number[] =>
    execFileSync('sh', ['-c', `pgrep -P ${process.pid} -x warren-hostd || true`])
      .toString()
      .split('\n')
      .filter(Boolean)
      .map(Number);
  try {
    const old = await t.client.sandboxes.create({ image: 'busybox:latest' });
    const [first] = helper();
    assert.ok(first);
    process.kill(first, 'SIGKILL');
    for (const deadline = Date.now() + 30_000; Date.now() < deadline && (helper()[0] ?? first) === first; ) await new Promise((r) => setTimeout(r, 10));
    assert.notEqual(helper()[0] ?? first, first, 'a new helper started');
    assert.equal((await old.exec('echo still')).stdout, 'still\n');
    // New sandboxes, past the namespaces the dead helper held: each in its own, with its address.
    const made = [];
    for (let i = 0; i < 4; i++) made.push(await t.client.sandboxes.create({ image: 'busybox:latest', network: { egress: 'deny', allow: ['npm.example'] } }));
    const addresses = await Promise.all(made.map(async (sb) => (await sb.exec("ip -4 -o addr show eth0 | awk '{print $4}'")).stdout.trim()));
    assert.deepEqual(
      addresses,
      made.map((sb) => `${sb.info.network.address}/31`),
    );
    for (const sb of [old, ...made]) {
      await sb.delete();
      assert.deepEqual(hostLeftovers(sb.id), []);
    }
  } finally {
    await t.close();
  }
});
