import { unlinkSync } from 'node:fs';

/**
 * Removes a file at once (no trip through Node's thread pool: for the small files of a sandbox's
 * create and delete, on the node's own disks); one that is not there is fine.
 */
export function unlinkQuietly(path: string): void {
  try {
    unlinkSync(path);
  } catch {
    /* gone already, or never written */
  }
}
