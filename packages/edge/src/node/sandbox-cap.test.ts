import { test } from 'node:test';
import assert from 'node:assert/strict';
import { defaultMaxSandboxes } from './sandbox-cap.js';

test('a node holds 10,000 sandboxes by default, fewer only when the kernel has too few task ids', () => {
  // The kernel's default pid_max: three tasks each (init, shell, a process) for 10,922.
  assert.equal(defaultMaxSandboxes(32768), 10922);
  assert.ok(defaultMaxSandboxes(32768) >= 10_000);
  // systemd's pid_max: the network block's 16,384 links bound it.
  assert.equal(defaultMaxSandboxes(4194304), 16384);
  assert.equal(defaultMaxSandboxes(300), 100);
  assert.equal(defaultMaxSandboxes(1), 1);
});
