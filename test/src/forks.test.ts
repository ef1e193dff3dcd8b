import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { readdir } from 'node:fs/promises';
import { join } from 'node:path';
import type { LifecycleEvent } from '@warren/api';
import { Warren, type Sandbox } from '@warren/sdk';
import { notOnMicrovm, startTestWarren, until, type TestWarren } from './harness.js';

// Forks of container sandboxes on a real node: the writable layer frozen once as a fork base
// (reflinks on the sandboxes' btrfs), shared read-only by every child, each child writing to a
// layer of its own; the source runs on.
let t: TestWarren;
before(async () => {
  t = await startTestWarren({ images: ['busybox:latest'] });
});
after(async () => {
  await t?.close();
});

const bases = (): Promise<string[]> => readdir(join(t.dataDir, 'sandboxes', 'fork-bases')).catch(() => []);
const out = async (sb: Sandbox, cmd: string): Promise<string> => {
  const r = await sb.exec(cmd);
  assert.equal(r.exitCode, 0, `${cmd}: ${r.stderr}`);
  return r.stdout.trim();
};

describe('fork', notOnMicrovm('these are the container backend’s forks'), () => {
  test('×16 of a sandbox that wrote 500 MB: each child sees its files (deletions too) and writes its own; the source runs on, its later writes unseen; the base goes with the last child', async () => {
    const src = await t.client.sandboxes.create({ image: 'busybox:latest', labels: { job: 'fork' }, env: { STEP: '7' }, workdir: '/work' });
    const children: Sandbox[] = [];
    try {
      await out(
        src,
        'head -c 500000000 /dev/zero > /big && echo state > /work/s && mkdir -p /d/e && echo x > /d/e/f && rm /bin/vi && sleep 600 > /dev/null 2>&1 &',
      );
      await until(async () => (await src.exec('test -f /d/e/f && pidof sleep')).exitCode === 0, 60_000);
      const r = await src.fork({ count: 16, labels: { job: 'fork', role: 'child' } });
      assert.deepEqual(r.errors, []);
      children.push(...r.sandboxes);
      assert.equal(children.length, 16);
      assert.equal(new Set(children.map((c) => c.id)).size, 16);
      // The source runs on: its process lives, and what it writes now no child sees.
      assert.match(await out(src, 'pidof sleep'), /^\d+/);
      await out(src, 'echo later > /work/later');
      await Promise.all(
        children.map(async (c, i) => {
          assert.equal(c.info.state, 'running');
          assert.deepEqual(c.info.labels, { job: 'fork', role: 'child' });
          // Its files, its env and workdir; a file the source deleted stays deleted; no process was copied.
          assert.equal(
            await out(c, 'stat -c %s /big; cat s; cat /d/e/f; echo $STEP; pwd; test -e /bin/vi || echo no-vi; pidof sleep || echo none'),
            '500000000\nstate\nx\n7\n/work\nno-vi\nnone',
          );
          assert.equal((await c.exec('test -e /work/later')).exitCode, 1);
          // A host name of its own, in /etc as well (the source's /etc files are under its layer).
          const name = c.id.replace(/_/g, '-');
          assert.equal(await out(c, 'hostname; cat /etc/hostname; grep -c "127.0.1.1.*$(hostname)" /etc/hosts'), `${name}\n${name}\n1`);
          await out(c, `echo ${i} > /work/mine && echo child${i} >> /work/s`);
        }),
      );
      // Each wrote its own layer: no child sees another's writes, nor the source a child's.
      for (const [i, c] of children.entries()) assert.equal(await out(c, 'cat /work/mine; cat /work/s'), `${i}\nstate\nchild${i}`);
      assert.equal(await out(src, 'cat /work/s; test -e /work/mine || echo none'), 'state\nnone');
      assert.equal((await bases()).length, 1);
      await Promise.all(children.splice(0, 15).map((c) => c.delete()));
      assert.equal((await bases()).length, 1, 'a child still stands on the base');
      await children.pop()!.delete();
      assert.deepEqual(await bases(), []);
    } finally {
      await Promise.all([src, ...children].map((s) => s.delete().catch(() => undefined)));
    }
  });

  test('a paused sandbox is forked and stays paused; a fork of a fork stands on both bases; a commit of it is an image that runs anywhere; forked is an event', async () => {
    const src = await t.client.sandboxes.create({ image: 'busybox:latest', labels: { job: 'fork2' } });
    const made: Sandbox[] = [src];
    try {
      await out(src, 'echo one > /one');
      await src.pause();
      const [child] = (await src.fork()).sandboxes;
      assert.ok(child);
      made.push(child);
      assert.equal((await src.refresh()).state, 'paused');
      assert.equal(child.info.state, 'running');
      await out(child, 'echo two > /two && rm /one2 2>/dev/null; echo ok');
      const [grandchild] = (await child.fork({ labels: { job: 'fork2', gen: '2' } })).sandboxes;
      assert.ok(grandchild);
      made.push(grandchild);
      assert.equal(await out(grandchild, 'cat /one /two'), 'one\ntwo');
      assert.equal((await bases()).length, 2);
      // A commit of the grandchild: its bases became image layers, so the image needs no base.
      const img = await grandchild.commit('forked:latest');
      assert.ok(
        img.layers.every((l) => l.startsWith('sha256:')),
        JSON.stringify(img.layers),
      );
      const fresh = await t.client.sandboxes.create({ image: 'forked:latest' });
      made.push(fresh);
      assert.equal(await out(fresh, 'cat /one /two'), 'one\ntwo');
      // The forks as events: the source's `forked` names its child.
      const evs: LifecycleEvent[] = [];
      const stop = AbortSignal.timeout(10_000);
      for await (const ev of t.client.events({ since: 0, labels: { job: 'fork2' }, signal: stop })) {
        evs.push(ev);
        if (evs.filter((e) => e.type === 'forked').length === 2) break;
      }
      const forked = evs.filter((e) => e.type === 'forked');
      assert.deepEqual(
        forked.map((e) => [e.sandbox, e.children]),
        [
          [src.id, [child.id]],
          [child.id, [grandchild.id]],
        ],
      );
      assert.ok(evs.some((e) => e.type === 'started' && e.sandbox === grandchild.id));
    } finally {
      await Promise.all(made.map((s) => s.delete().catch(() => undefined)));
      await t.client.deleteImage('forked:latest').catch(() => undefined);
    }
    assert.deepEqual(await bases(), []);
  });

  test('children made under a lease end with it; the source, without it, runs on', async () => {
    const src = await t.client.sandboxes.create({ image: 'busybox:latest' });
    try {
      const lease = await t.client.leases.create({ ttlSeconds: 60 }, { keepAlive: false });
      const r = await src.fork({ count: 2, lease: lease.id });
      assert.deepEqual(
        r.sandboxes.map((c) => c.info.lease),
        [lease.id, lease.id],
      );
      await lease.delete();
      for (const c of r.sandboxes) {
        await until(async () => (await c.refresh()).state === 'stopped', 10_000);
        assert.equal(c.info.end?.reason, 'lease');
      }
      assert.equal((await src.refresh()).state, 'running');
    } finally {
      await src.delete();
    }
  });

  test('bad forks: a count past the limit, a sandbox of another tenant or gone; nothing is left behind', async () => {
    const src = await t.client.sandboxes.create({ image: 'busybox:latest' });
    try {
      await assert.rejects(src.fork({ count: 101 }), { code: 'invalid_argument' });
      await assert.rejects(src.fork({ count: 0 }), { code: 'invalid_argument' });
      const other = new Warren({ url: t.url, apiKey: await t.client.createKey({ tenant: 'forker' }) });
      await assert.rejects(
        other.sandboxes.get(src.id).then((s) => s.fork()),
        (e: { code?: string }) => e.code === 'not_found',
      );
      await assert.rejects(
        t.client.sandboxes.get('sb_000000000000000000000000').then((s) => s.fork()),
        (e: { code?: string }) => e.code === 'not_found',
      );
      assert.deepEqual(await bases(), []);
    } finally {
      await src.delete();
    }
  });
});

test(
  'a microVM forked through the API: each child runs on from the fork (its loop counting on), with the source’s files and a hostname of its own; a fork of a fork; the source runs on',
  { timeout: 180_000 },
  async () => {
    const src = await t.client.sandboxes.create({ image: 'busybox:latest', backend: 'microvm', resources: { memoryMiB: 256 } });
    const made: Sandbox[] = [src];
    try {
      await out(src, 'echo vm-state > /root/s; (i=0; while true; do i=$((i+1)); echo $i > /tmp/c.n; mv /tmp/c.n /tmp/c; sleep 0.05; done) > /dev/null 2>&1 &');
      await until(async () => Number((await src.exec('cat /tmp/c')).stdout) > 2, 30_000);
      await assert.rejects(src.fork({ resources: { memoryMiB: 512 } }), (e: { code?: string }) => e.code === 'invalid_argument');
      const r = await src.fork({ count: 2 });
      assert.deepEqual(r.errors, []);
      made.push(...r.sandboxes);
      const atFork = await Promise.all(r.sandboxes.map(async (c) => Number(await out(c, 'cat /tmp/c'))));
      for (const [i, c] of r.sandboxes.entries()) {
        assert.equal(await out(c, 'cat /root/s'), 'vm-state');
        await until(async () => Number((await c.exec('cat /tmp/c')).stdout) > atFork[i]!, 30_000);
      }
      // A fork of a fork: the child's state (its own write too) runs on in the grandchild.
      await out(r.sandboxes[0]!, 'echo child > /root/c');
      const [grandchild] = (await r.sandboxes[0]!.fork()).sandboxes;
      assert.ok(grandchild);
      made.push(grandchild);
      assert.equal(await out(grandchild, 'cat /root/s /root/c'), 'vm-state\nchild');
      const names = await Promise.all(made.map((s) => out(s, 'hostname')));
      assert.equal(new Set(names).size, 4, names.join(' '));
      const before = Number(await out(src, 'cat /tmp/c'));
      await until(async () => Number((await src.exec('cat /tmp/c')).stdout) > before, 30_000);
    } finally {
      await Promise.all(made.map((s) => s.delete().catch(() => undefined)));
    }
  },
);

describe('snapshots', notOnMicrovm('a microVM’s snapshot is its files through the guest: the microVM pass covers commit'), () => {
  test('a snapshot outlives its sandbox; a create from it has its files, env, user and workdir; list and delete; another tenant sees none of it; a name that is an image’s is refused', async () => {
    const src = await t.client.sandboxes.create({ image: 'busybox:latest', env: { RUN: 'r1' }, user: 'nobody', workdir: '/tmp/w', labels: { job: 'snap' } });
    const made: Sandbox[] = [];
    let name = '';
    try {
      await out(src, 'echo kept > /tmp/w/f');
      const snap = await src.snapshot();
      name = snap.name;
      assert.deepEqual(snap.snapshot, { source: src.id, backend: 'container', user: 'nobody', workdir: '/tmp/w' });
      await src.delete();
      const fromIt = await t.client.sandboxes.create({ snapshot: name });
      made.push(fromIt);
      assert.equal(await out(fromIt, 'cat f; echo $RUN; id -un; pwd'), 'kept\nr1\nnobody\n/tmp/w');
      // A batch from it (what a fork from a snapshot is).
      const batch = await t.client.sandboxes.createMany(2, { snapshot: name, user: 'root' });
      made.push(...batch.sandboxes);
      assert.deepEqual(await Promise.all(batch.sandboxes.map((s) => out(s, 'cat f; id -un'))), ['kept\nroot', 'kept\nroot']);
      assert.deepEqual(
        (await t.client.snapshots({ sandbox: src.id })).map((s) => s.name),
        [name],
      );
      const other = new Warren({ url: t.url, apiKey: await t.client.createKey({ tenant: 'snapper' }) });
      assert.deepEqual(await other.snapshots(), []);
      await assert.rejects(other.sandboxes.create({ snapshot: name }), (e: { code?: string }) => e.code === 'not_found');
      await assert.rejects(other.deleteSnapshot(name), (e: { code?: string }) => e.code === 'not_found');
      await assert.rejects(fromIt.snapshot('busybox:latest'), (e: { code?: string }) => e.code === 'conflict');
      await assert.rejects(t.client.sandboxes.create({ snapshot: 'busybox:latest' }), (e: { code?: string }) => e.code === 'not_found');
      // A tenant's quota counts its snapshots: a second is refused, the same name again replaces it.
      const capped = new Warren({ url: t.url, apiKey: await t.client.createKey({ tenant: 'one-snap', quota: { snapshots: 1 } }) });
      const mine = await capped.sandboxes.create({ image: 'busybox:latest' });
      made.push(mine);
      await mine.snapshot('one-snap/a');
      await mine.snapshot('one-snap/a');
      await assert.rejects(mine.snapshot('one-snap/b'), (e: { code?: string }) => e.code === 'resource_exhausted');
      await capped.deleteSnapshot('one-snap/a');
      // Two at once on one count: one is made, the other refused (those being made count).
      const both = await Promise.allSettled([mine.snapshot('one-snap/x'), mine.snapshot('one-snap/y')]);
      assert.deepEqual(both.map((r) => (r.status === 'fulfilled' ? 'made' : (r.reason as { code?: string }).code)).sort(), ['made', 'resource_exhausted']);
      for (const r of both) if (r.status === 'fulfilled') await capped.deleteSnapshot(r.value.name);
      // A snapshot is an image: a runner key makes none, deletes none, but lists them.
      const runner = new Warren({ url: t.url, apiKey: await t.client.createKey({ tenant: 'one-snap', role: 'runner' }) });
      const its = await runner.sandboxes.get(mine.id);
      await assert.rejects(its.snapshot('one-snap/r'), (e: { code?: string }) => e.code === 'permission_denied');
      assert.deepEqual(await runner.snapshots(), []);
      // Its delete is refused while sandboxes made from it live (they are named), unless forced.
      await assert.rejects(
        t.client.deleteSnapshot(name),
        (e: { code?: string; message: string; details?: Record<string, unknown> }) =>
          e.code === 'conflict' && e.message.includes(fromIt.id) && e.details?.sandboxes === 3,
      );
      await t.client.deleteSnapshot(name, { force: true });
      assert.deepEqual(await t.client.snapshots({ sandbox: src.id }), []);
      await assert.rejects(t.client.sandboxes.create({ snapshot: name }), (e: { code?: string }) => e.code === 'not_found');
    } finally {
      await Promise.all([src, ...made].map((s) => s.delete().catch(() => undefined)));
      if (name) await t.client.deleteSnapshot(name).catch(() => undefined);
    }
  });
});
