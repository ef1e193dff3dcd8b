import { execFileSync } from 'node:child_process';
import { readFile, readdir, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { nodeTag } from '../net/addresses.js';
import { CgroupV1, SANDBOX_CONTROLLERS, readOwnCgroupParent } from './cgroups.js';
import { pidfileProcess } from './proc.js';

/**
 * The last-resort cleanup of a data dir whose Warren could not close (a failed start, a killed
 * process, a crashed test): its sandboxes (runc containers and native inits, found by their
 * cgroups) killed and their cgroups removed, its on-demand blob daemon, its nftables table, every
 * mount below it. One module for the test harness and the test runner's sweep, so they cannot
 * drift apart. A data dir whose `warren.pid` names a live process is someone's running node:
 * {@link liveNode} tells, and the sweep leaves it alone.
 */

type Log = (msg: string) => void;

/** Whether a `warren up` is running on this data dir (its pid file names a live process). */
export async function liveNode(dataDir: string): Promise<boolean> {
  const pid = Number((await readFile(join(dataDir, 'warren.pid'), 'utf8').catch(() => '')).trim());
  if (!(pid > 0)) return false;
  return (await readFile(`/proc/${pid}/cmdline`, 'utf8').catch(() => '')).split('\0').includes('up');
}

/**
 * The file a test process (or any owner of a data dir that is not `warren up`) writes its pid to,
 * so that a sweep for leftovers leaves the dir alone while that process lives.
 */
export const OWNER_PID_FILE = 'owner.pid';

/** Whether the process named in the dir's owner pid file is alive (its node may be in-process). */
export async function liveOwner(dataDir: string): Promise<boolean> {
  const pid = Number((await readFile(join(dataDir, OWNER_PID_FILE), 'utf8').catch(() => '')).trim());
  if (!(pid > 0)) return false;
  return (await readFile(`/proc/${pid}/stat`, 'utf8').catch(() => '')) !== '';
}

function killQuietly(pid: number): boolean {
  try {
    process.kill(pid, 'SIGKILL');
    return true;
  } catch {
    return false;
  }
}

/** Removes what a dead node left under `dataDir`; with `remove`, the dir too. */
export async function sweepDataDir(dataDir: string, opts: { remove?: boolean; log?: Log } = {}): Promise<void> {
  const log = opts.log ?? (() => undefined);
  let containers: Array<{ id: string; bundle: string }> = [];
  try {
    containers = (JSON.parse(execFileSync('runc', ['list', '-f', 'json']).toString() || '[]') as typeof containers) ?? [];
  } catch {
    containers = [];
  }
  for (const c of containers.filter((c) => c.bundle.startsWith(dataDir + '/'))) {
    for (const args of [
      ['resume', c.id],
      ['delete', '-f', c.id],
    ]) {
      try {
        execFileSync('runc', args, { stdio: 'ignore' });
      } catch {
        /* not paused, or gone */
      }
    }
    log(`swept leftover container ${c.id}`);
  }
  // Sandboxes of either runtime: found by their cgroups.
  const cgroups = new CgroupV1();
  const parent = readOwnCgroupParent();
  for (const id of await readdir(join(dataDir, 'sandboxes')).catch(() => [] as string[])) {
    const path = `${parent}/${id}`;
    await cgroups.setFrozen(path, false, 500).catch(() => undefined);
    for (const pid of await cgroups.procs('pids', path).catch(() => [] as number[])) if (killQuietly(pid)) log(`swept leftover sandbox process ${pid} (${id})`);
    for (let i = 0; i < 500 && (await cgroups.procs('pids', path).catch(() => [])).length > 0; i++) await new Promise((r) => setTimeout(r, 2));
    await cgroups.remove(path, SANDBOX_CONTROLLERS, 2000).catch(() => undefined);
  }
  // microVMs and full VMs (and templates and fork bases being made): their QEMU, named by its pidfile (and checked to be QEMU, on this dir's files).
  for (const kind of ['microvm', 'microvm-templates', 'microvm/.fork-bases', 'vm', 'vm-templates']) {
    for (const id of await readdir(join(dataDir, kind)).catch(() => [] as string[])) {
      const vm = join(dataDir, kind, id);
      const pid = await pidfileProcess(join(vm, 'qemu.pid'), 'qemu-system-x86_64');
      if (pid && killQuietly(pid)) log(`swept leftover microVM ${pid} (${kind}/${id})`);
    }
  }
  // An on-demand blob view's daemon.
  const blobfs = Number((await readFile(join(dataDir, 'cache', 'blobfs.pid'), 'utf8').catch(() => '')).trim());
  if (blobfs > 0 && (await readFile(`/proc/${blobfs}/cmdline`, 'utf8').catch(() => '')).includes('warren-blobfs') && killQuietly(blobfs)) {
    log(`swept leftover warren-blobfs ${blobfs}`);
  }
  // Its sandbox network: the node's nftables table (its veths went with the namespaces).
  try {
    execFileSync('nft', ['delete', 'table', 'inet', `warren_${nodeTag(dataDir)}`], { stdio: 'ignore' });
    log(`swept leftover nftables table warren_${nodeTag(dataDir)}`);
  } catch {
    /* none */
  }
  // And the route that held its block (net/sandbox-network.ts).
  const block = await readFile(join(dataDir, 'network.json'), 'utf8').then(
    (t) => (JSON.parse(t) as { block?: unknown }).block,
    () => undefined,
  );
  if (typeof block === 'string' && /^10\.\d+\.\d+\.\d+\/\d+$/.test(block)) {
    try {
      execFileSync('ip', ['route', 'del', 'unreachable', block], { stdio: 'ignore' });
      log(`swept leftover route of block ${block}`);
    } catch {
      /* none */
    }
  }
  const mounts = (await readFile('/proc/self/mounts', 'utf8'))
    .split('\n')
    .map((l) => l.split(' ')[1] ?? '')
    .filter((m) => m.startsWith(dataDir + '/'))
    .reverse();
  for (const m of mounts) {
    try {
      execFileSync('umount', ['-l', m], { stdio: 'ignore' });
      log(`swept leftover mount ${m}`);
    } catch {
      /* already unmounted */
    }
  }
  if (opts.remove) await rm(dataDir, { recursive: true, force: true });
}
