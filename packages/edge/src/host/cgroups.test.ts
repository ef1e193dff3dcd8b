import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CgroupV1, parseProcCgroup, sandboxCgroupParent } from './cgroups.js';

const HYBRID = '9:name=systemd:/\n4:memory:/process_api/abc\n3:cpu,cpuacct:/\n0::/\n';

test('sandbox cgroups go under our own memory cgroup', () => {
  assert.equal(sandboxCgroupParent(HYBRID), '/process_api/abc/warren');
  assert.equal(parseProcCgroup(HYBRID).get('cpuacct'), '/');
});

test('a pure v2 host uses the unified path', () => {
  assert.equal(sandboxCgroupParent('0::/user.slice/x.scope\n'), '/user.slice/x.scope/warren');
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
