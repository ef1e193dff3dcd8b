// What a node full of sandboxes takes of the host: memory by kind (/proc/meminfo, zram) and the
// counts that a kernel or a process bounds (tasks, mounts, cgroups, interfaces, a process's
// open files), read from /proc and /sys. For benchmarks: reads only.
import { readFileSync, readdirSync, statfsSync } from 'node:fs';

/** /proc/meminfo in KiB, by field. */
export function meminfoKiB(): Record<string, number> {
  const out: Record<string, number> = {};
  for (const l of readFileSync('/proc/meminfo', 'utf8').split('\n')) {
    const m = /^(\S+):\s+(\d+)/.exec(l);
    if (m) out[m[1]!] = Number(m[2]);
  }
  return out;
}

/** Bytes the zram devices take of memory now (their compressed pages and metadata). */
export function zramUsedBytes(): number {
  let total = 0;
  for (const d of safeList('/sys/block').filter((n) => n.startsWith('zram'))) {
    const f = safeRead(`/sys/block/${d}/mm_stat`).trim().split(/\s+/);
    total += Number(f[2] ?? 0);
  }
  return total;
}

/** A process's resident set and its anonymous part (bytes), and its open files; zeros once gone. */
export function processMemory(pid: number): { rssBytes: number; anonBytes: number; fds: number; threads: number } {
  const s = safeRead(`/proc/${pid}/status`);
  const field = (k: string): number => Number(new RegExp(`^${k}:\\s+(\\d+)`, 'm').exec(s)?.[1] ?? 0);
  return { rssBytes: field('VmRSS') * 1024, anonBytes: field('RssAnon') * 1024, fds: safeList(`/proc/${pid}/fd`).length, threads: field('Threads') };
}

/** Counts the kernel bounds, with each bound. */
export interface HostCounts {
  /** Tasks (threads) on the host, and kernel.pid_max. */
  tasks: number;
  pidMax: number;
  /** Mounts in this mount namespace, and fs.mount-max (per namespace). */
  mounts: number;
  mountMax: number;
  /** Memory cgroups (v1 or v2, as mounted) and the network interfaces of this namespace. */
  memoryCgroups: number;
  interfaces: number;
  /** Inodes used on the file system of `dir`, and its total. */
  inodesUsed: number;
  inodesTotal: number;
}

/** Reads HostCounts (`dir`: a directory on the file system whose inodes count: the data dir). */
export function hostCounts(dir: string): HostCounts {
  const tasks = Number(/\d+\/(\d+)/.exec(safeRead('/proc/loadavg'))?.[1] ?? 0);
  const memoryCgroups = safeRead('/proc/cgroups')
    .split('\n')
    .map((l) => l.split('\t'))
    .find((f) => f[0] === 'memory');
  let inodesUsed = 0;
  let inodesTotal = 0;
  try {
    const s = statfsSync(dir);
    inodesTotal = s.files;
    inodesUsed = s.files - s.ffree;
  } catch {
    /* gone */
  }
  return {
    tasks,
    pidMax: Number(safeRead('/proc/sys/kernel/pid_max')),
    mounts: safeRead('/proc/self/mountinfo').split('\n').length - 1,
    mountMax: Number(safeRead('/proc/sys/fs/mount-max')),
    memoryCgroups: Number(memoryCgroups?.[2] ?? 0),
    interfaces: safeList('/sys/class/net').length,
    inodesUsed,
    inodesTotal,
  };
}

function safeRead(path: string): string {
  try {
    return readFileSync(path, 'utf8');
  } catch {
    return '';
  }
}

function safeList(path: string): string[] {
  try {
    return readdirSync(path);
  } catch {
    return [];
  }
}
