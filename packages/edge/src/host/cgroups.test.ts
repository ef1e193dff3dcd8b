import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CgroupV1, cpuClassCgroupFiles, parseProcCgroup, sandboxCgroupParent } from './cgroups.js';
import { idleThreadsArgs } from './cpu-class.js';

const HYBRID = '9:name=systemd:/\n4:memory:/process_api/abc\n3:cpu,cpuacct:/\n0::/\n';

test('sandbox cgroups go under our own memory cgroup', () => {
  assert.equal(sandboxCgroupParent(HYBRID), '/process_api/abc/warren');
  assert.equal(parseProcCgroup(HYBRID).get('cpuacct'), '/');
});

test('a pure v2 host uses the unified path', () => {
  assert.equal(sandboxCgroupParent('0::/user.slice/x.scope\n'), '/user.slice/x.scope/warren');
});

test("a cgroup's processes and freezer state, read at once (processes through the thread pool alike); none where it is gone", async () => {
  const root = await mkdtemp(join(tmpdir(), 'cgroups-test-'));
  try {
    await mkdir(join(root, 'pids', 'w', 'sb'), { recursive: true });
    await writeFile(join(root, 'pids', 'w', 'sb', 'cgroup.procs'), '12\n345\n');
    const cg = new CgroupV1(root);
    assert.deepEqual(cg.procsNow('pids', 'w/sb'), [12, 345]);
    assert.deepEqual(await cg.procs('pids', 'w/sb'), [12, 345]);
    assert.deepEqual(cg.procsNow('pids', 'w/gone'), []);
    await mkdir(join(root, 'freezer', 'w', 'sb'), { recursive: true });
    await writeFile(join(root, 'freezer', 'w', 'sb', 'freezer.state'), 'FROZEN\n');
    assert.equal(cg.freezerStateNow('w/sb'), 'FROZEN');
    assert.equal(cg.freezerStateNow('w/gone'), null);
  } finally {
    await rm(root, { recursive: true, force: true });
  }
});

test("a cgroup's forks refused at pids.max, from pids.events; null where it cannot be read", async () => {
  const root = await mkdtemp(join(tmpdir(), 'cgroups-test-'));
  try {
    await mkdir(join(root, 'pids', 'w', 'sb'), { recursive: true });
    await writeFile(join(root, 'pids', 'w', 'sb', 'pids.events'), 'max 24\n');
    const cg = new CgroupV1(root);
    assert.equal(await cg.pidsMaxHits('w/sb'), 24);
    assert.equal(await cg.pidsMaxHits('w/gone'), null);
  } finally {
    await rm(root, { recursive: true, force: true });
  }
});

test("a CPU class's cpu controller files: v1 cpu.shares; v2 cpu.weight and cpu.idle", () => {
  assert.deepEqual(cpuClassCgroupFiles('batch', 1), [['cpu.shares', '2']]);
  assert.deepEqual(cpuClassCgroupFiles('latency', 1), [['cpu.shares', '1024']]);
  assert.deepEqual(cpuClassCgroupFiles('batch', 2), [
    ['cpu.weight', '1'],
    ['cpu.idle', '1'],
  ]);
  assert.deepEqual(cpuClassCgroupFiles('latency', 2), [
    ['cpu.weight', '100'],
    ['cpu.idle', '0'],
  ]);
  // Every thread of a VMM, not only its main one.
  assert.deepEqual(idleThreadsArgs(42), ['--all-tasks', '--idle', '--pid', '0', '42']);
});
