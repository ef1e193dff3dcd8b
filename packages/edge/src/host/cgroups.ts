import { readFile, writeFile } from 'node:fs/promises';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';

const V1_ROOT = '/sys/fs/cgroup';

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

  async memoryBytes(path: string): Promise<number> {
    return Number((await readFile(this.file('memory', path, 'memory.usage_in_bytes'), 'utf8').catch(() => '0')).trim()) || 0;
  }

  async cpuSeconds(path: string): Promise<number> {
    const ns = Number((await readFile(this.file('cpuacct', path, 'cpuacct.usage'), 'utf8').catch(() => '0')).trim()) || 0;
    return ns / 1e9;
  }

  /** Freezes or thaws and waits until the kernel reports the new state. */
  async setFrozen(path: string, frozen: boolean, timeoutMs = 5000): Promise<void> {
    const want = frozen ? 'FROZEN' : 'THAWED';
    const f = this.file('freezer', path, 'freezer.state');
    await writeFile(f, want);
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const state = (await readFile(f, 'utf8')).trim();
      if (state === want) return;
      if (Date.now() > deadline) throw new Error(`freezer stuck in ${state}`);
      await new Promise((r) => setTimeout(r, 1));
      await writeFile(f, want);
    }
  }
}
