import { readFile } from 'node:fs/promises';

/**
 * What one microVM's QEMU holds of the host's memory, seen from the host (never from the guest,
 * which may lie): guest and device model together.
 */
export interface VmMemory {
  /** Its proportional set in RAM: its own pages, and its share of pages it maps with others (a template's or base's RAM, QEMU's libraries, pages KSM merged). */
  pssBytes: number;
  /** Of it, anonymous pages (the guest's own, TCG's code, QEMU's heap) and file pages. */
  anonBytes: number;
  fileBytes: number;
  /** Its proportional share of swapped-out pages, uncompressed (as a container's swap counts). */
  swapBytes: number;
  /** What that swap costs the host's RAM: on zram its compressed share; on a disk, nothing. */
  swapHeldBytes: number;
  /** What it really holds: `pssBytes + swapHeldBytes` (what admission should count). */
  heldBytes: number;
}

/** The fields of /proc/PID/smaps_rollup this reads, in bytes (pure). */
export function parseRollup(text: string): { pss: number; anon: number; file: number; swapPss: number } {
  const kb = (k: string): number => Number(new RegExp(`^${k}:\\s+(\\d+) kB`, 'm').exec(text)?.[1] ?? 0) * 1024;
  return { pss: kb('Pss'), anon: kb('Pss_Anon'), file: kb('Pss_File'), swapPss: kb('SwapPss') };
}

/**
 * What a byte in the node's swap costs its RAM (pure): on zram, the memory zram uses (its
 * `mm_stat`: orig_data_size, compr_data_size, mem_used_total, ...) over the swap in use on it
 * (/proc/swaps' Used, KiB): zero pages take a swap slot and no memory (the kernel keeps them as
 * a bit, zram as a flag), so they count at their cost, nothing, and what a guest gave back zeroed
 * is not charged as data; 0 for a swap on disk. `swaps` is /proc/swaps; `mmStat` the mm_stat of
 * each zram device named there.
 */
export function swapCostPerByte(swaps: string, mmStat: Record<string, string>): number {
  let inUse = 0;
  let used = 0;
  for (const line of swaps.split('\n').slice(1)) {
    const cols = line.trim().split(/\s+/);
    const dev = /^\/dev\/(zram\d+)$/.exec(cols[0] ?? '')?.[1];
    const st = dev ? mmStat[dev] : undefined;
    if (!st) continue;
    inUse += Number(cols[3] ?? 0) * 1024;
    used += Number(st.trim().split(/\s+/)[2] ?? 0);
  }
  // Nothing swapped yet: a page that goes there costs about a third (what zram's lz4 makes of QEMU's pages here).
  return inUse > 0 ? Math.min(1, used / inUse) : swaps.includes('/dev/zram') ? 1 / 3 : 0;
}

/** The swap's cost per byte now (see swapCostPerByte), read from /proc and sysfs. */
export async function hostSwapCost(): Promise<number> {
  const swaps = await readFile('/proc/swaps', 'utf8').catch(() => '');
  const mmStat: Record<string, string> = {};
  for (const dev of swaps.matchAll(/^\/dev\/(zram\d+)\s/gm)) mmStat[dev[1]!] = await readFile(`/sys/block/${dev[1]}/mm_stat`, 'utf8').catch(() => '');
  return swapCostPerByte(swaps, mmStat);
}

/** What QEMU `pid` holds (see VmMemory), with the node's swap costing `swapCost` a byte; null once it is gone. */
export async function qemuMemory(pid: number, swapCost: number): Promise<VmMemory | null> {
  const text = await readFile(`/proc/${pid}/smaps_rollup`, 'utf8').catch(() => null);
  if (text === null) return null;
  const r = parseRollup(text);
  const swapHeldBytes = Math.round(r.swapPss * swapCost);
  return { pssBytes: r.pss, anonBytes: r.anon, fileBytes: r.file, swapBytes: r.swapPss, swapHeldBytes, heldBytes: r.pss + swapHeldBytes };
}
