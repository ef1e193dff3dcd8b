import { randomFillSync } from 'node:crypto';

/** Random bytes drawn 4 KiB at a time (one call into the CSPRNG per 680 ids instead of one each). */
const pool = Buffer.alloc(4096);
let used = pool.length;

/** Sandbox ids sort by creation time, so the id doubles as a stable list cursor. */
export function newSandboxId(now = Date.now()): string {
  if (used + 6 > pool.length) {
    randomFillSync(pool);
    used = 0;
  }
  const hex = pool.toString('hex', used, used + 6);
  used += 6;
  return `sb_${now.toString(36).padStart(9, '0')}${hex}`;
}
