import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import type { WarrenError } from '@warren/api';
import { Warren } from '@warren/sdk';
import { startTestWarren, until, type TestWarren } from './harness.js';

// A create may wait for room (`schedule.waitSeconds`) instead of failing at once: on a node that
// holds one sandbox, creates queue per tenant and are served in turns as room frees up.
let t: TestWarren;
before(async () => {
  t = await startTestWarren({ maxSandboxes: 1 });
});
after(async () => {
  await t?.close();
});

/** Creates waiting for room now (the gauge in /metrics). */
const waiting = async (): Promise<number> =>
  Number(/^warren_creates_waiting (\d+)$/m.exec(await (await fetch(`${t.url}/metrics`, { headers: { authorization: `Bearer ${t.key}` } })).text())?.[1]);

test('a create that may wait gets the room a delete frees; one whose time runs out, or over its quota, answers resource_exhausted', async () => {
  const a = await t.client.sandboxes.create({ image: 'busybox:latest' });
  // Without waiting: at once.
  await assert.rejects(t.client.sandboxes.create({ image: 'busybox:latest' }), (e: WarrenError) => e.code === 'resource_exhausted');
  const queued = t.client.sandboxes.create({ image: 'busybox:latest', schedule: { waitSeconds: 60 } });
  await until(async () => (await waiting()) === 1);
  const started = Date.now();
  await a.delete();
  const b = await queued;
  assert.equal(await waiting(), 0);
  assert.equal(b.info.state, 'running');
  // (not the 60 s a create may wait; another test file may run beside this one)
  assert.ok(Date.now() - started < 20_000, `waited ${Date.now() - started} ms after the delete`);
  // Full, and no room comes within the second it may wait.
  await assert.rejects(
    t.client.sandboxes.create({ image: 'busybox:latest', schedule: { waitSeconds: 1 } }),
    (e: WarrenError) => e.code === 'resource_exhausted' && /no room for the sandbox within 1 s/.test(e.message),
  );
  // A quota is the tenant's own limit: waiting does not lift it.
  const key = await t.client.createKey({ tenant: 'capped', quota: { sandboxes: 0 } });
  const capped = new Warren({ url: t.url, apiKey: key });
  const t0 = Date.now();
  await assert.rejects(
    capped.sandboxes.create({ image: 'busybox:latest', schedule: { waitSeconds: 60 } }),
    (e: WarrenError) => e.code === 'resource_exhausted' && /over its quota/.test(e.message),
  );
  assert.ok(Date.now() - t0 < 5000);
  await b.delete();
});

test('waiting creates of two tenants are served in turns, not one tenant first', async () => {
  const hold = await t.client.sandboxes.create({ image: 'busybox:latest' });
  const x = new Warren({ url: t.url, apiKey: await t.client.createKey({ tenant: 'x' }) });
  const y = new Warren({ url: t.url, apiKey: await t.client.createKey({ tenant: 'y' }) });
  const order: string[] = [];
  const wait = (c: Warren, name: string): Promise<void> =>
    c.sandboxes.create({ image: 'busybox:latest', labels: { name }, schedule: { waitSeconds: 60 } }).then(async (sb) => {
      order.push(name);
      await sb.delete(); // its room goes to the next in turn
    });
  // Queued one after another (each in the queue before the next is sent), X's three, then Y's.
  const all: Array<Promise<void>> = [];
  for (const [c, name] of [
    [x, 'x1'],
    [x, 'x2'],
    [x, 'x3'],
    [y, 'y1'],
  ] as const) {
    const before = await waiting();
    all.push(wait(c, name));
    await until(async () => (await waiting()) === before + 1);
  }
  await hold.delete();
  await Promise.all(all);
  assert.deepEqual(order, ['x1', 'y1', 'x2', 'x3']);
});
