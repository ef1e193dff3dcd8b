import { execFile } from 'node:child_process';
import { readFile, rm, writeFile } from 'node:fs/promises';
import { promisify } from 'node:util';

const run = promisify(execFile);

/** Compressed swap in RAM that the node set up (and takes down when it stops). */
export interface ZramSwap {
  device: string;
  sizeMiB: number;
  close(): Promise<void>;
}

/**
 * The zram swap a node sets up when told nothing: half of the machine's memory (the size is
 * what it holds uncompressed; lz4 stores an idle interpreter's heap in about a third of that,
 * and nothing is used until pages are written to it).
 */
export function defaultZramMiB(totalMemMiB: number): number {
  return Math.floor(totalMemMiB / 2);
}

/** The swap areas of a /proc/swaps text: name, type and size (MiB; the header left out). */
export function parseSwaps(text: string): Array<{ name: string; sizeMiB: number }> {
  return text
    .split('\n')
    .slice(1)
    .map((l) => l.split(/\s+/))
    .filter((f) => f[0])
    .map((f) => ({ name: f[0]!, sizeMiB: Math.floor(Number(f[2] ?? 0) / 1024) }));
}

/**
 * The zram a node will have for its sandboxes (MiB, uncompressed): the host's zram swap on now,
 * plus the device the node sets up at start (`zramMiB` when asked for; by default
 * defaultZramMiB unless the host has swap already; none with `swap: false`). Pure.
 */
export function plannedZramMiB(
  swaps: ReadonlyArray<{ name: string; sizeMiB: number }>,
  swap: false | { zramMiB?: number } | undefined,
  totalMemMiB: number,
): number {
  const host = swaps.filter((s) => s.name.startsWith('/dev/zram')).reduce((a, s) => a + s.sizeMiB, 0);
  const own = swap === false ? 0 : (swap?.zramMiB ?? (swaps.length ? 0 : defaultZramMiB(totalMemMiB)));
  return host + own;
}

/** The swap areas active now (/proc/swaps, without its header). */
export async function activeSwaps(): Promise<string[]> {
  const text = await readFile('/proc/swaps', 'utf8').catch(() => '');
  return text
    .split('\n')
    .slice(1)
    .map((l) => l.split(/\s+/)[0] ?? '')
    .filter(Boolean);
}

const removeDevice = (n: string): Promise<void> => writeFile('/sys/class/zram-control/hot_remove', n).catch(() => undefined);

/**
 * Takes down a zram device an earlier run left on (it was killed before it could), as named in
 * `stateFile`; nothing when there is none.
 */
export async function removeLeftoverZram(stateFile: string): Promise<void> {
  const n = (await readFile(stateFile, 'utf8').catch(() => '')).trim();
  if (!/^\d+$/.test(n)) return;
  await run('swapoff', [`/dev/zram${n}`]).catch(() => undefined);
  await removeDevice(n);
  await rm(stateFile, { force: true });
}

/**
 * A zram swap device of `sizeMiB` (uncompressed) at high priority: paused sandboxes' anonymous
 * memory goes there compressed (lz4 when the kernel has it), so a paused Python process costs a
 * fraction of its resident size. Needs the zram module loaded (zram-control). With `stateFile`,
 * its number is written there until it is removed, so the next start can take down a device a
 * killed run left behind.
 */
export async function setupZramSwap(sizeMiB: number, stateFile?: string): Promise<ZramSwap> {
  const n = (await readFile('/sys/class/zram-control/hot_add', 'utf8')).trim();
  const dev = `/dev/zram${n}`;
  const sys = `/sys/block/zram${n}`;
  try {
    if (stateFile) await writeFile(stateFile, n);
    const algos = await readFile(`${sys}/comp_algorithm`, 'utf8');
    if (/\blz4\b/.test(algos)) await writeFile(`${sys}/comp_algorithm`, 'lz4');
    await writeFile(`${sys}/disksize`, `${sizeMiB}M`);
    await run('mkswap', [dev]);
    await run('swapon', ['-p', '100', dev]);
  } catch (e) {
    await removeDevice(n);
    if (stateFile) await rm(stateFile, { force: true });
    throw new Error(`could not set up zram swap: ${String(e)}`);
  }
  return {
    device: dev,
    sizeMiB,
    async close() {
      await run('swapoff', [dev]).catch(() => undefined);
      await removeDevice(n);
      if (stateFile) await rm(stateFile, { force: true });
    },
  };
}

/**
 * The node's swap for paused sandboxes. `sizeMiB` undefined: the default, zram of
 * defaultZramMiB, unless the host has swap of its own already or cannot make zram (then none,
 * with a warning: pause still drops page cache); a number: exactly that, or the start fails.
 * A device an earlier, killed run left behind is taken down first.
 */
export async function openNodeSwap(o: {
  stateFile: string;
  sizeMiB?: number;
  totalMemMiB: number;
  log: { info(msg: string, meta?: unknown): void; warn(msg: string, meta?: unknown): void };
}): Promise<ZramSwap | null> {
  await removeLeftoverZram(o.stateFile);
  if (o.sizeMiB !== undefined) return setupZramSwap(o.sizeMiB, o.stateFile);
  const swaps = await activeSwaps();
  if (swaps.length) {
    o.log.info('the host has swap already: no zram set up', { swaps });
    return null;
  }
  await run('modprobe', ['zram']).catch(() => undefined);
  return setupZramSwap(defaultZramMiB(o.totalMemMiB), o.stateFile).catch((e: unknown) => {
    o.log.warn('no swap for paused sandboxes (pause drops only page cache)', { error: String(e) });
    return null;
  });
}
