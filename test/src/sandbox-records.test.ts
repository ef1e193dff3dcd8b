import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import type { ExecEvent, LifecycleEvent } from '@warren/api';
import { Warren, type Sandbox } from '@warren/sdk';
import { errorCode, http, notOnMicrovm, startTestWarren, until, type TestWarren } from './harness.js';

// What a sandbox's page and the image catalogue show: a sandbox's events (GET .../events), its
// finished commands (GET .../commands?finished=1), and who uses an image (usedBy, the image
// filter, the refused delete). On the suite's store (WARREN_TEST_STORE: SQLite or PostgreSQL).
let t: TestWarren;
before(async () => {
  t = await startTestWarren({ images: ['busybox:latest'] });
});
after(async () => {
  await t?.close();
});

const tenantClient = async (tenant: string): Promise<{ w: Warren; key: string }> => {
  const key = await t.client.createKey({ tenant, role: 'user' });
  return { w: new Warren({ url: t.url, apiKey: key }), key };
};

test(
  "a sandbox's events, oldest first, after a seq; its fork's and snapshot's; readable once it ended; not another tenant's",
  notOnMicrovm('the control plane’s records'),
  async () => {
    const sb = await t.client.sandboxes.create({ image: 'busybox:latest', labels: { job: 'records' } });
    const made: Sandbox[] = [sb];
    let snapshot = '';
    try {
      await sb.pause();
      await sb.resume();
      const child = (await sb.fork({ count: 1 })).sandboxes[0]!;
      made.push(child);
      snapshot = (await sb.snapshot()).name;
      await sb.delete();
      let evs: LifecycleEvent[] = [];
      await until(async () => (evs = await sb.events()).some((e) => e.type === 'ended'), 5000);
      assert.deepEqual(
        evs.map((e) => e.type),
        ['created', 'started', 'paused', 'resumed', 'forked', 'snapshotted', 'ended'],
      );
      assert.ok(evs.every((e) => e.sandbox === sb.id && e.labels.job === 'records'));
      assert.deepEqual(evs[4]!.children, [child.id]);
      assert.equal(evs[5]!.snapshot, snapshot);
      assert.equal(evs[6]!.end?.reason, 'deleted');
      assert.deepEqual(
        (await sb.events({ since: evs[4]!.seq })).map((e) => e.type),
        ['snapshotted', 'ended'],
      );
      // The child has its own: no `forked` of its source's.
      await until(async () => (await child.events()).some((e) => e.type === 'started'));
      assert.deepEqual(
        (await child.events()).map((e) => e.type),
        ['created', 'started'],
      );
      const { key } = await tenantClient('records-other');
      const r = await http({ ...t, key }, 'GET', `/v1/sandboxes/${sb.id}/events`);
      assert.equal(r.status, 404);
      assert.equal(errorCode(r), 'not_found');
    } finally {
      await Promise.all(made.map((s) => s.delete().catch(() => undefined)));
      if (snapshot) await t.client.deleteSnapshot(snapshot, { force: true }).catch(() => undefined);
    }
  },
);

test('finished commands listed with their exit on asking, newest kept; one re-read from its start', async () => {
  const sb = await t.client.sandboxes.create({ image: 'busybox:latest' });
  try {
    const ok = await sb.exec('echo done-once');
    const failed = await sb.exec('exit 3');
    // One that runs on: its start seen, the stream left.
    let running = '';
    for await (const ev of sb.execStream('sleep 600', { tag: 'sleeper' })) {
      if (ev.type === 'start') running = ev.commandId;
      break;
    }
    assert.deepEqual(
      (await sb.commands()).map((c) => [c.commandId, c.finishedAt, c.exitCode]),
      [[running, null, null]],
    );
    const all = await sb.commands({ finished: true });
    assert.deepEqual(
      all.map((c) => [c.commandId, c.exitCode, c.signal]),
      [
        [ok.commandId, 0, null],
        [failed.commandId, 3, null],
        [running, null, null],
      ],
    );
    assert.ok(all.slice(0, 2).every((c) => c.finishedAt !== null && c.finishedAt >= c.startedAt));
    // A finished command read again from its start: its output and its exit.
    const again: ExecEvent[] = [];
    for await (const ev of sb.attach(ok.commandId, 0)) again.push(ev);
    assert.deepEqual(
      again.filter((e) => e.type === 'stdout').map((e) => (e as { data: string }).data),
      ['done-once\n'],
    );
    const end = again.at(-1);
    assert.equal(end?.type === 'exit' ? end.exitCode : end?.type, 0);
    await sb.kill(running, 'SIGKILL');
    await until(async () => (await sb.commands({ finished: true })).find((c) => c.commandId === running)?.signal === 'SIGKILL');
  } finally {
    await sb.delete();
  }
});

test("who uses an image: counted per tenant (an admin's key: all); listed by it; its delete refused naming them, unless forced", async () => {
  const a = await tenantClient('records-a');
  const b = await tenantClient('records-b');
  const src = await t.client.sandboxes.create({ image: 'busybox:latest' });
  const made: Sandbox[] = [src];
  const name = 'records/used:v1';
  try {
    await src.exec('echo kept > /kept');
    await src.commit(name);
    made.push(...(await a.w.sandboxes.createMany(2, { image: name })).sandboxes, await t.client.sandboxes.create({ image: name }));
    assert.equal(made.length, 4);
    const usedBy = async (w: Warren): Promise<number | undefined> => (await w.images()).find((i) => i.name === name)?.usedBy;
    assert.equal(await usedBy(a.w), 2);
    assert.equal(await usedBy(b.w), 0);
    assert.equal(await usedBy(t.client), 3);
    assert.equal((await t.client.images()).find((i) => i.name === 'busybox:latest')?.usedBy, 1);
    // The list's image filter: the caller's sandboxes made from it.
    assert.deepEqual(
      (await a.w.sandboxes.list({ image: name })).sandboxes.map((s) => s.id).sort(),
      made
        .slice(1, 3)
        .map((s) => s.id)
        .sort(),
    );
    assert.deepEqual(
      (await t.client.sandboxes.list({ image: name })).sandboxes.map((s) => s.id),
      [made[3]!.id],
    );
    const refused = await http(t, 'DELETE', `/v1/images/${encodeURIComponent(name)}`);
    assert.equal(refused.status, 409);
    const err = (refused.json as { error: { code: string; message: string; details: unknown } }).error;
    assert.equal(err.code, 'conflict');
    assert.deepEqual(err.details, { image: name, sandboxes: 3 });
    assert.match(err.message, /^3 live sandboxes were created from image "records\/used:v1" \(sb_/);
    assert.ok((await t.client.images()).some((i) => i.name === name));
    // Forced: the name goes; its sandboxes run on, their files there.
    await t.client.deleteImage(name, { force: true });
    assert.equal(await usedBy(t.client), undefined);
    assert.equal((await made[1]!.exec('cat /kept')).stdout, 'kept\n');
    // Once none live, the delete of an image is not refused.
    await src.commit(name);
    await Promise.all(made.slice(1).map((s) => s.delete()));
    await t.client.deleteImage(name);
  } finally {
    await Promise.all(made.map((s) => s.delete().catch(() => undefined)));
    await t.client.deleteImage(name, { force: true }).catch(() => undefined);
  }
});
