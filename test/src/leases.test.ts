// run-tests: alone, leases timed to half a second.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { readFile } from 'node:fs/promises';
import { Warren } from '@warren/sdk';
import { errorCode, http, startTestWarren, until, type TestWarren } from './harness.js';

// Leases on one real node: a driver that takes one and is killed with -9 leaves nothing running
// past the lease's TTL and a second; a lease that says pause freezes its sandboxes (no code runs
// past the lapse) and keeps them; deleting a lease ends its sandboxes at once.
let t: TestWarren;
before(async () => {
  t = await startTestWarren({ images: ['busybox:latest'] });
});
after(async () => {
  await t?.close();
});

const stateOf = async (id: string): Promise<string> => (await t.client.sandboxes.get(id)).info.state;
const SDK = new URL('../../packages/sdk/dist/index.js', import.meta.url).href;

/** The host's uptime (s): what the sandbox's ticks are written in. */
const uptime = async (): Promise<number> => Number((await readFile('/proc/uptime', 'utf8')).split(' ')[0]);

describe('leases', () => {
  test('a driver killed with -9: its lease is no longer renewed, and its sandboxes are gone within the TTL and a second; one without the lease runs on', async () => {
    // The driver: takes a 2 s lease (renewed in the background), makes two sandboxes with it, says so, and waits.
    const script = `
      const { Warren } = await import(${JSON.stringify(SDK)});
      const w = new Warren({ url: process.env.WARREN_URL, apiKey: process.env.WARREN_API_KEY });
      const lease = await w.leases.create({ ttlSeconds: 2 });
      const a = await w.sandboxes.create({ image: 'busybox:latest', lease: lease.id });
      const b = await w.sandboxes.create({ image: 'busybox:latest', lease: lease.id });
      console.log(JSON.stringify({ lease: lease.id, ids: [a.id, b.id] }));
      setInterval(() => undefined, 1 << 30);
    `;
    const driver = spawn(process.execPath, ['--input-type=module', '-e', script], {
      env: { ...process.env, WARREN_URL: t.url, WARREN_API_KEY: t.key },
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    after(() => void driver.kill('SIGKILL'));
    const [line] = (await once(driver.stdout, 'data')) as [Buffer];
    const made = JSON.parse(line.toString()) as { lease: string; ids: string[] };
    const loose = await t.client.sandboxes.create({ image: 'busybox:latest' });
    const lease = await t.client.leases.get(made.lease);
    const firstDeadline = Date.parse(lease.info.expiresAt);
    assert.equal((await t.client.sandboxes.get(made.ids[0]!)).info.lease, made.lease);
    assert.deepEqual((await t.client.sandboxes.list({ lease: made.lease })).sandboxes.map((s) => s.id).sort(), [...made.ids].sort());
    // Renewed by the driver: past the first deadline its sandboxes still run.
    await until(async () => (await t.client.leases.get(made.lease)).info.renewals >= 2 && Date.now() > firstDeadline + 500, 10_000);
    for (const id of made.ids) assert.equal(await stateOf(id), 'running');

    driver.kill('SIGKILL');
    await once(driver, 'exit');
    const deadline = Date.parse((await t.client.leases.get(made.lease)).info.expiresAt);
    await until(async () => (await Promise.all(made.ids.map(stateOf))).every((s) => s === 'stopped'), 10_000);
    const lateMs = Date.now() - deadline;
    assert.ok(lateMs <= 1000 + 500, `the lease's sandboxes ended ${lateMs} ms after its deadline`);
    const ended = await t.client.leases.get(made.lease);
    assert.equal(ended.info.state, 'lapsed');
    assert.equal(await stateOf(loose.id), 'running');
    // A lapsed lease is renewed nor used again.
    await assert.rejects(ended.renew(), (e: { code?: string }) => e.code === 'conflict');
    const r = await http(t, 'POST', '/v1/sandboxes', { image: 'busybox:latest', lease: made.lease });
    assert.equal(errorCode(r), 'conflict');
    await loose.delete();
  });

  test('a lease that says pause: at its lapse its sandbox is frozen (no code runs after), kept, and runs on when resumed', async () => {
    const lease = await t.client.leases.create({ ttlSeconds: 60, onExpiry: 'pause' }, { keepAlive: false });
    const sb = await t.client.sandboxes.create({ image: 'busybox:latest', lease: lease.id });
    await sb.exec(['sh', '-c', "(while :; do cut -d' ' -f1 /proc/uptime >> /tmp/ticks; usleep 20000; done) >/dev/null 2>&1 &"]);
    // Set up: now it has a second left, and is renewed no more.
    const deadline = Date.parse((await lease.renew(1)).expiresAt);
    await until(async () => (await stateOf(sb.id)) === 'paused', 5000);
    const pausedLateMs = Date.now() - deadline;
    assert.ok(pausedLateMs <= 1000, `paused ${pausedLateMs} ms after the lease's deadline`);
    // Past the deadline and a second more, frozen all along: then resumed.
    const upAtDeadline = (await uptime()) - (Date.now() - deadline) / 1000;
    await until(async () => Date.now() > deadline + 1500, 5000);
    assert.equal(await stateOf(sb.id), 'paused');
    // Read before the resume: ticks after it are the resumed sandbox's (read after, a tick between
    // the thaw and the read would count as one during the freeze).
    const resumedAt = await uptime();
    await sb.resume();
    await until(
      async () =>
        (await sb.files.readText('/tmp/ticks'))
          .trim()
          .split('\n')
          .some((x) => Number(x) > resumedAt),
      5000,
    );
    const ticks = (await sb.files.readText('/tmp/ticks')).trim().split('\n').map(Number);
    assert.ok(
      ticks.some((x) => x < upAtDeadline),
      'the ticks ran before the lapse',
    );
    const during = ticks.filter((x) => x > upAtDeadline + 0.3 && x < resumedAt);
    assert.deepEqual(during, [], `the sandbox ran ${during.length} ticks between its lease's lapse and its resume`);
    assert.equal((await t.client.leases.get(lease.id)).info.state, 'lapsed');
    await sb.delete();
  });

  test("deleting a lease ends its sandboxes at once; another tenant's lease is not found; leases are listed by state", async () => {
    const lease = await t.client.leases.create({ ttlSeconds: 600, labels: { job: 'x' } });
    // One alone, two in a batch, one claimed from a warm pool: each lives under the lease.
    const spec = { image: 'busybox:latest', resources: { cpu: 0.1, memoryMiB: 32 } };
    const pool = await t.client.pools.create({ ...spec, size: 1 });
    await until(async () => (await t.client.pools.list())[0]?.ready === 1, 10_000);
    const claimed = await t.client.sandboxes.create({ ...spec, lease: lease.id });
    assert.equal((await t.client.pools.list())[0]!.claims, 1);
    const batch = await t.client.sandboxes.createMany(2, { image: 'busybox:latest', lease: lease.id });
    const sbs = [claimed, ...batch.sandboxes, await t.client.sandboxes.create({ image: 'busybox:latest', lease: lease.id })];
    for (const sb of sbs) assert.equal(sb.info.lease, lease.id);
    await t.client.pools.delete(pool.id);
    assert.ok((await t.client.leases.list('active')).some((l) => l.id === lease.id && l.labels.job === 'x'));
    await lease.delete();
    for (const sb of sbs) assert.equal(await stateOf(sb.id), 'stopped');
    assert.equal((await t.client.sandboxes.get(sbs[0]!.id)).info.end?.reason, 'lease');
    assert.equal((await t.client.leases.get(lease.id)).info.state, 'deleted');
    await lease.delete();
    // Another tenant cannot see, renew, delete or create with it.
    const key = await t.client.createKey({ tenant: 'other', role: 'runner' });
    const other = new Warren({ url: t.url, apiKey: key });
    const mine = await t.client.leases.create({ ttlSeconds: 600 });
    await assert.rejects(other.leases.get(mine.id), (e: { code?: string }) => e.code === 'not_found');
    assert.equal(errorCode(await http(t, 'POST', `/v1/leases/${mine.id}/renew`, {}, { authorization: `Bearer ${key}` })), 'not_found');
    assert.equal(errorCode(await http(t, 'DELETE', `/v1/leases/${mine.id}`, undefined, { authorization: `Bearer ${key}` })), 'not_found');
    assert.equal((await t.client.leases.get(mine.id)).info.state, 'active');
    await assert.rejects(other.sandboxes.create({ image: 'busybox:latest', lease: mine.id }), (e: { code?: string }) => e.code === 'not_found');
    assert.equal(errorCode(await http(t, 'POST', '/v1/leases', { ttlSeconds: 0 })), 'invalid_argument');
    await mine.delete();
  });
});
