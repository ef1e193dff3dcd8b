import { execFile } from 'node:child_process';
import { readFile, writeFile } from 'node:fs/promises';
import { promisify } from 'node:util';

const run = promisify(execFile);

/** Compressed swap in RAM that the node set up (and takes down when it stops). */
export interface ZramSwap {
  device: string;
  sizeMiB: number;
  close(): Promise<void>;
}

/**
 * A zram swap device of `sizeMiB` (uncompressed) at high priority: paused sandboxes' anonymous
 * memory goes there compressed (lz4 when the kernel has it), so a paused Python process costs a
 * fraction of its resident size. Needs the zram module loaded (zram-control).
 */
export async function setupZramSwap(sizeMiB: number): Promise<ZramSwap> {
  const n = (await readFile('/sys/class/zram-control/hot_add', 'utf8')).trim();
  const dev = `/dev/zram${n}`;
  const sys = `/sys/block/zram${n}`;
  const remove = (): Promise<void> => writeFile('/sys/class/zram-control/hot_remove', n).catch(() => undefined);
  try {
    const algos = await readFile(`${sys}/comp_algorithm`, 'utf8');
    if (/\blz4\b/.test(algos)) await writeFile(`${sys}/comp_algorithm`, 'lz4');
    await writeFile(`${sys}/disksize`, `${sizeMiB}M`);
    await run('mkswap', [dev]);
    await run('swapon', ['-p', '100', dev]);
  } catch (e) {
    await remove();
    throw new Error(`could not set up zram swap: ${String(e)}`);
  }
  return {
    device: dev,
    sizeMiB,
    async close() {
      await run('swapoff', [dev]).catch(() => undefined);
      await remove();
    },
  };
}
