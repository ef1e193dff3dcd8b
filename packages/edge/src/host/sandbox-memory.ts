import { createHash } from 'node:crypto';
import { mkdir, readFile, rmdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { memAvailableMiB } from './proc.js';
import { SANDBOX_CONTROLLERS } from './cgroups.js';

/**
 * Memory available under a cgroup's limit (MiB): the limit less what its tasks hold that the
 * kernel cannot simply drop (usage less inactive page cache, the working set). Pure.
 */
export function cgroupAvailableMiB(limitBytes: number, memoryStat: string, usageBytes: number): number {
  const inactiveFile = Number(/^total_inactive_file (\d+)$/m.exec(memoryStat)?.[1] ?? 0);
  return (limitBytes - Math.max(0, usageBytes - inactiveFile)) / 2 ** 20;
}

/** The name of the sandboxes' parent cgroup of a node whose sandboxes share a memory limit: one per data dir. */
export function limitedParentName(dataDir: string): string {
  return `warren-${createHash('sha256').update(dataDir).digest('hex').slice(0, 12)}`;
}

/** The memory limit on a node's sandboxes together (their parent cgroup's), opened. */
export interface SandboxMemory {
  limitMiB: number;
  /** Memory available to the sandboxes now: the lesser of the host's MemAvailable and the room under the limit (MiB). */
  availableMiB(): Promise<number>;
  /** Removes the parent cgroup's directories once no sandbox is in them (kept sandboxes keep them). */
  close(): Promise<void>;
}

/**
 * Puts a memory limit of `limitMiB` on the cgroup v1 parent `parent` (under `root`) of a node's
 * sandboxes: together they never hold more than that, whatever the host has, and the node's
 * memory pressure and admission measure against it (a shared host, or a test that starves its
 * node without starving the machine).
 */
export async function openSandboxMemory(root: string, parent: string, limitMiB: number): Promise<SandboxMemory> {
  const dir = join(root, 'memory', parent);
  await mkdir(dir, { recursive: true });
  await writeFile(join(dir, 'memory.limit_in_bytes'), String(limitMiB * 2 ** 20));
  const limitBytes = Number((await readFile(join(dir, 'memory.limit_in_bytes'), 'utf8')).trim());
  return {
    limitMiB,
    async availableMiB() {
      const [stat, usage, host] = await Promise.all([
        readFile(join(dir, 'memory.stat'), 'utf8'),
        readFile(join(dir, 'memory.usage_in_bytes'), 'utf8'),
        memAvailableMiB(),
      ]);
      return Math.min(host, cgroupAvailableMiB(limitBytes, stat, Number(usage.trim())));
    },
    async close() {
      for (const c of SANDBOX_CONTROLLERS) await rmdir(join(root, c, parent)).catch(() => undefined);
    },
  };
}
