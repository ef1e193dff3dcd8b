import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import * as e2b from 'e2b';
import { e2bKey } from '@warren/server';
import { notOnMicrovm, startTestWarren, type TestWarren } from './harness.js';

// E2B 2.51's fork and snapshot calls, unchanged, against Warren: Sandbox.fork, createSnapshot,
// listSnapshots, deleteSnapshot and Sandbox.create(snapshotId).
let t: TestWarren;
let opts: { apiKey: string; apiUrl: string; sandboxUrl: string };
before(async () => {
  t = await startTestWarren({ images: ['busybox:latest'] });
  const info = (await (await fetch(`${t.url}/v1/info`, { headers: { authorization: `Bearer ${t.key}` } })).json()) as {
    e2b: { apiUrl: string; sandboxUrl: string };
  };
  opts = { apiKey: e2bKey(t.key), apiUrl: info.e2b.apiUrl, sandboxUrl: info.e2b.sandboxUrl };
});
after(async () => {
  await t?.close();
});

test(
  '2.51: fork ×3 sees the source’s files and each writes its own; a snapshot outlives its sandbox, a create from its id has its files, it is listed and deleted (not while one made from it is paused)',
  notOnMicrovm('the container backend’s forks'),
  async () => {
    const { Sandbox } = e2b;
    const sbx = await Sandbox.create('busybox:latest', { ...opts, timeoutMs: 60_000, metadata: { job: 'e2b-fork' } });
    const made: e2b.Sandbox[] = [sbx];
    try {
      await sbx.files.write('/state.txt', 'from the source');
      const forks = await sbx.fork({ count: 3, timeoutMs: 60_000 });
      assert.equal(forks.length, 3);
      for (const f of forks) assert.ok(f instanceof Sandbox, f instanceof Error ? f.message : 'not a sandbox');
      const children = forks as e2b.Sandbox[];
      made.push(...children);
      for (const [i, c] of children.entries()) {
        assert.equal(await c.files.read('/state.txt'), 'from the source');
        await c.files.write('/mine.txt', `child ${i}`);
        assert.equal((await c.getInfo()).metadata.job, 'e2b-fork');
      }
      assert.deepEqual(await Promise.all(children.map((c) => c.files.read('/mine.txt'))), ['child 0', 'child 1', 'child 2']);
      assert.equal(await sbx.files.exists('/mine.txt'), false);

      const snap = await sbx.createSnapshot({ name: 'e2b-snap' });
      assert.equal(snap.snapshotId, 'e2b-snap');
      await sbx.kill();
      const fromSnap = await Sandbox.create(snap.snapshotId, { ...opts, timeoutMs: 60_000 });
      made.push(fromSnap);
      assert.equal(await fromSnap.files.read('/state.txt'), 'from the source');
      const listed = await Sandbox.listSnapshots({ ...opts }).nextItems();
      assert.deepEqual(
        listed.map((s) => s.snapshotId),
        ['e2b-snap'],
      );
      // As E2B's: refused while a sandbox made from it is paused, not while it runs.
      const held = await t.client.sandboxes.get(fromSnap.sandboxId);
      await held.pause();
      await assert.rejects(Sandbox.deleteSnapshot(snap.snapshotId, opts), /paused sandbox was created from snapshot/);
      await held.resume();
      assert.equal(await Sandbox.deleteSnapshot(snap.snapshotId, opts), true);
      assert.equal(await Sandbox.deleteSnapshot(snap.snapshotId, opts), false);
      await assert.rejects(Sandbox.fork('sb_000000000000000000000000', { ...opts, count: 1 }), e2b.SandboxNotFoundError);
    } finally {
      await Promise.all(made.map((s) => s.kill().catch(() => undefined)));
    }
  },
);
