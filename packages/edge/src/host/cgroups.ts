import { readFile, rmdir, writeFile } from 'node:fs/promises';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { CpuClass } from '@warren/api';

/** cgroup v1 controllers a sandbox is placed in (cpuset is left alone: a new one starts empty). */
export const SANDBOX_CONTROLLERS = ['memory', 'cpu', 'cpuacct', 'pids', 'freezer', 'devices'] as const;

const V1_ROOT = '/sys/fs/cgroup';

/** A batch sandbox's weight on cgroup v1: the least `cpu.shares` the kernel takes (a latency one keeps the default, 1024). */
export const BATCH_CPU_SHARES = 2;

/**
 * The cpu controller's files for a CPU class (pure), relative to the sandbox's cpu cgroup: on v1
 * `cpu.shares` (batch: the least, 2; latency: the default, 1024; a batch one's cgroup also gets
 * `cpu.idle` 1 where the kernel has it on v1, see ContainerBackend); on v2 `cpu.weight` (batch: the
 * least, 1; latency: the default, 100) and `cpu.idle` (batch: 1, the group runs as SCHED_IDLE
 * against its siblings; latency: 0). A batch sandbox's own processes are SCHED_IDLE too (its init
 * sets that; see native/init/main.c).
 */
export function cpuClassCgroupFiles(cpuClass: CpuClass, version: 1 | 2): Array<[file: string, value: string]> {
  const batch = cpuClass === 'batch';
  if (version === 1) return [['cpu.shares', String(batch ? BATCH_CPU_SHARES : 1024)]];
  return [
    ['cpu.weight', batch ? '1' : '100'],
    ['cpu.idle', batch ? '1' : '0'],
  ];
}

/** Parses /proc/self/cgroup into controller → path (v1 lines; the v2 line is keyed ''). */
export function parseProcCgroup(text: string): Map<string, string> {
  const out = new Map<string, string>();
  for (const line of text.split('\n')) {
    const m = /^\d+:([^:]*):(.*)$/.exec(line);
    if (!m) continue;
    for (const c of (m[1] ?? '').split(',')) out.set(c.replace(/^name=/, ''), m[2] ?? '/');
  }
  return out;
}

/**
 * The cgroup parent under which sandbox cgroups go: this process's own memory cgroup (the one
 * a host or supervisor limits), so sandboxes never land at the root of the hierarchy.
 */
export function sandboxCgroupParent(procSelfCgroup: string, subdir = 'warren'): string {
  const map = parseProcCgroup(procSelfCgroup);
  const own = map.get('memory') ?? map.get('') ?? '/';
  return join(own, subdir);
}

export function readOwnCgroupParent(subdir?: string): string {
  return sandboxCgroupParent(readFileSync('/proc/self/cgroup', 'utf8'), subdir);
}

/** Reads usage and drives the freezer of a sandbox cgroup on a cgroup v1 host. */
export class CgroupV1 {
  constructor(private readonly root = V1_ROOT) {}

  private file(controller: string, path: string, name: string): string {
    return join(this.root, controller, path, name);
  }

  /** A cgroup directory of one controller (for the native spawner, which creates them itself). */
  dir(controller: string, path: string): string {
    return join(this.root, controller, path);
  }

  get mountRoot(): string {
    return this.root;
  }

  /**
   * Removes a sandbox's cgroup from each controller once its processes are gone (the kernel
   * refuses while a dying task is still in it: EBUSY, retried briefly). Missing ones are fine.
   */
  async remove(path: string, controllers: readonly string[], timeoutMs = 5000): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    // One hierarchy's directory does not wait for another's: all at once, each retried while busy.
    const results = await Promise.allSettled(
      controllers.map(async (c) => {
        for (;;) {
          try {
            await rmdir(this.dir(c, path));
            return;
          } catch (e) {
            const code = (e as NodeJS.ErrnoException).code;
            if (code === 'ENOENT') return;
            if (code !== 'EBUSY' || Date.now() > deadline) throw e;
            await new Promise((r) => setTimeout(r, 2));
          }
        }
      }),
    );
    for (const r of results) if (r.status === 'rejected') throw r.reason;
  }

  /** The pids in a cgroup (empty when it does not exist). */
  async procs(controller: string, path: string): Promise<number[]> {
    const text = await readFile(this.file(controller, path, 'cgroup.procs'), 'utf8').catch(() => '');
    return text.split('\n').filter(Boolean).map(Number);
  }

  /** The freezer's state of a cgroup (THAWED, FREEZING or FROZEN), read at once; null when it is gone. */
  freezerStateNow(path: string): string | null {
    try {
      return readFileSync(this.file('freezer', path, 'freezer.state'), 'utf8').trim();
    } catch {
      return null;
    }
  }

  /**
   * procs, read at once: cgroup.procs is made by the kernel on the read and never waits on a
   * disk (a delete looks once whether anything is left after its init ended: usually nothing).
   */
  procsNow(controller: string, path: string): number[] {
    let text = '';
    try {
      text = readFileSync(this.file(controller, path, 'cgroup.procs'), 'utf8');
    } catch {
      /* gone */
    }
    return text.split('\n').filter(Boolean).map(Number);
  }

  /** How many processes the kernel's OOM killer ended at this cgroup's limit (memory.oom_control's oom_kill; null: not known). */
  async oomKills(path: string): Promise<number | null> {
    const text = await readFile(this.file('memory', path, 'memory.oom_control'), 'utf8').catch(() => '');
    const n = /^oom_kill (\d+)$/m.exec(text)?.[1];
    return n === undefined ? null : Number(n);
  }

  /** How many forks this cgroup's pids.max refused (pids.events' max; null: not known). */
  async pidsMaxHits(path: string): Promise<number | null> {
    const text = await readFile(this.file('pids', path, 'pids.events'), 'utf8').catch(() => '');
    const n = /^max (\d+)$/m.exec(text)?.[1];
    return n === undefined ? null : Number(n);
  }

  async memoryBytes(path: string): Promise<number> {
    return Number((await readFile(this.file('memory', path, 'memory.usage_in_bytes'), 'utf8').catch(() => '0')).trim()) || 0;
  }

  /**
   * The v1 soft limit: under memory pressure the kernel reclaims first from cgroups over theirs.
   * Null: none.
   */
  async setSoftLimit(path: string, bytes: number | null): Promise<void> {
    await writeFile(this.file('memory', path, 'memory.soft_limit_in_bytes'), bytes === null ? '-1' : String(bytes));
  }

  /** Bytes of a cgroup's memory in swap (memory.stat total_swap; 0 without swap accounting). */
  async swapBytes(path: string): Promise<number> {
    const stat = await readFile(this.file('memory', path, 'memory.stat'), 'utf8').catch(() => '');
    return Number(/^total_swap (\d+)$/m.exec(stat)?.[1] ?? 0);
  }

  /**
   * The CFS quota (microseconds per period; -1: none), written at once (a cgroup file takes it
   * in microseconds): an asynchronous write is three trips through Node's thread pool, ~0.2 ms of
   * the event loop's time per create in a profile of a burst.
   */
  setCpuQuota(path: string, quotaUs: number): void {
    writeFileSync(this.file('cpu', path, 'cpu.cfs_quota_us'), String(quotaUs));
  }

  /** cpu.idle (kernels from 5.15 have it on v1 too): the group is SCHED_IDLE to its siblings. */
  async setCpuIdle(path: string, idle: boolean): Promise<void> {
    await writeFile(this.file('cpu', path, 'cpu.idle'), idle ? '1' : '0');
  }

  async cpuSeconds(path: string): Promise<number> {
    const ns = Number((await readFile(this.file('cpuacct', path, 'cpuacct.usage'), 'utf8').catch(() => '0')).trim()) || 0;
    return ns / 1e9;
  }

  /**
   * Freezes or thaws and waits until the kernel reports the new state. A v1 freeze can stick in
   * FREEZING while a task is in an uninterruptible wait; like runc, thaw and try again.
   */
  async setFrozen(path: string, frozen: boolean, timeoutMs = 5000): Promise<void> {
    const want = frozen ? 'FROZEN' : 'THAWED';
    const f = this.file('freezer', path, 'freezer.state');
    const deadline = Date.now() + timeoutMs;
    for (let attempt = 0; ; attempt++) {
      await writeFile(f, want);
      for (let i = 0; i < 20; i++) {
        if ((await readFile(f, 'utf8')).trim() === want) return;
        await new Promise((r) => setTimeout(r, i < 5 ? 0 : 1));
      }
      if (Date.now() > deadline) {
        if (frozen) await writeFile(f, 'THAWED').catch(() => undefined);
        throw new Error(`freezer did not reach ${want}`);
      }
      if (frozen) {
        await writeFile(f, 'THAWED');
        await new Promise((r) => setTimeout(r, Math.min(10, attempt + 1)));
      }
    }
  }
}
