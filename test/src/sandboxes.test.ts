import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { createHash, randomBytes } from 'node:crypto';
import { readFile, readlink, stat } from 'node:fs/promises';
import { CgroupV1, readOwnCgroupParent } from '@warren/edge';
import { type WarrenError, Warren } from '@warren/sdk';
import { assertConfined } from './confinement.js';
import { errorCode, hostLeftovers, http, initOf, startTestWarren, testClock, until, type TestWarren } from './harness.js';

/** A node whose creates wait at `step` (WarrenOptions.holdAt) until `release`; `reached` resolves when one is there. */
async function heldAt(step: string): Promise<{ th: TestWarren; reached: Promise<void>; release: () => void }> {
  let release: () => void = () => undefined;
  const gate = new Promise<void>((r) => (release = r));
  let arrived: () => void = () => undefined;
  const reached = new Promise<void>((r) => (arrived = r));
  const th = await startTestWarren({
    holdAt: (at) => {
      if (at !== step) return undefined;
      arrived();
      return gate;
    },
  });
  return { th, reached, release };
}

describe('sandbox lifecycle through the API', () => {
  let t: TestWarren;
  before(async () => {
    t = await startTestWarren();
  });
  after(async () => {
    await t?.close();
  });

  test('create, get from a fresh client, list by label and state, delete idempotently', async () => {
    const sb = await t.client.sandboxes.create({ image: 'busybox:latest', labels: { job: 'life', n: '1' }, env: { GREETING: 'hi' } });
    assert.equal(sb.info.state, 'running');
    assert.match(sb.id, /^sb_/);
    const other = await t.client.sandboxes.create({ image: 'busybox:latest', labels: { job: 'life', n: '2' } });

    // A second client (a restarted training job) reconnects by id.
    const again = await new Warren({ url: t.url, apiKey: t.key }).sandboxes.get(sb.id);
    assert.equal(again.info.state, 'running');
    assert.equal((await again.exec('echo $GREETING')).stdout, 'hi\n');

    const byLabel = await t.client.sandboxes.list({ labels: { job: 'life', n: '2' } });
    assert.deepEqual(
      byLabel.sandboxes.map((s) => s.id),
      [other.id],
    );
    const page1 = await t.client.sandboxes.list({ labels: { job: 'life' }, limit: 1 });
    assert.equal(page1.sandboxes.length, 1);
    assert.ok(page1.nextCursor);
    const page2 = await t.client.sandboxes.list({ labels: { job: 'life' }, limit: 1, cursor: page1.nextCursor ?? undefined });
    assert.notEqual(page2.sandboxes[0]?.id, page1.sandboxes[0]?.id);

    await other.pause();
    const paused = await t.client.sandboxes.list({ labels: { job: 'life' }, state: 'paused' });
    assert.deepEqual(
      paused.sandboxes.map((s) => s.id),
      [other.id],
    );

    await sb.delete();
    await sb.delete();
    assert.equal((await sb.refresh()).state, 'stopped');
    await other.delete();
    const stopped = await t.client.sandboxes.list({ labels: { job: 'life' }, state: 'stopped' });
    assert.equal(stopped.sandboxes.length, 2);
  });

  test('pause freezes every process; any call resumes', async () => {
    const sb = await t.client.sandboxes.create({ image: 'busybox:latest' });
    try {
      // A loop that writes the clock (/proc/uptime, 10 ms steps) every 10 ms.
      await sb.exec(`sh -c 'while true; do read up rest < /proc/uptime; echo $up >> /tmp/ticks; usleep 10000; done' >/dev/null 2>&1 &`);
      const ticks = async (): Promise<number[]> => (await sb.files.readText('/tmp/ticks')).trim().split('\n').map(Number);
      await until(async () => (await sb.files.exists('/tmp/ticks')) && (await ticks()).length >= 5);
      await sb.pause();
      assert.equal((await sb.refresh()).state, 'paused');
      // Frozen for 40 of the loop's periods (the wait is the test's premise), then reading the
      // file resumes the sandbox first; once the loop has written again, its clock shows a gap as
      // long as the freeze. (How far it ran before the freeze took hold depends on the machine's
      // load, not on the freeze; so does how soon after the resume it writes: the read may come first.)
      await new Promise((r) => setTimeout(r, 400));
      const seen = await ticks();
      assert.equal((await sb.refresh()).state, 'running');
      let after: number[] = seen;
      await until(async () => (after = await ticks()).length > seen.length);
      const gap = Math.max(...after.slice(1).map((x, i) => x - after[i]!));
      assert.ok(gap >= 0.35, `the loop ran while paused: its longest gap was ${gap.toFixed(2)} s`);
      // The loop runs again after resume.
      await until(async () => (await ticks()).length - seen.length >= 5);
    } finally {
      await sb.delete();
    }
  });

  test('timeout sets a new expiry and the edge enforces TTL and idle timeout (on an injected clock)', async () => {
    const clock = testClock();
    const tc = await startTestWarren({ clock });
    try {
      const ttl = await tc.client.sandboxes.create({ image: 'busybox:latest', lifetime: { ttlSeconds: 1 } });
      const idle = await tc.client.sandboxes.create({ image: 'busybox:latest', lifetime: { idleTimeoutSeconds: 2 } });
      const kept = await tc.client.sandboxes.create({ image: 'busybox:latest', lifetime: { ttlSeconds: 1 } });
      const info = await kept.setTimeout(600);
      assert.equal(Date.parse(info.expiresAt ?? ''), clock.now() + 600_000);
      // Not yet due: nothing happens.
      clock.advance(900);
      await tc.warren.sweep();
      assert.deepEqual(await Promise.all([ttl, idle, kept].map(async (s) => (await s.refresh()).state)), ['running', 'running', 'running']);
      clock.advance(300);
      await tc.warren.sweep();
      await until(async () => (await ttl.refresh()).state === 'stopped');
      assert.equal((await idle.refresh()).state, 'running', 'idle for 1.2 s of its 2');
      clock.advance(900);
      await tc.warren.sweep();
      await until(async () => (await idle.refresh()).state === 'stopped');
      assert.equal((await kept.refresh()).state, 'running');
      await assert.rejects(ttl.exec('true'), (e: WarrenError) => e.code === 'conflict');
      // Each says why it ended, and whose doing it was.
      assert.deepEqual([(await ttl.refresh()).end?.reason, (await idle.refresh()).end?.reason, (await kept.refresh()).end], ['ttl', 'idle', null]);
      assert.equal((await ttl.refresh()).end?.by, 'operator');
    } finally {
      await tc.close();
    }
  });

  test('batch create, and pause/resume/delete by labels', async () => {
    const { sandboxes, errors } = await t.client.sandboxes.createMany(3, { image: 'busybox:latest', labels: { job: 'batch' } });
    assert.equal(errors.length, 0);
    assert.equal(sandboxes.length, 3);
    assert.equal(await t.client.sandboxes.batch('pause', { job: 'batch' }), 3);
    for (const s of sandboxes) assert.equal((await s.refresh()).state, 'paused');
    assert.equal(await t.client.sandboxes.batch('resume', { job: 'batch' }), 3);
    assert.equal(await t.client.sandboxes.batch('delete', { job: 'batch' }), 3);
    for (const s of sandboxes) assert.equal((await s.refresh()).state, 'stopped');
  });

  test("a batch create decodes its files once for all its sandboxes, not once each (the server's memory stays bounded)", async () => {
    const content = randomBytes(12 << 20);
    const before = process.memoryUsage().arrayBuffers;
    let peak = before;
    const sample = setInterval(() => (peak = Math.max(peak, process.memoryUsage().arrayBuffers)), 2);
    try {
      const { sandboxes, errors } = await t.client.sandboxes.createMany(24, {
        image: 'busybox:latest',
        resources: { cpu: 0.1, memoryMiB: 64 },
        labels: { job: 'batch-files' },
        files: [{ path: '/data/blob', content: content.toString('base64') }],
      });
      assert.equal(errors.length, 0, JSON.stringify(errors));
      assert.equal((await sandboxes[23]!.exec('md5sum /data/blob')).stdout.split(' ')[0], createHash('md5').update(content).digest('hex'));
    } finally {
      clearInterval(sample);
      await t.client.sandboxes.batch('delete', { job: 'batch-files' });
    }
    // One decoded copy is 12 MiB; one per sandbox would be 288 MiB.
    assert.ok(peak - before < 160 * 2 ** 20, `${((peak - before) / 2 ** 20).toFixed(0)} MiB of buffers at the peak`);
  });

  test('density: 250 sandboxes at once (past per-uid kernel quotas such as the 200-key limit)', async () => {
    const n = 250;
    const made: string[] = [];
    try {
      for (let i = 0; i < n; i += 50) {
        const { sandboxes, errors } = await t.client.sandboxes.createMany(50, {
          image: 'busybox:latest',
          labels: { job: 'dense' },
          // Small requests: admission promises CPUs x 10 and memory x 1.5.
          resources: { memoryMiB: 64, cpu: 0.05 },
        });
        made.push(...sandboxes.map((s) => s.id));
        assert.deepEqual(errors, []);
      }
      assert.equal(made.length, n);
      const last = await t.client.sandboxes.get(made[made.length - 1] ?? '');
      assert.equal((await last.exec('echo ok')).stdout, 'ok\n');
    } finally {
      assert.equal(await t.client.sandboxes.batch('delete', { job: 'dense' }), made.length);
    }
  });

  test('a sandbox whose processes die under it is reported failed, not left looking alive', async () => {
    const sb = await t.client.sandboxes.create({ image: 'busybox:latest' });
    const init = await initOf(sb.id);
    assert.ok(init);
    process.kill(init.pid, 'SIGKILL');
    const deadline = Date.now() + 8000;
    let info = await sb.refresh();
    while (info.state === 'running' && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 200));
      info = await sb.refresh();
    }
    assert.equal(info.state, 'failed');
    assert.equal(info.error?.code, 'unavailable');
    await sb.delete();
  });

  test('a delete that arrives while the sandbox is being created wins', async () => {
    // The create is held once its record is written, before the edge starts anything.
    const { th, reached: atStored, release } = await heldAt('create:stored');
    try {
      const creating = th.client.sandboxes.create({ image: 'busybox:latest', labels: { race: 'r' } }).then(
        (sb) => ({ sb, err: null }),
        (err: unknown) => ({ sb: null, err }),
      );
      await atStored;
      const listed = (await th.client.sandboxes.list({ labels: { race: 'r' } })).sandboxes;
      assert.deepEqual(
        listed.map((s) => s.info.state),
        ['creating'],
      );
      const id = listed[0]?.id ?? '';
      await (await th.client.sandboxes.get(id)).delete();
      release();
      const r = await creating;
      assert.ok(r.err instanceof Error && (r.err as WarrenError).code === 'conflict', String(r.err));
      assert.equal((await th.client.sandboxes.get(id)).info.state, 'stopped');
      assert.deepEqual(hostLeftovers(id), []);
    } finally {
      release();
      await th.close();
    }
  });

  test('a sandbox its node has made, whose create has not finished, is listed creating, not running', async () => {
    // Held once the node made it, before it is recorded running: the create may still fail or be
    // cut off (and the sandbox removed), so no list or get may call it running yet.
    const { th, reached: atStarted, release } = await heldAt('create:started');
    try {
      const creating = th.client.sandboxes.create({ image: 'busybox:latest', labels: { held: 'h' } });
      creating.catch(() => undefined); // (awaited below; a failed assertion first must not leave it unhandled)
      await atStarted;
      const listed = (await th.client.sandboxes.list({ labels: { held: 'h' } })).sandboxes;
      assert.deepEqual(
        listed.map((s) => s.info.state),
        ['creating'],
      );
      const id = listed[0]?.id ?? '';
      assert.ok(await initOf(id), 'its node has made it');
      assert.equal((await th.client.sandboxes.get(id)).info.state, 'creating');
      assert.deepEqual(
        (await th.client.sandboxes.list({ labels: { held: 'h' }, state: 'creating' })).sandboxes.map((s) => s.id),
        [id],
      );
      assert.deepEqual((await th.client.sandboxes.list({ labels: { held: 'h' }, state: 'running' })).sandboxes, []);
      release();
      const sb = await creating;
      assert.equal(sb.id, id);
      assert.equal(sb.info.state, 'running');
      assert.deepEqual(
        (await th.client.sandboxes.list({ labels: { held: 'h' }, state: 'running' })).sandboxes.map((s) => s.id),
        [id],
      );
      await sb.delete();
    } finally {
      release();
      await th.close();
    }
  });

  test('a repeated requestId creates one sandbox', async () => {
    const a = await t.client.sandboxes.create({ image: 'busybox:latest', requestId: 'rollout-7-create' });
    const b = await t.client.sandboxes.create({ image: 'busybox:latest', requestId: 'rollout-7-create' });
    assert.equal(a.id, b.id);
    await a.delete();
  });

  test('isolation: own namespaces, root maps to an unprivileged host range, its own link only', async () => {
    const sb = await t.client.sandboxes.create({ image: 'busybox:latest' });
    try {
      const r = await sb.exec('cat /proc/self/uid_map; echo; hostname; ls /sys/class/net; echo; cat /proc/1/cmdline | tr "\\0" " "; echo; ps -o pid= | wc -l');
      assert.equal(r.exitCode, 0, r.stderr);
      const [uidMap, , host, ...rest] = r.stdout.split('\n');
      const [, hostStart, size] = (uidMap ?? '').trim().split(/\s+/).map(Number);
      assert.ok(hostStart! >= 2 ** 30 && size === 65536, uidMap);
      assert.equal(host, sb.id.replace(/_/g, '-'), 'a host name of its own');
      // Its own network namespace: loopback and its link to the host (nothing of the host's).
      assert.deepEqual(rest.slice(0, rest.indexOf('')), ['eth0', 'lo']);
      assert.match(r.stdout, /\/\.warren\/warren-init/);
      // The platform mount is read-only and the init socket has no path inside.
      assert.notEqual((await sb.exec('touch /.warren/x')).exitCode, 0);
      assert.doesNotMatch((await sb.exec('ls -a /.warren')).stdout, /sock/);
      // Files written inside land as the sandbox's range in its own upper layer.
      await sb.exec('echo x > /root/owned');
      const st = await stat(`${t.dataDir}/sandboxes/${sb.id}/upper/root/owned`);
      assert.equal(st.uid, hostStart);
    } finally {
      await sb.delete();
    }
  });

  test('confinement: capabilities, no_new_privs, masked and read-only kernel files, devices, rlimits', async () => {
    const [sb, other] = await Promise.all([t.client.sandboxes.create({ image: 'busybox:latest' }), t.client.sandboxes.create({ image: 'busybox:latest' })]);
    try {
      await assertConfined(sb);
      // Each superblock costs every memory cgroup on the host bookkeeping (native/spawn-child.c,
      // spawn_mask), so a sandbox makes only those it needs: its root, proc, sysfs, the /dev
      // tmpfs, devpts and mqueue. The masked directories are the node's one empty directory,
      // read-only, that the host's root owns, the same in every sandbox...
      const masks = '/proc/acpi /sys/firmware /sys/kernel/debug /sys/fs/cgroup';
      const devOf = async (x: typeof sb): Promise<string> => (await x.exec(`stat -c '%d %u %a' ${masks} | sort -u`)).stdout.trim();
      const host = await stat(`${t.dataDir}/mnt/empty`);
      assert.equal(await devOf(sb), `${host.dev} 65534 555`);
      assert.equal(await devOf(other), `${host.dev} 65534 555`);
      const write = await sb.exec(
        'touch /sys/firmware/x /proc/acpi/x; mkdir /sys/fs/cgroup/x; ls -A /sys/firmware /proc/acpi /sys/fs/cgroup | grep -v : | grep -c .',
      );
      assert.equal(write.stdout.trim(), '0', write.stderr);
      assert.match(write.stderr, /Read-only file system|Permission denied/);
      // ...and /dev/shm is a directory of the /dev tmpfs, bound with its own flags.
      const shm = await sb.exec("stat -c '%d %a' /dev /dev/shm | cut -d' ' -f1 | sort -u | wc -l; stat -c %a /dev/shm; grep ' /dev/shm ' /proc/self/mountinfo");
      const [devices, mode, line] = shm.stdout.trim().split('\n');
      assert.equal(devices, '1', shm.stdout);
      assert.equal(mode, '1777');
      for (const flag of ['nosuid', 'nodev', 'noexec']) assert.match(line ?? '', new RegExp(`[ ,]${flag}[ ,]`), line);
      const inShm = await sb.exec('echo data > /dev/shm/f && cat /dev/shm/f && cp /bin/busybox /dev/shm/bb && /dev/shm/bb true; echo rc=$?');
      assert.match(inShm.stdout, /^data\nrc=126$/m, JSON.stringify(inShm));
      const own = new Set((await readFile('/proc/self/mountinfo', 'utf8')).split('\n').map((l) => l.split(' ')[2]));
      const mine = new Set(
        (await sb.exec('cat /proc/self/mountinfo')).stdout
          .split('\n')
          .flatMap((l) => (l ? [l.split(' ')[2]] : []))
          .filter((d) => !own.has(d)),
      );
      assert.equal(mine.size, 6, [...mine].join(' '));
      // Its cgroups hold its own processes only (all in its pid namespace): the spawner's stage 1,
      // which joins them to have the init born there, is gone once the create has answered.
      const init = await initOf(sb.id);
      assert.ok(init);
      const pidNs = (pid: number): Promise<string> => readlink(`/proc/${pid}/ns/pid`).catch(() => 'gone');
      const sandboxNs = await pidNs(init.pid);
      for (const c of ['memory', 'cpu', 'cpuacct', 'pids', 'freezer', 'devices']) {
        const procs = await new CgroupV1().procs(c, `${readOwnCgroupParent()}/${sb.id}`);
        assert.ok(procs.includes(init.pid), `${c}: ${procs.join()}`);
        for (const p of procs) assert.equal(await pidNs(p), sandboxNs, `${c}: process ${p} is not the sandbox's`);
      }
      // The devices cgroup, as the host sees it: everything denied but the eight nodes a sandbox
      // has (the spawner writes the rules one by one on one open of devices.allow).
      const list = await readFile(`${new CgroupV1().dir('devices', `${readOwnCgroupParent()}/${sb.id}`)}/devices.list`, 'utf8');
      assert.deepEqual(list.trim().split('\n').sort(), [
        'c 136:* rwm',
        'c 1:3 rwm',
        'c 1:5 rwm',
        'c 1:7 rwm',
        'c 1:8 rwm',
        'c 1:9 rwm',
        'c 5:0 rwm',
        'c 5:2 rwm',
      ]);
    } finally {
      await Promise.all([sb.delete(), other.delete()]);
    }
  });

  test('limits: memory, pids and cpu from resources, enforced in the sandbox only', async () => {
    const sb = await t.client.sandboxes.create({ image: 'busybox:latest', resources: { memoryMiB: 32, pids: 32, cpu: 0.5 } });
    const bystander = await t.client.sandboxes.create({ image: 'busybox:latest' });
    try {
      // Allocate past the memory limit: the allocating process is killed, the sandbox lives on.
      // (One process allocates: with a pipeline feeding a growing shell, the kernel may kill a
      // second one of the group, the command's own shell, before the first one's memory is back.)
      const mem = await sb.exec('dd if=/dev/zero of=/dev/null bs=100M count=1 2>/dev/null && echo survived; echo rc=$?', { timeoutMs: 20_000 });
      assert.match(mem.stdout, /rc=137/, JSON.stringify(mem));
      assert.doesNotMatch(mem.stdout, /survived/);
      // Fork past the pids limit: forks fail inside, nothing happens outside.
      const bomb = await sb.exec('for i in $(seq 1 64); do sleep 5 & done 2>/dev/null; sleep 0.2; ps -o pid= | wc -l', { timeoutMs: 20_000 });
      assert.ok(Number(bomb.stdout.trim()) <= 32, `pids limit held: ${bomb.stdout}`);
      assert.equal((await sb.exec('echo alive', { timeoutMs: 20_000 })).stdout, 'alive\n');
      assert.equal((await bystander.exec('echo fine')).stdout, 'fine\n');
      const info = await sb.refresh();
      assert.ok(info.usage.memoryBytes > 0);
      // The limits are in cgroups under Warren's own cgroup, where the host sees them.
      const own = /^\d+:memory:(.*)$/m.exec(await readFile('/proc/self/cgroup', 'utf8'))?.[1] ?? '/';
      const cg = (ctl: string, f: string): Promise<string> =>
        readFile(`/sys/fs/cgroup/${ctl}${own === '/' ? '' : own}/warren/${sb.id}/${f}`, 'utf8').then((x) => x.trim());
      assert.equal(await cg('memory', 'memory.limit_in_bytes'), String(32 * 1024 * 1024));
      assert.equal(await cg('cpu', 'cpu.cfs_quota_us'), '50000');
      assert.equal(await cg('pids', 'pids.max'), '32');
    } finally {
      await Promise.all([sb.delete(), bystander.delete()]);
    }
  });
});

describe('bad input gets the contract error and harms nothing', () => {
  let t: TestWarren;
  before(async () => {
    // Without the full-VM backend: a create that names it finds no node that has it.
    t = await startTestWarren({ vm: false });
  });
  after(async () => {
    await t?.close();
  });

  test('auth, validation, unknown ids and images, capacity', async () => {
    assert.equal(errorCode(await http(t, 'GET', '/v1/sandboxes', undefined, { authorization: 'Bearer nope' })), 'unauthenticated');
    assert.equal(errorCode(await http(t, 'GET', '/v1/sandboxes', undefined, { authorization: '' })), 'unauthenticated');
    assert.equal(errorCode(await http(t, 'POST', '/v1/sandboxes', '{not json')), 'invalid_argument');
    assert.equal(errorCode(await http(t, 'POST', '/v1/sandboxes', {})), 'invalid_argument');
    assert.equal(errorCode(await http(t, 'POST', '/v1/sandboxes', { image: 'busybox:latest', resources: { memoryMiB: 'lots' } })), 'invalid_argument');
    assert.equal(errorCode(await http(t, 'POST', '/v1/sandboxes', { image: 'busybox:latest', bogus: 1 })), 'invalid_argument');
    const missing = await http(t, 'POST', '/v1/sandboxes', { image: 'no-such:image' });
    assert.equal(missing.status, 404);
    assert.match((missing.json as { error: { message: string } }).error.message, /no-such:image/);
    assert.equal(errorCode(await http(t, 'GET', '/v1/sandboxes/sb_doesnotexist')), 'not_found');
    assert.equal(errorCode(await http(t, 'DELETE', '/v1/sandboxes/sb_doesnotexist')), 'not_found');
    assert.equal(errorCode(await http(t, 'POST', '/v1/sandboxes/sb_nope/exec', { cmd: 'true' })), 'not_found');
    const big = await http(t, 'POST', '/v1/sandboxes', { image: 'busybox:latest', resources: { memoryMiB: 4 * 1024 * 1024 } });
    assert.equal(big.status, 429);
    assert.equal(errorCode(big), 'resource_exhausted');
    // This node has no full-VM backend (its tests start it without one).
    const vm = await http(t, 'POST', '/v1/sandboxes', { image: 'busybox:latest', backend: 'vm' });
    assert.equal(errorCode(vm), 'invalid_argument');
    assert.match((vm.json as { error: { message: string } }).error.message, /backend "vm" is not available on any node; use one of: container, microvm/);
    // What the node's edge registered is what the node offers.
    const info = await http(t, 'GET', '/v1/info');
    assert.deepEqual(
      (info.json as { backends: Array<{ name: string; available: boolean; accelerator: string | null }> }).backends.map((b) => [
        b.name,
        b.available,
        b.accelerator,
      ]),
      [
        ['container', true, null],
        ['microvm', true, 'tcg'],
        ['vm', false, null],
      ],
    );
    const ghost = await http(t, 'POST', '/v1/sandboxes', { image: 'busybox:latest', user: 'ghost' });
    assert.equal(errorCode(ghost), 'invalid_argument');
    assert.match((ghost.json as { error: { message: string } }).error.message, /ghost/);
    assert.equal(errorCode(await http(t, 'PATCH', '/v1/sandboxes')), 'invalid_argument');
    assert.equal(errorCode(await http(t, 'GET', '/v1/nowhere')), 'not_found');
    // No stack traces or host paths on the wire.
    assert.doesNotMatch(missing.text, /at |\/tmp\/|node_modules/);
    assert.equal((await http(t, 'GET', '/healthz', undefined, { authorization: '' })).status, 200);
  });

  test('tenants see only their own sandboxes; quotas hold', async () => {
    const key = await t.client.createKey({ tenant: 'team-a', role: 'user', quota: { sandboxes: 1 } });
    const a = new Warren({ url: t.url, apiKey: key });
    const mine = await a.sandboxes.create({ image: 'busybox:latest' });
    try {
      await assert.rejects(a.sandboxes.create({ image: 'busybox:latest' }), (e: WarrenError) => e.code === 'resource_exhausted');
      const adminOwn = await t.client.sandboxes.create({ image: 'busybox:latest' });
      await assert.rejects(a.sandboxes.get(adminOwn.id), (e: WarrenError) => e.code === 'not_found');
      assert.equal((await a.sandboxes.list()).sandboxes.length, 1);
      await assert.rejects(a.createKey({ tenant: 'x' }), (e: WarrenError) => e.code === 'permission_denied');
      await adminOwn.delete();
    } finally {
      await mine.delete();
    }
  });

  test('the OpenAPI document is generated from the schemas the server validates with', async () => {
    const r = await http(t, 'GET', '/v1/openapi.json');
    const doc = r.json as {
      paths: Record<string, Record<string, { requestBody?: { content: Record<string, { schema: { properties?: Record<string, unknown> } }> } }>>;
    };
    const create = doc.paths['/v1/sandboxes']?.post?.requestBody?.content['application/json']?.schema;
    assert.ok(create?.properties?.image);
    assert.ok(create?.properties?.resources);
    assert.ok(doc.paths['/v1/sandboxes/{id}/exec']);
  });
});
