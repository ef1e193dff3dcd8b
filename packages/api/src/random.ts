import { randomFillSync } from 'node:crypto';

/** Random bytes drawn 4 KiB at a time from the CSPRNG: one call per hundreds of ids, not one each. */
const pool = Buffer.alloc(4096);
let used = pool.length;

/**
 * `bytes` random bytes (at most 64) from the CSPRNG as hex or base64url, for ids made on hot paths
 * (a command's, a sandbox's): each byte of the pool is given out once. A `randomBytes` call a
 * command cost ~3 % of the server's CPU per session command.
 */
export function randomText(bytes: number, encoding: 'hex' | 'base64url'): string {
  if (!Number.isInteger(bytes) || bytes < 1 || bytes > 64) throw new RangeError(`randomText takes 1 to 64 bytes, not ${bytes}`);
  if (used + bytes > pool.length) {
    randomFillSync(pool);
    used = 0;
  }
  const s = pool.toString(encoding, used, used + bytes);
  used += bytes;
  return s;
}
