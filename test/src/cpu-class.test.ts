import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { CgroupV1, readOwnCgroupParent } from '@warren/edge';
import { Warren, type WarrenError, type Sandbox } from '@warren/sdk';
import { errorCode, http, policyOf, startTestWarren, type TestWarren } from './harness.js';

/** Every process of a sandbox (its cgroup's), each with its policy. */
async function policies(id: string): Promise<number[]> {
  const pids = await new CgroupV1().procs('pids', `${readOwnCgroupParent()}/${id}`);
  assert.ok(pids.length > 0, 'the sandbox has processes');
  return Promise.all(pids.map(policyOf));
}

const shares = (id: string): Promise<string> =>
  readFile(`${new CgroupV1().dir('cpu', `${readOwnCgroupParent()}/${id}`)}/cpu.shares`, 'utf8').then((s) => s.trim());

const idle = (id: string): Promise<string> => readFile(`${new CgroupV1().dir('cpu', `${readOwnCgroupParent()}/${id}`)}/cpu.idle`, 'utf8').then((s) => s.trim());

const SCHED_IDLE = 5;
const SCHED_OTHER = 0;

// What the escape tries from inside: raise RLIMIT_NICE (its hard limit is 0), then leave
// SCHED_IDLE for SCHED_OTHER and SCHED_BATCH, as root of the sandbox; then says its policy.
const ESCAPE = `
import os, resource
def attempt(what, f):
    try:
        f(); print(what, "ok")
    except (OSError, ValueError) as e:  # EPERM: PermissionError; setrlimit's EPERM: ValueError
        print(what, "refused", type(e).__name__)
attempt("rlimit", lambda: resource.setrlimit(resource.RLIMIT_NICE, (40, 40)))
attempt("other", lambda: os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0)))
attempt("batch", lambda: os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0)))
print("uid", os.getuid(), "policy", os.sched_getscheduler(0))
`;

// Both container runtimes: the native spawner writes the cgroup itself, runc from the OCI config.
for (const runtime of ['native', 'runc'] as const)
  describe(`CPU classes (${runtime})`, () => {
    let t: TestWarren;
    before(async () => {
      t = await startTestWarren({ images: ['busybox:latest', 'debian-python:latest'], network: false, vm: false, microvm: false, runtime });
    });
    after(async () => {
      await t?.close();
    });

    test('a batch sandbox: the least cpu.shares, every process SCHED_IDLE, and nothing inside can leave it; a latency one neither', async () => {
      const made: Sandbox[] = [];
      try {
        const batch = await t.client.sandboxes.create({ image: 'debian-python:latest', resources: { cpuClass: 'batch' } });
        made.push(batch);
        const latency = await t.client.sandboxes.create({ image: 'busybox:latest' });
        made.push(latency);
        assert.equal(batch.info.resources.cpuClass, 'batch');
        assert.equal(latency.info.resources.cpuClass, 'latency', 'latency by default');
        assert.equal((await t.client.sandboxes.get(batch.id)).info.resources.cpuClass, 'batch');
        // 2, or the kernel's idle weight (3) once cpu.idle is set.
        assert.ok(['2', '3'].includes(await shares(batch.id)), await shares(batch.id));
        assert.equal(await shares(latency.id), '1024');
        // Where the kernel has v1 cpu.idle, the batch cgroup is idle to its siblings too.
        if (existsSync('/sys/fs/cgroup/cpu/cpu.idle')) assert.deepEqual([await idle(batch.id), await idle(latency.id)], ['1', '0']);
        // The init, a command's shell and what it forks: all SCHED_IDLE, as the host sees them.
        const [b, l] = await Promise.all([batch.exec('sleep 30 & cut -d" " -f41 /proc/self/stat'), latency.exec('sleep 30 & cut -d" " -f41 /proc/self/stat')]);
        assert.equal(b.stdout, `${SCHED_IDLE}\n`);
        assert.equal(l.stdout, `${SCHED_OTHER}\n`);
        const [bp, lp] = await Promise.all([policies(batch.id), policies(latency.id)]);
        assert.ok(bp.length >= 2 && bp.every((p) => p === SCHED_IDLE), `batch: ${bp.join()}`);
        assert.ok(lp.length >= 2 && lp.every((p) => p === SCHED_OTHER), `latency: ${lp.join()}`);
        // Root of the sandbox tries to leave SCHED_IDLE: every way is refused (EPERM).
        const escape = await batch.exec(['python3', '-c', ESCAPE]);
        assert.equal(escape.stdout, 'rlimit refused ValueError\nother refused PermissionError\nbatch refused PermissionError\nuid 0 policy 5\n', escape.stderr);
        assert.ok((await policies(batch.id)).every((p) => p === SCHED_IDLE));
      } finally {
        await Promise.all(made.map((s) => s.delete()));
      }
    });

    if (runtime === 'native')
      test('the API: latency by default, a bad class is invalid_argument, a key marked batch makes batch sandboxes only', async () => {
        const bad = await http(t, 'POST', '/v1/sandboxes', { image: 'busybox:latest', resources: { cpuClass: 'turbo' } });
        assert.equal(errorCode(bad), 'invalid_argument');
        const badKey = await http(t, 'POST', '/v1/keys', { tenant: 'x', quota: { cpuClass: 'idle' } });
        assert.equal(errorCode(badKey), 'invalid_argument');
        const marked = new Warren({ url: t.url, apiKey: await t.client.createKey({ tenant: 'rollouts', quota: { cpuClass: 'batch' } }) });
        const sb = await marked.sandboxes.create({ image: 'busybox:latest' });
        try {
          assert.equal(sb.info.resources.cpuClass, 'batch');
          assert.ok(['2', '3'].includes(await shares(sb.id)));
          await assert.rejects(
            marked.sandboxes.create({ image: 'busybox:latest', resources: { cpuClass: 'latency' } }),
            (e: WarrenError) => e.code === 'permission_denied',
          );
        } finally {
          await sb.delete();
        }
      });
  });
