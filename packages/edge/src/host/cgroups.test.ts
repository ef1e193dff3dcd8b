import { test } from 'node:test';
import assert from 'node:assert/strict';
import { parseProcCgroup, sandboxCgroupParent } from './cgroups.js';

const HYBRID = '9:name=systemd:/\n4:memory:/process_api/abc\n3:cpu,cpuacct:/\n0::/\n';

test('sandbox cgroups go under our own memory cgroup', () => {
  assert.equal(sandboxCgroupParent(HYBRID), '/process_api/abc/warren');
  assert.equal(parseProcCgroup(HYBRID).get('cpuacct'), '/');
});

test('a pure v2 host uses the unified path', () => {
  assert.equal(sandboxCgroupParent('0::/user.slice/x.scope\n'), '/user.slice/x.scope/warren');
});
