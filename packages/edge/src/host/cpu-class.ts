import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { cpuClassCgroupFiles, type CgroupV1 } from './cgroups.js';

const run = promisify(execFile);

/** `chrt` argv that makes every thread of process `pid` SCHED_IDLE (pure). */
export const idleThreadsArgs = (pid: number): string[] => ['--all-tasks', '--idle', '--pid', '0', String(pid)];

/**
 * Makes a host process batch (a VMM's: a batch microVM's or VM's QEMU): moved into the node's
 * batch cgroup `path` (cpu controller, the batch `cpu.shares`, and `cpu.idle` where the kernel has
 * it; made on first use) and every one of
 * its threads SCHED_IDLE, so the threads it starts later are too (a thread's policy is its
 * creator's). The guest cannot undo either: both are the host's, outside the VM.
 */
export async function makeProcessBatch(cgroups: CgroupV1, path: string, pid: number): Promise<void> {
  const dir = cgroups.dir('cpu', path);
  await mkdir(dir, { recursive: true });
  // An idle group has the idle weight and refuses cpu.shares (EINVAL): made once, written again by later QEMUs.
  if (existsSync(join(dir, 'cpu.idle'))) await writeFile(join(dir, 'cpu.idle'), '1');
  else for (const [file, value] of cpuClassCgroupFiles('batch', 1)) await writeFile(join(dir, file), value);
  // A v1 cgroup.procs write moves all of the process's threads.
  await writeFile(join(dir, 'cgroup.procs'), String(pid));
  await run('chrt', idleThreadsArgs(pid));
}
