import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdir, readdir, readFile, statfs } from 'node:fs/promises';
import { join } from 'node:path';
import { promisify } from 'node:util';

import { sandboxFsMkfsArgs, sandboxImageBytes } from './data-disk.js';

const run = promisify(execFile);

/** Where sandboxes' writable layers live, and whether the file system limits each one's space. */
export interface SandboxDisk {
  dir: string;
  quotas: boolean;
  /** Size of the file system the sandboxes' writable layers share, in MiB. */
  sizeMiB: number;
  close(opts: { keep: boolean }): Promise<void>;
}

async function mountedAt(dir: string): Promise<string | null> {
  for (const line of (await readFile('/proc/self/mountinfo', 'utf8')).split('\n')) {
    const f = line.split(' ');
    const sep = f.indexOf('-');
    if (f[4] === dir && sep > 0) return f[sep + 1] ?? null;
  }
  return null;
}

/**
 * The sandboxes' directory as a btrfs file system of its own (an image file in the data dir,
 * loop-mounted, quotas on): each sandbox's writable layer is a subvolume with a qgroup limit, so
 * a full sandbox gets EDQUOT while its neighbours and the node's own storage stay writable. The
 * image is sparse, sized `sizeGiB` (default: 80 % of the data dir's free space past `reserveBytes`,
 * what the node keeps for its own state, when first made).
 * A data dir that already holds sandboxes in a plain directory keeps it, without quotas.
 */
export async function openSandboxDisk(
  dataDir: string,
  o: { sizeGiB?: number; reserveBytes: number; log: (msg: string, meta?: unknown) => void },
): Promise<SandboxDisk> {
  const dir = join(dataDir, 'sandboxes');
  const image = join(dataDir, 'sandboxes.btrfs');
  const sizeMiB = async (): Promise<number> => {
    const st = await statfs(dir);
    return Math.floor((st.blocks * st.bsize) / 2 ** 20);
  };
  const plain = async (): Promise<SandboxDisk> => ({ dir, quotas: false, sizeMiB: await sizeMiB(), close: async () => undefined });
  let fs = await mountedAt(dir);
  if (fs === null) {
    const held = (await readdir(dir).catch(() => [] as string[])).length > 0;
    if (held) {
      o.log('sandbox disk quotas off: the sandboxes directory is not empty', { dir });
      return plain();
    }
    if (!existsSync(image)) {
      const st = await statfs(dataDir);
      const bytes = o.sizeGiB ? o.sizeGiB * 2 ** 30 : sandboxImageBytes(st.bavail * st.bsize, o.reserveBytes);
      await run('truncate', ['-s', String(bytes), image]);
      await run('mkfs.btrfs', [...sandboxFsMkfsArgs(bytes), image]);
    }
    await mkdir(dir, { recursive: true });
    // discard: space a sandbox frees goes back to the data dir's file system (the image is sparse).
    await run('mount', ['-o', 'loop,discard=async', image, dir]);
    fs = 'btrfs';
  }
  if (fs !== 'btrfs') {
    o.log('sandbox disk quotas off: the sandboxes directory is not btrfs', { dir, fs });
    return plain();
  }
  await run('btrfs', ['quota', 'enable', dir]);
  return {
    dir,
    quotas: true,
    sizeMiB: await sizeMiB(),
    async close(c) {
      if (c.keep) return;
      await run('umount', [dir]).catch(() => run('umount', ['-l', dir]));
    },
  };
}
