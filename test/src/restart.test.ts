// run-tests: alone, a lease's sandboxes end within a second of its deadline.
import { after, test } from 'node:test';
import assert from 'node:assert/strict';
import { chmod, readFile } from 'node:fs/promises';
import { Warren, type WarrenError } from '@warren/sdk';
import type { LifecycleEvent } from '@warren/api';
import { forceCleanup, hostLeftovers, IMAGE_CACHE, initOf, ownedTempDir, spawnUp, startTestWarren, type TestWarren, until } from './harness.js';

const opened: TestWarren[] = [];
after(async () => {
  for (const t of opened) await t.close({ removeData: false }).catch(() => undefined);
  for (const t of opened) await forceCleanup(t.dataDir);
});

test('a restart keeps running sandboxes and their sessions; dead ones become failed, not forgotten', async () => {
  const first = await startTestWarren();
  opened.push(first);
  const keep = await first.client.sandboxes.create({ image: 'busybox:latest', labels: { r: '1' } });
  const doomed = await first.client.sandboxes.create({ image: 'busybox:latest', labels: { r: '1' } });
  const sh = await keep.shell();
  await sh.exec('cd /etc; STATE=kept');
  await keep.files.write('/root/note', 'before restart');
  await keep.exec('echo ran >> /root/steps', { requestId: 'step-1' });
  await keep.exec('echo mine > /root/owned; chown 7:7 /root/owned');
  // Root inside owns its writable layer's top: chowning it must not move the range the next
  // start believes the sandbox holds (it would hand the real one to a new sandbox).
  assert.equal((await keep.exec('chown 1234:1234 / && stat -c %u /')).stdout, '1234\n');
  const rangeOf = async (sb: { exec(cmd: string): Promise<{ stdout: string }> }): Promise<string> => (await sb.exec('cat /proc/self/uid_map')).stdout.trim();
  const keptRange = await rangeOf(keep);
  await keep.pause();
  await first.close({ keep: true });

  // While Warren is down, one sandbox's processes die.
  const init = await initOf(doomed.id);
  assert.ok(init);
  process.kill(init.pid, 'SIGKILL');
  // Dead: gone, or a zombie its parent has yet to reap.
  await until(async () => !/\) [RSDT] /.test(await readFile(`/proc/${init.pid}/stat`, 'utf8').catch(() => ') X ')));

  const second = await startTestWarren({ dataDir: first.dataDir });
  opened.push(second);
  const c = new Warren({ url: second.url, apiKey: second.key });
  const k = await c.sandboxes.get(keep.id);
  assert.equal(k.info.state, 'running');
  assert.equal(await k.files.readText('/root/note'), 'before restart');
  assert.equal((await k.exec('echo $STATE; pwd', { session: sh.id })).stdout, 'kept\n/etc\n');
  // A retried step after the restart never runs a second time.
  await assert.rejects(k.exec('echo ran >> /root/steps', { requestId: 'step-1' }), (e: WarrenError) => e.code === 'conflict');
  assert.equal(await k.files.readText('/root/steps'), 'ran\n');
  // The new node knows which host id ranges its adopted sandboxes hold: a new sandbox gets
  // another, and a commit of an adopted one keeps the owners set inside.
  const fresh = await c.sandboxes.create({ image: 'busybox:latest' });
  assert.notEqual(await rangeOf(fresh), keptRange);
  assert.equal(await rangeOf(k), keptRange);
  await fresh.delete();
  await k.commit('restart/kept:v1');
  const fromCommit = await c.sandboxes.create({ image: 'restart/kept:v1' });
  assert.equal((await fromCommit.exec('stat -c %u:%g /root/owned; cat /root/owned')).stdout, '7:7\nmine\n');
  await fromCommit.delete();
  await c.deleteImage('restart/kept:v1');
  const d = await c.sandboxes.get(doomed.id);
  assert.equal(d.info.state, 'failed');
  assert.ok(d.info.error?.message);
  assert.deepEqual(hostLeftovers(doomed.id), []);

  await second.close();
  assert.deepEqual(hostLeftovers(keep.id), []);
  const mounts = await readFile('/proc/self/mounts', 'utf8');
  assert.doesNotMatch(mounts, new RegExp(second.dataDir));
});

test('a crash of the Warren process (SIGKILL) loses no sandbox', async () => {
  const dataDir = await ownedTempDir('crash-');
  await chmod(dataDir, 0o711);
  const env = { ...process.env, WARREN_API_KEY: 'crash-key', WARREN_IMAGE_CACHE: IMAGE_CACHE };
  const up = () => spawnUp(['--data-dir', dataDir, '--images', 'busybox:latest'], env);
  let w = await up();
  try {
    const c1 = new Warren({ url: w.url, apiKey: 'crash-key' });
    const sb = await c1.sandboxes.create({ image: 'busybox:latest' });
    const sh = await sb.shell();
    await sh.exec('export SURVIVED=yes');
    await w.kill('SIGKILL');
    w = await up();
    const c2 = new Warren({ url: w.url, apiKey: 'crash-key' });
    const again = await c2.sandboxes.get(sb.id);
    assert.equal(again.info.state, 'running');
    assert.equal((await again.exec('echo $SURVIVED', { session: sh.id })).stdout, 'yes\n');
    await again.delete();
    await w.kill('SIGTERM');
  } finally {
    await w.kill('SIGKILL').catch(() => undefined);
    await forceCleanup(dataDir);
  }
});

test('a hung init does not stall the restart: the node serves, the others are taken back, and the hung one is kept, not destroyed', async () => {
  const first = await startTestWarren();
  opened.push(first);
  const hung = await first.client.sandboxes.create({ image: 'busybox:latest' });
  const fine = await first.client.sandboxes.create({ image: 'busybox:latest' });
  await hung.files.write('/root/kept', 'still here');
  await first.close({ keep: true });
  const init = await initOf(hung.id);
  assert.ok(init);
  process.kill(init.pid, 'SIGSTOP');
  try {
    const t0 = performance.now();
    const second = await startTestWarren({ dataDir: first.dataDir });
    opened.push(second);
    assert.ok(performance.now() - t0 < 30_000, 'the restart did not wait on the hung init');
    const c = new Warren({ url: second.url, apiKey: second.key });
    assert.equal((await (await c.sandboxes.get(fine.id)).exec('echo ok')).stdout, 'ok\n');
    assert.equal((await c.sandboxes.get(hung.id)).info.state, 'running');
    process.kill(init.pid, 'SIGCONT');
    assert.equal(await (await c.sandboxes.get(hung.id)).files.readText('/root/kept'), 'still here');
    await second.close();
  } finally {
    try {
      process.kill(init.pid, 'SIGCONT');
    } catch {
      /* gone */
    }
  }
});

test('a restart in the middle of a lease neither loses nor extends it: it lapses at its deadline, not its sandbox’s first one, and its sandbox ends as lease', async () => {
  const first = await startTestWarren();
  opened.push(first);
  const lease = await first.client.leases.create({ ttlSeconds: 1 }, { keepAlive: false });
  const sb = await first.client.sandboxes.create({ image: 'busybox:latest', lease: lease.id });
  // The node was told the lease's first deadline with the sandbox, and then of a renewal.
  const firstDeadline = Date.parse(lease.info.expiresAt);
  const renewed = await lease.renew(3);
  const deadline = Date.parse(renewed.expiresAt);
  await first.close({ keep: true });

  const second = await startTestWarren({ dataDir: first.dataDir });
  opened.push(second);
  const c = new Warren({ url: second.url, apiKey: second.key });
  const kept = (await c.leases.get(lease.id)).info;
  assert.ok(Date.now() < deadline, 'the restart took less than the lease’s TTL');
  assert.deepEqual([kept.state, kept.expiresAt, kept.renewals], ['active', renewed.expiresAt, 1]);
  await until(async () => Date.now() > firstDeadline + 300, 5000);
  assert.equal((await c.sandboxes.get(sb.id)).info.state, 'running');
  await until(async () => (await c.sandboxes.get(sb.id)).info.state === 'stopped', 10_000);
  const end = (await c.sandboxes.get(sb.id)).info.end;
  assert.equal(end?.reason, 'lease');
  const lateMs = Date.parse(end.at) - deadline;
  assert.ok(lateMs >= 0 && lateMs <= 1000, `its sandbox ended ${lateMs} ms after the lease's deadline`);
  assert.equal((await c.leases.get(lease.id)).info.state, 'lapsed');
  await second.close();
});

test('a node stopped without keeping its sandboxes: each ends as shutdown, the operator’s doing, and its end is in the events', async () => {
  const first = await startTestWarren();
  opened.push(first);
  const sb = await first.client.sandboxes.create({ image: 'busybox:latest', labels: { down: '1' } });
  await first.close({ keep: false, removeData: false });

  const second = await startTestWarren({ dataDir: first.dataDir });
  opened.push(second);
  const c = new Warren({ url: second.url, apiKey: second.key });
  const info = (await c.sandboxes.get(sb.id)).info;
  assert.deepEqual([info.state, info.end?.reason, info.end?.by], ['stopped', 'shutdown', 'operator']);
  const stop = new AbortController();
  const timer = setTimeout(() => stop.abort(), 10_000);
  let told: LifecycleEvent | undefined;
  try {
    for await (const ev of c.events({ since: 0, labels: { down: '1' }, signal: stop.signal })) {
      if (ev.type === 'ended') {
        told = ev;
        break;
      }
    }
  } catch (e) {
    if (!stop.signal.aborted) throw e;
  } finally {
    clearTimeout(timer);
    stop.abort();
  }
  assert.deepEqual([told?.sandbox, told?.end?.reason, told?.end?.by, told?.end?.at], [sb.id, 'shutdown', 'operator', info.end?.at]);
  await second.close();
});
