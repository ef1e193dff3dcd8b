import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';

/** Where the kernel's samepage merging is set. */
export const KSM_DIR = '/sys/kernel/mm/ksm';

/** How hard ksmd works: pages it looks at each round, and its sleep between rounds. */
export interface KsmOptions {
  pagesToScan: number;
  sleepMs: number;
}

/**
 * The node's default: 1,000 pages each 20 ms (about 200 MB/s looked at; ksmd takes a few percent
 * of a CPU for it here). A page merged stays merged until a guest writes it.
 */
export const KSM_DEFAULT: KsmOptions = { pagesToScan: 1000, sleepMs: 20 };

/** The settings written (pure): file name under KSM_DIR → value. */
export function ksmSettings(o: KsmOptions): Array<[string, string]> {
  return [
    ['pages_to_scan', String(Math.max(1, Math.round(o.pagesToScan)))],
    ['sleep_millisecs', String(Math.max(1, Math.round(o.sleepMs)))],
    // Zero pages (a guest's freed and zeroed memory) are merged into the kernel's zero page.
    ['use_zero_pages', '1'],
    ['run', '1'],
  ];
}

/**
 * Turns the kernel's samepage merging on (KsmOptions): QEMU marks each guest's RAM mergeable, so
 * the pages guests hold alike (their page caches of the same image files, their kernels' and
 * libraries' pages written after a clone, zeroed free pages) are kept once. Answers a close that
 * sets back what was there; null when this kernel has no KSM (or it cannot be set).
 */
export async function enableKsm(o: KsmOptions = KSM_DEFAULT, dir = KSM_DIR): Promise<{ close(): Promise<void> } | null> {
  const before: Array<[string, string]> = [];
  try {
    for (const [name, value] of ksmSettings(o)) {
      before.push([name, (await readFile(join(dir, name), 'utf8')).trim()]);
      await writeFile(join(dir, name), value);
    }
  } catch {
    await restore(dir, before);
    return null;
  }
  return { close: () => restore(dir, before) };
}

/** Writes back what was read, in reverse order (`run` first: ksmd stops, if it was off, before its settings go back). */
async function restore(dir: string, before: Array<[string, string]>): Promise<void> {
  for (const [name, value] of [...before].reverse()) await writeFile(join(dir, name), value).catch(() => undefined);
}
