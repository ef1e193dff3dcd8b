import { stat, statfs } from 'node:fs/promises';
import { join } from 'node:path';
import { WarrenError } from '@warren/api';

/**
 * Room on the data dir's file system, which holds Warren's own state (the store, the layer
 * store) and the sandboxes' sparse btrfs image: what is free, less what that image may still
 * take (its size less what it holds), which belongs to the sandboxes.
 */
export interface DataDiskRoom {
  freeBytes: number;
  /** Space the sandboxes' image may still grow into. */
  promisedBytes: number;
  sizeBytes: number;
}

export async function dataDiskRoom(dataDir: string): Promise<DataDiskRoom> {
  const st = await statfs(dataDir);
  const image = await stat(join(dataDir, 'sandboxes.btrfs')).catch(() => null);
  const promisedBytes = image ? Math.max(0, image.size - image.blocks * 512) : 0;
  return { freeBytes: st.bavail * st.bsize, promisedBytes, sizeBytes: st.blocks * st.bsize };
}

/** What Warren keeps free for its own state unless told: 5 % of the disk, 256 MiB to 2 GiB. */
export function defaultReserveBytes(diskBytes: number): number {
  return Math.min(2 * 2 ** 30, Math.max(256 * 2 ** 20, Math.floor(diskBytes * 0.05)));
}

/**
 * mkfs.btrfs's arguments for the sandboxes' image of `bytes`: under 5 GiB, data and metadata in
 * mixed block groups (btrfs's advice for small file systems). Kept apart, the data of sandboxes
 * that filled a small image took every chunk: the metadata could not grow, writers near the end
 * crawled at 1 MB/s through the kernel's metadata reclaim (a transaction committed per try) for a
 * minute, and once they were deleted no sandbox could be made (ENOSPC on the subvolume) while
 * the emptied data chunks held the room.
 */
export function sandboxFsMkfsArgs(bytes: number): string[] {
  return bytes < 5 * 2 ** 30 ? ['-q', '--mixed', '-d', 'single', '-m', 'single'] : ['-q', '-m', 'single'];
}

/** The sandboxes' image, when made: 80 % of what is free past the reserve, at least 256 MiB. */
export function sandboxImageBytes(freeBytes: number, reserveBytes: number): number {
  return Math.max(256 * 2 ** 20, Math.floor(Math.max(0, freeBytes - reserveBytes) * 0.8));
}

/**
 * Refuses (resource_exhausted) what would write layers into the reserve: the store and the
 * layers already there must stay writable however full the disk gets.
 */
export function checkRoom(room: DataDiskRoom, reserveBytes: number, what: string): void {
  const left = room.freeBytes - room.promisedBytes;
  if (left < reserveBytes) {
    const mib = (n: number): number => Math.floor(n / 2 ** 20);
    throw new WarrenError(
      'resource_exhausted',
      `the node's data disk is full: ${mib(Math.max(0, left))} MiB free past what its sandboxes may use, and ${mib(reserveBytes)} MiB are kept for its own state; ${what} would not fit`,
      { freeMiB: mib(room.freeBytes), sandboxesMayUseMiB: mib(room.promisedBytes), reserveMiB: mib(reserveBytes) },
    );
  }
}
