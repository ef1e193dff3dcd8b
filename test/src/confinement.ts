import assert from 'node:assert/strict';
import type { Sandbox } from '@warren/sdk';

/** What every container sandbox must look like from inside, whichever runtime started it. */
export async function assertConfined(sb: Sandbox): Promise<void> {
  const status = async (pid: string): Promise<Record<string, string>> =>
    Object.fromEntries(
      (await sb.exec(`cat /proc/${pid}/status`)).stdout
        .split('\n')
        .map((l) => l.split(':\t'))
        .filter((kv) => kv.length === 2),
    ) as Record<string, string>;
  // Docker's default set and nothing else: no CAP_SYS_ADMIN, no CAP_SYS_PTRACE, for the init
  // and for what it runs.
  for (const pid of ['1', 'self']) {
    const st = await status(pid);
    assert.equal(st.CapBnd, '00000000a80425fb', `${pid} bounding set`);
    assert.equal(st.NoNewPrivs, '1');
    assert.equal(st.Seccomp, '2');
  }
  // A command starts with no signal ignored or blocked, whatever the init ignores itself.
  const own = (await sb.exec(['cat', '/proc/self/status'])).stdout;
  for (const f of ['SigIgn', 'SigBlk']) assert.match(own, new RegExp(`^${f}:\\t0{16}$`, 'm'), f);
  assert.notEqual((await sb.exec('mount -t tmpfs none /mnt')).exitCode, 0);
  // Kernel files that leak host state are empty; kernel tunables cannot be written.
  assert.equal((await sb.exec('cat /proc/timer_list /proc/keys | wc -c')).stdout.trim(), '0');
  assert.equal((await sb.exec('ls /sys/firmware /proc/acpi /sys/kernel/debug /sys/fs/cgroup | grep -v : | grep -c .')).stdout.trim(), '0');
  assert.notEqual((await sb.exec('touch /sys/fs/cgroup/x')).exitCode, 0);
  assert.match((await sb.exec('grep " /proc/sys " /proc/mounts')).stdout, / ro,/);
  assert.match((await sb.exec('grep " /sys " /proc/mounts')).stdout, / ro,/);
  // The usual devices work; no new ones can be made.
  const dev = await sb.exec('echo x > /dev/null && head -c 4 /dev/urandom | wc -c && (echo x > /dev/full) 2>&1; mknod /tmp/sda b 8 0 2>&1; echo done');
  assert.match(dev.stdout, /^4\n.*No space left on device.*\n.*\ndone\n$/s);
  assert.notEqual((await sb.exec('test -e /tmp/sda')).exitCode, 0);
  assert.equal((await sb.exec('ulimit -n')).stdout.trim(), '4096');
  // Its own cgroup namespace: its cgroups are its root.
  assert.match((await sb.exec('cat /proc/self/cgroup')).stdout, /^\d+:memory:\/$/m);
  assert.equal((await sb.exec('readlink /dev/fd; readlink /dev/ptmx')).stdout, '/proc/self/fd\npts/ptmx\n');
}
