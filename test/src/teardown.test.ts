// A sandbox's removal on its host, when something is in its cgroups that the end of its PID
// namespace does not reach: it is killed, and the sandbox leaves nothing behind.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { CgroupV1, SANDBOX_CONTROLLERS, readOwnCgroupParent } from '@warren/edge';
import { hostLeftovers, notOnMicrovm, startTestWarren } from './harness.js';

test(
  'a process in a sandbox’s cgroups but outside its namespace is killed at its delete, and nothing of the sandbox is left',
  notOnMicrovm('a container’s cgroups'),
  async () => {
    const t = await startTestWarren();
    // A host process, as one an operator's nsenter or a crashed helper leaves: not in the sandbox's PID namespace.
    const stray = spawn('sleep', ['600'], { stdio: 'ignore' });
    const exited = once(stray, 'exit');
    try {
      const sb = await t.client.sandboxes.create({ image: 'busybox:latest' });
      const cg = new CgroupV1();
      for (const c of SANDBOX_CONTROLLERS) await writeFile(join(cg.dir(c, `${readOwnCgroupParent()}/${sb.id}`), 'cgroup.procs'), String(stray.pid));
      await sb.delete();
      assert.deepEqual(hostLeftovers(sb.id), []);
      const [code, signal] = (await exited) as [number | null, string | null];
      assert.equal(signal, 'SIGKILL', `the stray process ended with ${code} ${signal}`);
    } finally {
      stray.kill('SIGKILL');
      await t.close();
    }
  },
);
